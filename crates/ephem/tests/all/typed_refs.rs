//! Typed function references through the embedding API: what wasm can do with them (call_ref,
//! null checks, typed tables with initialisers), and what the host may hand wasm. A function
//! reference of a concrete type is called without a signature check, so every way a value gets
//! into a typed place from outside (arguments, results of host functions, globals, tables,
//! imports) must check its type: each is tried here with a function of the wrong type.

use std::time::Duration;

use ephem::{
    Config, Engine, Error, ExternType, Func, FuncType, Global, HeapType, Linker, Module, RefType,
    Store, TrapKind, Val, ValType,
};

const TYPED: &str = r#"(module
  (type $unary (func (param i32) (result i32)))
  (type $nullary (func (result i32)))
  (func $double (type $unary) (i32.mul (local.get 0) (i32.const 2)))
  (func $seven (type $nullary) (i32.const 7))
  (elem declare func $double $seven)
  (global $g (export "g") (mut (ref null $unary)) (ref.func $double))
  (global (export "fixed") (ref $unary) (ref.func $double))
  (table $t (export "t") 2 (ref $unary) (ref.func $double))
  (func (export "double") (type $unary) (i32.mul (local.get 0) (i32.const 2)))
  (func (export "seven") (type $nullary) (i32.const 7))
  ;; Calls the function in $g.
  (func (export "call_global") (param i32) (result i32)
    (call_ref $unary (local.get 0) (global.get $g)))
  ;; Calls what it is given, which may be null.
  (func (export "apply") (param (ref null $unary)) (param i32) (result i32)
    (call_ref $unary (local.get 1) (local.get 0)))
  ;; Takes only non-null functions: the host must not pass null.
  (func (export "apply_strict") (param (ref $unary)) (param i32) (result i32)
    (call_ref $unary (local.get 1) (local.get 0)))
  (func (export "call_table") (param i32) (param i32) (result i32)
    (call_ref $unary (local.get 1) (table.get $t (local.get 0))))
  (func (export "as_non_null") (param (ref null $unary)) (result i32)
    (drop (ref.as_non_null (local.get 0))) (i32.const 1))
  ;; 1 when given null, else the function applied to 20.
  (func (export "on_null") (param (ref null $unary)) (result i32)
    (block $null
      (return (call_ref $unary (i32.const 20) (br_on_null $null (local.get 0)))))
    (i32.const 1))
  ;; Counts down through return_call_ref forever: only fuel or a deadline ends it.
  (func $forever (type $unary)
    (return_call_ref $unary (local.get 0) (ref.func $forever)))
  (elem declare func $forever)
  (func (export "forever") (result i32) (call $forever (i32.const 0))))"#;

fn setup(engine: &Engine) -> (Store<()>, ephem::Instance) {
    let module = Module::new(engine, TYPED).unwrap();
    let mut store = Store::new(engine, ());
    let instance = Linker::new(engine)
        .instantiate(&mut store, &module)
        .unwrap();
    (store, instance)
}

fn call(store: &mut Store<()>, f: Func, args: &[Val]) -> Result<i32, Error> {
    let mut out = [Val::I32(0)];
    f.call(store, args, &mut out)?;
    Ok(out[0].i32().unwrap())
}

fn trap_kind(r: Result<i32, Error>) -> Option<TrapKind> {
    r.err()?.trap().map(|t| t.kind)
}

#[test]
fn call_ref_calls_through_globals_tables_and_arguments() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let f = |store: &mut Store<()>, name| instance.get_func(store, name).unwrap();
    let double = Val::FuncRef(Some(f(&mut store, "double")));
    let call_global = f(&mut store, "call_global");
    assert_eq!(call(&mut store, call_global, &[Val::I32(21)]).unwrap(), 42);
    let apply = f(&mut store, "apply");
    assert_eq!(call(&mut store, apply, &[double, Val::I32(5)]).unwrap(), 10);
    // The table starts full of its initialiser.
    let call_table = f(&mut store, "call_table");
    for i in 0..2 {
        let r = call(&mut store, call_table, &[Val::I32(i), Val::I32(4)]);
        assert_eq!(r.unwrap(), 8);
    }
    let r = call(&mut store, call_table, &[Val::I32(2), Val::I32(4)]);
    assert_eq!(trap_kind(r), Some(TrapKind::TableOutOfBounds));
    let on_null = f(&mut store, "on_null");
    assert_eq!(call(&mut store, on_null, &[double]).unwrap(), 40);
    assert_eq!(call(&mut store, on_null, &[Val::FuncRef(None)]).unwrap(), 1);
}

