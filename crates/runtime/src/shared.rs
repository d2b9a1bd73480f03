//! [`Shared`]: shared ownership whose clones and drops on different threads write different
//! cache lines.
//!
//! An `Arc`'s count is one word that every clone and drop writes. Objects that every
//! invocation clones and drops (the engine, its memory pool, a linker's host functions) then
//! make every core write one cache line, which passes between cores on each invocation: a
//! build that never counted these references scaled 1.39–1.46× on two cores against
//! 1.16–1.26× in a stretch where such writes were slow (BENCHMARKS.md, thirteenth pass).
//!
//! A `Shared` counts each reference in the *shard* of the thread that made it, one of
//! [`SHARDS`] counters on cache lines of their own; `main` counts the shards whose count is not
//! zero. A thread that makes a reference where its shard already holds one writes only its
//! shard's line; one whose shard goes from 0 to 1 and back (it holds no reference of its own
//! between invocations) writes `main` twice.
//!
//! # Why the counting is sound
//! - A shard going from 0 to 1 adds one to `main`; going from 1 to 0 takes one away. Those
//!   two steps are not atomic together, but a clone always starts from a live reference, in
//!   some shard that keeps `main` above zero until the clone has returned: so `main` reaches
//!   zero only once every shard is at zero and no reference is left to clone from, and then
//!   the value is dropped, once.
//! - The orderings are `Arc`'s: increments are relaxed (the reference cloned from keeps the
//!   value alive); a decrement releases, and the decrement that takes a shard to zero also
//!   acquires (it carries the earlier drops of that shard into `main`); the decrement that
//!   takes `main` to zero acquires before dropping the value.

use std::cell::Cell;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};

/// Shards per value: threads beyond this many share shards (round-robin by first use).
pub(crate) const SHARDS: usize = 16;

/// Shared ownership of a `T`, like `Arc<T>`, without a count that all threads write (see the
/// module documentation).
pub(crate) struct Shared<T> {
    inner: NonNull<Inner<T>>,
    /// The shard this reference is counted in.
    shard: usize,
}

struct Inner<T> {
    /// Shards whose count is not zero.
    main: AtomicUsize,
    shards: [Padded; SHARDS],
    value: T,
}

/// A shard's count, alone on its cache line (two lines: adjacent-line prefetch pairs them).
#[repr(align(128))]
struct Padded(AtomicUsize);

// SAFETY: as for `Arc<T>`: references on several threads share the `T` (so `Sync`) and the
// last one drops it on whichever thread it is (so `Send`).
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

/// This thread's shard.
fn my_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        })
        // A thread that is exiting counts in the first shard: any shard is correct.
        .unwrap_or(0)
}

impl<T> Shared<T> {
    pub(crate) fn new(value: T) -> Shared<T> {
        let shard = my_shard();
        let inner = Box::new(Inner {
            main: AtomicUsize::new(1),
            shards: std::array::from_fn(|i| Padded(AtomicUsize::new(usize::from(i == shard)))),
            value,
        });
        Shared {
            inner: NonNull::from(Box::leak(inner)),
            shard,
        }
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: `inner` lives while any reference does (see the module documentation), and
        // this is one.
        unsafe { self.inner.as_ref() }
    }

    /// The value, to change: this reference's own when no other is left, else a copy that
    /// this reference now holds alone (as `Arc::make_mut`).
    pub(crate) fn make_mut(this: &mut Shared<T>) -> &mut T
    where
        T: Clone,
    {
        // Alone: the only reference of its shard, in the only shard with any. No other
        // reference can appear meanwhile: a clone needs one to start from, and this one is
        // borrowed exclusively.
        let inner = this.inner();
        let alone = inner.main.load(Ordering::Acquire) == 1
            && inner.shards[this.shard].0.load(Ordering::Acquire) == 1;
        if !alone {
            *this = Shared::new(T::clone(this));
        }
        // SAFETY: no other reference to the value exists (above), and `this` is borrowed
        // exclusively for the result's lifetime.
        unsafe { &mut this.inner.as_mut().value }
    }

