//! Instantiating a loaded module in a store: checking its imports, loading its code (`load`),
//! taking its memories from the engine's pool, making its tables and globals, writing its
//! vmctx (see `ephem_module::vmctx`), then applying element segments, data segments and the
//! start function, in the order the specification gives.
//!
//! Invariants:
//! - Imports are checked before anything is spent on them: each belongs to the store (which is
//!   what keeps funcrefs sound, see `store`) and has the import's kind and type. An
//!   [`InstancePre`](crate::InstancePre) checked its imports once, when it resolved them; what
//!   it hands over is taken as it is ([`Imports::Checked`]).
//! - The store's limiter is asked before each memory, table and instance is made, through the
//!   raw store pointer only, while no mutable reference to the store is alive (see `limits`).
//! - Imported memories this module has an image for are claimed before anything can expose
//!   them, so that an untouched one takes the image as it is, and every claim is either
//!   fulfilled or given back ([`Claims`]), however instantiation ends.
//! - A failed instantiation leaves what it made in the store, which frees it with everything
//!   else: element segments applied before the failure may have put this instance's functions
//!   into imported tables, and those must stay callable.
//!
//! In steady state (code and memory slots that still hold this module's text and image) none
//! of this makes a system call: see `load` and `memory`.

use std::cell::RefCell;
use std::ptr::NonNull;

use ephem_module::{
    ArchivedSegmentMode, ConstExpr, ImportKind, SegmentMode, TrapKind, ValRaw, VmFuncRef,
    VmOffsets, native,
};

use crate::builtins::BUILTINS;
use crate::global::GlobalData;
use crate::instance::{InstanceData, VmCtx, extended};
use crate::load::{ArtifactImage, load_code};
use crate::memory::{Claim, LinearMemory};
use crate::store::{StoreGlobal, StoreMemory, StoreOpaque, StoreTable};
use crate::table::{LazyInit, TableData};
use crate::{
    Error, Extern, ExternType, Func, FuncType, Global, ImportRef, Instance, Memory, Module, Table,
    Trap,
};

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

