//! A component's fresh path makes no system call once warm, as a module's does: opening its
//! artifact file (kept by the thread, as the cache keeps module entries), instantiating
//! its plan in a new store (three core instances, their modules from the compile cache's
//! artifacts, one memory starting from an image; a lowered host function; a function lifted in
//! one part and lowered into another), calling with a string through `realloc` (which the host
//! writes into the guest's memory, marking the pages, so that the reset stays the cheap one)
//! and dropping the store, under seccomp's strict mode; one part grows the memory another
//! defines and exports (as the preview 1 adapter does), which `Component::new_with` compiles
//! that one for (checked, so the memory is loose and grows without `mprotect`). Its own test binary: it forks.

use ephem_component::{Component, Linker};
use ephem_runtime::{Engine, Store};

#[test]
fn instantiating_calling_and_dropping_a_component_makes_no_system_call() {
    let engine = Engine::default();
    let dir = ephem_test_support::temp_dir();
    let cache = ephem_runtime::Cache::new(dir.path(), 1 << 30);
    let compiler = ephem_runtime::Compiler::new().unwrap();
    let component = Component::new_with(
        &engine,
        r#"(component
            (import "len" (func $len (param "s" string) (result u32)))
            (core module $libc
              (memory (export "memory") 1)
              (data (i32.const 16) "hello, ")
              (global $next (mut i32) (i32.const 1024))
              (func (export "realloc") (param i32 i32 i32 i32) (result i32)
                (local $p i32)
                (local.set $p (i32.and
                  (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
                  (i32.sub (i32.const 0) (local.get 2))))
                (global.set $next (i32.add (local.get $p) (local.get 3)))
                (local.get $p)))
            (core instance $libc (instantiate $libc))
            (core func $len (canon lower (func $len) (memory (core memory $libc "memory"))))
            (component $inner
              (core module $m (func (export "twice") (param i32) (result i32)
                (i32.mul (local.get 0) (i32.const 2))))
              (core instance $i (instantiate $m))
              (func (export "twice") (param "x" u32) (result u32)
                (canon lift (core func $i "twice"))))
            (instance $inner (instantiate $inner))
            (core func $twice (canon lower (func $inner "twice")))
            (core module $m
              (import "host" "len" (func $len (param i32 i32) (result i32)))
              (import "host" "twice" (func $twice (param i32) (result i32)))
              (import "libc" "memory" (memory 1))
              (func (export "run") (param i32 i32) (result i32)
                ;; As the preview 1 adapter grows the main module's memory, which that module
                ;; exports and never grows itself.
                (drop (memory.grow (i32.const 1)))
                (i32.store (i32.const 8) (local.get 0))
                (i32.store (i32.const 12)
                  (call $twice (call $len (local.get 0) (local.get 1))))
                (i32.const 8)))
            (core instance $i (instantiate $m
              (with "host" (instance (export "len" (func $len)) (export "twice" (func $twice))))
              (with "libc" (instance $libc))))
            (func (export "run") (param "s" string) (result (tuple u32 u32))
              (canon lift (core func $i "run") (memory (core memory $libc "memory"))
                (realloc (core func $libc "realloc")))))"#,
        &compiler,
        |compiler, wasm| {
            ephem_runtime::compile_cached(compiler, &engine, &cache, wasm).map(|(m, _)| m)
        },
    )
    .unwrap();
    // Written read-only, as `ephem compile` writes it (a file others could change is opened
    // from a snapshot every time), and asked whether it is still the file only once an hour,
    // so that the interval cannot end between warming up and the measured run.
    ephem_runtime::Bundle::ask_kept_every(std::time::Duration::from_secs(3600));
    let key = ephem_runtime::ArtifactKey::from_bytes([9; 32]);
    let path = dir.path().join("component.cwasm");
    ephem_artifact::write_atomic(&path, &component.to_artifact(&key).unwrap()).unwrap();
    let mut linker = Linker::<()>::new(&engine);
    linker
        .root()
        .func_wrap("len", |_, (s,): (String,)| Ok((s.len() as u32,)))
        .unwrap();
    let run = || -> bool {
        let component = Component::from_artifact_file(&engine, &path, &key).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = linker.instantiate(&mut store, &component).unwrap();
        let f = instance
            .get_typed_func::<(String,), ((u32, u32),)>(&mut store, "run")
            .unwrap();
        // The string went to 1024, the first block `realloc` gives; its length doubled.
        f.call(&mut store, ("twelve bytes".into(),)).unwrap() == ((1024, 24),)
    };
    // SAFETY: this test binary runs only this test, and `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
