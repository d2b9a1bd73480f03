//! Fuel: metered code pays for what it runs, deterministically, and traps with `OutOfFuel`
//! when it cannot; the store can be refuelled. Bulk operations pay per byte or element, and
//! host functions can charge for their own work. What ran before a trap is paid for.

use ephem::{
    Compiler, Engine, EngineConfig, ErrorKind, Linker, Module, PoolConfig, Store, Strategy,
    TrapKind,
};

fn metered() -> Compiler {
    Compiler::new().unwrap().with_fuel()
}

fn module(engine: &Engine, wat: &str) -> Module {
    ephem::compile_with(&metered(), engine, wat.as_bytes()).unwrap()
}

/// Runs export `name` of `module` with `fuel` in a new store; returns the fuel consumed and
/// the trap kind, if it trapped.
fn run(
    engine: &Engine,
    module: &Module,
    name: &str,
    arg: i32,
    fuel: u64,
) -> (u64, Option<TrapKind>) {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap(
            "host",
            "work",
            |mut caller: ephem::Caller<'_, ()>, n: i32| caller.consume_fuel(n as u64),
        )
        .unwrap();
    let mut store = Store::new(engine, ());
    store.set_fuel(fuel).unwrap();
    let instance = linker.instantiate(&mut store, module).unwrap();
    let f = instance
        .get_typed_func::<i32, i32>(&mut store, name)
        .unwrap();
    let trap = f.call(&mut store, arg).err().map(|e| {
        e.trap()
            .map(|t| t.kind)
            .unwrap_or_else(|| panic!("not a trap: {e}"))
    });
    (fuel - store.get_fuel().unwrap(), trap)
}

