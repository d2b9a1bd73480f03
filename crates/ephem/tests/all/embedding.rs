//! The embedding API as a host uses it: stores with host state, host functions that read and
//! write the caller's memory, errors and panics in host functions, funcrefs that outlive the
//! handles of their instances, one linker shared by threads, and stores that move between
//! threads. (`InstancePre` reused many times is measured in `instance_pre.rs`, a binary of its
//! own so that no other test's memory shows in its count.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ephem::{
    Caller, Engine, Error, Extern, ExternRef, Func, Instance, Linker, Module, Store, Table,
    TableType, TrapKind, TypedFunc, Val, ValType,
};

/// A guest that asks the host to greet a name: it writes the name into its memory, calls
/// `host.greet(ptr, len, out)`, and returns the length the host wrote at `out`.
const GREETER: &str = r#"(module
    (import "host" "greet" (func $greet (param i32 i32 i32) (result i32)))
    (import "host" "count" (func $count (result i64)))
    (memory (export "memory") 1)
    (data (i32.const 16) "ferris")
    (func (export "run") (result i32)
      (call $greet (i32.const 16) (i32.const 6) (i32.const 256)))
    (func (export "count") (result i64) (call $count)))"#;

/// The host's state: how often it was called, and a prefix it adds.
struct Host {
    calls: u64,
    prefix: String,
}

fn greeter_linker(engine: &Engine) -> Linker<Host> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap(
            "host",
            "greet",
            |mut caller: Caller<'_, Host>, ptr: u32, len: u32, out: u32| -> Result<u32, Error> {
                let memory = caller
                    .get_export("memory")
                    .and_then(Extern::into_memory)
                    .ok_or_else(|| Error::Usage("the caller exports no memory".into()))?;
                let mut name = vec![0; len as usize];
                memory.read(&caller, ptr as usize, &mut name)?;
                caller.data_mut().calls += 1;
                let reply = format!(
                    "{}, {}!",
                    caller.data().prefix,
                    String::from_utf8_lossy(&name)
                );
                memory.write(&mut caller, out as usize, reply.as_bytes())?;
                Ok(reply.len() as u32)
            },
        )
        .unwrap();
    linker
        .func_wrap("host", "count", |caller: Caller<'_, Host>| {
            caller.data().calls as i64
        })
        .unwrap();
    linker
}

#[test]
fn a_host_function_with_state_reads_and_writes_the_callers_memory() {
    let engine = Engine::default();
    let module = Module::new(&engine, GREETER.as_bytes()).unwrap();
    let linker = greeter_linker(&engine);
    let mut store = Store::new(
        &engine,
        Host {
            calls: 0,
            prefix: "Hello".into(),
        },
    );
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance
        .get_typed_func::<(), u32>(&mut store, "run")
        .unwrap();
    let len = run.call(&mut store, ()).unwrap() as usize;
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    assert_eq!(&memory.data(&store)[256..256 + len], b"Hello, ferris!");
    store.data_mut().prefix = "Bye".into();
    let len = run.call(&mut store, ()).unwrap() as usize;
    assert_eq!(&memory.data(&store)[256..256 + len], b"Bye, ferris!");
    let count = instance
        .get_typed_func::<(), i64>(&mut store, "count")
        .unwrap();
    assert_eq!(count.call(&mut store, ()).unwrap(), 2);
    assert_eq!(store.into_data().calls, 2);
}

