//! Loading a compiled module and instantiating it.
//!
//! A [`Module`] is an open [`Artifact`]: from a file, or made in memory from a freshly compiled
//! module (the same format in a memory file), so there is one loading path.
//!
//! Loading copies the module's text into a slot of the engine's code pool and publishes it, or,
//! for texts over the engine's threshold, maps it read+execute straight from the artifact file;
//! either way it is registered with the module as tag, so a trap can be traced back to its trap
//! table. Memories the module defines come from the engine's memory pool; they and imported
//! memories take the artifact's images (see [`Memory`] on untouched memories). Instantiating
//! builds the vmctx (see `ephem_module::vmctx`), then applies element segments, data segments
//! and the start function, in the order the specification gives. Nothing is shared between
//! instances but what they import from each other.
//!
//! An instance lives in its [`Store`](crate::Store) (see `store`): its handle is an index, and
//! its memories, tables and globals are the store's, by index. A failed instantiation leaves
//! what it made in the store too, which frees it with everything else: element segments
//! applied before the failure may have put this instance's functions into imported tables.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;

use ephem_artifact::{Artifact, ArtifactKey};
use ephem_code_memory::{Acquired, LoadedCode, TextId};
use ephem_module::{
    ArchivedConstExpr, ArchivedSegmentMode, Builtin, CompiledModule, ConstExpr, ConstOp,
    EntityIndex, ImportKind, Reloc, SegmentMode, TrapKind, ValRaw, VmFuncRef, VmOffsets, native,
};

use crate::limits::Growing;
use crate::memory::{Claim, ImageSource, LinearMemory};
use crate::signals::{CodeSite, TrapSite};
use crate::store::{AsContext, AsContextMut, StoreInner, StoreOpaque, Stored};
use crate::table::{GlobalData, LazyInit, TableData};
use crate::{
    Engine, Error, Extern, Func, FuncType, Global, GlobalType, Memory, MemoryType, Table,
    TableType, Trap, TypedFunc, WasmParams, WasmResults,
};

/// A compiled module ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    engine: Engine,
    artifact: Artifact,
    offsets: VmOffsets,
    type_ids: Arc<[u32]>,
}

impl ModuleInner {
    /// The vmctx funcref slot of function `func`, which is imported or eager: the only
    /// functions the host takes a funcref of (the metadata checks hold every export, kept
    /// element item, global initialiser and start function to that).
    fn funcref_slot(&self, func: u32) -> u32 {
        let imported = self.artifact.info().imported_funcs.to_native();
        let eager = self.artifact.eager();
        VmOffsets::eager_slot(imported, eager, func).expect("an eager function")
    }

    /// The funcref of this module's function whose code starts at text offset `code` and has
    /// type `ty`, for the instance whose text is at `text` and vmctx at `vm`.
    fn funcref(&self, text: *const u8, vm: *mut u8, code: u32, ty: u32) -> VmFuncRef {
        let trampoline = self.artifact.trampolines()[ty as usize].to_native();
        VmFuncRef {
            code: text.wrapping_add(code as usize),
            vmctx: vm,
            trampoline: text.wrapping_add(trampoline as usize),
            type_id: self.type_ids[ty as usize],
        }
    }
}

impl Module {
    /// Prepares a freshly compiled module for instantiation with `engine` (through an artifact
    /// in a memory file: see the module documentation).
    pub fn new(engine: &Engine, compiled: &CompiledModule) -> Result<Module, Error> {
        Ok(Module::from_artifact(
            engine,
            Artifact::from_compiled(compiled)?,
        ))
    }

    /// Opens the artifact at `path`, which must be sealed with `key` (see [`Artifact::open`]
    /// for what is checked).
    pub fn from_file(
        engine: &Engine,
        path: &std::path::Path,
        key: &ArtifactKey,
    ) -> Result<Module, Error> {
        Ok(Module::from_artifact(engine, Artifact::open(path, key)?))
    }

    /// Opens the artifact at `path` without checking its seal (its metadata is checked).
    ///
    /// # Safety
    /// As [`Artifact::open_unverified`]: the caller vouches for the file's machine code.
    pub unsafe fn from_file_unverified(
        engine: &Engine,
        path: &std::path::Path,
    ) -> Result<Module, Error> {
        // SAFETY: per the contract.
        Ok(Module::from_artifact(engine, unsafe {
            Artifact::open_unverified(path)?
        }))
    }

    /// Prepares an open artifact for instantiation with `engine`.
    pub fn from_artifact(engine: &Engine, artifact: Artifact) -> Module {
        let info = artifact.info();
        let type_ids = engine.type_ids(&artifact);
        let offsets = VmOffsets::for_archived(info, artifact.funcref_slots());
        Module {
            inner: Arc::new(ModuleInner {
                engine: engine.borrow(),
                artifact,
                offsets,
                type_ids,
            }),
        }
    }

    /// The engine the module was loaded for.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The open artifact the module runs from.
    pub fn artifact(&self) -> &Artifact {
        &self.inner.artifact
    }

    /// Whether this module's start function ran when it was compiled, so that instantiation
    /// starts from the state it left instead of running it (see the `ephem` crate's
    /// `snapshot`).
    pub fn start_ran_at_compile(&self) -> bool {
        self.inner.artifact.info().snapshot.is_some()
    }

    /// The module's imports, in order.
    pub fn imports(&self) -> impl Iterator<Item = ImportRef<'_>> {
        // Imports come first in each index space: count them per kind.
        let mut counts = [0u32; 4];
        self.inner.artifact.info().imports.iter().map(move |i| {
            let kind: ImportKind = native(&i.kind);
            let count = &mut counts[match kind {
                ImportKind::Func(_) => 0,
                ImportKind::Memory(_) => 1,
                ImportKind::Table(_) => 2,
                ImportKind::Global(_) => 3,
            }];
            *count += 1;
            ImportRef {
                module: i.module.as_str(),
                name: i.name.as_str(),
                kind,
                index: *count - 1,
            }
        })
    }
}

impl Module {
    /// The module's exports, in order.
    pub fn exports(&self) -> impl Iterator<Item = ExportRef<'_>> {
        let info = self.inner.artifact.info();
        info.exports.iter().map(move |e| ExportRef {
            name: e.name.as_str(),
            ty: match native(&e.index) {
                EntityIndex::Func(i) => ExternType::Func(
                    info.types[info.funcs[i as usize].to_native() as usize].native(),
                ),
                EntityIndex::Memory(i) => ExternType::Memory(native(&info.memories[i as usize])),
                EntityIndex::Table(i) => ExternType::Table(native(&info.tables[i as usize])),
                EntityIndex::Global(i) => ExternType::Global(native(&info.globals[i as usize])),
            },
        })
    }

    /// The type of import `import` (a function's by value, not by index).
    pub fn import_type(&self, import: &ImportRef<'_>) -> ExternType {
        match import.kind {
            ImportKind::Func(t) => {
                ExternType::Func(self.inner.artifact.info().types[t as usize].native())
            }
            ImportKind::Memory(ty) => ExternType::Memory(ty),
            ImportKind::Table(ty) => ExternType::Table(ty),
            ImportKind::Global(ty) => ExternType::Global(ty),
        }
    }

    pub(crate) fn type_id(&self, type_index: u32) -> u32 {
        self.inner.type_ids[type_index as usize]
    }
}

