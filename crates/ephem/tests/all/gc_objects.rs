//! GC objects: structs, arrays and `i31`s made by wasm, by constant expressions and by the
//! host (of types it makes, which are the modules' types of the same fields), read by the host
//! through `AnyRef`; the store's GC heap, bounded by the engine and the limiter (an allocation
//! past the bound, or of an object past 1 GiB, traps with `GcHeapExhausted`), and never showing
//! one store's objects to the next store that takes its slot; casts across modules by declared
//! subtyping. Collections are `gc_collection.rs`'s.

use ephem::{
    AnyRef, Config, Engine, ExternRef, I31, Instance, Linker, Module, Store, StoreLimitsBuilder,
    TrapKind, Val,
};

const OBJECTS: &str = r#"(module
  (type $point (struct (field $x (mut i32)) (field $y i8) (field $v v128) (field $next (mut (ref null $point)))))
  (type $bytes (array (mut i8)))
  (type $longs (array (mut i64)))
  (global $origin (export "origin") (ref $point)
    (struct.new $point (i32.const -5) (i32.const 200) (v128.const i64x2 1 2) (ref.null $point)))
  (global (export "small") i31ref (ref.i31 (i32.const -1)))
  (table $t (export "t") 4 anyref)
  (data $d "\01\02\03\04")
  (func (export "chain") (param $n i32) (result (ref null $point))
    (local $p (ref null $point))
    (loop $more
      (local.set $p (struct.new $point (local.get $n) (local.get $n) (v128.const i64x2 0 0) (local.get $p)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $more (local.get $n)))
    (local.get $p))
  ;; Sum of x over a chain, and of the packed y read signed.
  (func (export "sum") (param $p (ref null $point)) (result i32 i32)
    (local $x i32) (local $y i32)
    (block $end
      (loop $more
        (br_if $end (ref.is_null (local.get $p)))
        (local.set $x (i32.add (local.get $x) (struct.get $point $x (local.get $p))))
        (local.set $y (i32.add (local.get $y) (struct.get_s $point $y (local.get $p))))
        (local.set $p (struct.get $point $next (local.get $p)))
        (br $more)))
    (local.get $x) (local.get $y))
  (func (export "origin_y") (result i32 i32 i64)
    (struct.get_s $point $y (global.get $origin))
    (struct.get_u $point $y (global.get $origin))
    (i64x2.extract_lane 1 (struct.get $point $v (global.get $origin))))
  (func (export "bytes") (param $len i32) (result (ref $bytes))
    (array.new $bytes (i32.const 0xAB) (local.get $len)))
  (func (export "data") (result i32)
    (local $a (ref $bytes))
    (local.set $a (array.new_data $bytes $d (i32.const 1) (i32.const 3)))
    (array.copy $bytes $bytes (local.get $a) (i32.const 0) (local.get $a) (i32.const 1) (i32.const 2))
    (i32.add (i32.mul (array.get_u $bytes (local.get $a) (i32.const 0)) (i32.const 100))
      (i32.add (i32.mul (array.get_u $bytes (local.get $a) (i32.const 1)) (i32.const 10))
        (array.len (local.get $a)))))
  (func (export "zeros") (param $len i32) (result i64)
    (local $a (ref $longs)) (local $i i32) (local $or i64)
    (local.set $a (array.new_default $longs (local.get $len)))
    (block $end
      (loop $more
        (br_if $end (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $or (i64.or (local.get $or) (array.get $longs (local.get $a) (local.get $i))))
        (array.set $longs (local.get $a) (local.get $i) (i64.const -1))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $more)))
    (local.get $or))
  (func (export "get") (param $a (ref null $bytes)) (param $i i32) (result i32)
    (array.get_s $bytes (local.get $a) (local.get $i)))
  (func (export "keep") (param anyref) (table.set $t (i32.const 0) (local.get 0)))
  (func (export "is_point") (param anyref) (result i32) (ref.test (ref $point) (local.get 0)))
  (func (export "eq") (param eqref eqref) (result i32) (ref.eq (local.get 0) (local.get 1)))
  (func (export "internalize") (param externref) (result anyref) (any.convert_extern (local.get 0)))
  (func (export "externalize") (param anyref) (result externref) (extern.convert_any (local.get 0)))
)"#;

