//! Deadlines: a guest past its store's epoch deadline traps with `Interrupted`, whether it
//! loops without calls, loops calling, or recurses without loops; an interrupt from another
//! thread reaches a running guest; the store runs again with a new deadline. Nothing is
//! compiled in for deadlines (the runtime signals the guest's thread), so any module can be
//! interrupted.

use std::time::{Duration, Instant};

use ephem::{Compiler, Engine, Linker, Module, Store, TrapKind};

const SPINNERS: &str = r#"(module
  (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
  (func (export "spin") (loop $l (br $l)))
  (func (export "spin_calling") (local i32)
    (loop $l (local.set 0 (call $leaf (local.get 0))) (br $l)))
  ;; A binary tree of calls 62 deep: it never ends in practice, never overflows the stack,
  ;; and has no loop.
  (func $tree (export "tree") (param i64)
    (if (i64.ne (local.get 0) (i64.const 0))
      (then (call $tree (i64.sub (local.get 0) (i64.const 1)))
            (call $tree (i64.sub (local.get 0) (i64.const 1))))))
  (func (export "quick") (result i32) (i32.const 42)))"#;

/// One way of running a guest that never ends by itself.
type Run<'a> = dyn Fn(&mut Store<()>) -> Result<(), ephem::Error> + 'a;

fn setup(engine: &Engine) -> (Store<()>, ephem::Instance) {
    let compiler = Compiler::new().unwrap();
    let module = ephem::compile_with(&compiler, engine, SPINNERS.as_bytes()).unwrap();
    let mut store = Store::new(engine, ());
    let instance = Linker::new(engine)
        .instantiate(&mut store, &module)
        .unwrap();
    (store, instance)
}

#[test]
fn every_kind_of_endless_guest_is_interrupted_from_another_thread() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let spin = instance
        .get_typed_func::<(), ()>(&mut store, "spin")
        .unwrap();
    let calling = instance
        .get_typed_func::<(), ()>(&mut store, "spin_calling")
        .unwrap();
    let tree = instance
        .get_typed_func::<i64, ()>(&mut store, "tree")
        .unwrap();
    let quick = instance
        .get_typed_func::<(), i32>(&mut store, "quick")
        .unwrap();
    let runs: [(&str, &Run<'_>); 3] = [
        ("a loop without calls", &|s| spin.call(s, ())),
        ("a loop that calls", &|s| calling.call(s, ())),
        ("recursion without loops", &|s| tree.call(s, 62)),
    ];
    for (what, run) in runs {
        store.set_epoch_deadline(1);
        let ticker = {
            let engine = engine.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                engine.increment_epoch();
            })
        };
        let started = Instant::now();
        let e = run(&mut store).expect_err(what);
        ticker.join().unwrap();
        assert_eq!(
            e.trap().map(|t| t.kind),
            Some(TrapKind::Interrupted),
            "{what}: {e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        // The store runs again once it has time.
        store.set_epoch_deadline(u64::MAX);
        assert_eq!(quick.call(&mut store, ()).unwrap(), 42, "{what}");
    }
}

#[test]
fn a_deadline_already_passed_interrupts_at_once_and_a_ticker_keeps_time() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let quick = instance
        .get_typed_func::<(), i32>(&mut store, "quick")
        .unwrap();
    store.set_epoch_deadline(0);
    let e = quick.call(&mut store, ()).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted);
    assert!(e.to_string().contains("interrupted"), "{e}");

    // A ticker every 10 ms and a deadline of 5 ticks: interrupted after about 50 ms.
    let ticker = engine.start_epoch_ticker(Duration::from_millis(10));
    store.set_epoch_deadline(5);
    let spin = instance
        .get_typed_func::<(), ()>(&mut store, "spin")
        .unwrap();
    let started = Instant::now();
    let e = spin.call(&mut store, ()).unwrap_err();
    let took = started.elapsed();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted);
    assert!(
        took >= Duration::from_millis(35),
        "interrupted too early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "interrupted too late: {took:?}"
    );
}

/// A host function that advances the epoch past its caller's deadline interrupts the caller as
/// it returns, and one that also moves the deadline on lets it finish.
#[test]
fn a_host_function_can_move_the_deadline_its_caller_sees() {
    let engine = Engine::default();
    let compiler = Compiler::new().unwrap();
    let module = ephem::compile_with(
        &compiler,
        &engine,
        br#"(module (import "host" "tick" (func $tick))
             (func (export "run") (result i32) (local $i i32)
               (loop $l
                 (call $tick)
                 (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (br_if $l (i32.lt_u (local.get $i) (i32.const 100))))
               (local.get $i)))"#,
    )
    .unwrap();
    for rearm in [false, true] {
        let mut linker = Linker::new(&engine);
        linker
            .func_wrap("host", "tick", move |mut caller: ephem::Caller<'_, u32>| {
                *caller.data_mut() += 1;
                caller.engine().increment_epoch();
                if rearm {
                    caller.set_epoch_deadline(1);
                }
            })
            .unwrap();
        let mut store = Store::new(&engine, 0u32);
        store.set_epoch_deadline(1);
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        let result = run.call(&mut store, ());
        if rearm {
            assert_eq!(result.unwrap(), 100);
            assert_eq!(*store.data(), 100);
        } else {
            let e = result.unwrap_err();
            assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted);
            assert_eq!(*store.data(), 1, "interrupted as the first call returned");
        }
    }
}

