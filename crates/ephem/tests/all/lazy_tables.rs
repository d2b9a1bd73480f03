//! Lazily filled funcref tables (`ephem_module::FuncrefLayout`): an element a constant active
//! segment put there is made on first use, and must be the same function, of the same
//! instance, whichever way it is reached: `call_indirect`, `table.get`, `table.copy` (within a
//! table and into another), `table.init` over it, the host through an exported table, another
//! module that imports the table, and `ref.func` of a function only such a segment names.
//! Every check runs twice: on the lazy table, and on the same module with the segment's offset
//! read from a global, which keeps the table eager; both must agree with the expected values.

use ephem::{Engine, Func, Instance, Linker, Module, Store, Table, Val};

/// `$t` (exported) gets functions returning 10, 11 and 12 at 1..4 from one segment, then 13
/// over element 3 from a second. Each function also adds the instance's `$base`, set by
/// `set_base`, so that a funcref made for the wrong instance shows.
fn module(offset: &str) -> String {
    format!(
        r#"(module
  (import "env" "g1" (global $g1 i32))
  (import "env" "g3" (global $g3 i32))
  (global $base (mut i32) (i32.const 0))
  (table $t (export "t") 8 funcref)
  (table $u 8 funcref)
  (type $r (func (result i32)))
  (elem (table $t) ({offset1}) func $f10 $f11 $f12)
  (elem (table $t) ({offset3}) func $f13)
  (elem $p func $f12 $f10)
  (func $f10 (result i32) (i32.add (global.get $base) (i32.const 10)))
  (func $f11 (result i32) (i32.add (global.get $base) (i32.const 11)))
  (func $f12 (result i32) (i32.add (global.get $base) (i32.const 12)))
  (func $f13 (result i32) (i32.add (global.get $base) (i32.const 13)))
  (func (export "set_base") (param i32) (global.set $base (local.get 0)))
  (func (export "call") (param i32) (result i32)
    (call_indirect $t (type $r) (local.get 0)))
  (func (export "is_null") (param i32) (result i32)
    (ref.is_null (table.get $t (local.get 0))))
  ;; table.get, then table.set into $u, then call through $u.
  (func (export "get_set_call") (param i32) (result i32)
    (table.set $u (i32.const 5) (table.get $t (local.get 0)))
    (call_indirect $u (type $r) (i32.const 5)))
  ;; Copy $t[1..4] to $t[4..7] (never read before), then call $t[4 + i].
  (func (export "copy_within") (param i32) (result i32)
    (table.copy $t $t (i32.const 4) (i32.const 1) (i32.const 3))
    (call_indirect $t (type $r) (i32.add (i32.const 4) (local.get 0))))
  ;; Copy $t[1..4] to $u[0..3], then call $u[i].
  (func (export "copy_across") (param i32) (result i32)
    (table.copy $u $t (i32.const 0) (i32.const 1) (i32.const 3))
    (call_indirect $u (type $r) (local.get 0)))
  ;; The passive segment over $t[1..3], then call $t[i].
  (func (export "init_over") (param i32) (result i32)
    (table.init $t $p (i32.const 1) (i32.const 0) (i32.const 2))
    (call_indirect $t (type $r) (local.get 0)))
  ;; The first active segment was dropped at instantiation: initialising from it traps
  ;; unless empty.
  (func (export "init_dropped") (param i32)
    (table.init $t 0 (i32.const 0) (i32.const 0) (local.get 0)))
  ;; ref.func of a function only the table's segments name.
  (func (export "ref_call") (result i32)
    (table.set $u (i32.const 7) (ref.func $f11))
    (call_indirect $u (type $r) (i32.const 7))))"#,
        offset1 = offset.replace('N', "1"),
        offset3 = offset.replace('N', "3"),
    )
}

const LAZY: &str = "i32.const N";
/// Offsets from (imported) globals: the table cannot be lazy (the layout test below checks
/// that).
const EAGER: &str = "global.get $gN";

