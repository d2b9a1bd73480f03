//! Linear memories and the pool of address-space reservations they live in.
//!
//! Each memory reserves [`RESERVATION`] bytes of address space, inaccessible except for its
//! current pages. Generated code adds a 32-bit address and a 32-bit offset to the base without
//! a bounds check: any such access lands inside the reservation, so an out-of-bounds one
//! faults and the fault becomes a trap. The base never moves, so growing is a protection change.
//!
//! # Invariant
//! Exactly `[base, base + length)` is readable and writable; the rest of the reservation is
//! inaccessible (but see loose memories, below). Every path below (new slot, reused slot,
//! growth) keeps this true before any wasm runs.
//!
//! # Pooled slots and images
//! Memories that instances define (and those the embedder makes with [`crate::Memory::new`]) come
//! from the engine's [`MemoryPool`]: an idle reservation is taken (see the pool for which),
//! sized with one `mprotect` when its accessible length differs from the new memory's, and
//! given its initial contents from the module's image, either
//!
//! - **mapped**: the artifact's image pages are mapped private (copy-on-write) over the slot
//!   with `MAP_FIXED`; pages the instance only reads stay shared in the page cache, or
//! - **copied** into the slot, for images below [`MemoryConfig::map_image_at`] that lie in the
//!   slot's resident first pages (none by default: see that setting).
//!
//! An instance that imports a memory its module has an image for gives it that image the same
//! way when the memory is still untouched (see [`LinearMemory`]); one that may hold data gets only the
//! bytes the segments write, copied out of the image.
//!
//! When the memory is dropped its slot is reset before anything else can take it, so nothing
//! one instance wrote is visible to the next.
//!
//! # Growth, and loose memories
//! Growing opens the new pages with `mprotect`, and the slot's reset closes them again so that the
//! next memory traps there. Closing them makes the kernel flush the other cores' TLBs while it holds
//! `mmap_lock`. A module that grows its memory in every call (most Rust modules do, on their
//! first allocation) therefore costs two system calls per call, and a shootdown on a busy
//! multi-threaded host: two threads ran such modules at 0.6× one (BENCHMARKS.md, sixteenth
//! pass). Discarding the pages instead makes the next grow fault them in again, which lost too.
//!
//! Code compiled with bounds checks (`ModuleInfo::checks_bounds`) compares every access with
//! the memory's length, so a memory that only such code reaches is *loose*: its slot may have
//! more pages accessible than the memory has, all of them zero past its length. A loose memory
//! takes a slot with at least its size accessible, grows without a system call within it, and
//! gives it back grown. The invariant above is then `[base, base + length)` accessible, and
//! everything past the slot's accessible part inaccessible. A memory stops being loose (it is
//! *tightened*, its slot shrunk to its length) when code without checks imports it; a memory the
//! embedder makes is never loose. Compilers check bounds by default; code compiled
//! `Compiler::without_bounds_checks` (a few per cent faster compute) keeps every memory it
//! reaches tight. Protection keys could close pages per thread without the kernel; they are not
//! used yet.
//!
//! # Write marks
//! Before each slot's base lie [`ephem_module::MARKS_BEFORE`] bytes of *write marks*, a byte
//! per host page, which generated code sets when it stores into the page (see
//! [`ephem_module::MARK_SHIFT`] for exactly which), and the runtime when it writes for wasm
//! (bulk memory operations, data segments, images copied in, [`LinearMemory::write`]). While
//! every write since the last reset set them, the reset visits only the marked pages and the
//! first [`ephem_module::MARK_HEAD`] bytes of the page after each (where a store marked in
//! one may reach): image pages are copied back (only the cache lines that differ, so a page
//! that was never written stays the file's), anonymous ones zeroed in place (only their
//! written lines) up to `max(keep_resident, resident_dirty_bytes)` and discarded past that. No
//! system call, and nothing read that was not written or next to a write. A host that takes
//! the raw bytes ([`LinearMemory::bytes`], the base pointer) may write anywhere unmarked, and
//! the memory's reset then falls back to what follows (which also clears the marks); host
//! functions that write through [`HostBytes`] (WASI's) mark what they write:
//!
//! - A slot of at most [`MemoryConfig::keep_resident`] bytes without a mapped image is zeroed
//!   in place (no system call; its pages stay resident for the next instance).
//! - Zeroing in place never writes a page that is all zeros (so never the shared zero page),
//!   and on CPUs with AVX2 writes only the cache lines that are not: reading them costs less
//!   than writing them all (see `zero_written_lines`).
//! - Any other slot reads the kernel's page map ([`crate::pagemap`]) and undoes exactly what the
//!   instance did: pages it never touched, and image pages it only read (still the file's), are
//!   left as they are; image pages it wrote are copied back from the image's file (or from the
//!   slot's pristine copies of them, see [`ImageFile`]); anonymous
//!   pages it wrote are zeroed in place, up to [`MemoryConfig::resident_dirty_bytes`] of them;
//!   the rest (anonymous pages past that bound, swapped-out pages, and everything past the part
//!   of the slot whose page map is read) is discarded with `madvise(MADV_DONTNEED)`, after
//!   which anonymous pages read as zeros and the pages of a mapped image read as the file
//!   again. So the next instance of the same module finds the pages it will read and write
//!   present, and takes no fault for them; and a reset that discards nothing makes the kernel
//!   flush no other core's TLB.
//! - Without a page map, everything past `keep_resident` is discarded.
//!
//! A slot keeps its image mapped while idle: the next memory of the same artifact file and size that takes it needs no
//! system call at all (the pool prefers such a slot), and any other memory first replaces the
//! image with zero pages, or maps its own over it ([`MemoryConfig::reuse_images`] turns the
//! reuse off: every memory then replaces the image it finds).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::os::fd::BorrowedFd;

use ephem_artifact::Identity;
use ephem_module::{MemoryType, VmMemory};

use crate::limits::Growing;
use rustix::mm::{Advice, MapFlags, MprotectFlags, ProtFlags};

pub const PAGE: u64 = 65536;
/// Bytes of write marks before each memory's base (see [`ephem_module::MARK_SHIFT`]).
const MARKS: usize = ephem_module::MARKS_BEFORE;
const _: () = assert!(1 << ephem_module::MARK_SHIFT == crate::pagemap::PAGE);
/// Most pages a 32-bit memory can have.
pub const MAX_PAGES: u32 = 65536;
/// Address space behind each memory base: 4 GiB of addresses plus 4 GiB of offsets, plus a
/// page for the widest access.
pub const RESERVATION: usize = (8 << 30) + PAGE as usize;

