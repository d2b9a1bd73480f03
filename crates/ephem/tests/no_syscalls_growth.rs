//! A module whose every call grows its memory, compiled with bounds checks (the default),
//! makes no system call in the steady state of the fresh path: its memory's slot keeps the
//! page it grew into (a loose memory: see the runtime's `memory` module), so growing is a
//! change of length and the teardown zeroes the page in place instead of closing it with
//! `mprotect`. Without checks both are `mprotect`s, and this test would see them. Its own test
//! binary: it forks.

use ephem::{Engine, Instance, Store};

#[test]
fn growing_memory_in_every_call_makes_no_system_call_with_bounds_checks() {
    let wat = r#"(module (memory 1 4)
        (func (export "run") (result i32)
          (drop (memory.grow (i32.const 1)))
          (i32.store (i32.const 65544) (i32.add (i32.load (i32.const 65544)) (i32.const 41)))
          (i32.add (i32.load (i32.const 65544)) (memory.size))))"#;
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
    // 41 from a page that was zero, plus the two pages after growing.
    let run = || -> bool {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let f = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        f.call(&mut store, ()).unwrap() == 43
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