/// One export of a module: its name and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportRef<'a> {
    /// The export's name.
    pub name: &'a str,
    /// What it is.
    pub ty: ExternType,
}

/// The type of an import or export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExternType {
    /// A function of this type.
    Func(FuncType),
    /// A linear memory of these limits.
    Memory(MemoryType),
    /// A table of these limits and element type.
    Table(TableType),
    /// A global of this type.
    Global(GlobalType),
}

/// As the text format writes types: `(func (param i32) (result i64))`, `(memory 1 2)`.
impl std::fmt::Display for ExternType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn name(t: &crate::ValType) -> &'static str {
            match t {
                crate::ValType::I32 => "i32",
                crate::ValType::I64 => "i64",
                crate::ValType::F32 => "f32",
                crate::ValType::F64 => "f64",
                crate::ValType::FuncRef => "funcref",
                crate::ValType::ExternRef => "externref",
                crate::ValType::V128 => "v128",
            }
        }
        let limits = |min: u32, max: Option<u32>| match max {
            Some(max) => format!("{min} {max}"),
            None => min.to_string(),
        };
        match self {
            ExternType::Func(ty) => {
                write!(f, "(func")?;
                for (what, list) in [("param", &ty.params), ("result", &ty.results)] {
                    if !list.is_empty() {
                        let names: Vec<_> = list.iter().map(name).collect();
                        write!(f, " ({what} {})", names.join(" "))?;
                    }
                }
                write!(f, ")")
            }
            ExternType::Memory(ty) => write!(f, "(memory {})", limits(ty.min, ty.max)),
            ExternType::Table(ty) => {
                write!(f, "(table {} {})", limits(ty.min, ty.max), name(&ty.elem))
            }
            ExternType::Global(ty) if ty.mutable => write!(f, "(global (mut {}))", name(&ty.ty)),
            ExternType::Global(ty) => write!(f, "(global {})", name(&ty.ty)),
        }
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = self.inner.artifact.info();
        f.debug_struct("Module")
            .field("functions", &info.funcs.len())
            .field("imports", &info.imports.len())
            .field("exports", &info.exports.len())
            .field("text_bytes", &self.inner.artifact.text_len())
            .finish()
    }
}

/// One import of a module: what it is called and what it must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportRef<'a> {
    /// The module name the import names.
    pub module: &'a str,
    /// The name within that module.
    pub name: &'a str,
    /// What is imported (a function by its type index).
    pub kind: ImportKind,
    /// What the import is in the module's index space of its kind.
    pub index: u32,
}

/// See [`Instance::defined_state`]: memories' bytes, and globals' raw values.
#[doc(hidden)]
pub struct DefinedState {
    pub memories: Vec<Vec<u8>>,
    pub globals: Vec<ValRaw>,
}

/// Where instantiation spent its time ([`Instance::new_timed`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct InstantiateTimings {
    /// Checking the imports against the module's types.
    pub check_imports: std::time::Duration,
    /// Copying (or mapping) the text, relocating, publishing.
    pub load_code: std::time::Duration,
    /// Making the defined memories: pooled slots, images.
    pub memories: std::time::Duration,
    /// Everything else: tables, globals, the vmctx, segments and the start function.
    pub initialise: std::time::Duration,
}

/// An instance of a module: a handle, valid with the store it was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instance(pub(crate) Stored);

/// An instance's state, owned by its store.
pub(crate) struct InstanceData {
    /// Dropped first: the code must be gone from the registry before its module can go.
    code: LoadedCode,
    vmctx: VmCtx,
    pub(crate) handle: Instance,
    /// The store that owns this instance, for builtins (its address is fixed).
    store: *mut StoreOpaque,
    module: Module,
    /// Store indices of the instance's memories, tables and globals, imported ones first.
    memories: Vec<u32>,
    tables: Vec<u32>,
    globals: Vec<u32>,
    dropped_datas: RefCell<Vec<bool>>,
    dropped_elems: RefCell<Vec<bool>>,
}

/// The vmctx bytes, 16-aligned, followed by the cells of the globals the instance defines
/// (which the vmctx points at, as at imported ones).
struct VmCtx(Box<[std::mem::MaybeUninit<ValRaw>]>);

impl VmCtx {
    /// A vmctx of `size` bytes, the first `zeroed` of them zeros, and `globals` cells; the rest
    /// (lazy funcref slots) is written before anything reads it, and each global's cell when
    /// it is made, so zeroing them would only cost time.
    fn new(size: u32, zeroed: u32, globals: usize) -> VmCtx {
        let words = (size as usize).div_ceil(16);
        let mut words = Box::new_uninit_slice((words + globals).max(1));
        let zeroed = (zeroed as usize).div_ceil(16).min(words.len());
        words[..zeroed].fill(std::mem::MaybeUninit::new(0));
        VmCtx(words)
    }
    fn ptr(&self) -> *mut u8 {
        self.0.as_ptr() as *mut u8
    }
    /// The cell of defined global `k` (of the `globals` made with the vmctx of `size` bytes).
    fn global_cell(&self, size: u32, k: usize) -> *mut ValRaw {
        let at = (size as usize).div_ceil(16) + k;
        assert!(at < self.0.len(), "a cell of this vmctx");
        self.0.as_ptr().wrapping_add(at) as *mut ValRaw
    }
    /// # Safety
    /// `offset` must be a field of this vmctx of type `T` (per `VmOffsets`).
    unsafe fn write<T>(&self, offset: u32, value: T) {
        // SAFETY: per the contract, in bounds and aligned; the vmctx is plain memory that only
        // this instance's code and builtins access, on one thread.
        unsafe { self.ptr().add(offset as usize).cast::<T>().write(value) }
    }
}

/// The builtin table every vmctx points at, in `Builtin` order.
struct Builtins([*const (); Builtin::COUNT]);
// SAFETY: immutable function addresses.
unsafe impl Sync for Builtins {}

/// `i32` parameters and results of builtins are `u32` here, `i64` ones `u64`.
macro_rules! builtin_rust_type {
    (i32) => {
        u32
    };
    (i64) => {
        u64
    };
}