#[test]
fn a_funcref_in_another_instances_table_outlives_its_instances_handle() {
    let engine = Engine::default();
    let a = Module::new(
        &engine,
        br#"(module (memory 1) (data (i32.const 0) "\2a")
             (func (export "f") (result i32) (i32.load8_u (i32.const 0))))"#,
    )
    .unwrap();
    let b = Module::new(
        &engine,
        br#"(module (table (export "t") 1 funcref) (type $r (func (result i32)))
             (func (export "call0") (result i32) (call_indirect (type $r) (i32.const 0))))"#,
    )
    .unwrap();
    let linker = Linker::new(&engine);
    let mut store = Store::new(&engine, ());
    let table = {
        // Only B's table is kept; A's instance handle and its function's handle go out of
        // scope here, and A's state stays in the store.
        let inst_a = linker.instantiate(&mut store, &a).unwrap();
        let f = inst_a.get_func(&mut store, "f").unwrap();
        let inst_b = linker.instantiate(&mut store, &b).unwrap();
        let table = inst_b.get_table(&mut store, "t").unwrap();
        table.set(&mut store, 0, Val::FuncRef(Some(f))).unwrap();
        inst_b
            .get_typed_func::<(), i32>(&mut store, "call0")
            .unwrap()
    };
    // Churn other stores and instances, which would reuse A's code slot and memory if they
    // had been freed.
    for _ in 0..50 {
        let mut other = Store::new(&engine, ());
        linker.instantiate(&mut other, &a).unwrap();
    }
    assert_eq!(table.call(&mut store, ()).unwrap(), 42);
}

#[test]
fn a_table_of_another_store_is_refused() {
    let engine = Engine::default();
    let mut one = Store::new(&engine, ());
    let mut two = Store::new(&engine, ());
    let ty = TableType::new(ValType::FUNCREF, 1, None);
    let table = Table::new(&mut one, ty, Val::FuncRef(None)).unwrap();
    let module = Module::new(&engine, br#"(module (import "m" "t" (table 1 funcref)))"#).unwrap();
    let e = Instance::new(&mut two, &module, &[table.into()]).unwrap_err();
    assert!(e.to_string().contains("another store"), "{e}");
}

#[derive(Debug)]
struct Refused(u32);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// A store with an instance that calls `host.gate` from its export `go`.
fn gate(linker: &Linker<()>) -> (Store<()>, TypedFunc<i32, i32>) {
    let engine = linker.engine();
    let module = Module::new(
        engine,
        br#"(module (import "host" "gate" (func $gate (param i32) (result i32)))
             (func (export "go") (param i32) (result i32) (call $gate (local.get 0))))"#,
    )
    .unwrap();
    let mut store = Store::new(engine, ());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let go = instance.get_typed_func(&mut store, "go").unwrap();
    (store, go)
}

#[test]
fn a_host_error_is_a_trap_that_carries_it() {
    let engine = Engine::default();
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("host", "gate", |v: i32| -> Result<i32, Refused> {
            if v < 0 {
                Err(Refused(v as u32))
            } else {
                Ok(v + 1)
            }
        })
        .unwrap();
    let (mut store, go) = gate(&linker);
    assert_eq!(go.call(&mut store, 1).unwrap(), 2);
    let e = go.call(&mut store, -3).unwrap_err();
    let trap = e.trap().expect("a trap");
    assert_eq!(trap.kind, TrapKind::HostError);
    assert_eq!(trap.downcast_ref::<Refused>().unwrap().0, -3i32 as u32);
    assert!(e.to_string().contains("refused"), "{e}");
    assert_eq!(go.call(&mut store, 5).unwrap(), 6, "the store stays usable");
}

#[test]
fn a_host_panic_is_resumed_in_the_host_after_the_wasm_frames_are_gone() {
    let engine = Engine::default();
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("host", "gate", |v: i32| -> i32 {
            if v == 7 {
                panic!("the host panicked on {v}");
            }
            v * 2
        })
        .unwrap();
    let (mut store, go) = gate(&linker);
    for _ in 0..3 {
        let panic =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| go.call(&mut store, 7)))
                .expect_err("the panic reaches the host");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(message, "the host panicked on 7");
        assert_eq!(go.call(&mut store, 4).unwrap(), 8, "the store stays usable");
    }
}

