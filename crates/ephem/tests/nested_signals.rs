//! Interrupt signals that land while a trap's signal is being handled nest in its handler:
//! fault handlers block no signal, so that a trap does not take the process's signal lock to
//! change the mask (the runtime's `signals`). The nested handler sees host code and does
//! nothing, and every trap still reports itself. Its own test binary, so that its flood of
//! signals and its busy loop disturb no timing test.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ephem::{Engine, Linker, Module, Store, TrapKind};

/// A thread traps by signal again and again while another sends it the interrupt signal as
/// fast as it can, none of them due. The trapping thread goes on until both sides have done
/// their share, counted, not timed: a busy machine slows the test down but cannot fail it.
#[test]
fn interrupt_signals_nested_in_trap_handlers_change_nothing() {
    const TRAPS: usize = 2_000;
    const SIGNALS: u64 = 500;
    let engine = Engine::default();
    // A division by zero traps by a fault signal (a failed bounds check would not: it raises
    // its trap without one).
    let module = Module::new(
        &engine,
        br#"(module (func (export "div") (param i32) (result i32)
              (i32.div_u (i32.const 1) (local.get 0))))"#,
    )
    .unwrap();
    let done = AtomicBool::new(false);
    let thread = AtomicU64::new(0);
    let sent = AtomicU64::new(0);
    std::thread::scope(|s| {
        let trapper = s.spawn(|| {
            // SAFETY: pthread_self has no preconditions.
            thread.store(unsafe { libc::pthread_self() }, Ordering::Relaxed);
            let mut store = Store::new(&engine, ());
            let instance = Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let div = instance
                .get_typed_func::<i32, i32>(&mut store, "div")
                .unwrap();
            let mut kinds = Vec::new();
            while kinds.len() < TRAPS || sent.load(Ordering::Relaxed) < SIGNALS {
                kinds.push(div.call(&mut store, 0).unwrap_err().trap().map(|t| t.kind));
            }
            done.store(true, Ordering::Relaxed);
            kinds
        });
        while !done.load(Ordering::Relaxed) {
            let target = thread.load(Ordering::Relaxed);
            if target != 0 {
                // SAFETY: `target` is the trapping thread, joined only after this loop (it may
                // have just ended, which only fails the call).
                let r = unsafe { libc::pthread_kill(target, libc::SIGURG) };
                assert!(r == 0 || done.load(Ordering::Relaxed), "pthread_kill: {r}");
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        let kinds = trapper.join().unwrap();
        assert!(sent.load(Ordering::Relaxed) >= SIGNALS);
        assert!(kinds.len() >= TRAPS);
        assert!(
            kinds
                .iter()
                .all(|&k| k == Some(TrapKind::IntegerDivisionByZero)),
            "{:?}",
            kinds
                .iter()
                .find(|&&k| k != Some(TrapKind::IntegerDivisionByZero))
        );
    });
}
