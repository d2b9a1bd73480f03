//! GC collections: a heap far smaller than what a call allocates keeps working, because each
//! allocation that does not fit collects first; what frames (locals and operands, across
//! many frames and across a host call that re-enters wasm), globals, tables, exception
//! payloads and the host's handles reach survives with its contents, cycles included; what
//! is alive past the heap's bound still traps; and the slots a collection gives back show
//! nothing to the stores that take them next.

use super::gc_objects::call;
use ephem::{
    AnyRef, ArrayRef, ArrayRefPre, ArrayType, Caller, Config, Engine, FieldType, Func, Instance,
    Module, StorageType, Store, TrapKind, Val,
};

const NODES: &str = r#"(module
  (type $node (struct (field $v (mut i32)) (field $next (mut (ref null $node)))))
  (type $junk (array (mut i8)))
  (type $nodes (array (mut (ref null $node))))
  (type $junks (array (mut (ref null $junk))))
  (tag $e (param (ref $node)))
  (import "host" "reenter" (func $reenter (param i32)))
  (global $g (mut (ref null $node)) (ref.null $node))
  (global $exn (mut exnref) (ref.null exn))
  (table $t 4 (ref null $node))

  ;; Garbage: $n arrays of 1 KiB, each checked to be zero (a reused slot's bytes would show).
  (func $churn (export "churn") (param $n i32) (result i32)
    (local $a (ref $junk)) (local $dirty i32)
    (loop $l
      (local.set $a (array.new_default $junk (i32.const 1024)))
      (local.set $dirty (i32.or (local.get $dirty)
        (array.get_u $junk (local.get $a) (i32.const 1023))))
      (array.fill $junk (local.get $a) (i32.const 0) (i32.const 0x5e) (i32.const 1024))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (i32.gt_s (local.get $n) (i32.const 0))))
    (local.get $dirty))

  ;; A ring of $n nodes valued 1 to $n, garbage made between every two.
  (func $ring (export "ring") (param $n i32) (result (ref $node))
    (local $first (ref $node)) (local $p (ref $node)) (local $i i32)
    (local.set $first (struct.new $node (i32.const 1) (ref.null $node)))
    (local.set $p (local.get $first))
    (local.set $i (i32.const 2))
    (block $done
      (loop $l
        (br_if $done (i32.gt_s (local.get $i) (local.get $n)))
        (drop (call $churn (i32.const 2)))
        (struct.set $node $next (local.get $p) (struct.new $node (local.get $i) (ref.null $node)))
        (local.set $p (ref.as_non_null (struct.get $node $next (local.get $p))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (struct.set $node $next (local.get $p) (local.get $first))
    (local.get $first))

  ;; The values round a ring, back to its first node by identity.
  (func $sum (export "sum") (param $first (ref $node)) (result i32)
    (local $p (ref $node)) (local $s i32)
    (local.set $p (local.get $first))
    (loop $l
      (local.set $s (i32.add (local.get $s) (struct.get $node $v (local.get $p))))
      (local.set $p (ref.as_non_null (struct.get $node $next (local.get $p))))
      (br_if $l (i32.eqz (ref.eq (local.get $p) (local.get $first)))))
    (local.get $s))

  (func (export "ring_sum") (param $n i32) (param $junk i32) (result i32)
    (local $r (ref $node))
    (local.set $r (call $ring (local.get $n)))
    (drop (call $churn (local.get $junk)))
    (call $sum (local.get $r)))

  ;; Each of $d frames holds a node in a local across the call below it, which makes garbage.
  (func $deep (export "deep") (param $d i32) (result i32)
    (local $mine (ref null $node))
    (if (result i32) (i32.eqz (local.get $d))
      (then (call $churn (i32.const 300)))
      (else
        (local.set $mine (struct.new $node (local.get $d) (ref.null $node)))
        (drop (call $churn (i32.const 3)))
        (i32.add (call $deep (i32.sub (local.get $d) (i32.const 1)))
          (struct.get $node $v (local.get $mine))))))

  ;; A node on the operand stack (not in a local) while a call makes garbage.
  (func $first (param $n (ref $node)) (param i32) (result (ref $node)) (local.get $n))
  (func (export "stacked") (param $v i32) (result i32)
    (struct.get $node $v
      (call $first (struct.new $node (local.get $v) (ref.null $node))
        (call $churn (i32.const 300)))))

  ;; Nodes kept only by a global, a table and an exception.
  (func (export "hold") (param $v i32)
    (global.set $g (struct.new $node (local.get $v) (ref.null $node)))
    (table.set $t (i32.const 1)
      (struct.new $node (i32.add (local.get $v) (i32.const 1)) (ref.null $node)))
    (block $h (result (ref $node) exnref)
      (try_table (catch_ref $e $h)
        (throw $e (struct.new $node (i32.add (local.get $v) (i32.const 2)) (ref.null $node))))
      (unreachable))
    (global.set $exn)
    (drop))
  (func (export "held") (result i32 i32 i32)
    (struct.get $node $v (ref.as_non_null (global.get $g)))
    (struct.get $node $v (ref.as_non_null (table.get $t (i32.const 1))))
    (block $h (result (ref $node))
      (try_table (catch $e $h) (throw_ref (global.get $exn)))
      (unreachable))
    (struct.get $node $v))

  ;; An array of nodes, each kept only by the array.
  (func (export "array_of_nodes") (param $n i32) (result i32)
    (local $a (ref $nodes)) (local $i i32) (local $s i32)
    (local.set $a (array.new $nodes (ref.null $node) (local.get $n)))
    (loop $fill
      (array.set $nodes (local.get $a) (local.get $i) (struct.new $node (local.get $i) (ref.null $node)))
      (drop (call $churn (i32.const 2)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (local.get $n))))
    (local.set $i (i32.const 0))
    (loop $add
      (local.set $s (i32.add (local.get $s)
        (struct.get $node $v (ref.as_non_null (array.get $nodes (local.get $a) (local.get $i))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $add (i32.lt_u (local.get $i) (local.get $n))))
    (local.get $s))

  ;; A node in a local while a host function re-enters wasm, which makes garbage.
  (func (export "across_host") (param $v i32) (param $junk i32) (result i32)
    (local $mine (ref $node))
    (local.set $mine (struct.new $node (local.get $v) (ref.null $node)))
    (call $reenter (local.get $junk))
    (struct.get $node $v (local.get $mine)))

  ;; Live data: $n arrays of 1 KiB, all kept, with as much garbage made beside them.
  (func (export "keep_all") (param $n i32) (result i32)
    (local $list (ref null $junks)) (local $i i32)
    (local.set $list (array.new_default $junks (local.get $n)))
    (loop $l
      (array.set $junks (local.get $list) (local.get $i)
        (array.new_default $junk (i32.const 1024)))
      (drop (array.new_default $junk (i32.const 1024)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n))))
    (array.len (ref.as_non_null (array.get $junks (local.get $list) (i32.sub (local.get $n) (i32.const 1))))))
)"#;

/// An engine whose GC heaps hold at most `bytes`.
fn engine(bytes: usize) -> Engine {
    let mut config = Config::new();
    config.max_gc_heap_bytes(bytes);
    Engine::new(&config).unwrap()
}

fn setup(engine: &Engine) -> (Store<()>, Instance) {
    let mut store = Store::new(engine, ());
    // The host function re-enters the instance that called it: `churn` of its own.
    let reenter = Func::wrap(&mut store, |mut caller: Caller<'_, ()>, junk: i32| {
        let Some(ephem::Extern::Func(churn)) = caller.get_export("churn") else {
            panic!("churn is exported");
        };
        let mut out = [Val::I32(0)];
        churn
            .call(&mut caller, &[Val::I32(junk)], &mut out)
            .unwrap();
        assert_eq!(i32s(&out), [0], "garbage arrays start zero");
    });
    instantiate(store, reenter)
}

fn instantiate(mut store: Store<()>, reenter: Func) -> (Store<()>, Instance) {
    let module = Module::new(store.engine(), NODES).unwrap();
    let instance = Instance::new(&mut store, &module, &[reenter.into()]).unwrap();
    (store, instance)
}

fn i32s(out: &[Val]) -> Vec<i32> {
    out.iter()
        .map(|v| match v {
            Val::I32(x) => *x,
            other => panic!("not an i32: {other:?}"),
        })
        .collect()
}

#[test]
fn a_call_that_allocates_far_more_than_the_heap_holds_runs_on_collections() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    // 16 MiB of garbage through a heap of 256 KiB.
    assert_eq!(
        i32s(&call(&mut store, i, "churn", &[Val::I32(16 << 10)]).unwrap()),
        [0]
    );
    assert!(
        store.gc_collections() >= 60,
        "{} collections",
        store.gc_collections()
    );
}

#[test]
fn a_cyclic_ring_survives_collections_between_its_nodes_and_after() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    let out = call(&mut store, i, "ring_sum", &[Val::I32(500), Val::I32(2000)]).unwrap();
    assert_eq!(i32s(&out), [500 * 501 / 2]);
    assert!(
        store.gc_collections() >= 10,
        "{} collections",
        store.gc_collections()
    );
}

#[test]
fn references_in_many_frames_and_on_the_operand_stack_survive() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    let out = call(&mut store, i, "deep", &[Val::I32(200)]).unwrap();
    assert_eq!(i32s(&out), [200 * 201 / 2]);
    let before = store.gc_collections();
    let out = call(&mut store, i, "stacked", &[Val::I32(77)]).unwrap();
    assert_eq!(i32s(&out), [77]);
    assert!(store.gc_collections() > before, "the call collected");
}

#[test]
fn objects_kept_only_by_a_global_a_table_an_exception_or_an_array_survive() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    call(&mut store, i, "hold", &[Val::I32(10)]).unwrap();
    call(&mut store, i, "churn", &[Val::I32(2000)]).unwrap();
    assert!(store.gc_collections() >= 5);
    assert_eq!(
        i32s(&call(&mut store, i, "held", &[]).unwrap()),
        [10, 11, 12]
    );
    let out = call(&mut store, i, "array_of_nodes", &[Val::I32(300)]).unwrap();
    assert_eq!(i32s(&out), [300 * 299 / 2]);
}

