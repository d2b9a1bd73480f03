//! Linear memories ([`LinearMemory`]), and the pool of address-space reservations they live
//! in.
//!
//! Each memory lives in a *slot* (`slot`) that reserves [`RESERVATION`] bytes of address space
//! behind its base: 4 GiB of addresses, 4 GiB of offsets and a page for the widest access, so
//! that any address generated code computes (a 32-bit address plus a 32-bit offset) lands
//! inside it. The base never moves.
//!
//! # Bounds
//! By default generated code compares each access with the memory's length
//! (`ModuleInfo::checks_bounds`; one comparison covers a run of accesses through one pointer)
//! and traps without a fault, except for a memory whose module defines it and never grows it
//! (and a shared one), which faults alone bound (`ModuleInfo::faults_bound`): such a memory
//! keeps its size unless the host grows it, so keeping it tight costs nothing. Code compiled
//! `Compiler::without_bounds_checks` relies on the reservation instead: nothing past the
//! memory's length is accessible, so an out-of-bounds access faults, and the fault becomes a
//! trap (see `signals`).
//!
//! # Invariant
//! `[base, base + length)` is readable and writable, and everything past the slot's
//! accessible part is inaccessible. A memory that code without bounds checks reaches is
//! *tight*: its slot's accessible part is exactly its length. One that only code with checks
//! reaches is *loose*: its slot may have more pages accessible than it has, all of them zero
//! past its length. Every path (new slot, reused slot, growth, [`LinearMemory::tighten`])
//! keeps this true before any wasm runs. A memory stops being loose when code without checks
//! imports it; a memory the embedder makes is never loose.
//!
//! # Growth
//! A loose memory takes a slot with at least its size accessible, grows within it by changing
//! its length, with no system call, and gives it back grown, so that the next memory of its
//! kind grows into the same pages (most modules grow their memory in every call). A tight
//! memory opens new pages with `mprotect`, and its slot's reset closes them again, which makes
//! the kernel flush the other cores' TLBs while it holds `mmap_lock`: that is why memories
//! are loose wherever the code allows it (BENCHMARKS.md). Protection keys could close pages
//! per thread without the kernel; they are not used.
//!
//! # Images, and untouched memories
//! A memory takes its initial contents from its module's image, mapped copy-on-write from the
//! artifact or copied (see `image`, and [`MemoryConfig::map_image_at`]). A slot keeps its image
//! mapped while idle, and the pool prefers such a slot for the next memory of the same artifact
//! and size, which then needs no system call at all. An instance that imports a memory its
//! module has an image for gives it that image the same way while the memory is still
//! *untouched* (see [`LinearMemory`]); one that may hold data gets only the bytes the segments
//! write, copied out of the image.
//!
//! # Nothing of one instance is visible to the next
//! When a memory is dropped, its slot is reset (`reset`) before the pool hands it to anything
//! else: by the write marks generated code and the runtime set, without a system call, or by
//! the kernel's page map where something may have written unmarked.
//!
//! The parts: `config` ([`MemoryConfig`]), `image` (where initial contents come from), `slot`
//! (one reservation and what is mapped in it), `reset` (making a slot clean), `zero` (the page
//! kernels a reset runs), `pool` (the idle slots).

mod config;
mod image;
mod pool;
mod reset;
mod shared;
mod slot;
pub(crate) mod wait;
mod zero;

use std::cell::{Cell, RefCell, UnsafeCell};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use ephem_module::{MemoryType, VmMemory};

pub use config::MemoryConfig;
pub(crate) use image::ImageSource;
pub(crate) use pool::MemoryPool;
pub use shared::{SharedMemory, WaitResult};
use slot::Slot;

pub(crate) const PAGE: u64 = 65536;
const _: () = assert!(1 << ephem_module::MARK_SHIFT == crate::pagemap::PAGE);
/// Most pages a memory can have: its type's bound, or `MemoryType::max_pages`.
fn max_pages(ty: MemoryType) -> u64 {
    ty.most_pages()
}

