//! A store's GC heap: where its structs and arrays live (their layout and the reference
//! encoding are `ephem_module::gc`'s).
//!
//! # Made for a fresh instance per call
//! A store's objects all die with it, and most stores live for one call. So the heap is one
//! linear-memory slot taken from the engine's pool on the store's first allocation, objects
//! are bumped into it one after another (by generated code itself while they fit, see
//! `ephem_module::VmGcHeap`; by the runtime otherwise), and the store gives the slot back when
//! it is dropped: the slot's reset, by the write marks the drop sets over everything ever
//! allocated (see `memory`), costs what the store allocated and makes no system call, as a
//! memory's does. Growing the heap grows the
//! slot's memory within its reservation, under the engine's bound
//! ([`crate::EngineConfig::max_gc_heap_bytes`]) and the store's limiter, which sees it as a
//! memory (as wasmtime's does).
//!
//! # Collection
//! When an allocation does not fit, the heap is collected before it grows: see `collect`.
//!
//! # Safety of what objects hold
//! Objects are written only by generated code (fields and elements of objects the validator
//! typed) and by this runtime, so a header always says what its object is. Every address made
//! from a reference stays within the heap's slot whatever the reference holds (see
//! `ephem_module::gc`), and the runtime reads objects only through ranges it checks against
//! the heap's length.

use std::cell::{Cell, RefCell, UnsafeCell};

use ephem_module::gc::{self, ALIGN, HEADER, LENGTH};
use ephem_module::{MemoryType, StorageType, TypeDef, VmGcHeap, native};

use crate::memory::LinearMemory;

mod collect;
pub(crate) mod types;

use collect::Held;
pub(crate) use collect::roots;

const PAGE: u64 = 65536;

/// A store's GC heap (see the module documentation).
pub(crate) struct GcHeap {
    /// What every vmctx of the store points at. Boxed with the store: its address is fixed.
    vm: UnsafeCell<VmGcHeap>,
    /// The slot the heap is in, once made; a collection replaces it.
    memory: RefCell<Option<LinearMemory>>,
    /// The objects the host holds handles on (see `refs`), once it holds one: a store that
    /// never hands the host an object makes and drops nothing for it.
    held: RefCell<Option<Box<Held>>>,
    /// Collections so far.
    collections: Cell<u64>,
    /// What the last collection's work is worth in fuel (see [`GcHeap::last_work`]).
    work: Cell<u64>,
}

impl Default for GcHeap {
    fn default() -> GcHeap {
        GcHeap {
            vm: UnsafeCell::new(VmGcHeap {
                base: std::ptr::null_mut(),
                next: u64::from(ALIGN),
                end: 0,
            }),
            memory: RefCell::new(None),
            held: RefCell::default(),
            collections: Cell::new(0),
            work: Cell::new(0),
        }
    }
}

/// What making an object of a module's struct or array type takes: its header word and its
/// size and depth (a struct's) or its element (an array's).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    Struct { word: u32, size: u32, depth: u32 },
    Array { word: u32, elem: StorageType },
}

impl Shape {
    /// The shape of type `ty` (a struct or array type of `info`) with canonical id `id`.
    pub(crate) fn of(info: &ephem_module::ArchivedModuleInfo, ty: u32, id: u32) -> Option<Shape> {
        let def: TypeDef = native(info.types.get(ty as usize)?);
        let word = gc::type_word(&def, id);
        match def {
            TypeDef::Struct(fields) => Some(Shape::Struct {
                word,
                size: gc::struct_layout(&fields).size,
                depth: info.depth(ty),
            }),
            TypeDef::Array(elem) => Some(Shape::Array {
                word,
                elem: elem.storage,
            }),
            TypeDef::Func(_) => None,
        }
    }

    /// Bytes an object of this shape takes (`len` elements for an array), if it can be made.
    fn bytes(self, len: u32) -> Option<u32> {
        match self {
            Shape::Struct { size, .. } => Some(size),
            Shape::Array { elem, .. } => gc::array_size(elem, len),
        }
    }
}

impl GcHeap {
    /// What the vmctx's `GC_HEAP` points at.
    pub(crate) fn vm(&self) -> *mut VmGcHeap {
        self.vm.get()
    }