#[test]
fn a_host_function_passed_as_a_funcref_is_callable_once_imported() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let double = Func::wrap(&mut store, |v: i32| v * 2);
    let module = Module::new(
        &engine,
        br#"(module (import "h" "f" (func (param i32) (result i32)))
             (table (export "t") 2 funcref) (type $t (func (param i32) (result i32)))
             (func (export "call") (param i32 i32) (result i32)
               (call_indirect (type $t) (local.get 1) (local.get 0))))"#,
    )
    .unwrap();
    let instance = Instance::new(&mut store, &module, &[double.into()]).unwrap();
    let table = instance.get_table(&mut store, "t").unwrap();
    table
        .set(&mut store, 1, Val::FuncRef(Some(double)))
        .unwrap();
    let call = instance
        .get_typed_func::<(i32, i32), i32>(&mut store, "call")
        .unwrap();
    assert_eq!(call.call(&mut store, (1, 21)).unwrap(), 42);
    // Never imported anywhere: refused with a clear error, not passed as null.
    let lonely = Func::wrap(&mut store, |v: i32| v);
    let e = table
        .set(&mut store, 0, Val::FuncRef(Some(lonely)))
        .unwrap_err();
    assert!(e.to_string().contains("imported"), "{e}");
}

#[test]
fn one_linker_serves_two_threads() {
    let engine = Engine::default();
    let module = Module::new(&engine, GREETER.as_bytes()).unwrap();
    let linker = Arc::new(greeter_linker(&engine));
    let pre = Arc::new(linker.instantiate_pre(&module).unwrap());
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (linker, pre, module, engine, done) = (
                linker.clone(),
                pre.clone(),
                module.clone(),
                engine.clone(),
                done.clone(),
            );
            std::thread::spawn(move || {
                for i in 0..200 {
                    let mut store = Store::new(
                        &engine,
                        Host {
                            calls: 0,
                            prefix: format!("t{t}"),
                        },
                    );
                    // Alternate the two ways in: by name, and pre-resolved.
                    let instance = if i % 2 == 0 {
                        linker.instantiate(&mut store, &module).unwrap()
                    } else {
                        pre.instantiate(&mut store).unwrap()
                    };
                    let run = instance
                        .get_typed_func::<(), u32>(&mut store, "run")
                        .unwrap();
                    let len = run.call(&mut store, ()).unwrap() as usize;
                    let memory = instance.get_memory(&mut store, "memory").unwrap();
                    let expected = format!("t{t}, ferris!");
                    assert_eq!(&memory.data(&store)[256..256 + len], expected.as_bytes());
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(done.load(Ordering::Relaxed), 400);
}

#[test]
fn a_store_moves_between_threads() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module (global $g (mut i32) (i32.const 0))
             (func $deep (export "deep") (call $deep))
             (func (export "bump") (result i32)
               (global.set $g (i32.add (global.get $g) (i32.const 1))) (global.get $g)))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let bump = instance
        .get_typed_func::<(), i32>(&mut store, "bump")
        .unwrap();
    assert_eq!(bump.call(&mut store, ()).unwrap(), 1);
    // On a thread with a small stack, the stack limit is that thread's: deep recursion is a
    // trap, not a crash.
    let store = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            assert_eq!(bump.call(&mut store, ()).unwrap(), 2);
            let deep = instance
                .get_typed_func::<(), ()>(&mut store, "deep")
                .unwrap();
            let e = deep.call(&mut store, ()).unwrap_err();
            assert_eq!(e.trap().unwrap().kind, TrapKind::StackOverflow);
            store
        })
        .unwrap()
        .join()
        .unwrap();
    let mut store = store;
    assert_eq!(bump.call(&mut store, ()).unwrap(), 3);
}

#[test]
fn typed_funcs_take_and_return_references() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module (type $r (func (result i32))) (table 1 funcref)
             (func $nine (result i32) (i32.const 9)) (elem declare func $nine)
             (func (export "same") (param externref) (result externref) (local.get 0))
             (func (export "nine") (result funcref) (ref.func $nine))
             (func (export "call") (param funcref) (result i32)
               (table.set (i32.const 0) (local.get 0))
               (call_indirect (type $r) (i32.const 0))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let same = instance
        .get_typed_func::<Option<ExternRef>, Option<ExternRef>>(&mut store, "same")
        .unwrap();
    assert_eq!(
        same.call(&mut store, Some(ExternRef::new(5))).unwrap(),
        Some(ExternRef::new(5))
    );
    assert_eq!(same.call(&mut store, None).unwrap(), None);
    let nine = instance
        .get_typed_func::<(), Option<Func>>(&mut store, "nine")
        .unwrap();
    let f = nine.call(&mut store, ()).unwrap().expect("a function");
    let call = instance
        .get_typed_func::<Option<Func>, i32>(&mut store, "call")
        .unwrap();
    assert_eq!(call.call(&mut store, Some(f)).unwrap(), 9);
    let e = call.call(&mut store, None).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::IndirectCallToNull);
    // The wrong reference type is refused when the typed function is made.
    assert!(
        instance
            .get_typed_func::<Option<Func>, Option<Func>>(&mut store, "same")
            .is_err()
    );
}