/// How instances' memories are pooled and initialised. The defaults come from
/// `ephem bench memory` (see BENCHMARKS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Reset slots kept for reuse; more are unmapped when freed.
    pub max_idle_slots: usize,
    /// Bytes at the start of a slot zeroed in place (kept resident) rather than discarded. Each
    /// reset reads this much and zeroes what is not zero; each page of it that an instance
    /// touches saves a page fault.
    /// 128 KiB measured best on the corpus mix (`ephem bench fresh --keep-resident`, see
    /// BENCHMARKS.md): quickjs's 85 KiB of data segments land there.
    pub keep_resident: usize,
    /// Bytes of the pages an instance wrote that a reset zeroes in place, keeping them
    /// resident for the next instance, in slots larger than `keep_resident` or with an image
    /// (see the module documentation); pages written past this are discarded. It bounds what an
    /// idle slot keeps resident beyond `keep_resident`. 0 discards them all, as before the page
    /// map was read. A reset by write marks zeroes up to the larger of this and
    /// `keep_resident` in place, wherever in the slot the marked pages are.
    pub resident_dirty_bytes: usize,
    /// Whether the next memory of the same artifact may take an idle slot's mapped image as it
    /// is (see the module documentation). Off, every memory replaces the image it finds: the
    /// cost of a workload whose modules never repeat.
    pub reuse_images: bool,
    /// Images of at least this many bytes are mapped from the artifact. Smaller ones are
    /// copied if they lie within the first `keep_resident` bytes, where the slot's pages are
    /// resident; copying into pages that must first be faulted in is slower than mapping at
    /// every size measured (`ephem bench thresholds`). The default, 0, maps every image: alone,
    /// copying an image under 64 KiB is faster, but in the fresh workload a copied image's slot
    /// pays for zeroing its resident pages on every reset while a mapped one keeps its image,
    /// and mapping won (zstd's 9 KiB image; see BENCHMARKS.md).
    pub map_image_at: usize,
    /// The most bytes all linear memories of the engine may have together, live ones at their
    /// current sizes (`None`: unbounded). A memory that would pass it is not made (an error of
    /// kind `Limit`), and growth that would pass it fails (`memory.grow` returns -1).
    pub max_total_bytes: Option<usize>,
}

/// Where a memory's initial contents come from: bytes for a page-aligned range of the memory,
/// stored page-aligned in a file (so that they can be mapped copy-on-write), and the spans of
/// that range that data segments write. The loader implements it over the artifact format;
/// memories know nothing of that format.
pub(crate) trait ImageSource {
    /// The range of the memory the image covers: offset and length in bytes, page-aligned.
    fn range(&self) -> (usize, usize);
    /// The file holding the image, its identity, and where in it the image starts.
    fn file(&self) -> (BorrowedFd<'_>, Identity, u64);
    /// The same file, for a slot to keep while it maps the image (see [`ImageFile`]).
    fn shared_file(&self) -> Arc<std::fs::File>;
    /// Reads the whole image into `dst` (of the image's length).
    fn read(&self, dst: &mut [u8]) -> Result<(), crate::Error>;
    /// The spans (start, end; memory offsets) that data segments write, in order.
    fn spans(&self) -> Result<Vec<(usize, usize)>, crate::Error>;
}

impl MemoryConfig {
    /// How `image` goes into a memory: mapped (`Some`), or copied (`None`).
    fn mapping(&self, image: &impl ImageSource) -> Option<MappedImage> {
        let (offset, len) = image.range();
        let resident = offset + len <= self.keep_resident;
        (len >= self.map_image_at || !resident).then(|| {
            let (_, file, file_offset) = image.file();
            MappedImage {
                file,
                file_offset,
                offset,
                len,
                reusable: true,
            }
        })
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_idle_slots: 128,
            reuse_images: true,
            keep_resident: 128 << 10,
            resident_dirty_bytes: 2 << 20,
            map_image_at: 0,
            max_total_bytes: None,
        }
    }
}

/// A memory image mapped (private, copy-on-write) from an artifact file into a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MappedImage {
    file: Identity,
    file_offset: u64,
    offset: usize,
    len: usize,
    /// Whether the next memory of the same image may take it as it is. Without image reuse
    /// ([`MemoryConfig::reuse_images`]), a reset slot keeps its image mapped but marked not
    /// reusable: no memory wants it, so the next one replaces it.
    reusable: bool,
}

/// One reservation: `[base, base + accessible)` is read+write, the rest inaccessible. Where
/// `image` says, the accessible pages are a private mapping of an artifact's image; everywhere
/// else they are anonymous.
struct Slot {
    base: *mut u8,
    accessible: usize,
    image: Option<MappedImage>,
    /// The file `image` is mapped from: a reset copies back from it the image pages an
    /// instance wrote (see [`Slot::reset_by_page_map`]). Replaced, with its pristine pages,
    /// whenever `image` is.
    image_file: Option<ImageFile>,
    /// What the slot learned of where its instances touch memory (see
    /// [`Slot::reset_by_page_map`]).
    learned: Learned,
}

/// The file a slot's image is mapped from (its artifact's descriptor, shared), and pristine copies of
/// image pages that instances wrote, as the file holds them: read once, the first time a reset
/// finds the page written, so that later resets copy it back from memory instead of with a
/// `pread` (an instance that writes its data section writes the same pages every time). At
/// most [`PRISTINE_PAGES`] per slot.
struct ImageFile {
    file: Arc<std::fs::File>,
    /// (offset in the memory, the page).
    pristine: Vec<(usize, Box<[u8]>)>,
}

impl ImageFile {
    /// The pristine copy of the image page at memory offset `at` (at `file_at` in the file):
    /// the one kept, else read from the file and kept while there is room for it; `None` when
    /// it is not kept and there is no room.
    fn pristine(&mut self, at: usize, file_at: u64) -> std::io::Result<Option<&[u8]>> {
        use crate::pagemap::PAGE as HOST_PAGE;
        use std::os::unix::fs::FileExt;
        if let Some(k) = self.pristine.iter().position(|(o, _)| *o == at) {
            return Ok(Some(&self.pristine[k].1));
        }
        if self.pristine.len() >= PRISTINE_PAGES {
            return Ok(None);
        }
        let mut page = vec![0; HOST_PAGE].into_boxed_slice();
        self.file.read_exact_at(&mut page, file_at)?;
        self.pristine.push((at, page));
        Ok(self.pristine.last().map(|(_, page)| &**page))
    }
}

