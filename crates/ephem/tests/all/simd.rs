//! `v128` across the embedding API (the operators themselves are the spec suites' part): host
//! functions and typed functions that take and return vectors, v128 globals, and regressions
//! that differential fuzzing found.

use ephem::{Engine, Linker, Store, Val, ValType};

fn lanes32(l: [u32; 4]) -> u128 {
    l.iter()
        .rev()
        .fold(0u128, |acc, &x| (acc << 32) | u128::from(x))
}

#[test]
fn vectors_cross_between_host_and_wasm_lane_for_lane() {
    let engine = Engine::default();
    let module = ephem::Module::new(
        &engine,
        br#"(module
          (import "host" "swap" (func $swap (param v128) (result v128)))
          (global (export "g") (mut v128) (v128.const i32x4 1 2 3 4))
          (func (export "twice") (param v128 i32) (result v128 i32)
            (i32x4.add (call $swap (local.get 0)) (global.get 0))
            (i32x4.extract_lane 3 (local.get 0))))"#,
    )
    .unwrap();
    let mut linker = Linker::new(&engine);
    // Lane 0 and lane 3 swapped, in the host.
    linker
        .func_wrap("host", "swap", |v: u128| -> u128 {
            let l = |i: u32| (v >> (32 * i)) as u32;
            lanes32([l(3), l(1), l(2), l(0)])
        })
        .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let twice = instance
        .get_typed_func::<(u128, i32), (u128, i32)>(&mut store, "twice")
        .unwrap();
    let (v, last) = twice
        .call(&mut store, (lanes32([10, 20, 30, 40]), 0))
        .unwrap();
    assert_eq!(v, lanes32([41, 22, 33, 14]));
    assert_eq!(last, 40);

    let g = instance.get_global(&mut store, "g").unwrap();
    assert_eq!(g.ty(&store).ty, ValType::V128);
    g.set(&mut store, Val::V128(lanes32([0, 0, 0, 7]))).unwrap();
    let func = instance.get_func(&mut store, "twice").unwrap();
    let mut results = [Val::V128(0), Val::I32(0)];
    func.call(&mut store, &[Val::V128(1), Val::I32(0)], &mut results)
        .unwrap();
    assert!(matches!(results, [Val::V128(v), Val::I32(0)] if v == lanes32([0, 0, 0, 8])));
}

/// Found by differential fuzzing: a null reference returned beside `v128` arguments came back
/// non-null, because results share the arguments' 16-byte slots and a reference fills only
/// the low 8 bytes of its slot.
#[test]
fn a_null_reference_result_in_a_slot_that_held_a_vector_is_null() {
    let engine = Engine::default();
    let module = ephem::Module::new(
        &engine,
        br#"(module
          (func (export "f") (param v128 f64) (result externref funcref)
            ref.null extern
            ref.null func))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let f = instance.get_func(&mut store, "f").unwrap();
    let mut results = [Val::I32(0), Val::I32(0)];
    f.call(
        &mut store,
        &[Val::V128(u128::MAX), Val::F64(u64::MAX)],
        &mut results,
    )
    .unwrap();
    assert!(
        matches!(results, [Val::ExternRef(None), Val::FuncRef(None)]),
        "{results:?}"
    );
    let typed = instance
        .get_typed_func::<(u128, f64), (Option<ephem::ExternRef>, Option<ephem::Func>)>(
            &mut store, "f",
        )
        .unwrap();
    let (r, f) = typed.call(&mut store, (u128::MAX, f64::NAN)).unwrap();
    assert!(r.is_none() && f.is_none());
}
