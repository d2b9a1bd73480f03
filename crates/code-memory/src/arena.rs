//! Address space for code mapped straight from files, reused without unmapping.
//!
//! Mapping a file's text for every load and unmapping it afterwards costs two system calls per
//! load. Instead, texts are mapped into regions of one reserved range, by size class (powers of
//! two from 64 KiB to 1 GiB): a load maps its text over a free region of its class with
//! `MAP_FIXED`, which replaces what an earlier load left there within the same call, and
//! releasing a region only puts it on its class's free list.
//!
//! # Invariants
//! - While a region is owned, it shows exactly its owner's text (whose last page the file pads
//!   with `int3`) and nothing executable after it: if an earlier text reached further, that
//!   tail is made inaccessible first (a second system call, only then; a free region whose old
//!   text is no longer than the new one is preferred).
//! - A released region keeps its text mapped until the region is used again, as a released
//!   code slot keeps its code: nothing refers to it, and the registry no longer resolves
//!   addresses in it. Such a mapping keeps its file's pages (and a deleted file's disk space)
//!   until then; the free regions bound how many.
//! - **How many texts stay mapped**: a class makes new regions up to a floor of its own, and
//!   beyond it while all classes' extra regions stay within [`KEPT_BYTES`] of address space
//!   and [`KEPT_REGIONS`] mappings; then a load whose text no free region holds evicts its
//!   class's text released longest ago. Regions are never given back, so the bounds are
//!   first come, first served between classes. Why that many: a kept text costs a mapping,
//!   the page tables of the pages its runs touched, and its file's pages, which the page cache
//!   holds anyway while the file is used; what is never kept is a copy. The floors alone are
//!   too few for many distinct modules taking turns, which would then map their text on nearly
//!   every load (see docs/bench-log/).
//! - **Affinity**: a load that names its text ([`TextId`]) takes back a free region that still
//!   maps that very text, as it is: no system call, and the pages its earlier runs touched are
//!   still present (no faults). A region is taken back only for an equal id, and the caller
//!   promises that equal ids mean equal bytes (ephem's are an artifact's seal, a keyed hash of
//!   the whole file, with its device and inode). A load without an id,
//!   or for a text no free region holds, maps as above.
//! - Texts larger than the largest class, or loads after the range is used up, get a mapping
//!   of their own (the caller's fallback).
//! - Each region owns an entry of the code [`registry`](crate::registry) from when it is made,
//!   set while it is owned and clear while it is free: a load writes no line that the loads of
//!   other threads into other regions write.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, LazyLock, Mutex};

use crate::registry;
use crate::sys::{Mapping, page_size, round_up};

/// Address space reserved for regions (never backed until mapped).
const RESERVE: usize = 64 << 30;
const MIN_CLASS_SHIFT: u32 = 16;
const MAX_CLASS_SHIFT: u32 = 30;
const CLASSES: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
/// Regions each class may make, whatever the others made, before a load that finds no free
/// region holding its text evicts the text released longest ago (so that texts of one class
/// that take turns keep a region each).
const FLOOR_PER_CLASS: usize = 32;
/// Address space that regions may span in all beyond those floors: what bounds the texts kept
/// mapped for affinity. Half the cache's default size bound: a kept text whose cache entry is
/// removed keeps its disk space until its region is used again, so at most that much.
const KEPT_BYTES: usize = 512 << 20;
/// Regions in all beyond the floors: each is a mapping the kernel counts (against
/// `vm.max_map_count`, 65 530 by default) and an entry of the code registry.
const KEPT_REGIONS: usize = 4096;

/// What a text is, for taking back a free region that still maps it (see the module
/// documentation): equal ids must mean equal bytes.
#[derive(Clone, Copy, Debug, Eq)]
pub struct TextId(pub [u64; 6]);

