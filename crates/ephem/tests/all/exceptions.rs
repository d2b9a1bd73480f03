//! Exception handling through the embedding API: exceptions crossing calls of every kind,
//! instances and the host both ways; what an uncaught one gives the host; that traps stay
//! traps; fuel and deadlines through throws; and that a record reused for the next exception
//! is never one something can still name.

use std::time::Duration;

use ephem::{
    Caller, Compiler, Engine, Error, ExnRef, Extern, FuncType, HostError, Linker, Module, Store,
    Tag, TagType, ThrownException, TrapKind, Val, ValType,
};

const THROWER: &str = r#"(module
  (tag $e (export "e") (param i32))
  (tag $other (export "other") (param i64 f64))
  (type $t (func (param i32) (result i32)))
  (table $tab 1 funcref)
  (elem (table $tab) (i32.const 0) func $thrower)
  (func $thrower (export "thrower") (param i32) (result i32)
    (throw $e (local.get 0)))
  (func $throw_other (export "throw_other")
    (throw $other (i64.const -5) (f64.const 2.5)))
  ;; Catches $e from a direct call, adding 1 to its value.
  (func (export "direct") (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h) (call $thrower (local.get 0))))
    (i32.add (i32.const 1)))
  (func (export "indirect") (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h)
        (call_indirect (type $t) (local.get 0) (i32.const 0))))
    (i32.add (i32.const 2)))
  (elem declare func $thrower)
  (func (export "by_ref") (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h)
        (call_ref $t (local.get 0) (ref.func $thrower))))
    (i32.add (i32.const 3)))
  ;; A tail call leaves this frame: its handler no longer applies, the caller's does.
  (func $tail (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h) (return_call $thrower (local.get 0))))
    (i32.add (i32.const 1000)))
  (func (export "tail") (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h) (call $tail (local.get 0))))
    (i32.add (i32.const 4)))
  ;; Ten frames up.
  (func $deep (param i32) (param i32) (result i32)
    (if (result i32) (local.get 1)
      (then (call $deep (local.get 0) (i32.sub (local.get 1) (i32.const 1))))
      (else (call $thrower (local.get 0)))))
  (func (export "deep") (param i32) (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $e $h) (call $deep (local.get 0) (i32.const 10))))
    (i32.add (i32.const 5)))
  ;; Traps are not exceptions: catch_all does not see them.
  (func (export "trap_in_try") (param i32) (result i32)
    (block $h
      (try_table (catch_all $h) (drop (i32.div_u (i32.const 1) (local.get 0))) (unreachable)))
    (i32.const -1))
  ;; Catches with the exception kept, and hands it to the host.
  (func (export "catch_ref") (param i32) (result exnref)
    (block $h (result i32 exnref)
      (try_table (catch_ref $e $h) (drop (call $thrower (local.get 0))))
      (unreachable))
    (return))
  (func (export "rethrow") (param exnref) (throw_ref (local.get 0)))
  ;; Keeps an exception in a global, then throws and catches `n` others without keeping them.
  (global $kept (mut exnref) (ref.null exn))
  (func (export "keep_then_churn") (param i32) (result exnref)
    (block $h (result exnref)
      (try_table (catch_all_ref $h) (drop (call $thrower (i32.const 77))))
      (unreachable))
    (global.set $kept)
    (loop $l
      (block $c (result i32)
        (try_table (catch $e $c) (drop (call $thrower (local.get 0))))
        (unreachable))
      (drop)
      (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
    (global.get $kept))
  ;; Throws and catches until stopped.
  (func (export "forever") (param i32) (result i32)
    (loop $l
      (block $c (result i32)
        (try_table (result i32) (catch $e $c) (call $thrower (local.get 0))))
      (drop)
      (br $l))
    (i32.const 0)))"#;

fn setup(engine: &Engine) -> (Store<()>, ephem::Instance) {
    let module = Module::new(engine, THROWER).unwrap();
    let mut store = Store::new(engine, ());
    let instance = Linker::new(engine)
        .instantiate(&mut store, &module)
        .unwrap();
    (store, instance)
}

fn call_i32(store: &mut Store<()>, i: ephem::Instance, name: &str, x: i32) -> Result<i32, Error> {
    let f = i.get_typed_func::<i32, i32>(&mut *store, name).unwrap();
    f.call(store, x)
}

#[test]
fn exceptions_cross_direct_indirect_ref_and_tail_calls_and_ten_frames() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    assert_eq!(call_i32(&mut store, i, "direct", 10).unwrap(), 11);
    assert_eq!(call_i32(&mut store, i, "indirect", 10).unwrap(), 12);
    assert_eq!(call_i32(&mut store, i, "by_ref", 10).unwrap(), 13);
    assert_eq!(call_i32(&mut store, i, "tail", 10).unwrap(), 14);
    assert_eq!(call_i32(&mut store, i, "deep", 10).unwrap(), 15);
}