#[test]
fn a_collection_inside_a_host_call_keeps_the_callers_frames_and_the_hosts_handles() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    // The host holds a ring by its handle across calls that collect.
    let ring = match &call(&mut store, i, "ring", &[Val::I32(100)]).unwrap()[0] {
        Val::AnyRef(Some(a)) => *a,
        other => panic!("not a ring: {other:?}"),
    };
    let before = store.gc_collections();
    let out = call(
        &mut store,
        i,
        "across_host",
        &[Val::I32(42), Val::I32(2000)],
    )
    .unwrap();
    assert_eq!(i32s(&out), [42]);
    assert!(
        store.gc_collections() > before,
        "the re-entered call collected"
    );
    let again: AnyRef = ring;
    assert_eq!(ring, again);
    let first = ring.as_struct(&store).expect("a struct");
    assert_eq!(i32s(&[first.field(&store, 0).unwrap()]), [1]);
    let out = call(&mut store, i, "sum", &[Val::AnyRef(Some(ring))]).unwrap();
    assert_eq!(i32s(&out), [100 * 101 / 2]);
}

#[test]
fn what_is_alive_past_the_bound_still_traps_and_garbage_does_not() {
    let engine = engine(1 << 20);
    let (mut store, i) = setup(&engine);
    // 400 KiB alive with as much garbage beside it: fits.
    call(&mut store, i, "keep_all", &[Val::I32(400)]).unwrap();
    // 2 MiB alive: cannot.
    let e = call(&mut store, i, "keep_all", &[Val::I32(2000)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::GcHeapExhausted);
    // The store goes on.
    assert_eq!(
        i32s(&call(&mut store, i, "churn", &[Val::I32(100)]).unwrap()),
        [0]
    );
}

#[test]
fn slots_given_back_by_collections_show_nothing_to_later_stores() {
    let engine = engine(256 << 10);
    // Every store fills its garbage with 0x5e and checks that each new array starts zero:
    // slots that collections gave back are taken by the next collections and stores.
    for _ in 0..4 {
        let (mut store, i) = setup(&engine);
        assert_eq!(
            i32s(&call(&mut store, i, "churn", &[Val::I32(3000)]).unwrap()),
            [0]
        );
        assert!(store.gc_collections() >= 10);
    }
}

#[test]
fn the_host_allocating_inside_a_host_call_collects_and_keeps_the_callers_frames() {
    let engine = engine(256 << 10);
    let mut store = Store::new(&engine, ());
    // The module's `$junk` type, made by the host: one canonical type.
    let junk = ArrayType::new(
        &engine,
        FieldType {
            storage: StorageType::I8,
            mutable: true,
        },
    );
    let reenter = Func::wrap(&mut store, move |mut caller: Caller<'_, ()>, n: i32| {
        let Some(ephem::Extern::Func(churn)) = caller.get_export("churn") else {
            panic!("churn is exported");
        };
        let pre = ArrayRefPre::new(&mut caller, junk.clone());
        // Arrays the host keeps (its handles are roots for as long as the store lives), with
        // wasm's garbage between them: the host's allocations find the heap full too.
        let mut kept = Vec::new();
        for k in 0..n {
            kept.push(ArrayRef::new(&mut caller, &pre, &Val::I32(k), 1024).unwrap());
            let mut out = [Val::I32(0)];
            churn.call(&mut caller, &[Val::I32(20)], &mut out).unwrap();
        }
        for (k, a) in kept.iter().enumerate() {
            assert_eq!(a.len(&caller), 1024);
            assert_eq!(
                i32s(&[a.get(&caller, 1023).unwrap()]),
                [k as i32 as i8 as i32 & 0xff]
            );
        }
    });
    let (mut store, i) = instantiate(store, reenter);
    let out = call(&mut store, i, "across_host", &[Val::I32(42), Val::I32(100)]).unwrap();
    assert_eq!(i32s(&out), [42]);
    assert!(
        store.gc_collections() >= 5,
        "{} collections",
        store.gc_collections()
    );
}

