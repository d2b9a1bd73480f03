//! [`Shared`]: shared ownership whose per-invocation clones and drops write no cache line that
//! another thread writes.
//!
//! An `Arc`'s count is one word that every clone and drop writes. Objects that every
//! invocation clones and drops (the engine, a linker's host functions) then make every core
//! write one cache line, which passes between cores on each invocation and keeps threads from
//! scaling (BENCHMARKS.md).
//!
//! A `Shared` has two kinds of reference:
//! - **owners** ([`Shared::new`], and clones of owners), counted in one `main` count: what an
//!   embedder holds for a long time (an `Engine` it made, a `Linker`);
//! - **borrows** ([`Shared::borrow`], and clones of borrows), each counted in the *shard* of the
//!   thread that made it, one of [`SHARDS`] counts on cache lines of their own: what every
//!   invocation makes and drops (a module's, a store's, a memory's reference to the engine).
//!
//! While an owner is left, the value is *open*: a borrow writes only its shard, even when the
//! shard goes from 0 to 1 and back, and reads nothing else. When the last owner goes, the
//! value *closes*: from then on, `main` counts the shards whose count is not zero (the scheme
//! of a sharded count without owners), and the last borrow's drop drops the value. Owners are
//! made only from owners, so a closed value never opens again.
//!
//! # Why the counting is sound
//! - While the value is open, `main` holds one more than the owners (the *open bias*), so it
//!   cannot reach zero; a borrow's drop touches nothing after decrementing its shard.
//! - The last owner closes the value: it adds [`SHARDS`] to `main` (every shard counted as
//!   holding references), then sets each shard's `CLOSED` bit, which returns the shard's count
//!   at that instant in the same atomic step, and takes a shard with none back out of `main`;
//!   then it drops the open bias. Each shard operation is thus wholly before its shard closed
//!   (and left `main` alone) or wholly after (and sees `CLOSED` in the word it changed), and
//!   after closing, `main` counts exactly the shards whose count is not zero.
//! - After closing, a shard going from 0 to 1 adds one to `main`, and going from 1 to 0 takes
//!   one away. Those steps are not atomic together, but a clone always starts from a live
//!   reference, in some shard that keeps `main` above zero until the clone has returned; and a
//!   drop's shard still counts in `main` until the drop takes it away. So `main` reaches zero
//!   only once every shard is at zero and no reference is left to clone from, and the value is
//!   then dropped, once, by whoever took `main` to zero.
//! - The orderings are `Arc`'s: increments are relaxed (the reference cloned from keeps the
//!   value alive); decrements release and acquire, which carries every earlier use of the
//!   value to whoever drops it; the final one is followed by an acquire fence.

use std::cell::Cell;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// Shards per value: threads beyond this many share shards (round-robin by first use).
pub(crate) const SHARDS: usize = 16;

/// A shard's `CLOSED` bit: the value has closed, so this shard's count is counted in `main`.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// Where a reference is counted: [`OWNER`] for `main`, else a shard's index.
const OWNER: usize = usize::MAX;

/// Shared ownership of a `T`, like `Arc<T>`, for what many threads reference on every
/// invocation: an engine, a linker's host functions, a WASI template.
///
/// [`Shared::new`] and clones of an owner are *owners*, counted in one count, for what is held
/// a long time; [`Shared::borrow`] and clones of a borrow are *borrows*, each counted in the
/// count of the thread that made it (one of 16, each on cache lines of its own), for what is
/// made and dropped per invocation. While an owner is left, making and dropping a borrow
/// writes only its thread's count. The value is dropped with the last reference of either
/// kind.
pub struct Shared<T> {
    inner: NonNull<Inner<T>>,
    /// Where this reference is counted: [`OWNER`], or the shard of a borrow.
    counted: usize,
}

struct Inner<T> {
    /// Owners, plus one while the value is open; once closed, the shards whose count is not
    /// zero.
    main: AtomicUsize,
    /// Whether a borrow was ever made: until then, a sole owner may change the value in place.
    borrowed: AtomicBool,
    shards: [Padded; SHARDS],
    value: T,
}

/// A shard's count (and its [`CLOSED`] bit), alone on its cache line (two lines:
/// adjacent-line prefetch pairs them).
#[repr(align(128))]
struct Padded(AtomicUsize);

// SAFETY: as for `Arc<T>`: references on several threads share the `T` (so `Sync`) and the
// last one drops it on whichever thread it is (so `Send`).
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as for `Arc<T>`: a shared `Shared` hands out `&T` on any thread (so `T: Sync`), and
// may be cloned there and dropped last (so `T: Send`); its counts are atomic.
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

