//! ephem's workload: many invocations, each in a fresh instance of a module compiled once.
//! The module goes through the compile cache (so a restart does not compile again), its
//! imports are resolved once into an `InstancePre`, and every invocation gets a new store.
//!
//! Run it with `cargo run -p ephem --example fresh`.

use ephem::{Cache, Compiler, Engine, Error, Linker, Store};

/// Counts calls in a global that every fresh instance starts at zero.
const GUEST: &str = r#"(module
  (import "env" "input" (func $input (result i32)))
  (global $calls (mut i32) (i32.const 0))
  (func (export "handle") (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.add (i32.mul (call $input) (i32.const 10)) (global.get $calls))))"#;

pub fn main() -> Result<(), Error> {
    let engine = Engine::default();
    let compiler = Compiler::new().map_err(Error::compile)?;
    let dir = std::env::temp_dir().join(format!("ephem-example-{}", std::process::id()));
    let cache = Cache::new(&dir, 64 << 20);
    let (module, outcome) = ephem::compile_cached(&compiler, &engine, &cache, GUEST.as_bytes())?;
    println!("compile cache: {outcome:?}");

    let mut linker = Linker::new(&engine);
    linker.func_wrap("env", "input", |caller: ephem::Caller<'_, u32>| {
        *caller.data() as i32
    })?;
    let pre = linker.instantiate_pre(&module)?;

    for request in 0..5u32 {
        // A fresh store per invocation: nothing one invocation did is seen by the next.
        let mut store = Store::new(&engine, request);
        let instance = pre.instantiate(&mut store)?;
        let handle = instance.get_typed_func::<(), i32>(&mut store, "handle")?;
        let response = handle.call(&mut store, ())?;
        println!("request {request} -> {response}");
        assert_eq!(response, request as i32 * 10 + 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
