//! `unreachable`, the trap guests raise on purpose (a Rust panic, a Go or AssemblyScript
//! abort), takes no signal and so makes no system call (a signal's return is `rt_sigreturn`):
//! generated code calls the `Raise` builtin instead of running a trapping instruction. Its own
//! test binary: it forks.

use ephem::{Engine, Instance, Store, TrapKind};

#[test]
fn unreachable_traps_without_a_signal_or_a_system_call() {
    let wat = r#"(module (memory 1)
        (func $nothing)
        (func (export "abort") (param i32) (result i32)
          (call $nothing)
          (if (local.get 0) (then (unreachable)))
          (i32.const 7)))"#;
    let engine = Engine::default();
    let module = ephem::compile(&engine, wat.as_bytes()).unwrap();
    let run = || -> bool {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let abort = instance
            .get_typed_func::<i32, i32>(&mut store, "abort")
            .unwrap();
        let trapped = abort
            .call(&mut store, 1)
            .err()
            .and_then(|e| e.trap().map(|t| t.kind));
        trapped == Some(TrapKind::Unreachable) && abort.call(&mut store, 0).ok() == Some(7)
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
