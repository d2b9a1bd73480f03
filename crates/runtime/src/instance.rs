//! An instance: the handle the embedder holds ([`Instance`]) and the state its store owns
//! ([`InstanceData`]): its loaded code, its vmctx, and which of the store's memories, tables and
//! globals are its own, imported ones first.
//!
//! `instantiate` makes one; generated code reaches it through its vmctx, whose instance field
//! points back at the data ([`InstanceData::from_vmctx`]), which is how builtins (`builtins`)
//! and host functions find the calling instance. What lies here serves both the instantiation
//! (segments, constant expressions) and the builtins that redo the same at run time
//! (`memory.init`, `table.init`, lazily made funcrefs).
//!
//! Invariants:
//! - The data is boxed in its store and never moves: the vmctx, lazy tables and imported host
//!   functions' funcrefs point at it. It lives as long as its store, which frees all of an
//!   instance's memories, tables and globals with it, so no pointer between them dangles.
//! - The vmctx is written by the instantiation and, each lazy funcref slot, by whatever first
//!   needs that funcref, before anything reads it ([`InstanceData::slot_funcref`]).
//! - Nothing of one instance is visible to another except what one exports and the other
//!   imports: each instance has a vmctx and globals of its own, and its memories come reset
//!   from the pool (see `memory`).