/// Past this many references in one count, as `Arc` does, the process aborts rather than risk
/// an overflow into the `CLOSED` bit (only leaked references can get there).
const MAX_COUNT: usize = isize::MAX as usize / 2;

impl<T> Shared<T> {
    /// A new value, and its first owner.
    pub fn new(value: T) -> Shared<T> {
        let inner = Box::new(Inner {
            main: AtomicUsize::new(2),
            borrowed: AtomicBool::new(false),
            shards: std::array::from_fn(|_| Padded(AtomicUsize::new(0))),
            value,
        });
        Shared {
            inner: NonNull::from(Box::leak(inner)),
            counted: OWNER,
        }
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: `inner` lives while any reference does (see the module documentation), and
        // this is one.
        unsafe { self.inner.as_ref() }
    }

    /// A borrow, counted in this thread's shard (see the module documentation).
    pub fn borrow(&self) -> Shared<T> {
        let inner = self.inner();
        if !inner.borrowed.load(Ordering::Relaxed) {
            inner.borrowed.store(true, Ordering::Release);
        }
        let shard = my_shard();
        let before = inner.shards[shard].0.fetch_add(1, Ordering::Relaxed);
        if before & !CLOSED > MAX_COUNT {
            std::process::abort();
        }
        if before == CLOSED {
            // Closed, and this shard had no reference: it counts in `main` again.
            inner.main.fetch_add(1, Ordering::Relaxed);
        }
        Shared {
            inner: self.inner,
            counted: shard,
        }
    }

    /// The value, to change: this reference's own when no other is left, else a copy that
    /// this reference now holds alone (as `Arc::make_mut`).
    pub fn make_mut(this: &mut Shared<T>) -> &mut T
    where
        T: Clone,
    {
        // Alone: the only owner (`main` is it and the open bias) of a value never borrowed.
        // No other reference can appear meanwhile: another owner or a first borrow needs an
        // owner to start from, and this one is borrowed exclusively; and the exclusive borrow
        // comes after (synchronises with) whatever borrowed from it before.
        let inner = this.inner();
        let alone = this.counted == OWNER
            && !inner.borrowed.load(Ordering::Acquire)
            && inner.main.load(Ordering::Acquire) == 2;
        if !alone {
            *this = Shared::new(T::clone(this));
        }
        // SAFETY: no other reference to the value exists (above), and `this` is borrowed
        // exclusively for the result's lifetime.
        unsafe { &mut this.inner.as_mut().value }
    }