/// The table, from the one list (`ephem_module::for_each_builtin`): each entry is the function
/// of the same name below, cast to the signature the list gives, so a function that disagrees
/// with its entry does not compile.
macro_rules! builtin_table {
    ($( $(#[$doc:meta])* $variant:ident $name:ident ( $($arg:ident : $ty:ident),* ) $(-> $ret:ident)? ; )*) => {
        static BUILTINS: Builtins = Builtins([
            $( $name as unsafe extern "C" fn(*mut u8 $(, builtin_rust_type!($ty))*) $(-> builtin_rust_type!($ret))? as *const (), )*
        ]);
    };
}

use crate::arch::ephem_raise as raise;

ephem_module::for_each_builtin!(builtin_table);

fn link_error(import: &ImportRef<'_>, why: &str) -> Error {
    Error::Link(format!(
        "incompatible import type for `{}`.`{}`: {why}",
        import.module, import.name
    ))
}

fn limits_match(actual_min: u32, actual_max: Option<u32>, min: u32, max: Option<u32>) -> bool {
    actual_min >= min
        && match max {
            None => true,
            Some(m) => actual_max.is_some_and(|am| am <= m),
        }
}

/// A memory claimed for its image ([`LinearMemory::claim`]) and not yet given it: (store
/// index, what the claim found, index of the memory in the module).
type Claimed = Vec<(u32, Claim, u32)>;

/// Gives claimed memories back untouched when instantiation fails before their images.
fn unclaim(store: &StoreOpaque, claimed: &mut Claimed) {
    for (memory, claim, _) in claimed.drain(..) {
        store.memories[memory as usize].unclaim(claim);
    }
}

/// The raw pointer to a store's opaque part, derived from an exclusive borrow of all of it
/// (host functions called while wasm runs cast it back to the whole `StoreInner<T>`).
pub(crate) fn raw_store<S: AsContextMut + ?Sized>(store: &mut S) -> *mut StoreOpaque {
    store.as_context_mut().0 as *mut StoreInner<S::Data> as *mut StoreOpaque
}

impl Instance {
    /// Loads `module`'s code and instantiates it in `store` with `imports` (in the module's
    /// import order, all of this store).
    pub fn new(
        mut store: impl AsContextMut,
        module: &Module,
        imports: &[Extern],
    ) -> Result<Instance, Error> {
        // SAFETY: derived from the exclusive borrow, which lasts for the call.
        unsafe { instantiate(raw_store(&mut store), module, imports, None) }
    }

    /// As [`Instance::new`], and reports how long each part took: the measurement seam of the
    /// fresh-path benchmark.
    pub fn new_timed(
        mut store: impl AsContextMut,
        module: &Module,
        imports: &[Extern],
    ) -> Result<(Instance, InstantiateTimings), Error> {
        let mut timings = InstantiateTimings::default();
        // SAFETY: as above.
        let instance =
            unsafe { instantiate(raw_store(&mut store), module, imports, Some(&mut timings))? };
        Ok((instance, timings))
    }

    fn data<'a>(&self, store: &'a StoreOpaque) -> &'a InstanceData {
        store.instance(self.0)
    }

    /// Every defined memory's bytes and every defined global's value, in module order: what a
    /// start function left, for the compile-time snapshot (the `ephem` crate's `snapshot`).
    #[doc(hidden)]
    pub fn defined_state(&self, store: impl AsContext) -> DefinedState {
        let store = store.as_context();
        let store = store.opaque();
        let inner = self.data(store);
        let info = inner.module.inner.artifact.info();
        let memories = inner.memories[info.imported_memories.to_native() as usize..]
            .iter()
            // SAFETY: no wasm runs while the store is borrowed; the bytes are copied out.
            .map(|&m| unsafe { store.memories[m as usize].bytes_to_read() }.to_vec())
            .collect();
        let globals = inner.globals[info.imported_globals.to_native() as usize..]
            .iter()
            .map(|&g| store.globals[g as usize].get())
            .collect();
        DefinedState { memories, globals }
    }

    /// The export named `name`.
    pub fn get_export(&self, mut store: impl AsContextMut, name: &str) -> Option<Extern> {
        let mut ctx = store.as_context_mut();
        let store = ctx.opaque();
        let data = self.data(store);
        let info = data.module.inner.artifact.info();
        let e = info.exports.iter().find(|e| e.name == name)?;
        Some(data.export(store, native(&e.index)))
    }

    /// Every export, in the module's order.
    pub fn exports(&self, mut store: impl AsContextMut) -> Vec<(String, Extern)> {
        let mut ctx = store.as_context_mut();
        let store = ctx.opaque();
        let data = self.data(store);
        let info = data.module.inner.artifact.info();
        info.exports
            .iter()
            .map(|e| (e.name.to_string(), data.export(store, native(&e.index))))
            .collect()
    }

    /// The exported function `name`.
    pub fn get_func(&self, store: impl AsContextMut, name: &str) -> Option<Func> {
        self.get_export(store, name)?.into_func()
    }

    /// The exported function `name`, typed (see [`Func::typed`]).
    pub fn get_typed_func<P: WasmParams, R: WasmResults>(
        &self,
        mut store: impl AsContextMut,
        name: &str,
    ) -> Result<TypedFunc<P, R>, Error> {
        let func = self
            .get_func(&mut store, name)
            .ok_or_else(|| Error::Usage(format!("no exported function named `{name}`")))?;
        func.typed(&store)
    }

    /// The exported memory `name`.
    pub fn get_memory(&self, store: impl AsContextMut, name: &str) -> Option<Memory> {
        self.get_export(store, name)?.into_memory()
    }

    /// The exported table `name`.
    pub fn get_table(&self, store: impl AsContextMut, name: &str) -> Option<Table> {
        self.get_export(store, name)?.into_table()
    }

    /// The exported global `name`.
    pub fn get_global(&self, store: impl AsContextMut, name: &str) -> Option<Global> {
        self.get_export(store, name)?.into_global()
    }

    /// The module this is an instance of.
    pub fn module<'a, S: AsContext + ?Sized>(&self, store: &'a S) -> &'a Module {
        let ctx = store.as_context();
        let data: *const InstanceData = self.data(ctx.opaque());
        // SAFETY: the instance lives as long as the store `store` borrows.
        unsafe { &(*data).module }
    }
}