/// A linker remembers the imports it resolved by their digest: a module with the same imports
/// (declared through other type indices) is resolved as it would be afresh, one whose imports
/// differ only in a type is refused, a definition made later is what the next module gets, and
/// no other linker gets what this one resolved.
#[test]
fn a_linker_resolves_imports_it_saw_before_as_it_would_afresh() {
    const FIRST: &str = r#"(module
      (import "env" "f" (func $f (param i32) (result i32)))
      (import "env" "g" (func $g (result i32)))
      (func (export "run") (result i32) (i32.add (call $f (i32.const 40)) (call $g))))"#;
    // The same imports, their types declared in the other order, and other code.
    const SAME_IMPORTS: &str = r#"(module
      (type (func (result i32)))
      (type (func (param i32) (result i32)))
      (import "env" "f" (func $f (type 1)))
      (import "env" "g" (func $g (type 0)))
      (func (export "run") (result i32) (i32.mul (call $f (i32.const 3)) (call $g))))"#;
    const OTHER_TYPE: &str = r#"(module
      (import "env" "f" (func $f (param i64) (result i32)))
      (import "env" "g" (func $g (result i32)))
      (func (export "run") (result i32) (call $f (i64.const 1))))"#;
    let engine = Engine::default();
    let mut linker = Linker::new(&engine);
    linker.allow_shadowing(true);
    linker.func_wrap("env", "f", |x: i32| x + 1).unwrap();
    linker.func_wrap("env", "g", || 1).unwrap();
    let run = |linker: &Linker<()>, wat: &str| -> Result<i32, Error> {
        let module = Module::new(&engine, wat.as_bytes())?;
        let mut store = Store::new(&engine, ());
        let instance = linker.instantiate_pre(&module)?.instantiate(&mut store)?;
        instance
            .get_typed_func::<(), i32>(&mut store, "run")?
            .call(&mut store, ())
    };
    let digest = |wat: &str| {
        *Module::new(&engine, wat.as_bytes())
            .unwrap()
            .artifact()
            .imports_digest()
    };
    assert_eq!(digest(FIRST), digest(SAME_IMPORTS));
    assert_ne!(digest(FIRST), digest(OTHER_TYPE));

    assert_eq!(run(&linker, FIRST).unwrap(), 42);
    assert_eq!(run(&linker, SAME_IMPORTS).unwrap(), 4);
    let e = run(&linker, OTHER_TYPE).unwrap_err();
    assert!(e.to_string().contains("incompatible import type"), "{e}");
    assert_eq!(run(&linker, FIRST).unwrap(), 42);

    linker.func_wrap("env", "g", || 100).unwrap();
    assert_eq!(run(&linker, FIRST).unwrap(), 141);
    assert_eq!(run(&linker, SAME_IMPORTS).unwrap(), 400);

    // What a thread remembers is this linker's: a clone defined otherwise, and a linker made
    // after that one is gone, resolve for themselves; another thread resolves the same.
    let mut other = linker.clone();
    other.func_wrap("env", "g", || 7).unwrap();
    assert_eq!(run(&other, FIRST).unwrap(), 48);
    assert_eq!(run(&linker, FIRST).unwrap(), 141);
    drop(other);
    let mut fresh = Linker::new(&engine);
    fresh.func_wrap("env", "f", |x: i32| x - 1).unwrap();
    fresh.func_wrap("env", "g", || 3).unwrap();
    assert_eq!(run(&fresh, FIRST).unwrap(), 42);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(run(&linker, FIRST).unwrap(), 141));
    });
}