fn setup(engine: &Engine) -> (Store<()>, Instance) {
    let module = Module::new(engine, OBJECTS).unwrap();
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    (store, instance)
}

/// Calls export `name` of `i` with `args`: its results, or how it failed.
pub(super) fn call(
    store: &mut Store<()>,
    i: Instance,
    name: &str,
    args: &[Val],
) -> Result<Vec<Val>, ephem::Error> {
    let f = i.get_func(&mut *store, name).unwrap();
    let ty = f.ty(&*store);
    let mut out: Vec<Val> = ty.results.iter().map(|&t| Val::default_for(t)).collect();
    f.call(&mut *store, args, &mut out).map(|()| out)
}

fn any(v: &Val) -> AnyRef {
    match v {
        Val::AnyRef(Some(a)) => *a,
        other => panic!("not a GC value: {other:?}"),
    }
}

#[test]
fn structs_arrays_and_i31s_are_made_read_and_written_by_wasm_and_seen_by_the_host() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    // A chain of 100 structs, summed back: x = 1..=100, y the same as i8 (wrapping past 127).
    let chain = call(&mut store, i, "chain", &[Val::I32(100)]).unwrap();
    assert!(any(&chain[0]).is_struct(&store) && !any(&chain[0]).is_array(&store));
    let sums = call(&mut store, i, "sum", &chain).unwrap();
    let y: i32 = (1..=100).map(|n| n as i8 as i32).sum();
    assert_eq!((sums[0].i32(), sums[1].i32()), (Some(5050), Some(y)));
    // A constant expression's struct: packed 200 reads -56 signed, 200 unsigned; its v128.
    let o = call(&mut store, i, "origin_y", &[]).unwrap();
    assert_eq!(
        (o[0].i32(), o[1].i32(), o[2].i64()),
        (Some(-56), Some(200), Some(2))
    );
    let small = i.get_global(&mut store, "small").unwrap().get(&store);
    let small = any(&small).as_i31().unwrap();
    assert_eq!((small.get_i32(), small.get_u32()), (-1, 0x7fff_ffff));
    // Arrays: filled, from a data segment and copied within itself, zeroed by default.
    let bytes = call(&mut store, i, "bytes", &[Val::I32(10)]).unwrap();
    assert_eq!(
        any(&bytes[0]).as_array(&store).map(|a| a.len(&store)),
        Some(10)
    );
    let got = call(&mut store, i, "get", &[bytes[0], Val::I32(9)]).unwrap();
    assert_eq!(got[0].i32(), Some(0xAB_u8 as i8 as i32));
    assert_eq!(
        call(&mut store, i, "data", &[]).unwrap()[0].i32(),
        Some(343)
    );
    assert_eq!(
        call(&mut store, i, "zeros", &[Val::I32(5000)]).unwrap()[0].i64(),
        Some(0)
    );
    // An index one past the end traps; so does null.
    let e = call(&mut store, i, "get", &[bytes[0], Val::I32(10)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::ArrayOutOfBounds);
    let e = call(&mut store, i, "get", &[Val::AnyRef(None), Val::I32(0)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::NullReference);
}

#[test]
fn the_host_passes_gc_values_back_and_they_keep_their_identity_and_type() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let chain = call(&mut store, i, "chain", &[Val::I32(2)]).unwrap();
    let bytes = call(&mut store, i, "bytes", &[Val::I32(1)]).unwrap();
    let is_point =
        |store: &mut Store<()>, v: Val| call(store, i, "is_point", &[v]).unwrap()[0].i32();
    assert_eq!(is_point(&mut store, chain[0]), Some(1));
    assert_eq!(is_point(&mut store, bytes[0]), Some(0));
    let seven = AnyRef::from_i31(&store, I31::new_i32(7).unwrap());
    assert_eq!(is_point(&mut store, Val::AnyRef(Some(seven))), Some(0));
    let eq = call(&mut store, i, "eq", &[chain[0], chain[0]]).unwrap();
    assert_eq!(eq[0].i32(), Some(1));
    let other = AnyRef::from_i31(&store, I31::new_i32(7).unwrap());
    let eq = call(
        &mut store,
        i,
        "eq",
        &[Val::AnyRef(Some(seven)), Val::AnyRef(Some(other))],
    );
    assert_eq!(eq.unwrap()[0].i32(), Some(1), "equal i31s are one value");
    // Kept in a table, read back by the host.
    call(&mut store, i, "keep", &[bytes[0]]).unwrap();
    let t = i.get_table(&mut store, "t").unwrap();
    assert_eq!(
        any(&t.get(&store, 0).unwrap())
            .as_array(&store)
            .map(|a| a.len(&store)),
        Some(1)
    );
    // A struct where the function wants its own struct type only: refused.
    let sum = i.get_func(&mut store, "sum").unwrap();
    let mut out = [Val::I32(0), Val::I32(0)];
    assert!(sum.call(&mut store, &bytes, &mut out).is_err());
    // externref <-> anyref, both ways, as the specification's round trips.
    let host = call(
        &mut store,
        i,
        "internalize",
        &[Val::ExternRef(Some(ExternRef::new(9)))],
    );
    let host = any(&host.unwrap()[0]);
    assert_eq!(ExternRef::convert_any(host).data(), Some(9));
    let out = call(&mut store, i, "externalize", &[chain[0]]).unwrap();
    let Val::ExternRef(Some(e)) = out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(e.data(), None);
    assert_eq!(AnyRef::convert_extern(&store, e), any(&chain[0]));
    // A GC value of another store is refused, not read in this one's heap.
    let (mut other_store, j) = setup(&engine);
    let e = call(&mut other_store, j, "is_point", &[chain[0]]).unwrap_err();
    assert!(e.to_string().contains("do not match"), "{e}");
}

