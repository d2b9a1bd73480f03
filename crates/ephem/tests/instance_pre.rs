//! `InstancePre` instantiated ten thousand times, each in a new store with a host function
//! call: neither memory nor file descriptors grow. The only test of its binary, so that the
//! process-wide counts are this test's.

use ephem::{Caller, Engine, InstancePre, Linker, Module, Store};

struct Host {
    calls: u64,
}

const GREETER: &str = r#"(module
    (import "host" "greet" (func $greet (param i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 16) "ferris")
    (func (export "run") (result i32)
      (call $greet (i32.const 16) (i32.const 6) (i32.const 256))))"#;

fn linker(engine: &Engine) -> Linker<Host> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap(
            "host",
            "greet",
            |mut caller: Caller<'_, Host>, ptr: u32, len: u32, out: u32| -> u32 {
                let memory = caller.get_export("memory").unwrap().into_memory().unwrap();
                let data = memory.data_mut(&mut caller);
                data.copy_within(ptr as usize..(ptr + len) as usize, out as usize);
                caller.data_mut().calls += 1;
                len
            },
        )
        .unwrap();
    linker
}

#[test]
fn instance_pre_instantiates_ten_thousand_times_without_growth() {
    let engine = Engine::default();
    let module = Module::new(&engine, GREETER.as_bytes()).unwrap();
    let pre: InstancePre<Host> = linker(&engine).instantiate_pre(&module).unwrap();
    let round = |n: usize| {
        for _ in 0..n {
            let mut store = Store::new(&engine, Host { calls: 0 });
            let instance = pre.instantiate(&mut store).unwrap();
            let run = instance
                .get_typed_func::<(), u32>(&mut store, "run")
                .unwrap();
            assert_eq!(run.call(&mut store, ()).unwrap(), 6);
            let memory = instance.get_memory(&mut store, "memory").unwrap();
            assert_eq!(&memory.data(&store)[256..262], b"ferris");
            assert_eq!(store.data().calls, 1);
        }
    };
    ephem_test_support::assert_no_growth(
        || round(1000),
        || round(10_000),
        8 << 10,
        "10 000 instantiations",
    );
}