/// Instantiates `module` in `store` with `imports`; see [`Instance::new`].
///
/// # Safety
/// `store` must be derived from an exclusive borrow of the whole store that lasts for the call.
pub(crate) unsafe fn instantiate(
    store_ptr: *mut StoreOpaque,
    module: &Module,
    imports: &[Extern],
    mut timings: Option<&mut InstantiateTimings>,
) -> Result<Instance, Error> {
    let mut clock = timings.as_ref().map(|_| std::time::Instant::now());
    let mut lap = |field: fn(&mut InstantiateTimings) -> &mut std::time::Duration| {
        if let (Some(t), Some(c)) = (timings.as_deref_mut(), clock.as_mut()) {
            let now = std::time::Instant::now();
            *field(t) = now - *c;
            *c = now;
        }
    };
    // SAFETY: per the contract; this reference ends before the start function runs.
    let store = unsafe { &mut *store_ptr };
    let m = &*module.inner;
    if !m.engine.same(store.engine()) {
        return Err(Error::Usage(
            "the module belongs to another engine than the store".into(),
        ));
    }
    let artifact = &m.artifact;
    let info = artifact.info();
    if imports.len() != info.imports.len() {
        return Err(Error::Link(format!(
            "expected {} imports, got {}",
            info.imports.len(),
            imports.len()
        )));
    }

    // Check imports before spending anything on them.
    let mut funcs = Vec::with_capacity(info.imported_funcs.to_native() as usize);
    let mut memories = Vec::with_capacity(info.memories.len());
    let mut tables = Vec::with_capacity(info.tables.len());
    let mut globals = Vec::with_capacity(info.globals.len());
    for (import, ext) in module.imports().zip(imports) {
        let (owner, index) = match *ext {
            Extern::Func(f) => (f.store_id(), 0),
            Extern::Memory(Memory(s)) | Extern::Table(Table(s)) | Extern::Global(Global(s)) => {
                (s.store, s.index)
            }
        };
        if owner != store.id {
            return Err(link_error(&import, "it belongs to another store"));
        }
        match (&import.kind, ext) {
            (ImportKind::Func(t), Extern::Func(f)) => {
                if f.type_id(store) != m.type_ids[*t as usize] {
                    let expected = info.types[*t as usize].native();
                    let actual = f.shared_ty(store);
                    return Err(link_error(
                        &import,
                        &format!("expected {expected:?}, got {actual:?}"),
                    ));
                }
                funcs.push(*f);
            }
            (ImportKind::Memory(ty), Extern::Memory(_)) => {
                let actual = store.memories[index as usize].ty();
                if !limits_match(actual.min, actual.max, ty.min, ty.max) {
                    return Err(link_error(
                        &import,
                        &format!("expected {ty:?}, got {actual:?}"),
                    ));
                }
                memories.push(index);
            }
            (ImportKind::Table(ty), Extern::Table(_)) => {
                let actual = store.tables[index as usize].ty();
                if actual.elem != ty.elem || !limits_match(actual.min, actual.max, ty.min, ty.max) {
                    return Err(link_error(
                        &import,
                        &format!("expected {ty:?}, got {actual:?}"),
                    ));
                }
                tables.push(index);
            }
            (ImportKind::Global(ty), Extern::Global(_)) => {
                let actual = store.globals[index as usize].ty;
                if actual != *ty {
                    return Err(link_error(
                        &import,
                        &format!("expected {ty:?}, got {actual:?}"),
                    ));
                }
                globals.push(index);
            }
            (kind, ext) => {
                return Err(link_error(
                    &import,
                    &format!("expected {kind:?}, got {ext:?}"),
                ));
            }
        }
    }

    // SAFETY: per the contract; nothing borrows the store's data here.
    unsafe { store.admit_instance(store_ptr)? };
    store.admits_code(info.metered)?;

    // Code that relies on faults alone must not find pages accessible past a memory's length.
    if !info.checks_bounds {
        for &mem in &memories {
            store.memories[mem as usize].tighten()?;
        }
    }

    // Imported memories this module has an image for: claimed now, before anything can
    // expose them, so that an untouched one can take the image as it is.
    let mut claimed = Claimed::new();
    for (i, &mem) in memories.iter().enumerate() {
        if artifact.image(i as u32).is_some() {
            claimed.push((mem, store.memories[mem as usize].claim(), i as u32));
        }
    }
    lap(|t| &mut t.check_imports);

    let code = match load_code(module) {
        Ok(code) => code,
        Err(e) => {
            unclaim(store, &mut claimed);
            return Err(e);
        }
    };
    let text_base = code.as_ptr();
    lap(|t| &mut t.load_code);

    // Defined memories (from the engine's pool, with their images), tables and globals.
    for (i, ty) in info.memories.iter().enumerate() {
        let i = i as u32;
        if i >= info.imported_memories.to_native() {
            let image = ArtifactImage::of(artifact, i);
            let ty = native(ty);
            // SAFETY: as above.
            let admitted = unsafe { admit_memory(store, store_ptr, ty) };
            let loose = info.checks_bounds;
            let memory = match admitted
                .and_then(|()| LinearMemory::pooled(&m.engine, ty, image.as_ref(), loose))
            {
                Ok(memory) => memory,
                Err(e) => {
                    unclaim(store, &mut claimed);
                    return Err(e);
                }
            };
            let index = store.push_memory(memory).index;
            if image.is_some() {
                claimed.push((index, store.memories[index as usize].claim(), i));
            }
            memories.push(index);
        }
    }
    lap(|t| &mut t.memories);
    for ty in &info.tables[info.imported_tables.to_native() as usize..] {
        let ty = native(ty);
        // SAFETY: as above.
        let admitted = unsafe { admit_table(store, store_ptr, ty) };
        match admitted.and_then(|()| TableData::new(ty, 0)) {
            Ok(table) => tables.push(store.push_table(table).index),
            Err(e) => {
                unclaim(store, &mut claimed);
                return Err(e);
            }
        }
    }

    let o = &m.offsets;
    let vmctx = VmCtx::new(
        o.size,
        o.funcref(m.artifact.first_lazy_slot()),
        info.global_inits.len(),
    );
    let vm = vmctx.ptr();
    let funcref_at = |f: u32| vm.wrapping_add(o.funcref(m.funcref_slot(f)) as usize) as usize;
    // SAFETY (all writes below): offsets come from this module's `VmOffsets`.
    unsafe {
        vmctx.write(VmOffsets::STACK_LIMIT, store.stack_limit.get().cast_const());
        vmctx.write(VmOffsets::BUILTINS, BUILTINS.0.as_ptr());
        vmctx.write(VmOffsets::FUEL, store.fuel.get());
        for (i, &mem) in memories.iter().enumerate() {
            let mem = &store.memories[mem as usize];
            if !info.marks_writes {
                mem.writes_unmarked();
            }
            vmctx.write(o.memory_base(i as u32), mem.base());
            vmctx.write(o.memory_def(i as u32), mem.vm());
        }
        for (i, &table) in tables.iter().enumerate() {
            vmctx.write(o.table(i as u32), store.tables[table as usize].vm());
        }
        for (i, id) in m.type_ids.iter().enumerate() {
            vmctx.write(o.type_id(i as u32), *id);
        }
        let trampolines = artifact.trampolines();
        for (i, f) in funcs.iter().enumerate() {
            let ty = info.funcs[i].to_native() as usize;
            let fr = match f.host_func(store) {
                Some(host) => VmFuncRef {
                    code: text_base.add(artifact.host_adapters()[ty].to_native() as usize),
                    vmctx: host as *const crate::func::HostFunc as *mut u8,
                    trampoline: text_base.add(trampolines[ty].to_native() as usize),
                    type_id: m.type_ids[ty],
                },
                None => f.vm_funcref(store).expect("wasm function"),
            };
            vmctx.write(o.funcref(i as u32), fr);
            let at = NonNull::new(funcref_at(i as u32) as *mut VmFuncRef).expect("in the vmctx");
            f.imported_at(store, at);
        }
        // Eager funcrefs now; lazy ones when first needed (see `ephem_module::FuncrefLayout`).
        let imported = info.imported_funcs.to_native();
        let code = artifact.eager_code();
        for (rank, i) in artifact.eager().iter().enumerate() {
            let ty = info.funcs[i.to_native() as usize].to_native();
            let fr = m.funcref(text_base, vm, code[rank].to_native(), ty);
            vmctx.write(o.funcref(imported + rank as u32), fr);
        }
    }
    // Globals: imported ones first; initialisers may read them and take funcrefs.
    for (k, init) in info.global_inits.iter().enumerate() {
        let ty = native(&info.globals[info.imported_globals.to_native() as usize + k]);
        let value = match init.native() {
            ConstExpr::I32(v) => v as u32 as ValRaw,
            ConstExpr::I64(v) => v as u64 as ValRaw,
            ConstExpr::F32(v) => v as ValRaw,
            ConstExpr::F64(v) => v as ValRaw,
            ConstExpr::V128(v) => v,
            ConstExpr::GlobalGet(g) => store.globals[globals[g as usize] as usize].get(),
            ConstExpr::RefNull => 0,
            ConstExpr::RefFunc(f) => funcref_at(f) as ValRaw,
            ConstExpr::Extended(i) => extended(info, i, |g| {
                store.globals[globals[g as usize] as usize].get() as u64
            }),
        };
        // SAFETY: a cell of this instance's vmctx, which the store keeps as long as the global.
        let global = unsafe { GlobalData::in_vmctx(ty, vmctx.global_cell(o.size, k), value) };
        globals.push(store.push_global(global).index);
    }
    for (i, &g) in globals.iter().enumerate() {
        // SAFETY: as above.
        unsafe { vmctx.write(o.global(i as u32), store.globals[g as usize].vm()) };
    }

    let handle = Instance(store.next_instance());
    let data = Box::new(InstanceData {
        code,
        vmctx,
        handle,
        store: store_ptr,
        module: module.clone(),
        memories,
        tables,
        globals,
        dropped_datas: RefCell::new(vec![false; info.datas.len()]),
        dropped_elems: RefCell::new(vec![false; info.elems.len()]),
    });
    // SAFETY: the instance pointer field; the boxed data does not move.
    unsafe {
        data.vmctx
            .write(VmOffsets::INSTANCE, &*data as *const InstanceData)
    };
    let owner: *const InstanceData = &*data;
    for (i, &table) in data.tables.iter().enumerate() {
        if artifact.lazy_table(i as u32).is_some() {
            let lazy = LazyInit {
                owner,
                table: i as u32,
            };
            store.tables[table as usize].set_lazy(lazy);
        }
    }
    store.push_instance(data);
    // SAFETY: per the contract; `store` is not used past this point.
    let start = unsafe { initialise(store_ptr, handle, claimed) };
    lap(|t| &mut t.initialise);
    start.map(|()| handle)
}

