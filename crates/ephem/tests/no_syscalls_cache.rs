//! Opening a module's artifact from the compile cache on every invocation, as the fresh path
//! does, makes no system call once the thread keeps the entry open: the kept entry is taken
//! without asking its file (an `fstat`) until the ask interval passes. The interval is an hour
//! here, so that a slow machine cannot reach the next ask within the test. Its own test binary:
//! it forks.

use std::time::Duration;

use ephem::{Cache, Compiler, Engine, Instance, Module, Store};

#[test]
fn opening_a_kept_cache_entry_on_every_invocation_makes_no_system_call() {
    let wat = r#"(module (memory 1)
        (func (export "g") (result i32) (i32.store (i32.const 8) (i32.const 42)) (i32.load (i32.const 8))))"#;
    let dir = ephem_test_support::temp_dir();
    let cache =
        Cache::new(dir.path(), u64::MAX).asking_kept_entries_every(Duration::from_secs(3600));
    let compiler = Compiler::new().unwrap();
    ephem::compile_cached(&compiler, &Engine::default(), &cache, wat.as_bytes()).unwrap();
    let key = Cache::key(wat.as_bytes(), &compiler.fingerprint());
    let engine = Engine::default();
    let run = || -> bool {
        let artifact = cache.open(&key).unwrap().expect("the entry");
        let module = Module::from_artifact(&engine, artifact);
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let g = instance.get_typed_func::<(), i32>(&mut store, "g").unwrap();
        g.call(&mut store, ()).unwrap() == 42
    };
    // SAFETY: this test binary runs only this test; `run` does not unwind when it succeeds.
    unsafe { ephem_test_support::assert_no_system_call(run) };
}