#[test]
fn null_references_trap_as_null_references_and_the_store_runs_on() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let apply = instance.get_func(&mut store, "apply").unwrap();
    let r = call(&mut store, apply, &[Val::FuncRef(None), Val::I32(1)]);
    assert_eq!(trap_kind(r), Some(TrapKind::NullReference));
    let as_non_null = instance.get_func(&mut store, "as_non_null").unwrap();
    let r = call(&mut store, as_non_null, &[Val::FuncRef(None)]);
    assert_eq!(trap_kind(r), Some(TrapKind::NullReference));
    let double = instance.get_func(&mut store, "double").unwrap();
    let r = call(
        &mut store,
        apply,
        &[Val::FuncRef(Some(double)), Val::I32(3)],
    );
    assert_eq!(r.unwrap(), 6);
}

#[test]
fn the_host_cannot_pass_a_function_of_another_type_or_null_where_wasm_expects_a_type() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let seven = instance.get_func(&mut store, "seven").unwrap();
    let double = instance.get_func(&mut store, "double").unwrap();
    let wrong = Val::FuncRef(Some(seven));
    // Arguments.
    let apply = instance.get_func(&mut store, "apply").unwrap();
    let r = call(&mut store, apply, &[wrong, Val::I32(1)]);
    assert!(matches!(r, Err(Error::Usage(_))), "{r:?}");
    let strict = instance.get_func(&mut store, "apply_strict").unwrap();
    let r = call(&mut store, strict, &[Val::FuncRef(None), Val::I32(1)]);
    assert!(matches!(r, Err(Error::Usage(_))), "{r:?}");
    // Globals: the exported one's type names the engine's id for `$unary`.
    let g = instance.get_global(&mut store, "g").unwrap();
    let ty = g.ty(&store);
    let unary = match ty.ty {
        ValType::Ref(RefType {
            nullable: true,
            heap: HeapType::ConcreteFunc(id),
        }) => id,
        other => panic!("the global's type is {other}"),
    };
    assert_eq!(engine.func_type(unary), Some(double.ty(&store)));
    assert_eq!(engine.func_type(u32::MAX), None);
    assert!(g.set(&mut store, wrong).is_err());
    assert!(Global::new(&mut store, ty, wrong).is_err());
    g.set(&mut store, Val::FuncRef(None)).unwrap();
    let call_global = instance.get_func(&mut store, "call_global").unwrap();
    let r = call(&mut store, call_global, &[Val::I32(1)]);
    assert_eq!(trap_kind(r), Some(TrapKind::NullReference));
    g.set(&mut store, Val::FuncRef(Some(double))).unwrap();
    assert_eq!(call(&mut store, call_global, &[Val::I32(8)]).unwrap(), 16);
    // Tables.
    let t = instance.get_table(&mut store, "t").unwrap();
    assert!(t.set(&mut store, 0, wrong).is_err());
    assert!(t.set(&mut store, 0, Val::FuncRef(None)).is_err());
    assert!(t.grow(&mut store, 1, wrong).is_err());
    t.set(&mut store, 1, Val::FuncRef(Some(double))).unwrap();
}

#[test]
fn a_host_function_returning_a_function_of_another_type_fails_the_call() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let seven = instance.get_func(&mut store, "seven").unwrap();
    let double = instance.get_func(&mut store, "double").unwrap();
    let unary = match instance.get_global(&mut store, "g").unwrap().ty(&store).ty {
        ValType::Ref(r) => r.heap,
        other => panic!("{other}"),
    };
    let returns = ValType::Ref(RefType {
        nullable: false,
        heap: unary,
    });
    let consumer = Module::new(
        &engine,
        r#"(module
          (type $unary (func (param i32) (result i32)))
          (import "host" "give" (func $give (result (ref $unary))))
          (func (export "run") (result i32) (call_ref $unary (i32.const 3) (call $give))))"#,
    )
    .unwrap();
    for (given, expect) in [(double, Some(6)), (seven, None)] {
        let ty = FuncType {
            params: vec![],
            results: vec![returns],
        };
        let give = Func::new(&mut store, ty, move |_, _, out| {
            out[0] = Val::FuncRef(Some(given));
            Ok(())
        });
        let mut linker = Linker::new(&engine);
        linker.define(&store, "host", "give", give).unwrap();
        let inst = linker.instantiate(&mut store, &consumer).unwrap();
        let run = inst.get_func(&mut store, "run").unwrap();
        let r = call(&mut store, run, &[]);
        match expect {
            Some(v) => assert_eq!(r.unwrap(), v),
            None => assert_eq!(trap_kind(r), Some(TrapKind::HostError)),
        }
    }
}