#[test]
fn the_heap_is_bounded_and_a_full_heap_traps_without_harming_the_store() {
    let mut config = Config::new();
    config.max_gc_heap_bytes(1 << 20);
    let engine = Engine::new(&config).unwrap();
    let (mut store, i) = setup(&engine);
    // 100 KiB at a time: the tenth or so does not fit 1 MiB.
    let mut made = 0;
    let e = loop {
        match call(&mut store, i, "bytes", &[Val::I32(100 << 10)]) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(e.trap().unwrap().kind, TrapKind::GcHeapExhausted);
    assert!(
        (8..=10).contains(&made),
        "{made} arrays of 100 KiB in 1 MiB"
    );
    // An array larger than any heap, and a negative length, trap the same way.
    let e = call(&mut store, i, "bytes", &[Val::I32(-1)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::GcHeapExhausted);
    // Small objects still fit what is left; the next store starts empty.
    call(&mut store, i, "chain", &[Val::I32(10)]).unwrap();
    drop(store);
    let (mut store, i) = setup(&engine);
    for _ in 0..made {
        call(&mut store, i, "bytes", &[Val::I32(100 << 10)]).unwrap();
    }
}

#[test]
fn the_store_limiter_bounds_the_heap_as_a_memory() {
    let engine = Engine::default();
    let module = Module::new(&engine, OBJECTS).unwrap();
    let limits = StoreLimitsBuilder::new().memory_size(256 << 10).build();
    let mut store = Store::new(&engine, limits);
    store.limiter(|l| l);
    let i = Instance::new(&mut store, &module, &[]).unwrap();
    let bytes = i.get_func(&mut store, "bytes").unwrap();
    let mut out = [Val::I32(0)];
    bytes
        .call(&mut store, &[Val::I32(100 << 10)], &mut out)
        .unwrap();
    let e = bytes
        .call(&mut store, &[Val::I32(300 << 10)], &mut out)
        .unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::GcHeapExhausted);
}

#[test]
fn nothing_of_one_stores_objects_is_visible_to_the_next_store_that_takes_its_slot() {
    let engine = Engine::default();
    for round in 0..20 {
        let (mut store, i) = setup(&engine);
        // Every element of a new default array is zero, though the last store's heap (the
        // same slot, from the pool) held arrays of -1 where this one's are.
        let or = call(&mut store, i, "zeros", &[Val::I32(20_000)]).unwrap();
        assert_eq!(or[0].i64(), Some(0), "round {round}");
        let bytes = call(&mut store, i, "bytes", &[Val::I32(4096)]).unwrap();
        assert_eq!(
            any(&bytes[0]).as_array(&store).map(|a| a.len(&store)),
            Some(4096)
        );
    }
    // A linear memory that takes a slot a heap gave back is all zeros too.
    for _ in 0..4 {
        let (mut store, i) = setup(&engine);
        call(&mut store, i, "zeros", &[Val::I32(100_000)]).unwrap();
        drop(store);
        let mut store = Store::new(&engine, ());
        let memory = ephem::Memory::new(&mut store, ephem::MemoryType::new(16, None)).unwrap();
        let data = memory.data(&store);
        assert!(data.iter().all(|&b| b == 0));
    }
}

#[test]
fn metered_array_operations_pay_per_element() {
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config).unwrap();
    let (mut store, i) = setup(&engine);
    store.set_fuel(1_000).unwrap();
    let e = call(&mut store, i, "bytes", &[Val::I32(5_000)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::OutOfFuel);
    store.set_fuel(10_000).unwrap();
    call(&mut store, i, "bytes", &[Val::I32(5_000)]).unwrap();
}

#[test]
fn casts_and_indirect_calls_follow_subtyping_declared_in_another_module() {
    let engine = Engine::default();
    let exporter = Module::new(
        &engine,
        r#"(module
          (type $shape (sub (struct (field i32))))
          (type $circle (sub $shape (struct (field i32) (field f64))))
          (type $f (sub (func (result i32))))
          (type $g (sub $f (func (result i32))))
          (func $three (export "three") (type $g) (i32.const 3))
          (table (export "t") funcref (elem $three))
          (func (export "circle") (result anyref)
            (struct.new $circle (i32.const 7) (f64.const 1.5))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let e = Instance::new(&mut store, &exporter, &[]).unwrap();
    let mut linker = Linker::new(&engine);
    linker.instance(&mut store, "m", e).unwrap();
    let importer = Module::new(
        &engine,
        r#"(module
          (type $shape (sub (struct (field i32))))
          (type $circle (sub $shape (struct (field i32) (field f64))))
          (type $square (sub $shape (struct (field i32) (field i64))))
          (type $f (sub (func (result i32))))
          (import "m" "three" (func $three (type $f)))
          (import "m" "t" (table 1 funcref))
          (import "m" "circle" (func $circle (result anyref)))
          (func (export "shape") (result i32)
            (struct.get $shape 0 (ref.cast (ref $shape) (call $circle))))
          (func (export "square") (result i32)
            (ref.test (ref $square) (call $circle)))
          (func (export "indirect") (result i32)
            (call_indirect (type $f) (i32.const 0))))"#,
    )
    .unwrap();
    let i = linker.instantiate(&mut store, &importer).unwrap();
    assert_eq!(call(&mut store, i, "shape", &[]).unwrap()[0].i32(), Some(7));
    assert_eq!(
        call(&mut store, i, "square", &[]).unwrap()[0].i32(),
        Some(0)
    );
    assert_eq!(
        call(&mut store, i, "indirect", &[]).unwrap()[0].i32(),
        Some(3)
    );
    // The same structure declared final is another type: the import does not link.
    let final_f = Module::new(
        &engine,
        r#"(module (type $f (func (result i32))) (import "m" "three" (func (type $f))))"#,
    )
    .unwrap();
    assert!(linker.instantiate(&mut store, &final_f).is_err());
}

/// `array.copy` within one array, both ways round, of few elements (copied inline) and of
/// many (by the runtime), agrees with `copy_within`; a range one element past either end traps.
#[test]
fn array_copy_within_one_array_moves_what_memmove_would_and_checks_both_ranges() {
    let engine = Engine::default();
    for (elem, size) in [("i8", 1), ("i16", 2), ("i32", 4), ("i64", 8), ("f64", 8)] {
        let (set, get) = match elem {
            "f64" => (
                "(f64.convert_i32_u (local.get $i))",
                "(i64.trunc_f64_u (array.get $a (local.get $arr) (local.get $i)))",
            ),
            "i64" => (
                "(i64.extend_i32_u (local.get $i))",
                "(array.get $a (local.get $arr) (local.get $i))",
            ),
            "i32" => (
                "(local.get $i)",
                "(i64.extend_i32_u (array.get $a (local.get $arr) (local.get $i)))",
            ),
            _ => (
                "(local.get $i)",
                "(i64.extend_i32_u (array.get_u $a (local.get $arr) (local.get $i)))",
            ),
        };
        let wat = format!(
            r#"(module
              (type $a (array (mut {elem})))
              ;; An array of 40 elements 0..40, copied within, then every element times its
              ;; place plus one, summed.
              (func (export "copy") (param $len i32) (param $di i32) (param $si i32) (result i64)
                (local $arr (ref $a)) (local $i i32) (local $sum i64)
                (local.set $arr (array.new_default $a (i32.const 40)))
                (block $made (loop $make
                  (br_if $made (i32.ge_u (local.get $i) (i32.const 40)))
                  (array.set $a (local.get $arr) (local.get $i) {set})
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br $make)))
                (array.copy $a $a (local.get $arr) (local.get $di) (local.get $arr) (local.get $si) (local.get $len))
                (local.set $i (i32.const 0))
                (block $summed (loop $sum
                  (br_if $summed (i32.ge_u (local.get $i) (i32.const 40)))
                  (local.set $sum (i64.add (local.get $sum)
                    (i64.mul {get} (i64.extend_i32_u (i32.add (local.get $i) (i32.const 1))))))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br $sum)))
                (local.get $sum)))"#
        );
        let module = Module::new(&engine, &wat).unwrap();
        let mut store = Store::new(&engine, ());
        let i = Instance::new(&mut store, &module, &[]).unwrap();
        let copy = i
            .get_typed_func::<(i32, i32, i32), i64>(&mut store, "copy")
            .unwrap();
        let wrap = |v: u64| match size {
            1 => v as u8 as u64,
            2 => v as u16 as u64,
            _ => v,
        };
        for len in [0, 1, 3, 15, 16, 17, 20] {
            for (di, si) in [
                (0, 0),
                (0, 5),
                (5, 0),
                (2, 3),
                (3, 2),
                (40 - len, 0),
                (0, 40 - len),
            ] {
                let mut want: Vec<u64> = (0..40).collect();
                want.copy_within(si as usize..(si + len) as usize, di as usize);
                let want: u64 = (want.iter().enumerate())
                    .map(|(k, &v)| wrap(v) * (k as u64 + 1))
                    .sum();
                let got = copy.call(&mut store, (len, di, si)).unwrap();
                assert_eq!(got as u64, want, "{elem}: copy {len} from {si} to {di}");
            }
            // One past the end of either range.
            for (di, si) in [(41 - len, 0), (0, 41 - len)] {
                let e = copy
                    .call(&mut store, (len.max(1), di.min(40), si.min(40)))
                    .unwrap_err();
                assert_eq!(
                    e.trap().unwrap().kind,
                    TrapKind::ArrayOutOfBounds,
                    "{elem}: {len} {di} {si}"
                );
            }
        }
    }
}