const KERNELS: &str = r#"(module
  (import "host" "work" (func $work (param i32)))
  (memory 1)
  (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
  (func (export "three") (param i32) (result i32) (i32.add (i32.const 1) (i32.const 2)))
  (func (export "spin") (param i32) (result i32) (loop $l (br $l)) (i32.const 0))
  (func (export "spin_calling") (param i32) (result i32)
    (loop $l (local.set 0 (call $leaf (local.get 0))) (br $l)) (i32.const 0))
  (func $tree (export "tree") (param i32) (result i32)
    (if (result i32) (i32.eqz (local.get 0))
      (then (i32.const 1))
      (else (i32.add (call $tree (i32.sub (local.get 0) (i32.const 1)))
                     (call $tree (i32.sub (local.get 0) (i32.const 1)))))))
  (func (export "mixed") (param $n i32) (result i32) (local $i i32) (local $acc i32)
    (loop $l
      (local.set $acc (i32.add (local.get $acc) (call $leaf (local.get $i))))
      (if (i32.and (local.get $i) (i32.const 1))
        (then (local.set $acc (i32.xor (local.get $acc) (i32.const 0x55)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n))))
    (memory.fill (i32.const 0) (i32.const 7) (local.get $n))
    (local.get $acc))
  (func (export "fill") (param $n i32) (result i32)
    (memory.fill (i32.const 0) (i32.const 1) (local.get $n)) (i32.const 0))
  (func (export "host") (param $n i32) (result i32) (call $work (local.get $n)) (i32.const 0)))"#;

#[test]
fn the_cost_model_is_exact_on_a_small_function() {
    let engine = Engine::default();
    let m = module(&engine, KERNELS);
    // i32.const, i32.const, i32.add: 1 each; `end` is free.
    assert_eq!(run(&engine, &m, "three", 0, 1000), (3, None));
}

#[test]
fn endless_guests_run_out_of_fuel_and_the_store_can_be_refuelled() {
    let engine = Engine::default();
    let m = module(&engine, KERNELS);
    for name in ["spin", "spin_calling", "tree"] {
        let arg = if name == "tree" { 40 } else { 0 };
        let (used, trap) = run(&engine, &m, name, arg, 100_000);
        assert_eq!(trap, Some(TrapKind::OutOfFuel), "{name}");
        assert!(used == 100_000, "{name}: {used} used");
    }
    // Refuelling after running out.
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    linker.func_wrap("host", "work", |_: i32| {}).unwrap();
    store.set_fuel(10).unwrap();
    let instance = linker.instantiate(&mut store, &m).unwrap();
    let spin = instance
        .get_typed_func::<i32, i32>(&mut store, "spin")
        .unwrap();
    let three = instance
        .get_typed_func::<i32, i32>(&mut store, "three")
        .unwrap();
    assert_eq!(
        spin.call(&mut store, 0).unwrap_err().trap().unwrap().kind,
        TrapKind::OutOfFuel
    );
    assert_eq!(store.get_fuel().unwrap(), 0);
    store.set_fuel(100).unwrap();
    assert_eq!(three.call(&mut store, 0).unwrap(), 3);
    assert_eq!(store.get_fuel().unwrap(), 97);
}

#[test]
fn bulk_operations_pay_per_byte_and_host_functions_can_charge() {
    let engine = Engine::default();
    let m = module(&engine, KERNELS);
    let (zero, _) = run(&engine, &m, "fill", 0, 1 << 20);
    let (thousand, _) = run(&engine, &m, "fill", 1000, 1 << 20);
    assert_eq!(thousand - zero, 1000);
    // Out of fuel in the middle of a bulk operation: nothing is filled past what was paid.
    assert_eq!(
        run(&engine, &m, "fill", 60_000, 1000).1,
        Some(TrapKind::OutOfFuel)
    );
    let (none, _) = run(&engine, &m, "host", 0, 1 << 20);
    let (some, _) = run(&engine, &m, "host", 500, 1 << 20);
    assert_eq!(some - none, 500);
    let (_, trap) = run(&engine, &m, "host", 5000, 1000);
    assert_eq!(
        trap,
        Some(TrapKind::HostError),
        "the host's OutOfFuel error stops its caller"
    );
}

#[test]
fn fuel_consumed_is_the_same_whatever_the_loading_and_threads() {
    let wat = KERNELS.as_bytes();
    let reference = {
        let engine = Engine::default();
        let m = ephem::compile_with(&metered(), &engine, wat).unwrap();
        let r = run(&engine, &m, "mixed", 5000, u64::MAX >> 2);
        assert_eq!(r.1, None);
        r.0
    };
    let engines = [
        (
            "text copied",
            EngineConfig {
                map_text_at: Some(usize::MAX),
                ..EngineConfig::default()
            },
        ),
        (
            "text mapped",
            EngineConfig {
                map_text_at: Some(0),
                ..EngineConfig::default()
            },
        ),
        (
            "naive code slots",
            EngineConfig {
                code: PoolConfig::with_strategy(Strategy::Naive),
                ..EngineConfig::default()
            },
        ),
    ];
    for (what, config) in engines {
        let engine = Engine::with_config(config).unwrap();
        let m = ephem::compile_with(&metered(), &engine, wat).unwrap();
        assert_eq!(
            run(&engine, &m, "mixed", 5000, u64::MAX >> 2).0,
            reference,
            "{what}"
        );
    }
    // Through an artifact file.
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("kernels.ephem");
    let compiled = metered().compile(wat).unwrap();
    let key = ephem::ArtifactKey::from_bytes([7; 32]);
    ephem_artifact::write_atomic(&path, &ephem_artifact::to_bytes(&compiled, &[0; 32], &key))
        .unwrap();
    let engine = Engine::default();
    let m = Module::from_artifact_file(&engine, &path, &key).unwrap();
    assert_eq!(
        run(&engine, &m, "mixed", 5000, u64::MAX >> 2).0,
        reference,
        "artifact file"
    );
    // Two threads at once.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (engine, m) = (engine.clone(), m.clone());
            std::thread::spawn(move || run(&engine, &m, "mixed", 5000, u64::MAX >> 2).0)
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), reference, "threads");
    }
}

#[test]
fn a_store_with_fuel_refuses_unmetered_modules() {
    let engine = Engine::default();
    let plain = ephem::Module::new(&engine, b"(module (func (export \"f\")))").unwrap();
    let mut store = Store::new(&engine, ());
    assert_eq!(store.get_fuel().unwrap_err().kind(), ErrorKind::Usage);
    store.set_fuel(100).unwrap();
    let e = Linker::new(&engine)
        .instantiate(&mut store, &plain)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("fuel"), "{e}");
}

