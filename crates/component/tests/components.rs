//! Components written by hand in the text format, run through the embedding API. Expected
//! values are worked out by hand from the canonical ABI's definitions (the byte counts of an
//! encoding, a variant's joined slots), never read back from ephem.

use ephem_component::{Component, Error, Linker, Val};
use ephem_runtime::{Engine, Store};

/// A bump allocator with `realloc`'s signature and a one-page memory; data from 1024 on.
const ALLOC: &str = r#"
    (memory (export "memory") 1)
    (global $next (mut i32) (i32.const 1024))
    (func $realloc (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
      (global.set $next (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
"#;

fn component(engine: &Engine, text: &str) -> Component {
    Component::new(engine, text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn a_lifted_function_adds_two_numbers() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (core module $m
              (func (export "add") (param i32 i32) (result i32)
                (i32.add (local.get 0) (local.get 1))))
            (core instance $i (instantiate $m))
            (func (export "add") (param "a" u32) (param "b" u32) (result u32)
              (canon lift (core func $i "add"))))"#,
    );
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine).instantiate(&mut store, &c)?;
    let add = instance.get_typed_func::<(u32, u32), (u32,)>(&mut store, "add")?;
    assert_eq!(add.call(&mut store, (40, 2))?, (42,));
    assert_eq!(add.call(&mut store, (u32::MAX, 2))?, (1,));
    let func = instance.get_func(&mut store, "add").unwrap();
    let mut out = [Val::Bool(false)];
    func.call(&mut store, &[Val::U32(7), Val::U32(8)], &mut out)?;
    assert_eq!(out[0], Val::U32(15));
    // Arguments of the wrong types, and Rust types that do not match, are refused.
    let err = func.call(&mut store, &[Val::S32(7), Val::U32(8)], &mut out);
    assert!(matches!(err, Err(Error::Usage(_))), "{err:?}");
    let err = instance.get_typed_func::<(u32,), (u32,)>(&mut store, "add");
    assert!(matches!(err, Err(Error::Usage(_))));
    Ok(())
}

#[test]
fn small_integers_wrap_and_bools_are_any_nonzero_value_when_lifted() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (core module $m
              (func (export "id") (param i32) (result i32) (local.get 0))
              (func (export "big") (result i32) (i32.const 0x1ff)))
            (core instance $i (instantiate $m))
            (func (export "s8") (param "x" s8) (result s8) (canon lift (core func $i "id")))
            (func (export "u8") (result u8) (canon lift (core func $i "big")))
            (func (export "s16") (result s16) (canon lift (core func $i "big")))
            (func (export "bool") (result bool) (canon lift (core func $i "big")))
            (func (export "char") (param "c" char) (result char) (canon lift (core func $i "id"))))"#,
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    let s8 = i.get_typed_func::<(i8,), (i8,)>(&mut store, "s8")?;
    assert_eq!(s8.call(&mut store, (-5,))?, (-5,));
    let u8f = i.get_typed_func::<(), (u8,)>(&mut store, "u8")?;
    assert_eq!(u8f.call(&mut store, ())?, (0xff,));
    let s16 = i.get_typed_func::<(), (i16,)>(&mut store, "s16")?;
    assert_eq!(s16.call(&mut store, ())?, (0x1ff,));
    let b = i.get_typed_func::<(), (bool,)>(&mut store, "bool")?;
    assert_eq!(b.call(&mut store, ())?, (true,));
    let ch = i.get_typed_func::<(char,), (char,)>(&mut store, "char")?;
    assert_eq!(ch.call(&mut store, ('😀',))?, ('😀',));
    Ok(())
}

#[test]
fn strings_go_in_through_realloc_and_come_back_through_a_return_pointer() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        &format!(
            r#"(component
            (core module $m
              {ALLOC}
              (data (i32.const 16) "hello, ")
              (global $posts (mut i32) (i32.const 0))
              (func (export "greet") (param $ptr i32) (param $len i32) (result i32)
                (local $out i32)
                (local.set $out (call $realloc (i32.const 0) (i32.const 0) (i32.const 1)
                  (i32.add (local.get $len) (i32.const 7))))
                (memory.copy (local.get $out) (i32.const 16) (i32.const 7))
                (memory.copy (i32.add (local.get $out) (i32.const 7)) (local.get $ptr)
                  (local.get $len))
                (i32.store (i32.const 0) (local.get $out))
                (i32.store (i32.const 4) (i32.add (local.get $len) (i32.const 7)))
                (i32.const 0))
              (func (export "post") (param i32)
                (global.set $posts (i32.add (global.get $posts) (i32.const 1))))
              (func (export "posts") (result i32) (global.get $posts)))
            (core instance $i (instantiate $m))
            (func (export "greet") (param "name" string) (result string)
              (canon lift (core func $i "greet") (memory (core memory $i "memory"))
                (realloc (core func $i "realloc")) (post-return (core func $i "post"))))
            (func (export "posts") (result u32) (canon lift (core func $i "posts"))))"#
        ),
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    let greet = i.get_typed_func::<(String,), (String,)>(&mut store, "greet")?;
    let posts = i.get_typed_func::<(), (u32,)>(&mut store, "posts")?;
    assert_eq!(greet.call(&mut store, ("wörld".into(),))?.0, "hello, wörld");
    assert_eq!(greet.call(&mut store, (String::new(),))?.0, "hello, ");
    assert_eq!(
        posts.call(&mut store, ())?,
        (2,),
        "post-return runs after each call"
    );
    Ok(())
}