/// The most pristine image pages a slot keeps (64 KiB; with the pool's 128 idle slots, 8 MiB
/// at most).
const PRISTINE_PAGES: usize = 16;

// SAFETY: a slot is plain address space owned by whoever holds it (the pool's list or one
// memory); the pointer is never shared while owned.
unsafe impl Send for Slot {}

impl Slot {
    fn reserve() -> Result<Slot, crate::Error> {
        let failed = |e| crate::Error::Limit(format!("cannot reserve linear memory: {e}"));
        // SAFETY: a fresh private mapping the kernel places; nothing else is affected.
        let start = unsafe {
            rustix::mm::mmap_anonymous(
                null_mut(),
                MARKS + RESERVATION,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(failed)?;
        // SAFETY: the first `MARKS` bytes of the reservation just made, ours alone.
        let marks = unsafe {
            rustix::mm::mprotect(start, MARKS, MprotectFlags::READ | MprotectFlags::WRITE)
        };
        let slot = Slot {
            // SAFETY: inside the reservation (`MARKS` is less than its length).
            base: unsafe { start.cast::<u8>().add(MARKS) },
            accessible: 0,
            image: None,
            image_file: None,
            learned: Learned::default(),
        };
        // On failure, dropping the slot unmaps the reservation.
        marks.map_err(failed).map(|()| slot)
    }

    /// The write marks of the first `pages` host pages (see [`ephem_module::MARK_SHIFT`]),
    /// and the mark after them.
    ///
    /// # Safety
    /// No wasm code may run on the slot's memory while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn marks(&self, pages: usize) -> &mut [u8] {
        debug_assert!(pages < MARKS);
        // SAFETY: `[base - MARKS, base)` is our read+write marks region; exclusive per the
        // contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.sub(MARKS), pages + 1) }
    }

    /// Makes exactly `[0, len)` accessible.
    fn set_accessible(&mut self, len: usize) -> rustix::io::Result<()> {
        let (from, to, flags) = match len.cmp(&self.accessible) {
            std::cmp::Ordering::Equal => return Ok(()),
            std::cmp::Ordering::Greater => (
                self.accessible,
                len,
                MprotectFlags::READ | MprotectFlags::WRITE,
            ),
            std::cmp::Ordering::Less => (len, self.accessible, MprotectFlags::empty()),
        };
        // SAFETY: the range lies inside this slot's reservation, which we own; no Rust
        // reference into it is alive (memories hand out slices only under `bytes`' contract).
        unsafe { rustix::mm::mprotect(self.base.add(from).cast(), to - from, flags)? };
        self.accessible = len;
        Ok(())
    }

    /// Replaces `[offset, offset + len)`, accessible pages, with zero pages.
    fn zero_pages(&mut self, offset: usize, len: usize) -> rustix::io::Result<()> {
        debug_assert!(offset + len <= self.accessible);
        // SAFETY: replaces only pages of our own reservation's accessible part.
        unsafe {
            rustix::mm::mmap_anonymous(
                self.base.add(offset).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::NORESERVE,
            )?
        };
        Ok(())
    }

    /// Replaces the mapped image, if any, with zero pages. Must run before the accessible
    /// size changes (the image lies within it).
    fn unmap_image(&mut self) -> rustix::io::Result<()> {
        if let Some(image) = self.image {
            self.zero_pages(image.offset, image.len)?;
            self.image = None;
            self.image_file = None;
        }
        Ok(())
    }

    /// Maps `want` from `image`'s file; nothing to do if the slot already has it (a reset
    /// slot's image pages read as the file again). Another image is replaced: the new one is
    /// mapped over it, and its pages outside the new one become zero pages (so one system call
    /// when the new image covers the old).
    fn map_image(&mut self, image: &impl ImageSource, want: MappedImage) -> rustix::io::Result<()> {
        if self.image == Some(want) {
            return Ok(());
        }
        debug_assert!(want.offset + want.len <= self.accessible);
        // SAFETY: the target range is inside the accessible part of our reservation (the
        // artifact checked the image against the memory's minimum size), so MAP_FIXED only
        // replaces pages of this slot.
        let mapped = unsafe {
            rustix::mm::mmap(
                self.base.add(want.offset).cast(),
                want.len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
                image.file().0,
                want.file_offset,
            )
        };
        if let Err(e) = mapped {
            // A failed MAP_FIXED may have unmapped the range: make it zeros again, and the
            // old image with it.
            let _ = self.zero_pages(want.offset, want.len);
            let _ = self.unmap_image();
            return Err(e);
        }
        self.image_file = Some(ImageFile {
            file: image.shared_file(),
            pristine: Vec::new(),
        });
        if let Some(old) = self.image.replace(want) {
            let (start, end) = (want.offset, want.offset + want.len);
            let (old_start, old_end) = (old.offset, old.offset + old.len);
            for (from, to) in [
                (old_start, old_end.min(start)),
                (old_start.max(end), old_end),
            ] {
                if from < to {
                    self.zero_pages(from, to - from)?;
                }
            }
        }
        Ok(())
    }

    /// Makes everything an instance wrote disappear (see the module documentation): anonymous
    /// pages read as zeros again, a mapped image's pages as the file again. Without
    /// `reuse_image`, the image is marked as one no memory may take as it is.
    fn reset(&mut self, config: &MemoryConfig, marked: bool) -> rustix::io::Result<()> {
        let len = self.accessible;
        if let Some(image) = &mut self.image {
            image.reusable &= config.reuse_images;
        }
        let pages = len / crate::pagemap::PAGE;
        if marked {
            return self.reset_by_marks(config, pages);
        }
        // Marks that generated code set are not the whole story here, but must not survive
        // into the next memory's reset.
        // SAFETY: the memory that used the slot is being dropped.
        unsafe { self.marks(pages) }.fill(0);
        if self.image.is_none() && len <= config.keep_resident {
            // SAFETY: `[0, len)` is accessible anonymous memory and nothing else references it
            // (the memory that used it is being dropped).
            let slot = unsafe { std::slice::from_raw_parts_mut(self.base, len) };
            for page in slot.chunks_mut(crate::pagemap::PAGE) {
                zero_written_lines(page);
            }
            return Ok(());
        }
        if config.resident_dirty_bytes > 0 && self.reset_by_page_map(config)? {
            return Ok(());
        }
        // Zeroing in place only pays where the pages are anonymous and resident, which they
        // are not in a slot that held an image.
        let keep = if self.image.is_some() {
            0
        } else {
            config.keep_resident
        };
        // SAFETY: as above, `[0, keep)` is accessible anonymous memory.
        unsafe { std::ptr::write_bytes(self.base, 0, keep) };
        self.discard(keep, len)
    }

    /// Discards `[from, to)`: private pages of our own reservation. Anonymous pages then read
    /// as zeros and private file pages as the file, which is the point.
    fn discard(&self, from: usize, to: usize) -> rustix::io::Result<()> {
        if from < to {
            // SAFETY: accessible pages of our own reservation, referenced by nothing.
            unsafe {
                rustix::mm::madvise(self.base.add(from).cast(), to - from, Advice::LinuxDontNeed)?
            };
        }
        Ok(())
    }

    /// Copies `[from, to)`, pages of the mapped image, back from its file: from the slot's
    /// pristine copies where it has them, keeping copies of the pages it reads while it has
    /// room.
    fn copy_back(&mut self, from: usize, to: usize) -> rustix::io::Result<()> {
        use crate::pagemap::PAGE as HOST_PAGE;
        use std::os::unix::fs::FileExt;
        let (Some(image), Some(source)) = (self.image, &mut self.image_file) else {
            return self.discard(from, to);
        };
        let base = self.base;
        // SAFETY: accessible pages of our own reservation inside the image, referenced by
        // nothing (their memory is being dropped).
        let memory =
            |at: usize, len: usize| unsafe { std::slice::from_raw_parts_mut(base.add(at), len) };
        let file_at = |at: usize| image.file_offset + (at - image.offset) as u64;
        let mut at = from;
        let failed = loop {
            if at == to {
                break None;
            }
            match source.pristine(at, file_at(at)) {
                Ok(Some(page)) => copy_differing_lines(memory(at, HOST_PAGE), page),
                Ok(None) => {
                    // No room for more copies: the rest of the run straight from the file.
                    let rest = source.file.read_exact_at(memory(at, to - at), file_at(at));
                    break rest.is_err().then_some(at);
                }
                Err(_) => break Some(at),
            }
            at += HOST_PAGE;
        };
        match failed {
            // Short of the file (it cannot be, but never leave data behind): discard.
            Some(at) => self.discard(at, to),
            None => Ok(()),
        }
    }

    /// The reset by write marks, where every write since the last reset set them (see the
    /// module documentation): a marked page is reset whole, and the first
    /// [`ephem_module::MARK_HEAD`] bytes of the page after it; image pages are copied back,
    /// anonymous ones zeroed in place up to a budget of `max(keep_resident,
    /// resident_dirty_bytes)` and discarded past it. No system call unless something is
    /// discarded or an image page is read from its file.
    fn reset_by_marks(&mut self, config: &MemoryConfig, pages: usize) -> rustix::io::Result<()> {
        use crate::pagemap::PAGE as HOST_PAGE;
        let image = self.image.map_or(0..0, |i| i.offset..i.offset + i.len);
        let mut budget = config.keep_resident.max(config.resident_dirty_bytes) / HOST_PAGE;
        let (mut discard_run, mut copy_run) = (Run::default(), Run::default());
        // SAFETY (for every `marks` below): the memory that used the slot is being dropped;
        // no slice of the marks is kept across a call that takes `self`.
        let mut page = next_mark(unsafe { self.marks(pages) }, 0).min(pages);
        while page < pages {
            let at = page * HOST_PAGE;
            if unsafe { self.marks(pages) }[page] == 0 {
                copy_run.step(false, at, |f, t| self.copy_back(f, t))?;
                discard_run.step(false, at, |f, t| self.discard(f, t))?;
                // The page after a marked one: only its head can have been written.
                self.reset_head(at)?;
                page = next_mark(unsafe { self.marks(pages) }, page + 1).min(pages);
                continue;
            }
            let in_image = image.contains(&at);
            copy_run.step(in_image && self.image_file.is_some(), at, |f, t| {
                self.copy_back(f, t)
            })?;
            let discard = if in_image {
                self.image_file.is_none()
            } else if budget > 0 {
                budget -= 1;
                // SAFETY: an accessible page of our reservation, referenced by nothing (its
                // memory is being dropped). Only written lines are written: a page that was
                // only read (the shared zero page) is never copied on write.
                zero_written_lines(unsafe {
                    std::slice::from_raw_parts_mut(self.base.add(at), HOST_PAGE)
                });
                false
            } else {
                true
            };
            discard_run.step(discard, at, |f, t| self.discard(f, t))?;
            page += 1;
        }
        let end = pages * HOST_PAGE;
        copy_run.step(false, end, |f, t| self.copy_back(f, t))?;
        discard_run.step(false, end, |f, t| self.discard(f, t))?;
        unsafe { self.marks(pages) }.fill(0);
        Ok(())
    }

    /// Resets the first [`ephem_module::MARK_HEAD`] bytes of the accessible page at `at`
    /// (see [`Slot::reset_by_marks`]): zeroed where anonymous, copied back (the lines that
    /// differ) where the image is.
    fn reset_head(&mut self, at: usize) -> rustix::io::Result<()> {
        use crate::pagemap::PAGE as HOST_PAGE;
        use ephem_module::MARK_HEAD;
        use std::os::unix::fs::FileExt;
        // SAFETY: the head of an accessible page of our reservation, referenced by nothing
        // (its memory is being dropped).
        let head = unsafe { std::slice::from_raw_parts_mut(self.base.add(at), MARK_HEAD) };
        let Some(image) = self
            .image
            .filter(|i| (i.offset..i.offset + i.len).contains(&at))
        else {
            zero_written_lines(head);
            return Ok(());
        };
        let Some(source) = &mut self.image_file else {
            return self.discard(at, at + HOST_PAGE);
        };
        // The page's pristine copy, kept as `copy_back` keeps them (the same heads come back
        // at every reset), else just the head read from the file.
        let file_at = image.file_offset + (at - image.offset) as u64;
        let restored = match source.pristine(at, file_at) {
            Ok(Some(page)) => {
                copy_differing_lines(head, &page[..MARK_HEAD]);
                true
            }
            Ok(None) => {
                let mut pristine = [0; MARK_HEAD];
                let read = source.file.read_exact_at(&mut pristine, file_at);
                read.map(|()| copy_differing_lines(head, &pristine)).is_ok()
            }
            Err(_) => false,
        };
        match restored {
            true => Ok(()),
            // Short of the file (it cannot be, but never leave data behind): discard.
            false => self.discard(at, at + HOST_PAGE),
        }
    }

    /// The reset by page map (see the module documentation); `false` if it cannot be read.
    ///
    /// Image pages the instance wrote are copied back (see [`Slot::copy_back`]), which leaves
    /// them present for the next instance and, unlike discarding,
    /// makes the kernel flush no other core's TLB.
    ///
    /// Where the page map is asked with `PAGEMAP_SCAN`, which costs by where pages were touched,
    /// every reset asks about the whole slot (up to [`MAX_SCAN`]) and discards only what needs
    /// it. A reset that discarded the rest of the slot blindly would make the kernel flush the
    /// TLBs of the other cores running this process even where nothing was there to discard:
    /// 7 600 shootdowns in 60 000 invocations of the corpus on two threads, against 7.
    ///
    /// Reading the page map file instead costs per page read, touched or not (about 0.5 µs,
    /// then 4 ns per page), so there a reset reads it only up to the slot's high-water mark,
    /// below which its instances touched pages densely enough (a page per [`SCAN_DENSITY`]
    /// bytes) that the faults saved pay for the reading; the rest is discarded whole, which
    /// costs little where nothing was touched. Below the mark there may be nothing to read at
    /// all (an instance that touches no memory makes one `madvise`, as before the page map).
    /// The mark is learned by reading the whole slot (up to [`MAX_SCAN`]) every so often: after
    /// [`FIRST_FULL_SCAN`] resets, then twice as long each time it learns nothing new, up to
    /// [`MAX_FULL_SCAN`]; and at the next reset when one finds a page touched past the mark.
    fn reset_by_page_map(&mut self, config: &MemoryConfig) -> rustix::io::Result<bool> {
        use crate::pagemap::{PAGE as HOST_PAGE, Page, Pages};
        thread_local! {
            static TOUCHED: RefCell<Vec<Pages>> = const { RefCell::new(Vec::new()) };
        }
        let image = self.image.map_or(0..0, |i| i.offset..i.offset + i.len);
        let full = self.learned.until_full == 0 || crate::pagemap::cost_follows_touched();
        let scanned = self
            .accessible
            .min(if full { MAX_SCAN } else { self.learned.reach() });
        if scanned == 0 {
            self.learned.until_full = self.learned.until_full.saturating_sub(1);
            self.discard(0, self.accessible)?;
            return Ok(true);
        }
        TOUCHED.with_borrow_mut(|runs| {
            if !crate::pagemap::touched(self.base, scanned, self.image.is_some(), runs) {
                return Ok(false);
            }
            let mut budget = config.resident_dirty_bytes / HOST_PAGE;
            // Pages found touched, and the end of the last one.
            let (mut touched, mut top) = (0, 0);
            // The runs of pages to discard, and of image pages to copy back, the scan is in.
            let (mut discard_run, mut copy_run) = (Run::default(), Run::default());
            // Where the last run of touched pages ended: an untouched page there ends the runs.
            let mut after = 0;
            for &Pages { start, end, page } in runs.iter() {
                if start != after {
                    copy_run.step(false, after, |from, to| self.copy_back(from, to))?;
                    discard_run.step(false, after, |from, to| self.discard(from, to))?;
                }
                after = end;
                touched += (end - start) / HOST_PAGE;
                top = end;
                for at in (start..end).step_by(HOST_PAGE) {
                    let written_image = page == Page::Private && image.contains(&at);
                    let copy = written_image && self.image_file.is_some();
                    copy_run.step(copy, at, |from, to| self.copy_back(from, to))?;
                    let discard = match page {
                        Page::File => false,
                        Page::Swapped => true,
                        Page::Private if image.contains(&at) => self.image_file.is_none(),
                        Page::Private => {
                            // SAFETY: an accessible, present page of our reservation,
                            // referenced by nothing (its memory is being dropped).
                            let page = unsafe {
                                std::slice::from_raw_parts_mut(self.base.add(at), HOST_PAGE)
                            };
                            // Only written lines are written: the shared zero page (mapped
                            // where an instance only read) is never copied on write.
                            if budget > 0 {
                                budget -= usize::from(zero_written_lines(page));
                                false
                            } else {
                                !is_zero(page)
                            }
                        }
                    };
                    discard_run.step(discard, at, |from, to| self.discard(from, to))?;
                }
            }
            copy_run.step(false, scanned, |from, to| self.copy_back(from, to))?;
            // The run under way, if any, and everything past what was read.
            self.discard(discard_run.start().unwrap_or(scanned), self.accessible)?;
            self.learned.learn(full, touched, top);
            Ok(true)
        })
    }
}

/// A run of consecutive pages that one system call acts on (see [`Slot::reset_by_page_map`]).
#[derive(Default)]
struct Run(Option<usize>);

impl Run {
    fn start(&self) -> Option<usize> {
        self.0
    }

