//! The steady-state fresh path for a small module makes no system call: once its artifact is
//! open, loading its code into a `dual` slot (copied from the bytes read on open), instantiating
//! in a new store (a pooled memory slot of the right size), calling and tearing down (dropping
//! the store) all run under seccomp's
//! strict mode, where any system call but read, write and exit kills the process. (Opening a
//! file, mapping large texts or memory images, and discarding pages beyond a slot's resident
//! part do make system calls; this is the part that must not.) Its own test binary: it forks.

use ephem::{Compiler, Engine, Instance, Module, Store};

#[test]
fn loading_instantiating_and_calling_a_small_module_makes_no_system_call() {
    // A memory within the slots' resident first pages (reset by zeroing in place, no madvise)
    // and without an image (an image is mapped, and reset with a madvise).
    let wat = r#"(module
        (memory 1) (table 2 funcref) (elem (i32.const 0) $f $g) (global (mut i32) (i32.const 5))
        (func $f (result i32) (i32.store (i32.const 100) (i32.const 40)) (i32.load (i32.const 100)))
        (func $g (export "g") (result i32) (i32.add (call $f) (i32.const 2))))"#;
    let compiled = Compiler::new().unwrap().compile(wat.as_bytes()).unwrap();
    let dir = ephem_test_support::temp_dir();
    let path = dir.path().join("small.ephem");
    let key = ephem::ArtifactKey::from_bytes([7; 32]);
    ephem_artifact::write_atomic(&path, &ephem_artifact::to_bytes(&compiled, &[0; 32], &key))
        .unwrap();
    let engine = Engine::default();
    let module = Module::from_artifact_file(&engine, &path, &key).unwrap();
    drop(dir);
    let run = || -> bool {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let g = instance.get_typed_func::<(), i32>(&mut store, "g").unwrap();
        g.call(&mut store, ()).unwrap() == 42
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