/// An `InstancePre` checks its imports when it is made: a host function defined where the
/// module imports a memory is refused then, not at each instantiation (which takes what the
/// `InstancePre` checked as it is). What cannot be checked then, an extern of one store, is
/// checked at each instantiation against the store it is used with.
#[test]
fn an_instance_pre_checks_its_imports_when_it_is_made() {
    const IMPORTS_MEMORY: &str = r#"(module (import "env" "m" (memory 1)))"#;
    let engine = Engine::default();
    let module = Module::new(&engine, IMPORTS_MEMORY.as_bytes()).unwrap();
    let mut linker = Linker::<()>::new(&engine);
    linker.func_wrap("env", "m", || 1).unwrap();
    let e = linker
        .instantiate_pre(&module)
        .err()
        .expect("a host function is no memory");
    assert!(e.to_string().contains("incompatible import type"), "{e}");

    let mut owner = Store::new(&engine, ());
    let ty = ephem::MemoryType::new(1, None);
    let memory = ephem::Memory::new(&mut owner, ty).unwrap();
    let mut linker = Linker::new(&engine);
    linker.define(&owner, "env", "m", memory).unwrap();
    let pre = linker.instantiate_pre(&module).unwrap();
    pre.instantiate(&mut owner).unwrap();
    let e = pre.instantiate(&mut Store::new(&engine, ())).unwrap_err();
    assert!(e.to_string().contains("belongs to another store"), "{e}");
}

/// Memories of one-byte pages (`(pagesize 1)`): sized, grown and bounded by the byte; linked
/// only where the importer says the same page size; and a module compiled without bounds checks
/// still traps one byte past such a memory's end (its code checks them anyway).
#[test]
fn memories_of_one_byte_pages_are_sized_grown_and_bounded_by_the_byte() {
    use ephem::{Config, Engine, Error, Linker, Memory, MemoryType, Module, Store, TrapKind};
    let mut config = Config::new();
    config.bounds_checks(false);
    let engine = Engine::new(&config).unwrap();
    let mut store = Store::new(&engine, ());
    // Only pages of one byte or of 64 KiB.
    let odd = MemoryType::new(1, None).with_page_size_log2(12);
    assert!(matches!(Memory::new(&mut store, odd), Err(Error::Usage(_))));
    let ty = MemoryType::new(3, Some(10)).with_page_size_log2(0);
    let memory = Memory::new(&mut store, ty).unwrap();
    assert_eq!(memory.size(&store), 3);
    assert_eq!(memory.data_size(&store), 3);
    assert_eq!(memory.grow(&mut store, 2).unwrap(), 3);
    assert_eq!(memory.data_size(&store), 5);
    assert!(memory.grow(&mut store, 6).is_err(), "past its maximum");
    assert!(
        memory.write(&mut store, 4, &[9, 9]).is_err(),
        "one byte past the end"
    );
    memory.write(&mut store, 4, &[7]).unwrap();

    let mut linker = Linker::new(&engine);
    linker.define(&store, "host", "memory", memory).unwrap();
    let module = Module::new(
        &engine,
        r#"(module
          (import "host" "memory" (memory 1 (pagesize 1)))
          (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0)))
          (func (export "size") (result i32) (memory.size))
          (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
    )
    .unwrap();
    let i = linker.instantiate(&mut store, &module).unwrap();
    let load = i.get_typed_func::<i32, i32>(&mut store, "load").unwrap();
    assert_eq!(load.call(&mut store, 4).unwrap(), 7);
    let e = load.call(&mut store, 5).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::MemoryOutOfBounds);
    let grow = i.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
    assert_eq!(grow.call(&mut store, 1).unwrap(), 5);
    assert_eq!(load.call(&mut store, 5).unwrap(), 0);
    let size = i.get_typed_func::<(), i32>(&mut store, "size").unwrap();
    assert_eq!(size.call(&mut store, ()).unwrap(), 6);

    let pages_of_64k =
        Module::new(&engine, r#"(module (import "host" "memory" (memory 0)))"#).unwrap();
    let e = linker.instantiate(&mut store, &pages_of_64k).unwrap_err();
    assert!(matches!(e, Error::Link(_)), "{e}");
    assert!(e.to_string().contains("pagesize 1"), "{e}");
}