use std::cell::{RefCell, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use ephem_code_memory::LoadedCode;
use ephem_module::{
    ArchivedConstExpr, ConstExpr, ConstOp, EntityIndex, ValRaw, VmFuncRef, VmOffsets, native,
};

use crate::context::{AsContext, AsContextMut, raw_store};
use crate::instantiate::{Imports, InstantiateTimings, instantiate};
use crate::memory::LinearMemory;
use crate::store::{StoreGlobal, StoreMemory, StoreOpaque, StoreTable, Stored};
use crate::table::TableData;
use crate::{
    Error, Extern, Func, Global, Memory, Module, Table, TypedFunc, WasmParams, WasmResults,
};

/// See [`Instance::defined_state`]: memories' bytes, and globals' raw values.
#[doc(hidden)]
pub struct DefinedState {
    pub memories: Vec<Vec<u8>>,
    pub globals: Vec<ValRaw>,
}

/// An instance of a module: a handle, valid with the store it was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instance(pub(crate) Stored);

/// An instance's state, owned by its store.
pub(crate) struct InstanceData {
    /// Dropped first: the code must be gone from the registry before its module can go.
    pub(crate) code: LoadedCode,
    pub(crate) vmctx: VmCtx,
    pub(crate) handle: Instance,
    pub(crate) module: Module,
    /// Where the instance's memories, tables and globals are in the store, by their indices in
    /// the module (imported ones first).
    pub(crate) memories: Vec<StoreMemory>,
    pub(crate) tables: Vec<StoreTable>,
    pub(crate) globals: Vec<StoreGlobal>,
    /// The store's indices of the instance's tags (see `exceptions`).
    pub(crate) tags: Vec<u32>,
    pub(crate) dropped_datas: RefCell<Vec<bool>>,
    pub(crate) dropped_elems: RefCell<Vec<bool>>,
    /// Per element segment with items that are extended constant expressions (GC's objects):
    /// every item's value, made once at instantiation as the specification says (two
    /// `table.init`s of one segment give the same objects). Empty when no segment has one.
    pub(crate) elem_values: Vec<Option<Box<[std::cell::Cell<usize>]>>>,
}

/// The vmctx bytes, 16-aligned, followed by the cells of the globals the instance defines
/// (which the vmctx points at, as at imported ones). Generated code, builtins and the
/// instance's globals write it while it is shared, so every word is a cell.
pub(crate) struct VmCtx(Box<[UnsafeCell<MaybeUninit<ValRaw>>]>);

impl VmCtx {
    /// A vmctx of `size` bytes, the first `zeroed` of them zeros, and `globals` cells; the rest
    /// (lazy funcref slots) is written before anything reads it, and each global's cell when
    /// it is made, so zeroing them would only cost time.
    pub(crate) fn new(size: u32, zeroed: u32, globals: usize) -> VmCtx {
        let words = (size as usize).div_ceil(16);
        let mut words: Box<[UnsafeCell<MaybeUninit<ValRaw>>]> = (0..(words + globals).max(1))
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        let zeroed = (zeroed as usize).div_ceil(16).min(words.len());
        for word in &mut words[..zeroed] {
            *word.get_mut() = MaybeUninit::new(0);
        }
        VmCtx(words)
    }
    /// The vmctx's address, valid for reads and writes of its words (they are cells).
    pub(crate) fn ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.0.as_ptr()).cast()
    }
    /// The cell of defined global `k` (of the `globals` made with the vmctx of `size` bytes).
    pub(crate) fn global_cell(&self, size: u32, k: usize) -> *mut ValRaw {
        let at = (size as usize).div_ceil(16) + k;
        self.0[at].get().cast()
    }
    /// # Safety
    /// `offset` must be a field of this vmctx of type `T` (per `VmOffsets`).
    pub(crate) unsafe fn write<T>(&self, offset: u32, value: T) {
        // SAFETY: per the contract, in bounds and aligned; the words are cells, written only by
        // this instance's code, its builtins and this, on one thread at a time.
        unsafe { self.ptr().add(offset as usize).cast::<T>().write(value) }
    }
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
        unsafe {
            instantiate(
                raw_store(&mut store),
                module,
                Imports::Unchecked(imports),
                None,
            )
        }
    }

    /// As [`Instance::new`], and reports how long each part took: the measurement seam of the
    /// fresh-path benchmark.
    pub fn new_timed(
        mut store: impl AsContextMut,
        module: &Module,
        imports: &[Extern],
    ) -> Result<(Instance, InstantiateTimings), Error> {
        let mut timings = InstantiateTimings::default();
        let imports = Imports::Unchecked(imports);
        // SAFETY: derived from the exclusive borrow, which lasts for the call.
        let instance =
            unsafe { instantiate(raw_store(&mut store), module, imports, Some(&mut timings))? };
        Ok((instance, timings))
    }

    pub(crate) fn data<'a>(&self, store: &'a StoreOpaque) -> &'a InstanceData {
        store.instance(self.0)
    }

    /// Every defined memory's bytes and every defined global's value, in module order: what a
    /// start function left, for the compile-time snapshot (`compile::snapshot`).
    #[doc(hidden)]
    pub fn defined_state(&self, store: impl AsContext) -> DefinedState {
        let store = store.as_context();
        let store = store.opaque();
        let inner = self.data(store);
        let info = inner.module.inner.artifact.info();
        let memories = inner.memories[info.imported_memories.to_native() as usize..]
            .iter()
            // SAFETY: no wasm runs while the store is borrowed; the bytes are copied out.
            .map(|&m| unsafe { m.of(store).bytes_to_read() }.to_vec())
            .collect();
        let globals = inner.globals[info.imported_globals.to_native() as usize..]
            .iter()
            .map(|&g| g.of(store).get())
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

impl InstanceData {
    /// The instance whose vmctx is `vmctx`.
    ///
    /// # Safety
    /// `vmctx` must be the context of a live instance (generated code passes its own), which
    /// must outlive `'a`.
    pub(crate) unsafe fn from_vmctx<'a>(vmctx: *mut u8) -> &'a InstanceData {
        // SAFETY: per the contract; the instance field was written at instantiation, before
        // any code could run, and points at the boxed data, which never moves.
        unsafe {
            &*vmctx
                .add(VmOffsets::INSTANCE as usize)
                .cast::<*const InstanceData>()
                .read()
        }
    }

    /// Whether the instance's code is metered.
    pub(crate) fn metered(&self) -> bool {
        self.module.inner.artifact.info().metered
    }

    /// What a bulk operation over `n` bytes or elements checks first: the call's deadline (a
    /// signal cannot stop host code, see `interrupt`), then the fuel it charges. `Some` is the
    /// trap flag to return: 3 interrupted, 2 out of fuel.
    pub(crate) fn begin_bulk(&self, store: &StoreOpaque, n: u64) -> Option<u32> {
        if crate::signals::interrupt_due() {
            return Some(3);
        }
        // (The store's word: every instance of a store is metered or none is, see
        // `StoreOpaque::admits_code`; the module's would be a call into its artifact.)
        if !store.runs_metered() {
            return None;
        }
        // SAFETY: the store's fuel cell, which the calling code wrote back before this call
        // and reads again after it; nothing else touches it meanwhile.
        unsafe {
            let left = &mut *store.fuel.get();
            // What cannot be paid leaves -1, never less: metered code subtracts further from
            // what it finds, which must not wrap around (a 64-bit length reaches 2^63).
            *left = (i64::try_from(n).ok())
                .and_then(|n| left.checked_sub(n))
                .filter(|&l| l >= 0)
                .unwrap_or(-1);
            (*left < 0).then_some(2)
        }
    }

    /// A segment's offset: an `i32` (zero-extended), or with `wide` (a 64-bit memory's) an
    /// `i64`.
    pub(crate) fn eval_offset(&self, store: &StoreOpaque, e: &ConstExpr, wide: bool) -> u64 {
        let global = |g: u32| self.globals[g as usize].of(store).get();
        let value = match *e {
            ConstExpr::I32(v) => v as u32 as u64,
            ConstExpr::I64(v) => v as u64,
            ConstExpr::GlobalGet(g) => global(g) as u64,
            ConstExpr::Extended(i) => {
                let inner = &self.module.inner;
                let env = crate::gc::Consts {
                    store,
                    module: inner,
                    global,
                    funcref_at: |_| 0,
                };
                // (An offset is integer arithmetic: it makes nothing.)
                extended(inner.artifact.info(), i, &env).unwrap_or(0) as u64
            }
            _ => unreachable!("validated: offsets are integer constants"),
        };
        if wide { value } else { value as u32 as u64 }
    }

    /// Function `index`, which has a funcref (it is imported or eager).
    pub(crate) fn func(&self, store: &StoreOpaque, index: u32) -> Func {
        let m = &self.module.inner;
        let at = m.offsets.funcref(m.funcref_slot(index));
        let ptr = self.vmctx.ptr().wrapping_add(at as usize) as *mut VmFuncRef;
        Func::wasm(store.id, NonNull::new(ptr).expect("in the vmctx"))
    }

    pub(crate) fn export(&self, store: &StoreOpaque, index: EntityIndex) -> Extern {
        let stored = |index: u32| Stored {
            store: store.id,
            index,
        };
        match index {
            EntityIndex::Func(i) => Extern::Func(self.func(store, i)),
            EntityIndex::Memory(i) => Extern::Memory(Memory(stored(self.memories[i as usize].0))),
            EntityIndex::Table(i) => Extern::Table(Table(stored(self.tables[i as usize].0))),
            EntityIndex::Global(i) => Extern::Global(Global(stored(self.globals[i as usize].0))),
            EntityIndex::Tag(i) => Extern::Tag(crate::Tag(stored(self.tags[i as usize]))),
        }
    }

    pub(crate) fn memory<'a>(&self, store: &'a StoreOpaque, index: u32) -> &'a LinearMemory {
        self.memories[index as usize].of(store)
    }

    pub(crate) fn table<'a>(&self, store: &'a StoreOpaque, index: u32) -> &'a TableData {
        self.tables[index as usize].of(store)
    }

    pub(crate) fn table_init(
        &self,
        store: &StoreOpaque,
        table: u32,
        elem: u32,
        dst: u32,
        src: u32,
        len: u32,
    ) -> bool {
        let table = self.table(store, table);
        let (Some(d), Some(values)) = (
            table.range(dst, len),
            self.elem_values(store, elem, src, len),
        ) else {
            return false;
        };
        // SAFETY: no other reference to the table's elements is alive while the host fills it
        // (`values` reads globals and the vmctx, never a table).
        let elements = unsafe { table.write(d) };
        for (element, v) in elements.iter_mut().zip(values) {
            *element = table.tag(v);
        }
        true
    }

    /// Items `src..src + len` of element segment `elem` (none once dropped) as generated code
    /// holds references; `None` past the segment's end.
    pub(crate) fn elem_values<'a>(
        &'a self,
        store: &'a StoreOpaque,
        elem: u32,
        src: u32,
        len: u32,
    ) -> Option<impl Iterator<Item = usize> + 'a> {
        let seg = &self.module.inner.artifact.info().elems[elem as usize];
        let items: &[ArchivedConstExpr] = if self.dropped_elems.borrow()[elem as usize] {
            &[]
        } else {
            &seg.items
        };
        src.checked_add(len)
            .filter(|&e| e as usize <= items.len())?;
        let (src, len) = (src as usize, len as usize);
        let slots = &self.module.inner.artifact.elem_slots(elem)[src..src + len];
        let funcrefs = self.vmctx.ptr() as usize + self.module.inner.offsets.funcref(0) as usize;
        let made = self
            .elem_values
            .get(elem as usize)
            .and_then(|m| m.as_deref());
        let items = items[src..src + len].iter().zip(slots).enumerate();
        Some(items.map(move |(k, (item, slot))| match item {
            ArchivedConstExpr::RefFunc(_) => {
                funcrefs + VmOffsets::FUNCREF_SIZE as usize * slot.to_native() as usize
            }
            ArchivedConstExpr::RefNull => 0,
            ArchivedConstExpr::GlobalGet(g) => {
                self.globals[g.to_native() as usize].of(store).get() as usize
            }
            // (Made at instantiation: see `elem_values`.)
            _ => made.map_or(0, |made| made[src + k].get()),
        }))
    }

    /// The bytes of data segment `data` (none once dropped, or when its image applied it).
    pub(crate) fn data_bytes(&self, data: u32) -> &[u8] {
        self.data_bytes_at(self.module.inner.artifact.data_slot(data))
    }

    /// The bytes of the segment in `slot` of the artifact's kept segments (none once dropped;
    /// `None`: an active segment its image applied).
    fn data_bytes_at(&self, slot: Option<usize>) -> &[u8] {
        let artifact = &self.module.inner.artifact;
        match slot {
            Some(k) if !self.dropped_datas.borrow()[k] => {
                let range = &artifact.info().datas[k].range;
                &artifact.data()[range.start.to_native() as usize..range.end.to_native() as usize]
            }
            _ => &[],
        }
    }

    /// The lazy funcref slots' entries in the loaded text: (function, code offset), sorted by
    /// function (see the artifact's `lazy_slots`).
    pub(crate) fn lazy_slots(&self) -> &[[u32; 2]] {
        let (at, count) = self.module.inner.artifact.lazy_slots();
        // SAFETY: the artifact's checks hold the entries inside the text, at an 8-aligned
        // offset of a page-aligned text that lives as long as this instance and never changes.
        unsafe {
            std::slice::from_raw_parts(self.code.as_ptr().add(at as usize).cast(), count as usize)
        }
    }

    /// Lazy table `table`'s initial elements in the loaded text (0 null, else funcref slot
    /// + 1); empty for a table that is not lazy.
    pub(crate) fn lazy_elements(&self, table: u32) -> &[u32] {
        let Some((at, len)) = self.module.inner.artifact.lazy_table(table) else {
            return &[];
        };
        // SAFETY: the artifact's checks hold the elements inside the text, at a 4-aligned
        // offset of a page-aligned text that lives as long as this instance and never changes.
        unsafe {
            std::slice::from_raw_parts(self.code.as_ptr().add(at as usize).cast(), len as usize)
        }
    }

    /// The funcref in `slot` of this instance's vmctx, written first if it is a lazy one.
    pub(crate) fn slot_funcref(&self, slot: u32) -> usize {
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
    pub(crate) fn memory_init(
        &self,
        store: &StoreOpaque,
        mem: u32,
        data: u32,
        dst: u64,
        src: u32,
        len: u32,
    ) -> bool {
        let slot = self.module.inner.artifact.data_slot(data);
        self.memory_init_at(store, mem, slot, dst, src, len)
    }

    /// `memory.init` of the segment in `slot` of the artifact's kept segments; `None`: an
    /// active segment its image applied, dropped since instantiation (it reads as empty).
    pub(crate) fn memory_init_at(
        &self,
        store: &StoreOpaque,
        mem: u32,
        slot: Option<usize>,
        dst: u64,
        src: u32,
        len: u32,
    ) -> bool {
        let bytes = self.data_bytes_at(slot);
        let memory = self.memory(store, mem);
        let Some(src_end) = end_within(src.into(), len.into(), bytes.len()) else {
            return false;
        };
        if end_within(dst, len.into(), memory.len()).is_none() {
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

/// The end of `[at, at + len)` if it lies within `limit` bytes. Computed in `usize` (64 bits on
/// every host ephem supports): a range may end exactly at 2^32, at the end of a 4 GiB memory.
pub(crate) fn end_within(at: u64, len: u64, limit: usize) -> Option<usize> {
    let end = at.checked_add(len).and_then(|e| usize::try_from(e).ok())?;
    (end <= limit).then_some(end)
}

/// The value of extended constant expression `index` of `info` (checked when the artifact was
/// opened) in `env`; `None` when an object it makes does not fit the store's GC heap.
pub(crate) fn extended(
    info: &ephem_module::ArchivedModuleInfo,
    index: u32,
    env: &impl ephem_module::ConstEnv,
) -> Option<ValRaw> {
    let ops = info.extended[index as usize]
        .iter()
        .map(native::<ConstOp, _>);
    ConstOp::eval(ops, env)
}
