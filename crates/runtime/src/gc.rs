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
//! When an allocation of generated code does not fit, the heap is collected before it grows
//! ([`GcHeap::alloc_collecting`]): a copying collection (Cheney's) into a fresh slot of the
//! pool, which then replaces the old one (given back reset by marks, as at the store's drop).
//! Copying suits the workload: its cost is what is alive, which is little in a call that
//! made much garbage; it leaves the free space in one piece, so that allocation stays a bump;
//! and it needs no free lists, no mark bits and no sweep. The price is that objects move: every
//! place that holds a reference is found and updated ([`Roots`]): the wasm frames of the
//! store's calls on this thread (the stack maps of the calls they are in, see
//! `ephem_module::CallSite::refs`: generated code reloads such references after every call),
//! globals, tables, element segments' items, exceptions' values, the host's handles (a root
//! table, see `refs`) and the values a builtin holds. The new heap is then grown (doubled) when
//! what survived takes more than half of it, under the same bound and limiter as growth. The
//! old and new slots exist together only during the collection; the limiter is asked for the
//! heap's size, not for that moment's twice as much.
//!
//! A collection happens only inside a builtin that generated code called to allocate, where
//! every frame of the store's calls is a wasm frame with a stack map or a host frame that
//! holds references only through handles. Allocations of the runtime itself (constant
//! expressions while an instance is made) grow the heap instead.
//!
//! # Safety of what objects hold
//! Objects are written only by generated code (fields and elements of objects the validator
//! typed) and by this runtime, so a header always says what its object is. Every address made
//! from a reference stays within the heap's slot whatever the reference holds (see
//! `ephem_module::gc`), and the runtime reads objects only through ranges it checks against
//! the heap's length.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;

use ephem_module::gc::{self, ALIGN, HEADER, LENGTH};
use ephem_module::{MemoryType, StorageType, TypeDef, VmGcHeap, native};

use crate::memory::LinearMemory;

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

