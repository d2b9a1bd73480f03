//! GC's types: struct and array types in recursion groups, and references of the `any`
//! hierarchy in signatures, locals, globals and tables (their objects are `gc_objects.rs`'s).
//! What must hold: such modules compile and run; the host passes and receives nulls as
//! `Val::AnyRef(None)` and nothing of another hierarchy fits there; types compare structurally
//! across modules (by group and place), through artifacts too; subtyping of the `any` hierarchy
//! holds at link time; GC can be turned off.

use ephem::{Engine, Error, Func, Global, HeapType, Linker, Module, RefType, Store, Val, ValType};

const NULLS: &str = r#"(module
  (rec
    (type $node (struct (field i32) (field (mut (ref null $node)))))
    (type $bytes (array (mut i8))))
  (type $pair (struct (field i16) (field (ref null $bytes))))
  (global $g (export "g") (mut eqref) (ref.null none))
  (global (export "node") (ref null $node) (ref.null $node))
  (table $t (export "t") 2 anyref)
  (func (export "id") (param anyref) (result anyref) (local.get 0))
  (func (export "is_null") (param (ref null $node)) (result i32)
    (ref.is_null (local.get 0)))
  (func (export "pair") (result (ref null $pair)) (ref.null $pair))
  ;; Keeps an eqref in $g and the table, reads them back, and counts the nulls it saw.
  (func (export "round") (param eqref) (result i32)
    (local $a arrayref)
    (global.set $g (local.get 0))
    (table.set $t (i32.const 1) (global.get $g))
    (i32.add
      (i32.add (ref.is_null (table.get $t (i32.const 1))) (ref.is_null (local.get $a)))
      (i32.add
        (ref.is_null (global.get $g))
        (i32.sub (table.grow $t (ref.null i31) (i32.const 3)) (i32.const 1)))))
  ;; Traps on null.
  (func (export "non_null") (param structref) (result i32)
    (drop (ref.as_non_null (local.get 0))) (i32.const 1))
)"#;

fn setup(engine: &Engine) -> (Store<()>, ephem::Instance) {
    let module = Module::new(engine, NULLS).unwrap();
    let mut store = Store::new(engine, ());
    let instance = ephem::Instance::new(&mut store, &module, &[]).unwrap();
    (store, instance)
}

fn func(store: &mut Store<()>, instance: ephem::Instance, name: &str) -> Func {
    instance.get_func(store, name).unwrap()
}

#[test]
fn references_of_the_any_hierarchy_run_as_nulls_through_locals_globals_and_tables() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let mut out = [Val::I32(7)];
    let id = func(&mut store, instance, "id");
    id.call(&mut store, &[Val::AnyRef(None)], &mut out).unwrap();
    assert!(matches!(out[0], Val::AnyRef(None)), "{:?}", out[0]);
    let is_null = func(&mut store, instance, "is_null");
    is_null
        .call(&mut store, &[Val::AnyRef(None)], &mut out)
        .unwrap();
    assert_eq!(out[0].i32(), Some(1));
    let pair = func(&mut store, instance, "pair");
    out[0] = Val::I32(7);
    pair.call(&mut store, &[], &mut out).unwrap();
    assert!(matches!(out[0], Val::AnyRef(None)), "{:?}", out[0]);
    // Three nulls read back, and the table had 2 elements before it grew by 3.
    let round = func(&mut store, instance, "round");
    round
        .call(&mut store, &[Val::AnyRef(None)], &mut out)
        .unwrap();
    assert_eq!(out[0].i32(), Some(4));
    let t = instance.get_table(&mut store, "t").unwrap();
    assert_eq!(t.size(&store), 5);
    assert!(matches!(t.get(&store, 4), Some(Val::AnyRef(None))));
    let g = instance.get_global(&mut store, "g").unwrap();
    assert!(matches!(g.get(&store), Val::AnyRef(None)));
    g.set(&mut store, Val::AnyRef(None)).unwrap();
    // `ref.as_non_null` of null traps.
    let non_null = func(&mut store, instance, "non_null");
    let e = non_null
        .call(&mut store, &[Val::AnyRef(None)], &mut out)
        .unwrap_err();
    assert_eq!(e.trap().unwrap().kind, ephem::TrapKind::NullReference);
}