/// The host reads and writes fields and elements, as their types allow.
#[test]
fn the_host_reads_and_writes_fields_and_elements_as_their_types_allow() {
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let origin = any(&i.get_global(&mut store, "origin").unwrap().get(&store));
    assert!(origin.as_array(&store).is_none());
    let point = origin.as_struct(&store).unwrap();
    let field = |store: &Store<()>, k| point.field(store, k).ok();
    assert_eq!(field(&store, 0).and_then(|v| v.i32()), Some(-5));
    // A packed i8 field reads zero-extended.
    assert_eq!(field(&store, 1).and_then(|v| v.i32()), Some(200));
    assert!(matches!(field(&store, 2), Some(Val::V128(v)) if v == 1 | 2 << 64));
    assert!(matches!(field(&store, 3), Some(Val::AnyRef(None))));
    assert!(field(&store, 4).is_none());
    point.set_field(&mut store, 0, Val::I32(11)).unwrap();
    let o = call(&mut store, i, "sum", &[Val::AnyRef(Some(origin))]).unwrap();
    assert_eq!(o[0].i32(), Some(11), "wasm sees the host's write");
    assert!(
        point.set_field(&mut store, 1, Val::I32(1)).is_err(),
        "immutable"
    );
    assert!(
        point.set_field(&mut store, 0, Val::I64(1)).is_err(),
        "wrong type"
    );
    let chain = call(&mut store, i, "chain", &[Val::I32(1)]).unwrap();
    point.set_field(&mut store, 3, chain[0]).unwrap();
    let bytes = call(&mut store, i, "bytes", &[Val::I32(10)]).unwrap();
    assert!(
        point.set_field(&mut store, 3, bytes[0]).is_err(),
        "an array is no point"
    );
    let o = call(&mut store, i, "sum", &[Val::AnyRef(Some(origin))]).unwrap();
    assert_eq!(
        o[0].i32(),
        Some(12),
        "the chain goes on through the host's link"
    );
    // Arrays: an i8 element reads zero-extended and takes an i32's low bits.
    let a = any(&bytes[0]).as_array(&store).unwrap();
    assert_eq!(a.get(&store, 3).unwrap().i32(), Some(0xAB));
    a.set(&mut store, 3, Val::I32(0x1FF)).unwrap();
    let got = call(&mut store, i, "get", &[bytes[0], Val::I32(3)]).unwrap();
    assert_eq!(got[0].i32(), Some(-1));
    assert!(a.get(&store, 10).is_err() && a.set(&mut store, 10, Val::I32(0)).is_err());
    assert!(any(&bytes[0]).as_struct(&store).is_none());
    // An i31 is neither.
    let small = AnyRef::from_i31(&store, I31::wrapping_u32(3));
    assert!(small.as_struct(&store).is_none() && small.as_array(&store).is_none());
}

