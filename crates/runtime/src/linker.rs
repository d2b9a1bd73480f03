//! Resolving imports by module and name: [`Linker`], defined once and shared by every thread,
//! and [`InstancePre`], a module whose imports were resolved and checked once, to instantiate
//! many times.
//!
//! A linker holds host functions independent of any store (they are made into a store's
//! functions when an instance imports them) and, optionally, externs of one store (exports of
//! instances registered with [`Linker::instance`]); using those with another store fails to
//! link.
//!
//! Resolving looks up every import by name. A linker remembers the import lists it resolved,
//! by digest ([`Artifact::imports_digest`](ephem_artifact::Artifact::imports_digest): module,
//! name, kind and type of each import, in order), so that a module whose imports were seen
//! before, the same module opened again or another one built against the same host, is
//! resolved with one lookup instead of one per import. Each thread also keeps copies of the
//! lists it used last, by linker and digest, and takes those without the linker's lock, so that
//! threads do not take turns at it on every instantiation. A linker is known there by an id
//! that no other linker, and no earlier state of the same one, has: defining anything gives it
//! a new one and forgets what was resolved.
//!
//! Resolving also checks: a host function's type and kind against the import's, once for
//! every instantiation of the `InstancePre`. An instantiation through it checks only what
//! could not be checked then, the linker's externs of one store, against the store it is given
//! (see `InstancePre::imports`).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use ephem_module::{ImportKind, ValType};

use crate::context::{AsContext, AsContextMut, raw_store};
use crate::func::HostFunc;
use crate::global::GlobalData;
use crate::instantiate::{Imports, check_import, instantiate, link_error};
use crate::load::ArtifactImage;
use crate::memory::LinearMemory;
use crate::shared::Shared;
use crate::store::StoreOpaque;
use crate::table::TableData;
use crate::{
    Caller, Engine, Error, Extern, Func, FuncType, Global, HostError, ImportRef, Instance,
    IntoFunc, Memory, Module, Table, Val,
};

/// What a name in a linker stands for.
#[derive(Clone)]
enum Definition {
    /// An extern of one store.
    Extern(Extern),
    /// A shared memory, which each instantiation gives its store a memory of.
    Shared(crate::SharedMemory),
    /// A host function, for any store of the linker's `T`: its index in the linker's `hosts`.
    Host(u32),
    /// A fresh zeroed memory, table or global of the import's type, made for each
    /// instantiation in its store (see [`Linker::define_unknown_imports_as_traps`]).
    Fresh,
}

/// Named definitions that instantiation draws imports from. `Send + Sync`: define it once and
/// share it between threads.
pub struct Linker<T> {
    engine: Engine,
    /// By module name, then name (looked up by `&str` without allocating). Seeded foldhash, as
    /// in the engine's type registry: names come from untrusted modules.
    defs: HashMap<String, HashMap<String, Definition, Hasher>, Hasher>,
    /// Every host function defined. Shared with the `InstancePre`s made from the linker, which
    /// point into it: one reference per instantiation, not one per import, and counted where
    /// each thread counts its own (a [`Shared`]).
    hosts: Shared<Hosts>,
    /// What the import lists each thread remembers were resolved by (see the module
    /// documentation).
    id: u64,
    /// Import lists resolved before, by digest, for threads that do not remember them; at most
    /// [`REMEMBERED`], emptied when full.
    resolved: Mutex<HashMap<[u8; 32], Arc<[Resolved]>, Hasher>>,
    allow_shadowing: bool,
    _data: PhantomData<fn() -> T>,
}

/// How many import lists a linker remembers for all threads: an embedder serves modules built
/// against a few hosts, so a handful is plenty; the bound keeps arbitrary modules from growing
/// it.
const REMEMBERED: usize = 64;

type Hasher = foldhash::fast::RandomState;

pub(crate) type Hosts = Vec<Arc<HostFunc>>;

impl<T> Clone for Linker<T> {
    fn clone(&self) -> Self {
        Linker {
            engine: self.engine.clone(),
            defs: self.defs.clone(),
            hosts: self.hosts.clone(),
            id: near::new_id(),
            resolved: Mutex::default(),
            allow_shadowing: self.allow_shadowing,
            _data: PhantomData,
        }
    }
}