#[test]
fn the_host_passes_only_gc_nulls_where_gc_references_are_wanted() {
    let engine = Engine::default();
    let (mut store, instance) = setup(&engine);
    let mut out = [Val::I32(0)];
    let id = func(&mut store, instance, "id");
    for wrong in [Val::FuncRef(None), Val::ExternRef(None), Val::I32(0)] {
        let e = id.call(&mut store, &[wrong], &mut out).unwrap_err();
        assert!(e.to_string().contains("do not match"), "{wrong:?}: {e}");
    }
    let g = instance.get_global(&mut store, "g").unwrap();
    assert!(g.set(&mut store, Val::ExternRef(None)).is_err());
    // A non-nullable GC type has no value the host can give.
    let strict = RefType {
        nullable: false,
        heap: HeapType::Any,
    };
    let ty = ephem::GlobalType {
        ty: ValType::Ref(strict),
        mutable: false,
    };
    assert!(Global::new(&mut store, ty, Val::AnyRef(None)).is_err());
    // The types the host sees: `anyref`, and a concrete struct type by the engine's id.
    let ty = id.ty(&store);
    assert_eq!(ty.params, [ValType::ANYREF]);
    let node = instance.get_global(&mut store, "node").unwrap().ty(&store);
    assert!(
        matches!(
            node.ty,
            ValType::Ref(RefType {
                nullable: true,
                heap: HeapType::ConcreteStruct(_)
            })
        ),
        "{node:?}"
    );
}

#[test]
fn struct_and_array_types_link_by_structure_group_and_place_and_by_gc_subtyping() {
    let engine = Engine::default();
    let exporter = Module::new(
        &engine,
        r#"(module
          (rec
            (type $node (struct (field i32) (field (mut (ref null $node)))))
            (type $bytes (array (mut i8))))
          (global (export "node") (ref null $node) (ref.null $node))
          (global (export "bytes") (ref null $bytes) (ref.null none)))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = ephem::Instance::new(&mut store, &exporter, &[]).unwrap();
    let mut linker = Linker::new(&engine);
    linker.instance(&mut store, "m", instance).unwrap();
    let importer = |name: &str, ty: &str, padding: &str| {
        format!(
            r#"(module
              {padding}
              (rec
                (type $node (struct (field i32) (field (mut (ref null $node)))))
                (type $bytes (array (mut i8))))
              (type $lone (struct (field i32) (field (mut (ref null $lone)))))
              (type $other (array (mut i16)))
              (import "m" "{name}" (global {ty})))"#
        )
    };
    for (name, ty, ok) in [
        ("node", "(ref null $node)", true),
        ("node", "structref", true),
        ("node", "eqref", true),
        ("node", "anyref", true),
        ("node", "arrayref", false),
        ("node", "(ref $node)", false),
        ("node", "(ref null $lone)", false),
        ("node", "funcref", false),
        ("node", "externref", false),
        ("bytes", "(ref null $bytes)", true),
        ("bytes", "arrayref", true),
        ("bytes", "(ref null $other)", false),
        ("bytes", "structref", false),
        ("bytes", "nullref", false),
    ] {
        for padding in ["", "(type (struct)) (type (func))"] {
            let wat = importer(name, ty, padding);
            let module = Module::new(&engine, &wat).unwrap();
            let linked = linker.instantiate(&mut store, &module);
            assert_eq!(linked.is_ok(), ok, "{name} as {ty}: {:?}", linked.err());
            // Through an artifact, whose types are read back from its metadata.
            let tmp = ephem_test_support::temp_dir();
            let path = tmp.path().join("m.ephem");
            std::fs::write(&path, module.serialize().unwrap()).unwrap();
            // SAFETY: written just now by this engine's `serialize`, with its key.
            let module = unsafe { Module::deserialize_file(&engine, &path) }.unwrap();
            let linked = linker.instantiate(&mut store, &module);
            assert_eq!(
                linked.is_ok(),
                ok,
                "{name} as {ty}, artifact: {:?}",
                linked.err()
            );
        }
    }
}