/// A string's length as the guest sees it, under each string encoding.
#[test]
fn string_encodings_give_the_guest_the_lengths_the_abi_defines() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        &format!(
            r#"(component
            (core module $m
              {ALLOC}
              (func (export "len") (param i32 i32) (result i32) (local.get 1))
              ;; the first code unit, as UTF-16 (two bytes) or latin1 (one byte)
              (func (export "unit16") (param i32 i32) (result i32) (i32.load16_u (local.get 0)))
              (func (export "unit8") (param i32 i32) (result i32) (i32.load8_u (local.get 0))))
            (core instance $i (instantiate $m))
            (func (export "utf8") (param "s" string) (result u32)
              (canon lift (core func $i "len") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
            (func (export "utf16") (param "s" string) (result u32)
              (canon lift (core func $i "len") string-encoding=utf16 (memory (core memory $i "memory"))
                (realloc (core func $i "realloc"))))
            (func (export "compact") (param "s" string) (result u32)
              (canon lift (core func $i "len") string-encoding=latin1+utf16
                (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
            (func (export "first16") (param "s" string) (result u32)
              (canon lift (core func $i "unit16") string-encoding=utf16 (memory (core memory $i "memory"))
                (realloc (core func $i "realloc"))))
            (func (export "first-compact") (param "s" string) (result u32)
              (canon lift (core func $i "unit8") string-encoding=latin1+utf16
                (memory (core memory $i "memory")) (realloc (core func $i "realloc")))))"#
        ),
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    let len = |store: &mut Store<()>, name: &str, s: &str| -> anyhow::Result<u32> {
        let f = i.get_typed_func::<(String,), (u32,)>(&mut *store, name)?;
        Ok(f.call(&mut *store, (s.to_string(),))?.0)
    };
    // "héllo😀": 10 bytes of UTF-8, 7 UTF-16 code units (the emoji is a surrogate pair).
    assert_eq!(len(&mut store, "utf8", "héllo😀")?, 10);
    assert_eq!(len(&mut store, "utf16", "héllo😀")?, 7);
    assert_eq!(len(&mut store, "compact", "héllo😀")?, 7 | 1 << 31);
    assert_eq!(
        len(&mut store, "compact", "héllo")?,
        5,
        "latin1 when every char fits"
    );
    assert_eq!(len(&mut store, "first16", "é")?, 0xe9);
    assert_eq!(len(&mut store, "first-compact", "é")?, 0xe9);
    Ok(())
}

#[test]
fn host_functions_are_lowered_into_the_guest() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        &format!(
            r#"(component
            (import "double" (func $double (param "x" u32) (result u32)))
            (import "host" (instance $h
              (export "log" (func (param "msg" string)))))
            (core module $libc {ALLOC})
            (core instance $libc (instantiate $libc))
            (core func $double (canon lower (func $double)))
            (core func $log (canon lower (func $h "log") (memory (core memory $libc "memory"))))
            (core module $m
              (import "host" "double" (func $d (param i32) (result i32)))
              (import "host" "log" (func $log (param i32 i32)))
              (import "libc" "memory" (memory 1))
              (data (i32.const 100) "quad!")
              (func (export "quad") (param i32) (result i32)
                (call $log (i32.const 100) (i32.const 5))
                (call $d (call $d (local.get 0)))))
            (core instance $i (instantiate $m
              (with "host" (instance (export "double" (func $double)) (export "log" (func $log))))
              (with "libc" (instance $libc))))
            (func (export "quad") (param "x" u32) (result u32) (canon lift (core func $i "quad"))))"#
        ),
    );
    let mut linker = Linker::<Vec<String>>::new(&engine);
    linker
        .root()
        .func_wrap("double", |_, (x,): (u32,)| Ok((x * 2,)))?;
    linker
        .instance("host")?
        .func_new("log", |mut store, _ty, params, results| {
            assert!(results.is_empty());
            match &params[0] {
                Val::String(s) => store.data_mut().push(s.clone()),
                other => panic!("{other:?}"),
            }
            Ok(())
        })?;
    let mut store = Store::new(&engine, Vec::new());
    let i = linker.instantiate(&mut store, &c)?;
    let quad = i.get_typed_func::<(u32,), (u32,)>(&mut store, "quad")?;
    assert_eq!(quad.call(&mut store, (5,))?, (20,));
    assert_eq!(store.data(), &["quad!".to_string()]);

    // A host function's error traps the guest and reaches the caller.
    let mut failing = Linker::<Vec<String>>::new(&engine);
    failing
        .root()
        .func_wrap("double", |_, (_,): (u32,)| -> Result<(u32,), _> {
            Err("no doubling today".into())
        })?;
    failing
        .instance("host")?
        .func_new("log", |_, _, _, _| Ok(()))?;
    let i = failing.instantiate(&mut store, &c)?;
    let quad = i.get_typed_func::<(u32,), (u32,)>(&mut store, "quad")?;
    let err = quad.call(&mut store, (5,)).unwrap_err();
    assert!(format!("{err:?}").contains("no doubling today"), "{err:?}");
    Ok(())
}