/// A module's imports, in its import order, as instantiation gets them.
#[derive(Clone, Copy)]
pub(crate) enum Imports<'a> {
    /// From the embedder: each is checked against the store and the module's import type
    /// ([`check_import`]).
    Unchecked(&'a [Extern]),
    /// From an `InstancePre`, which checked them when it resolved them, and checks those it
    /// does not make in the store itself at each instantiation (see `linker`): taken as they
    /// are.
    Checked(&'a [Extern]),
}

/// Instantiates `module` in `store` with `imports`; see [`Instance::new`].
///
/// # Safety
/// `store_ptr` must be derived from an exclusive borrow of the whole store that lasts for the
/// call, as [`raw_store`](crate::context::raw_store) derives it.
pub(crate) unsafe fn instantiate(
    store_ptr: *mut StoreOpaque,
    module: &Module,
    imports: Imports<'_>,
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

    // Check imports before spending anything on them.
    let Entities {
        funcs,
        mut memories,
        mut tables,
        mut globals,
        mut tags,
    } = {
        // SAFETY: per the contract; a shared reference that ends with the checks.
        let store = unsafe { &*store_ptr };
        if !m.engine.same(store.engine()) {
            return Err(Error::Usage(
                "the module belongs to another engine than the store".into(),
            ));
        }
        take_imports(store, module, imports)?
    };

    // SAFETY: per the contract; no reference into the store is alive.
    unsafe { StoreOpaque::admit_instance(store_ptr)? };
    // SAFETY: per the contract; the limiter is not asked while this reference is used.
    let store = unsafe { &mut *store_ptr };
    store.admits_code(info.metered)?;

    // Code that relies on faults alone must not find pages accessible past a memory's length.
    for (i, &mem) in memories.iter().enumerate() {
        if !info.checks_memory(i as u32) {
            mem.of(store).tighten()?;
        }
    }

    // Imported memories this module has an image for: claimed now, before anything can
    // expose them, so that an untouched one can take the image as it is.
    // SAFETY: `store_ptr` outlives the claims, which are fulfilled or dropped before this
    // function returns.
    let mut claims = unsafe { Claims::new(store_ptr) };
    for (i, &mem) in memories.iter().enumerate() {
        if artifact.image(i as u32).is_some() {
            claims.push(mem, mem.of(store).claim(), i as u32);
        }
    }
    lap(|t| &mut t.check_imports);

    let code = load_code(module)?;
    let text_base = code.as_ptr();
    lap(|t| &mut t.load_code);

    // Defined memories (from the engine's pool, with their images), then tables.
    let imported_memories = info.imported_memories.to_native();
    for (i, ty) in info
        .memories
        .iter()
        .enumerate()
        .skip(imported_memories as usize)
    {
        let i = i as u32;
        let image = ArtifactImage::of(artifact, i);
        let ty = native(ty);
        // SAFETY: per the contract; no mutable reference to the store is alive.
        unsafe { StoreOpaque::admit_memory(store_ptr, ty)? };
        let loose = info.checks_memory(i);
        let memory = LinearMemory::pooled(&m.engine, ty, image.as_ref(), loose)?;
        // SAFETY: per the contract; this reference ends before the limiter is asked again.
        let store = unsafe { &mut *store_ptr };
        let index = StoreMemory(store.push_memory(memory).index);
        if image.is_some() {
            claims.push(index, index.of(store).claim(), i);
        }
        memories.push(index);
    }
    lap(|t| &mut t.memories);
    for ty in &info.tables[info.imported_tables.to_native() as usize..] {
        let ty = m.canonical_table(native(ty));
        // SAFETY: per the contract; no mutable reference to the store is alive.
        unsafe { StoreOpaque::admit_table(store_ptr, ty)? };
        let table = TableData::new(ty, 0)?;
        // SAFETY: per the contract; this reference ends before the limiter is asked again.
        tables.push(StoreTable(
            unsafe { &mut *store_ptr }.push_table(table).index,
        ));
    }

    // SAFETY: per the contract; the limiter is not asked again, and this reference ends before
    // the start function runs.
    let store = unsafe { &mut *store_ptr };
    let o = &m.offsets;
    let vmctx = VmCtx::new(
        o.size,
        o.funcref(m.artifact.first_lazy_slot()),
        info.global_inits.len(),
    );
    let vm = vmctx.ptr();
    let funcref_at = |f: u32| vm.wrapping_add(o.funcref(m.funcref_slot(f)) as usize) as usize;
    // SAFETY: every offset written is a field of this vmctx of the type written, from this
    // module's `VmOffsets`; adapter and trampoline offsets lie within the loaded text (the
    // artifact's checks hold them there).
    unsafe {
        vmctx.write(VmOffsets::STACK_LIMIT, store.stack_limit.get().cast_const());
        vmctx.write(VmOffsets::BUILTINS, BUILTINS.0.as_ptr());
        vmctx.write(VmOffsets::FUEL, store.fuel.get());
        vmctx.write(VmOffsets::GC_HEAP, store.gc.vm());
        for (i, &mem) in memories.iter().enumerate() {
            let mem = mem.of(store);
            if !info.marks_writes {
                mem.writes_unmarked();
            }
            vmctx.write(o.memory_base(i as u32), mem.base());
            vmctx.write(o.memory_def(i as u32), mem.vm());
        }
        for (i, &table) in tables.iter().enumerate() {
            vmctx.write(o.table(i as u32), table.of(store).vm());
        }
        for (i, id) in m.type_ids.iter().enumerate() {
            vmctx.write(o.type_id(i as u32), *id);
        }
        // Tags: imported ones are the exporter's, defined ones new (see `exceptions`).
        for &t in &info.tags[info.imported_tags.to_native() as usize..] {
            tags.push(store.push_tag(m.type_ids[t.to_native() as usize]).index);
        }
        for (i, &tag) in tags.iter().enumerate() {
            vmctx.write(o.tag(i as u32), store.tag_ptr(tag));
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
        let ty = m.canonical_global(native(
            &info.globals[info.imported_globals.to_native() as usize + k],
        ));
        let env = crate::gc::Consts {
            store,
            module: m,
            global: |g: u32| globals[g as usize].of(store).get(),
            funcref_at,
        };
        let value = const_value(info, init.native(), &env)?;
        // SAFETY: a cell of this instance's vmctx, which the store keeps as long as the global.
        let global = unsafe { GlobalData::in_vmctx(ty, vmctx.global_cell(o.size, k), value) };
        globals.push(StoreGlobal(store.push_global(global).index));
    }
    for (i, &g) in globals.iter().enumerate() {
        // SAFETY: the global pointer field `i` of this vmctx, per this module's `VmOffsets`.
        unsafe { vmctx.write(o.global(i as u32), g.of(store).vm()) };
    }
    // The globals are all made: the other constant expressions may read any of them.
    let env = crate::gc::Consts {
        store,
        module: m,
        global: |g: u32| globals[g as usize].of(store).get(),
        funcref_at,
    };
    // Tables with an initialiser (typed tables) start full of it.
    let defined_tables = &tables[info.imported_tables.to_native() as usize..];
    for (init, table) in info.table_inits.iter().zip(defined_tables) {
        let value = const_value(info, init.native(), &env)?;
        table.of(store).fill_all(value as usize);
    }

    // Element segments' extended items (GC's objects), made once (see `elem_values`).
    let mut elem_values = Vec::new();
    for (i, seg) in info.elems.iter().enumerate() {
        if !seg
            .items
            .iter()
            .any(|e| matches!(e, ephem_module::ArchivedConstExpr::Extended(_)))
        {
            continue;
        }
        let values = (seg.items.iter())
            .map(|e| const_value(info, e.native(), &env).map(|v| std::cell::Cell::new(v as usize)))
            .collect::<Result<_, _>>()?;
        elem_values.resize_with(i + 1, || None);
        elem_values[i] = Some(values);
    }

    let handle = Instance(store.next_instance());
    let data = Box::new(InstanceData {
        code,
        vmctx,
        handle,
        module: module.clone(),
        memories,
        tables,
        globals,
        tags,
        dropped_datas: RefCell::new(vec![false; info.datas.len()]),
        dropped_elems: RefCell::new(vec![false; info.elems.len()]),
        elem_values,
    });
    // SAFETY: the instance pointer field of this vmctx; the boxed data does not move.
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
            table.of(store).set_lazy(lazy);
        }
    }
    store.push_instance(data);
    // SAFETY: per the contract; `store` is not used past this point.
    let start = unsafe { initialise(store_ptr, handle, claims) };
    lap(|t| &mut t.initialise);
    start.map(|()| handle)
}