#[test]
fn gc_can_be_turned_off() {
    let mut config = ephem::Config::new();
    config.wasm_gc(false);
    let engine = Engine::new(&config).unwrap();
    for wat in [
        "(module (type (struct)))",
        "(module (func (result i31ref) (ref.i31 (i32.const 1))))",
    ] {
        let e = Module::new(&engine, wat).unwrap_err();
        assert!(matches!(e, Error::Compile(_)), "{e}");
    }
}

/// A struct type declared twice is one type (a module may give a global of one the value of an
/// import of the other), also when its artifact is read back.
#[test]
fn a_struct_type_declared_twice_is_one_type() {
    let engine = Engine::default();
    let exporter = Module::new(
        &engine,
        r#"(module (type $s (struct (field i32)))
             (global (export "g") (ref null $s) (ref.null $s)))"#,
    )
    .unwrap();
    let importer = Module::new(
        &engine,
        r#"(module
             (type $a (struct (field i32)))
             (type $b (struct (field i32)))
             (import "m" "g" (global $g (ref null $a)))
             (global (export "copy") (ref null $b) (global.get $g)))"#,
    )
    .unwrap();
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("m.ephem");
    std::fs::write(&path, importer.serialize().unwrap()).unwrap();
    // SAFETY: written just now by this engine's `serialize`, with its key.
    let read_back = unsafe { Module::deserialize_file(&engine, &path) }.unwrap();
    let mut store = Store::new(&engine, ());
    let instance = ephem::Instance::new(&mut store, &exporter, &[]).unwrap();
    let mut linker = Linker::new(&engine);
    linker.instance(&mut store, "m", instance).unwrap();
    for module in [&importer, &read_back] {
        let i = linker.instantiate(&mut store, module).unwrap();
        let copy = i.get_global(&mut store, "copy").unwrap();
        assert!(matches!(copy.get(&store), Val::AnyRef(None)));
    }
}

/// Two modules whose imports differ only in a struct type their function type names have
/// different import lists: a linker that resolved one does not link the other as it.
#[test]
fn imports_naming_different_struct_types_are_different_imports() {
    let engine = Engine::default();
    let module = |field: &str| {
        let wat = format!(
            r#"(module (type $s (struct (field {field})))
                 (import "env" "f" (func (param (ref null $s)))))"#
        );
        Module::new(&engine, wat).unwrap()
    };
    let (x, y) = (module("i32"), module("f64"));
    let import = x.imports().next().unwrap();
    let ephem::ExternType::Func(ty) = x.import_type(&import) else {
        panic!("a function import")
    };
    let mut store = Store::new(&engine, ());
    let f = Func::new(&mut store, ty, |_, _, _| Ok(()));
    let mut linker = Linker::new(&engine);
    linker.define(&store, "env", "f", f).unwrap();
    linker.instantiate(&mut store, &x).unwrap();
    let e = linker.instantiate(&mut store, &y).unwrap_err();
    assert!(matches!(e, Error::Link(_)), "{e}");
}

/// What types declare of subtyping is kept only where one declares something, for every type.
#[test]
fn subtyping_is_recorded_per_type_only_where_declared() {
    let compiler = ephem::Compiler::new().unwrap();
    let plain = compiler
        .compile(b"(module (type (func)) (type (struct)) (type (array i8)))")
        .unwrap();
    assert!(plain.info.subs.is_empty());
    let declared = compiler
        .compile(b"(module (type (func)) (type $s (sub (struct))) (type (sub final $s (struct))))")
        .unwrap();
    let subs: Vec<_> = declared
        .info
        .subs
        .iter()
        .map(|s| (s.supertype, s.is_final))
        .collect();
    assert_eq!(subs, [(None, true), (None, false), (Some(1), true)]);
}
