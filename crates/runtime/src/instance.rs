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

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use ephem_artifact::Artifact;
use ephem_code_memory::LoadedCode;
use ephem_module::{
    ArchivedConstExpr, ArchivedSegmentMode, Builtin, CompiledModule, ConstExpr, EntityIndex,
    ImportKind, Reloc, SegmentMode, TrapKind, ValRaw, VmFuncRef, VmOffsets, native,
};

use crate::memory::{Claim, Memory};
use crate::signals::TrapSite;
use crate::table::{Global, Table};
use crate::{Engine, Error, Extern, Func, Trap};

/// A compiled module ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    engine: Engine,
    artifact: Artifact,
    offsets: VmOffsets,
    type_ids: Vec<u32>,
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

    /// Opens the artifact at `path` (see [`Artifact::open`] for what is checked).
    pub fn from_file(engine: &Engine, path: &std::path::Path) -> Result<Module, Error> {
        Ok(Module::from_artifact(engine, Artifact::open(path)?))
    }

    /// Prepares an open artifact for instantiation with `engine`.
    pub fn from_artifact(engine: &Engine, artifact: Artifact) -> Module {
        let info = artifact.info();
        let type_ids = engine.type_ids(&info.types);
        let offsets = VmOffsets::for_archived(info);
        Module {
            inner: Arc::new(ModuleInner {
                engine: engine.clone(),
                artifact,
                offsets,
                type_ids,
            }),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn artifact(&self) -> &Artifact {
        &self.inner.artifact
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

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("module", &self.inner.module)
            .finish()
    }
}

/// One import of a module: what it is called and what it must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportRef<'a> {
    pub module: &'a str,
    pub name: &'a str,
    pub kind: ImportKind,
    /// What the import is in the module's index space of its kind.
    pub index: u32,
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

/// An instance of a module. Cheap to clone; not `Send` (see the crate documentation).
#[derive(Clone)]
pub struct Instance {
    inner: Rc<InstanceInner>,
}

struct InstanceInner {
    /// Dropped first: the code must be gone from the registry before its module can go.
    _code: LoadedCode,
    vmctx: VmCtx,
    module: Module,
    memories: Vec<Rc<Memory>>,
    tables: Vec<Rc<Table>>,
    globals: Vec<Rc<Global>>,
    /// Imported functions (host functions and other instances) that our funcrefs point into.
    _imports: Vec<Func>,
    dropped_datas: RefCell<Vec<bool>>,
    dropped_elems: RefCell<Vec<bool>>,
}

/// Memories claimed for their images ([`Memory::claim`]) and not yet given them: dropped
/// early (instantiation failed first), it gives them back untouched.
struct Claimed(Vec<(Rc<Memory>, Claim, u32)>);

impl Drop for Claimed {
    fn drop(&mut self) {
        for (memory, claim, _) in self.0.drain(..) {
            memory.unclaim(claim);
        }
    }
}

/// The vmctx bytes, 16-aligned.
struct VmCtx(Box<[ValRaw]>);

impl VmCtx {
    fn new(size: u32) -> VmCtx {
        VmCtx(vec![0; (size as usize).div_ceil(16).max(1)].into_boxed_slice())
    }
    fn ptr(&self) -> *mut u8 {
        self.0.as_ptr() as *mut u8
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

static BUILTINS: Builtins = Builtins([
    memory_grow as *const (),
    memory_fill as *const (),
    memory_copy as *const (),
    memory_init as *const (),
    data_drop as *const (),
    table_grow as *const (),
    table_fill as *const (),
    table_copy as *const (),
    table_init as *const (),
    elem_drop as *const (),
]);

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

impl Instance {
    /// Loads `module`'s code and instantiates it with `imports` (in the module's import order).
    pub fn new(module: &Module, imports: &[Extern]) -> Result<Instance, Error> {
        Instance::instantiate(module, imports, None)
    }

    /// As [`Instance::new`], and reports how long each part took (for benchmarks).
    pub fn new_timed(
        module: &Module,
        imports: &[Extern],
    ) -> Result<(Instance, InstantiateTimings), Error> {
        let mut timings = InstantiateTimings::default();
        let instance = Instance::instantiate(module, imports, Some(&mut timings))?;
        Ok((instance, timings))
    }

    fn instantiate(
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
        let m = &*module.inner;
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
        let mut funcs = Vec::new();
        let mut memories = Vec::new();
        let mut tables = Vec::new();
        let mut globals = Vec::new();
        for (import, ext) in module.imports().zip(imports) {
            match (&import.kind, ext) {
                (ImportKind::Func(t), Extern::Func(f)) => {
                    if f.type_id() != m.type_ids[*t as usize] {
                        let expected = info.types[*t as usize].native();
                        return Err(link_error(
                            &import,
                            &format!("expected {expected:?}, got {:?}", f.ty()),
                        ));
                    }
                    funcs.push(f.clone());
                }
                (ImportKind::Memory(ty), Extern::Memory(mem)) => {
                    let actual = mem.ty();
                    if !limits_match(actual.min, actual.max, ty.min, ty.max) {
                        return Err(link_error(
                            &import,
                            &format!("expected {ty:?}, got {actual:?}"),
                        ));
                    }
                    memories.push(mem.clone());
                }
                (ImportKind::Table(ty), Extern::Table(table)) => {
                    let actual = table.ty();
                    if actual.elem != ty.elem
                        || !limits_match(actual.min, actual.max, ty.min, ty.max)
                    {
                        return Err(link_error(
                            &import,
                            &format!("expected {ty:?}, got {actual:?}"),
                        ));
                    }
                    tables.push(table.clone());
                }
                (ImportKind::Global(ty), Extern::Global(g)) => {
                    if g.ty != *ty {
                        return Err(link_error(
                            &import,
                            &format!("expected {ty:?}, got {:?}", g.ty),
                        ));
                    }
                    globals.push(g.clone());
                }
                (kind, ext) => {
                    return Err(link_error(
                        &import,
                        &format!("expected {kind:?}, got {ext:?}"),
                    ));
                }
            }
        }

        // Imported memories this module has an image for: claimed now, before anything can
        // expose them, so that an untouched one can take the image as it is.
        let mut claimed = Claimed(Vec::new());
        for (i, mem) in memories.iter().enumerate() {
            if artifact.image(i as u32).is_some() {
                claimed.0.push((mem.clone(), mem.claim(), i as u32));
            }
        }

        lap(|t| &mut t.check_imports);
        // Load the code.
        let text_len = artifact.text_len();
        let tag = Arc::as_ptr(&module.inner) as usize;
        let code = if artifact.relocs().is_empty() && m.engine.maps_text(text_len) {
            LoadedCode::map_file(artifact.file(), artifact.text_file_offset(), text_len, tag)?
        } else {
            let mut slot = m.engine.code_pool().acquire(text_len.max(1))?;
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
            slot.publish_tagged(tag)?
        };
        let text_base = code.as_ptr();

        lap(|t| &mut t.load_code);
        // Defined memories (from the engine's pool, with their images), tables and globals.
        for (i, ty) in info.memories.iter().enumerate() {
            let i = i as u32;
            if i >= info.imported_memories.to_native() {
                let image = artifact.image(i).map(|image| (artifact, image));
                let memory = Rc::new(Memory::pooled(m.engine.memory_pool(), native(ty), image)?);
                if image.is_some() {
                    claimed.0.push((memory.clone(), memory.claim(), i));
                }
                memories.push(memory);
            }
        }
        lap(|t| &mut t.memories);
        for ty in &info.tables[info.imported_tables.to_native() as usize..] {
            tables.push(Rc::new(Table::new(native(ty), 0)?));
        }

        let o = &m.offsets;
        let vmctx = VmCtx::new(o.size);
        let vm = vmctx.ptr();
        let funcref_at = |f: u32| vm.wrapping_add(o.funcref(f) as usize) as usize;
        // SAFETY (all writes below): offsets come from this module's `VmOffsets`.
        unsafe {
            vmctx.write(VmOffsets::STACK_LIMIT, crate::signals::stack_limit_cell());
            vmctx.write(VmOffsets::BUILTINS, BUILTINS.0.as_ptr());
            for (i, mem) in memories.iter().enumerate() {
                vmctx.write(o.memory_base(i as u32), mem.base());
                vmctx.write(o.memory_def(i as u32), mem.vm());
            }
            for (i, table) in tables.iter().enumerate() {
                vmctx.write(o.table(i as u32), table.vm());
            }
            for (i, id) in m.type_ids.iter().enumerate() {
                vmctx.write(o.type_id(i as u32), *id);
            }
            let trampolines = artifact.trampolines();
            for (i, f) in funcs.iter().enumerate() {
                let ty = info.funcs[i].to_native() as usize;
                let fr = match f.host() {
                    Some(host) => VmFuncRef {
                        code: text_base.add(artifact.host_adapters()[ty].to_native() as usize),
                        vmctx: Rc::as_ptr(host) as *mut u8,
                        trampoline: text_base.add(trampolines[ty].to_native() as usize),
                        type_id: m.type_ids[ty],
                    },
                    None => f.funcref().expect("wasm function"),
                };
                vmctx.write(o.funcref(i as u32), fr);
            }
            // Only funcrefs something can read: see `Artifact::escaping`.
            let imported = info.imported_funcs.to_native();
            for i in artifact.escaping() {
                let i = i.to_native();
                let ty = info.funcs[i as usize].to_native() as usize;
                let fr = VmFuncRef {
                    code: text_base.add(artifact.func((i - imported) as usize).offset as usize),
                    vmctx: vm,
                    trampoline: text_base.add(trampolines[ty].to_native() as usize),
                    type_id: m.type_ids[ty],
                };
                vmctx.write(o.funcref(i), fr);
            }
        }
        // Globals: imported ones first; initialisers may read them and take funcrefs.
        let eval = |e: &ConstExpr, globals: &[Rc<Global>]| -> ValRaw {
            match *e {
                ConstExpr::I32(v) => v as u32 as ValRaw,
                ConstExpr::I64(v) => v as u64 as ValRaw,
                ConstExpr::F32(v) => v as ValRaw,
                ConstExpr::F64(v) => v as ValRaw,
                ConstExpr::GlobalGet(g) => globals[g as usize].get(),
                ConstExpr::RefNull => 0,
                ConstExpr::RefFunc(f) => funcref_at(f) as ValRaw,
            }
        };
        for (k, init) in info.global_inits.iter().enumerate() {
            let ty = native(&info.globals[info.imported_globals.to_native() as usize + k]);
            let value = eval(&init.native(), &globals);
            globals.push(Rc::new(Global::new(ty, value)));
        }
        for (i, g) in globals.iter().enumerate() {
            // SAFETY: as above.
            unsafe { vmctx.write(o.global(i as u32), g.vm()) };
        }

        let inner = Rc::new(InstanceInner {
            _code: code,
            vmctx,
            module: module.clone(),
            memories,
            tables,
            globals,
            _imports: funcs,
            dropped_datas: RefCell::new(vec![false; info.datas.len()]),
            dropped_elems: RefCell::new(vec![false; info.elems.len()]),
        });
        // SAFETY: the instance pointer field; the Rc allocation does not move.
        unsafe { inner.vmctx.write(VmOffsets::INSTANCE, Rc::as_ptr(&inner)) };
        let instance = Instance { inner };
        let initialised = instance.initialise(claimed);
        lap(|t| &mut t.initialise);
        if let Err(e) = initialised {
            // Element segments applied before the failure may have put this instance's
            // functions into imported tables, where other instances can still call them. Nothing
            // can tell when those entries go away, so such an instance is never freed: a leak
            // bounded by failed instantiations of modules that import tables, instead of code
            // and a vmctx freed under a live table entry.
            if info.imported_tables.to_native() > 0 {
                std::mem::forget(instance);
            }
            return Err(e);
        }
        Ok(instance)
    }

    /// Element segments, data segments (images first), start function.
    fn initialise(&self, mut claimed: Claimed) -> Result<(), Error> {
        let inner = &*self.inner;
        let artifact = &inner.module.inner.artifact;
        let info = artifact.info();
        for (i, seg) in info.elems.iter().enumerate() {
            match native(&seg.mode) {
                SegmentMode::Active { index, offset } => {
                    let dst = self.eval_offset(&offset);
                    if !inner.table_init(index, i as u32, dst, 0, seg.items.len() as u32) {
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
        while let Some((memory, claim, index)) = claimed.0.pop() {
            let image = artifact.image(index).expect("claimed for its image");
            memory.init_image(claim, artifact, image)?;
        }
        for (i, seg) in info.datas.iter().enumerate() {
            let ArchivedSegmentMode::Active { index, offset } = &seg.mode else {
                continue;
            };
            let index = index.to_native();
            // The memory's image already holds every active segment for it.
            if artifact.image(index).is_none() {
                let dst = self.eval_offset(&offset.native());
                let len = seg.range.end.to_native() - seg.range.start.to_native();
                if !inner.memory_init(index, i as u32, dst, 0, len) {
                    return Err(Error::Trap(Trap::new(TrapKind::MemoryOutOfBounds)));
                }
            }
            inner.dropped_datas.borrow_mut()[i] = true;
        }
        if let Some(start) = info.start.as_ref() {
            let f = self.func(start.to_native());
            f.call(&inner.module.inner.engine, &[])?;
        }
        Ok(())
    }

    fn eval_offset(&self, e: &ConstExpr) -> u32 {
        match *e {
            ConstExpr::I32(v) => v as u32,
            ConstExpr::GlobalGet(g) => self.inner.globals[g as usize].get() as u32,
            _ => unreachable!("validated: offsets are i32 constants"),
        }
    }

    fn func(&self, index: u32) -> Func {
        let inner = &*self.inner;
        let o = &inner.module.inner.offsets;
        let ptr = inner.vmctx.ptr().wrapping_add(o.funcref(index) as usize) as *const VmFuncRef;
        Func::wasm(&inner.module.inner.engine, ptr, self.clone())
    }

    fn export(&self, index: EntityIndex) -> Extern {
        let inner = &*self.inner;
        match index {
            EntityIndex::Func(i) => Extern::Func(self.func(i)),
            EntityIndex::Memory(i) => Extern::Memory(inner.memories[i as usize].clone()),
            EntityIndex::Table(i) => Extern::Table(inner.tables[i as usize].clone()),
            EntityIndex::Global(i) => Extern::Global(inner.globals[i as usize].clone()),
        }
    }

    /// The export named `name`.
    pub fn get_export(&self, name: &str) -> Option<Extern> {
        let info = self.inner.module.inner.artifact.info();
        let e = info.exports.iter().find(|e| e.name == name)?;
        Some(self.export(native(&e.index)))
    }

    /// Every export, in the module's order.
    pub fn exports(&self) -> Vec<(String, Extern)> {
        let info = self.inner.module.inner.artifact.info();
        info.exports
            .iter()
            .map(|e| (e.name.to_string(), self.export(native(&e.index))))
            .collect()
    }

    /// The exported function `name`.
    pub fn get_func(&self, name: &str) -> Result<Func, Error> {
        match self.get_export(name) {
            Some(Extern::Func(f)) => Ok(f),
            _ => Err(Error::NoExport(name.to_owned())),
        }
    }

    pub fn module(&self) -> &Module {
        &self.inner.module
    }
}

impl InstanceInner {
    fn elem_item(&self, e: &ConstExpr) -> usize {
        match *e {
            ConstExpr::RefNull => 0,
            ConstExpr::RefFunc(f) => self
                .vmctx
                .ptr()
                .wrapping_add(self.module.inner.offsets.funcref(f) as usize)
                as usize,
            ConstExpr::GlobalGet(g) => self.globals[g as usize].get() as usize,
            _ => unreachable!("validated: element items are references"),
        }
    }

    fn table_init(&self, table: u32, elem: u32, dst: u32, src: u32, len: u32) -> bool {
        let seg = &self.module.inner.artifact.info().elems[elem as usize];
        let items: &[ArchivedConstExpr] = if self.dropped_elems.borrow()[elem as usize] {
            &[]
        } else {
            &seg.items
        };
        let table = &self.tables[table as usize];
        let (Some(d), Some(s)) = (
            table.range(dst, len),
            src.checked_add(len).filter(|&e| e as usize <= items.len()),
        ) else {
            return false;
        };
        let _ = s;
        for (k, i) in d.enumerate() {
            table.set(i as u32, self.elem_item(&items[src as usize + k].native()));
        }
        true
    }

    fn memory_init(&self, mem: u32, data: u32, dst: u32, src: u32, len: u32) -> bool {
        let artifact = &self.module.inner.artifact;
        let seg = &artifact.info().datas[data as usize];
        let bytes: &[u8] = if self.dropped_datas.borrow()[data as usize] {
            &[]
        } else {
            &artifact.data()
                [seg.range.start.to_native() as usize..seg.range.end.to_native() as usize]
        };
        let memory = &self.memories[mem as usize];
        let (Some(src_end), Some(dst_end)) = (src.checked_add(len), dst.checked_add(len)) else {
            return false;
        };
        if src_end as usize > bytes.len() || dst_end as usize > memory.len() {
            return false;
        }
        // SAFETY: bounds checked; no wasm runs while we copy.
        unsafe {
            memory.bytes()[dst as usize..dst_end as usize]
                .copy_from_slice(&bytes[src as usize..src_end as usize])
        };
        true
    }
}

/// Resolves a trap site (from the signal handler) to a [`Trap`].
impl Trap {
    pub(crate) fn from_site(site: TrapSite) -> Trap {
        // SAFETY: the tag is the `ModuleInner` of the published code that trapped; that code's
        // instance is still alive (the caller holds it, or an instance that imports it).
        let module = unsafe { &*(site.tag as *const ModuleInner) };
        let offset = (site.pc - site.code_start) as u32;
        let artifact = &module.artifact;
        let kind = artifact.trap_at(offset).unwrap_or(match site.signal {
            libc::SIGSEGV | libc::SIGBUS => TrapKind::MemoryOutOfBounds,
            libc::SIGFPE => TrapKind::IntegerDivisionByZero,
            _ => TrapKind::Unreachable,
        });
        let host_message = if kind == TrapKind::HostError {
            crate::values::take_host_error()
        } else {
            None
        };
        let (func, offset) = artifact
            .func_at(offset)
            .map_or((None, None), |(f, o)| (Some(f), Some(o)));
        Trap {
            kind,
            func,
            offset,
            host_message,
        }
    }
}

/// The instance a builtin was called for.
///
/// # Safety
/// `vmctx` must be the context of a live instance (generated code passes its own).
unsafe fn instance<'a>(vmctx: *mut u8) -> &'a InstanceInner {
    // SAFETY: per the contract; the field was written at instantiation.
    unsafe {
        &*vmctx
            .add(VmOffsets::INSTANCE as usize)
            .cast::<*const InstanceInner>()
            .read()
    }
}

unsafe extern "C" fn memory_grow(vmctx: *mut u8, mem: u32, delta: u32) -> u32 {
    // SAFETY: called by generated code with its own vmctx.
    let i = unsafe { instance(vmctx) };
    i.memories[mem as usize].grow(delta).unwrap_or(u32::MAX)
}

unsafe extern "C" fn memory_fill(vmctx: *mut u8, mem: u32, dst: u32, val: u32, len: u32) -> u32 {
    // SAFETY: as above.
    let i = unsafe { instance(vmctx) };
    let memory = &i.memories[mem as usize];
    match dst.checked_add(len) {
        Some(end) if end as usize <= memory.len() => {
            // SAFETY: bounds checked; the calling wasm code is suspended in this call.
            unsafe { memory.bytes()[dst as usize..end as usize].fill(val as u8) };
            0
        }
        _ => 1,
    }
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
    let i = unsafe { instance(vmctx) };
    let (d, s) = (&i.memories[dst_mem as usize], &i.memories[src_mem as usize]);
    let ok = |at: u32, m: &Memory| at.checked_add(len).is_some_and(|e| e as usize <= m.len());
    if !ok(dst, d) || !ok(src, s) {
        return 1;
    }
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
    let i = unsafe { instance(vmctx) };
    u32::from(!i.memory_init(mem, data, dst, src, len))
}

unsafe extern "C" fn data_drop(vmctx: *mut u8, data: u32) {
    // SAFETY: as above.
    let i = unsafe { instance(vmctx) };
    i.dropped_datas.borrow_mut()[data as usize] = true;
}

unsafe extern "C" fn table_grow(vmctx: *mut u8, table: u32, delta: u32, init: u64) -> u32 {
    // SAFETY: as above.
    let i = unsafe { instance(vmctx) };
    i.tables[table as usize]
        .grow(delta, init as usize)
        .unwrap_or(u32::MAX)
}

unsafe extern "C" fn table_fill(vmctx: *mut u8, table: u32, dst: u32, val: u64, len: u32) -> u32 {
    // SAFETY: as above.
    let i = unsafe { instance(vmctx) };
    let t = &i.tables[table as usize];
    match t.range(dst, len) {
        Some(r) => {
            // SAFETY: no other reference to the elements is alive during a builtin.
            unsafe { t.elements()[r].fill(val as usize) };
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
    let i = unsafe { instance(vmctx) };
    let (d, s) = (&i.tables[dst_t as usize], &i.tables[src_t as usize]);
    let (Some(dr), Some(sr)) = (d.range(dst, len), s.range(src, len)) else {
        return 1;
    };
    if Rc::ptr_eq(d, s) {
        // SAFETY: as above.
        unsafe { d.elements().copy_within(sr, dr.start) };
    } else {
        // SAFETY: as above; distinct tables.
        let src_items = unsafe { s.elements()[sr].to_vec() };
        // SAFETY: as above.
        unsafe { d.elements()[dr].copy_from_slice(&src_items) };
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
    let i = unsafe { instance(vmctx) };
    u32::from(!i.table_init(table, elem, dst, src, len))
}

unsafe extern "C" fn elem_drop(vmctx: *mut u8, elem: u32) {
    // SAFETY: as above.
    let i = unsafe { instance(vmctx) };
    i.dropped_elems.borrow_mut()[elem as usize] = true;
}