/// Asks the store's limiter whether a memory of `ty` may be added.
///
/// # Safety
/// As for [`StoreOpaque::ask`]: `raw` is `store`, derived as [`raw_store`] derives it.
pub(crate) unsafe fn admit_memory(
    store: &StoreOpaque,
    raw: *mut StoreOpaque,
    ty: MemoryType,
) -> Result<(), Error> {
    let bytes = |pages: u32| pages as usize * crate::memory::PAGE as usize;
    // SAFETY: per the contract.
    unsafe { store.admit(raw, Growing::Memory, bytes(ty.min), ty.max.map(bytes)) }
}

/// Asks the store's limiter whether a table of `ty` may be added.
///
/// # Safety
/// As for [`admit_memory`].
pub(crate) unsafe fn admit_table(
    store: &StoreOpaque,
    raw: *mut StoreOpaque,
    ty: TableType,
) -> Result<(), Error> {
    // SAFETY: per the contract.
    unsafe {
        store.admit(
            raw,
            Growing::Table,
            ty.min as usize,
            ty.max.map(|m| m as usize),
        )
    }
}

/// A memory image of an artifact, as memories take it.
pub(crate) struct ArtifactImage<'a> {
    artifact: &'a Artifact,
    image: &'a ephem_artifact::format::ArchivedMemoryImage,
}

impl<'a> ArtifactImage<'a> {
    /// The image of `artifact`'s memory `index`, if it has one.
    pub(crate) fn of(artifact: &'a Artifact, index: u32) -> Option<ArtifactImage<'a>> {
        artifact
            .image(index)
            .map(|image| ArtifactImage { artifact, image })
    }
}

impl ImageSource for ArtifactImage<'_> {
    fn range(&self) -> (usize, usize) {
        (
            self.image.offset.to_native() as usize,
            self.image.len.to_native() as usize,
        )
    }
    fn file(&self) -> (std::os::fd::BorrowedFd<'_>, ephem_artifact::Identity, u64) {
        (
            self.artifact.file(),
            self.artifact.identity(),
            self.artifact.image_file_offset(self.image),
        )
    }
    fn shared_file(&self) -> Arc<std::fs::File> {
        self.artifact.shared_file()
    }
    fn read(&self, dst: &mut [u8]) -> Result<(), Error> {
        Ok(self.artifact.read_image(self.image, dst)?)
    }
    fn spans(&self) -> Result<Vec<(usize, usize)>, Error> {
        let spans = self.artifact.image_spans(self.image)?;
        Ok(spans.map(|(s, e)| (s as usize, e as usize)).collect())
    }
}

