//! Deadlines enforced by a signal, so that generated code carries no checks for them.
//!
//! A store's deadline is an epoch of its engine ([`crate::Store::set_epoch_deadline`]). Every
//! thread that has run wasm under a deadline is registered here once ([`RUNNERS`]), with the
//! deadline of the call it runs now (or none). When an engine's epoch advances, it sends
//! [`INTERRUPT`] to each registered thread whose deadline the new epoch reaches, every tick
//! until that call ends. The signal handler (`signals`) stops the call only if the thread is in
//! generated code and its store's deadline has really passed: a signal that lands in host code
//! (a host function, a builtin, the runtime) does nothing there, and the host's way back into
//! wasm checks the deadline instead (host functions on return, bulk-memory builtins on entry).
//! A call that begins past its deadline is refused before it enters wasm.
//!
//! Why a signal rather than checks in the code: an epoch check at every loop header and
//! function entry costs compute time in every module (BENCHMARKS.md, Metering);
//! the signal costs nothing until a deadline passes, and every module is interruptible without
//! being compiled for it.
//!
//! Ordering: a call publishes its deadline and then reads the epoch; an engine advances the
//! epoch and then reads the deadlines (both sequentially consistent). So either the call sees
//! the new epoch and never enters, or the engine sees the call and signals it.
//!
//! [`INTERRUPT`] is `SIGURG`: ignored by default, used by no Rust runtime, and what Go uses
//! for the same purpose. A `SIGURG` that does not stop wasm goes on to the handler installed
//! before ours, if there was one.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// The signal that stops a call past its deadline.
pub(crate) const INTERRUPT: libc::c_int = libc::SIGURG;

/// A thread that runs (or ran) wasm under a deadline.
struct Runner {
    thread: libc::pthread_t,
    /// The engine whose epoch `deadline` counts (its id); 0 while no deadline applies.
    engine: AtomicU64,
    deadline: AtomicU64,
}

/// Every registered thread; a thread removes itself when it exits, so `thread` is always a
/// live thread's.
static RUNNERS: Mutex<Vec<Arc<Runner>>> = Mutex::new(Vec::new());

/// This thread's entry in [`RUNNERS`], removed when the thread exits.
struct Registration(Arc<Runner>);

impl Registration {
    fn new() -> Registration {
        crate::signals::install_handlers();
        let runner = Arc::new(Runner {
            // SAFETY: pthread_self has no preconditions.
            thread: unsafe { libc::pthread_self() },
            engine: AtomicU64::new(0),
            deadline: AtomicU64::new(u64::MAX),
        });
        lock().push(runner.clone());
        Registration(runner)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock().retain(|r| !Arc::ptr_eq(r, &self.0));
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Arc<Runner>>> {
    // Nothing panics while holding it; a poisoned list is still a valid list.
    RUNNERS.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    static RUNNER: OnceCell<Registration> = const { OnceCell::new() };
}

/// The deadline this thread's call runs under, published for the engine's ticks until the
/// watch is dropped, when the deadline of the call it interrupted (if any) is put back.
pub(crate) struct Watch {
    previous: Option<(u64, u64)>,
}

/// Publishes `deadline` (an epoch of the engine with id `engine`) as this thread's for the
/// call about to enter wasm. A call without a deadline on a thread that never had one costs
/// nothing more than a thread-local read.
pub(crate) fn watch(engine: u64, deadline: u64) -> Watch {
    Watch {
        previous: publish(engine, deadline),
    }
}

/// Makes `deadline` this thread's (registering the thread first if the deadline is a real
/// one), and returns the engine and deadline it replaces; `None` if the thread was never
/// registered and still need not be.
fn publish(engine: u64, deadline: u64) -> Option<(u64, u64)> {
    RUNNER
        .try_with(|cell| {
            let runner = match cell.get() {
                Some(r) => &r.0,
                None if deadline == u64::MAX => return None,
                None => &cell.get_or_init(Registration::new).0,
            };
            let engine = if deadline == u64::MAX { 0 } else { engine };
            Some((
                runner.engine.swap(engine, SeqCst),
                runner.deadline.swap(deadline, SeqCst),
            ))
        })
        .ok()
        .flatten()
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some((engine, deadline)) = self.previous {
            let _ = RUNNER.try_with(|cell| {
                if let Some(r) = cell.get() {
                    r.0.deadline.store(deadline, SeqCst);
                    r.0.engine.store(engine, SeqCst);
                }
            });
        }
    }
}

/// A host function moved the deadline of the call running on this thread.
pub(crate) fn moved(engine: u64, deadline: u64) {
    // What it replaces is the moved deadline itself: the watch of the call keeps the one to
    // put back.
    publish(engine, deadline);
}

/// The engine with id `engine` reached `epoch`: signals every thread whose call is due.
pub(crate) fn signal_due(engine: u64, epoch: u64) {
    for r in lock().iter() {
        if r.engine.load(SeqCst) == engine && r.deadline.load(SeqCst) <= epoch {
            // SAFETY: `r.thread` is alive: a thread leaves the list (under this lock) before
            // it exits. The handler for INTERRUPT was installed before the thread registered.
            unsafe { libc::pthread_kill(r.thread, INTERRUPT) };
        }
    }
}

/// Whether a call under `deadline` (a cell of its store) of the engine whose epoch is `epoch`
/// is due: async-signal-safe (two loads).
pub(crate) fn due(epoch: &AtomicU64, deadline: &AtomicU64) -> bool {
    deadline.load(SeqCst) <= epoch.load(SeqCst)
}