/// A constant expression that makes a large array costs the host what the array takes in the
/// heap, nothing per element beside it: host memory per element would be gigabytes for an
/// `array.new_default` of 500 million (FUZZING.md tells how this was found).
#[test]
fn a_large_array_made_by_a_constant_expression_costs_the_host_nothing_per_element() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        r#"(module
          (type $a (array (mut i8)))
          (global $big (ref $a) (array.new_default $a (i32.const 500000000)))
          (global $few (ref $a) (array.new_fixed $a 3 (i32.const 1) (i32.const 2) (i32.const 3)))
          (func (export "len") (result i32) (array.len (global.get $big)))
          (func (export "third") (result i32) (array.get_u $a (global.get $few) (i32.const 2))))"#,
    )
    .unwrap();
    for _ in 0..3 {
        let mut store = Store::new(&engine, ());
        let i = Instance::new(&mut store, &module, &[]).unwrap();
        assert_eq!(
            call(&mut store, i, "len", &[]).unwrap()[0].i32(),
            Some(500_000_000)
        );
        assert_eq!(call(&mut store, i, "third", &[]).unwrap()[0].i32(), Some(3));
    }
}

/// An object thrown in an exception's payload is the same object where it is caught, in wasm
/// and, uncaught, in the host.
#[test]
fn objects_travel_in_exception_payloads() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        r#"(module
          (type $box (struct (field (mut i32))))
          (tag $t (param (ref $box)))
          (func $thrower (param i32) (throw $t (struct.new $box (local.get 0))))
          (func (export "caught") (param i32) (result i32)
            (local $b (ref $box))
            (local.set $b
              (block $h (result (ref $box))
                (try_table (catch $t $h) (call $thrower (local.get 0)))
                (unreachable)))
            (struct.set $box 0 (local.get $b) (i32.add (struct.get $box 0 (local.get $b)) (i32.const 1)))
            (struct.get $box 0 (local.get $b)))
          (func (export "uncaught") (param i32) (call $thrower (local.get 0))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let i = Instance::new(&mut store, &module, &[]).unwrap();
    assert_eq!(
        call(&mut store, i, "caught", &[Val::I32(41)]).unwrap()[0].i32(),
        Some(42)
    );
    let e = call(&mut store, i, "uncaught", &[Val::I32(7)]).unwrap_err();
    assert!(matches!(e, ephem::Error::Exception(_)), "{e}");
    let exn = store.take_pending_exception().unwrap();
    let payload = exn.fields(&store);
    let b = any(&payload[0]).as_struct(&store).unwrap();
    assert_eq!(b.field(&store, 0).unwrap().i32(), Some(7));
}

