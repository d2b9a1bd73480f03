//! Interrupt signals that land while a trap's signal is being handled nest in its handler:
//! fault handlers block no signal, so that a trap does not take the process's signal lock to
//! change the mask (the runtime's `signals`). The nested handler sees host code and does
//! nothing, and every trap still reports itself. Its own test binary, so that its flood of
//! signals and its busy loop disturb no timing test.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ephem::{Engine, Linker, Store, TrapKind, compile};

/// A thread traps out of bounds again and again while another sends it the interrupt signal
/// as fast as it can, none of them due.
#[test]
fn interrupt_signals_nested_in_trap_handlers_change_nothing() {
    let engine = Engine::default();
    let module = compile(
        &engine,
        br#"(module (memory 1) (func (export "oob") (result i32) (i32.load (i32.const 65536))))"#,
    )
    .unwrap();
    let done = AtomicBool::new(false);
    let thread = AtomicU64::new(0);
    std::thread::scope(|s| {
        let trapper = s.spawn(|| {
            // SAFETY: pthread_self has no preconditions.
            thread.store(unsafe { libc::pthread_self() }, Ordering::Relaxed);
            let mut store = Store::new(&engine, ());
            let instance = Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let oob = instance
                .get_typed_func::<(), i32>(&mut store, "oob")
                .unwrap();
            let mut kinds = Vec::new();
            for _ in 0..2_000 {
                kinds.push(oob.call(&mut store, ()).unwrap_err().trap().map(|t| t.kind));
            }
            done.store(true, Ordering::Relaxed);
            kinds
        });
        let mut sent = 0u64;
        while !done.load(Ordering::Relaxed) {
            let target = thread.load(Ordering::Relaxed);
            if target != 0 {
                // SAFETY: `target` is the trapping thread, joined only after this loop (it may
                // have just ended, which only fails the call).
                let r = unsafe { libc::pthread_kill(target, libc::SIGURG) };
                assert!(r == 0 || done.load(Ordering::Relaxed), "pthread_kill: {r}");
                sent += 1;
            }
        }
        let kinds = trapper.join().unwrap();
        assert!(sent > 100, "only {sent} signals sent");
        assert!(
            kinds
                .iter()
                .all(|&k| k == Some(TrapKind::MemoryOutOfBounds))
        );
    });
}