/// The value of constant expression `init` (a global's or a table's initialiser, or an element
/// segment's item) in `env`; a trap when an object it makes does not fit the GC heap.
fn const_value<G: Fn(u32) -> ValRaw, F: Fn(u32) -> usize>(
    info: &ephem_module::ArchivedModuleInfo,
    init: ConstExpr,
    env: &crate::gc::Consts<'_, G, F>,
) -> Result<ValRaw, Error> {
    Ok(match init {
        ConstExpr::I32(v) => v as u32 as ValRaw,
        ConstExpr::I64(v) => v as u64 as ValRaw,
        ConstExpr::F32(v) => v as ValRaw,
        ConstExpr::F64(v) => v as ValRaw,
        ConstExpr::V128(v) => v,
        ConstExpr::GlobalGet(g) => (env.global)(g),
        ConstExpr::RefNull => 0,
        ConstExpr::RefFunc(f) => (env.funcref_at)(f) as ValRaw,
        ConstExpr::Extended(i) => extended(info, i, env)
            .ok_or_else(|| Error::Trap(Trap::new(TrapKind::GcHeapExhausted)))?,
    })
}

/// What an instance starts from: its imported functions, and the store indices of its
/// imported memories, tables and globals, to which its own are added as they are made.
struct Entities {
    funcs: Vec<Func>,
    memories: Vec<StoreMemory>,
    tables: Vec<StoreTable>,
    globals: Vec<StoreGlobal>,
    tags: Vec<u32>,
}