    /// A new object of `shape` (an array of `len` elements), zero past its header; `None` when
    /// the heap cannot hold it. `may_grow(current, delta)` asks the store's limiter.
    pub(crate) fn alloc(
        &self,
        engine: &crate::Engine,
        shape: Shape,
        len: u32,
        may_grow: impl Fn(usize, usize) -> bool,
    ) -> Option<u32> {
        let size = shape.bytes(len)?;
        let (word, second) = match shape {
            // (A struct's second header word is its type's depth: see `ephem_module::gc`.)
            Shape::Struct { word, depth, .. } => (word, depth),
            Shape::Array { word, .. } => (word, len),
        };
        let vm = self.vm.get();
        // SAFETY: the heap's definition, which generated code writes only while it runs; it is
        // suspended in a builtin, or none runs, while the runtime allocates.
        let at = unsafe { (*vm).next };
        let end = at + u64::from(size);
        self.room(engine, end, may_grow)?;
        // SAFETY: as above.
        unsafe { (*vm).next = end };
        let mut header = [0; HEADER as usize];
        header[..4].copy_from_slice(&word.to_le_bytes());
        header[LENGTH as usize..].copy_from_slice(&second.to_le_bytes());
        // SAFETY: no wasm code runs on the heap while the runtime allocates (generated code is
        // suspended in a builtin, or none runs), and no other slice of it is alive.
        unsafe { self.bytes(at, u64::from(HEADER))?.copy_from_slice(&header) };
        Some(at as u32)
    }

    /// Makes the heap's length at least `end`: makes the heap, or grows it (to twice its
    /// length if allowed: growth is rare then, else just enough), if the engine's bound and
    /// the limiter allow. The heap's length (`VmGcHeap::end`) is its own, in bytes; its slot's
    /// accessible pages cover it.
    fn room(
        &self,
        engine: &crate::Engine,
        end: u64,
        may_grow: impl Fn(usize, usize) -> bool,
    ) -> Option<()> {
        // (Offsets are 32-bit: the heap ends below 4 GiB.)
        let max = (engine.max_gc_heap_bytes() as u64).min((1 << 32) - PAGE);
        if end > max {
            return None;
        }
        let vm = self.vm.get();
        let mut slot = self.memory.borrow_mut();
        let Some(memory) = slot.as_ref() else {
            let first = end.max(engine.first_gc_heap_bytes() as u64).min(max);
            if !may_grow(0, first as usize) {
                return None;
            }
            let memory = pooled(engine, first, max)?;
            // SAFETY: the heap's own definition, written before any object exists, while no
            // generated code runs on it.
            unsafe {
                (*vm).base = memory.base();
                (*vm).end = first;
            }
            *slot = Some(memory);
            return Some(());
        };
        // SAFETY: a read of the heap's definition; no generated code runs on it meanwhile.
        let len = unsafe { (*vm).end };
        if end > len {
            let doubled = end.max(len * 2).min(max);
            let to = [doubled, end]
                .into_iter()
                .find(|&to| may_grow(len as usize, (to - len) as usize))?;
            let pages = (memory.len() as u64 / PAGE) as u32;
            let delta = (to.div_ceil(PAGE) as u32).saturating_sub(pages);
            if delta > 0 {
                memory.grow(delta)?;
            }
            // SAFETY: the heap's definition; no generated code runs on it meanwhile.
            unsafe { (*vm).end = to };
        }
        Some(())
    }

    /// `[at, at + len)` of the heap to read and write, if it lies within the heap's
    /// accessible memory. (Nothing is marked: the heap's drop marks all it allocated.)
    ///
    /// # Safety
    /// No wasm code may run on the heap while the slice is alive, and no other slice of the
    /// heap may be.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes(&self, at: u64, len: u64) -> Option<&mut [u8]> {
        // SAFETY: a read of the heap's definition, which no generated code writes meanwhile.
        let vm = unsafe { &*self.vm.get() };
        let end = at.checked_add(len)?;
        if vm.base.is_null() || end > vm.end {
            return None;
        }
        // SAFETY: `[base, base + end)` is the heap's accessible memory (the invariant of
        // `VmGcHeap`), and per the contract nothing else reads or writes it meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(vm.base.add(at as usize), len as usize) })
    }

    /// Object `r`'s header words (type word, length), if `r` lies within the heap.
    pub(crate) fn header(&self, r: u64) -> Option<(u32, u32)> {
        // SAFETY: a read of the header, no other slice alive; no wasm runs on the heap while
        // the runtime or the host asks.
        let header = unsafe { self.bytes(r, u64::from(HEADER))? };
        let word =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or_default());
        Some((word(0), word(LENGTH as usize)))
    }

    /// Array `r`'s length and the byte range of its elements `[index, index + count)`, each
    /// of `size` bytes, if they lie within it (and it within the heap).
    pub(crate) fn elements(&self, r: u64, index: u32, count: u32, size: u32) -> Option<(u64, u64)> {
        let (_, len) = self.header(r)?;
        let end = index.checked_add(count)?;
        (end <= len).then(|| {
            let start = r + u64::from(HEADER) + u64::from(index) * u64::from(size);
            (start, u64::from(count) * u64::from(size))
        })
    }
}