#[test]
fn typed_imports_match_by_subtype_where_they_cannot_change_and_exactly_where_they_can() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let importer = |ty: &str| {
        let wat = format!(
            r#"(module
              (type $unary (func (param i32) (result i32)))
              (type $other (func (param i64) (result i32)))
              (import "m" "g" (global {ty})))"#
        );
        Module::new(&engine, wat).unwrap()
    };
    let mut linker = Linker::new(&engine);
    linker.instance(&mut store, "m", instance).unwrap();
    let outcomes: Vec<(&str, bool)> = [
        // "fixed" exported as `(ref $unary)`, immutable.
        ("(ref $unary)", true),
        ("(ref null $unary)", true),
        ("(ref func)", true),
        ("funcref", true),
        ("(ref $other)", false),
        ("externref", false),
        ("(mut (ref $unary))", false),
    ]
    .into_iter()
    .map(|(ty, ok)| {
        let module = importer(ty);
        let mut l = Linker::new(&engine);
        let fixed = instance.get_global(&mut store, "fixed").unwrap();
        l.define(&store, "m", "g", fixed).unwrap();
        let linked = l.instantiate(&mut store, &module);
        assert_eq!(linked.is_ok(), ok, "{ty}: {:?}", linked.err());
        (ty, ok)
    })
    .collect();
    assert_eq!(outcomes.len(), 7);
    // "g" is `(mut (ref null $unary))`: only that exact type links.
    for (ty, ok) in [
        ("(mut (ref null $unary))", true),
        ("(mut funcref)", false),
        ("(mut (ref $unary))", false),
        ("(ref null $unary)", false),
    ] {
        let module = importer(ty);
        let linked = linker.instantiate(&mut store, &module);
        assert_eq!(linked.is_ok(), ok, "{ty}: {:?}", linked.err());
    }
    // The module reports its import in the engine's terms: the same id as the export's.
    let module = importer("(ref $unary)");
    let import = module.imports().next().unwrap();
    let exported = instance.get_global(&mut store, "fixed").unwrap().ty(&store);
    match module.import_type(&import) {
        ExternType::Global(g) => assert_eq!(g, exported),
        other => panic!("{other}"),
    }
}

#[test]
fn equal_types_in_two_modules_are_one_type_whatever_their_indices() {
    let engine = Engine::default();
    let wat = |padding: &str| {
        format!(
            r#"(module
              {padding}
              (type $unary (func (param i32) (result i32)))
              (type $takes (func (param (ref $unary)) (result i32)))
              (func (export "f") (type $takes) (i32.const 1))
              (func (export "g") (type $unary) (i32.const 1)))"#
        )
    };
    let a = Module::new(&engine, wat("")).unwrap();
    // The same types at other indices.
    let b = Module::new(&engine, wat("(type (func)) (type (func (param f32)))")).unwrap();
    let ty = |m: &Module, name: &str| m.exports().find(|e| e.name == name).map(|e| e.ty).unwrap();
    for name in ["f", "g"] {
        assert_eq!(ty(&a, name), ty(&b, name), "{name}");
    }
    assert_ne!(ty(&a, "f"), ty(&a, "g"));
}

#[test]
fn return_call_ref_loops_end_by_fuel_and_by_deadline() {
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config).unwrap();
    let (mut store, instance) = setup(&engine);
    store.set_fuel(100_000).unwrap();
    let forever = instance.get_func(&mut store, "forever").unwrap();
    let r = call(&mut store, forever, &[]);
    assert_eq!(trap_kind(r), Some(TrapKind::OutOfFuel));

    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let forever = instance.get_func(&mut store, "forever").unwrap();
    store.set_epoch_deadline(1);
    let ticker = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            engine.increment_epoch();
        })
    };
    let r = call(&mut store, forever, &[]);
    ticker.join().unwrap();
    assert_eq!(trap_kind(r), Some(TrapKind::Interrupted));
}

#[test]
fn function_references_can_be_turned_off() {
    let mut config = Config::new();
    config.wasm_function_references(false);
    let engine = Engine::new(&config).unwrap();
    let Err(err) = Module::new(&engine, TYPED) else {
        panic!("a module with call_ref was accepted without function references");
    };
    assert!(err.to_string().contains("function references"), "{err}");
}

#[test]
fn unknown_typed_imports_are_stubbed_in_the_engines_terms_and_none_is_made_without_a_default() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        r#"(module
          (type $unary (func (param i32) (result i32)))
          (import "host" "apply" (func $apply (param (ref $unary)) (result i32)))
          (import "host" "maybe" (global (ref null $unary)))
          (func (export "run") (result i32) (i32.const 5)))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    linker.define_unknown_imports_as_traps(&module).unwrap();
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance.get_func(&mut store, "run").unwrap();
    assert_eq!(call(&mut store, run, &[]).unwrap(), 5);

    // A global of a non-nullable type has no zero to start from.
    let strict = Module::new(
        &engine,
        r#"(module
          (type $unary (func (param i32) (result i32)))
          (import "host" "fixed" (global (ref $unary))))"#,
    )
    .unwrap();
    let mut linker = Linker::new(&engine);
    linker.define_unknown_imports_as_traps(&strict).unwrap();
    let err = linker.instantiate(&mut store, &strict).err().unwrap();
    assert!(matches!(err, Error::Link(_)), "{err}");
    assert!(err.to_string().contains("no default"), "{err}");
}