    /// The page at `at` is `inside` the run or not: a run that this ends is handed to
    /// `act(start, at)`.
    fn step(
        &mut self,
        inside: bool,
        at: usize,
        act: impl FnOnce(usize, usize) -> rustix::io::Result<()>,
    ) -> rustix::io::Result<()> {
        match (inside, self.0) {
            (true, None) => self.0 = Some(at),
            (false, Some(start)) => {
                self.0 = None;
                act(start, at)?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Where a slot's instances touch memory, and when to look again: see
/// [`Slot::reset_by_page_map`].
#[derive(Clone, Copy, Debug, Default)]
struct Learned {
    /// The high-water mark: resets read the page map below it.
    mark: usize,
    /// Resets until the next reads the whole slot (0: the next one does).
    until_full: u32,
    /// The current wait between whole reads.
    period: u32,
}

impl Learned {
    /// How far a reset that is not a whole read reads: the mark and a margin past it, where
    /// a page touched says that instances may touch more past the mark than that.
    fn reach(&self) -> usize {
        match self.mark {
            0 => 0,
            mark => mark + (mark / 4).max(64 << 10),
        }
    }

    /// After a reset that read all of the slot's page map (up to [`MAX_SCAN`]) if `full`, else
    /// up to [`Learned::reach`], and found `touched` pages, the last ending at `top`.
    fn learn(&mut self, full: bool, touched: usize, top: usize) {
        if !full {
            // Touched past the mark: look at the whole slot at the next reset.
            self.until_full = if top > self.mark {
                0
            } else {
                self.until_full.saturating_sub(1)
            };
            return;
        }
        let mark = if touched * SCAN_DENSITY >= top {
            top
        } else {
            0
        };
        self.period = if mark > self.mark || self.period == 0 {
            FIRST_FULL_SCAN
        } else {
            (self.period * 2).min(MAX_FULL_SCAN)
        };
        self.mark = mark;
        self.until_full = self.period;
    }
}

/// The most of a slot a reset reads the page map for: see [`Slot::reset_by_page_map`].
const MAX_SCAN: usize = 64 << 20;
/// See [`Slot::reset_by_page_map`].
const SCAN_DENSITY: usize = 256 << 10;
/// See [`Slot::reset_by_page_map`].
const FIRST_FULL_SCAN: u32 = 8;
/// See [`Slot::reset_by_page_map`].
const MAX_FULL_SCAN: u32 = 256;

/// A cache line, as words.
type Line = [u64; 8];

/// `page` (page-aligned) as cache lines.
fn lines(page: &mut [u8]) -> &mut [Line] {
    // SAFETY: any bytes are valid u64s, and any u64s valid bytes; `align_to_mut` hands back
    // whatever does not align, which a page-aligned page does not have.
    let (head, lines, tail) = unsafe { page.align_to_mut::<Line>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "not whole, aligned lines"
    );
    lines
}

/// Sets the write marks of `[offset, offset + len)` of the memory at `base` (see
/// [`ephem_module::MARK_SHIFT`]).
///
/// # Safety
/// `base` is a live memory's base, the range lies within the memory, and no wasm runs on it.
unsafe fn mark_range(base: *mut u8, offset: usize, len: usize) {
    use ephem_module::MARK_SHIFT;
    if len == 0 {
        return;
    }
    let (first, last) = (offset >> MARK_SHIFT, (offset + len - 1) >> MARK_SHIFT);
    // SAFETY: the marks of pages within a memory lie in its slot's marks region (`MARKS`
    // covers every page of a 4 GiB memory), which only the memory's users write, never
    // concurrently with this (per the contract).
    unsafe { std::ptr::write_bytes(base.sub(MARKS).add(first), 1, last - first + 1) };
}

/// A memory's bytes as a host function reads and writes them: writes go through
/// [`HostBytes::get_mut`], which sets the write marks of what it hands out (see the module
/// documentation), so that the memory's reset can still trust them. (Made from a plain slice,
/// there is nothing to mark.)
pub struct HostBytes<'a> {
    bytes: &'a mut [u8],
    /// The memory's base, or `None` for a plain slice.
    base: Option<*mut u8>,
}

impl<'a> HostBytes<'a> {
    /// Bytes of no memory (for tests of host functions).
    pub fn new(bytes: &'a mut [u8]) -> HostBytes<'a> {
        HostBytes { bytes, base: None }
    }

    /// All the bytes, to read.
    pub fn as_slice(&self) -> &[u8] {
        self.bytes
    }

    /// `range` to write (marked as written), or `None` if it is not within the bytes.
    pub fn get_mut(&mut self, range: std::ops::Range<usize>) -> Option<&mut [u8]> {
        let bytes = self.bytes.get_mut(range.clone())?;
        if let Some(base) = self.base {
            // SAFETY: `base` is the memory whose bytes these are, alive and not running wasm
            // for as long as `self` borrows them; the range lies within them.
            unsafe { mark_range(base, range.start, range.len()) };
        }
        Some(bytes)
    }
}

/// Copies the cache lines of `src` that differ from `dst`'s (page-aligned, of one length): a
/// page of a private file mapping that was never written stays the file's (not copied on
/// write), and one written in a few lines is written in those.
fn copy_differing_lines(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(64).zip(src.chunks_exact(64)) {
        if d != s {
            d.copy_from_slice(s);
        }
    }
}

/// The first marked page at or after `from`, or `marks.len()`: 64 marks at a time where it
/// can (a reduction without early exit, which vectorises).
fn next_mark(marks: &[u8], from: usize) -> usize {
    const BLOCK: usize = 64;
    let first = |range: std::ops::Range<usize>| range.clone().find(|&at| marks[at] != 0);
    let aligned = from.next_multiple_of(BLOCK).min(marks.len());
    if let Some(at) = first(from..aligned) {
        return at;
    }
    let mut at = aligned;
    while at + BLOCK <= marks.len() && marks[at..at + BLOCK].iter().fold(0, |acc, &m| acc | m) == 0
    {
        at += BLOCK;
    }
    first(at..marks.len()).unwrap_or(marks.len())
}

/// Whether a page-aligned page is all zeros (a reduction without early exit vectorises).
fn is_zero(page: &[u8]) -> bool {
    // SAFETY: any bytes are valid u64s; `align_to` hands back whatever does not align.
    let (head, words, tail) = unsafe { page.align_to::<u64>() };
    // A written page usually shows it in its first word, which spares reading the rest.
    words.first().is_none_or(|&w| w == 0)
        && head.iter().chain(tail).all(|&b| b == 0)
        && words.iter().fold(0, |acc, &w| acc | w) == 0
}

/// Zeroes the cache lines of a page-aligned page that are not all zeros; whether there were
/// any.
///
/// An instance that wrote a page often wrote a few of its lines, and the rest are still the
/// zeros the last reset left, in cache: reading every line and writing only the written ones
/// costs less than writing the whole page (`memset`'s `rep stosb` of 4 KiB), and about the
/// same where every line was written (BENCHMARKS.md, the seventh pass).
///
/// Only with 32-byte vectors (AVX2): with 16-byte ones the reading costs more instructions
/// than `rep stosb` takes to write, and the whole page is written instead. 64-byte ones were
/// no faster here, and can lower the clock of older cores.
fn zero_written_lines(page: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this CPU has AVX2.
            return unsafe { zero_written_lines_avx2(lines(page)) };
        }
    }
    zero_page_if_written(page)
}

/// [`zero_written_lines`] without wide vectors.
fn zero_page_if_written(page: &mut [u8]) -> bool {
    if is_zero(page) {
        return false;
    }
    page.fill(0);
    true
}

/// [`zero_written_lines`] with AVX2: a line is two 32-byte loads, tested at once.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn zero_written_lines_avx2(lines: &mut [Line]) -> bool {
    let mut any = false;
    for line in lines {
        if line.iter().fold(0, |acc, &w| acc | w) != 0 {
            *line = [0; 8];
            any = true;
        }
    }
    any
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: we own the reservation and nothing references it any more.
        let _ = unsafe { rustix::mm::munmap(self.base.sub(MARKS).cast(), MARKS + RESERVATION) };
    }
}

/// Reset reservations ready for new memories; shared by an engine's instances.
///
/// Idle slots are kept in a short list under a lock (held for a scan of at most
/// `max_idle_slots` entries, never across a system call), oldest first. A new memory takes a
/// slot that already has its size and its image mapped (no system call at all); failing that, a
/// new reservation while the list has room, so that each kind of memory in the working set keeps
/// slots of its own; and when it is full, an idle slot of its size (no `mprotect`) or the oldest.
///
/// In front of that list, each thread keeps the last few slots it reset ([`near`]), and looks
/// there first: a thread that runs the same modules again takes their slots back without the
/// lock, so that threads do not take turns at one lock and one list on every invocation (two
/// threads scaled 1.77–1.83× taking turns, 1.83–1.89× with kept slots: BENCHMARKS.md, eleventh
/// pass). A take that finds no slot of its own there chooses from the list as above, counting
/// the thread's kept slots as if they were on it, and leaves them where they are: emptying them
/// onto the list first left a thread only the slot it reset last, so that with three modules
/// two takes in three went to the list (BENCHMARKS.md, fourteenth pass). The pool holds at
/// most `max_idle_slots` idle slots plus, per thread, the [`near::PER_THREAD`] (no more than
/// `max_idle_slots`) that thread keeps.
pub(crate) struct MemoryPool {
    config: MemoryConfig,
    idle: Mutex<Vec<Slot>>,
    /// Bytes of all live memories of the pool, at their current sizes; counted only under a
    /// bound (`max_total_bytes`).
    in_use: AtomicUsize,
}

/// The slots each thread reset last, in front of their pools' lists (see [`MemoryPool`]).
mod near {
    use std::cell::RefCell;
    use std::sync::Arc;