impl<T: 'static> Linker<T> {
    /// An empty linker for modules of `engine`.
    pub fn new(engine: &Engine) -> Linker<T> {
        Linker {
            engine: engine.clone(),
            defs: HashMap::default(),
            hosts: Shared::new(Hosts::new()),
            id: near::new_id(),
            resolved: Mutex::default(),
            allow_shadowing: false,
            _data: PhantomData,
        }
    }

    /// The engine this linker is for.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether a definition may replace an earlier one of the same name (by default not: that
    /// is an error).
    pub fn allow_shadowing(&mut self, allow: bool) -> &mut Self {
        self.allow_shadowing = allow;
        self
    }

    fn insert(&mut self, module: &str, name: &str, def: Definition) -> Result<&mut Self, Error> {
        // What resolved before may resolve differently now.
        self.id = near::new_id();
        self.resolved
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let names = self.defs.entry(module.to_owned()).or_default();
        if !self.allow_shadowing && names.contains_key(name) {
            return Err(Error::Usage(format!(
                "`{module}`.`{name}` is already defined"
            )));
        }
        names.insert(name.to_owned(), def);
        Ok(self)
    }

    fn get_def(&self, module: &str, name: &str) -> Option<&Definition> {
        self.defs.get(module)?.get(name)
    }

    fn insert_host(
        &mut self,
        module: &str,
        name: &str,
        host: HostFunc,
    ) -> Result<&mut Self, Error> {
        let index = self.hosts.len() as u32;
        self.insert(module, name, Definition::Host(index))?;
        // Copies the list only while an `InstancePre` still shares the old one.
        Shared::make_mut(&mut self.hosts).push(Arc::new(host));
        Ok(self)
    }

    /// Defines `module`.`name` as a host function made from a Rust closure (see
    /// [`IntoFunc`]): `|a: i32, b: i64| -> f64`, or with a [`Caller`] first to reach the store's
    /// data and the calling instance's exports. A closure that returns `Err(e)` traps, and the
    /// trap carries `e`.
    pub fn func_wrap<P, R>(
        &mut self,
        module: &str,
        name: &str,
        f: impl IntoFunc<T, P, R>,
    ) -> Result<&mut Self, Error> {
        let host = f.into_host_func(&self.engine);
        self.insert_host(module, name, host)
    }

    /// Defines `module`.`name` as a host function of type `ty`, with arguments and results as
    /// [`Val`]s: `results` comes sized and set to zeros of the result types.
    pub fn func_new(
        &mut self,
        module: &str,
        name: &str,
        ty: FuncType,
        f: impl Fn(Caller<'_, T>, &[Val], &mut [Val]) -> Result<(), HostError> + Send + Sync + 'static,
    ) -> Result<&mut Self, Error> {
        let host = HostFunc::dynamic(&self.engine, ty, f);
        self.insert_host(module, name, host)
    }

    /// Defines `module`.`name` as `item`, an extern of `store`.
    pub fn define(
        &mut self,
        store: impl AsContext<Data = T>,
        module: &str,
        name: &str,
        item: impl Into<Extern>,
    ) -> Result<&mut Self, Error> {
        if !store.as_context().engine().same(&self.engine) {
            return Err(Error::Usage(
                "the store belongs to another engine than the linker".into(),
            ));
        }
        let def = match item.into() {
            Extern::SharedMemory(m) => Definition::Shared(m),
            other => Definition::Extern(other),
        };
        self.insert(module, name, def)
    }

    /// Defines every export of `instance` under the module name `module`.
    pub fn instance(
        &mut self,
        mut store: impl AsContextMut<Data = T>,
        module: &str,
        instance: Instance,
    ) -> Result<&mut Self, Error> {
        for (name, ext) in instance.exports(&mut store) {
            self.define(&store, module, &name, ext)?;
        }
        Ok(self)
    }

    /// Instantiates `wasm` in `store` and defines its exports under the module name `module`.
    pub fn module(
        &mut self,
        mut store: impl AsContextMut<Data = T>,
        module: &str,
        wasm: &Module,
    ) -> Result<&mut Self, Error> {
        let instance = self.instantiate(&mut store, wasm)?;
        self.instance(store, module, instance)
    }

    /// Defines every import of `module` that is not defined yet: functions as host functions
    /// that trap with a message naming the import, and memories, tables and globals (which
    /// cannot trap) as fresh zeroed ones of the declared types, made for each instantiation in
    /// its store. What a host that gives each invocation its own state wants for imports it
    /// does not provide; a fresh memory comes from a pool slot that may already hold the
    /// module's image for it.
    pub fn define_unknown_imports_as_traps(&mut self, module: &Module) -> Result<&mut Self, Error> {
        for import in module.imports() {
            if self.get_def(import.module, import.name).is_some() {
                continue;
            }
            let def = match import.kind {
                ImportKind::Func(t) => {
                    let ty = module.inner.canonical_func(t);
                    let what = format!("`{}`.`{}`", import.module, import.name);
                    let stub = HostFunc::dynamic::<T>(&self.engine, ty, move |_, _, _| {
                        Err(format!("unprovided import {what} was called").into())
                    });
                    self.insert_host(import.module, import.name, stub)?;
                    continue;
                }
                _ => Definition::Fresh,
            };
            self.insert(import.module, import.name, def)?;
        }
        Ok(self)
    }

    /// The definition of `module`.`name`, as an extern of `store` (a host function is added to
    /// the store; a fresh memory, table or global exists only per instantiation: `None`).
    pub fn get(
        &self,
        mut store: impl AsContextMut<Data = T>,
        module: &str,
        name: &str,
    ) -> Option<Extern> {
        match self.get_def(module, name)? {
            Definition::Extern(e) => Some(e.clone()),
            Definition::Shared(m) => Some(Extern::SharedMemory(m.clone())),
            Definition::Host(h) => Some(Extern::Func(Func::host(
                store.as_context_mut().opaque(),
                self.hosts[*h as usize].clone(),
            ))),
            Definition::Fresh => None,
        }
    }

    /// Instantiates `module` in `store` with its imports taken from this linker.
    pub fn instantiate(
        &self,
        store: impl AsContextMut<Data = T>,
        module: &Module,
    ) -> Result<Instance, Error> {
        self.instantiate_pre(module)?.instantiate(store)
    }

    /// Resolves and type-checks `module`'s imports once, for many instantiations.
    pub fn instantiate_pre(&self, module: &Module) -> Result<InstancePre<T>, Error> {
        if !module.engine().same(&self.engine) {
            return Err(Error::Usage(
                "the module belongs to another engine than the linker".into(),
            ));
        }
        let digest = module.artifact().imports_digest();
        let items = match near::get(self.id, digest) {
            Some(items) => items,
            None => {
                let remembered = self.lock_resolved().get(digest).cloned();
                let shared = match remembered {
                    Some(items) => items,
                    None => {
                        let items = self.resolve(module)?;
                        let mut resolved = self.lock_resolved();
                        if resolved.len() >= REMEMBERED {
                            resolved.clear();
                        }
                        resolved.insert(*digest, items.clone());
                        items
                    }
                };
                // A copy of the thread's own, whose reference count no other thread writes.
                let items: Arc<[Resolved]> = Arc::from(&shared[..]);
                near::put(self.id, *digest, items.clone());
                items
            }
        };
        Ok(InstancePre {
            module: module.clone(),
            items,
            keep: self.hosts.borrow(),
            _data: PhantomData,
        })
    }

    fn lock_resolved(&self) -> MutexGuard<'_, HashMap<[u8; 32], Arc<[Resolved]>, Hasher>> {
        self.resolved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks up and type-checks each of `module`'s imports.
    fn resolve(&self, module: &Module) -> Result<Arc<[Resolved]>, Error> {
        let mut items = Vec::with_capacity(module.artifact().info().imports.len());
        let mut unknown = Vec::new();
        for import in module.imports() {
            let Some(def) = self.get_def(import.module, import.name) else {
                unknown.push(describe(module, &import));
                continue;
            };
            // A host function is checked here, once for every instantiation (each store gets
            // it from this one definition); an extern, at each instantiation, against the
            // store it is used with; a fresh one is made of the import's type.
            if let Definition::Host(h) = def {
                let h = &self.hosts[*h as usize];
                match &import.kind {
                    ImportKind::Func(t) if h.type_id == module.type_id(*t) => {}
                    ImportKind::Func(t) => {
                        let expected = module.inner.canonical_func(*t);
                        let why = format!("expected {expected}, got {}", h.ty);
                        return Err(link_error(&import, &why));
                    }
                    _ => {
                        let expected = module.import_type(&import);
                        let why = format!("expected {expected}, got a host function {}", h.ty);
                        return Err(link_error(&import, &why));
                    }
                }
            }
            if let (ImportKind::Func(_), Definition::Fresh) = (&import.kind, def) {
                unknown.push(describe(module, &import));
                continue;
            }
            items.push(match def {
                Definition::Extern(e) => Resolved::Extern(e.clone()),
                Definition::Shared(m) => Resolved::Shared(m.clone()),
                Definition::Host(h) => {
                    Resolved::Host(HostRef(NonNull::from(&*self.hosts[*h as usize])))
                }
                Definition::Fresh => Resolved::Fresh,
            });
        }
        if !unknown.is_empty() {
            return Err(Error::Link(format!(
                "unknown import{} {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", ")
            )));
        }
        Ok(items.into())
    }
}