/// Copies (or maps) the module's text into executable memory and relocates it, or takes back
/// a slot or arena region that still holds it.
fn load_code(module: &Module) -> Result<LoadedCode, Error> {
    let m = &*module.inner;
    let artifact = &m.artifact;
    let text_len = artifact.text_len();
    let tag = Arc::as_ptr(&module.inner) as usize;
    let id = m.engine.reuses_texts().then(|| text_id(artifact));
    if artifact.relocs().is_empty() && m.engine.maps_text(text_len) {
        return Ok(LoadedCode::map_file(
            artifact.file(),
            artifact.text_file_offset(),
            text_len,
            tag,
            id,
        )?);
    }
    let pool = m.engine.code_pool();
    let mut slot = match id {
        Some(id) => match pool.acquire_text(text_len.max(1), id, tag)? {
            Acquired::Kept(code) => return Ok(code),
            Acquired::Empty(slot) => slot,
        },
        None => pool.acquire(text_len.max(1))?,
    };
    let bytes = slot.bytes_mut();
    // Straight from the file into the slot's write view: one copy, no mapping.
    artifact.read_text(&mut bytes[..text_len])?;
    bytes[text_len..].fill(ephem_code_memory::TRAP_FILL);
    for r in artifact.relocs() {
        let r: Reloc = native(r);
        let at = r.offset as usize;
        let value = (crate::libcalls::address(r.target) as i64).wrapping_add(r.addend);
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    Ok(slot.publish_tagged(tag)?)
}

/// What names an artifact's text for taking back code memory that still holds it: equal ids
/// must mean equal bytes once loaded. The seal is a keyed hash of the whole file, and the
/// relocations point at this process's libcalls, the same for every load. The device and
/// inode are added for files opened without checking their seal: their text is another
/// file's only if that file is this one (a mapped file's inode stays alive; an unmapped one
/// that is reused must also carry the very same seal).
fn text_id(artifact: &ephem_artifact::Artifact) -> TextId {
    let seal = artifact.seal();
    let word = |i: usize| u64::from_le_bytes(seal[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let [dev, ino, ..] = artifact.identity().words();
    TextId([word(0), word(1), word(2), word(3), dev, ino])
}

/// Element segments, data segments (images first), start function.
///
/// # Safety
/// As for [`instantiate`]; `instance` was just added to the store.
unsafe fn initialise(
    store_ptr: *mut StoreOpaque,
    instance: Instance,
    mut claimed: Claimed,
) -> Result<(), Error> {
    let start = {
        // SAFETY: per the contract; this reference ends before the start function runs.
        let store = unsafe { &*store_ptr };
        let inner = instance.data(store);
        let artifact = &inner.module.inner.artifact;
        let info = artifact.info();
        for (i, seg) in info.elems.iter().enumerate() {
            match native(&seg.mode) {
                SegmentMode::Active { index, offset } => {
                    let dst = inner.eval_offset(store, &offset);
                    if !inner.table_init(store, index, i as u32, dst, 0, seg.items.len() as u32) {
                        unclaim(store, &mut claimed);
                        return Err(Error::Trap(Trap::new(TrapKind::TableOutOfBounds)));
                    }
                    inner.dropped_elems.borrow_mut()[i] = true;
                }
                SegmentMode::Declared => inner.dropped_elems.borrow_mut()[i] = true,
                SegmentMode::Passive => {}
            }
        }
        // No segment an image holds can trap (they lie within the minimum size), and with one
        // memory (WebAssembly 2.0) the rest target memories without an image: applying images
        // first leaves what applying the segments in order would.
        while let Some((memory, claim, index)) = claimed.pop() {
            let image = ArtifactImage::of(artifact, index).expect("claimed for its image");
            if let Err(e) = store.memories[memory as usize].init_image(claim, &image) {
                unclaim(store, &mut claimed);
                return Err(e);
            }
        }
        // The artifact keeps only the segments no image holds (`Artifact::data_slot`): every
        // active one here targets a memory without an image.
        for (i, seg) in info.datas.iter().enumerate() {
            let ArchivedSegmentMode::Active { index, offset } = &seg.mode else {
                continue;
            };
            let dst = inner.eval_offset(store, &offset.native());
            let len = seg.range.end.to_native() - seg.range.start.to_native();
            if !inner.memory_init_at(store, index.to_native(), Some(i), dst, 0, len) {
                return Err(Error::Trap(Trap::new(TrapKind::MemoryOutOfBounds)));
            }
            inner.dropped_datas.borrow_mut()[i] = true;
        }
        match info.snapshot.as_ref() {
            // The start function ran when the module was compiled: what it left is the
            // module's initial state, and a metered module pays what the run cost.
            Some(s) if info.metered => {
                let (cost, needed) = (s.fuel_cost.to_native(), s.fuel_needed.to_native());
                // SAFETY: the store's fuel cell; no wasm runs and nothing else borrows it.
                let left = unsafe { &mut *store.fuel.get() };
                if *left < 0 || (*left as u64) < needed {
                    // Where the run would have stopped; its store is left with nothing.
                    *left = -1;
                    return Err(Error::Trap(Trap::new(TrapKind::OutOfFuel)));
                }
                *left = (*left).saturating_sub_unsigned(cost);
                None
            }
            Some(_) => None,
            None => info
                .start
                .as_ref()
                .map(|start| inner.func(store, start.to_native())),
        }
    };
    if let Some(f) = start {
        // SAFETY: per the contract; the start function takes and returns nothing.
        unsafe { f.call_raw(store_ptr, &mut [0])? };
    }
    Ok(())
}

impl InstanceData {
    /// Whether the instance's code is metered.
    pub(crate) fn metered(&self) -> bool {
        self.module.inner.artifact.info().metered
    }

    /// What a bulk operation over `n` bytes or elements checks first: the call's deadline (a
    /// signal cannot stop host code, see `interrupt`), then the fuel it charges. `Some` is the
    /// trap flag to return: 3 interrupted, 2 out of fuel.
    fn begin_bulk(&self, store: &StoreOpaque, n: u32) -> Option<u32> {
        if crate::signals::interrupt_due() {
            return Some(3);
        }
        if !self.metered() {
            return None;
        }
        // SAFETY: the store's fuel cell, which the calling code wrote back before this call
        // and reads again after it; nothing else touches it meanwhile.
        unsafe {
            let left = &mut *store.fuel.get();
            *left -= i64::from(n);
            (*left < 0).then_some(2)
        }
    }

    fn eval_offset(&self, store: &StoreOpaque, e: &ConstExpr) -> u32 {
        let global = |g: u32| store.globals[self.globals[g as usize] as usize].get();
        match *e {
            ConstExpr::I32(v) => v as u32,
            ConstExpr::GlobalGet(g) => global(g) as u32,
            ConstExpr::Extended(i) => {
                let info = self.module.inner.artifact.info();
                extended(info, i, |g| global(g) as u64) as u32
            }
            _ => unreachable!("validated: offsets are i32 constants"),
        }
    }

    /// Function `index`, which has a funcref (it is imported or eager).
    fn func(&self, store: &StoreOpaque, index: u32) -> Func {
        let m = &self.module.inner;
        let at = m.offsets.funcref(m.funcref_slot(index));
        let ptr = self.vmctx.ptr().wrapping_add(at as usize) as *mut VmFuncRef;
        Func::wasm(store.id, NonNull::new(ptr).expect("in the vmctx"))
    }

    fn export(&self, store: &StoreOpaque, index: EntityIndex) -> Extern {
        let stored = |index: u32| Stored {
            store: store.id,
            index,
        };
        match index {
            EntityIndex::Func(i) => Extern::Func(self.func(store, i)),
            EntityIndex::Memory(i) => Extern::Memory(Memory(stored(self.memories[i as usize]))),
            EntityIndex::Table(i) => Extern::Table(Table(stored(self.tables[i as usize]))),
            EntityIndex::Global(i) => Extern::Global(Global(stored(self.globals[i as usize]))),
        }
    }

    fn memory<'a>(&self, store: &'a StoreOpaque, index: u32) -> &'a LinearMemory {
        &store.memories[self.memories[index as usize] as usize]
    }

    fn table<'a>(&self, store: &'a StoreOpaque, index: u32) -> &'a TableData {
        &store.tables[self.tables[index as usize] as usize]
    }

    fn table_init(
        &self,
        store: &StoreOpaque,
        table: u32,
        elem: u32,
        dst: u32,
        src: u32,
        len: u32,
    ) -> bool {
        let seg = &self.module.inner.artifact.info().elems[elem as usize];
        let items: &[ArchivedConstExpr] = if self.dropped_elems.borrow()[elem as usize] {
            &[]
        } else {
            &seg.items
        };
        let table = self.table(store, table);
        let (Some(d), Some(_)) = (
            table.range(dst, len),
            src.checked_add(len).filter(|&e| e as usize <= items.len()),
        ) else {
            return false;
        };
        let (src, len) = (src as usize, len as usize);
        let slots = &self.module.inner.artifact.elem_slots(elem)[src..src + len];
        let funcrefs = self.vmctx.ptr() as usize + self.module.inner.offsets.funcref(0) as usize;
        let values = items[src..src + len]
            .iter()
            .zip(slots)
            .map(|(item, slot)| match item {
                ArchivedConstExpr::RefFunc(_) => {
                    funcrefs + VmOffsets::FUNCREF_SIZE as usize * slot.to_native() as usize
                }
                ArchivedConstExpr::RefNull => 0,
                ArchivedConstExpr::GlobalGet(g) => {
                    store.globals[self.globals[g.to_native() as usize] as usize].get() as usize
                }
                _ => unreachable!("validated: element items are references"),
            });
        // SAFETY: no other reference to the table's elements is alive while the host fills it
        // (`values` reads globals and the vmctx, never a table).
        let elements = unsafe { table.write(d) };
        for (element, v) in elements.iter_mut().zip(values) {
            *element = table.tag(v);
        }
        true
    }

    /// The lazy funcref slots' entries in the loaded text: (function, code offset), sorted by
    /// function (see the artifact's `lazy_slots`).
    fn lazy_slots(&self) -> &[[u32; 2]] {
        let (at, count) = self.module.inner.artifact.lazy_slots();
        // SAFETY: the artifact's checks hold the entries inside the text, at an 8-aligned
        // offset of a page-aligned text that lives as long as this instance and never changes.
        unsafe {
            std::slice::from_raw_parts(self.code.as_ptr().add(at as usize).cast(), count as usize)
        }
    }

    /// Lazy table `table`'s initial elements in the loaded text (0 null, else funcref slot
    /// + 1); empty for a table that is not lazy.
    fn lazy_elements(&self, table: u32) -> &[u32] {
        let Some((at, len)) = self.module.inner.artifact.lazy_table(table) else {
            return &[];
        };
        // SAFETY: as in `lazy_slots`; the elements are at a 4-aligned offset.
        unsafe {
            std::slice::from_raw_parts(self.code.as_ptr().add(at as usize).cast(), len as usize)
        }
    }

    /// The funcref in `slot` of this instance's vmctx, written first if it is a lazy one.
    fn slot_funcref(&self, slot: u32) -> usize {
        let m = &*self.module.inner;
        let vm = self.vmctx.ptr();
        let first_lazy = m.artifact.first_lazy_slot();
        if let Some(k) = slot.checked_sub(first_lazy) {
            let [func, code] = self.lazy_slots()[k as usize];
            let ty = m.artifact.info().funcs[func as usize].to_native();
            let fr = m.funcref(self.code.as_ptr(), vm, code, ty);
            // SAFETY: a funcref slot of this vmctx (slots are below `funcref_slots`).
            unsafe { self.vmctx.write(m.offsets.funcref(slot), fr) };
        }
        vm as usize + m.offsets.funcref(slot) as usize
    }

    /// Element `index` of this instance's lazy table `table` (its own index), as its initial
    /// contents say (0 for null, past their end too).
    pub(crate) fn lazy_element(&self, table: u32, index: u32) -> usize {
        match self.lazy_elements(table).get(index as usize) {
            Some(&slot) if slot > 0 => self.slot_funcref(slot - 1),
            _ => 0,
        }
    }

    /// `memory.init` of data segment `data` (module index).
    fn memory_init(
        &self,
        store: &StoreOpaque,
        mem: u32,
        data: u32,
        dst: u32,
        src: u32,
        len: u32,
    ) -> bool {
        let slot = self.module.inner.artifact.data_slot(data);
        self.memory_init_at(store, mem, slot, dst, src, len)
    }

    /// `memory.init` of the segment in `slot` of the artifact's kept segments; `None`: an
    /// active segment its image applied, dropped since instantiation (it reads as empty).
    fn memory_init_at(
        &self,
        store: &StoreOpaque,
        mem: u32,
        slot: Option<usize>,
        dst: u32,
        src: u32,
        len: u32,
    ) -> bool {
        let artifact = &self.module.inner.artifact;
        let bytes: &[u8] = match slot {
            Some(k) if !self.dropped_datas.borrow()[k] => {
                let range = &artifact.info().datas[k].range;
                &artifact.data()[range.start.to_native() as usize..range.end.to_native() as usize]
            }
            _ => &[],
        };
        let memory = self.memory(store, mem);
        let Some(src_end) = end_within(src, len, bytes.len()) else {
            return false;
        };
        if end_within(dst, len, memory.len()).is_none() {
            return false;
        }
        // SAFETY: bounds checked; no wasm runs while we copy.
        unsafe {
            memory
                .to_write(dst as usize, len as usize)
                .copy_from_slice(&bytes[src as usize..src_end])
        };
        true
    }
}

