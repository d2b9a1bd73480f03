//! Start functions run at compile time (the runtime's `compile::snapshot`): an instance of a
//! snapshotted module is indistinguishable from one whose start function ran at instantiation
//! (memory, its size, globals, later calls, fuel to the unit), and a start function that could
//! have another outcome (it calls an import, traps, runs too long, grows memory past the bound,
//! or the module can change a table) is left to run at every instantiation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ephem::{Compiler, Engine, Instance, Linker, Module, Store, StoreLimitsBuilder, TrapKind};

/// Grows its memory, writes a pattern into the new pages, patches a data segment, and sets
/// mutable globals of every number type; `run` reads some of it back and writes memory.
const COMPUTING_START: &str = r#"(module
  (memory (export "mem") 1 10)
  (global $n (export "n") (mut i32) (i32.const 0))
  (global $h (export "h") (mut i64) (i64.const 0))
  (global $f (export "f") (mut f64) (f64.const 0))
  (global $s (export "s") (mut f32) (f32.const 0))
  (global $c (export "c") i32 (i32.const 7))
  (data (i32.const 100) "hello")
  (func $start (local $i i32)
    (drop (memory.grow (i32.const 2)))
    (loop $l
      (i32.store (i32.add (i32.const 131072) (i32.mul (local.get $i) (i32.const 4)))
                 (i32.mul (local.get $i) (i32.const 3)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))
    (global.set $n (local.get $i))
    (global.set $h (i64.const -5))
    (global.set $f (f64.const 2.5))
    (global.set $s (f32.const -0.25))
    (i32.store8 (i32.const 101) (i32.const 69)))
  (start $start)
  (func (export "run") (result i32)
    (i32.store (i32.const 200) (i32.const 1))
    (i32.add (i32.load (i32.const 131084)) (i32.load8_u (i32.const 101)))))"#;

/// The module compiled with the start function kept (run at instantiation), and through
/// `ephem::compile_with`.
fn both(compiler: &Compiler, engine: &Engine, wat: &str) -> (Module, Module) {
    let kept = Module::from_compiled(engine, &compiler.compile(wat.as_bytes()).unwrap()).unwrap();
    let compiled = ephem::compile_with(compiler, engine, wat.as_bytes()).unwrap();
    assert!(!kept.start_ran_at_compile());
    (kept, compiled)
}

/// Everything an embedder can see of `instance`: its memory, size included, and its globals.
fn visible(store: &mut Store<()>, instance: &Instance) -> (Memory, Vec<String>) {
    let memory = instance.get_memory(&mut *store, "mem").unwrap();
    let bytes = Memory(memory.data(&*store).to_vec());
    let globals = ["n", "h", "f", "s", "c"]
        .iter()
        .map(|g| {
            let v = instance
                .get_global(&mut *store, g)
                .unwrap()
                .get(&mut *store);
            format!("{v:?}")
        })
        .collect();
    (bytes, globals)
}

/// A memory's bytes, compared whole but shown by size and first bytes.
#[derive(PartialEq)]
struct Memory(Vec<u8>);

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nonzero = self.0.iter().filter(|&&b| b != 0).count();
        write!(f, "{} bytes, {nonzero} not zero", self.0.len())
    }
}

#[test]
fn an_instance_of_a_snapshot_is_the_instance_the_start_function_makes() {
    let engine = Engine::default();
    let (kept, snapshot) = both(&Compiler::new().unwrap(), &engine, COMPUTING_START);
    assert!(snapshot.start_ran_at_compile());
    let mut seen = Vec::new();
    for module in [&kept, &snapshot, &snapshot] {
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine)
            .instantiate(&mut store, module)
            .unwrap();
        let before = visible(&mut store, &instance);
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        let result = run.call(&mut store, ()).unwrap();
        seen.push((before, result, visible(&mut store, &instance)));
    }
    let (before, result, _) = &seen[0];
    assert_eq!(
        before.0.0.len(),
        3 * 65536,
        "the start function grew the memory"
    );
    assert_eq!(&before.0.0[100..105], b"hEllo");
    assert_eq!(*result, 9 + 69);
    assert_eq!(seen[1], seen[0], "the snapshot's instance differs");
    // The second snapshot instance starts afresh, not from the first one's writes.
    assert_eq!(seen[2], seen[0]);
}