fn both() -> Vec<(&'static str, Module, Engine)> {
    [("lazy", LAZY), ("eager", EAGER)]
        .into_iter()
        .map(|(name, offset)| {
            let engine = Engine::default();
            let module = Module::new(&engine, module(offset).as_bytes()).unwrap();
            (name, module, engine)
        })
        .collect()
}

/// A linker with the globals the modules import (1 and 3).
fn linker(engine: &Engine, store: &mut Store<()>) -> Linker<()> {
    let mut linker = Linker::new(engine);
    for (name, v) in [("g1", 1), ("g3", 3)] {
        let ty = ephem::GlobalType {
            ty: ephem::ValType::I32,
            mutable: false,
        };
        let g = ephem::Global::new(&mut *store, ty, Val::I32(v)).unwrap();
        linker.define(&*store, "env", name, g).unwrap();
    }
    linker
}

fn instance(engine: &Engine, module: &Module, base: i32) -> (Store<()>, Instance) {
    let mut store = Store::new(engine, ());
    let instance = linker(engine, &mut store)
        .instantiate(&mut store, module)
        .unwrap();
    let set = instance
        .get_typed_func::<i32, ()>(&mut store, "set_base")
        .unwrap();
    set.call(&mut store, base).unwrap();
    (store, instance)
}

fn call(store: &mut Store<()>, instance: Instance, export: &str, arg: i32) -> Result<i32, String> {
    let f = instance
        .get_typed_func::<i32, i32>(&mut *store, export)
        .unwrap();
    f.call(store, arg).map_err(|e| e.to_string())
}

#[test]
fn the_layout_makes_the_first_module_lazy_and_the_second_eager() {
    for (offset, lazy) in [(LAZY, true), (EAGER, false)] {
        let wasm = wat::parse_str(module(offset)).unwrap();
        let compiled = ephem::Compiler::new().unwrap().compile(&wasm).unwrap();
        let layout = ephem_module::FuncrefLayout::of(&compiled.info);
        assert_eq!(!layout.tables.is_empty(), lazy, "{offset}");
    }
}

#[test]
fn call_indirect_reaches_each_element_and_nulls_trap() {
    for (name, module, engine) in both() {
        let (mut store, i) = instance(&engine, &module, 100);
        for (at, want) in [(1, 110), (2, 111), (3, 113), (1, 110)] {
            assert_eq!(call(&mut store, i, "call", at), Ok(want), "{name} {at}");
        }
        for at in [0, 4, 7] {
            let e = call(&mut store, i, "call", at).unwrap_err();
            assert!(e.contains("uninitialized element"), "{name} {at}: {e}");
        }
        let e = call(&mut store, i, "call", 8).unwrap_err();
        assert!(e.contains("undefined element"), "{name}: {e}");
    }
}

#[test]
fn table_get_sees_functions_and_nulls_and_its_value_calls_the_same_function() {
    for (name, module, engine) in both() {
        let (mut store, i) = instance(&engine, &module, 200);
        let nulls: Vec<i32> = (0..8)
            .map(|at| call(&mut store, i, "is_null", at).unwrap())
            .collect();
        assert_eq!(nulls, [1, 0, 0, 0, 1, 1, 1, 1], "{name}");
        for (at, want) in [(3, 213), (2, 211), (1, 210)] {
            assert_eq!(call(&mut store, i, "get_set_call", at), Ok(want), "{name}");
        }
    }
}

#[test]
fn table_copy_within_and_across_carries_unread_elements() {
    for (name, module, engine) in both() {
        for (export, first) in [("copy_within", 0), ("copy_across", 0)] {
            let (mut store, i) = instance(&engine, &module, 300);
            for (k, want) in [(first, 310), (first + 1, 311), (first + 2, 313)] {
                assert_eq!(
                    call(&mut store, i, export, k),
                    Ok(want),
                    "{name} {export} {k}"
                );
            }
        }
    }
}

