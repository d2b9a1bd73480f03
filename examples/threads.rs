//! One `Linker` and one `InstancePre`, shared by worker threads that each run invocations in
//! stores of their own: how a server uses ephem.
//!
//! Run it with `cargo run -p ephem --example threads`.

use std::sync::Arc;

use ephem::{Engine, Error, Linker, Store};

const GUEST: &str = r#"(module
  (import "env" "worker" (func $worker (result i32)))
  (func (export "square_plus_worker") (param i32) (result i32)
    (i32.add (i32.mul (local.get 0) (local.get 0)) (call $worker))))"#;

pub fn main() -> Result<(), Error> {
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, GUEST.as_bytes())?;
    let mut linker = Linker::new(&engine);
    linker.func_wrap("env", "worker", |caller: ephem::Caller<'_, i32>| {
        *caller.data()
    })?;
    let pre = Arc::new(linker.instantiate_pre(&module)?);
    let workers: Vec<_> = (0..2)
        .map(|worker| {
            let (pre, engine) = (pre.clone(), engine.clone());
            std::thread::spawn(move || -> Result<i64, Error> {
                let mut sum = 0i64;
                for n in 0..100 {
                    let mut store = Store::new(&engine, worker);
                    let instance = pre.instantiate(&mut store)?;
                    let f =
                        instance.get_typed_func::<i32, i32>(&mut store, "square_plus_worker")?;
                    sum += f.call(&mut store, n)? as i64;
                }
                Ok(sum)
            })
        })
        .collect();
    for (worker, handle) in workers.into_iter().enumerate() {
        let sum = handle.join().expect("the worker finished")?;
        println!("worker {worker}: {sum}");
        assert_eq!(sum, (0..100i64).map(|n| n * n + worker as i64).sum::<i64>());
    }
    Ok(())
}