/// Resolves a trap site (from the signal handler) to a [`Trap`].
impl Trap {
    /// A `SIGBUS` in wasm code is no trap: the only memory that can raise it is a mapping of an
    /// artifact file (text or memory image) that was truncated underneath (guard regions raise
    /// `SIGSEGV`). It is reported as an I/O error naming the artifact of the code that faulted.
    pub(crate) fn file_fault(site: &TrapSite) -> Option<Error> {
        if site.signal != libc::SIGBUS {
            return None;
        }
        // SAFETY: as in `from_site`.
        let module = unsafe { &*(site.at.tag as *const ModuleInner) };
        let file = module.artifact.path().map_or_else(
            || "an in-memory artifact".to_owned(),
            |p| p.display().to_string(),
        );
        Some(Error::Artifact(ephem_artifact::Error::Io(
            std::io::Error::other(format!(
                "{file} could not be read while in use (it was truncated or changed underneath)"
            )),
        )))
    }

    pub(crate) fn from_site(site: &TrapSite) -> Trap {
        // SAFETY: the tag is the `ModuleInner` of the published code that trapped; that code's
        // instance is alive in the store that ran the call, and keeps its module.
        let module = unsafe { &*(site.at.tag as *const ModuleInner) };
        let offset = (site.at.pc - site.at.code_start) as u32;
        let artifact = &module.artifact;
        // Raised: generated code named the kind. Signal 0: a host function failed (the site is
        // its adapter's call, not a trap).
        let kind = match (site.raised, site.signal) {
            (Some(kind), _) => kind,
            (None, 0) => TrapKind::HostError,
            (None, crate::interrupt::INTERRUPT) => TrapKind::Interrupted,
            (None, signal) => artifact.trap_at(offset).unwrap_or(match signal {
                libc::SIGSEGV => TrapKind::MemoryOutOfBounds,
                libc::SIGFPE => TrapKind::IntegerDivisionByZero,
                _ => TrapKind::Unreachable,
            }),
        };
        let (func, offset) = artifact
            .func_at(offset)
            .map_or((None, None), |(f, o)| (Some(f), Some(o)));
        // Return addresses point after their call: look up the call itself. Frames of
        // trampolines and host adapters have no function and are left out.
        let callers = site.callers[..site.depth]
            .iter()
            .map(|c| CodeSite { pc: c.pc - 1, ..*c });
        let backtrace = std::iter::once(site.at)
            .chain(callers)
            .filter_map(|c| {
                // SAFETY: as above: every frame's code is alive in the store that ran the call.
                let module = unsafe { &*(c.tag as *const ModuleInner) };
                let (func, offset) = module.artifact.func_at((c.pc - c.code_start) as u32)?;
                Some(crate::FrameInfo {
                    func,
                    name: module.artifact.func_name(func),
                    offset,
                })
            })
            .collect();
        Trap {
            func,
            offset,
            backtrace,
            ..Trap::new(kind)
        }
    }
}