const TRAPPING: &str = r#"(module
  (memory 1)
  (func $burn (param $n i32) (result i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    (local.get $n))
  (func (export "call_then_return") (param $n i32) (result i32)
    (drop (call $burn (local.get $n))) (i32.const 0))
  (func (export "call_then_fault") (param $n i32) (result i32)
    (drop (call $burn (local.get $n))) (i32.load (i32.const -4)))
  (func (export "loop_then_return") (param $n i32) (result i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    (i32.const 0))
  (func (export "loop_then_unreachable") (param $n i32) (result i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    unreachable))"#;

#[test]
fn what_ran_before_a_trap_is_paid_for() {
    // Metered code keeps its fuel in a register; a trap takes it from there, as of the last
    // function entry, loop header, call or return. So a guest cannot run a loop or a call
    // for free by trapping after it: 1 000 iterations more cost what they cost without it.
    let engine = Engine::default();
    let m = module(&engine, TRAPPING);
    let cost = |name: &str, n: i32, trap: Option<TrapKind>| {
        let (used, got) = run(&engine, &m, name, n, 1 << 30);
        assert_eq!(got, trap, "{name}({n})");
        used
    };
    let per_1000 = |name: &str, trap| cost(name, 1001, trap) - cost(name, 1, trap);
    let (fault, unreachable) = (
        Some(TrapKind::MemoryOutOfBounds),
        Some(TrapKind::Unreachable),
    );
    assert_eq!(per_1000("call_then_return", None), 6000);
    assert_eq!(per_1000("call_then_fault", fault), 6000);
    assert_eq!(per_1000("loop_then_return", None), 6000);
    assert_eq!(per_1000("loop_then_unreachable", unreachable), 6000);
    // Everything up to the call's return: the caller's stretch before the call, the callee.
    assert_eq!(
        cost("call_then_fault", 1, fault),
        cost("call_then_return", 1, None) - 1
    );
}

#[test]
fn host_functions_see_and_set_the_fuel_of_the_code_around_them() {
    // A host function sees what its caller spent, charges, and calls back into wasm, which
    // spends from the same fuel; the caller goes on with what is left.
    let engine = Engine::default();
    let m = module(
        &engine,
        r#"(module
          (import "host" "reenter" (func $reenter (param i32) (result i32)))
          (func $burn (export "burn") (param $n i32) (result i32)
            (loop $l
              (local.set $n (i32.sub (local.get $n) (i32.const 1)))
              (br_if $l (local.get $n)))
            (local.get $n))
          (func (export "outer") (param $n i32) (result i32)
            (drop (call $burn (local.get $n)))
            (drop (call $reenter (local.get $n)))
            (call $burn (local.get $n))))"#,
    );
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap(
            "host",
            "reenter",
            |mut caller: ephem::Caller<'_, Vec<u64>>, n: i32| -> Result<i32, ephem::Error> {
                let before = caller.get_fuel()?;
                caller.consume_fuel(100)?;
                let burn = caller.get_export("burn").unwrap().into_func().unwrap();
                let burn = burn.typed::<i32, i32>(&caller)?;
                let r = burn.call(&mut caller, n)?;
                let after = caller.get_fuel()?;
                caller.data_mut().extend([before, after]);
                Ok(r)
            },
        )
        .unwrap();
    let mut store = Store::new(&engine, Vec::new());
    store.set_fuel(1_000_000).unwrap();
    let instance = linker.instantiate(&mut store, &m).unwrap();
    let burn = instance
        .get_typed_func::<i32, i32>(&mut store, "burn")
        .unwrap();
    burn.call(&mut store, 1000).unwrap();
    let one_burn = 1_000_000 - store.get_fuel().unwrap();
    store.set_fuel(1_000_000).unwrap();
    let outer = instance
        .get_typed_func::<i32, i32>(&mut store, "outer")
        .unwrap();
    outer.call(&mut store, 1000).unwrap();
    let &[before, after] = store.data().as_slice() else {
        panic!("the host function ran once: {:?}", store.data())
    };
    // The caller's first stretch (2), the first burn, and its second stretch (2) before the
    // host function.
    assert_eq!(1_000_000 - before, one_burn + 4);
    assert_eq!(before - after, 100 + one_burn);
    // After the host function: one stretch (2) and the last burn.
    assert_eq!(after - store.get_fuel().unwrap(), 2 + one_burn);
}

