//! A host function with state that reads a string from the calling module's exported memory
//! and writes a reply back: what every embedder of untrusted modules writes first.
//!
//! Run it with `cargo run -p ephem --example hello`.

use ephem::{Caller, Engine, Error, Linker, Store};

/// The guest: asks the host to greet a name it keeps in its memory, and returns the length of
/// the reply the host wrote.
const GUEST: &str = r#"(module
  (import "host" "greet" (func $greet (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "world")
  (func (export "run") (result i32)
    (call $greet (i32.const 0) (i32.const 5) (i32.const 64))))"#;

/// What the host keeps per store.
struct Host {
    greetings: u32,
}

pub fn main() -> Result<(), Error> {
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, GUEST.as_bytes())?;

    // Defined once; a linker can serve every thread.
    let mut linker = Linker::new(&engine);
    linker.func_wrap(
        "host",
        "greet",
        |mut caller: Caller<'_, Host>, ptr: u32, len: u32, out: u32| -> Result<u32, Error> {
            let memory = caller
                .get_export("memory")
                .and_then(|e| e.into_memory())
                .ok_or_else(|| Error::Usage("the guest exports no memory".into()))?;
            let mut name = vec![0; len as usize];
            memory.read(&caller, ptr as usize, &mut name)?;
            caller.data_mut().greetings += 1;
            let reply = format!("hello, {}!", String::from_utf8_lossy(&name));
            memory.write(&mut caller, out as usize, reply.as_bytes())?;
            Ok(reply.len() as u32)
        },
    )?;

    // Per invocation: a store, an instance, a call; dropping the store frees everything.
    let mut store = Store::new(&engine, Host { greetings: 0 });
    let instance = linker.instantiate(&mut store, &module)?;
    let run = instance.get_typed_func::<(), u32>(&mut store, "run")?;
    let len = run.call(&mut store, ())? as usize;
    let memory = instance.get_memory(&mut store, "memory").expect("exported");
    let reply = String::from_utf8_lossy(&memory.data(&store)[64..64 + len]).into_owned();
    println!("{reply} ({} greeting)", store.data().greetings);
    assert_eq!(reply, "hello, world!");
    assert_eq!(store.into_data().greetings, 1);
    Ok(())
}