/// 64-bit memories and tables (up to 64 GiB, and a table's usual bound): addresses near
/// `u64::MAX` and offsets past 4 GiB trap; sizes and growth are `i64`, and growth past what
/// the memory can hold is -1; 64-bit and 32-bit memories do not link for each other.
#[test]
fn memories_and_tables_of_64_bit_indices_trap_far_out_and_grow_in_i64() {
    use ephem::{Engine, Error, Linker, Memory, MemoryType, Module, Store, TrapKind};
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let memory = Memory::new(&mut store, MemoryType::new64(1, None)).unwrap();
    let mut linker = Linker::new(&engine);
    linker.define(&store, "host", "memory", memory).unwrap();
    let module = Module::new(
        &engine,
        r#"(module
          (import "host" "memory" (memory i64 1))
          (table $t i64 2 funcref)
          (func (export "load") (param i64) (result i32) (i32.load (local.get 0)))
          (func (export "load_far") (param i64) (result i32)
            (i32.load offset=0xffff_ffff_ffff_fff0 (local.get 0)))
          (func (export "store") (param i64 i32) (i32.store (local.get 0) (local.get 1)))
          (func (export "size") (result i64) (memory.size))
          (func (export "grow") (param i64) (result i64) (memory.grow (local.get 0)))
          (func (export "fill") (param i64 i64) (memory.fill (local.get 0) (i32.const 7) (local.get 1)))
          (func (export "table_get") (param i64) (result i32)
            (ref.is_null (table.get $t (local.get 0))))
          (func (export "table_grow") (param i64) (result i64)
            (table.grow $t (ref.null func) (local.get 0)))
          (func (export "table_size") (result i64) (table.size $t)))"#,
    )
    .unwrap();
    let i = linker.instantiate(&mut store, &module).unwrap();
    let load = i.get_typed_func::<i64, i32>(&mut store, "load").unwrap();
    let store_fn = i
        .get_typed_func::<(i64, i32), ()>(&mut store, "store")
        .unwrap();
    store_fn.call(&mut store, (65532, 0x0102_0304)).unwrap();
    assert_eq!(load.call(&mut store, 65532).unwrap(), 0x0102_0304);
    for far in [
        65533,
        1 << 32,
        u64::MAX as i64,
        (u64::MAX - 3) as i64,
        i64::MAX,
        i64::MIN,
    ] {
        let e = load.call(&mut store, far).unwrap_err();
        assert_eq!(
            e.trap().unwrap().kind,
            TrapKind::MemoryOutOfBounds,
            "{far:#x}"
        );
    }
    let load_far = i
        .get_typed_func::<i64, i32>(&mut store, "load_far")
        .unwrap();
    for at in [0, 0x10, 0x20] {
        let e = load_far.call(&mut store, at).unwrap_err();
        assert_eq!(
            e.trap().unwrap().kind,
            TrapKind::MemoryOutOfBounds,
            "{at:#x}"
        );
    }
    let fill = i
        .get_typed_func::<(i64, i64), ()>(&mut store, "fill")
        .unwrap();
    fill.call(&mut store, (0, 16)).unwrap();
    assert!(fill.call(&mut store, (u64::MAX as i64, 2)).is_err());
    assert!(fill.call(&mut store, (0, 1 << 32)).is_err());
    let size = i.get_typed_func::<(), i64>(&mut store, "size").unwrap();
    let grow = i.get_typed_func::<i64, i64>(&mut store, "grow").unwrap();
    assert_eq!(grow.call(&mut store, 1).unwrap(), 1);
    assert_eq!(size.call(&mut store, ()).unwrap(), 2);
    assert_eq!(grow.call(&mut store, 1 << 32).unwrap(), -1);
    assert_eq!(grow.call(&mut store, -1).unwrap(), -1);

    let table_get = i
        .get_typed_func::<i64, i32>(&mut store, "table_get")
        .unwrap();
    assert_eq!(table_get.call(&mut store, 1).unwrap(), 1);
    for far in [2, 1 << 32, -1] {
        let e = table_get.call(&mut store, far).unwrap_err();
        assert_eq!(
            e.trap().unwrap().kind,
            TrapKind::TableOutOfBounds,
            "{far:#x}"
        );
    }
    let table_grow = i
        .get_typed_func::<i64, i64>(&mut store, "table_grow")
        .unwrap();
    let table_size = i
        .get_typed_func::<(), i64>(&mut store, "table_size")
        .unwrap();
    assert_eq!(table_grow.call(&mut store, 3).unwrap(), 2);
    assert_eq!(table_size.call(&mut store, ()).unwrap(), 5);
    assert_eq!(table_grow.call(&mut store, 1 << 33).unwrap(), -1);

    // A start function that writes a 64-bit memory runs at compile time, its state kept in
    // segments of the memory's index type, through an artifact too.
    let started = Module::new(
        &engine,
        r#"(module
          (memory (export "memory") i64 1)
          (func $start (i32.store (i64.const 40000) (i32.const 0x5eed)))
          (start $start))"#,
    )
    .unwrap();
    assert!(started.start_ran_at_compile());
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("started.ephem");
    std::fs::write(&path, started.serialize().unwrap()).unwrap();
    // SAFETY: written just now by this engine's `serialize`, with its key.
    let reopened = unsafe { Module::deserialize_file(&engine, &path) }.unwrap();
    for module in [started, reopened] {
        let i = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap();
        let memory = i.get_memory(&mut store, "memory").unwrap();
        assert_eq!(memory.data(&store)[40000..40002], [0xed, 0x5e]);
    }

    let thirty_two =
        Module::new(&engine, r#"(module (import "host" "memory" (memory 1)))"#).unwrap();
    let e = linker.instantiate(&mut store, &thirty_two).unwrap_err();
    assert!(matches!(e, Error::Link(_)), "{e}");
    assert!(e.to_string().contains("i64"), "{e}");
}