#[test]
fn a_store_runs_metered_or_unmetered_code_not_both() {
    let engine = Engine::default();
    let wat = b"(module (func (export \"f\")))";
    let plain = ephem::Module::new(&engine, wat).unwrap();
    let metered = ephem::compile_with(&metered(), &engine, wat).unwrap();
    for (first, second) in [(&plain, &metered), (&metered, &plain)] {
        let mut store = Store::new(&engine, ());
        let linker = Linker::new(&engine);
        let instance = linker.instantiate(&mut store, first).unwrap();
        let e = linker.instantiate(&mut store, second).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
        assert!(e.to_string().contains("metering"), "{e}");
        // The store goes on with the kind it has.
        let f = instance.get_typed_func::<(), ()>(&mut store, "f").unwrap();
        f.call(&mut store, ()).unwrap();
        linker.instantiate(&mut store, first).unwrap();
    }
}

#[test]
fn a_host_function_called_from_the_host_leaves_metered_fuel_alone() {
    // Called by the host, a host function goes through the module's entry trampoline and
    // adapter, with no wasm caller: the fuel is what the host set, and what it charges.
    let engine = Engine::default();
    let m = module(
        &engine,
        r#"(module
          (import "host" "charge" (func $charge (param i32)))
          (export "charge" (func $charge)))"#,
    );
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap(
            "host",
            "charge",
            |mut caller: ephem::Caller<'_, ()>, n: i32| caller.consume_fuel(n as u64),
        )
        .unwrap();
    let mut store = Store::new(&engine, ());
    store.set_fuel(1000).unwrap();
    let instance = linker.instantiate(&mut store, &m).unwrap();
    let charge = instance
        .get_typed_func::<i32, ()>(&mut store, "charge")
        .unwrap();
    charge.call(&mut store, 30).unwrap();
    assert_eq!(store.get_fuel().unwrap(), 970);
}

/// A bulk operation that cannot be paid leaves the fuel at -1, never a debt so large that the
/// caller's next charge wraps around: here a 64-bit `memory.fill` of nearly 2^63 bytes fails in a
/// call a host function makes (a charge just under 2^63), the host goes on, and its caller,
/// spinning, is still stopped (its charges would have wrapped the debt around to a credit).
#[test]
fn an_unpayable_bulk_operation_never_makes_fuel_wrap() {
    let engine = Engine::default();
    let inner = module(
        &engine,
        r#"(module
          (memory (export "memory") i64 1)
          (func (export "fill") (memory.fill (i64.const 0) (i32.const 1) (i64.const 0x7fffffffffffff00))))"#,
    );
    let mut store = Store::new(&engine, ());
    store.set_fuel(10_000).unwrap();
    let mut linker = Linker::new(&engine);
    let inner = linker.instantiate(&mut store, &inner).unwrap();
    linker
        .func_wrap(
            "host",
            "try_fill",
            move |mut caller: ephem::Caller<'_, ()>| {
                let fill = inner.get_typed_func::<(), ()>(&mut caller, "fill").unwrap();
                let e = fill.call(&mut caller, ()).unwrap_err();
                assert_eq!(e.trap().unwrap().kind, TrapKind::OutOfFuel);
            },
        )
        .unwrap();
    let outer = module(
        &engine,
        r#"(module
          (import "host" "try_fill" (func $try_fill))
          (func (export "run") (param i32) (result i32)
            (call $try_fill)
            (loop $l (br $l))
            (i32.const 0)))"#,
    );
    let outer = linker.instantiate(&mut store, &outer).unwrap();
    let run = outer.get_typed_func::<i32, i32>(&mut store, "run").unwrap();
    let e = run.call(&mut store, 0).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::OutOfFuel);
    assert_eq!(store.get_fuel().unwrap(), 0);
}
