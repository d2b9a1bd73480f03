//! Tables' element buffers are kept per thread for the next tables (the runtime's `table`
//! module): a new table must have every element null, whatever the table that had its buffer
//! held and however that was written (generated code's `table.set`, making a lazy element,
//! `table.fill`, `table.copy`, `table.init`, `table.grow`, or the host), and whether the new
//! table is shorter or longer. A stale funcref would be a pointer into a freed instance.

use ephem::{Engine, ExternRef, Func, Instance, Module, Store, Table, TableType, Val, ValType};

/// A module of three tables of `n` elements (64 or more), each of whose exports writes a few
/// of them (or grows them) one way.
fn writer(n: u32) -> String {
    format!(
        r#"(module
  (table $f (export "f") {n} funcref)
  (table $e (export "e") {n} externref)
  (table $lazy {n} funcref)
  (type $r (func (result i32)))
  (elem (table $lazy) (i32.const 40) func $a $a $a $a)
  (elem $p func $a $a $a $a)
  (func $a (export "a") (result i32) (i32.const 1))
  (func (export "code_set") (param $x externref)
    (table.set $f (i32.const 40) (ref.func $a))
    (table.set $e (i32.const {last}) (local.get $x)))
  (func (export "fill") (param $x externref)
    (table.fill $f (i32.const 40) (ref.func $a) (i32.const 4))
    (table.fill $e (i32.const 40) (local.get $x) (i32.const 4)))
  (func (export "copy") (param $x externref)
    (table.set $e (i32.const 0) (local.get $x))
    (table.copy $e $e (i32.const 40) (i32.const 0) (i32.const 1))
    (table.set $e (i32.const 0) (ref.null extern)))
  (func (export "copy_across") (param externref)
    (table.copy $f $lazy (i32.const 40) (i32.const 40) (i32.const 4)))
  (func (export "init") (param externref)
    (table.init $f $p (i32.const 40) (i32.const 0) (i32.const 4)))
  (func (export "grow") (param $x externref)
    (drop (table.grow $f (ref.func $a) (i32.const 8)))
    (drop (table.grow $e (local.get $x) (i32.const 100))))
  (func (export "lazy") (param externref)
    (drop (call_indirect $lazy (type $r) (i32.const 41)))))"#,
        last = n - 1
    )
}

/// A module of four tables of `n` elements whose `non_null` counts their non-null elements.
fn reader(n: u32) -> String {
    let tables = [
        ("a", "funcref"),
        ("b", "funcref"),
        ("c", "externref"),
        ("d", "externref"),
    ];
    let mut wat = String::from("(module\n");
    for (name, ty) in tables {
        wat += &format!("(table ${name} {n} {ty})\n");
    }
    wat += "(func (export \"non_null\") (result i32) (local $i i32) (local $n i32)\n";
    for (name, _) in tables {
        wat += &format!(
            "(local.set $i (i32.const 0))
             (block $done (loop $l
               (br_if $done (i32.ge_u (local.get $i) (table.size ${name})))
               (local.set $n (i32.add (local.get $n)
                 (i32.eqz (ref.is_null (table.get ${name} (local.get $i))))))
               (local.set $i (i32.add (local.get $i) (i32.const 1)))
               (br $l)))\n"
        );
    }
    wat + "(local.get $n)))"
}

const X: Val = Val::ExternRef(Some(ExternRef::new(7)));

/// Writes elements of a table one way, in a store that is then dropped.
fn write(engine: &Engine, writer: &Module, how: &str) {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, writer, &[]).unwrap();
    let table = |store: &mut Store<()>, name| instance.get_table(&mut *store, name).unwrap();
    match how {
        "host_set" => {
            let f = instance.get_func(&mut store, "a").unwrap();
            table(&mut store, "f")
                .set(&mut store, 40, Val::FuncRef(Some(f)))
                .unwrap();
            table(&mut store, "e").set(&mut store, 41, X).unwrap();
        }
        "host_grow" => {
            table(&mut store, "e").grow(&mut store, 30, X).unwrap();
        }
        "host_new" => {
            let ty = TableType::new(ValType::EXTERNREF, 100, None);
            Table::new(&mut store, ty, X).unwrap();
        }
        export => {
            let f: Func = instance.get_func(&mut store, export).unwrap();
            f.call(&mut store, &[X], &mut []).unwrap();
        }
    }
}

fn non_null(engine: &Engine, reader: &Module) -> i32 {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, reader, &[]).unwrap();
    let f = instance
        .get_typed_func::<(), i32>(&mut store, "non_null")
        .unwrap();
    f.call(&mut store, ()).unwrap()
}

#[test]
fn a_new_table_is_null_whatever_the_buffer_held_before() {
    // Tables of 64 elements note writes element by element, of 1000 by chunks of 16.
    for size in [64, 1000] {
        null_after_every_way_of_writing(size);
    }
}

fn null_after_every_way_of_writing(size: u32) {
    let engine = Engine::default();
    let writer = Module::new(&engine, writer(size).as_bytes()).unwrap();
    // Shorter, the same, longer than the writer's tables; a reader's four tables take every
    // buffer the thread keeps that is long enough.
    let readers: Vec<(u32, Module)> = [size / 2, size, size, size + 36]
        .into_iter()
        .map(|n| (n, Module::new(&engine, reader(n).as_bytes()).unwrap()))
        .collect();
    let ways = [
        "code_set",
        "fill",
        "copy",
        "copy_across",
        "init",
        "grow",
        "lazy",
        "host_set",
        "host_grow",
        "host_new",
    ];
    for round in 0..3 {
        for how in ways {
            for (n, reader) in &readers {
                write(&engine, &writer, how);
                assert_eq!(
                    non_null(&engine, reader),
                    0,
                    "round {round}: a table of {n} after one of {size} written by {how}"
                );
            }
        }
    }
}

#[test]
fn a_kept_buffer_still_holds_what_its_own_table_writes() {
    // The reverse: reuse must not lose writes either (a table's own elements, after its
    // buffer was kept and cleared).
    let engine = Engine::default();
    let writer = Module::new(&engine, writer(64).as_bytes()).unwrap();
    for _ in 0..4 {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &writer, &[]).unwrap();
        let fill = instance.get_func(&mut store, "fill").unwrap();
        fill.call(&mut store, &[X], &mut []).unwrap();
        let e = instance.get_table(&mut store, "e").unwrap();
        let f = instance.get_table(&mut store, "f").unwrap();
        for i in 0..64 {
            let x =
                matches!(e.get(&store, i), Some(Val::ExternRef(Some(r))) if r.data() == Some(7));
            let func = matches!(f.get(&store, i), Some(Val::FuncRef(Some(_))));
            assert_eq!(x, (40..44).contains(&i), "externref element {i}");
            assert_eq!(func, (40..44).contains(&i), "funcref element {i}");
        }
    }
}