/// Casts down a three-level hierarchy (and beside it) answer as subtyping says, whether the
/// answer comes inline (the type itself, the module's own subtypes, a struct not deeper than
/// the type) or from the runtime (a deeper struct from another module).
#[test]
fn casts_down_a_hierarchy_answer_as_subtyping_says_however_they_are_decided() {
    let engine = Engine::default();
    let types = r#"
      (type $a (sub (struct (field i32))))
      (type $b (sub $a (struct (field i32) (field i64))))
      (type $c (sub $b (struct (field i32) (field i64) (field f32))))
      (type $side (sub $a (struct (field i32) (field f64))))"#;
    // Another module's types: the same four, and one deeper than any of them.
    let other = Module::new(
        &engine,
        format!(
            r#"(module {types}
              (type $d (sub $c (struct (field i32) (field i64) (field f32) (field i8))))
              (func (export "deep") (result anyref)
                (struct.new $d (i32.const 0) (i64.const 0) (f32.const 0) (i32.const 0))))"#
        ),
    )
    .unwrap();
    let module = Module::new(
        &engine,
        format!(
            r#"(module {types}
              (func (export "make") (param i32) (result anyref)
                (block $c (block $b (block $s (br_table $s $b $c (local.get 0)))
                  (return (struct.new $side (i32.const 0) (f64.const 0))))
                  (return (struct.new $b (i32.const 0) (i64.const 0))))
                (struct.new $c (i32.const 0) (i64.const 0) (f32.const 0)))
              (func (export "is") (param anyref) (result i32)
                (i32.or (i32.or
                  (ref.test (ref $a) (local.get 0))
                  (i32.shl (ref.test (ref $b) (local.get 0)) (i32.const 1)))
                  (i32.or
                    (i32.shl (ref.test (ref $c) (local.get 0)) (i32.const 2))
                    (i32.shl (ref.test (ref $side) (local.get 0)) (i32.const 3))))))"#
        ),
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let o = Instance::new(&mut store, &other, &[]).unwrap();
    let i = Instance::new(&mut store, &module, &[]).unwrap();
    // Bits: a, b, c, side.
    for (k, want) in [(0, 0b1001), (1, 0b0011), (2, 0b0111)] {
        let made = call(&mut store, i, "make", &[Val::I32(k)]).unwrap();
        let is = call(&mut store, i, "is", &made).unwrap();
        assert_eq!(is[0].i32(), Some(want), "object {k}");
    }
    let deep = call(&mut store, o, "deep", &[]).unwrap();
    let is = call(&mut store, i, "is", &deep).unwrap();
    assert_eq!(
        is[0].i32(),
        Some(0b0111),
        "a struct two levels below $b, from elsewhere"
    );
    let seven = Val::AnyRef(Some(AnyRef::from_i31(&store, I31::wrapping_u32(7))));
    assert_eq!(
        call(&mut store, i, "is", &[seven]).unwrap()[0].i32(),
        Some(0)
    );
}