#[test]
fn missing_and_mistyped_imports_are_link_errors() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (import "f" (func $f (param "x" u32) (result u32)))
            (core func $f (canon lower (func $f)))
            (core module $m (import "" "f" (func (param i32) (result i32))))
            (core instance (instantiate $m (with "" (instance (export "f" (func $f)))))))"#,
    );
    let mut store = Store::new(&engine, ());
    let err = Linker::new(&engine).instantiate(&mut store, &c).err();
    assert!(matches!(err, Some(Error::Link(_))), "{err:?}");
    let mut linker = Linker::new(&engine);
    linker.root().func_wrap("f", |_, (x,): (u64,)| Ok((x,)))?;
    let err = linker.instantiate(&mut store, &c).err();
    assert!(matches!(err, Some(Error::Link(_))), "{err:?}");
    let mut linker = Linker::new(&engine);
    linker.root().func_wrap("f", |_, (x,): (u32,)| Ok((x,)))?;
    linker.instantiate(&mut store, &c)?;
    Ok(())
}

/// The guest's `echo` takes a value of type `ty` (flattened to core `flat`), hands its core
/// values unchanged to the host's `echo`, and returns what the host stored at its return
/// pointer: the value goes host → guest memory → host → guest memory → host, through every
/// lowering and lifting of the type.
fn echo(ty: &str, flat: &str, values: &[Val]) -> anyhow::Result<()> {
    echo_with("", ty, flat, "", values)
}

/// As [`echo`], with `prelude` defining named types `ty` may use, and canonical options.
fn echo_with(
    prelude: &str,
    ty: &str,
    flat: &str,
    encoding: &str,
    values: &[Val],
) -> anyhow::Result<()> {
    let engine = Engine::default();
    let count = flat.split_whitespace().count();
    let gets: String = (0..count).map(|i| format!("(local.get {i}) ")).collect();
    let text = format!(
        r#"(component
            {prelude}
            (type $t0 {ty})
            (import "t" (type $t (eq $t0)))
            (import "echo" (func $echo (param "x" $t) (result $t)))
            (core module $libc {ALLOC})
            (core instance $libc (instantiate $libc))
            (core func $echo (canon lower (func $echo) {encoding} (memory (core memory $libc "memory"))
              (realloc (core func $libc "realloc"))))
            (core module $m
              (import "host" "echo" (func $echo (param {flat} i32)))
              (func (export "echo") (param {flat}) (result i32)
                (call $echo {gets} (i32.const 64))
                (i32.const 64)))
            (core instance $i (instantiate $m (with "host" (instance (export "echo" (func $echo))))))
            (func (export "echo") (param "x" $t) (result $t)
              (canon lift (core func $i "echo") {encoding} (memory (core memory $libc "memory"))
                (realloc (core func $libc "realloc")))))"#
    );
    let c = component(&engine, &text);
    let mut linker = Linker::<Vec<Val>>::new(&engine);
    linker
        .root()
        .func_new("echo", |mut store, _ty, params, results| {
            store.data_mut().push(params[0].clone());
            results[0] = params[0].clone();
            Ok(())
        })?;
    for v in values {
        let mut store = Store::new(&engine, Vec::new());
        let i = linker.instantiate(&mut store, &c)?;
        let f = i.get_func(&mut store, "echo").unwrap();
        let mut out = [Val::Bool(false)];
        f.call(&mut store, std::slice::from_ref(v), &mut out)?;
        assert_eq!(
            store.data(),
            std::slice::from_ref(v),
            "what the host got, for {ty}"
        );
        assert_eq!(&out[0], v, "what came back, for {ty}");
    }
    Ok(())
}

