//! Slots a thread keeps in front of a pool's shared list, so that a thread that uses the same
//! modules again takes their slots back without the pool's lock or a line another thread
//! writes. The code pool keeps its code slots here, the arena its mapped texts' places, and the
//! runtime its memory slots.
//!
//! A [`Kept`] lives in a thread-local of its user (`thread_local!` statics cannot be generic).
//! A pool is known by its address, which the entries' weak references keep from being reused;
//! a slot whose pool is gone is dropped. When the thread exits, each slot goes back to its pool
//! ([`Pool::take_back`]).

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::thread::LocalKey;

/// A pool whose slots threads keep.
pub trait Pool<S> {
    /// Takes back a slot a thread kept: it exits, or keeps a newer one in its place.
    fn take_back(&self, slot: S);
}

/// One thread's kept slots of every pool of a kind, least recently kept first; and the weak
/// reference to the pool of the slot taken last, for the next one kept (making one writes the
/// pool's reference count, which every thread writes).
pub struct Kept<P: Pool<S>, S> {
    slots: Vec<(Weak<P>, S)>,
    spare: Option<Weak<P>>,
}

/// A slot that no longer fits among those a thread keeps, with its pool.
pub struct Evicted<P, S>(Weak<P>, S);

impl<P: Pool<S>, S> Evicted<P, S> {
    /// The slot if it is `pool`'s; one of another pool goes back to that pool here.
    pub fn of(self, pool: &P) -> Option<S> {
        let Evicted(weak, slot) = self;
        if is(&weak, pool) {
            return Some(slot);
        }
        if let Some(other) = weak.upgrade() {
            other.take_back(slot);
        }
        None
    }
}

fn is<P>(weak: &Weak<P>, pool: &P) -> bool {
    std::ptr::eq(weak.as_ptr(), pool)
}

impl<P: Pool<S>, S> Kept<P, S> {
    pub const fn new() -> Kept<P, S> {
        Kept {
            slots: Vec::new(),
            spare: None,
        }
    }

    /// The most recently kept slot of `pool` that `wanted` accepts.
    pub fn take(&mut self, pool: &P, wanted: impl Fn(&S) -> bool) -> Option<S> {
        let at = (self.slots.iter()).rposition(|(p, s)| is(p, pool) && wanted(s))?;
        Some(self.take_at(at))
    }

    /// The least recently kept slot of `pool` that `wanted` accepts.
    pub fn take_oldest(&mut self, pool: &P, wanted: impl Fn(&S) -> bool) -> Option<S> {
        let at = (self.slots.iter()).position(|(p, s)| is(p, pool) && wanted(s))?;
        Some(self.take_at(at))
    }

    fn take_at(&mut self, at: usize) -> S {
        let (weak, slot) = self.slots.remove(at);
        self.spare = Some(weak);
        slot
    }

    /// How many slots of `pool` are kept.
    pub fn count(&self, pool: &P) -> usize {
        self.slots.iter().filter(|(p, _)| is(p, pool)).count()
    }

    /// Keeps `slot` of `pool`, up to `max` of that pool and `all` in all. Returns what no longer
    /// fits: `slot` itself where `max` or `all` is 0, else the least recently kept slot of
    /// `pool` (at `max`) or of any pool (at `all`). Route it with [`Evicted::of`], outside the
    /// borrow of the thread-local (taking a slot back may take a pool's lock).
    pub fn put(&mut self, pool: &Arc<P>, slot: S, max: usize, all: usize) -> Option<Evicted<P, S>> {
        if max.min(all) == 0 {
            return Some(Evicted(Arc::downgrade(pool), slot));
        }
        let at = if self.count(pool) >= max {
            self.slots.iter().position(|(p, _)| is(p, pool))
        } else {
            (self.slots.len() >= all).then_some(0)
        };
        let evicted = at.map(|at| self.slots.remove(at));
        let weak = match self.spare.take() {
            Some(weak) if is(&weak, pool) => weak,
            _ => Arc::downgrade(pool),
        };
        self.slots.push((weak, slot));
        evicted.map(|(weak, slot)| Evicted(weak, slot))
    }