#[test]
fn the_host_makes_structs_and_arrays_of_types_it_makes_which_are_the_modules_types() {
    use ephem::{
        ArrayRef, ArrayRefPre, ArrayType, EqRef, FieldType, StorageType, StructRef, StructRefPre,
        StructType, ValType,
    };
    let engine = Engine::default();
    let (mut store, i) = setup(&engine);
    let field = |storage, mutable| FieldType { storage, mutable };
    // `(array (mut i8))` is the module's `$bytes`: wasm reads what the host made.
    let bytes = ArrayType::new(&engine, field(StorageType::I8, true));
    let pre = ArrayRefPre::new(&mut store, bytes.clone());
    let a = ArrayRef::new(&mut store, &pre, &Val::I32(-3), 5).unwrap();
    let out = call(
        &mut store,
        i,
        "get",
        &[Val::AnyRef(Some(a.to_anyref())), Val::I32(4)],
    )
    .unwrap();
    assert!(matches!(out[0], Val::I32(-3)), "{out:?}");
    let fixed = ArrayRef::new_fixed(&mut store, &pre, &[Val::I32(1), Val::I32(2)]).unwrap();
    assert_eq!(fixed.len(&store), 2);
    assert!(fixed.ty(&store).unwrap().matches(&bytes));
    assert!(
        ArrayRef::new(&mut store, &pre, &Val::I64(1), 1).is_err(),
        "an i64 in an i8"
    );
    // A struct of an i32 and an immutable reference to an array of bytes.
    let holder = StructType::new(
        &engine,
        [
            field(StorageType::Val(ValType::I32), true),
            field(
                StorageType::Val(ValType::Ref(ephem::RefType {
                    nullable: true,
                    heap: bytes.heap_type(),
                })),
                false,
            ),
        ],
    )
    .unwrap();
    let pre = StructRefPre::new(&mut store, holder.clone());
    let s = StructRef::new(
        &mut store,
        &pre,
        &[Val::I32(9), Val::AnyRef(Some(a.to_anyref()))],
    )
    .unwrap();
    assert!(matches!(s.field(&store, 0).unwrap(), Val::I32(9)));
    let Val::AnyRef(Some(inner)) = s.field(&store, 1).unwrap() else {
        panic!("a reference");
    };
    assert_eq!(inner, a.to_anyref(), "the same array, by identity");
    assert!(
        s.set_field(&mut store, 1, Val::AnyRef(None)).is_err(),
        "immutable"
    );
    assert_eq!(s.ty(&store).unwrap().fields().len(), 2);
    assert!(
        StructRef::new(&mut store, &pre, &[Val::I32(1)]).is_err(),
        "one field of two"
    );
    // `eqref`s: structs, arrays and `i31`s, not host references.
    let eq: EqRef = s.to_eqref();
    assert!(eq.as_struct(&store).is_some() && eq.as_array(&store).is_none());
    let small = EqRef::from_i31(&store, I31::wrapping_u32(5));
    assert_eq!(small.as_i31().map(I31::get_u32), Some(5));
    let host = AnyRef::convert_extern(&store, ExternRef::new(3));
    assert!(host.as_eqref(&store).is_none() && a.to_anyref().as_eqref(&store).is_some());
}