fn s(v: &str) -> Val {
    Val::String(v.into())
}

fn some(v: Val) -> Option<Box<Val>> {
    Some(Box::new(v))
}

#[test]
fn strings_and_lists_round_trip() -> anyhow::Result<()> {
    let strings = [s(""), s("a"), s("héllo 😀 wörld")];
    echo("string", "i32 i32", &strings)?;
    echo_with("", "string", "i32 i32", "string-encoding=utf16", &strings)?;
    echo_with(
        "",
        "string",
        "i32 i32",
        "string-encoding=latin1+utf16",
        &strings,
    )?;
    echo(
        "(list u32)",
        "i32 i32",
        &[
            Val::List(vec![]),
            Val::List((0..100).map(Val::U32).collect()),
        ],
    )?;
    echo(
        "(list (list string))",
        "i32 i32",
        &[Val::List(vec![
            Val::List(vec![s("x"), s("yz")]),
            Val::List(vec![]),
            Val::List(vec![s("")]),
        ])],
    )?;
    Ok(())
}

#[test]
fn records_tuples_and_flags_round_trip() -> anyhow::Result<()> {
    echo(
        r#"(record (field "a" u8) (field "b" string) (field "c" float64))"#,
        "i32 i32 i32 f64",
        &[Val::Record(vec![
            ("a".into(), Val::U8(200)),
            ("b".into(), s("bee")),
            ("c".into(), Val::Float64(-0.5)),
        ])],
    )?;
    echo(
        "(tuple u8 s64 char)",
        "i32 i64 i32",
        &[Val::Tuple(vec![
            Val::U8(1),
            Val::S64(i64::MIN),
            Val::Char('ß'),
        ])],
    )?;
    // Twenty flags take two bytes in memory.
    let flags: String = (0..20).map(|i| format!(" \"f{i}\"")).collect();
    echo_with(
        &format!(r#"(type $f0 (flags{flags})) (import "f" (type $f (eq $f0)))"#),
        "(tuple u32 $f)",
        "i32 i32",
        "",
        &[
            Val::Tuple(vec![Val::U32(1), Val::Flags(vec![])]),
            Val::Tuple(vec![
                Val::U32(2),
                Val::Flags(vec!["f0".into(), "f8".into(), "f19".into()]),
            ]),
        ],
    )?;
    // Seventeen fields: past sixteen core parameters, so the arguments travel through memory.
    let fields: String = (0..17).map(|i| format!(" (field \"x{i}\" u32)")).collect();
    echo(
        &format!("(record{fields})"),
        "i32",
        &[Val::Record(
            (0..17)
                .map(|i| (format!("x{i}"), Val::U32(i * 1000)))
                .collect(),
        )],
    )?;
    Ok(())
}

#[test]
fn variants_options_and_results_round_trip_through_joined_slots() -> anyhow::Result<()> {
    // Slots: the discriminant, then u32 ∪ string's pointer ∪ float64 = i64, then the string's
    // length.
    echo(
        r#"(variant (case "none") (case "num" u32) (case "text" string) (case "real" float64))"#,
        "i32 i64 i32",
        &[
            Val::Variant("none".into(), None),
            Val::Variant("num".into(), some(Val::U32(u32::MAX))),
            Val::Variant("text".into(), some(s("txt"))),
            Val::Variant("real".into(), some(Val::Float64(-1.25e300))),
        ],
    )?;
    // float32 ∪ u32 = i32.
    echo(
        r#"(variant (case "f" float32) (case "u" u32) (case "s" string))"#,
        "i32 i32 i32",
        &[
            Val::Variant("f".into(), some(Val::Float32(3.5))),
            Val::Variant("u".into(), some(Val::U32(7))),
        ],
    )?;
    echo(
        "(option string)",
        "i32 i32 i32",
        &[Val::Option(None), Val::Option(some(s("opt")))],
    )?;
    echo(
        "(result string (error u8))",
        "i32 i32 i32",
        &[
            Val::Result(Ok(some(s("fine")))),
            Val::Result(Err(some(Val::U8(9)))),
        ],
    )?;
    echo(
        "(list (option (result (error string))))",
        "i32 i32",
        &[Val::List(vec![
            Val::Option(None),
            Val::Option(some(Val::Result(Ok(None)))),
            Val::Option(some(Val::Result(Err(some(s("bad")))))),
        ])],
    )?;
    echo_with(
        r#"(type $e0 (enum "a" "b" "c")) (import "e" (type $e (eq $e0)))"#,
        "(tuple $e (option float32))",
        "i32 i32 f32",
        "",
        &[Val::Tuple(vec![
            Val::Enum("c".into()),
            Val::Option(some(Val::Float32(f32::MIN_POSITIVE))),
        ])],
    )?;
    Ok(())
}

#[test]
fn nested_components_instantiate_each_other_and_export_an_instance() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (core module $adder
              (func (export "add") (param i32 i32) (result i32)
                (i32.add (local.get 0) (local.get 1))))
            (component $inner
              (alias outer 1 $adder (core module $m))
              (core instance $i (instantiate $m))
              (func (export "add") (param "a" u32) (param "b" u32) (result u32)
                (canon lift (core func $i "add"))))
            (instance $a (instantiate $inner))
            (component $outer
              (import "add" (func $add (param "a" u32) (param "b" u32) (result u32)))
              (core func $add (canon lower (func $add)))
              (core module $m
                (import "x" "add" (func $add (param i32 i32) (result i32)))
                (func (export "sum3") (param i32 i32 i32) (result i32)
                  (call $add (call $add (local.get 0) (local.get 1)) (local.get 2))))
              (core instance $i (instantiate $m (with "x" (instance (export "add" (func $add))))))
              (func (export "sum3") (param "a" u32) (param "b" u32) (param "c" u32) (result u32)
                (canon lift (core func $i "sum3"))))
            (instance $b (instantiate $outer (with "add" (func $a "add"))))
            (export "api" (instance $b)))"#,
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    assert!(
        i.get_func(&mut store, "sum3").is_none(),
        "not an outer export"
    );
    let api = i.get_export_index(&mut store, None, "api").unwrap();
    let sum3 = i.get_export_index(&mut store, Some(&api), "sum3").unwrap();
    let f = i.get_typed_func::<(u32, u32, u32), (u32,)>(&mut store, &sum3)?;
    assert_eq!(f.call(&mut store, (1, 20, 300))?, (321,));
    assert_eq!(
        c.exported_funcs()
            .into_iter()
            .map(|(path, _)| path.join("/"))
            .collect::<Vec<_>>(),
        ["api/sum3"]
    );
    Ok(())
}