/// A module may declare one type twice: the two are one type, in the compiler's module, in the
/// artifact's checked metadata and after a round trip through a sealed file.
#[test]
fn a_type_declared_twice_is_one_type_through_an_artifact() {
    let mut config = Config::new();
    config.artifact_key(ephem::ArtifactKey::generate().unwrap());
    let engine = Engine::new(&config).unwrap();
    let wat = r#"(module
      (type $a (func (result i32)))
      (type $b (func (result i32)))
      (func $f (type $a) (i32.const 9))
      (elem declare func $f)
      (global $g (ref $b) (ref.func $f))
      (table $t 1 (ref null $b) (ref.func $f))
      (func (export "run") (result i32)
        (i32.add (call_ref $b (global.get $g)) (call_ref $a (table.get $t (i32.const 0))))))"#;
    let module = Module::new(&engine, wat).unwrap();
    let bytes = module.serialize().unwrap();
    // SAFETY: bytes this engine's key sealed, just now.
    let reopened = unsafe { Module::deserialize(&engine, &bytes) }.unwrap();
    for module in [module, reopened] {
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap();
        let run = instance.get_func(&mut store, "run").unwrap();
        assert_eq!(call(&mut store, run, &[]).unwrap(), 18);
    }
}

/// Function types in recursion groups (the part of GC's type system ephem implements): a type
/// of a group is its group and its place in it, so structurally equal types of one group, and
/// the lone type of the same structure, are three different types: in imports, in
/// `call_indirect`'s check, and in the linker's memory of import lists it resolved.
#[test]
fn types_of_recursion_groups_are_their_group_and_place() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    let exporter = Module::new(
        &engine,
        r#"(module
          (rec (type $t1 (func (result i32))) (type $t2 (func (result i32))))
          (type $lone (func (result i32)))
          (func (export "one") (type $t1) (i32.const 1))
          (func (export "lone") (type $lone) (i32.const 3))
          (table (export "tab") 2 funcref)
          (elem (i32.const 0) func 0 1))"#,
    )
    .unwrap();
    let exporter = linker.instantiate(&mut store, &exporter).unwrap();
    linker.instance(&mut store, "m", exporter).unwrap();
    let importer = |as_type: &str| {
        format!(
            r#"(module
              (rec (type $t1 (func (result i32))) (type $t2 (func (result i32))))
              (type $lone (func (result i32)))
              (import "m" "one" (func (type {as_type})))
              (import "m" "tab" (table 2 funcref))
              (func (export "call") (param i32) (result i32)
                (call_indirect (type {as_type}) (local.get 0))))"#
        )
    };
    // The same group in another module: the same type.
    let same = Module::new(&engine, importer("$t1")).unwrap();
    let i = linker.instantiate(&mut store, &same).unwrap();
    let call = i.get_typed_func::<i32, i32>(&mut store, "call").unwrap();
    assert_eq!(call.call(&mut store, 0).unwrap(), 1);
    // The lone type of the same structure is another type.
    let e = call.call(&mut store, 1).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::BadSignature);
    // The other member, and the lone type, are not the export's type: refused, also after the
    // linker resolved the same names for the first importer.
    for other in ["$t2", "$lone"] {
        let m = Module::new(&engine, importer(other)).unwrap();
        let e = linker.instantiate(&mut store, &m).unwrap_err();
        assert!(matches!(e, Error::Link(_)), "{other}: {e}");
        // Through an artifact too.
        let bytes = m.serialize().unwrap();
        let tmp = ephem_test_support::temp_dir();
        let path = tmp.path().join("m.ephem");
        std::fs::write(&path, bytes).unwrap();
        // SAFETY: written just now by this engine's `serialize`, with its key.
        let m = unsafe { Module::deserialize_file(&engine, &path) }.unwrap();
        let e = linker.instantiate(&mut store, &m).unwrap_err();
        assert!(matches!(e, Error::Link(_)), "{other}: {e}");
    }
    // Declared subtypes compile (how they link and cast across modules: `gc_objects.rs`).
    let open = Module::new(
        &engine,
        "(module (type $s (sub (func))) (type (sub $s (func))))",
    );
    open.unwrap();
}