#[test]
fn metered_instantiation_of_a_snapshot_charges_exactly_what_the_start_function_would() {
    let engine = Engine::default();
    let compiler = Compiler::new().unwrap().with_fuel();
    let (kept, snapshot) = both(&compiler, &engine, COMPUTING_START);
    assert!(snapshot.start_ran_at_compile());
    // Instantiation with `fuel`: whether it succeeds (or its trap), the fuel left, and the
    // fuel left after a call if it succeeded.
    let outcome = |module: &Module, fuel: u64| {
        let mut store = Store::new(&engine, ());
        store.set_fuel(fuel).unwrap();
        let instance = Linker::new(&engine).instantiate(&mut store, module);
        let after_start = store.get_fuel().unwrap();
        let instance = match instance {
            Ok(i) => i,
            Err(e) => return (Err(e.trap().map(|t| t.kind)), after_start, None),
        };
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        let call = run
            .call(&mut store, ())
            .map_err(|e| e.trap().map(|t| t.kind));
        (Ok(()), after_start, Some((call, store.get_fuel().unwrap())))
    };
    let big = 1 << 40;
    let cost = big - outcome(&kept, big).1;
    assert!(cost > 4000, "the start function's loop is charged: {cost}");
    // Every budget from nothing to past the cost, the boundaries included: the start function
    // ends with a straight stretch after its last check, so some budgets complete in debt.
    let mut in_debt = 0;
    for fuel in (0..=cost + 2).chain([big]) {
        let expected = outcome(&kept, fuel);
        assert_eq!(outcome(&snapshot, fuel), expected, "with {fuel} fuel");
        in_debt += usize::from(expected.0.is_ok() && fuel < cost);
    }
    assert!(in_debt > 0, "no budget completed in debt");
}

#[test]
fn start_functions_with_another_possible_outcome_run_at_every_instantiation() {
    let engine = Engine::default();
    let compiler = Compiler::new().unwrap();
    // Calls an import (whose result could differ each time).
    let calls = r#"(module (import "host" "tick" (func $tick))
                     (func $start (call $tick)) (start $start))"#;
    let module = ephem::compile_with(&compiler, &engine, calls.as_bytes()).unwrap();
    assert!(!module.start_ran_at_compile());
    let ticks = Arc::new(AtomicU32::new(0));
    let mut linker = Linker::new(&engine);
    let counter = ticks.clone();
    linker
        .func_wrap("host", "tick", move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    for _ in 0..3 {
        let mut store = Store::new(&engine, ());
        linker.instantiate(&mut store, &module).unwrap();
    }
    assert_eq!(ticks.load(Ordering::Relaxed), 3);

    // Traps: every instantiation traps.
    let traps = r#"(module (memory 1) (func $start (i32.store (i32.const 0) (i32.const 1)) unreachable)
                     (start $start))"#;
    let module = ephem::compile_with(&compiler, &engine, traps.as_bytes()).unwrap();
    assert!(!module.start_ran_at_compile());
    let mut store = Store::new(&engine, ());
    let e = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::Unreachable);

    // Could change a table (the start function does not call it, but nothing is assumed).
    let table = r#"(module (table 1 funcref) (global $g (export "g") (mut i32) (i32.const 0))
                     (func $f (table.set (i32.const 0) (ref.null func)))
                     (func $start (global.set $g (i32.const 5))) (start $start))"#;
    let module = ephem::compile_with(&compiler, &engine, table.as_bytes()).unwrap();
    assert!(!module.start_ran_at_compile());
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let g = instance.get_global(&mut store, "g").unwrap();
    assert_eq!(g.get(&mut store).i32(), Some(5));

    // Grows its memory past what a snapshot may hold (64 MiB): left to run, and its growth
    // succeeds at instantiation.
    let big = r#"(module (memory (export "mem") 1)
                   (func $start (drop (memory.grow (i32.const 1100)))) (start $start))"#;
    let module = ephem::compile_with(&compiler, &engine, big.as_bytes()).unwrap();
    assert!(!module.start_ran_at_compile());
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let memory = instance.get_memory(&mut store, "mem").unwrap();
    assert_eq!(memory.data(&store).len(), 1101 * 65536);

    // Never ends: compiling gives up on it, and a deadline stops it at instantiation.
    let endless = r#"(module (func $start (loop $l (br $l))) (start $start))"#;
    let started = std::time::Instant::now();
    let module = ephem::compile_with(&compiler, &engine, endless.as_bytes()).unwrap();
    assert!(!module.start_ran_at_compile());
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let mut store = Store::new(&engine, ());
    store.set_epoch_deadline(1);
    let ticker = engine.start_epoch_ticker(std::time::Duration::from_millis(5));
    let e = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap_err();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted);
}

/// A memory the start function grew is created at its grown size: a limit below that size
/// refuses the instance (where running the start function would have seen `memory.grow`
/// fail), and a limit that allows it changes nothing.
#[test]
fn a_snapshot_memory_is_created_at_its_grown_size_under_the_limiter() {
    let engine = Engine::default();
    let module = ephem::compile_with(
        &Compiler::new().unwrap(),
        &engine,
        COMPUTING_START.as_bytes(),
    )
    .unwrap();
    assert!(module.start_ran_at_compile());
    for (limit, fits) in [(3 * 65536, true), (2 * 65536, false)] {
        let mut store = Store::new(
            &engine,
            StoreLimitsBuilder::new().memory_size(limit).build(),
        );
        store.limiter(|l| l);
        let outcome = Linker::new(&engine).instantiate(&mut store, &module);
        assert_eq!(outcome.is_ok(), fits, "limit {limit}");
    }
}