/// Every way a guest can break the ABI on its way out is an error of the call, never a
/// panic or a read outside its memory.
#[test]
fn a_guest_breaking_the_abi_gets_an_error() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        &format!(
            r#"(component
            (core module $m
              {ALLOC}
              (func (export "surrogate") (result i32) (i32.const 0xd800))
              (func (export "far-string") (result i32)
                (i32.store (i32.const 8) (i32.const 65530))
                (i32.store (i32.const 12) (i32.const 100))
                (i32.const 8))
              (func (export "misaligned") (result i32)
                (i32.store (i32.const 8) (i32.const 1025))
                (i32.store (i32.const 12) (i32.const 1))
                (i32.const 8))
              (func (export "bad-case") (result i32)
                (i32.store8 (i32.const 8) (i32.const 7))
                (i32.const 8))
              (func (export "bad-utf8") (result i32)
                (i32.store8 (i32.const 100) (i32.const 0xff))
                (i32.store (i32.const 8) (i32.const 100))
                (i32.store (i32.const 12) (i32.const 1))
                (i32.const 8))
              (func (export "far-retptr") (result i32) (i32.const 65535)))
            (core instance $i (instantiate $m))
            (func (export "surrogate") (result char) (canon lift (core func $i "surrogate")))
            (func (export "far-string") (result string)
              (canon lift (core func $i "far-string") (memory (core memory $i "memory"))))
            (func (export "misaligned") (result (list u32))
              (canon lift (core func $i "misaligned") (memory (core memory $i "memory"))))
            (func (export "bad-case") (result (option u64))
              (canon lift (core func $i "bad-case") (memory (core memory $i "memory"))))
            (func (export "bad-utf8") (result string)
              (canon lift (core func $i "bad-utf8") (memory (core memory $i "memory"))))
            (func (export "far-retptr") (result (tuple u32 u32))
              (canon lift (core func $i "far-retptr") (memory (core memory $i "memory")))))"#
        ),
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    for name in [
        "surrogate",
        "far-string",
        "misaligned",
        "bad-case",
        "bad-utf8",
        "far-retptr",
    ] {
        let f = i.get_func(&mut store, name).unwrap();
        let mut out = [Val::Bool(false)];
        let err = f.call(&mut store, &[], &mut out);
        assert!(matches!(err, Err(Error::Abi(_))), "{name}: {err:?}");
    }
    Ok(())
}

