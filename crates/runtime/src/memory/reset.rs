//! Resetting a slot when its memory is dropped, before anything else can take it, so that
//! nothing one instance wrote is visible to the next; in place wherever it can, so that the
//! next instance takes no page fault and the reset makes no system call.
//!
//! # Write marks
//! Before each slot's base lie [`ephem_module::MARKS_BEFORE`] bytes of *write marks*, a byte
//! per host page, which generated code sets when it stores into the page (see
//! [`ephem_module::MARK_SHIFT`] for exactly which), and the runtime when it writes for wasm
//! (bulk memory operations, data segments, images copied in,
//! [`LinearMemory::write`](super::LinearMemory::write), [`HostBytes`](super::HostBytes)). A host
//! that takes the raw bytes (`LinearMemory::bytes`, the base pointer) may write anywhere
//! unmarked, and so may code compiled without marks: the memory then says so
//! (`LinearMemory::writes_unmarked`), and its reset does not trust the marks.
//!
//! # Four ways to reset
//! - **By marks** ([`Slot::reset_by_marks`]), where every write since the last reset set them:
//!   only the marked pages are visited, and the first [`ephem_module::MARK_HEAD`] bytes of the
//!   page after each (where a store marked in one may reach). Image pages are copied back (only
//!   the cache lines that differ, so a page that was never written stays the file's), anonymous
//!   ones zeroed in place (only their written lines) up to `max(keep_resident,
//!   resident_dirty_bytes)` and discarded past that. No system call, and nothing read that was
//!   not written or next to a write.
//! - **Zeroed in place**: a slot of at most
//!   [`MemoryConfig::keep_resident`](crate::MemoryConfig::keep_resident) bytes without a mapped
//!   image. No system call; its pages stay resident for the next instance.
//! - **By page map** ([`Slot::reset_by_page_map`]): any other slot reads the kernel's page map
//!   ([`crate::pagemap`]) and undoes exactly what the instance did. Pages it never touched, and
//!   image pages it only read (still the file's), are left as they are; image pages it wrote
//!   are copied back (from the slot's pristine copies of them, see `image`, or from the
//!   image's file); anonymous pages it wrote are zeroed in place, up to
//!   [`MemoryConfig::resident_dirty_bytes`](crate::MemoryConfig::resident_dirty_bytes) of them;
//!   the rest (anonymous pages past that bound, swapped-out pages, and everything past the part
//!   of the slot whose page map is read) is discarded with `madvise(MADV_DONTNEED)`, after which
//!   anonymous pages read as zeros and a mapped image's pages as the file again.
//! - **Discarded**: without a page map, everything past `keep_resident`.
//!
//! Zeroing in place never writes a page that is all zeros (so never the shared zero page), and
//! on CPUs with AVX2 writes only the cache lines that are not (see `zero`).
//!
//! Why in place: the next instance of the same module finds the pages it will read and write
//! present and takes no fault for them, and a reset that discards nothing makes the kernel
//! flush no other core's TLB, which is what limits threads running wasm in one process
//! (BENCHMARKS.md). A reset slot keeps its image mapped for the next memory of the same
//! artifact (see `image`).

use std::cell::RefCell;

use rustix::mm::Advice;

use super::MemoryConfig;
use super::slot::Slot;
use super::zero::{copy_differing_lines, is_zero, zero_written_lines};

impl Slot {
    /// Makes everything an instance wrote disappear (see the module documentation): anonymous
    /// pages read as zeros again, a mapped image's pages as the file again. Without
    /// `reuse_image`, the image is marked as one no memory may take as it is.
    pub(super) fn reset(&mut self, config: &MemoryConfig, marked: bool) -> rustix::io::Result<()> {
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
        // SAFETY: `[0, keep)` is accessible anonymous memory (`keep` is 0 where an image is
        // mapped), and nothing references it: the memory that used it is being dropped.
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
        // SAFETY: the memory that used the slot is being dropped, so no wasm runs on it; the
        // slice of marks ends with this statement (as every one below does, before anything
        // else takes `self`).
        let mut page = next_mark(unsafe { self.marks(pages) }, 0).min(pages);
        while page < pages {
            let at = page * HOST_PAGE;
            // SAFETY: as for the first `marks`: a slice that ends with this expression.
            if unsafe { self.marks(pages) }[page] == 0 {
                copy_run.step(false, at, |f, t| self.copy_back(f, t))?;
                discard_run.step(false, at, |f, t| self.discard(f, t))?;
                // The page after a marked one: only its head can have been written.
                self.reset_head(at)?;
                // SAFETY: as for the first `marks`: a slice that ends with this statement.
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
        // SAFETY: as for the first `marks`: a slice that ends with this statement.
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
    /// them present for the next instance and, unlike discarding, makes the kernel flush no
    /// other core's TLB.
    ///
    /// Where the page map is asked with `PAGEMAP_SCAN`, which costs by where pages were touched,
    /// every reset asks about the whole slot (up to [`MAX_SCAN`]) and discards only what needs
    /// it: discarding the rest of the slot blindly would make the kernel flush the TLBs of the
    /// other cores running this process even where there was nothing to discard (BENCHMARKS.md).
    ///
    /// Reading the page map file instead costs per page read, touched or not (see `pagemap`),
    /// so there a reset reads it only up to the slot's high-water mark, below which its
    /// instances touched pages densely enough (a page per [`SCAN_DENSITY`] bytes) that the
    /// faults saved pay for the reading; the rest is discarded whole, which costs little where
    /// nothing was touched. Below the mark there may be nothing to read at all (an instance
    /// that touches no memory makes one `madvise`).
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
/// [`Slot::reset_by_page_map`]. Eight bytes: a slot moves in and out of the pool's lists on
/// every invocation, where its size costs time (BENCHMARKS.md).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Learned {
    /// The high-water mark, in host pages: resets read the page map below it.
    mark_pages: u32,
    /// Resets until the next reads the whole slot (0: the next one does).
    until_full: u16,
    /// The current wait between whole reads.
    period: u16,
}

impl Learned {
    /// The high-water mark, in bytes.
    fn mark(&self) -> usize {
        (self.mark_pages as usize) << 12
    }

    /// How far a reset that is not a whole read reads: the mark and a margin past it, where
    /// a page touched says that instances may touch more past the mark than that.
    fn reach(&self) -> usize {
        match self.mark() {
            0 => 0,
            mark => mark + (mark / 4).max(64 << 10),
        }
    }

    /// After a reset that read all of the slot's page map (up to [`MAX_SCAN`]) if `full`, else
    /// up to [`Learned::reach`], and found `touched` pages, the last ending at `top`.
    fn learn(&mut self, full: bool, touched: usize, top: usize) {
        if !full {
            // Touched past the mark: look at the whole slot at the next reset.
            self.until_full = if top > self.mark() {
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
        self.period = if mark > self.mark() || self.period == 0 {
            FIRST_FULL_SCAN
        } else {
            (self.period * 2).min(MAX_FULL_SCAN)
        };
        // (A slot holds at most 2^32 host pages.)
        self.mark_pages = mark.div_ceil(1 << 12) as u32;
        self.until_full = self.period;
    }
}

/// The most of a slot a reset reads the page map for: see [`Slot::reset_by_page_map`].
const MAX_SCAN: usize = 64 << 20;
/// See [`Slot::reset_by_page_map`].
const SCAN_DENSITY: usize = 256 << 10;
/// See [`Slot::reset_by_page_map`].
const FIRST_FULL_SCAN: u16 = 8;
/// See [`Slot::reset_by_page_map`].
const MAX_FULL_SCAN: u16 = 256;

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
