//! A process-wide, lock-free record of where published code is, readable from a signal handler.
//!
//! Each code slot and each arena region owns one entry for its lifetime: publishing stores the
//! code's range and the publisher's tag, releasing clears it. Entries are taken only when a slot
//! or region is made, and each fills a cache line of its own, so that threads loading code into
//! their own slots and regions never write a line another thread writes. [`lookup`] only reads
//! atomics, so it is async-signal-safe.
//! A runtime uses it to tell a fault in generated code (to turn into a trap) from any other fault
//! (to leave alone), and the tag to find what the faulting code belongs to.

use std::cell::Cell;
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

thread_local! {
    /// The entry this thread's last lookup found. A trap's code and the frames above it are
    /// nearly always in one text, loaded by this thread into a slot or region whose entry
    /// other threads leave alone: looking there first reads no line that other threads write
    /// as they load (a scan read all of them, on every lookup).
    static LAST: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Published code containing `pc`: its start address and tag. Async-signal-safe.
pub fn lookup(pc: usize) -> Option<(usize, usize)> {
    let last = LAST.try_with(Cell::get).unwrap_or(usize::MAX);
    if let Some(found) = ENTRIES.get(last).and_then(|e| holding(e, pc)) {
        return Some(found);
    }
    let high = HIGH.load(Ordering::Acquire);
    let (i, found) = (ENTRIES[..high].iter().enumerate())
        .find_map(|(i, e)| holding(e, pc).map(|found| (i, found)))?;
    let _ = LAST.try_with(|l| l.set(i));
    Some(found)
}

/// `(start, tag)` of entry `e` if it holds `pc`. An entry being set meanwhile (its `end` or
/// `start` changes between two reads) is passed over: it is not the entry of code that is
/// running, whose entry stays as it is.
fn holding(e: &Entry, pc: usize) -> Option<(usize, usize)> {
    let end = e.end.load(Ordering::Acquire);
    let start = e.start.load(Ordering::Acquire);
    if !(start <= pc && pc < end) {
        return None;
    }
    let tag = e.tag.load(Ordering::Acquire);
    let settled = e.end.load(Ordering::Acquire) == end && e.start.load(Ordering::Acquire) == start;
    settled.then_some((start, tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry a lookup found last is looked at first, and never answers for what it no
    /// longer holds: a range it was set to since, a range it was cleared of, or a pc outside it.
    #[test]
    fn the_last_entry_found_answers_only_for_what_it_holds() {
        // Addresses no code has (the registry only compares them).
        let (a, b) = (take().unwrap(), take().unwrap());
        let base = 0x7e57_0000_0000_usize;
        set(a, base, base + 0x1000, 0xa);
        set(b, base + 0x4000, base + 0x5000, 0xb);
        assert_eq!(lookup(base + 0x10), Some((base, 0xa)));
        assert_eq!(
            lookup(base + 0x4010),
            Some((base + 0x4000, 0xb)),
            "past the last one"
        );
        assert_eq!(
            lookup(base + 0x4010),
            Some((base + 0x4000, 0xb)),
            "the last one"
        );
        // The last entry found now holds other code, under another tag.
        set(b, base + 0x8000, base + 0x9000, 0xc);
        assert_eq!(lookup(base + 0x4010), None, "its old range");
        assert_eq!(lookup(base + 0x8010), Some((base + 0x8000, 0xc)));
        assert_eq!(lookup(base + 0x10), Some((base, 0xa)));
        clear(a);
        assert_eq!(lookup(base + 0x10), None, "cleared");
        give_back(a);
        give_back(b);
        assert_eq!(lookup(base + 0x8010), None, "given back");
    }
}