#[test]
fn what_is_not_supported_yet_is_refused_with_a_reason() {
    let engine = Engine::default();
    for (text, what) in [(
        r#"(component (import "f" (func $f)) (export "g" (func $f)))"#,
        "imported function",
    )] {
        match Component::new(&engine, text) {
            Err(Error::Unsupported(m)) => assert!(m.contains(what), "{m}"),
            Err(e) => panic!("{text}: {e}"),
            Ok(_) => panic!("{text}: accepted"),
        }
    }
    let err = Component::new(&engine, b"\0asm\x0d\0\x01\0garbage").err();
    assert!(matches!(err, Some(Error::Invalid(_))), "{err:?}");
    let err = Component::new(&engine, "(module)").err();
    assert!(matches!(err, Some(Error::Unsupported(_))), "{err:?}");
}

/// A variant's payload in a wider joined slot is zero-extended (the guest sees the slot).
#[test]
fn a_narrow_payload_in_a_wide_slot_is_zero_extended() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (type $v0 (variant (case "a" u32) (case "b" u64) (case "c" float32)))
            (export $v "v" (type $v0))
            (core module $m
              (func (export "slot") (param i32 i64) (result i64) (local.get 1)))
            (core instance $i (instantiate $m))
            (func (export "slot") (param "x" $v) (result u64)
              (canon lift (core func $i "slot"))))"#,
    );
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &c)?;
    let f = i.get_func(&mut store, "slot").unwrap();
    let mut out = [Val::Bool(false)];
    let a = Val::Variant("a".into(), Some(Box::new(Val::U32(u32::MAX))));
    f.call(&mut store, &[a], &mut out)?;
    assert_eq!(out[0], Val::U64(0xffff_ffff));
    let c = Val::Variant("c".into(), Some(Box::new(Val::Float32(-1.0))));
    f.call(&mut store, &[c], &mut out)?;
    assert_eq!(
        out[0],
        Val::U64(0xbf80_0000),
        "the float's bits, zero-extended"
    );
    Ok(())
}

/// What the host writes into one instance's memory (a string lowered through `realloc`) is
/// gone in the next instance of the same component, whose memory reuses the slot.
#[test]
fn what_the_host_lowered_into_one_instance_is_not_seen_by_the_next() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        &format!(
            r#"(component
            (core module $m
              {ALLOC}
              (func (export "take") (param i32 i32))
              (func (export "peek") (result i32)
                (i32.store (i32.const 8) (i32.const 1024))
                (i32.store (i32.const 12) (i32.const 16))
                (i32.const 8)))
            (core instance $i (instantiate $m))
            (func (export "take") (param "s" string)
              (canon lift (core func $i "take") (memory (core memory $i "memory"))
                (realloc (core func $i "realloc"))))
            (func (export "peek") (result (list u8))
              (canon lift (core func $i "peek") (memory (core memory $i "memory")))))"#
        ),
    );
    let linker = Linker::new(&engine);
    for round in 0..3 {
        let mut store = Store::new(&engine, ());
        let i = linker.instantiate(&mut store, &c)?;
        let peek = i.get_typed_func::<(), (Vec<u8>,)>(&mut store, "peek")?;
        assert_eq!(peek.call(&mut store, ())?.0, vec![0; 16], "round {round}");
        let take = i.get_typed_func::<(String,), ()>(&mut store, "take")?;
        take.call(&mut store, ("a secret string!".into(),))?;
        assert_eq!(peek.call(&mut store, ())?.0, b"a secret string!");
    }
    Ok(())
}

/// A component's artifact loads without compiling and runs as the component did; one sealed
/// with another key, changed anywhere, or cut short is refused with a reason.
#[test]
fn a_component_artifact_round_trips_and_is_refused_when_forged_or_damaged() -> anyhow::Result<()> {
    let engine = Engine::default();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/component.wat"
    ))?;
    let c = component(&engine, &text);
    let key = ephem_runtime::ArtifactKey::from_bytes([3; 32]);
    let bytes = c.to_artifact(&key)?;
    assert!(ephem_component::is_component_artifact(&bytes));
    let loaded = Component::from_artifact(&engine, &bytes, &key)?;
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &loaded)?;
    let greet = i.get_typed_func::<(String,), (String,)>(&mut store, "greet")?;
    assert_eq!(greet.call(&mut store, ("again".into(),))?.0, "hello, again");
    assert_eq!(
        loaded.exported_funcs().len(),
        c.exported_funcs().len(),
        "the same exports"
    );

    let refused = |bytes: &[u8], key: &ephem_runtime::ArtifactKey| match Component::from_artifact(
        &engine, bytes, key,
    ) {
        Err(Error::Artifact(why)) => why,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let other = ephem_runtime::ArtifactKey::from_bytes([4; 32]);
    assert!(refused(&bytes, &other).contains("sealed"));
    for at in [30, 55, 60, bytes.len() / 2, bytes.len() - 1] {
        let mut changed = bytes.clone();
        changed[at] ^= 1;
        assert!(refused(&changed, &key).contains("sealed"), "byte {at}");
    }
    assert!(!refused(&bytes[..bytes.len() - 10], &key).is_empty());
    assert!(!refused(&bytes[..40], &key).is_empty());
    assert!(refused(b"\0asm\x01\0\0\0", &key).contains("not a component artifact"));
    Ok(())
}