#[test]
fn an_uncaught_exception_reaches_the_host_with_its_tag_and_values_and_the_store_runs_on() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let e = call_i32(&mut store, i, "thrower", 42).unwrap_err();
    assert!(matches!(e, Error::Exception(ThrownException)), "{e}");
    assert_eq!(e.kind(), ephem::ErrorKind::Exception);
    let exn = store.take_pending_exception().expect("pending");
    assert!(store.take_pending_exception().is_none(), "taken once");
    let tag = i
        .get_export(&mut store, "e")
        .and_then(Extern::into_tag)
        .unwrap();
    assert_eq!(exn.tag(&store), tag);
    assert!(matches!(exn.fields(&store)[..], [Val::I32(42)]));
    assert_eq!(tag.ty(&store).ty().params, [ValType::I32]);

    let throw_other = i.get_func(&mut store, "throw_other").unwrap();
    let e = throw_other.call(&mut store, &[], &mut []).unwrap_err();
    assert!(matches!(e, Error::Exception(_)));
    let exn = store.take_pending_exception().unwrap();
    let other = i
        .get_export(&mut store, "other")
        .and_then(Extern::into_tag)
        .unwrap();
    assert_eq!(exn.tag(&store), other);
    assert!(
        matches!(exn.fields(&store)[..], [Val::I64(-5), Val::F64(b)] if f64::from_bits(b) == 2.5)
    );

    // The store is usable after it.
    assert_eq!(call_i32(&mut store, i, "direct", 1).unwrap(), 2);
}

#[test]
fn traps_are_not_caught() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let e = call_i32(&mut store, i, "trap_in_try", 0).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::IntegerDivisionByZero);
    let e = call_i32(&mut store, i, "trap_in_try", 1).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::Unreachable);
    assert!(store.take_pending_exception().is_none());
}

#[test]
fn an_exnref_goes_to_the_host_and_back_and_stays_in_its_store() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let catch_ref = i.get_func(&mut store, "catch_ref").unwrap();
    let mut out = [Val::ExnRef(None)];
    catch_ref
        .call(&mut store, &[Val::I32(9)], &mut out)
        .unwrap();
    let Val::ExnRef(Some(exn)) = out[0] else {
        panic!("{:?}", out[0])
    };
    assert!(matches!(exn.fields(&store)[..], [Val::I32(9)]));
    // Thrown again by wasm: the host gets the same exception back.
    let rethrow = i.get_func(&mut store, "rethrow").unwrap();
    let e = rethrow
        .call(&mut store, &[Val::ExnRef(Some(exn))], &mut [])
        .unwrap_err();
    assert!(matches!(e, Error::Exception(_)));
    assert_eq!(store.take_pending_exception(), Some(exn));
    // Null traps.
    let e = rethrow
        .call(&mut store, &[Val::ExnRef(None)], &mut [])
        .unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::NullReference);
    // Another store's exception is refused.
    let (mut other, j) = setup(&engine);
    let rethrow_there = j.get_func(&mut other, "rethrow").unwrap();
    assert!(
        rethrow_there
            .call(&mut other, &[Val::ExnRef(Some(exn))], &mut [])
            .is_err()
    );
}

#[test]
fn a_reused_record_is_never_one_something_still_names() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let f = i.get_func(&mut store, "keep_then_churn").unwrap();
    let mut out = [Val::ExnRef(None)];
    f.call(&mut store, &[Val::I32(1000)], &mut out).unwrap();
    let Val::ExnRef(Some(kept)) = out[0] else {
        panic!()
    };
    // 1000 exceptions were thrown and caught after it was kept: it still holds its value.
    assert!(matches!(kept.fields(&store)[..], [Val::I32(77)]));
}