/// A 64-bit memory whose minimum is past what a memory here can have (64 GiB less a page, up
/// to `u64::MAX` one-byte pages) compiles, as the spec says it validates, and instantiating it
/// fails with a `Limit` error that says so; nothing is made of it.
#[test]
fn a_64_bit_memory_past_64_gib_compiles_and_fails_to_be_made() {
    use ephem::{Engine, ErrorKind, Linker, Module, Store};
    let engine = Engine::default();
    for memory in [
        "(memory i64 0xFFFF_FFFF_FFFF_FFFF (pagesize 1))",
        "(memory i64 0x1_0000_0000_0000)",
        "(memory i64 1048576)",
        "(memory i64 0x10_0000_0000 (pagesize 1))",
    ] {
        let module = Module::new(&engine, format!("(module {memory})")).unwrap();
        let mut store = Store::new(&engine, ());
        let e = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit, "{memory}: {e}");
        assert!(e.to_string().contains("cannot allocate"), "{memory}: {e}");
    }
    // The largest that fits is made (its pages are not touched).
    let module = Module::new(&engine, "(module (memory i64 1048575 1048575))").unwrap();
    let mut store = Store::new(&engine, ());
    Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
}

/// A 64-bit memory grows past 4 GiB and past 8 GiB (to 64 GiB less a page, no further):
/// stores and loads and `memory.fill` across the 4 GiB line reach the bytes they name,
/// accesses past the end trap, and the next memory in the slot finds zeros where this one
/// wrote, also past 8 GiB (whose write marks only a large slot has room for). Skipped, saying
/// why, where the machine will not make that much memory accessible.
#[test]
fn a_64_bit_memory_grows_past_4_and_8_gib() {
    use ephem::{Linker, Module, Store, TrapKind};
    let engine = crate::bounds_checks::one_slot_engine();
    let module = Module::new(
        &engine,
        r#"(module
          (memory (export "memory") i64 1)
          (func (export "grow") (param i64) (result i64) (memory.grow (local.get 0)))
          (func (export "size") (result i64) (memory.size))
          (func (export "store") (param i64 i64) (i64.store (local.get 0) (local.get 1)))
          (func (export "load") (param i64) (result i64) (i64.load (local.get 0)))
          (func (export "fill") (param i64 i32 i64)
            (memory.fill (local.get 0) (local.get 1) (local.get 2))))"#,
    )
    .unwrap();
    let four = 1i64 << 32;
    let mut slot = None;
    for round in 0..2 {
        let mut store = Store::new(&engine, ());
        let i = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap();
        let base = i
            .get_memory(&mut store, "memory")
            .unwrap()
            .data(&store)
            .as_ptr();
        assert_eq!(
            *slot.get_or_insert(base),
            base,
            "round {round}: the same slot"
        );
        let grow = i.get_typed_func::<i64, i64>(&mut store, "grow").unwrap();
        let size = i.get_typed_func::<(), i64>(&mut store, "size").unwrap();
        let store_fn = i
            .get_typed_func::<(i64, i64), ()>(&mut store, "store")
            .unwrap();
        let load = i.get_typed_func::<i64, i64>(&mut store, "load").unwrap();
        let fill = i
            .get_typed_func::<(i64, i32, i64), ()>(&mut store, "fill")
            .unwrap();
        if grow.call(&mut store, 65536).unwrap() == -1 {
            println!("skipped: this machine will not make 4 GiB of memory accessible");
            return;
        }
        assert_eq!(size.call(&mut store, ()).unwrap(), 65537);
        // Zeros, also where the round before wrote (the slot is the same).
        for at in [four - 4, four + 16, four + 24] {
            assert_eq!(
                load.call(&mut store, at).unwrap(),
                0,
                "round {round}: {at:#x}"
            );
        }
        store_fn
            .call(&mut store, (four - 4, 0x1122_3344_5566_7788))
            .unwrap();
        assert_eq!(
            load.call(&mut store, four - 4).unwrap(),
            0x1122_3344_5566_7788
        );
        assert_eq!(load.call(&mut store, four).unwrap(), 0x1122_3344);
        fill.call(&mut store, (four + 16, 0xab, 16)).unwrap();
        assert_eq!(
            load.call(&mut store, four + 16).unwrap() as u64,
            0xabab_abab_abab_abab
        );
        let end = four + 65536;
        for at in [end - 7, end, i64::MAX] {
            let e = load.call(&mut store, at).unwrap_err();
            assert_eq!(
                e.trap().unwrap().kind,
                TrapKind::MemoryOutOfBounds,
                "{at:#x}"
            );
        }
        // Past 8 GiB.
        let eight = 1i64 << 33;
        if grow.call(&mut store, 131073 - 65537).unwrap() == -1 {
            println!("skipped: this machine will not make 8 GiB of memory accessible");
            return;
        }
        for at in [eight - 8, eight + 4096 * 3] {
            assert_eq!(
                load.call(&mut store, at).unwrap(),
                0,
                "round {round}: {at:#x}"
            );
            store_fn.call(&mut store, (at, -2)).unwrap();
            assert_eq!(load.call(&mut store, at).unwrap(), -2);
        }
        assert!(load.call(&mut store, eight + 65536 - 7).is_err());
        // To the most a 64-bit memory may have, and not a page further.
        let most = 1048575i64;
        if grow.call(&mut store, most - 131073).unwrap() == -1 {
            println!("skipped: this machine will not make 64 GiB of memory accessible");
            return;
        }
        assert_eq!(grow.call(&mut store, 1).unwrap(), -1);
        let last = (most << 16) - 8;
        assert_eq!(load.call(&mut store, last).unwrap(), 0, "round {round}");
        store_fn.call(&mut store, (last, -1)).unwrap();
        assert_eq!(load.call(&mut store, last).unwrap(), -1);
        assert!(load.call(&mut store, last + 1).is_err());
    }
}