/// Sorts `imports` by kind, checking each first unless it was checked before.
fn take_imports(
    store: &StoreOpaque,
    module: &Module,
    imports: Imports<'_>,
) -> Result<Entities, Error> {
    let info = module.inner.artifact.info();
    let (imports, checked) = match imports {
        Imports::Unchecked(imports) => (imports, false),
        Imports::Checked(imports) => (imports, true),
    };
    if imports.len() != info.imports.len() {
        return Err(Error::Link(format!(
            "expected {} imports, got {}",
            info.imports.len(),
            imports.len()
        )));
    }
    let mut taken = Entities {
        funcs: Vec::with_capacity(info.imported_funcs.to_native() as usize),
        memories: Vec::with_capacity(info.memories.len()),
        tables: Vec::with_capacity(info.tables.len()),
        globals: Vec::with_capacity(info.globals.len()),
        tags: Vec::new(),
    };
    let mut take = |ext: &Extern| match *ext {
        Extern::Func(f) => taken.funcs.push(f),
        Extern::Memory(Memory(s)) => taken.memories.push(StoreMemory(s.index)),
        Extern::Table(Table(s)) => taken.tables.push(StoreTable(s.index)),
        Extern::Global(Global(s)) => taken.globals.push(StoreGlobal(s.index)),
        Extern::Tag(crate::Tag(s)) => taken.tags.push(s.index),
        // (Refused by the check; a linker gives the store a memory of it first.)
        Extern::SharedMemory(_) => {}
    };
    if checked {
        // Checked ones need not even be read against the module's import list.
        imports.iter().for_each(&mut take);
    } else {
        for (import, ext) in module.imports().zip(imports) {
            check_import(store, module, &import, ext)?;
            take(ext);
        }
    }
    Ok(taken)
}

/// Checks that `ext` may be `module`'s `import` in `store`: it belongs to the store (a funcref
/// into another store could outlive what it points at), and it has the import's kind and type.
pub(crate) fn check_import(
    store: &StoreOpaque,
    module: &Module,
    import: &ImportRef<'_>,
    ext: &Extern,
) -> Result<(), Error> {
    let m = &*module.inner;
    let (owner, index) = match *ext {
        Extern::Func(f) => (f.store_id(), 0),
        Extern::Memory(Memory(s))
        | Extern::Table(Table(s))
        | Extern::Global(Global(s))
        | Extern::Tag(crate::Tag(s)) => (s.store, s.index),
        Extern::SharedMemory(_) => {
            let how = "a shared memory is imported as a store's memory of it (`Memory::from_shared`, \
                       or a `Linker` that defines it)";
            return Err(link_error(import, how));
        }
    };
    if owner != store.id {
        return Err(link_error(import, "it belongs to another store"));
    }
    // Types as the text format writes them: `(func (param i32))`, `(memory 1 2)`.
    let mismatch = |expected: ExternType, actual: ExternType| {
        link_error(import, &format!("expected {expected}, got {actual}"))
    };
    match (&import.kind, ext) {
        (ImportKind::Func(t), Extern::Func(f)) => {
            if !(m.engine).is_subtype(f.type_id(store), m.type_ids[*t as usize]) {
                let expected = m.canonical_func(*t);
                let actual = FuncType::clone(&f.shared_ty(store));
                return Err(mismatch(
                    ExternType::Func(expected),
                    ExternType::Func(actual),
                ));
            }
        }
        (ImportKind::Memory(ty), Extern::Memory(_)) => {
            let actual = store.memories[index as usize].ty();
            let fits = actual.page_size_log2 == ty.page_size_log2
                && actual.memory64 == ty.memory64
                && actual.shared == ty.shared
                && limits_match(actual.min, actual.max, ty.min, ty.max);
            if !fits {
                return Err(mismatch(
                    ExternType::Memory(*ty),
                    ExternType::Memory(actual),
                ));
            }
        }
        (ImportKind::Table(ty), Extern::Table(_)) => {
            let actual = store.tables[index as usize].ty();
            // (Tables are mutable: the element type must be the same, not a subtype.)
            let fits = actual.elem == ty.elem
                && actual.table64 == ty.table64
                && limits_match(actual.min, actual.max, ty.min, ty.max);
            if !fits {
                return Err(mismatch(ExternType::Table(*ty), ExternType::Table(actual)));
            }
        }
        (ImportKind::Global(ty), Extern::Global(_)) => {
            let actual = store.globals[index as usize].ty;
            // A mutable global is written both ways: its type must be the same. One that
            // cannot change may be of a subtype.
            let fits = match ty.mutable {
                true => actual == *ty,
                false => !actual.mutable && m.engine.matches(actual.ty, ty.ty),
            };
            if !fits {
                return Err(mismatch(
                    ExternType::Global(*ty),
                    ExternType::Global(actual),
                ));
            }
        }
        (ImportKind::Tag(t), Extern::Tag(tag)) => {
            // Exceptions flow both ways through a tag: its type must be the same.
            if tag.vm(store).type_id != m.type_ids[*t as usize] {
                let expected = ExternType::Tag(crate::TagType::new(m.canonical_func(*t)));
                let actual = ExternType::Tag(crate::TagType::new(tag.func_type(store)));
                return Err(mismatch(expected, actual));
            }
        }
        (_, ext) => {
            let expected = module.import_type(import);
            return Err(link_error(
                import,
                &format!("expected {expected}, got {}", ext_kind(ext)),
            ));
        }
    }
    Ok(())
}

