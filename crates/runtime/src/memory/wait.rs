//! Waiting and notifying at addresses of shared memories (`memory.atomic.wait32`/`wait64`,
//! `memory.atomic.notify`, and [`SharedMemory`](super::SharedMemory)'s methods of those names).
//!
//! Waiters are kept process-wide, by native address, in a fixed set of buckets each with a
//! lock and a condition variable: two memories never share an address while both live, and a
//! notify takes one bucket's lock, never a global one. A wait compares the value under its
//! bucket's lock, so a notify that follows a write of the value (and takes the same lock) can
//! never be missed between the compare and the sleep. Waiters of one address are woken in the
//! order they came (the spec's queue); each knows it was woken by being taken off the list,
//! so a spurious wake-up of the condition variable is no notify.
//!
//! A guest waiting under a deadline must stop when the deadline passes, and the interrupt
//! signal does nothing in host code (see `interrupt`): such a wait sleeps in slices of
//! [`DEADLINE_SLICE`] and asks after each whether the deadline passed. A wait without a
//! deadline sleeps until notified or timed out.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often a wait under a deadline asks whether it passed.
pub(crate) const DEADLINE_SLICE: Duration = Duration::from_millis(1);

const BUCKETS: usize = 64;

struct Waiter {
    addr: usize,
    id: u64,
}

#[derive(Default)]
struct Bucket {
    waiters: Mutex<Vec<Waiter>>,
    woken: Condvar,
}

static BUCKETS_: [Bucket; BUCKETS] = [const {
    Bucket {
        waiters: Mutex::new(Vec::new()),
        woken: Condvar::new(),
    }
}; BUCKETS];

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn bucket(addr: usize) -> &'static Bucket {
    // Addresses of one cache line share a bucket; neighbouring lines do not.
    &BUCKETS_[(addr >> 6) % BUCKETS]
}

fn lock(b: &Bucket) -> MutexGuard<'_, Vec<Waiter>> {
    b.waiters.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value a wait expects at its address.
#[derive(Clone, Copy)]
pub(crate) enum Expected {
    U32(u32),
    U64(u64),
}

impl Expected {
    /// The bytes it compares.
    pub(crate) fn size(self) -> u64 {
        match self {
            Expected::U32(_) => 4,
            Expected::U64(_) => 8,
        }
    }
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woke {
    Notified,
    NotEqual,
    TimedOut,
    /// `stop` said to stop (the deadline passed).
    Stopped,
}

/// Waits at `addr` unless the value there is not `expected`, until notified, `timeout`
/// passes (none: no end), or, asked every [`DEADLINE_SLICE`], `stop` says so (`None`: never).
///
/// `addr` must be the address of a live shared memory's byte, aligned to the value's size,
/// with the value's bytes within the memory (the callers check).
pub(crate) fn wait(
    addr: usize,
    expected: Expected,
    timeout: Option<Duration>,
    stop: Option<&dyn Fn() -> bool>,
) -> Woke {
    let b = bucket(addr);
    let mut waiters = lock(b);
    // SAFETY: per the contract, `addr` is aligned and within a live memory, whose bytes are
    // only ever accessed as plain or atomic memory by wasm and the host.
    let equal = unsafe {
        match expected {
            Expected::U32(v) => AtomicU32::from_ptr(addr as *mut u32).load(Ordering::SeqCst) == v,
            Expected::U64(v) => AtomicU64::from_ptr(addr as *mut u64).load(Ordering::SeqCst) == v,
        }
    };
    if !equal {
        return Woke::NotEqual;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    waiters.push(Waiter { addr, id });
    let end = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let listed = |w: &Vec<Waiter>| w.iter().any(|w| w.id == id);
        if !listed(&waiters) {
            return Woke::Notified;
        }
        let now = Instant::now();
        if end.is_some_and(|end| now >= end) {
            waiters.retain(|w| w.id != id);
            return Woke::TimedOut;
        }
        if stop.is_some_and(|stop| stop()) {
            waiters.retain(|w| w.id != id);
            return Woke::Stopped;
        }
        let left = end.map(|end| end - now);
        let sleep = match (left, stop.is_some()) {
            (Some(left), true) => Some(left.min(DEADLINE_SLICE)),
            (None, true) => Some(DEADLINE_SLICE),
            (left, false) => left,
        };
        waiters = match sleep {
            Some(d) => {
                (b.woken.wait_timeout(waiters, d))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => b.woken.wait(waiters).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Wakes at most `count` of the threads waiting at `addr`, first come first woken; returns
/// how many.
pub(crate) fn notify(addr: usize, count: u32) -> u32 {
    if count == 0 {
        return 0;
    }
    let b = bucket(addr);
    let mut waiters = lock(b);
    let mut woken = 0;
    waiters.retain(|w| {
        if w.addr == addr && woken < count {
            woken += 1;
            false
        } else {
            true
        }
    });
    if woken > 0 {
        b.woken.notify_all();
    }
    woken
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A waiter is woken by a notify of its address, not by one of another address; a wait
    /// for a value that is not there returns at once; one with a timeout ends.
    #[test]
    fn wait_and_notify() {
        let cell = Arc::new(AtomicU32::new(7));
        let addr = cell.as_ptr() as usize;
        assert_eq!(wait(addr, Expected::U32(8), None, None), Woke::NotEqual);
        let short = Some(Duration::from_millis(5));
        assert_eq!(wait(addr, Expected::U32(7), short, None), Woke::TimedOut);
        let waiter = std::thread::spawn(move || wait(addr, Expected::U32(7), None, None));
        // Until the waiter is listed, a notify wakes nobody.
        while notify(addr + 64, 1) == 0 && notify(addr, 1) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(waiter.join().unwrap(), Woke::Notified);
        assert_eq!(notify(addr, 1), 0, "nobody waits any more");
        drop(cell);
    }

    /// A wait whose `stop` says so ends within a few slices.
    #[test]
    fn stop_ends_a_wait() {
        let cell = AtomicU32::new(0);
        let start = Instant::now();
        let stop = || start.elapsed() > Duration::from_millis(20);
        let woke = wait(cell.as_ptr() as usize, Expected::U32(0), None, Some(&stop));
        assert_eq!(woke, Woke::Stopped);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