/// A host tag, a host function that throws it, and two instances: the exception crosses the
/// inner instance (which does not catch it) to the outer one, which does; uncaught, it reaches
/// the host that called.
#[test]
fn a_host_function_throws_through_two_instances() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let tag = Tag::new(&mut store, &TagType::new(FuncType::new([ValType::I32], []))).unwrap();
    let mut linker = Linker::new(&engine);
    linker.define(&store, "host", "tag", tag).unwrap();
    linker
        .func_wrap(
            "host",
            "throw",
            move |mut caller: Caller<'_, ()>, x: i32| -> Result<(), HostError> {
                let exn = ExnRef::new(&mut caller, &tag, &[Val::I32(x)])?;
                Err(caller.throw(exn).into())
            },
        )
        .unwrap();
    let inner = Module::new(
        &engine,
        r#"(module
          (import "host" "throw" (func $throw (param i32)))
          (func (export "pass") (param i32) (call $throw (local.get 0))))"#,
    )
    .unwrap();
    let inner = linker.instantiate(&mut store, &inner).unwrap();
    linker.instance(&mut store, "inner", inner).unwrap();
    let outer = Module::new(
        &engine,
        r#"(module
          (import "host" "tag" (tag $t (param i32)))
          (import "inner" "pass" (func $pass (param i32)))
          (func (export "catch") (param i32) (result i32)
            (block $h (result i32)
              (try_table (catch $t $h) (call $pass (local.get 0)))
              (i32.const -1))
            (i32.mul (i32.const 2)))
          (func (export "uncaught") (param i32) (call $pass (local.get 0))))"#,
    )
    .unwrap();
    let outer = linker.instantiate(&mut store, &outer).unwrap();
    let catch = outer
        .get_typed_func::<i32, i32>(&mut store, "catch")
        .unwrap();
    assert_eq!(catch.call(&mut store, 21).unwrap(), 42);
    let uncaught = outer
        .get_typed_func::<i32, ()>(&mut store, "uncaught")
        .unwrap();
    let e = uncaught.call(&mut store, 5).unwrap_err();
    assert!(matches!(e, Error::Exception(_)), "{e}");
    let exn = store.take_pending_exception().unwrap();
    assert_eq!(exn.tag(&store), tag);
    assert!(matches!(exn.fields(&store)[..], [Val::I32(5)]));

    // A tag of another type is refused at link time, and an ExnRef of the wrong values.
    let wrong = Module::new(
        &engine,
        r#"(module (import "host" "tag" (tag (param i64))))"#,
    )
    .unwrap();
    let e = linker.instantiate(&mut store, &wrong).unwrap_err();
    assert!(matches!(e, Error::Link(_)), "{e}");
    assert!(ExnRef::new(&mut store, &tag, &[Val::I64(1)]).is_err());
    assert!(Tag::new(&mut store, &TagType::new(FuncType::new([], [ValType::I32]))).is_err());
}

/// Two instances of one module have distinct tags: one's exception does not match the other's
/// `catch`, only `catch_all`.
#[test]
fn each_instance_defines_its_own_tags() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    let thrower = Module::new(&engine, THROWER).unwrap();
    let a = linker.instantiate(&mut store, &thrower).unwrap();
    linker.instance(&mut store, "a", a).unwrap();
    let catcher = Module::new(
        &engine,
        r#"(module
          (import "a" "thrower" (func $throw (param i32) (result i32)))
          (tag $mine (param i32))
          (func (export "mine") (param i32) (result i32)
            (block $h (result i32)
              (try_table (result i32) (catch $mine $h) (call $throw (local.get 0)))))
          (func (export "all") (param i32) (result i32)
            (block $h
              (try_table (catch_all $h) (drop (call $throw (local.get 0)))))
            (i32.const 99)))"#,
    )
    .unwrap();
    let c = linker.instantiate(&mut store, &catcher).unwrap();
    let e = call_i32(&mut store, c, "mine", 1).unwrap_err();
    assert!(matches!(e, Error::Exception(_)));
    assert_eq!(call_i32(&mut store, c, "all", 1).unwrap(), 99);
}

fn metered_setup(engine: &Engine) -> (Store<()>, ephem::Instance) {
    let compiler = Compiler::new().unwrap().with_fuel();
    let module = ephem::compile_with(&compiler, engine, THROWER.as_bytes()).unwrap();
    let mut store = Store::new(engine, ());
    store.set_fuel(1_000_000).unwrap();
    let instance = Linker::new(engine)
        .instantiate(&mut store, &module)
        .unwrap();
    (store, instance)
}

