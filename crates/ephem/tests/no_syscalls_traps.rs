//! `unreachable`, the trap guests raise on purpose (a Rust panic, a Go or AssemblyScript
//! abort), and a failed bounds check (x86-64) take no signal and so make no system call (a
//! signal's return is `rt_sigreturn`): generated code calls the `Raise` builtin instead of
//! running a trapping instruction. (The module grows its memory, so that its accesses are
//! checked: those to a memory its module never grows are bounded by faults, as wasmtime's
//! are, see `ModuleInfo::faults_bound`.) Its own test binary: it forks.

use ephem::{Engine, Instance, Store, TrapKind};

#[test]
fn unreachable_and_failed_checks_trap_without_a_signal_or_a_system_call() {
    let wat = r#"(module (memory 1)
        (func $nothing)
        (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
        (func (export "abort") (param i32) (result i32)
          (call $nothing)
          (if (local.get 0) (then (unreachable)))
          (i32.const 7))
        (func (export "load") (param i32) (result i32)
          (call $nothing)
          (i32.load (local.get 0))))"#;
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
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
        let load = instance
            .get_typed_func::<i32, i32>(&mut store, "load")
            .unwrap();
        // Elsewhere a failed check still faults.
        let out_of_bounds = !cfg!(target_arch = "x86_64")
            || load
                .call(&mut store, 65533)
                .err()
                .and_then(|e| e.trap().map(|t| t.kind))
                == Some(TrapKind::MemoryOutOfBounds);
        trapped == Some(TrapKind::Unreachable)
            && abort.call(&mut store, 0).ok() == Some(7)
            && out_of_bounds
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