    /// Drops the slots of `pool` (and the reference to it): the pool is going.
    pub fn forget(&mut self, pool: &P) {
        self.slots.retain(|(p, _)| !is(p, pool));
        self.spare.take_if(|weak| is(weak, pool));
    }
}

/// A user's thread-local of kept slots.
pub type Local<P, S> = LocalKey<RefCell<Kept<P, S>>>;

/// Runs `f` on this thread's kept slots in `local`; `None` while the thread exits.
pub fn with<P: Pool<S>, S, R>(
    local: &'static Local<P, S>,
    f: impl FnOnce(&mut Kept<P, S>) -> R,
) -> Option<R> {
    local.try_with(|kept| f(&mut kept.borrow_mut())).ok()
}

/// Keeps `slot` of `pool` in this thread's `local`, up to `max` of that pool and `all` in all
/// (see [`Kept::put`]). Returns the slot of `pool` that goes to its list: `slot` itself (at a
/// zero bound, or while the thread exits) or the one it evicted; an evicted slot of another
/// pool goes back to that pool here, outside the borrow of `local`.
pub fn keep<P: Pool<S>, S>(
    local: &'static Local<P, S>,
    pool: &Arc<P>,
    slot: S,
    max: usize,
    all: usize,
) -> Option<S> {
    let mut slot = Some(slot);
    let evicted = with(local, |kept| kept.put(pool, slot.take()?, max, all));
    slot.or(evicted.flatten().and_then(|e| e.of(pool)))
}

impl<P: Pool<S>, S> Default for Kept<P, S> {
    fn default() -> Self {
        Kept::new()
    }
}

impl<P: Pool<S>, S> Drop for Kept<P, S> {
    fn drop(&mut self) {
        for (pool, slot) in self.slots.drain(..) {
            if let Some(pool) = pool.upgrade() {
                pool.take_back(slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A pool that records what it takes back.
    #[derive(Default)]
    struct List(Mutex<Vec<u32>>);

    impl Pool<u32> for List {
        fn take_back(&self, slot: u32) {
            self.0.lock().unwrap().push(slot);
        }
    }

    /// Slots come back newest first by what is wanted, oldest first otherwise; the bounds per
    /// pool and in all evict the oldest (of the pool, else of all), and another pool's evicted
    /// slot goes back to it; dropping the list gives every slot back to its pool.
    #[test]
    fn slots_are_kept_per_pool_within_both_bounds() {
        let (a, b) = (Arc::new(List::default()), Arc::new(List::default()));
        let mut kept = Kept::new();
        for s in [1, 2, 3] {
            assert!(kept.put(&a, s, 3, 4).is_none());
        }
        assert_eq!(kept.count(&a), 3);
        // At the bound of `a`: its oldest goes.
        assert_eq!(kept.put(&a, 4, 3, 4).and_then(|e| e.of(&a)), Some(1));
        assert_eq!(kept.take(&a, |&s| s % 2 == 1), Some(3));
        assert!(kept.put(&b, 10, 3, 4).is_none());
        assert!(kept.put(&b, 11, 3, 4).is_none());
        // At the bound in all (2, 4, 10, 11): the oldest of all, `a`'s, goes back to `a`.
        assert_eq!(kept.put(&b, 12, 3, 4).and_then(|e| e.of(&b)), None);
        assert_eq!(*a.0.lock().unwrap(), [2]);
        assert_eq!(kept.take_oldest(&b, |_| true), Some(10));
        assert_eq!(kept.take(&a, |_| true), Some(4));
        assert_eq!(kept.take(&a, |_| true), None);
        // Nothing is kept under a zero bound.
        assert_eq!(kept.put(&a, 5, 0, 4).and_then(|e| e.of(&a)), Some(5));
        kept.forget(&b);
        assert_eq!(kept.count(&b), 0);
        assert!(kept.put(&b, 13, 3, 4).is_none());
        drop(kept);
        assert_eq!(*b.0.lock().unwrap(), [13]);
    }
}