/// `len` bytes rounded up to whole host pages: what a slot makes accessible for a memory of
/// `len` bytes (one of one-byte pages may end inside a host page).
fn host_pages(len: usize) -> usize {
    len.next_multiple_of(crate::pagemap::PAGE)
}
/// Address space behind each memory base of an ordinary slot: 4 GiB of addresses plus 4 GiB
/// of offsets, plus a page for the widest access.
pub(crate) const RESERVATION: usize = (8 << 30) + PAGE as usize;
/// Address space behind the base of a large slot (see `MemoryType::large`): the largest
/// 64-bit memory, whose accesses are all checked, and a page.
pub(crate) const LARGE_RESERVATION: usize = (64 << 30) + PAGE as usize;
// A large slot holds the largest 64-bit memory, and its write marks, with the one after its
// last page, lie within the slot's marks (an ordinary slot's cover what `MARKS_BEFORE` says).
const _: () = assert!(MemoryType::MAX_MEMORY64_BYTES as usize <= LARGE_RESERVATION);
const _: () = assert!(
    (MemoryType::MAX_MEMORY64_BYTES as usize >> ephem_module::MARK_SHIFT)
        < ephem_module::MARKS_BEFORE_LARGE
);

/// Sets the write marks of `[offset, offset + len)` of the memory whose marks begin at `marks`
/// (see [`ephem_module::MARK_SHIFT`]).
///
/// # Safety
/// `marks` is where a live memory's marks begin (its base less its type's `marks_before`),
/// the range lies within the memory, and no wasm runs on it.
unsafe fn mark_range(marks: *mut u8, offset: usize, len: usize) {
    use ephem_module::MARK_SHIFT;
    if len == 0 {
        return;
    }
    let (first, last) = (offset >> MARK_SHIFT, (offset + len - 1) >> MARK_SHIFT);
    // SAFETY: the marks of pages within a memory lie in its slot's marks region (which
    // covers every page of the largest memory of its kind), which only the memory's users
    // write, never concurrently with this (per the contract).
    unsafe {
        // Most bulk operations span a page or two: stores, not a call of `memset`.
        if last - first < 2 {
            *marks.add(first) = 1;
            *marks.add(last) = 1;
        } else {
            std::ptr::write_bytes(marks.add(first), 1, last - first + 1);
        }
    }
}

/// A memory's bytes as a host function reads and writes them: writes go through
/// [`HostBytes::get_mut`] or [`HostBytes::write`], which set the write marks of what they
/// write (see the module documentation), so that the memory's reset can still trust them. (Made
/// from a plain slice, there is nothing to mark.)
///
/// A shared memory's bytes are never handed out as a slice: other threads may read and write
/// them at any time, which a Rust reference forbids. They are copied in and out instead, a
/// byte at a time as relaxed atomics ([`HostBytes::read`], [`HostBytes::write`]), which is
/// what a guest that does not synchronise with the host's call can observe anyway.
pub struct HostBytes<'a> {
    view: View<'a>,
}

enum View<'a> {
    /// A memory's own bytes and where its marks begin, or a plain slice (`marks` is `None`:
    /// nothing to mark).
    Own {
        bytes: &'a mut [u8],
        marks: Option<*mut u8>,
    },
    /// A shared memory's bytes (see [`HostBytes`]).
    Shared(&'a [UnsafeCell<u8>]),
}

/// `cell` as an atomic byte.
fn atomic(cell: &UnsafeCell<u8>) -> &std::sync::atomic::AtomicU8 {
    // SAFETY: `AtomicU8` has `u8`'s size and alignment, and the cell lives as long as the
    // borrow of it. Every access the host makes to a shared memory's bytes is atomic (this is
    // the only way to them); what the guests' code does to them is wasm's memory model's.
    unsafe { std::sync::atomic::AtomicU8::from_ptr(cell.get()) }
}