/// The host's handles: the words of the objects, and where each is (see `refs`).
#[derive(Default)]
struct Held {
    words: Vec<u64>,
    index: HashMap<u64, u64, std::hash::BuildHasherDefault<WordHasher>>,
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
        let (word, size, len) = match shape {
            // (A struct's second header word is its type's depth: see `ephem_module::gc`.)
            Shape::Struct { word, size, depth } => (word, size, depth),
            Shape::Array { word, elem } => (word, gc::array_size(elem, len)?, len),
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
        header[LENGTH as usize..].copy_from_slice(&len.to_le_bytes());
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

/// Marks an object of the old heap as copied: its type word, with where the copy is in its
/// length word. (Canonical ids stay far below it: the engine's registry starts at 2^30.)
const FORWARDED: u32 = u32::MAX;

impl GcHeap {
    /// How many collections the heap has had.
    pub(crate) fn collections(&self) -> u64 {
        self.collections.get()
    }

    /// What the last collection's work is worth in fuel: a unit per word it copied and per
    /// place it looked at for references.
    pub(crate) fn last_work(&self) -> u64 {
        self.work.get()
    }

    /// The index of object `word`'s handle (see `refs`): the one it has, or a new one.
    pub(crate) fn hold(&self, word: u64) -> u64 {
        let mut held = self.held.borrow_mut();
        let held = held.get_or_insert_with(Box::default);
        if let Some(&i) = held.index.get(&word) {
            return i;
        }
        let i = held.words.len() as u64;
        held.words.push(word);
        held.index.insert(word, i);
        i
    }

    /// The word of the object of handle index `i`, where it is now.
    pub(crate) fn held(&self, i: u64) -> u64 {
        let held = self.held.borrow();
        held.as_ref()
            .and_then(|h| h.words.get(i as usize).copied())
            .unwrap_or(0)
    }

    /// [`GcHeap::alloc`], but an object that does not fit the heap as it is gets a collection
    /// first, when there is a heap to collect: `roots` gives every place outside the heap
    /// that may hold a reference into it (see [`roots`]).
    pub(crate) fn alloc_collecting(
        &self,
        engine: &crate::Engine,
        shape: Shape,
        len: u32,
        may_grow: impl Fn(usize, usize) -> bool,
        roots: impl FnOnce(&mut dyn FnMut(*mut u64)) -> u64,
    ) -> Option<u32> {
        let size = match shape {
            Shape::Struct { size, .. } => size,
            Shape::Array { elem, .. } => gc::array_size(elem, len)?,
        };
        // SAFETY: a read of the heap's definition; generated code is suspended in a builtin.
        let (next, end) = unsafe { ((*self.vm.get()).next, (*self.vm.get()).end) };
        if next + u64::from(size) > end && self.memory.borrow().is_some() {
            self.collect(engine, u64::from(size), &may_grow, roots);
        }
        self.alloc(engine, shape, len, may_grow)
    }

    /// Copies what `roots` and the host's handles reach into a fresh slot, which becomes the
    /// heap, grown if what survived takes more than half of it (see the module
    /// documentation); `size` is the allocation that asked. Does nothing when the pool has no
    /// slot to copy into (the heap then grows, if it may).
    fn collect(
        &self,
        engine: &crate::Engine,
        size: u64,
        may_grow: &dyn Fn(usize, usize) -> bool,
        roots: impl FnOnce(&mut dyn FnMut(*mut u64)) -> u64,
    ) {
        let mut slot = self.memory.borrow_mut();
        let Some(from) = slot.as_ref() else {
            return;
        };
        let max = (engine.max_gc_heap_bytes() as u64).min((1 << 32) - PAGE);
        let vm = self.vm.get();
        // SAFETY: a read of the heap's definition; generated code is suspended in a builtin.
        let (used, len) = unsafe { ((*vm).next as usize, (*vm).end) };
        let Some(to) = pooled(engine, len, max) else {
            return;
        };
        let used = used.min(from.len());
        // SAFETY: the old heap's allocated bytes and the new slot's accessible ones: two
        // reservations, which nothing else reads or writes while the collection runs (wasm
        // is suspended in the builtin that asked; the host holds no slice of the heap).
        let (old, new) = unsafe {
            (
                std::slice::from_raw_parts_mut(from.base(), used),
                std::slice::from_raw_parts_mut(to.base(), to.len()),
            )
        };
        let mut copy = Copying {
            old,
            new,
            next: ALIGN as usize,
            engine,
            layouts: HashMap::default(),
            last: None,
        };
        // Each place once: an imported global or table may be listed twice.
        let mut places = Vec::new();
        let looked = roots(&mut |p| places.push(p)) + places.len() as u64;
        places.sort_unstable();
        places.dedup();
        for p in places {
            // SAFETY: `roots` gives places outside the heap that hold references, alive and
            // not otherwise borrowed while the collection runs (its contract).
            unsafe { *p = copy.forward(*p) };
        }
        let mut looked = looked;
        if let Some(held) = self.held.borrow_mut().as_mut() {
            looked += held.words.len() as u64;
            for w in &mut held.words {
                *w = copy.forward(*w);
            }
            held.index = (held.words.iter().enumerate())
                .map(|(i, &w)| (w, i as u64))
                .collect();
        }
        copy.scan();
        let live = copy.next as u64;
        from.mark(0, used);
        // SAFETY: the heap's definition; generated code is suspended in a builtin.
        unsafe {
            (*vm).base = to.base();
            (*vm).next = live;
        }
        // (The old slot goes back to the pool, reset by its marks.)
        *slot = Some(to);
        drop(slot);
        self.collections.set(self.collections.get() + 1);
        self.work.set(live / 8 + looked);
        // Half full or more after a collection: twice the room, so that the next is as far.
        // SAFETY: as above.
        let end = unsafe { (*vm).end };
        if (live + size) * 2 > end {
            let _ = self.room(engine, (2 * end).min(max), may_grow);
        }
    }
}

/// One collection's copying: from the old heap's allocated bytes to the new slot.
struct Copying<'a> {
    old: &'a mut [u8],
    new: &'a mut [u8],
    /// Where the next copy goes in the new slot.
    next: usize,
    engine: &'a crate::Engine,
    /// What the collector needs of each type it met, by header word.
    layouts: HashMap<u32, Option<Layout>, std::hash::BuildHasherDefault<WordHasher>>,
    /// The last header word looked up, and its layout: objects of one type come in runs.
    last: Option<(u32, Option<Layout>)>,
}

/// A hasher for header words and references: one multiplication (they are distinct integers,
/// and a collection looks a header word up per object it copies and per object it scans).
#[derive(Default)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, word: u32) {
        self.0 = u64::from(word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u64(&mut self, word: u64) {
        self.0 = word.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where an object's references are, and its size.
#[derive(Clone)]
enum Layout {
    Struct { size: u32, refs: std::rc::Rc<[u32]> },
    Array { elem: StorageType, refs: bool },
}

impl Layout {
    fn of(engine: &crate::Engine, word: u32) -> Option<Layout> {
        let holds = |s: StorageType| matches!(s, StorageType::Val(t) if t.holds_objects());
        match (
            &*engine.gc_type(word & !gc::ARRAY_BIT)?,
            word & gc::ARRAY_BIT != 0,
        ) {
            (TypeDef::Struct(fields), false) => {
                let layout = gc::struct_layout(fields);
                let refs = (fields.iter().zip(&layout.offsets))
                    .filter(|(f, _)| holds(f.storage))
                    .map(|(_, &at)| at)
                    .collect();
                Some(Layout::Struct {
                    size: layout.size,
                    refs,
                })
            }
            (TypeDef::Array(elem), true) => Some(Layout::Array {
                elem: elem.storage,
                refs: holds(elem.storage),
            }),
            _ => None,
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

impl Copying<'_> {
    fn layout(&mut self, word: u32) -> Option<Layout> {
        if let Some((last, layout)) = &self.last
            && *last == word
        {
            return layout.clone();
        }
        let engine = self.engine;
        let layout = (self.layouts.entry(word))
            .or_insert_with(|| Layout::of(engine, word))
            .clone();
        self.last = Some((word, layout.clone()));
        layout
    }

    /// Where reference `r` of the old heap is in the new one: its object copied there, the
    /// first time. A word that names no object of the old heap stays as it is (only code of
    /// a forged artifact makes one; its accesses stay sandboxed whatever it holds).
    fn forward(&mut self, r: u64) -> u64 {
        if !gc::is_object(r) {
            return r;
        }
        let at = r as usize;
        if !at.is_multiple_of(ALIGN as usize) || at + HEADER as usize > self.old.len() {
            return r;
        }
        let (word, second) = (u32_at(self.old, at), u32_at(self.old, at + LENGTH as usize));
        if word == FORWARDED {
            return u64::from(second);
        }
        let size = match self.layout(word) {
            Some(Layout::Struct { size, .. }) => size,
            Some(Layout::Array { elem, .. }) => match gc::array_size(elem, second) {
                Some(size) => size,
                None => return r,
            },
            None => return r,
        } as usize;
        let to = self.next;
        if at + size > self.old.len() || to + size > self.new.len() {
            return r;
        }
        self.new[to..to + size].copy_from_slice(&self.old[at..at + size]);
        self.old[at..at + 4].copy_from_slice(&FORWARDED.to_le_bytes());
        self.old[at + 4..at + 8].copy_from_slice(&(to as u32).to_le_bytes());
        self.next = to + size;
        to as u64
    }

    /// Forwards the reference at `at` of the new heap.
    fn forward_at(&mut self, at: usize) {
        let r = u64_at(self.new, at);
        let moved = self.forward(r);
        if moved != r {
            self.new[at..at + 8].copy_from_slice(&moved.to_le_bytes());
        }
    }

    /// Forwards the references of every object copied, those it copies on the way too.
    fn scan(&mut self) {
        let mut at = ALIGN as usize;
        while at < self.next {
            let (word, len) = (u32_at(self.new, at), u32_at(self.new, at + LENGTH as usize));
            let size = match self.layout(word) {
                Some(Layout::Struct { size, refs }) => {
                    for &field in refs.iter() {
                        self.forward_at(at + field as usize);
                    }
                    size
                }
                Some(Layout::Array { elem, refs }) => {
                    if refs {
                        for k in 0..len as usize {
                            self.forward_at(at + HEADER as usize + 8 * k);
                        }
                    }
                    gc::array_size(elem, len).unwrap_or(u32::MAX)
                }
                // (Only what `forward` copied is here, and it knew the type.)
                None => return,
            };
            at += size as usize;
        }
    }
}

/// Every place outside `store`'s heap that may hold a reference into it, given to `f`, while
/// generated code
/// of the store is suspended in a builtin called through a stub whose frame is at `fp`, or
/// (`fp` of `None`) while the host holds the store (in a host function wasm called, or
/// outside any call): what the stack maps of its wasm frames name, its globals, tables,
/// element segments' items and exceptions' values, and `extra` (values the caller holds).
/// Returns how many other places it looked at (table elements that name no object).
///
/// # Safety
/// `fp` is the frame pointer of a stub that generated code of `store`'s innermost call on
/// this thread called, or `None` where no generated code of this thread runs but behind host
/// calls; the places given stay valid until the collection ends.
pub(crate) unsafe fn roots(
    store: &crate::store::StoreOpaque,
    fp: Option<usize>,
    extra: &mut [u64],
    f: &mut dyn FnMut(*mut u64),
) -> u64 {
    let mut looked = 0;
    let me = store as *const crate::store::StoreOpaque as *mut u8;
    crate::signals::wasm_stretches(me, fp, |from, top| {
        // SAFETY: per the contract: a stretch of this store's wasm frames on this thread.
        unsafe { frame_roots(from, top, f) }
    });
    for g in &store.globals {
        if g.ty.ty.holds_objects() {
            f(g.vm().cast());
        }
    }
    for t in &store.tables {
        looked += t.objects(f);
    }
    for i in &store.instances {
        let elems = &i.module.inner.artifact.info().elems;
        for (values, e) in i.elem_values.iter().zip(elems.iter()) {
            let ty: ephem_module::ValType = native(&e.ty);
            if let (true, Some(values)) = (ty.holds_objects(), values) {
                for v in values.iter() {
                    f(v.as_ptr().cast());
                }
            }
        }
    }
    if let Some(exceptions) = store.exceptions.get() {
        exceptions.objects(&store.engine, f);
    }
    for e in extra {
        f(e);
    }
    looked
}

/// The places the stack maps name in the wasm frames from the one whose callee's frame
/// pointer is `fp` up to `top`.
///
/// # Safety
/// `[fp, top)` is a stretch of wasm frames of a call in progress on this thread, as
/// [`crate::signals::wasm_stretches`] gives it.
unsafe fn frame_roots(fp: usize, top: usize, f: &mut dyn FnMut(*mut u64)) {
    use crate::module::ModuleInner;
    let mut frame = fp;
    while frame.is_multiple_of(8) && frame + 16 <= top {
        // SAFETY: `[frame, frame + 16)` lies in this thread's stack between a stub's frame
        // and the call's entry: a saved frame pointer and a return address.
        let (caller_fp, ret) =
            unsafe { (*(frame as *const usize), *((frame + 8) as *const usize)) };
        let Some((code_start, code_tag)) = ephem_code_memory::registry::lookup(ret) else {
            break;
        };
        // SAFETY: a registry tag is the `ModuleInner` of the published code, alive while the
        // store that runs this call is (see `exceptions::unwind`).
        let m = unsafe { &*(code_tag as *const ModuleInner) };
        if let Some(site) = m.artifact.call_site((ret - code_start) as u32) {
            let sp = caller_fp.wrapping_sub(site.frame_offset.to_native() as usize);
            // The frame as the site describes it lies between this one and the entry
            // (metadata that says otherwise, only a forged artifact's, is not followed).
            if frame + 16 <= sp && sp < caller_fp && caller_fp <= top {
                for r in site.refs.iter() {
                    let at = sp + r.to_native() as usize;
                    if at + 8 <= caller_fp {
                        f(at as *mut u64);
                    }
                }
            }
        }
        if caller_fp <= frame {
            break;
        }
        frame = caller_fp;
    }
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
