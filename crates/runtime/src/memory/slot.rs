//! One reservation of address space, a *slot*, and what is mapped in it: the memory a
//! [`LinearMemory`](super::LinearMemory) lives in while it lives, and the pool keeps while it
//! is idle.
//!
//! Layout: [`ephem_module::MARKS_BEFORE`] bytes of write marks (read+write, see `reset`), then
//! the base, then [`RESERVATION`] bytes of which `[base, base + accessible)` is read+write and
//! the rest inaccessible; a large slot (for a 64-bit memory) has
//! [`ephem_module::MARKS_BEFORE_LARGE`] and [`LARGE_RESERVATION`] instead. Where `image` says, the accessible pages are a private mapping of an
//! artifact's image; everywhere else they are anonymous.
//!
//! Invariants: a slot is owned by exactly one memory or the pool (it is `Send`, never shared);
//! `accessible` is what the kernel has accessible, and `image` what the kernel has mapped; no
//! mapping here is ever executable. The system calls are here: a slot is reserved once and
//! unmapped when the pool drops it, and changing its accessible size or its image is a call;
//! a memory that takes a slot of its size with its image makes none.

use std::ptr::null_mut;

use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

use super::image::{ImageFile, ImageSource, MappedImage};
use super::reset::Learned;
use super::{LARGE_RESERVATION, RESERVATION};

/// One reservation: `[base, base + accessible)` is read+write, the rest inaccessible. Where
/// `image` says, the accessible pages are a private mapping of an artifact's image; everywhere
/// else they are anonymous.
pub(super) struct Slot {
    pub(super) base: *mut u8,
    pub(super) accessible: usize,
    pub(super) image: Option<MappedImage>,
    /// The file `image` is mapped from: a reset copies back from it the image pages an
    /// instance wrote (see [`Slot::reset_by_page_map`]). Replaced, with its pristine pages,
    /// whenever `image` is.
    pub(super) image_file: Option<ImageFile>,
    /// What the slot learned of where its instances touch memory (see
    /// [`Slot::reset_by_page_map`]).
    pub(super) learned: Learned,
    /// Whether this is a large slot (see `MemoryType::large`), whose marks and reservation
    /// are [`ephem_module::MARKS_BEFORE_LARGE`] and [`LARGE_RESERVATION`] bytes instead of
    /// [`ephem_module::MARKS_BEFORE`] and [`RESERVATION`].
    pub(super) large: bool,
}

// SAFETY: a slot is plain address space owned by whoever holds it (the pool's list or one
// memory); the pointer is never shared while owned.
unsafe impl Send for Slot {}

impl Slot {
    /// Bytes of marks before the base, and of reservation behind it.
    fn sizes(large: bool) -> (usize, usize) {
        match large {
            true => (ephem_module::MARKS_BEFORE_LARGE, LARGE_RESERVATION),
            false => (ephem_module::MARKS_BEFORE, RESERVATION),
        }
    }

    /// A new slot, large or not.
    pub(super) fn reserve(large: bool) -> Result<Slot, crate::Error> {
        let failed = |e| crate::Error::Limit(format!("cannot reserve linear memory: {e}"));
        let (marks, reservation) = Slot::sizes(large);
        // SAFETY: a fresh private mapping the kernel places; nothing else is affected.
        let start = unsafe {
            rustix::mm::mmap_anonymous(
                null_mut(),
                marks + reservation,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(failed)?;
        // SAFETY: the first `marks` bytes of the reservation just made, ours alone.
        let opened = unsafe {
            rustix::mm::mprotect(start, marks, MprotectFlags::READ | MprotectFlags::WRITE)
        };
        let slot = Slot {
            // SAFETY: inside the reservation (`marks` is less than its length).
            base: unsafe { start.cast::<u8>().add(marks) },
            accessible: 0,
            image: None,
            image_file: None,
            learned: Learned::default(),
            large,
        };
        // On failure, dropping the slot unmaps the reservation.
        opened.map_err(failed).map(|()| slot)
    }

    /// The write marks of the first `pages` host pages (see [`ephem_module::MARK_SHIFT`]),
    /// and the mark after them.
    ///
    /// # Safety
    /// No wasm code may run on the slot's memory while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn marks(&self, pages: usize) -> &mut [u8] {
        let (marks, _) = Slot::sizes(self.large);
        debug_assert!(pages < marks);
        // SAFETY: `[base - marks, base)` is our read+write marks region; exclusive per the
        // contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.sub(marks), pages + 1) }
    }

    /// Makes exactly `[0, len)` accessible.
    pub(super) fn set_accessible(&mut self, len: usize) -> rustix::io::Result<()> {
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
    pub(super) fn unmap_image(&mut self) -> rustix::io::Result<()> {
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
    pub(super) fn map_image(
        &mut self,
        image: &impl ImageSource,
        want: MappedImage,
    ) -> rustix::io::Result<()> {
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
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (marks, reservation) = Slot::sizes(self.large);
        // SAFETY: we own the reservation and nothing references it any more.
        let _ = unsafe { rustix::mm::munmap(self.base.sub(marks).cast(), marks + reservation) };
    }
}