impl std::hash::Hash for TextId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Without a call: a load compares its id with the regions and slots its thread keeps and every
/// free slot's, and the derived comparison would call `memcmp` each time (see docs/bench-log/).
impl PartialEq for TextId {
    fn eq(&self, other: &TextId) -> bool {
        self.0.iter().zip(&other.0).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// A region that holds a mapped text; released (not unmapped) on drop.
#[derive(Debug)]
pub(crate) struct Region {
    arena: &'static Arc<Arena>,
    place: Place,
    class: usize,
}

/// A region's place, its registry entry, how far its mapped text reaches (bytes from its
/// start), and which text that is, if it is known to be exactly one.
#[derive(Clone, Copy, Debug)]
struct Place {
    at: usize,
    entry: usize,
    extent: usize,
    holds: Option<TextId>,
}

#[derive(Debug)]
struct Arena {
    range: Mapping,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Offset of the first region never handed out.
    next: usize,
    classes: [Class; CLASSES],
    /// Regions made beyond the floors, and the address space they span.
    extra: usize,
    extra_bytes: usize,
    /// Counts releases, to order the free regions that hold texts.
    released: u64,
}

/// A class's regions that are free.
#[derive(Debug, Default)]
struct Class {
    made: usize,
    /// Those that map a known text, by when they were released (the oldest first).
    kept: BTreeMap<u64, Place>,
    /// For each text, the latest of its releases in `kept` (a text two loads mapped at once has
    /// two regions; the older one is found only as the oldest).
    by_text: HashMap<TextId, u64>,
    /// Those that hold no known text.
    blank: Vec<Place>,
}

impl Class {
    fn put(&mut self, place: Place, released: u64) {
        match place.holds {
            Some(id) => {
                self.kept.insert(released, place);
                self.by_text.insert(id, released);
            }
            None => self.blank.push(place),
        }
    }

    /// The free region that holds text `id`.
    fn take_text(&mut self, id: TextId) -> Option<Place> {
        let released = self.by_text.remove(&id)?;
        self.kept.remove(&released)
    }

    /// The free region that holds the text released longest ago.
    fn take_oldest(&mut self) -> Option<Place> {
        let (released, place) = self.kept.pop_first()?;
        let id = place.holds.expect("kept regions hold a text");
        if self.by_text.get(&id) == Some(&released) {
            self.by_text.remove(&id);
        }
        Some(place)
    }

    /// A free region that holds no known text, one whose mapping is not longer than `pages`
    /// first (no tail to clear).
    fn take_blank(&mut self, pages: usize) -> Option<Place> {
        let i = (self.blank.iter().enumerate())
            .min_by_key(|(_, f)| f.extent > pages)?
            .0;
        Some(self.blank.swap_remove(i))
    }
}

/// Reserved on first use; `None` if the reservation failed (every text then gets a mapping of
/// its own).
static ARENA: LazyLock<Option<Arc<Arena>>> = LazyLock::new(|| {
    Some(Arc::new(Arena {
        range: Mapping::reserve(RESERVE).ok()?,
        state: Mutex::default(),
    }))
});

/// Maps `len` bytes of `file` from `offset` (page-aligned) read+execute into a region, or takes
/// back a free region that maps the text `id` already; `None` when the arena cannot take it
/// (see the module documentation).
pub(crate) fn place(
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    id: Option<TextId>,
) -> io::Result<Option<Region>> {
    let Some(arena) = ARENA.as_ref() else {
        return Ok(None);
    };
    let pages = round_up(len.max(1), page_size());
    let shift = pages
        .next_power_of_two()
        .trailing_zeros()
        .max(MIN_CLASS_SHIFT);
    if shift > MAX_CLASS_SHIFT {
        return Ok(None);
    }
    let class = (shift - MIN_CLASS_SHIFT) as usize;
    if let Some(place) = id.and_then(|id| near::take(arena, class, id)) {
        return Ok(Some(Region {
            arena,
            place,
            class,
        }));
    }
    let taken = {
        let mut state = arena.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        let class_free = &mut state.classes[class];
        if let Some(place) = id.and_then(|id| class_free.take_text(id)) {
            return Ok(Some(Region {
                arena,
                place,
                class,
            }));
        }
        // A region that holds no known text (a short one first); else a new region while the
        // class is within its floor or all are within the bounds; else the text released
        // longest ago goes.
        let size = 1usize << shift;
        let floor = class_free.made < FLOOR_PER_CLASS;
        let extra = state.extra < KEPT_REGIONS && state.extra_bytes + size <= KEPT_BYTES;
        let empty = class_free.kept.is_empty() && class_free.blank.is_empty();
        let fresh = (floor || extra || empty) && state.next + size <= RESERVE;
        match class_free.take_blank(pages) {
            Some(place) => Some(place),
            None => match fresh.then(registry::take).flatten() {
                Some(entry) => {
                    let at = state.next;
                    state.next += size;
                    class_free.made += 1;
                    if !floor {
                        state.extra += 1;
                        state.extra_bytes += size;
                    }
                    Some(Place {
                        at,
                        entry,
                        extent: 0,
                        holds: None,
                    })
                }
                None => class_free.take_oldest(),
            },
        }
    };
    let Some(old) = taken else {
        return Ok(None);
    };
    // From here the region is ours; it goes back to the free list on any failure, marked as
    // possibly mapped throughout (a failed MAP_FIXED may have replaced part of it).
    let mut region = Region {
        arena,
        place: Place {
            extent: 1 << shift,
            holds: None,
            ..old
        },
        class,
    };
    arena.range.place_file(old.at, pages, file, offset)?;
    if old.extent > pages {
        arena.range.clear(old.at + pages, old.extent - pages)?;
    }
    region.place.extent = pages;
    region.place.holds = id;
    Ok(Some(region))
}

impl Region {
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.arena.range.as_ptr().wrapping_add(self.place.at)
    }

    /// Records the region's first `len` bytes in the registry, with `tag`, until it is dropped.
    pub(crate) fn register(&self, len: usize, tag: usize) {
        let start = self.as_ptr() as usize;
        registry::set(self.place.entry, start, start + len, tag);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        registry::clear(self.place.entry);
        if let Some((class, place)) = near::put(self.arena, self.class, self.place) {
            self.arena.release(class, place);
        }
    }
}

impl Arena {
    /// Puts a region on its class's free list.
    fn release(&self, class: usize, place: Place) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.released += 1;
        let released = state.released;
        state.classes[class].put(place, released);
    }
}

