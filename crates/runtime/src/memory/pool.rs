//! [`MemoryPool`]: an engine's idle slots, reset and ready for new memories.
//!
//! Invariants: a slot on the list or kept by a thread is reset (see `reset`), so a memory that
//! takes one finds nothing of the instance before it; the lock is held for a scan of the list,
//! never across a system call; and the steady state (a thread taking back the slot it reset
//! last for the same module) takes no lock at all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::MemoryConfig;
use super::image::MappedImage;
use super::slot::Slot;

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
/// lock, so that threads do not take turns at one lock and one list on every invocation. A take
/// that finds no slot of its own there chooses from the list as above, counting the thread's
/// kept slots as if they were on it, and leaves them where they are: emptied onto the list, a
/// thread's kept slots would leave it only the one it reset last, and a thread that runs a few
/// modules in turn would go to the list for most of them (BENCHMARKS.md). The pool holds at
/// most `max_idle_slots` idle slots plus, per thread, the [`near::PER_THREAD`] (no more than
/// `max_idle_slots`) that thread keeps.
pub(crate) struct MemoryPool {
    pub(super) config: MemoryConfig,
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
    pub fn take_oldest(pool: &MemoryPool, wanted: impl Fn(&Slot) -> bool) -> Option<Slot> {
        with(&NEAR, |kept| kept.take_oldest(pool, wanted)).flatten()
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
    pub(super) fn reserve_bytes(&self, bytes: usize) -> bool {
        let Some(bound) = self.config.max_total_bytes else {
            return true;
        };
        self.in_use
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= bound)
            })
            .is_ok()
    }

    /// [`MemoryPool::reserve_bytes`] for a new memory of `len` bytes, or the error that says
    /// why not.
    pub(super) fn reserve(&self, len: usize) -> Result<(), crate::Error> {
        if self.reserve_bytes(len) {
            return Ok(());
        }
        Err(crate::Error::Limit(format!(
            "a memory of {len} bytes would pass the engine's bound of {} bytes of linear memory",
            self.config.max_total_bytes.unwrap_or(usize::MAX)
        )))
    }

    pub(super) fn release_bytes(&self, bytes: usize) {
        if self.config.max_total_bytes.is_some() {
            self.in_use.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// A slot for a memory of `len` bytes (a large slot if `large`: see `MemoryType::large`),
    /// preferably one where `image` is mapped; `loose` as for `LinearMemory::pooled`.
    pub(super) fn take(
        &self,
        len: usize,
        image: Option<MappedImage>,
        loose: bool,
        large: bool,
    ) -> Result<Slot, crate::Error> {
        // Without image reuse, no idle slot's image is wanted: any of the size fits. A loose
        // memory fits any slot with at least its size accessible. A slot of the other kind
        // never fits.
        let reuse = self.config.reuse_images;
        let sized =
            |s: &Slot| s.large == large && (s.accessible == len || (loose && s.accessible > len));
        let kind = |s: &Slot| s.large == large;
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
                .or_else(|| idle.iter().position(kind).map(|i| idle.remove(i)))
                .or_else(|| near::take_oldest(self, kind))
            }
        };
        match slot {
            Some(slot) => Ok(slot),
            None => Slot::reserve(large),
        }
    }

    /// Takes back the slot of a memory that started at `initial` bytes: reset, then, unless
    /// the memory was loose, shrunk back to that size if it grew, so that the next memory of
    /// its kind finds it with its size and image (one `mprotect`, instead of replacing the
    /// image and faulting it in).
    pub(super) fn give_back(
        self: &Arc<Self>,
        mut slot: Slot,
        initial: usize,
        marked: bool,
        loose: bool,
    ) {
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