/// What ran before a throw is paid for, caught or not, at the cost model's prices (1 per
/// operator; `block`, `try_table` and `end` free).
#[test]
fn fuel_is_exact_through_throws() {
    let engine = Engine::default();
    let (mut store, i) = metered_setup(&engine);
    let spent = |store: &mut Store<()>, name: &str| {
        let before = store.get_fuel().unwrap();
        let result = call_i32(store, i, name, 3);
        (before - store.get_fuel().unwrap(), result.ok())
    };
    // direct: local.get, call (2); thrower: local.get, throw (2); after the catch: i32.const,
    // i32.add (2).
    assert_eq!(spent(&mut store, "direct"), (6, Some(4)));
    // thrower alone: 2, uncaught.
    assert_eq!(spent(&mut store, "thrower"), (2, None));
    store.take_pending_exception();
    // deep: local.get, i32.const, call (3); per level of $deep: local.get, if, then local.get,
    // local.get, i32.const, i32.sub, call (7) ten times, and the last: local.get, if,
    // local.get, call (4); thrower 2; i32.const, i32.add (2).
    assert_eq!(spent(&mut store, "deep"), (3 + 70 + 4 + 2 + 2, Some(8)));

    // Throwing and catching runs out of fuel: a trap, not an exception.
    store.set_fuel(10_000).unwrap();
    let e = call_i32(&mut store, i, "forever", 0).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::OutOfFuel);
}

#[test]
fn a_deadline_stops_a_guest_that_throws_and_catches_forever() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let ticker = engine.start_epoch_ticker(Duration::from_millis(5));
    store.set_epoch_deadline(4);
    let e = call_i32(&mut store, i, "forever", 0).unwrap_err();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted);
}

#[test]
fn exceptions_can_be_turned_off() {
    let mut config = ephem::Config::new();
    config.wasm_exceptions(false);
    let engine = Engine::new(&config).unwrap();
    assert!(Module::new(&engine, THROWER).is_err());
}

/// A guest that keeps every exception it catches (as `exnref`s, which nothing frees before its
/// store is dropped) meets the store's bound as a trap, not the host's memory running out; a
/// guest that keeps none reuses one record however many it throws.
#[test]
fn the_exceptions_a_store_holds_are_bounded() {
    let mut config = ephem::Config::new();
    config.max_exception_bytes(64 << 10);
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(
        &engine,
        r#"(module
          (tag $e (param i32))
          (func (export "keep") (param i32) (result i32)
            (loop $l
              (block $h (result i32 exnref)
                (try_table (catch_ref $e $h) (throw $e (local.get 0)))
                (unreachable))
              (drop) (drop)
              (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
            (i32.const 0))
          (func (export "churn") (param i32) (result i32)
            (loop $l
              (block $h (result i32)
                (try_table (catch $e $h) (throw $e (local.get 0)))
                (unreachable))
              (drop)
              (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
            (i32.const 0))
          ;; The legacy form, without a rethrow: its records are reused too.
          (func (export "churn_legacy") (param i32) (result i32)
            loop $l
              try
                (throw $e (local.get 0))
              catch $e
                drop
              end
              (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1))))
            end
            (i32.const 0)))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    // 32 bytes a record: 2 048 fit.
    assert_eq!(call_i32(&mut store, i, "keep", 2000).unwrap(), 0);
    let e = call_i32(&mut store, i, "keep", 100).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::TooManyExceptions, "{e}");
    let tag = Tag::new(&mut store, &TagType::new(FuncType::new([], []))).unwrap();
    let e = ExnRef::new(&mut store, &tag, &[]).unwrap_err();
    assert_eq!(e.kind(), ephem::ErrorKind::Limit);

    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    assert_eq!(call_i32(&mut store, i, "churn", 1_000_000).unwrap(), 0);
    assert_eq!(
        call_i32(&mut store, i, "churn_legacy", 1_000_000).unwrap(),
        0
    );
}