impl<'a> HostBytes<'a> {
    /// Bytes of no memory (for tests of host functions).
    pub fn new(bytes: &'a mut [u8]) -> HostBytes<'a> {
        HostBytes {
            view: View::Own { bytes, marks: None },
        }
    }

    /// A shared memory's bytes (see [`HostBytes`]).
    pub fn shared(bytes: &'a [UnsafeCell<u8>]) -> HostBytes<'a> {
        HostBytes {
            view: View::Shared(bytes),
        }
    }

    /// How many bytes there are.
    pub fn len(&self) -> usize {
        match &self.view {
            View::Own { bytes, .. } => bytes.len(),
            View::Shared(cells) => cells.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of `range`, or `None` if it is not within the bytes: borrowed, or copied out
    /// of a shared memory.
    pub fn read(&self, range: std::ops::Range<usize>) -> Option<std::borrow::Cow<'_, [u8]>> {
        match &self.view {
            View::Own { bytes, .. } => bytes.get(range).map(std::borrow::Cow::Borrowed),
            View::Shared(cells) => {
                let cells = cells.get(range)?;
                let copied = cells.iter().map(|c| atomic(c).load(Relaxed)).collect();
                Some(std::borrow::Cow::Owned(copied))
            }
        }
    }

    /// Copies `data` to `at` (marked as written), or `None` if it does not fit.
    pub fn write(&mut self, at: usize, data: &[u8]) -> Option<()> {
        let range = at..at.checked_add(data.len())?;
        if let View::Shared(cells) = &self.view {
            for (cell, &byte) in cells.get(range)?.iter().zip(data) {
                atomic(cell).store(byte, Relaxed);
            }
            return Some(());
        }
        self.get_mut(range)?.copy_from_slice(data);
        Some(())
    }

    /// `range` to write in place (marked as written), or `None` if it is not within the bytes
    /// or they are a shared memory's, which only [`HostBytes::write`] writes.
    pub fn get_mut(&mut self, range: std::ops::Range<usize>) -> Option<&mut [u8]> {
        let View::Own { bytes, marks } = &mut self.view else {
            return None;
        };
        let bytes = bytes.get_mut(range.clone())?;
        if let Some(marks) = *marks {
            // SAFETY: `marks` are the marks of the memory whose bytes these are, alive and not
            // running wasm for as long as `self` borrows them; the range lies within them.
            unsafe { mark_range(marks, range.start, range.len()) };
        }
        Some(bytes)
    }
}

/// A linear memory, shared by the instance defining it and every importer.
///
/// # Untouched memories
/// A memory is *untouched* from when it is made (all zeros) until anything can write it: an
/// accessor hands out its bytes or its base, or an instance claims it. While untouched, its slot
/// may still map an idle image (one of the right size, kept by the pool): those pages are
/// replaced with zeros when the memory is first exposed, unless an instance claims the memory
/// for that very image, in which case nothing needs doing at all. This is how a fresh memory
/// made for an import gets the importing module's image as cheaply as a defined one.
pub struct LinearMemory {
    def: Def,
    ty: MemoryType,
    slot: RefCell<Option<Slot>>,
    /// The engine whose pool the slot goes back to when the memory is dropped. The engine,
    /// not the pool, is held: its count is a [`crate::shared::Shared`]'s.
    engine: crate::Engine,
    untouched: Cell<bool>,
    /// Whether every write since the slot's last reset set its write marks: generated code's
    /// and the runtime's own do; the host's through [`LinearMemory::bytes`] or the base do
    /// not, and the reset then reads the memory (or the page map) instead.
    marked: Cell<bool>,
    /// Whether only code that checks bounds reaches the memory, so that its slot may have
    /// pages accessible past its length (see the module documentation).
    loose: Cell<bool>,
}

/// Where a memory's definition lives: its own, or a shared memory's, which every store that
/// holds the shared memory reads (see `shared`).
enum Def {
    Own(Box<UnsafeCell<VmMemory>>),
    Shared(SharedMemory),
}

/// What an instance found when it claimed a memory it initialises from an image
/// ([`LinearMemory::claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Untouched: all zeros, over the slot's idle image if it has one.
    Untouched,
    /// It may hold data: only the segments' bytes may be written.
    Written,
}

impl LinearMemory {
    /// An untouched memory in a slot of `engine`'s pool; preferably one where `image`, the
    /// image it is meant to take, is already mapped. `loose`: only code that checks bounds
    /// will reach it (see the module documentation).
    /// A shared type gets a new [`SharedMemory`] (which takes no image).
    pub(crate) fn pooled(
        engine: &crate::Engine,
        ty: MemoryType,
        image: Option<&impl ImageSource>,
        loose: bool,
    ) -> Result<LinearMemory, crate::Error> {
        // (Before a slot is taken for it.)
        if u64::from(ty.min) > max_pages(ty) {
            return Err(crate::Error::Limit(format!(
                "cannot allocate {} pages of linear memory",
                ty.min
            )));
        }
        if ty.shared {
            return Ok(LinearMemory::of_shared(
                SharedMemory::new(engine, ty)?,
                engine,
            ));
        }
        let pool = engine.memory_pool();
        let len = ty.bytes(ty.min) as usize;
        pool.reserve(len)?;
        let made = (|| {
            let want = image.and_then(|image| pool.config.mapping(image));
            let mut slot = pool.take(host_pages(len), want, loose, ty.large())?;
            // An image outside the new size could not be replaced later.
            if slot.accessible != host_pages(len)
                && slot.image != want
                && let Err(e) = slot.unmap_image()
            {
                return Err(crate::Error::Limit(format!(
                    "cannot reset a memory slot: {e}"
                )));
            }
            LinearMemory::with_slot(ty, slot, engine.borrow(), loose)
        })();
        if made.is_err() {
            pool.release_bytes(len);
        }
        made
    }

    /// The pool the slot goes back to.
    fn pool(&self) -> &Arc<MemoryPool> {
        self.engine.memory_pool()
    }

    fn with_slot(
        ty: MemoryType,
        mut slot: Slot,
        engine: crate::Engine,
        loose: bool,
    ) -> Result<LinearMemory, crate::Error> {
        // (`pooled` checked the size against the type's bound.)
        let len = ty.bytes(ty.min) as usize;
        let accessible = match loose {
            true => host_pages(len).max(slot.accessible),
            false => host_pages(len),
        };
        slot.set_accessible(accessible).map_err(|e| {
            crate::Error::Limit(format!(
                "cannot allocate {} pages of linear memory: {e}",
                ty.min
            ))
        })?;
        Ok(LinearMemory {
            def: Def::Own(Box::new(UnsafeCell::new(VmMemory {
                base: slot.base,
                length: len as u64,
            }))),
            ty,
            slot: RefCell::new(Some(slot)),
            engine,
            untouched: Cell::new(true),
            marked: Cell::new(true),
            loose: Cell::new(loose),
        })
    }

    /// `shared` as a memory of a store: it has no slot of its own, is never untouched nor
    /// loose, and marks nothing (a shared memory is reset by the page map: see `shared`).
    pub(crate) fn of_shared(shared: SharedMemory, engine: &crate::Engine) -> LinearMemory {
        LinearMemory {
            ty: shared.ty(),
            def: Def::Shared(shared),
            slot: RefCell::new(None),
            engine: engine.borrow(),
            untouched: Cell::new(false),
            marked: Cell::new(false),
            loose: Cell::new(false),
        }
    }

    /// The shared memory this is, if it is one.
    pub fn shared(&self) -> Option<&SharedMemory> {
        match &self.def {
            Def::Shared(s) => Some(s),
            Def::Own(_) => None,
        }
    }

    fn def(&self) -> *mut VmMemory {
        match &self.def {
            Def::Own(d) => d.get(),
            Def::Shared(s) => s.vm(),
        }
    }

    /// Makes the memory strict for code that does not check bounds: its slot's pages past its
    /// length become inaccessible (see the module documentation). Once strict, it stays so.
    pub(crate) fn tighten(&self) -> Result<(), crate::Error> {
        if !self.loose.replace(false) {
            return Ok(());
        }
        let mut slot = self.slot.borrow_mut();
        let slot = slot.as_mut().expect("a live memory has its slot");
        // Nothing of an image lies past the length: it was taken for this memory's size.
        slot.set_accessible(self.len())
            .map_err(|e| crate::Error::Limit(format!("cannot shrink a memory slot: {e}")))
    }

    /// Ends the untouched state before anything can read or write the bytes: an idle image
    /// still mapped is replaced with zeros.
    #[inline]
    fn expose(&self) {
        if !self.untouched.get() {
            return;
        }
        self.expose_untouched();
    }

    #[cold]
    fn expose_untouched(&self) {
        self.untouched.set(false);
        let mut slot = self.slot.borrow_mut();
        let Some(slot) = slot.as_mut() else { return };
        if let Some(image) = slot.image
            && slot.unmap_image().is_err()
        {
            // Cannot replace the pages: zero them in place (private copies). The slot still
            // maps the image, so a reset brings it back, as the pool expects (reading them all:
            // these writes are not marked).
            // SAFETY: the image lies in the accessible pages; nothing references them yet.
            unsafe { std::ptr::write_bytes(slot.base.add(image.offset), 0, image.len) };
            self.writes_unmarked();
        }
    }

    /// For an instance that will give this memory `image` of its artifact: ends the untouched
    /// state and says what the instance found. Pass the result to [`LinearMemory::init_image`], or to
    /// [`LinearMemory::unclaim`] if instantiation fails before that.
    pub(crate) fn claim(&self) -> Claim {
        if self.untouched.replace(false) {
            Claim::Untouched
        } else {
            Claim::Written
        }
    }

    /// Gives a claimed memory its initial contents from `image`, as applying the data segments
    /// the image holds would (none of which can trap: they lie within the minimum size).
    /// - Untouched: the image is mapped (nothing to do if the slot still has it) or, when small
    ///   and in resident pages (see [`MemoryConfig::map_image_at`]), copied.
    /// - Written: only the segments' bytes are copied out of the image.
    pub(crate) fn init_image(
        &self,
        claim: Claim,
        image: &impl ImageSource,
    ) -> Result<(), crate::Error> {
        let (offset, size) = image.range();
        if offset + size > self.len() {
            // Only a memory shrunk below its import type could get here; none can.
            return Err(crate::Error::Limit("memory image out of bounds".into()));
        }
        if claim == Claim::Untouched {
            let config = self.pool().config;
            let mut slot = self.slot.borrow_mut();
            let slot = slot.as_mut().expect("a live memory has its slot");
            // The slot's image is the one it had when the memory was claimed: nothing has
            // changed it since.
            if let Some(want) = config.mapping(image) {
                return slot
                    .map_image(image, want)
                    .map_err(|e| crate::Error::Limit(format!("cannot map memory image: {e}")));
            }
            slot.unmap_image()
                .map_err(|e| crate::Error::Limit(format!("cannot reset a memory slot: {e}")))?;
        }
        self.mark(offset, size);
        // SAFETY: the image lies within the accessible pages (checked above); no wasm runs.
        let dst = unsafe { &mut self.bytes_unexposed()[offset..offset + size] };
        match claim {
            Claim::Untouched => image.read(dst)?,
            Claim::Written => {
                let mut bytes = vec![0; size];
                image.read(&mut bytes)?;
                for (start, end) in image.spans()? {
                    let (start, end) = (start - offset, end - offset);
                    dst[start..end].copy_from_slice(&bytes[start..end]);
                }
            }
        }
        Ok(())
    }

    /// Undoes a claim when instantiation failed before [`LinearMemory::init_image`]: nothing was
    /// written, but an idle image the memory was claimed over must go.
    pub(crate) fn unclaim(&self, claim: Claim) {
        if claim == Claim::Untouched {
            self.untouched.set(true);
            self.expose();
        }
    }

    pub fn ty(&self) -> MemoryType {
        MemoryType {
            min: self.pages(),
            ..self.ty
        }
    }

    /// The definition generated code reads (the memory is exposed: see the type's docs).
    pub fn vm(&self) -> *mut VmMemory {
        self.expose();
        self.def()
    }

    /// The first byte, for generated code, which marks what it writes (the memory is exposed:
    /// see the type's docs).
    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.expose();
        self.raw_base()
    }

    /// The first byte, for the host, which may write anything through it: the next reset
    /// reads the whole memory rather than trust the write marks.
    pub fn host_base(&self) -> *mut u8 {
        self.writes_unmarked();
        self.base()
    }

    /// Something may write the memory without setting its write marks (the host through the
    /// raw bytes, code compiled without them): the next reset reads the whole memory.
    pub(crate) fn writes_unmarked(&self) {
        self.marked.set(false);
    }

    /// Sets the write marks of `[offset, offset + len)`, which lies within the memory (see
    /// [`ephem_module::MARK_SHIFT`]).
    pub(crate) fn mark(&self, offset: usize, len: usize) {
        debug_assert!(offset + len <= self.len());
        if self.shared().is_some() {
            return;
        }
        // SAFETY: the range lies within the memory; no wasm runs on it while the runtime
        // writes for it.
        unsafe { mark_range(self.marks(), offset, len) };
    }

    /// The bytes, for a host function that writes them only through [`HostBytes::get_mut`],
    /// which marks what it hands out: the memory's reset stays the one by marks.
    ///
    /// # Safety
    /// No wasm code may run on this memory while the result is alive. (A shared memory's
    /// other threads may: see [`SharedMemory`] for what the host's view of one then is.)
    pub(crate) unsafe fn host_bytes(&self) -> HostBytes<'_> {
        self.expose();
        match self.shared() {
            // A shared memory takes no marks (other threads would write them too).
            Some(shared) => HostBytes::shared(shared.data()),
            None => HostBytes {
                view: View::Own {
                    // SAFETY: per the contract.
                    bytes: unsafe { self.bytes_unexposed() },
                    marks: Some(self.marks()),
                },
            },
        }
    }