    use ephem_code_memory::near::{Kept, keep, with};

    use super::{MemoryPool, Slot};

    /// Slots a thread keeps, of all pools together.
    pub const PER_THREAD: usize = 8;

    thread_local! {
        static NEAR: RefCell<Kept<MemoryPool, Slot>> = const { RefCell::new(Kept::new()) };
    }

    /// This thread's most recently reset slot of `pool` that `wanted` accepts.
    pub fn take(pool: &MemoryPool, wanted: impl Fn(&Slot) -> bool) -> Option<Slot> {
        with(&NEAR, |kept| kept.take(pool, wanted)).flatten()
    }

    /// This thread's least recently reset slot of `pool`.
    pub fn take_oldest(pool: &MemoryPool) -> Option<Slot> {
        with(&NEAR, |kept| kept.take_oldest(pool)).flatten()
    }

    /// How many slots of `pool` this thread keeps.
    pub fn count(pool: &MemoryPool) -> usize {
        with(&NEAR, |kept| kept.count(pool)).unwrap_or(0)
    }

    /// Keeps `slot` (reset) for `pool`, up to `max` of that pool and [`PER_THREAD`] in all.
    /// Returns the slot of `pool` that no longer fits, for the pool's list: `slot` itself
    /// (also during thread exit), or the oldest one kept (one of another pool goes to that
    /// pool's list).
    pub fn put(pool: &Arc<MemoryPool>, slot: Slot, max: usize) -> Option<Slot> {
        keep(&NEAR, pool, slot, max, PER_THREAD)
    }