/// A component artifact opened from its file (`from_artifact_file`) runs, is kept while the
/// file is the one at its path, and a file replaced by another component's is noticed (asked
/// on every open here); a forged or cut file is refused.
#[test]
fn a_component_artifact_file_is_opened_in_place_and_replaced_files_are_noticed()
-> anyhow::Result<()> {
    ephem_runtime::Bundle::ask_kept_every(std::time::Duration::ZERO);
    let engine = Engine::default();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/component.wat"
    ))?;
    let key = ephem_runtime::ArtifactKey::from_bytes([5; 32]);
    let hello = component(&engine, &text).to_artifact(&key)?;
    let howdy =
        component(&engine, &text.replace("\"hello, \"", "\"howdy, \"")).to_artifact(&key)?;
    let dir = ephem_test_support::temp_dir();
    let path = dir.path().join("c.cwasm");
    let greet = |path: &std::path::Path| -> anyhow::Result<String> {
        let c = Component::from_artifact_file(&engine, path, &key)?;
        let mut store = Store::new(&engine, ());
        let i = Linker::new(&engine).instantiate(&mut store, &c)?;
        let greet = i.get_typed_func::<(String,), (String,)>(&mut store, "greet")?;
        Ok(greet.call(&mut store, ("you".into(),))?.0)
    };
    ephem_artifact::write_atomic(&path, &hello)?;
    assert_eq!(greet(&path)?, "hello, you");
    assert_eq!(greet(&path)?, "hello, you");
    ephem_artifact::write_atomic(&path, &howdy)?;
    assert_eq!(greet(&path)?, "howdy, you");

    let forged = dir.path().join("forged.cwasm");
    let mut changed = hello.clone();
    let last = changed.len() - 100;
    changed[last] ^= 1;
    ephem_artifact::write_atomic(&forged, &changed)?;
    let why = greet(&forged).unwrap_err().to_string();
    assert!(why.contains("sealed"), "{why}");
    let cut = dir.path().join("cut.cwasm");
    ephem_artifact::write_atomic(&cut, &hello[..hello.len() / 2])?;
    assert!(greet(&cut).is_err());
    Ok(())
}

/// A trap's backtrace names the core module as the component's name section names it, also
/// when the component is loaded from its artifact.
#[test]
fn a_trap_names_the_core_module_it_happened_in() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (core module $numbers
              (func $inner (unreachable))
              (func (export "boom") (result i32) (call $inner) (i32.const 1)))
            (core instance $i (instantiate $numbers))
            (func (export "boom") (result u32) (canon lift (core func $i "boom"))))"#,
    );
    let key = ephem_runtime::ArtifactKey::from_bytes([6; 32]);
    let loaded = Component::from_artifact(&engine, &c.to_artifact(&key)?, &key)?;
    for c in [c, loaded] {
        let mut store = Store::new(&engine, ());
        let i = Linker::new(&engine).instantiate(&mut store, &c)?;
        let boom = i.get_typed_func::<(), (u32,)>(&mut store, "boom")?;
        let trap = boom.call(&mut store, ()).unwrap_err().to_string();
        assert!(trap.contains("0: numbers!inner (function 0)"), "{trap}");
        assert!(trap.contains("1: numbers!function 1"), "{trap}");
    }
    Ok(())
}