    /// Whether `a` and `b` share one value.
    pub fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        a.inner == b.inner
    }

    /// Takes one from `main`, and drops the value if that was the last.
    fn release_main(&self) {
        if self.inner().main.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: `main` is at zero, so no reference is left (see the module documentation):
        // nothing else can reach `inner`, which `new` made with `Box`.
        drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
    }

    /// Closes the value: the last owner is going (see the module documentation).
    fn close(&self) {
        let inner = self.inner();
        inner.main.fetch_add(SHARDS, Ordering::Relaxed);
        for shard in &inner.shards {
            if shard.0.fetch_or(CLOSED, Ordering::AcqRel) == 0 {
                inner.main.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // The open bias.
        self.release_main();
    }
}

impl<T> Clone for Shared<T> {
    /// A reference of the same kind: an owner's clone is an owner, a borrow's a borrow.
    fn clone(&self) -> Shared<T> {
        if self.counted != OWNER {
            return self.borrow();
        }
        if self.inner().main.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        Shared {
            inner: self.inner,
            counted: OWNER,
        }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let inner = self.inner();
        if self.counted == OWNER {
            // Two left, the open bias and this one: this is the last owner.
            if inner.main.fetch_sub(1, Ordering::AcqRel) == 2 {
                self.close();
            }
            return;
        }
        // An open value's shard is not counted in `main`; a closed one's is, while it holds
        // references.
        if inner.shards[self.counted].0.fetch_sub(1, Ordering::AcqRel) == CLOSED | 1 {
            self.release_main();
        }
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

    /// The value is dropped exactly once, when the last reference goes, however owners and
    /// borrows were spread over threads (more threads than shards, references made on one
    /// thread and dropped on another, the last owner going while borrows are made and dropped
    /// elsewhere), and not before.
    #[test]
    fn the_value_is_dropped_once_after_the_last_reference() {
        for round in 0..50 {
            let drops = Arc::new(AtomicUsize::new(0));
            let first = Shared::new(Counted(drops.clone()));
            let owner = first.clone();
            let threads = SHARDS + 3;
            let go = std::sync::Barrier::new(threads + 1);
            let handed: Vec<Vec<Shared<Counted>>> = std::thread::scope(|s| {
                let spawned: Vec<_> = (0..threads)
                    .map(|t| {
                        // Made here, on another thread than the one that uses it.
                        let from = if t % 3 == 0 {
                            first.clone()
                        } else {
                            first.borrow()
                        };
                        let go = &go;
                        s.spawn(move || {
                            go.wait();
                            // References come and go on this thread while the owners go.
                            let mut kept = Vec::new();
                            for i in 0..(t + round) % 7 + 50 {
                                let mine = if i % 5 == 0 {
                                    from.clone()
                                } else {
                                    from.borrow()
                                };
                                let again = mine.borrow();
                                if i % 9 == 0 {
                                    kept.push(again);
                                }
                            }
                            drop(from);
                            kept
                        })
                    })
                    .collect();
                go.wait();
                // The last owner goes here or on one of the threads, as borrows come and go.
                drop((first, owner));
                spawned.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                drops.load(Ordering::SeqCst),
                0,
                "handed-back borrows are left"
            );
            // They are dropped on other threads, concurrently, each made a borrow first.
            std::thread::scope(|s| {
                for refs in handed {
                    s.spawn(move || {
                        let extra: Vec<_> = refs.iter().map(Shared::borrow).collect();
                        drop(refs);
                        drop(extra);
                    });
                }
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "round {round}");
        }
    }

    /// A value whose owners go while no borrow is left is dropped at once; one with a borrow
    /// left, when that goes.
    #[test]
    fn closing_drops_the_value_when_the_last_reference_goes() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = Shared::new(Counted(drops.clone()));
        drop(a.borrow());
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "no borrow left");

        let a = Shared::new(Counted(drops.clone()));
        let b = a.borrow();
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "a borrow is left");
        // A borrow of a closed value, on a thread whose shard held none.
        let c = std::thread::scope(|s| s.spawn(|| b.borrow()).join().unwrap());
        drop(b);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "a borrow is still left");
        drop(c);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    /// `make_mut` changes the value in place only where no other reference sees it, or ever
    /// was borrowed.
    #[test]
    fn make_mut_copies_a_value_others_see() {
        let mut a = Shared::new(vec![1]);
        let at = std::ptr::from_ref(&*a);
        Shared::make_mut(&mut a).push(2);
        assert_eq!(std::ptr::from_ref(&*a), at, "alone: changed in place");
        let b = std::thread::scope(|s| s.spawn(|| a.clone()).join().unwrap());
        Shared::make_mut(&mut a).push(3);
        assert_eq!((*a).clone(), [1, 2, 3]);
        assert_eq!(*b, [1, 2], "another owner still sees the value it had");
        drop(b);
        let at = std::ptr::from_ref(&*a);
        Shared::make_mut(&mut a).push(4);
        assert_eq!(std::ptr::from_ref(&*a), at, "alone again");
        let c = a.borrow();
        Shared::make_mut(&mut a).push(5);
        assert_eq!(*c, [1, 2, 3, 4], "a borrow still sees the value it had");
        assert_eq!(*a, [1, 2, 3, 4, 5]);
        let mut c = c;
        Shared::make_mut(&mut c).push(6);
        assert_eq!(*c, [1, 2, 3, 4, 6], "a borrow's change is its own copy");
        assert_eq!(*a, [1, 2, 3, 4, 5]);
    }

    /// Borrows made on different threads count in different shards (what the type is for):
    /// threads take shards in turn, so of twice as many new threads as shards (whatever
    /// threads other tests start meanwhile) no shard has them all. Clones keep their kind.
    #[test]
    fn threads_count_in_shards_of_their_own() {
        let a = Shared::new(());
        let shards: std::collections::HashSet<usize> = (0..2 * SHARDS)
            .map(|_| std::thread::scope(|s| s.spawn(|| a.borrow().counted).join().unwrap()))
            .collect();
        assert!(shards.len() > 1, "every thread counted in one shard");
        assert!(!shards.contains(&OWNER));
        assert_eq!(a.clone().counted, OWNER);
        assert_ne!(a.borrow().clone().counted, OWNER);
        assert!(Shared::ptr_eq(&a, &a.borrow()));
    }
}