/// An import as an `InstancePre` resolved it.
#[derive(Clone)]
enum Resolved {
    Extern(Extern),
    Shared(crate::SharedMemory),
    Host(HostRef),
    Fresh,
}

/// A host function of the linker's list, which the `InstancePre` keeps.
#[derive(Clone, Copy)]
struct HostRef(NonNull<HostFunc>);

// SAFETY: a shared reference to a `HostFunc`, which is `Sync` (its body is `Send + Sync`).
unsafe impl Send for HostRef {}
// SAFETY: sharing a `HostRef` shares only the address of a `HostFunc`, which is `Sync`.
unsafe impl Sync for HostRef {}

/// The import lists each thread resolved last (see the module documentation).
mod near {
    use std::cell::RefCell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Resolved;

    /// Import lists a thread remembers: an embedder serves modules built against a few hosts,
    /// so a handful is plenty; the bound keeps arbitrary modules from growing it.
    const PER_THREAD: usize = 16;

    /// `(linker id, digest, items)`, least recently resolved first. The items of a linker that
    /// is gone point at host functions that may be gone too: they are never used, since no
    /// linker has that id any more.
    type Remembered = Vec<(u64, [u8; 32], Arc<[Resolved]>)>;

    thread_local! {
        static NEAR: RefCell<Remembered> = const { RefCell::new(Vec::new()) };
    }