    /// `[offset, offset + len)` to write, marked as written (see [`LinearMemory::mark`]).
    ///
    /// # Safety
    /// As for [`LinearMemory::bytes`]; the range lies within the memory.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn to_write(&self, offset: usize, len: usize) -> &mut [u8] {
        self.expose();
        self.mark(offset, len);
        // SAFETY: per the contract.
        unsafe { &mut self.bytes_unexposed()[offset..offset + len] }
    }

    /// The accessible bytes, to read.
    ///
    /// # Safety
    /// No wasm code may run on this memory while the slice is alive.
    pub unsafe fn bytes_to_read(&self) -> &[u8] {
        self.expose();
        // SAFETY: per the contract.
        unsafe { self.bytes_unexposed() }
    }

    /// Where the memory's write marks begin (see `MemoryType::marks_before`).
    fn marks(&self) -> *mut u8 {
        // The slot's marks region lies before its base (`slot`), as large as the type says.
        self.raw_base().wrapping_sub(self.ty.marks_before())
    }

    fn raw_base(&self) -> *mut u8 {
        match &self.def {
            // SAFETY: plain read of our own definition.
            Def::Own(d) => unsafe { (*d.get()).base },
            Def::Shared(s) => s.base(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.def {
            // SAFETY: plain read of our own definition.
            Def::Own(d) => unsafe { (*d.get()).length as usize },
            Def::Shared(s) => s.data_size(),
        }
    }

    pub fn pages(&self) -> u32 {
        (self.len() as u64 >> self.ty.page_size_log2) as u32
    }

    /// Bytes per page (see `MemoryType::page_size_log2`).
    pub(crate) fn page_size(&self) -> usize {
        1 << self.ty.page_size_log2
    }

    /// The most bytes its type allows, if it says.
    pub(crate) fn max_bytes(&self) -> Option<usize> {
        (self.ty.max).map(|m| self.ty.bytes(m) as usize)
    }

    /// Grows by `delta` pages; returns the old size in pages, or `None` past the maximum.
    pub fn grow(&self, delta: u32) -> Option<u32> {
        if let Some(shared) = self.shared() {
            return shared.grow_pages(u64::from(delta)).map(|old| old as u32);
        }
        let old = self.pages();
        let new = old.checked_add(delta)?;
        if u64::from(new) > max_pages(self.ty) {
            return None;
        }
        if delta > 0 {
            let start = self.len();
            let bytes = delta as usize * self.page_size();
            if !self.pool().reserve_bytes(bytes) {
                return None;
            }
            let release = || self.pool().release_bytes(bytes);
            let mut slot = self.slot.borrow_mut();
            let slot = slot.as_mut().expect("a live memory has its slot");
            // A loose memory's slot may have the pages accessible (and zero) already.
            if slot.accessible < start + bytes {
                slot.set_accessible(host_pages(start + bytes))
                    .inspect_err(|_| release())
                    .ok()?;
            }
            // SAFETY: only this memory's owners write its definition, never concurrently.
            unsafe { (*self.def()).length = (start + bytes) as u64 };
        }
        Some(old)
    }

    /// Copies `buf.len()` bytes at `offset` out of the memory.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), crate::Error> {
        let end = offset.checked_add(buf.len()).filter(|&e| e <= self.len());
        let end = end.ok_or_else(|| {
            crate::Error::Usage(format!(
                "read of {} bytes at {offset} is out of bounds",
                buf.len()
            ))
        })?;
        self.expose();
        // SAFETY: `[offset, end)` lies within the accessible bytes (checked above), and no
        // Rust reference to them is made: a shared memory's other threads may be writing
        // them (their wasm code is outside Rust's model; what this copies is what a racing
        // read gives).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.raw_base().add(offset),
                buf.as_mut_ptr(),
                end - offset,
            )
        };
        Ok(())
    }

    /// Copies `data` into the memory at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), crate::Error> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.len());
        let end = end.ok_or_else(|| {
            crate::Error::Usage(format!(
                "write of {} bytes at {offset} is out of bounds",
                data.len()
            ))
        })?;
        self.expose();
        self.mark(offset, end - offset);
        // SAFETY: as `read`'s, for a write.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.raw_base().add(offset), end - offset)
        };
        Ok(())
    }

    /// The accessible bytes, for the host to write as it likes: the next reset reads the
    /// whole memory rather than trust the write marks.
    ///
    /// # Safety
    /// No wasm code may run on this memory while the slice is alive.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the documented caller contract.
    pub unsafe fn bytes(&self) -> &mut [u8] {
        self.writes_unmarked();
        self.expose();
        // SAFETY: `[base, base + len)` is mapped read+write; exclusivity per the contract.
        unsafe { self.bytes_unexposed() }
    }

    /// As [`LinearMemory::bytes`], for the runtime's own writes that keep the untouched state right.
    ///
    /// # Safety
    /// As for [`LinearMemory::bytes`].
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_unexposed(&self) -> &mut [u8] {
        // SAFETY: `[base, base + len)` is mapped read+write; exclusivity per the contract.
        unsafe { std::slice::from_raw_parts_mut(self.raw_base(), self.len()) }
    }
}

impl Drop for LinearMemory {
    fn drop(&mut self) {
        let Some(slot) = self.slot.get_mut().take() else {
            return;
        };
        let pool = self.pool();
        pool.release_bytes(self.len());
        pool.give_back(
            slot,
            host_pages(self.ty.bytes(self.ty.min) as usize),
            self.marked.get(),
            self.loose.get(),
        );
    }
}