#[test]
fn no_object_larger_than_the_largest_is_made_even_in_a_heap_that_could_hold_it() {
    // A heap whose first size holds an array of 1.25 GiB: generated code must not bump it in
    // (a collection could not copy it), and the runtime refuses it.
    let mut config = Config::new();
    config
        .max_gc_heap_bytes(3 << 30)
        .first_gc_heap_bytes(3 << 29);
    let engine = Engine::new(&config).unwrap();
    let (mut store, i) = setup(&engine);
    let longs = i32::try_from((5u64 << 30) / 4 / 8).unwrap();
    let e = call(&mut store, i, "zeros", &[Val::I32(longs)]).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::GcHeapExhausted);
    assert!(matches!(
        call(&mut store, i, "zeros", &[Val::I32(8)]).unwrap()[0],
        Val::I64(0)
    ));
}

#[test]
fn the_host_cannot_make_objects_of_another_engines_types() {
    use ephem::{ArrayRef, ArrayRefPre, ArrayType, FieldType, StorageType, StructRef};
    use ephem::{StructRefPre, StructType, ValType};
    let (one, two) = (Engine::default(), Engine::default());
    let mut first = Store::new(&one, ());
    let mut second = Store::new(&two, ());
    let i32s = FieldType {
        storage: StorageType::Val(ValType::I32),
        mutable: true,
    };
    let structs = StructRefPre::new(&mut first, StructType::new(&one, [i32s]).unwrap());
    assert!(StructRef::new(&mut second, &structs, &[Val::I32(1)]).is_err());
    let arrays = ArrayRefPre::new(&mut first, ArrayType::new(&one, i32s));
    assert!(ArrayRef::new(&mut second, &arrays, &Val::I32(1), 4).is_err());
    assert!(StructRef::new(&mut first, &structs, &[Val::I32(1)]).is_ok());
}