/// A fresh slot of `engine`'s pool for a heap of `bytes`, which may grow to `max`.
fn pooled(engine: &crate::Engine, bytes: u64, max: u64) -> Option<LinearMemory> {
    let ty = MemoryType {
        min: bytes.div_ceil(PAGE) as u32,
        max: Some((max / PAGE) as u32),
        page_size_log2: 16,
        memory64: false,
        shared: false,
    };
    let image: Option<&crate::load::ArtifactImage<'_>> = None;
    LinearMemory::pooled(engine, ty, image, true).ok()
}

impl Drop for GcHeap {
    /// Marks everything ever allocated as written, so that the slot's reset clears it (the
    /// objects generated code bumped set no marks of their own).
    fn drop(&mut self) {
        if let Some(memory) = self.memory.get_mut() {
            let next = self.vm.get_mut().next as usize;
            memory.mark(0, next.min(memory.len()));
        }
    }
}

/// Writes `value` (its low `size` bytes; `lo` and `hi` are its low and high 8 bytes) into each
/// `size`-byte element of `out`.
pub(crate) fn fill(out: &mut [u8], size: u32, lo: u64, hi: u64) {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&lo.to_le_bytes());
    bytes[8..].copy_from_slice(&hi.to_le_bytes());
    let value = &bytes[..size as usize];
    for element in out.chunks_exact_mut(size as usize) {
        element.copy_from_slice(value);
    }
}

/// A constant expression's environment while an instance is made or runs: its globals, its
/// funcrefs, and its store's GC heap for the objects GC's constant instructions make.
/// Allocations here ask only the engine's bound, not the store's limiter, which instantiation
/// cannot ask while it holds the store.
pub(crate) struct Consts<'a, G, F> {
    pub(crate) store: &'a crate::store::StoreOpaque,
    pub(crate) module: &'a crate::module::ModuleInner,
    pub(crate) global: G,
    pub(crate) funcref_at: F,
}

impl<G: Fn(u32) -> ephem_module::ValRaw, F: Fn(u32) -> usize> ephem_module::ConstEnv
    for Consts<'_, G, F>
{
    fn global(&self, g: u32) -> u128 {
        (self.global)(g)
    }

    fn ref_func(&self, f: u32) -> u64 {
        (self.funcref_at)(f) as u64
    }

    fn fields(&self, ty: u32) -> usize {
        match self.module.artifact.info().types.get(ty as usize) {
            Some(ephem_module::ArchivedTypeDef::Struct(fields)) => fields.len(),
            _ => 0,
        }
    }

    fn new_object(&self, ty: u32, len: u32, init: ephem_module::ObjectInit<'_>) -> Option<u64> {
        use ephem_module::ObjectInit;
        let types = &self.module.artifact.info().types;
        let shape = self.module.gc_shape(ty)?;
        let heap = &self.store.gc;
        let r = u64::from(heap.alloc(&self.store.engine, shape, len, |_, _| true)?);
        let values = match init {
            ObjectInit::Default => return Some(r),
            ObjectInit::Fill(v) => {
                let Shape::Array { elem, .. } = shape else {
                    return None;
                };
                let size = gc::storage_size(elem);
                let (at, n) = heap.elements(r, 0, len, size)?;
                // SAFETY: the one slice of the heap alive; no wasm runs meanwhile.
                let out = unsafe { heap.bytes(at, n)? };
                fill(out, size, v as u64, (v >> 64) as u64);
                return Some(r);
            }
            ObjectInit::Values(values) => values,
        };
        // Each value the expression gave at its place (`len`, which may be large for the other
        // kinds of initialisation, plays no part).
        let write = |at: u64, size: u32, v: &u128| {
            // SAFETY: the one slice of the heap alive; no wasm runs meanwhile.
            let out = unsafe { heap.bytes(at, u64::from(size))? };
            out.copy_from_slice(&v.to_le_bytes()[..size as usize]);
            Some(())
        };
        match native::<TypeDef, _>(&types[ty as usize]) {
            TypeDef::Struct(fields) => {
                let offsets = gc::struct_layout(&fields).offsets;
                for ((f, at), v) in fields.iter().zip(offsets).zip(values) {
                    write(r + u64::from(at), gc::storage_size(f.storage), v)?;
                }
            }
            TypeDef::Array(elem) => {
                let size = gc::storage_size(elem.storage);
                for (k, v) in (0u64..).zip(values) {
                    write(r + u64::from(HEADER) + k * u64::from(size), size, v)?;
                }
            }
            TypeDef::Func(_) => return None,
        }
        Some(r)
    }
}