    /// Whether `a` and `b` share one value.
    pub(crate) fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        a.inner == b.inner
    }
}

/// Past this many references in one count, as `Arc` does, the process aborts rather than risk
/// an overflow (only leaked references can get there).
const MAX_COUNT: usize = isize::MAX as usize;

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Shared<T> {
        let shard = my_shard();
        let inner = self.inner();
        let before = inner.shards[shard].0.fetch_add(1, Ordering::Relaxed);
        if before == 0 && inner.main.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        if before > MAX_COUNT {
            std::process::abort();
        }
        Shared {
            inner: self.inner,
            shard,
        }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let inner = self.inner();
        if inner.shards[self.shard].0.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if inner.main.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: the last reference (see the module documentation): nothing else can reach
        // `inner`, which `new` made with `Box`.
        drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner().value
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner().value.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The value is dropped exactly once, when the last reference goes, however the references
    /// were spread over threads (more threads than shards, references made on one thread and
    /// dropped on another), and not before.
    #[test]
    fn the_value_is_dropped_once_after_the_last_reference() {
        for round in 0..50 {
            let drops = Arc::new(AtomicUsize::new(0));
            let first = Shared::new(Counted(drops.clone()));
            let threads = SHARDS + 3;
            let handed: Vec<Vec<Shared<Counted>>> = std::thread::scope(|s| {
                let spawned: Vec<_> = (0..threads)
                    .map(|t| {
                        let from = first.clone();
                        s.spawn(move || {
                            // Some references stay on this thread and go, some are handed back.
                            let mine: Vec<_> =
                                (0..(t + round) % 7 + 1).map(|_| from.clone()).collect();
                            let kept = mine.iter().step_by(2).cloned().collect::<Vec<_>>();
                            drop(mine);
                            drop(from);
                            kept
                        })
                    })
                    .collect();
                spawned.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(drops.load(Ordering::SeqCst), 0, "references are left");
            drop(first);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                0,
                "handed-back references are left"
            );
            // Drop the handed-back references on other threads, concurrently.
            std::thread::scope(|s| {
                for refs in handed {
                    s.spawn(move || drop(refs));
                }
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "round {round}");
        }
    }

    /// `make_mut` changes the value in place only where no other reference sees it.
    #[test]
    fn make_mut_copies_a_value_others_see() {
        let mut a = Shared::new(vec![1]);
        let at = std::ptr::from_ref(&*a);
        Shared::make_mut(&mut a).push(2);
        assert_eq!(std::ptr::from_ref(&*a), at, "alone: changed in place");
        let b = std::thread::scope(|s| s.spawn(|| a.clone()).join().unwrap());
        Shared::make_mut(&mut a).push(3);
        assert_eq!((*a).clone(), [1, 2, 3]);
        assert_eq!(
            *b,
            [1, 2],
            "the other reference still sees the value it had"
        );
        drop(b);
        let at = std::ptr::from_ref(&*a);
        Shared::make_mut(&mut a).push(4);
        assert_eq!(std::ptr::from_ref(&*a), at, "alone again");
    }

    /// References made on different threads count in different shards (what the type is
    /// for): threads take shards in turn, so of twice as many new threads as shards (whatever
    /// threads other tests start meanwhile) no shard has them all.
    #[test]
    fn threads_count_in_shards_of_their_own() {
        let a = Shared::new(());
        let shards: std::collections::HashSet<usize> = (0..2 * SHARDS)
            .map(|_| std::thread::scope(|s| s.spawn(|| a.clone().shard).join().unwrap()))
            .collect();
        assert!(shards.len() > 1, "every thread counted in one shard");
        assert!(Shared::ptr_eq(&a, &a.clone()));
    }
}