/// The legacy form (`try`, `catch`, `catch_all`, `rethrow`, `delegate`), which clang emits by
/// default: each case's answer is what the legacy proposal's semantics give, worked out by
/// hand in its comment.
const LEGACY: &str = r#"(module
  (tag $a (export "a") (param i32))
  (tag $b (export "b"))
  (func $throw_a (param i32) (throw $a (local.get 0)))
  (func $throw_b (throw $b))
  ;; $a(7) → 107 by `catch $a`; $b → 200 by `catch_all`.
  (func (export "catch") (param i32) (result i32)
    try (result i32)
      local.get 0
      if
        (call $throw_a (i32.const 7))
      else
        call $throw_b
      end
      i32.const 0
    catch $a
      (i32.add (i32.const 100))
    catch_all
      i32.const 200
    end)
  ;; The inner try catches only $a: $b goes on to the outer one → 5.
  (func (export "outer") (result i32)
    try (result i32)
      try (result i32)
        call $throw_b
        i32.const 0
      catch $a
      end
    catch $b
      i32.const 5
    end)
  ;; Caught, then rethrown to the outer try → 3 + 10.
  (func (export "rethrow") (result i32)
    try (result i32)
      try (result i32)
        (call $throw_a (i32.const 3))
        i32.const 0
      catch $a
        drop
        rethrow 0
      end
    catch $a
      (i32.add (i32.const 10))
    end)
  ;; Inside the catch of $b, `rethrow 1` throws again the $a that the enclosing catch caught
  ;; → 1 + 20.
  (func (export "rethrow_outer") (result i32)
    try (result i32)
      try (result i32)
        (call $throw_a (i32.const 1))
        i32.const 0
      catch $a
        drop
        try (result i32)
          call $throw_b
          i32.const 0
        catch $b
          rethrow 1
        end
      end
    catch $a
      (i32.add (i32.const 20))
    catch $b
      i32.const 99
    end)
  ;; Delegated to $outer: the middle try's catch is skipped → 4 + 30.
  (func (export "delegate") (result i32)
    try $outer (result i32)
      try (result i32)
        try (result i32)
          (call $throw_a (i32.const 4))
          i32.const 0
        delegate $outer
      catch $a
        drop
        i32.const -1
      end
    catch $a
      (i32.add (i32.const 30))
    end)
  ;; Delegated to the function's label: to the caller, whose try catches it → 6 + 40.
  (func $delegates_out (result i32)
    try (result i32)
      (call $throw_a (i32.const 6))
      i32.const 0
    delegate 0)
  (func (export "delegate_caller") (result i32)
    try (result i32)
      call $delegates_out
    catch $a
      (i32.add (i32.const 40))
    end)
  ;; Delegated to a block inside a try's body: that try's handlers → 8 + 50.
  (func (export "delegate_block") (result i32)
    try (result i32)
      block $blk (result i32)
        try (result i32)
          (call $throw_a (i32.const 8))
          i32.const 0
        delegate $blk
      end
    catch $a
      (i32.add (i32.const 50))
    end)
  ;; A legacy try that does not catch $a, inside a try_table that does → 9.
  (func (export "mixed") (result i32)
    (block $h (result i32)
      (try_table (result i32) (catch $a $h)
        try (result i32)
          (call $throw_a (i32.const 9))
          i32.const 0
        catch $b
          i32.const -2
        end)))
  ;; Thrown and caught in one function → 11.
  (func (export "local") (result i32)
    try (result i32)
      (throw $a (i32.const 11))
    catch $a
    end)
  ;; Caught by catch_all and rethrown to the host.
  (func (export "uncaught")
    try
      call $throw_b
    catch_all
      rethrow 0
    end))"#;

#[test]
fn the_legacy_form_catches_rethrows_and_delegates_as_its_proposal_says() {
    let engine = Engine::default();
    legacy_cases(&engine, Module::new(&engine, LEGACY).unwrap(), false);
    // Metered: the same answers, and the fuel flows through the dispatch blocks.
    let metered = Compiler::new().unwrap().with_fuel();
    let module = ephem::compile_with(&metered, &engine, LEGACY.as_bytes()).unwrap();
    legacy_cases(&engine, module, true);

    // Off, the legacy form is refused (and the standard one still accepted).
    let mut config = ephem::Config::new();
    config.wasm_legacy_exceptions(false);
    let engine = Engine::new(&config).unwrap();
    assert!(Module::new(&engine, LEGACY).is_err());
    assert!(Module::new(&engine, THROWER).is_ok());
}