#[test]
fn a_collection_pays_fuel_for_what_it_copies() {
    // The same metered code, with heaps that collect (64 KiB at first) and that never do.
    let fuel_used = |first: usize| {
        let mut config = Config::new();
        config.consume_fuel(true).first_gc_heap_bytes(first);
        let engine = Engine::new(&config).unwrap();
        let (mut store, i) = setup(&engine);
        store.set_fuel(u64::MAX / 2).unwrap();
        call(&mut store, i, "keep_all", &[Val::I32(300)]).unwrap();
        (
            u64::MAX / 2 - store.get_fuel().unwrap(),
            store.gc_collections(),
        )
    };
    let (collecting, collections) = fuel_used(64 << 10);
    let (plain, none) = fuel_used(64 << 20);
    assert_eq!(none, 0);
    assert!(collections >= 3, "{collections} collections");
    // Each collection copied the arrays kept so far (1 KiB each, 128 words): at least the
    // last one's worth, a hundred arrays or more.
    assert!(
        collecting >= plain + 100 * 128,
        "{collecting} units of fuel with collections, {plain} without"
    );
}

#[test]
fn a_guest_that_allocates_without_end_is_ended_by_its_deadline() {
    let engine = engine(256 << 10);
    let (mut store, i) = setup(&engine);
    let ticker = engine.start_epoch_ticker(std::time::Duration::from_millis(5));
    store.set_epoch_deadline(4);
    let e = call(&mut store, i, "churn", &[Val::I32(i32::MAX)]).unwrap_err();
    drop(ticker);
    assert_eq!(e.trap().unwrap().kind, TrapKind::Interrupted, "{e}");
    assert!(store.gc_collections() > 0, "it collected before its end");
}