/// A guest that spends nearly all its time in a bulk-memory builtin (host code, which the
/// signal does not stop) is interrupted when the builtin next begins.
#[test]
fn a_guest_looping_on_bulk_memory_is_interrupted() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module (memory 64)
             (func (export "fill") (loop $l
               (memory.fill (i32.const 0) (i32.const 7) (i32.const 0x400000))
               (memory.copy (i32.const 0) (i32.const 0x10) (i32.const 0x3ffff0))
               (br $l))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let fill = instance
        .get_typed_func::<(), ()>(&mut store, "fill")
        .unwrap();
    let ticker = engine.start_epoch_ticker(Duration::from_millis(5));
    store.set_epoch_deadline(4);
    let started = Instant::now();
    let e = fill.call(&mut store, ()).unwrap_err();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted, "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A host function is never cut short: the deadline passes while it sleeps, it finishes its
/// work, and its caller is interrupted as it returns.
#[test]
fn host_code_runs_to_its_end_and_the_guest_stops_after_it() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module (import "host" "work" (func $work))
             (func (export "run") (loop $l (call $work) (br $l))))"#,
    )
    .unwrap();
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("host", "work", |mut caller: ephem::Caller<'_, u32>| {
            std::thread::sleep(Duration::from_millis(40));
            *caller.data_mut() += 1;
        })
        .unwrap();
    let mut store = Store::new(&engine, 0u32);
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance
        .get_typed_func::<(), ()>(&mut store, "run")
        .unwrap();
    let ticker = engine.start_epoch_ticker(Duration::from_millis(1));
    store.set_epoch_deadline(10);
    let started = Instant::now();
    let e = run.call(&mut store, ()).unwrap_err();
    let took = started.elapsed();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted, "{e}");
    // The first call's sleep outlasts the deadline; it completed, and no second call began.
    assert_eq!(*store.data(), 1);
    assert!(took >= Duration::from_millis(40), "{took:?}");
}

/// Threads under one ticking engine: each spinning guest stops at its own deadline, and a
/// guest on another thread with no deadline, running all the while, is not disturbed. Threads
/// that ran under a deadline may exit while the engine goes on ticking.
#[test]
fn deadlines_are_per_store_across_threads() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module
             (func (export "spin") (loop $l (br $l)))
             (func (export "count") (param $n i64) (result i64) (local $s i64)
               (loop $l
                 (local.set $s (i64.add (local.get $s) (local.get $n)))
                 (local.set $n (i64.sub (local.get $n) (i64.const 1)))
                 (br_if $l (i64.ne (local.get $n) (i64.const 0))))
               (local.get $s)))"#,
    )
    .unwrap();
    let ticker = engine.start_epoch_ticker(Duration::from_millis(2));
    let run = |deadline: Option<u64>, export: &'static str| {
        let (engine, module) = (engine.clone(), module.clone());
        std::thread::spawn(move || {
            let mut store = Store::new(&engine, ());
            if let Some(d) = deadline {
                store.set_epoch_deadline(d);
            }
            let instance = Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let started = Instant::now();
            let result = match export {
                "spin" => instance
                    .get_typed_func::<(), ()>(&mut store, "spin")
                    .unwrap()
                    .call(&mut store, ())
                    .map(|()| 0),
                _ => instance
                    .get_typed_func::<i64, i64>(&mut store, "count")
                    .unwrap()
                    .call(&mut store, 300_000_000),
            };
            (result, started.elapsed())
        })
    };
    let free = run(None, "count");
    let spinners: Vec<_> = (1..=4).map(|i| run(Some(5 * i), "spin")).collect();
    for s in spinners {
        let (result, took) = s.join().unwrap();
        let e = result.unwrap_err();
        assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted, "{e}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    let (result, _) = free.join().unwrap();
    let n: i64 = 300_000_000;
    assert_eq!(result.unwrap(), n * (n + 1) / 2);
    // The spinners' threads are gone; ticks go on without finding them.
    std::thread::sleep(Duration::from_millis(20));
    drop(ticker);
}