/// A component whose parts instantiate their child twice, 40 levels deep (2^40 instances), is
/// refused at once instead of being flattened for ever.
#[test]
fn a_component_that_doubles_its_instances_at_each_level_is_refused() {
    let mut text = String::from("(component (component $c0)\n");
    for k in 1..=40 {
        text += &format!(
            "(component $c{k} (alias outer 1 $c{} (component $x)) \
             (instance (instantiate $x)) (instance (instantiate $x)))\n",
            k - 1
        );
    }
    text += "(instance (instantiate $c40)))";
    let started = std::time::Instant::now();
    match Component::new(&Engine::default(), &text) {
        Err(Error::Unsupported(m)) => assert!(m.contains("more than"), "{m}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    }
    assert!(
        started.elapsed().as_secs() < 10,
        "took {:?}",
        started.elapsed()
    );
}

/// A return pointer at the top of the address space is refused before anything is stored
/// (offsets past it would wrap).
#[test]
fn a_return_pointer_without_room_for_the_result_traps() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (import "pair" (func $pair (result (tuple u32 u32))))
            (core module $libc (memory (export "memory") 1))
            (core instance $libc (instantiate $libc))
            (core func $pair (canon lower (func $pair) (memory (core memory $libc "memory"))))
            (core module $m
              (import "" "pair" (func $pair (param i32)))
              (func (export "run") (call $pair (i32.const -8))))
            (core instance $i (instantiate $m (with "" (instance (export "pair" (func $pair))))))
            (func (export "run") (canon lift (core func $i "run"))))"#,
    );
    let mut linker = Linker::new(&engine);
    linker
        .root()
        .func_wrap("pair", |_, ()| Ok(((1u32, 2u32),)))?;
    let mut store = Store::new(&engine, ());
    let i = linker.instantiate(&mut store, &c)?;
    let run = i.get_typed_func::<(), ()>(&mut store, "run")?;
    let err = run.call(&mut store, ()).unwrap_err();
    assert!(format!("{err:?}").contains("no room"), "{err:?}");
    Ok(())
}

/// A type that is small in the binary but huge written out (an enum of 10 000 cases, in a
/// tuple of 100, in a tuple of 100) is refused when the component is compiled, at once.
#[test]
fn a_type_too_large_written_out_is_refused() {
    let cases: String = (0..10_000).map(|i| format!(" \"c{i}\"")).collect();
    let hundred = |t: &str| format!("(tuple{})", format!(" {t}").repeat(100));
    let text = format!(
        r#"(component
            (type $e0 (enum{cases})) (import "e" (type $e (eq $e0)))
            (type $t0 {}) (import "t" (type $t (eq $t0)))
            (type $u0 {}) (import "u" (type $u (eq $u0)))
            (import "f" (func $f (param "x" $u)))
            (core module $libc (memory (export "memory") 1))
            (core instance $libc (instantiate $libc))
            (core func (canon lower (func $f) (memory (core memory $libc "memory")))))"#,
        hundred("$e"),
        hundred("$t")
    );
    let started = std::time::Instant::now();
    match Component::new(&Engine::default(), &text) {
        Err(Error::Unsupported(m)) => assert!(m.contains("larger than"), "{m}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    }
    assert!(
        started.elapsed().as_secs() < 10,
        "took {:?}",
        started.elapsed()
    );
}

/// A guest that hands the host a list of 8 192 strings all naming the same 64 KiB (512 MiB
/// lifted from one page) gets an error, not a host that copies without end.
#[test]
fn lifting_more_than_a_call_may_take_is_an_error() -> anyhow::Result<()> {
    let engine = Engine::default();
    let c = component(
        &engine,
        r#"(component
            (import "take" (func $take (param "l" (list string))))
            (core module $libc (memory (export "memory") 2))
            (core instance $libc (instantiate $libc))
            (core func $take (canon lower (func $take) (memory (core memory $libc "memory"))))
            (core module $m
              (import "" "take" (func $take (param i32 i32)))
              (import "" "memory" (memory 2))
              (func (export "run")
                (local $i i32)
                (loop $fill
                  (i32.store (i32.mul (local.get $i) (i32.const 8)) (i32.const 0))
                  (i32.store (i32.add (i32.mul (local.get $i) (i32.const 8)) (i32.const 4))
                    (i32.const 65536))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br_if $fill (i32.lt_u (local.get $i) (i32.const 8192))))
                (call $take (i32.const 0) (i32.const 8192))))
            (core instance $i (instantiate $m (with "" (instance
              (export "take" (func $take)) (export "memory" (memory $libc "memory"))))))
            (func (export "run") (canon lift (core func $i "run"))))"#,
    );
    let mut linker = Linker::new(&engine);
    linker.root().func_new("take", |_, _, _, _| Ok(()))?;
    let mut store = Store::new(&engine, ());
    let i = linker.instantiate(&mut store, &c)?;
    let run = i.get_typed_func::<(), ()>(&mut store, "run")?;
    let err = run.call(&mut store, ()).unwrap_err();
    assert!(format!("{err:?}").contains("lifted in one call"), "{err:?}");
    Ok(())
}
