//! The steady-state fresh path for small modules makes no system call: once their artifacts are
//! open, loading their code into a `dual` slot (copied from the bytes read on open),
//! instantiating in a new store (a pooled memory slot of the right size, which keeps its image
//! for the next instance of the same module), calling and tearing down (dropping the store,
//! which resets the memory by its write marks; a GC module's heap and a 64-bit memory's large
//! slot too) all run under seccomp's
//! strict mode, where any
//! system call but read, write and exit kills the process. (Opening a file, mapping large texts
//! or an image into a slot the first time, and discarding pages beyond a slot's resident part
//! do make system calls; this is the part that must not.) Its own test binary: it forks.

use ephem::{Compiler, Engine, Instance, Module, Store};

/// Writes `wat`'s artifact (sealed with `key`) into `dir` and opens it.
fn open(engine: &Engine, dir: &std::path::Path, name: &str, wat: &str) -> Module {
    let compiled = Compiler::new().unwrap().compile(wat.as_bytes()).unwrap();
    let path = dir.join(name);
    let key = ephem::ArtifactKey::from_bytes([7; 32]);
    ephem_artifact::write_atomic(&path, &ephem_artifact::to_bytes(&compiled, &[0; 32], &key))
        .unwrap();
    Module::from_artifact_file(engine, &path, &key).unwrap()
}

#[test]
fn loading_instantiating_and_calling_a_small_module_makes_no_system_call() {
    // A memory within the slots' resident first pages, without an image.
    let plain = r#"(module
        (memory 1) (table 2 funcref) (elem (i32.const 0) $f $g) (global (mut i32) (i32.const 5))
        (func $f (result i32) (i32.store (i32.const 100) (i32.const 40)) (i32.load (i32.const 100)))
        (func $g (export "g") (result i32) (i32.add (call $f) (i32.const 2))))"#;
    // A memory whose initial contents are an image mapped from the artifact, which the call
    // reads and overwrites: the reset by write marks copies the written page back from the
    // image in place, so the next instance sees the image again, without a system call.
    let imaged = r#"(module
        (memory 1) (data (i32.const 4096) "\28\00\00\00")
        (func (export "g") (result i32)
          (local $seen i32)
          (local.set $seen (i32.load (i32.const 4096)))
          (i32.store (i32.const 4096) (i32.const 99))
          (i32.add (local.get $seen) (i32.const 2))))"#;
    // GC objects: a store's heap comes from the pool at its first allocation (most objects
    // bumped inline, an array made and copied by builtins) and goes back reset by marks.
    let gc = r#"(module
        (type $node (struct (field i32) (field (ref null $node))))
        (type $bytes (array (mut i8)))
        (func (export "g") (result i32)
          (local $n (ref null $node)) (local $i i32) (local $a (ref $bytes))
          (loop $more
            (local.set $n (struct.new $node (local.get $i) (local.get $n)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $more (i32.lt_u (local.get $i) (i32.const 1000))))
          (local.set $a (array.new $bytes (i32.const 40) (i32.const 100)))
          (array.copy $bytes $bytes (local.get $a) (i32.const 0) (local.get $a) (i32.const 50)
            (i32.const 30))
          (i32.add (array.get_u $bytes (local.get $a) (i32.const 3)) (i32.const 2))))"#;
    // A 64-bit memory, in a large slot of the pool, grown in the call and written past its
    // first page.
    let wide = r#"(module
        (memory i64 1)
        (func (export "g") (result i32)
          (drop (memory.grow (i64.const 1)))
          (i32.store (i64.const 70000) (i32.const 40))
          (i32.add (i32.load (i64.const 70000)) (i32.const 2))))"#;
    let dir = ephem_test_support::temp_dir();
    let engine = Engine::default();
    let modules = [
        open(&engine, dir.path(), "plain.ephem", plain),
        open(&engine, dir.path(), "imaged.ephem", imaged),
        open(&engine, dir.path(), "gc.ephem", gc),
        open(&engine, dir.path(), "wide.ephem", wide),
    ];
    assert!(
        modules[1].artifact().image(0).is_some(),
        "the second module's memory starts from an image"
    );
    drop(dir);
    let run = || -> bool {
        modules.iter().all(|module| {
            let mut store = Store::new(&engine, ());
            let instance = Instance::new(&mut store, module, &[]).unwrap();
            let g = instance.get_typed_func::<(), i32>(&mut store, "g").unwrap();
            g.call(&mut store, ()).unwrap() == 42
        })
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