fn legacy_cases(engine: &Engine, module: Module, metered: bool) {
    let mut store = Store::new(engine, ());
    if metered {
        store.set_fuel(1_000_000).unwrap();
    }
    let i = Linker::new(engine)
        .instantiate(&mut store, &module)
        .unwrap();
    assert_eq!(call_i32(&mut store, i, "catch", 1).unwrap(), 107);
    assert_eq!(call_i32(&mut store, i, "catch", 0).unwrap(), 200);
    let nullary = |store: &mut Store<()>, name: &str| {
        let f = i.get_typed_func::<(), i32>(&mut *store, name).unwrap();
        f.call(store, ())
    };
    assert_eq!(nullary(&mut store, "outer").unwrap(), 5);
    assert_eq!(nullary(&mut store, "rethrow").unwrap(), 13);
    assert_eq!(nullary(&mut store, "rethrow_outer").unwrap(), 21);
    assert_eq!(nullary(&mut store, "delegate").unwrap(), 34);
    assert_eq!(nullary(&mut store, "delegate_caller").unwrap(), 46);
    assert_eq!(nullary(&mut store, "delegate_block").unwrap(), 58);
    assert_eq!(nullary(&mut store, "mixed").unwrap(), 9);
    assert_eq!(nullary(&mut store, "local").unwrap(), 11);
    let uncaught = i.get_func(&mut store, "uncaught").unwrap();
    let e = uncaught.call(&mut store, &[], &mut []).unwrap_err();
    assert!(matches!(e, Error::Exception(_)), "{e}");
    let b = i
        .get_export(&mut store, "b")
        .and_then(Extern::into_tag)
        .unwrap();
    assert_eq!(store.take_pending_exception().unwrap().tag(&store), b);
    if metered {
        assert!(store.get_fuel().unwrap() < 1_000_000);
    }
}

/// wasm → host → wasm that throws: the inner call ends with the exception, and the host
/// function that passes the error on (`?`) throws it on into the outer wasm, which catches it.
#[test]
fn an_exception_crosses_a_host_function_that_passes_the_error_on() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    let thrower = Module::new(&engine, THROWER).unwrap();
    let inner = linker.instantiate(&mut store, &thrower).unwrap();
    linker.instance(&mut store, "inner", inner).unwrap();
    linker
        .func_wrap(
            "host",
            "relay",
            move |mut caller: Caller<'_, ()>, x: i32| -> Result<i32, HostError> {
                let f = inner.get_typed_func::<i32, i32>(&mut caller, "thrower")?;
                Ok(f.call(&mut caller, x)?)
            },
        )
        .unwrap();
    let outer = Module::new(
        &engine,
        r#"(module
          (import "inner" "e" (tag $e (param i32)))
          (import "host" "relay" (func $relay (param i32) (result i32)))
          (func (export "run") (param i32) (result i32)
            (block $h (result i32)
              (try_table (result i32) (catch $e $h) (call $relay (local.get 0))))
            (i32.add (i32.const 1000))))"#,
    )
    .unwrap();
    let outer = linker.instantiate(&mut store, &outer).unwrap();
    assert_eq!(call_i32(&mut store, outer, "run", 5).unwrap(), 1005);
    assert!(store.take_pending_exception().is_none());
}

/// Which tags two imports are is known only when linked: a start function that throws one of
/// two imported tags is caught by the first clause when both are one tag. (A snapshot of the
/// start function taken at compile time would have seen two tags.)
#[test]
fn a_start_function_sees_the_tags_it_is_linked_with() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        r#"(module
          (import "host" "a" (tag $a))
          (import "host" "b" (tag $b))
          (memory (export "memory") 1)
          (func $start
            (block $by_a
              (block $by_b
                (try_table (catch $a $by_a) (catch $b $by_b) (throw $b)))
              (i32.store8 (i32.const 0) (i32.const 2))
              (return))
            (i32.store8 (i32.const 0) (i32.const 1)))
          (start $start))"#,
    )
    .unwrap();
    assert!(!module.start_ran_at_compile());
    let mut store = Store::new(&engine, ());
    let tag = Tag::new(&mut store, &TagType::new(FuncType::new([], []))).unwrap();
    let mut linker = Linker::new(&engine);
    linker.define(&store, "host", "a", tag).unwrap();
    linker.define(&store, "host", "b", tag).unwrap();
    let i = linker.instantiate(&mut store, &module).unwrap();
    let memory = i.get_memory(&mut store, "memory").unwrap();
    assert_eq!(
        memory.data(&store)[0],
        1,
        "caught by the first clause: one tag"
    );
}