    /// An id that no linker has had (see the module documentation).
    pub(super) fn new_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// What linker `id` resolved the import list `digest` to on this thread.
    pub(super) fn get(id: u64, digest: &[u8; 32]) -> Option<Arc<[Resolved]>> {
        NEAR.try_with(|near| {
            let near = near.borrow();
            let found = near.iter().rev().find(|(i, d, _)| *i == id && d == digest);
            found.map(|(_, _, items)| items.clone())
        })
        .ok()
        .flatten()
    }

    /// Remembers `items` as what linker `id` resolved `digest` to.
    pub(super) fn put(id: u64, digest: [u8; 32], items: Arc<[Resolved]>) {
        let _ = NEAR.try_with(|near| {
            let mut near = near.borrow_mut();
            if near.len() >= PER_THREAD {
                near.remove(0);
            }
            near.push((id, digest, items));
        });
    }
}

/// `module`.`name` and its type, for messages.
fn describe(module: &Module, import: &ImportRef<'_>) -> String {
    format!(
        "`{}`.`{}` {}",
        import.module,
        import.name,
        module.import_type(import)
    )
}

/// A module whose imports a [`Linker`] resolved and checked: instantiating it looks nothing up.
/// `Send + Sync`, cheap to clone.
pub struct InstancePre<T> {
    module: Module,
    items: Arc<[Resolved]>,
    /// The linker's host functions, which `items` point into: what a store keeps alive for the
    /// host functions it takes from them.
    keep: Shared<Hosts>,
    _data: PhantomData<fn() -> T>,
}

impl<T> Clone for InstancePre<T> {
    fn clone(&self) -> Self {
        InstancePre {
            module: self.module.clone(),
            items: self.items.clone(),
            keep: self.keep.clone(),
            _data: PhantomData,
        }
    }
}