/// What kind of thing `ext` is, for a message.
fn ext_kind(ext: &Extern) -> &'static str {
    match ext {
        Extern::Func(_) => "a function",
        Extern::Memory(_) => "a memory",
        Extern::SharedMemory(_) => "a shared memory",
        Extern::Table(_) => "a table",
        Extern::Global(_) => "a global",
        Extern::Tag(_) => "a tag",
    }
}

pub(crate) fn link_error(import: &ImportRef<'_>, why: &str) -> Error {
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

/// Memories claimed for their images ([`LinearMemory::claim`]) and not yet given them. Dropped
/// with claims left, when instantiation fails before the images, it gives those memories back
/// untouched ([`LinearMemory::unclaim`]), so that no way out of instantiation leaves one
/// claimed.
struct Claims {
    store: *const StoreOpaque,
    /// (the memory, what the claim found, the memory's index in the module).
    claimed: Vec<(StoreMemory, Claim, u32)>,
}

impl Claims {
    /// No claims yet, on the memories of `store`.
    ///
    /// # Safety
    /// `store` must outlive the claims, and hold no mutable reference to the store when they
    /// are dropped with claims left.
    unsafe fn new(store: *mut StoreOpaque) -> Claims {
        Claims {
            store,
            claimed: Vec::new(),
        }
    }

    fn push(&mut self, memory: StoreMemory, claim: Claim, index: u32) {
        self.claimed.push((memory, claim, index));
    }

    /// The claim made last, to fulfil.
    fn pop(&mut self) -> Option<(StoreMemory, Claim, u32)> {
        self.claimed.pop()
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        if self.claimed.is_empty() {
            return;
        }
        // SAFETY: per `Claims::new`: the store is alive, and a failed instantiation on its way
        // out holds no mutable reference to it.
        let store = unsafe { &*self.store };
        for (memory, claim, _) in self.claimed.drain(..) {
            memory.of(store).unclaim(claim);
        }
    }
}

/// Element segments, data segments (images first), start function.
///
/// # Safety
/// As for [`instantiate`]; `instance` was just added to the store.
unsafe fn initialise(
    store_ptr: *mut StoreOpaque,
    instance: Instance,
    mut claims: Claims,
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
                    // (A 64-bit table's offset past `u32::MAX` is out of bounds as that is.)
                    let wide = info.tables[index as usize].table64;
                    let dst = inner.eval_offset(store, &offset, wide);
                    let dst = u32::try_from(dst).unwrap_or(u32::MAX);
                    if !inner.table_init(store, index, i as u32, dst, 0, seg.items.len() as u32) {
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
        while let Some((memory, claim, index)) = claims.pop() {
            let image = ArtifactImage::of(artifact, index).expect("claimed for its image");
            memory.of(store).init_image(claim, &image)?;
        }
        drop(claims);
        // The artifact keeps only the segments no image holds (`Artifact::data_slot`): every
        // active one here targets a memory without an image.
        for (i, seg) in info.datas.iter().enumerate() {
            let ArchivedSegmentMode::Active { index, offset } = &seg.mode else {
                continue;
            };
            let wide = info.memories[index.to_native() as usize].memory64;
            let dst = inner.eval_offset(store, &offset.native(), wide);
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
                // As a call into wasm with no fuel left, a run of the start function with none
                // left would have trapped at once.
                if *left <= 0 || (*left as u64) < needed {
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
