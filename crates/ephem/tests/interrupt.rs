//! Deadlines: a guest past its store's epoch deadline traps with `Interrupted` at its next
//! function entry or loop header, whether it loops without calls, loops calling, or recurses
//! without loops; an interrupt from another thread reaches a running guest; the store runs
//! again with a new deadline. Modules are compiled with interruption checks; a store with a
//! deadline refuses modules without them.

use std::time::{Duration, Instant};

use ephem::{Compiler, Engine, ErrorKind, Linker, Store, TrapKind, compile};

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
    let compiler = Compiler::new().unwrap().with_interruption_checks();
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

#[test]
fn a_store_with_a_deadline_refuses_modules_without_checks() {
    let engine = Engine::default();
    let module = compile(&engine, SPINNERS.as_bytes()).unwrap();
    let mut store = Store::new(&engine, ());
    store.set_epoch_deadline(10);
    let e = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("interruption"), "{e}");
    // Without a deadline it runs.
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let quick = instance
        .get_typed_func::<(), i32>(&mut store, "quick")
        .unwrap();
    assert_eq!(quick.call(&mut store, ()).unwrap(), 42);
}

/// The guest keeps its deadline in a register and reads it again after every call: a host
/// function that advances the epoch interrupts it at the next loop header, and one that also
/// moves the deadline on lets it finish.
#[test]
fn a_host_function_can_move_the_deadline_its_caller_sees() {
    let engine = Engine::default();
    let compiler = Compiler::new().unwrap().with_interruption_checks();
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
            assert_eq!(
                *store.data(),
                1,
                "interrupted at the first loop header after the call"
            );
        }
    }
}