impl<T: 'static> InstancePre<T> {
    /// The module.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// A new instance in `store`.
    pub fn instantiate(&self, mut store: impl AsContextMut<Data = T>) -> Result<Instance, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: derived from the exclusive borrow, which lasts for the call.
        unsafe {
            let imports = self.imports(raw)?;
            instantiate(raw, &self.module, Imports::Checked(&imports), None)
        }
    }

    /// As [`InstancePre::instantiate`], and reports how long each part took: the measurement
    /// seam of the fresh-path benchmark (see [`Instance::new_timed`]).
    pub fn instantiate_timed(
        &self,
        mut store: impl AsContextMut<Data = T>,
    ) -> Result<(Instance, crate::InstantiateTimings), Error> {
        let mut timings = crate::InstantiateTimings::default();
        let raw = raw_store(&mut store);
        // SAFETY: derived from the exclusive borrow, which lasts for the call.
        let instance = unsafe {
            let imports = self.imports(raw)?;
            let imports = Imports::Checked(&imports);
            instantiate(raw, &self.module, imports, Some(&mut timings))?
        };
        Ok((instance, timings))
    }

    /// The imports as externs of `raw`'s store, checked: host functions added to it, fresh
    /// state made in it, and the linker's externs checked against it.
    ///
    /// The linker checked its host functions' types when it resolved them, and a fresh
    /// memory, table or global is made of its import's type in this very store: neither is
    /// checked again, and instantiation takes the list as it is. An extern is checked here:
    /// it belongs to one store, and only now is it known which store it is used with. That it
    /// belongs to this store is what keeps funcrefs sound (a function of another store could
    /// be gone while this one still calls it; see `store`), so that check stays.
    ///
    /// # Safety
    /// `raw` is derived as [`raw_store`] derives it, from a borrow that lasts for the call.
    unsafe fn imports(&self, raw: *mut StoreOpaque) -> Result<Vec<Extern>, Error> {
        // SAFETY: per the contract; this reference ends before anything below derives one.
        let store = unsafe { &mut *raw };
        store.host_funcs.reserve(self.items.len());
        store.keep(&self.keep);
        self.module
            .imports()
            .zip(self.items.iter())
            .map(|(import, def)| {
                Ok(match def {
                    Resolved::Extern(e) => {
                        // SAFETY: per the contract; a shared reference for the check only.
                        check_import(unsafe { &*raw }, &self.module, &import, e)?;
                        e.clone()
                    }
                    Resolved::Shared(m) => {
                        // SAFETY: per the contract; no reference into the store is alive.
                        let memory = Extern::Memory(unsafe { Memory::of_shared_in(raw, m)? });
                        // SAFETY: per the contract; a shared reference for the check only.
                        check_import(unsafe { &*raw }, &self.module, &import, &memory)?;
                        memory
                    }
                    Resolved::Host(h) => {
                        // SAFETY: per the contract, with a reference for this push only;
                        // `self.keep`, which the store now keeps, holds `h`.
                        let stored = unsafe { (*raw).push_kept_host_func(h.0) };
                        Extern::Func(Func::stored_host(stored))
                    }
                    // SAFETY: per the contract; no reference into the store is alive.
                    Resolved::Fresh => unsafe { fresh(raw, &self.module, &import)? },
                })
            })
            .collect()
    }
}

/// A fresh memory (from the engine's pool, preferably a slot that has the module's image for
/// it), table or global (zero) of a non-function import's type, in `store`, if its limiter
/// admits it.
///
/// # Safety
/// `store` is derived as [`raw_store`] derives it, and no reference into the store is alive.
unsafe fn fresh(
    store: *mut StoreOpaque,
    module: &Module,
    import: &ImportRef<'_>,
) -> Result<Extern, Error> {
    let no_default = |ty: ValType| {
        Err(link_error(
            import,
            &format!("a fresh one would need a value of {ty}, which has no default"),
        ))
    };
    Ok(match &import.kind {
        ImportKind::Func(_) => unreachable!("functions are never fresh"),
        ImportKind::Table(ty) if !ty.elem.defaultable() => return no_default(ty.elem),
        ImportKind::Global(ty) if !ty.ty.defaultable() => return no_default(ty.ty),
        ImportKind::Memory(ty) => {
            // SAFETY: per the contract.
            unsafe { StoreOpaque::admit_memory(store, *ty)? };
            let image = ArtifactImage::of(module.artifact(), import.index);
            let loose = module.artifact().info().checks_memory(import.index);
            let memory = LinearMemory::pooled(module.engine(), *ty, image.as_ref(), loose)?;
            // SAFETY: per the contract; the limiter is not asked while this reference lives.
            Extern::Memory(Memory(unsafe { &mut *store }.push_memory(memory)))
        }
        ImportKind::Table(ty) => {
            // SAFETY: per the contract.
            unsafe { StoreOpaque::admit_table(store, *ty)? };
            let table = TableData::new(*ty, 0)?;
            // SAFETY: per the contract; the limiter is not asked while this reference lives.
            Extern::Table(Table(unsafe { &mut *store }.push_table(table)))
        }
        ImportKind::Global(ty) => {
            let global = GlobalData::new(*ty, 0);
            // SAFETY: per the contract.
            Extern::Global(Global(unsafe { &mut *store }.push_global(global)))
        }
        ImportKind::Tag(t) => {
            let type_id = module.type_id(*t);
            // SAFETY: per the contract.
            Extern::Tag(crate::Tag(unsafe { &mut *store }.push_tag(type_id)))
        }
    })
}
