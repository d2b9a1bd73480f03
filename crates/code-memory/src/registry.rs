//! A process-wide, lock-free record of where published code is, readable from a signal handler.
//!
//! Each code slot and each arena region owns one entry for its lifetime: publishing stores the
//! code's range and the publisher's tag, releasing clears it. Entries are taken only when a slot
//! or region is made, and each fills a cache line of its own, so that threads loading code into
//! their own slots and regions never write a line another thread writes. [`lookup`] only reads
//! atomics, so it is async-signal-safe.
//! A runtime uses it to tell a fault in generated code (to turn into a trap) from any other fault
//! (to leave alone), and the tag to find what the faulting code belongs to.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Most slots and regions that can exist at once in the whole process.
pub const CAPACITY: usize = 1 << 14;

#[repr(align(64))]
struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    tag: AtomicUsize,
    taken: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    tag: AtomicUsize::new(0),
    taken: AtomicUsize::new(0),
};

static ENTRIES: [Entry; CAPACITY] = [EMPTY; CAPACITY];
/// One past the highest entry ever taken; lookups scan only below it.
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// Takes a free entry for a new slot or region.
pub(crate) fn take() -> Option<usize> {
    for (i, e) in ENTRIES.iter().enumerate() {
        // Read first: a compare-exchange would take every taken entry's line for writing.
        if e.taken.load(Ordering::Relaxed) == 0
            && e.taken
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            return Some(i);
        }
    }
    None
}

/// Gives an entry back when its slot or region is destroyed.
pub(crate) fn give_back(i: usize) {
    clear(i);
    ENTRIES[i].taken.store(0, Ordering::Release);
}

/// Records that `[start, end)` now holds code published with `tag`.
pub(crate) fn set(i: usize, start: usize, end: usize, tag: usize) {
    let e = &ENTRIES[i];
    e.end.store(0, Ordering::Release);
    e.start.store(start, Ordering::Release);
    e.tag.store(tag, Ordering::Release);
    e.end.store(end, Ordering::Release);
}

/// Records that entry `i` holds no published code.
pub(crate) fn clear(i: usize) {
    ENTRIES[i].end.store(0, Ordering::Release);
}

/// Published code containing `pc`: its start address and tag. Async-signal-safe.
pub fn lookup(pc: usize) -> Option<(usize, usize)> {
    let high = HIGH.load(Ordering::Acquire);
    ENTRIES[..high].iter().find_map(|e| {
        let end = e.end.load(Ordering::Acquire);
        let start = e.start.load(Ordering::Acquire);
        (start <= pc && pc < end).then(|| (start, e.tag.load(Ordering::Acquire)))
    })
}