/// The instance a builtin was called for, and its store.
///
/// # Safety
/// `vmctx` must be the context of a live instance (generated code passes its own).
unsafe fn instance<'a>(vmctx: *mut u8) -> (&'a InstanceData, &'a StoreOpaque) {
    // SAFETY: per the contract; the field was written at instantiation, and the store owns
    // the instance. The embedder's borrow of the store is suspended while wasm runs.
    unsafe {
        let data = &*vmctx
            .add(VmOffsets::INSTANCE as usize)
            .cast::<*const InstanceData>()
            .read();
        (data, &*data.store)
    }
}

unsafe extern "C" fn memory_grow(vmctx: *mut u8, mem: u32, delta: u32) -> u32 {
    // SAFETY: called by generated code with its own vmctx.
    let (i, store) = unsafe { instance(vmctx) };
    let memory = i.memory(store, mem);
    // SAFETY: the instance's store pointer is derived as `raw_store` derives it, and no
    // reference to the store's data is live while wasm runs.
    if !unsafe { memory.may_grow(store, i.store, delta) } {
        return u32::MAX;
    }
    memory.grow(delta).unwrap_or(u32::MAX)
}

unsafe extern "C" fn memory_fill(vmctx: *mut u8, mem: u32, dst: u32, val: u32, len: u32) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    let memory = i.memory(store, mem);
    match end_within(dst, len, memory.len()) {
        Some(end) => {
            // SAFETY: bounds checked; the calling wasm code is suspended in this call.
            unsafe {
                memory
                    .to_write(dst as usize, end - dst as usize)
                    .fill(val as u8)
            };
            0
        }
        None => 1,
    }
}

/// The end of `[at, at + len)` if it lies within `limit` bytes. Computed in `usize` (64 bits on
/// every host ephem supports): a range may end exactly at 2^32, at the end of a 4 GiB memory.
fn end_within(at: u32, len: u32, limit: usize) -> Option<usize> {
    let end = at as usize + len as usize;
    (end <= limit).then_some(end)
}

unsafe extern "C" fn memory_copy(
    vmctx: *mut u8,
    dst_mem: u32,
    src_mem: u32,
    dst: u32,
    src: u32,
    len: u32,
) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    let (d, s) = (i.memory(store, dst_mem), i.memory(store, src_mem));
    if end_within(dst, len, d.len()).is_none() || end_within(src, len, s.len()).is_none() {
        return 1;
    }
    d.mark(dst as usize, len as usize);
    // SAFETY: both ranges checked; `copy` allows overlap (same memory).
    unsafe {
        std::ptr::copy(
            s.base().add(src as usize),
            d.base().add(dst as usize),
            len as usize,
        )
    };
    0
}

unsafe extern "C" fn memory_init(
    vmctx: *mut u8,
    mem: u32,
    data: u32,
    dst: u32,
    src: u32,
    len: u32,
) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    u32::from(!i.memory_init(store, mem, data, dst, src, len))
}

unsafe extern "C" fn data_drop(vmctx: *mut u8, data: u32) {
    // SAFETY: as above.
    let (i, _) = unsafe { instance(vmctx) };
    // A segment the artifact does not keep was applied by its image and is dropped already.
    if let Some(k) = i.module.inner.artifact.data_slot(data) {
        i.dropped_datas.borrow_mut()[k] = true;
    }
}

unsafe extern "C" fn table_grow(vmctx: *mut u8, table: u32, delta: u32, init: u64) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    let t = i.table(store, table);
    // SAFETY: as in `memory_grow`.
    if !unsafe { t.may_grow(store, i.store, delta) } {
        return u32::MAX;
    }
    t.grow(delta, init as usize).unwrap_or(u32::MAX)
}

unsafe extern "C" fn table_fill(vmctx: *mut u8, table: u32, dst: u32, val: u64, len: u32) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    let t = i.table(store, table);
    match t.range(dst, len) {
        Some(r) => {
            // SAFETY: no other reference to the elements is alive during a builtin.
            unsafe { t.write(r).fill(t.tag(val as usize)) };
            0
        }
        None => 1,
    }
}

unsafe extern "C" fn table_copy(
    vmctx: *mut u8,
    dst_t: u32,
    src_t: u32,
    dst: u32,
    src: u32,
    len: u32,
) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    let (d, s) = (i.table(store, dst_t), i.table(store, src_t));
    let (Some(dr), Some(sr)) = (d.range(dst, len), s.range(src, len)) else {
        return 1;
    };
    // Elements never written are made first: copied as they are stored, they would be made
    // from the destination's initial contents instead.
    s.make_all(sr.clone());
    if std::ptr::eq(d, s) {
        let lo = sr.start.min(dr.start);
        let hi = sr.end.max(dr.end);
        // SAFETY: as above.
        unsafe {
            d.write(lo..hi)
                .copy_within(sr.start - lo..sr.end - lo, dr.start - lo)
        };
    } else {
        // SAFETY: as above; distinct tables.
        let src_items = unsafe { s.read(sr).to_vec() };
        // SAFETY: as above.
        unsafe { d.write(dr).copy_from_slice(&src_items) };
    }
    0
}

unsafe extern "C" fn table_init(
    vmctx: *mut u8,
    table: u32,
    elem: u32,
    dst: u32,
    src: u32,
    len: u32,
) -> u32 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    if let Some(stop) = i.begin_bulk(store, len) {
        return stop;
    }
    u32::from(!i.table_init(store, table, elem, dst, src, len))
}

unsafe extern "C" fn table_lazy(vmctx: *mut u8, table: u32, index: u32) -> u64 {
    // SAFETY: as above.
    let (i, store) = unsafe { instance(vmctx) };
    let raw = i.table(store, table).raw(index);
    raw.expect("generated code checked the bounds") as u64
}

unsafe extern "C" fn ref_func(vmctx: *mut u8, func: u32) -> u64 {
    // SAFETY: as above.
    let (i, _) = unsafe { instance(vmctx) };
    // The compiler asks only for lazy functions; anything else gets null, never a stray slot.
    match i.lazy_slots().binary_search_by_key(&func, |e| e[0]) {
        Ok(k) => i.slot_funcref(i.module.inner.artifact.first_lazy_slot() + k as u32) as u64,
        Err(_) => 0,
    }
}

unsafe extern "C" fn elem_drop(vmctx: *mut u8, elem: u32) {
    // SAFETY: as above.
    let (i, _) = unsafe { instance(vmctx) };
    i.dropped_elems.borrow_mut()[elem as usize] = true;
}

/// The value of extended constant expression `index` of `info` (checked when the artifact was
/// opened), with `global` reading a global of the instance.
fn extended(
    info: &ephem_module::ArchivedModuleInfo,
    index: u32,
    global: impl Fn(u32) -> u64,
) -> ValRaw {
    let ops = info.extended[index as usize]
        .iter()
        .map(native::<ConstOp, _>);
    ConstOp::eval(ops, global) as ValRaw
}