#[test]
fn table_init_over_unread_elements_and_from_a_dropped_active_segment() {
    for (name, module, engine) in both() {
        let (mut store, i) = instance(&engine, &module, 400);
        // $p holds $f12 $f10: written over elements 1 and 2; 3 keeps the segments' $f13.
        for (at, want) in [(1, 412), (2, 410), (3, 413)] {
            assert_eq!(call(&mut store, i, "init_over", at), Ok(want), "{name}");
        }
        let drop = i
            .get_typed_func::<i32, ()>(&mut store, "init_dropped")
            .unwrap();
        drop.call(&mut store, 0).unwrap();
        let e = drop.call(&mut store, 1).unwrap_err().to_string();
        assert!(e.contains("out of bounds table access"), "{name}: {e}");
    }
}

#[test]
fn ref_func_of_a_function_only_the_table_names() {
    for (name, module, engine) in both() {
        let (mut store, i) = instance(&engine, &module, 500);
        let f = i.get_typed_func::<(), i32>(&mut store, "ref_call").unwrap();
        assert_eq!(f.call(&mut store, ()).unwrap(), 511, "{name}");
    }
}

#[test]
fn the_host_reads_an_exported_lazy_table() {
    for (name, module, engine) in both() {
        let (mut store, i) = instance(&engine, &module, 600);
        let table: Table = i.get_table(&mut store, "t").unwrap();
        let mut got = Vec::new();
        for at in 0..8 {
            match table.get(&mut store, at).unwrap() {
                Val::FuncRef(Some(f)) => {
                    let f: Func = f;
                    got.push(
                        f.typed::<(), i32>(&store)
                            .unwrap()
                            .call(&mut store, ())
                            .unwrap(),
                    );
                }
                Val::FuncRef(None) => got.push(-1),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(got, [-1, 610, 611, 613, -1, -1, -1, -1], "{name}");
        // Written by the host over an unread element: the host's value wins.
        let f10 = match table.get(&mut store, 1).unwrap() {
            Val::FuncRef(f) => f,
            other => panic!("{other:?}"),
        };
        table.set(&mut store, 2, Val::FuncRef(f10)).unwrap();
        assert_eq!(call(&mut store, i, "call", 2), Ok(610), "{name}");
    }
}

/// Another module imports the lazy table: its `call_indirect` makes the elements in the
/// instance that defined them.
#[test]
fn an_importing_module_calls_through_the_table_into_the_defining_instance() {
    const USER: &str = r#"(module
      (import "m" "t" (table 8 funcref))
      (type $r (func (result i32)))
      (func (export "call") (param i32) (result i32)
        (call_indirect (type $r) (local.get 0))))"#;
    for (name, module, engine) in both() {
        let user = Module::new(&engine, USER.as_bytes()).unwrap();
        let mut store = Store::new(&engine, ());
        let mut linker = linker(&engine, &mut store);
        let m = linker.instantiate(&mut store, &module).unwrap();
        m.get_typed_func::<i32, ()>(&mut store, "set_base")
            .unwrap()
            .call(&mut store, 700)
            .unwrap();
        linker.instance(&mut store, "m", m).unwrap();
        let u = linker.instantiate(&mut store, &user).unwrap();
        for (at, want) in [(3, 713), (1, 710)] {
            assert_eq!(call(&mut store, u, "call", at), Ok(want), "{name}");
        }
        assert_eq!(call(&mut store, m, "call", 3), Ok(713), "{name}");
    }
}

/// Many instances of one module, each with its own base, interleaved: every element is made
/// for the instance whose table it is in.
#[test]
fn elements_belong_to_their_own_instance() {
    let (_, module, engine) = both().remove(0);
    let mut live: Vec<(Store<()>, Instance, i32)> = (0..20)
        .map(|k| {
            let (store, i) = instance(&engine, &module, 1000 * k);
            (store, i, 1000 * k)
        })
        .collect();
    for round in 0..3 {
        for (store, i, base) in live.iter_mut().rev() {
            let at = 1 + (round + *base / 1000) % 3;
            let want = *base + [10, 11, 13][at as usize - 1];
            assert_eq!(call(store, *i, "call", at), Ok(want));
        }
    }
}