    /// Drops this thread's slots of `pool` (and its reference to it).
    pub fn forget(pool: &MemoryPool) {
        with(&NEAR, |kept| kept.forget(pool));
    }
}

impl ephem_code_memory::near::Pool<Slot> for MemoryPool {
    fn take_back(&self, slot: Slot) {
        self.keep_idle(slot);
    }
}

impl MemoryPool {
    pub fn new(config: MemoryConfig) -> MemoryPool {
        MemoryPool {
            config,
            idle: Mutex::new(Vec::with_capacity(config.max_idle_slots)),
            in_use: AtomicUsize::new(0),
        }
    }

    /// Counts `bytes` more in use, unless that would pass the engine-wide bound. Without a
    /// bound nothing is counted: threads making memories would take turns at the count.
    fn reserve_bytes(&self, bytes: usize) -> bool {
        let Some(bound) = self.config.max_total_bytes else {
            return true;
        };
        self.in_use
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= bound)
            })
            .is_ok()
    }

    fn release_bytes(&self, bytes: usize) {
        if self.config.max_total_bytes.is_some() {
            self.in_use.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    fn take(
        &self,
        len: usize,
        image: Option<MappedImage>,
        loose: bool,
    ) -> Result<Slot, crate::Error> {
        // Without image reuse, no idle slot's image is wanted: any of the size fits. A loose
        // memory fits any slot with at least its size accessible.
        let reuse = self.config.reuse_images;
        let sized = |s: &Slot| s.accessible == len || (loose && s.accessible > len);
        let exact = |s: &Slot| sized(s) && (!reuse || s.image == image);
        if let Some(slot) = near::take(self, exact) {
            return Ok(slot);
        }
        let slot = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let kept = near::count(self);
            if let Some(i) = idle.iter().rposition(exact) {
                Some(idle.remove(i))
            } else if idle.len() + kept < self.config.max_idle_slots.max(1) {
                // Room to keep every kind of slot (or none idle): make a new one rather than
                // repurpose one that another module would find ready.
                None
            } else {
                // Full: repurpose one of the right size, else the least recently reset: this
                // thread's own before the list's (they were reset later).
                (near::take(self, sized).or_else(|| {
                    let i = idle.iter().rposition(sized);
                    i.map(|i| idle.remove(i))
                }))
                .or_else(|| (!idle.is_empty()).then(|| idle.remove(0)))
                .or_else(|| near::take_oldest(self))
            }
        };
        match slot {
            Some(slot) => Ok(slot),
            None => Slot::reserve(),
        }
    }

    /// Takes back the slot of a memory that started at `initial` bytes: reset, then, unless
    /// the memory was loose, shrunk back to that size if it grew, so that the next memory of
    /// its kind finds it with its size and image (one `mprotect`, instead of replacing the
    /// image and faulting it in).
    fn give_back(self: &Arc<Self>, mut slot: Slot, initial: usize, marked: bool, loose: bool) {
        // If it cannot be reset, the slot is dropped (unmapped). The reset comes first: pages
        // made inaccessible keep whatever they hold.
        let max = self.config.max_idle_slots;
        if max == 0
            || slot.reset(&self.config, marked).is_err()
            || (!loose && slot.set_accessible(initial.min(slot.accessible)).is_err())
        {
            return;
        }
        // This thread keeps it; one it kept before may go to the list instead.
        if let Some(slot) = near::put(self, slot, max) {
            self.keep_idle(slot);
        }
    }

    /// Puts a reset slot on the list; beyond the bound, it is dropped (unmapped).
    fn keep_idle(&self, slot: Slot) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.config.max_idle_slots {
            idle.push(slot);
        }
    }
}