impl crate::near::Pool<(usize, Place)> for Arena {
    fn take_back(&self, (class, place): (usize, Place)) {
        self.release(class, place);
    }
}

/// The regions each thread released last, in front of the free lists: a thread that loads the
/// same texts again takes their regions back without the arena's lock, which threads would
/// otherwise take turns at on every load (see docs/bench-log/). A region a thread keeps is
/// free but not on a list: only that thread takes it back, and only for its own text; the rest
/// go to the lists when it keeps newer ones, or exits.
mod near {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::{Arena, Place, TextId};
    use crate::near::{Kept, keep, with};

    /// Regions a thread keeps.
    const PER_THREAD: usize = 8;

    thread_local! {
        /// `(class, place)`; given back to the lists on thread exit.
        static NEAR: RefCell<Kept<Arena, (usize, Place)>> = const { RefCell::new(Kept::new()) };
    }

    /// The region of class `class` this thread keeps that holds text `id`.
    pub(super) fn take(arena: &Arena, class: usize, id: TextId) -> Option<Place> {
        let wanted = |(c, p): &(usize, Place)| *c == class && p.holds == Some(id);
        Some(with(&NEAR, |kept| kept.take(arena, wanted))??.1)
    }

    /// Keeps a released region that holds a known text; returns what goes to the lists: the
    /// region itself (no known text, or the thread is exiting) or the oldest one kept.
    pub(super) fn put(arena: &Arc<Arena>, class: usize, place: Place) -> Option<(usize, Place)> {
        if place.holds.is_none() {
            return Some((class, place));
        }
        keep(&NEAR, arena, (class, place), PER_THREAD, PER_THREAD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    /// What `/proc/self/maps` says of the page at `addr`: its permissions.
    fn perms(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let (range, rest) = line.split_once(' ').unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).unwrap(),
                usize::from_str_radix(hi, 16).unwrap(),
            );
            if (lo..hi).contains(&addr) {
                return rest[..4].to_owned();
            }
        }
        panic!("{addr:#x} is not mapped")
    }

    fn file_of(pages: usize, byte: u8) -> std::fs::File {
        let mut file = tempfile_in_memory();
        file.write_all(&vec![byte; pages * page_size()]).unwrap();
        file
    }

    fn tempfile_in_memory() -> std::fs::File {
        let fd = crate::sys::memory_file(0).unwrap();
        std::fs::File::from(fd)
    }

    /// A released region is used again for the next text of its class; a shorter text leaves
    /// nothing of the longer one accessible after it.
    #[test]
    fn regions_are_reused_and_show_only_their_text() {
        let page = page_size();
        // 20 and 17 pages: the same class (128 KiB with 4 KiB pages), distinct from other tests.
        let (long, short) = (file_of(20, 0xaa), file_of(17, 0xbb));
        let first = place(long.as_fd(), 0, 20 * page, None).unwrap().unwrap();
        let at = first.as_ptr() as usize;
        assert_eq!(perms(at), "r-xp");
        // SAFETY: the region maps 20 readable pages.
        assert_eq!(unsafe { *first.as_ptr().add(19 * page) }, 0xaa);
        drop(first);

        let second = place(short.as_fd(), 0, 17 * page, None).unwrap().unwrap();
        assert_eq!(second.as_ptr() as usize, at, "the free region is reused");
        // SAFETY: the region maps 17 readable pages.
        assert_eq!(unsafe { *second.as_ptr().add(16 * page) }, 0xbb);
        assert_eq!(
            perms(at + 17 * page),
            "---p",
            "the longer text's tail is gone"
        );
        assert_eq!(perms(at + 19 * page), "---p");
    }

    /// A free region that maps a text is taken back as it is for the same id (the file is
    /// changed behind the mapping's back here, to show that nothing is mapped again), and never
    /// for another id.
    #[test]
    fn a_region_is_taken_back_only_for_its_own_text() {
        let page = page_size();
        // 40 pages: the 256 KiB class, distinct from other tests.
        let (a, b) = (file_of(40, 0x11), file_of(40, 0x22));
        let (id_a, id_b) = (TextId([1; 6]), TextId([2; 6]));
        let first = place(a.as_fd(), 0, 40 * page, Some(id_a)).unwrap().unwrap();
        let at = first.as_ptr() as usize;
        drop(first);
        let again = place(b.as_fd(), 0, 40 * page, Some(id_a)).unwrap().unwrap();
        assert_eq!(again.as_ptr() as usize, at);
        assert_eq!(
            // SAFETY: `again` is a live region that maps 40 readable pages (of `a`).
            unsafe { *again.as_ptr() },
            0x11,
            "taken back without mapping b"
        );
        drop(again);
        let other = place(b.as_fd(), 0, 40 * page, Some(id_b)).unwrap().unwrap();
        assert_eq!(
            // SAFETY: `other` is a live region that maps 40 readable pages of `b`.
            unsafe { *other.as_ptr() },
            0x22,
            "another id maps its own text"
        );
        drop(other);
        let back = place(a.as_fd(), 0, 40 * page, Some(id_a)).unwrap().unwrap();
        assert_eq!(
            // SAFETY: `back` is a live region that maps 40 readable pages of `a`.
            unsafe { *back.as_ptr() },
            0x11,
            "a's region was taken by b: mapped again"
        );
    }

    /// Beyond its floor, a class makes regions for the texts that take turns in it until the
    /// bounds in all are reached, and only then evicts the text released longest ago.
    #[test]
    fn texts_are_kept_beyond_the_floor_up_to_the_bounds() {
        let page = page_size();
        // 800 KiB: the 1 MiB class with 4 KiB pages, distinct from other tests; texts in one
        // file, each starting with a byte of its own, and a decoy with another byte.
        let pages = (800 << 10) / page;
        let size = (pages * page).next_power_of_two();
        let texts = FLOOR_PER_CLASS + KEPT_BYTES / size + 64;
        let file = crate::sys::memory_file(0).unwrap();
        let file = std::fs::File::from(file);
        file.set_len(((texts + 1) * pages * page) as u64).unwrap();
        let byte = |k: usize| (k % 251) as u8 + 1;
        for k in 0..texts {
            std::os::unix::fs::FileExt::write_all_at(&file, &[byte(k)], (k * pages * page) as u64)
                .unwrap();
        }
        let decoy = (texts * pages * page) as u64;
        std::os::unix::fs::FileExt::write_all_at(&file, &[0xff], decoy).unwrap();
        let id = |k: usize| TextId([k as u64, 0x7e, 0x57, 0, 0, 0]);
        // Each text loaded and released in turn; then loaded again from the decoy: a region
        // that still maps the text shows its byte, one mapped again shows the decoy's.
        let load = |k: usize, offset: u64| {
            let region = place(file.as_fd(), offset, pages * page, Some(id(k)))
                .unwrap()
                .unwrap();
            // SAFETY: the region maps `pages` readable pages.
            unsafe { *region.as_ptr() }
        };
        for k in 0..texts {
            assert_eq!(load(k, (k * pages * page) as u64), byte(k));
        }
        let back = texts - 100;
        assert_eq!(load(back, decoy), byte(back), "kept beyond the floor");
        assert_eq!(load(0, decoy), 0xff, "the oldest text was evicted");
        let arena = ARENA.as_ref().unwrap();
        let class = (size.trailing_zeros() - MIN_CLASS_SHIFT) as usize;
        let made = arena.state.lock().unwrap().classes[class].made;
        assert!(
            made <= FLOOR_PER_CLASS + KEPT_BYTES / size,
            "{made} regions"
        );
    }

    /// A thread takes back the region it released for the same text, and another thread does
    /// not see that region until the first one exits (then it does, text and all).
    #[test]
    fn a_thread_keeps_the_regions_it_released() {
        let page = page_size();
        // 70 pages: the 512 KiB class, distinct from other tests.
        let a = file_of(70, 0x33);
        let id = TextId([3; 6]);
        let load = || {
            let region = place(a.as_fd(), 0, 70 * page, Some(id)).unwrap().unwrap();
            // SAFETY: the region maps 70 readable pages.
            assert_eq!(unsafe { *region.as_ptr() }, 0x33);
            region.as_ptr() as usize
        };
        let (ours, again, theirs) = std::thread::scope(|s| {
            let ours = load();
            let theirs = s.spawn(load).join().unwrap();
            (ours, load(), theirs)
        });
        assert_eq!(ours, again, "kept by this thread");
        assert_ne!(ours, theirs, "not taken by another thread");
        // The other thread has exited: its region went to the free list, and a third thread
        // takes it (this one still keeps its own).
        let third = std::thread::scope(|s| s.spawn(load).join().unwrap());
        assert_eq!(third, theirs, "released on exit");
    }
}
