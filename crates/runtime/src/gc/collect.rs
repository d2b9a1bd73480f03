//! Collecting a store's GC heap: a copying collection, and the roots it starts from.
//!
//! When an allocation of generated code does not fit, the heap is collected before it grows
//! ([`GcHeap::alloc_collecting`]): a copying collection (Cheney's) into a fresh slot of the
//! pool, which then replaces the old one (given back reset by marks, as at the store's drop).
//! Copying suits the workload: its cost is what is alive, which is little in a call that
//! made much garbage; it leaves the free space in one piece, so that allocation stays a bump;
//! and it needs no free lists, no mark bits and no sweep. The price is that objects move: every
//! place that holds a reference is found and updated ([`roots`]): the wasm frames of the
//! store's calls on this thread (the stack maps of the calls they are in, see
//! `ephem_module::CallSite::refs`: generated code reloads such references after every call),
//! globals, tables, element segments' items, exceptions' values, the host's handles (a root
//! table, see `refs`) and the values a builtin holds. The new heap is then grown (doubled) when
//! what survived takes more than half of it, under the same bound and limiter as growth. The
//! old and new slots exist together only during the collection; the limiter is asked for the
//! heap's size, not for that moment's twice as much.
//!
//! A collection happens only where an allocation of generated code (inside the builtin it
//! called) or of the host (`StructRef::new`, `ArrayRef::new`) does not fit: there every frame
//! of the store's calls is a wasm frame with a stack map, or a host frame that holds
//! references only through handles. Allocations of the runtime itself (constant expressions
//! while an instance is made) grow the heap instead.

use std::collections::HashMap;

use ephem_module::gc::{self, ALIGN, HEADER, LENGTH};
use ephem_module::{StorageType, TypeDef, native};

use super::{GcHeap, PAGE, Shape, pooled};

/// The host's handles: the words of the objects, and where each is (see `refs`).
#[derive(Default)]
pub(super) struct Held {
    words: Vec<u64>,
    index: HashMap<u64, u64, std::hash::BuildHasherDefault<WordHasher>>,
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
        let size = shape.bytes(len)?;
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
    let refs = |frame: &crate::signals::SiteFrame<'_>| {
        for r in frame.site.refs.iter() {
            let at = frame.sp + r.to_native() as usize;
            if at + 8 <= frame.fp {
                f(at as *mut u64);
            }
        }
    };
    // SAFETY: per the contract.
    unsafe { crate::signals::for_each_site_frame(fp, top, refs) }
}