impl Drop for MemoryPool {
    fn drop(&mut self) {
        // Other threads drop theirs when they keep newer ones, or exit.
        near::forget(self);
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
    def: Box<UnsafeCell<VmMemory>>,
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
    pub(crate) fn pooled(
        engine: &crate::Engine,
        ty: MemoryType,
        image: Option<&impl ImageSource>,
        loose: bool,
    ) -> Result<LinearMemory, crate::Error> {
        let pool = engine.memory_pool();
        let len = ty.min as usize * PAGE as usize;
        if !pool.reserve_bytes(len) {
            return Err(crate::Error::Limit(format!(
                "a memory of {len} bytes would pass the engine's bound of {} bytes of linear \
                 memory",
                pool.config.max_total_bytes.unwrap_or(usize::MAX)
            )));
        }
        let made = (|| {
            let want = image.and_then(|image| pool.config.mapping(image));
            let mut slot = pool.take(len, want, loose)?;
            // An image outside the new size could not be replaced later.
            if slot.accessible != len
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
        if ty.min > ty.max.unwrap_or(MAX_PAGES).min(MAX_PAGES) {
            return Err(crate::Error::Limit(format!(
                "cannot allocate {} pages of linear memory",
                ty.min
            )));
        }
        let len = ty.min as usize * PAGE as usize;
        let accessible = if loose { len.max(slot.accessible) } else { len };
        slot.set_accessible(accessible).map_err(|e| {
            crate::Error::Limit(format!(
                "cannot allocate {} pages of linear memory: {e}",
                ty.min
            ))
        })?;
        Ok(LinearMemory {
            def: Box::new(UnsafeCell::new(VmMemory {
                base: slot.base,
                length: len as u64,
            })),
            ty,
            slot: RefCell::new(Some(slot)),
            engine,
            untouched: Cell::new(true),
            marked: Cell::new(true),
            loose: Cell::new(loose),
        })
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
    fn expose(&self) {
        if !self.untouched.replace(false) {
            return;
        }
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
            max: self.ty.max,
        }
    }

    /// The definition generated code reads (the memory is exposed: see the type's docs).
    pub fn vm(&self) -> *mut VmMemory {
        self.expose();
        self.def.get()
    }

    /// The first byte, for generated code, which marks what it writes (the memory is exposed:
    /// see the type's docs).
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
        // SAFETY: the range lies within the memory; no wasm runs on it while the runtime
        // writes for it.
        unsafe { mark_range(self.raw_base(), offset, len) };
    }

    /// The bytes, for a host function that writes them only through [`HostBytes::get_mut`],
    /// which marks what it hands out: the memory's reset stays the one by marks.
    ///
    /// # Safety
    /// No wasm code may run on this memory while the result is alive.
    pub(crate) unsafe fn host_bytes(&self) -> HostBytes<'_> {
        self.expose();
        HostBytes {
            // SAFETY: per the contract.
            bytes: unsafe { self.bytes_unexposed() },
            base: Some(self.raw_base()),
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

    fn raw_base(&self) -> *mut u8 {
        // SAFETY: plain read of our own definition.
        unsafe { (*self.def.get()).base }
    }

    pub fn len(&self) -> usize {
        // SAFETY: plain read of our own definition.
        unsafe { (*self.def.get()).length as usize }
    }

    pub fn pages(&self) -> u32 {
        (self.len() as u64 / PAGE) as u32
    }

    /// Whether the store's limiter lets this memory grow by `delta` pages.
    ///
    /// # Safety
    /// As for [`crate::store::StoreOpaque::ask`].
    pub(crate) unsafe fn may_grow(
        &self,
        store: &crate::store::StoreOpaque,
        raw: *mut crate::store::StoreOpaque,
        delta: u32,
    ) -> bool {
        let max = self.ty.max.map(|m| m as usize * PAGE as usize);
        let desired = self.len().saturating_add(delta as usize * PAGE as usize);
        // SAFETY: per the contract.
        delta == 0 || unsafe { store.may_grow(raw, Growing::Memory, self.len(), desired, max) }
    }

    /// Grows by `delta` pages; returns the old size in pages, or `None` past the maximum.
    pub fn grow(&self, delta: u32) -> Option<u32> {
        let old = self.pages();
        let new = old.checked_add(delta)?;
        if new > self.ty.max.unwrap_or(MAX_PAGES).min(MAX_PAGES) {
            return None;
        }
        if delta > 0 {
            let start = self.len();
            let bytes = delta as usize * PAGE as usize;
            if !self.pool().reserve_bytes(bytes) {
                return None;
            }
            let release = || self.pool().release_bytes(bytes);
            let mut slot = self.slot.borrow_mut();
            let slot = slot.as_mut().expect("a live memory has its slot");
            // A loose memory's slot may have the pages accessible (and zero) already.
            if slot.accessible < start + bytes {
                slot.set_accessible(start + bytes)
                    .inspect_err(|_| release())
                    .ok()?;
            }
            // SAFETY: only this memory's owners write its definition, never concurrently.
            unsafe { (*self.def.get()).length = new as u64 * PAGE };
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
        // SAFETY: bounds checked; the embedder is not running wasm while it holds `&self` here.
        buf.copy_from_slice(unsafe { &self.bytes_to_read()[offset..end] });
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
        // SAFETY: as above.
        unsafe { self.to_write(offset, end - offset).copy_from_slice(data) };
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
            self.ty.min as usize * PAGE as usize,
            self.marked.get(),
            self.loose.get(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagemap::PAGE as HOST_PAGE;

    /// Every byte of every line, alone and with others, is found and zeroed, by both ways of
    /// zeroing a page; a zero page is reported untouched.
    #[test]
    fn zeroing_written_lines_leaves_only_zeros() {
        let zero: [fn(&mut [u8]) -> bool; 2] = [zero_written_lines, zero_page_if_written];
        let mut lines = vec![[0u64; 8]; HOST_PAGE / 64];
        // SAFETY: the lines' words as bytes (any bytes are valid u64s).
        let page =
            unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), HOST_PAGE) };
        for zero in zero {
            assert!(!zero(page), "a zero page");
            for at in 0..HOST_PAGE {
                page[at] = 1 + (at % 255) as u8;
                // Another line too, some of the time.
                if at % 3 == 0 {
                    page[(at * 7 + 64) % HOST_PAGE] = 0xff;
                }
                assert!(zero(page), "byte {at}");
                assert!(page.iter().all(|&b| b == 0), "byte {at}");
            }
            page.fill(0xa5);
            assert!(zero(page), "every line");
            assert!(page.iter().all(|&b| b == 0));
            assert!(!zero(page), "zeroed again");
        }
    }
}
