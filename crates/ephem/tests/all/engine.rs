//! Behaviour the spec suite does not cover: traps and host errors leave the engine usable,
//! runaway recursion is a trap, bad input gets clear errors, host
//! faults are not swallowed, and real-world modules load.

use ephem::{
    Engine, Error, ErrorKind, Func, FuncType, Instance, Linker, Module, Store, TrapKind, Val,
    ValType,
};

fn instantiate(store: &mut Store<()>, wat: &str) -> Instance {
    let module = Module::new(store.engine(), wat.as_bytes()).unwrap();
    Linker::new(store.engine())
        .instantiate(store, &module)
        .unwrap()
}

fn call(
    store: &mut Store<()>,
    instance: &Instance,
    name: &str,
    args: &[Val],
) -> Result<Vec<Val>, Error> {
    let func = instance
        .get_func(&mut *store, name)
        .ok_or_else(|| Error::Usage(format!("no export {name}")))?;
    let mut results: Vec<Val> = func
        .ty(&*store)
        .results
        .iter()
        .map(|&t| Val::default_for(t))
        .collect();
    func.call(store, args, &mut results)?;
    Ok(results)
}

fn trap_kind(r: Result<Vec<Val>, Error>) -> TrapKind {
    match r {
        Err(Error::Trap(t)) => t.kind,
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn a_trap_leaves_the_engine_usable() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let inst = instantiate(
        &mut store,
        r#"(module (memory 1)
             (func (export "div") (param i32 i32) (result i32) (i32.div_s (local.get 0) (local.get 1)))
             (func (export "load") (param i32) (result i32) (i32.load (local.get 0))))"#,
    );
    for i in 1..50 {
        assert_eq!(
            trap_kind(call(&mut store, &inst, "div", &[Val::I32(i), Val::I32(0)])),
            TrapKind::IntegerDivisionByZero
        );
        assert_eq!(
            trap_kind(call(&mut store, &inst, "load", &[Val::I32(65536 - 3)])),
            TrapKind::MemoryOutOfBounds
        );
        let r = call(&mut store, &inst, "div", &[Val::I32(i * 6), Val::I32(3)]).unwrap();
        assert!(matches!(r[..], [Val::I32(v)] if v == i * 2));
    }
    // A trap names where it happened.
    let Err(Error::Trap(t)) = call(&mut store, &inst, "div", &[Val::I32(1), Val::I32(0)]) else {
        panic!()
    };
    assert_eq!(t.func, Some(0));
    assert!(t.to_string().contains("integer divide by zero"), "{t}");
}

fn host_import_instance(store: &mut Store<()>, linker: &Linker<()>) -> Instance {
    let module = Module::new(
        store.engine(),
        br#"(module (import "host" "f" (func $f (param i32) (result i32)))
             (func (export "go") (param i32) (result i32) (i32.add (call $f (local.get 0)) (i32.const 1))))"#,
    )
    .unwrap();
    linker.instantiate(store, &module).unwrap()
}

#[test]
fn host_function_errors_are_traps_that_carry_them() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let ty = FuncType {
        params: vec![ValType::I32],
        results: vec![ValType::I32],
    };
    let mut linker = Linker::new(&engine);
    linker
        .func_new("host", "f", ty, |_, args, results| match args[0] {
            Val::I32(0) => Err("the host says no".into()),
            Val::I32(v) => {
                results[0] = Val::I32(v * 10);
                Ok(())
            }
            _ => unreachable!(),
        })
        .unwrap();
    let inst = host_import_instance(&mut store, &linker);
    for round in 0..3 {
        let r = call(&mut store, &inst, "go", &[Val::I32(4 + round)]).unwrap();
        assert!(matches!(r[..], [Val::I32(v)] if v == (4 + round) * 10 + 1));
        let Err(Error::Trap(t)) = call(&mut store, &inst, "go", &[Val::I32(0)]) else {
            panic!("no trap")
        };
        assert_eq!(t.kind, TrapKind::HostError);
        assert_eq!(t.host_error().unwrap().to_string(), "the host says no");
    }
}

#[test]
fn host_function_returning_the_wrong_types_is_an_error() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let ty = FuncType {
        params: vec![ValType::I32],
        results: vec![ValType::I32],
    };
    let mut linker = Linker::new(&engine);
    linker
        .func_new("host", "f", ty, |_, _, results| {
            results[0] = Val::I64(1);
            Ok(())
        })
        .unwrap();
    let inst = host_import_instance(&mut store, &linker);
    assert_eq!(
        trap_kind(call(&mut store, &inst, "go", &[Val::I32(5)])),
        TrapKind::HostError
    );
}

#[test]
fn infinite_recursion_is_a_stack_overflow_trap() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let inst = instantiate(
        &mut store,
        r#"(module
             (func $f (export "f") (param i64) (result i64) (i64.add (call $f (local.get 0)) (i64.const 1)))
             (func $g (export "g") (param f64 f64 f64 f64 f64 f64 f64 f64 f64 f64) (result f64)
               (call $g (local.get 0) (local.get 1) (local.get 2) (local.get 3) (local.get 4)
                        (local.get 5) (local.get 6) (local.get 7) (local.get 8) (local.get 9)))
             (func (export "ok") (result i32) (i32.const 5)))"#,
    );
    for _ in 0..5 {
        assert_eq!(
            trap_kind(call(&mut store, &inst, "f", &[Val::I64(0)])),
            TrapKind::StackOverflow
        );
        let args: Vec<Val> = (0..10).map(|i| Val::F64((i as f64).to_bits())).collect();
        assert_eq!(
            trap_kind(call(&mut store, &inst, "g", &args)),
            TrapKind::StackOverflow
        );
        assert!(matches!(
            call(&mut store, &inst, "ok", &[]).unwrap()[..],
            [Val::I32(5)]
        ));
    }
    // The same on a thread with a small stack: the limit follows the thread.
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let engine = Engine::default();
            let mut store = Store::new(&engine, ());
            let inst = instantiate(&mut store, r#"(module (func $f (export "f") (call $f)))"#);
            assert_eq!(
                trap_kind(call(&mut store, &inst, "f", &[])),
                TrapKind::StackOverflow
            );
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn every_instance_starts_from_fresh_state() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        br#"(module (memory (export "m") 1) (global $g (mut i32) (i32.const 0))
             (func (export "peek") (result i32) (i32.add (i32.load (i32.const 100)) (global.get $g)))
             (func (export "poke") (i32.store (i32.const 100) (i32.const 0x5ec12e7)) (global.set $g (i32.const 1))))"#,
    )
    .unwrap();
    for _ in 0..20 {
        let mut store = Store::new(&engine, ());
        let inst = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap();
        assert!(matches!(
            call(&mut store, &inst, "peek", &[]).unwrap()[..],
            [Val::I32(0)]
        ));
        call(&mut store, &inst, "poke", &[]).unwrap();
        assert!(matches!(
            call(&mut store, &inst, "peek", &[]).unwrap()[..],
            [Val::I32(0x5ec12e8)]
        ));
    }
}

#[test]
fn bad_input_gets_precise_errors() {
    let engine = Engine::default();
    // Malformed bytes, invalid modules, proposals ephem does not implement.
    for bytes in [
        &b"\0asm\x01\0\0\0\x01"[..],
        b"not wasm at all",
        b"\0asm\x02\0\0\0",
    ] {
        let e = Module::new(&engine, bytes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Compile, "{e}");
    }
    let e = Module::new(&engine, b"(module (func (result i32) (i64.const 1)))").unwrap_err();
    assert!(e.to_string().contains("type mismatch"), "{e}");
    let gc = br#"(module (type $s (struct (field i32)))
      (func (result (ref $s)) (struct.new $s (i64.const 1))))"#;
    let e = Module::new(&engine, gc).unwrap_err();
    assert!(e.to_string().contains("type mismatch"), "{e}");

    // A missing import names the import and its type.
    let module = Module::new(
        &engine,
        br#"(module (import "env" "log" (func (param i32))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let Err(Error::Link(msg)) = Linker::new(&engine).instantiate(&mut store, &module) else {
        panic!("linked")
    };
    assert!(
        msg.contains("`env`.`log`") && msg.contains("(func (param i32))"),
        "{msg}"
    );
    // So does an import of the wrong type, from a linker or given directly.
    let mut linker = Linker::new(&engine);
    linker.func_wrap("env", "log", |_: i64| {}).unwrap();
    let Err(Error::Link(msg)) = linker.instantiate(&mut store, &module) else {
        panic!("linked")
    };
    assert!(
        msg.contains("incompatible") && msg.contains("`env`.`log`"),
        "{msg}"
    );
    let wrong = Func::wrap(&mut store, |_: i64| {});
    let Err(Error::Link(msg)) = Instance::new(&mut store, &module, &[wrong.into()]) else {
        panic!("linked")
    };
    assert!(
        msg.contains("incompatible") && msg.contains("`env`.`log`"),
        "{msg}"
    );

    // Absent exports and wrong argument types.
    let inst = instantiate(&mut store, r#"(module (func (export "f") (param i32)))"#);
    assert!(inst.get_func(&mut store, "nope").is_none());
    let e = inst
        .get_typed_func::<(), ()>(&mut store, "nope")
        .unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    let e = call(&mut store, &inst, "f", &[Val::I64(1)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
}

/// Runs `test` (a test of this module) in a child process (this test binary, filtered to
/// `test`) with `EPHEM_CHILD` set.
fn child_status(test: &str) -> std::process::ExitStatus {
    // The harness names a test by its path below the crate root: `engine::test` in the binary
    // that holds this module beside others.
    let name = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    };
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env("EPHEM_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
}

#[test]
fn a_fault_in_host_code_still_crashes_the_process() {
    if std::env::var_os("EPHEM_CHILD").is_some() {
        // Make sure our handlers are installed and have handled a trap, then fault outside
        // wasm code.
        let engine = Engine::default();
        let mut store = Store::new(&engine, ());
        let inst = instantiate(
            &mut store,
            r#"(module (memory 1) (func (export "t") (drop (i32.load (i32.const 70000)))))"#,
        );
        assert_eq!(
            trap_kind(call(&mut store, &inst, "t", &[])),
            TrapKind::MemoryOutOfBounds
        );
        // SAFETY: deliberately invalid: the point of the test.
        unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let status = child_status("a_fault_in_host_code_still_crashes_the_process");
    assert_eq!(
        status.signal(),
        Some(libc_sigsegv()),
        "child ended with {status:?}"
    );
}

fn libc_sigsegv() -> i32 {
    11
}

#[test]
fn real_world_modules_compile_and_instantiate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    if !dir.is_dir() {
        println!(
            "skipped: {} is absent (it lives beside the checkout)",
            dir.display()
        );
        return;
    }
    let engine = Engine::default();
    for name in ["png.wasm", "zstd.wasm", "quickjs.wasm"] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let module = Module::new(&engine, &bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut store = Store::new(&engine, ());
        let inst = Linker::new(&engine)
            .define_unknown_imports_as_traps(&module)
            .unwrap()
            .instantiate(&mut store, &module)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            !inst.exports(&mut store).is_empty(),
            "{name} exports nothing"
        );
    }
}

#[test]
fn typed_calls_check_the_signature_once_and_call_directly() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let inst = instantiate(
        &mut store,
        r#"(module (memory (export "mem") 1)
             (func (export "mix") (param i32 i64 f32 f64) (result f64 i32)
               (f64.add (f64.convert_i64_s (local.get 1)) (f64.add (f64.promote_f32 (local.get 2)) (local.get 3)))
               (local.get 0))
             (func (export "store") (param i32 i32) (i32.store (local.get 0) (local.get 1))))"#,
    );
    let mix = inst
        .get_typed_func::<(i32, i64, f32, f64), (f64, i32)>(&mut store, "mix")
        .unwrap();
    assert_eq!(
        mix.call(&mut store, (7, 10, 0.5, 0.25)).unwrap(),
        (10.75, 7)
    );
    assert!(
        inst.get_typed_func::<(i32,), i32>(&mut store, "mix")
            .is_err()
    );
    let poke = inst
        .get_typed_func::<(i32, i32), ()>(&mut store, "store")
        .unwrap();
    poke.call(&mut store, (8, 0x01020304)).unwrap();
    let mem = inst.get_memory(&mut store, "mem").expect("a memory");
    let mut buf = [0u8; 4];
    mem.read(&store, 8, &mut buf).unwrap();
    assert_eq!(buf, [4, 3, 2, 1]);
    mem.write(&mut store, 8, &[9, 0, 0, 0]).unwrap();
    assert_eq!(mem.data(&store)[8..12], [9, 0, 0, 0]);
    assert!(
        mem.read(&store, 65535, &mut buf).is_err(),
        "reads past the end are refused"
    );
    assert_eq!(
        trap_kind(poke.call(&mut store, (65534, 1)).map(|()| vec![])),
        TrapKind::MemoryOutOfBounds
    );
}

#[test]
fn a_trap_has_a_backtrace_named_from_the_name_section() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let inst = instantiate(
        &mut store,
        r#"(module
             (func $inner (param i32) (result i32) (i32.div_u (i32.const 1) (local.get 0)))
             (func $middle (param i32) (result i32) (i32.add (call $inner (local.get 0)) (i32.const 1)))
             (func (export "outer") (param i32) (result i32) (i32.add (call $middle (local.get 0)) (i32.const 1)))
             (func $deep (export "deep") (call $deep)))"#,
    );
    let Err(Error::Trap(t)) = call(&mut store, &inst, "outer", &[Val::I32(0)]) else {
        panic!("no trap")
    };
    let frames: Vec<(u32, Option<&str>)> = t
        .backtrace()
        .iter()
        .map(|f| (f.func, f.name.as_deref()))
        .collect();
    assert_eq!(
        frames,
        [(0, Some("inner")), (1, Some("middle")), (2, None)],
        "{t}"
    );
    let shown = t.to_string();
    assert!(shown.contains("0: inner (function 0)"), "{shown}");
    assert!(shown.contains("2: function 2"), "{shown}");
    // Deep recursion: the innermost frames, as many as are kept.
    let Err(Error::Trap(t)) = call(&mut store, &inst, "deep", &[]) else {
        panic!("no trap")
    };
    assert_eq!(t.kind, TrapKind::StackOverflow);
    assert!(t.backtrace().len() >= 30, "{t}");
    assert!(t.backtrace().iter().all(|f| f.func == 3), "{t}");
}

/// `unreachable` and a failed bounds check end the call without a signal (generated code
/// raises the trap itself), with the kind and backtrace a trap by signal has; a division by
/// zero still arrives as one. (The module grows its memory, so that its accesses are checked:
/// faults bound those of a memory it never grows, see `bounds_checks.rs`.)
#[test]
fn unreachable_and_failed_checks_trap_without_a_signal() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let inst = instantiate(
        &mut store,
        r#"(module (memory 1)
             (func $inner (param i32) (result i32)
               (if (local.get 0) (then unreachable))
               (i32.const 7))
             (func (export "outer") (param i32) (result i32)
               (i32.add (call $inner (local.get 0)) (i32.const 1)))
             (func (export "first") unreachable)
             (func $sum (param $at i32) (result i32) (local $s i32)
               (loop $l
                 (local.set $s (i32.add (local.get $s) (i32.load (local.get $at))))
                 (local.set $at (i32.add (local.get $at) (i32.const 4096)))
                 (br_if $l (i32.lt_u (local.get $at) (i32.const 65536))))
               (local.get $s))
             (func (export "sum") (param i32) (result i32)
               (i32.add (call $sum (local.get 0)) (i32.const 1)))
             (func (export "div") (param i32) (result i32)
               (i32.div_u (i32.const 1) (local.get 0)))
             (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
    );
    let signals = ephem::trap_signals();
    for _ in 0..3 {
        let Err(Error::Trap(t)) = call(&mut store, &inst, "outer", &[Val::I32(1)]) else {
            panic!("no trap")
        };
        assert_eq!(t.kind, TrapKind::Unreachable);
        let frames: Vec<u32> = t.backtrace().iter().map(|f| f.func).collect();
        assert_eq!(frames, [0, 1], "{t}");
        assert_eq!(t.func, Some(0), "{t}");
        // The function goes on where it does not trap.
        assert_eq!(
            call(&mut store, &inst, "outer", &[Val::I32(0)]).unwrap()[0].i32(),
            Some(8)
        );
        // `unreachable` first in a function (in its entry block).
        assert_eq!(
            trap_kind(call(&mut store, &inst, "first", &[])),
            TrapKind::Unreachable
        );
        // A load in a loop walks off the end of the memory (its last one starts at 65535), in
        // a function called by another.
        let Err(Error::Trap(t)) = call(&mut store, &inst, "sum", &[Val::I32(4095)]) else {
            panic!("no trap")
        };
        assert_eq!(t.kind, TrapKind::MemoryOutOfBounds, "{t}");
        let frames: Vec<u32> = t.backtrace().iter().map(|f| f.func).collect();
        assert_eq!(frames, [3, 4], "{t}");
        assert_eq!(t.func, Some(3), "{t}");
        // Within bounds it runs on (the last load starts at 61440).
        assert_eq!(
            call(&mut store, &inst, "sum", &[Val::I32(0)]).unwrap()[0].i32(),
            Some(1)
        );
    }
    assert_eq!(ephem::trap_signals(), signals, "a trap came as a signal");
    assert_eq!(
        trap_kind(call(&mut store, &inst, "div", &[Val::I32(0)])),
        TrapKind::IntegerDivisionByZero
    );
    assert_eq!(
        ephem::trap_signals(),
        signals + 1,
        "the division came as a signal"
    );
}

/// Every shape of failed check the compiler emits raises its trap without a signal, from the
/// function that failed: a constant address (compared with an immediate), a store with an
/// offset, a wide vector load, a function with arguments on the stack, one whose values are
/// spilled to a large frame, one that checks after a call, and after the memory grew (the
/// length is reloaded). Each also runs within bounds, so a check sent to the wrong place would
/// show either way.
#[test]
fn every_shape_of_failed_check_traps_without_a_signal() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let many: String = (0..20).map(|i| format!("(local $v{i} i64) ")).collect();
    let set: String = (0..20)
        .map(|i| {
            format!(
                "(local.set $v{i} (i64.add (local.get $v{i}) (i64.extend_i32_u (local.get $at))))"
            )
        })
        .collect();
    let sum: String = (0..20)
        .map(|i| format!("(local.get $v{i}) i64.add "))
        .collect();
    let wat = format!(
        r#"(module (memory 1 3)
             (func (export "constant") (param i32) (result i32)
               (i32.add (local.get 0) (i32.load (i32.const 200000))))
             (func (export "store") (param i32)
               (i64.store offset=8 (local.get 0) (i64.const 1)))
             (func (export "vector") (param i32) (result i32)
               (i32x4.extract_lane 0 (v128.load (local.get 0))))
             (func $deep (param i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i32) (result i32)
               (i32.load (local.get 11)))
             (func (export "stack_args") (param i32) (result i32)
               (call $deep (i64.const 1) (i64.const 2) (i64.const 3) (i64.const 4)
                 (i64.const 5) (i64.const 6) (i64.const 7) (i64.const 8) (i64.const 9)
                 (i64.const 10) (i64.const 11) (local.get 0)))
             (func (export "spilled") (param $at i32) (result i64) {many}
               (loop $l
                 {set}
                 (drop (i32.load (local.get $at)))
                 (local.set $at (i32.add (local.get $at) (i32.const 8192)))
                 (br_if $l (i32.lt_u (local.get $at) (i32.const 200000))))
               (i64.const 0) {sum})
             (func $id (param i32) (result i32) (local.get 0))
             (func (export "after_call") (param i32) (result i32)
               (i32.load (call $id (local.get 0))))
             (func (export "grown") (param i32) (result i32)
               (drop (memory.grow (i32.const 1)))
               (i32.load (local.get 0))))"#
    );
    let inst = instantiate(&mut store, &wat);
    let signals = ephem::trap_signals();
    // (export, argument that traps, its function, argument that does not)
    let cases: [(&str, i32, u32, i32); 6] = [
        // 1 + 8192 * 7 = 57345, then 65537: past the end of the one page (before "grown").
        ("spilled", 1, 5, 0),
        ("store", 65521, 1, 65520),
        ("vector", 65521, 2, 65520),
        ("stack_args", 65533, 3, 65532),
        ("after_call", 65533, 7, 65532),
        ("grown", 3 * 65536 - 3, 8, 65536),
    ];
    for (name, bad, func, good) in cases {
        let Err(Error::Trap(t)) = call(&mut store, &inst, name, &[Val::I32(bad)]) else {
            panic!("{name}: no trap")
        };
        assert_eq!(t.kind, TrapKind::MemoryOutOfBounds, "{name}: {t}");
        assert_eq!(t.func, Some(func), "{name}: {t}");
        if name != "spilled" {
            call(&mut store, &inst, name, &[Val::I32(good)]).unwrap();
        }
    }
    let Err(Error::Trap(t)) = call(&mut store, &inst, "constant", &[Val::I32(0)]) else {
        panic!("constant: no trap")
    };
    assert_eq!((t.kind, t.func), (TrapKind::MemoryOutOfBounds, Some(0)));
    assert_eq!(ephem::trap_signals(), signals, "a trap came as a signal");
}

/// A failed check finds what raises its trap through the frames of its own text (each
/// instance loads one), up to the entry stub. Called from another instance's code, of the same
/// module or another, whose frames it does not follow, it traps by signal instead, as before,
/// with the same kind and backtrace.
#[test]
fn a_failed_check_called_from_another_instance_or_module_traps_correctly() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let callee = r#"(module
         (import "other" "load" (func $other (param i32) (result i32)))
         (memory 1)
         (func (export "load") (param i32) (result i32) (i32.load (local.get 0)))
         (func (export "call_other") (param i32) (result i32)
           (i32.add (call $other (local.get 0)) (i32.const 1))))"#;
    let caller = r#"(module
         (import "other" "load" (func $other (param i32) (result i32)))
         (func (export "call_other") (param i32) (result i32)
           (i32.add (call $other (local.get 0)) (i32.const 1))))"#;
    let module = Module::new(&engine, callee.as_bytes()).unwrap();
    let first = {
        let mut linker = Linker::new(&engine);
        linker
            .func_wrap("other", "load", |_: i32| -> i32 { 0 })
            .unwrap();
        linker.instantiate(&mut store, &module).unwrap()
    };
    let mut linker = Linker::new(&engine);
    linker.instance(&mut store, "other", first).unwrap();
    let second = linker.instantiate(&mut store, &module).unwrap();
    let other = Module::new(&engine, caller.as_bytes()).unwrap();
    let third = linker.instantiate(&mut store, &other).unwrap();
    for (instance, caller) in [(second, 2), (third, 1)] {
        let signals = ephem::trap_signals();
        let Err(Error::Trap(t)) = call(&mut store, &instance, "call_other", &[Val::I32(65533)])
        else {
            panic!("no trap")
        };
        assert_eq!(t.kind, TrapKind::MemoryOutOfBounds, "{t}");
        let frames: Vec<u32> = t.backtrace().iter().map(|f| f.func).collect();
        assert_eq!(frames, [1, caller], "{t}");
        assert_eq!(ephem::trap_signals(), signals + 1, "{t}");
        assert_eq!(
            call(&mut store, &instance, "call_other", &[Val::I32(65532)]).unwrap()[0].i32(),
            Some(1)
        );
    }
}

#[test]
fn a_host_error_backtrace_starts_at_the_calling_wasm_function() {
    let engine = Engine::default();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("host", "fail", || -> Result<(), Error> {
            Err(Error::Usage("no".into()))
        })
        .unwrap();
    let module = Module::new(
        &engine,
        br#"(module (import "host" "fail" (func $fail))
             (func $calls_host (call $fail))
             (func (export "run") (call $calls_host)))"#,
    )
    .unwrap();
    let inst = linker.instantiate(&mut store, &module).unwrap();
    let Err(Error::Trap(t)) = call(&mut store, &inst, "run", &[]) else {
        panic!("no trap")
    };
    let funcs: Vec<u32> = t.backtrace().iter().map(|f| f.func).collect();
    assert_eq!(funcs, [1, 2], "{t}");
    assert_eq!(t.backtrace()[0].name.as_deref(), Some("calls_host"));
}

#[test]
fn the_wasm_stack_size_is_configurable_and_exhaustion_stays_a_trap() {
    let wat = r#"(module
        (func $down (export "down") (param i32) (result i32)
          (if (result i32) (i32.eqz (local.get 0))
            (then (i32.const 0))
            (else (i32.add (call $down (i32.sub (local.get 0) (i32.const 1))) (i32.const 1))))))"#;
    let depth = |max_wasm_stack: usize, n: i32| {
        let engine = Engine::with_config(ephem::EngineConfig {
            max_wasm_stack: Some(max_wasm_stack),
            ..ephem::EngineConfig::default()
        })
        .unwrap();
        assert_eq!(engine.max_wasm_stack(), max_wasm_stack);
        let mut store = Store::new(&engine, ());
        let inst = instantiate(&mut store, wat);
        call(&mut store, &inst, "down", &[Val::I32(n)])
    };
    // 20 000 frames fit in 1 MiB but not in 64 KiB; either way the thread survives.
    assert!(matches!(
        depth(1 << 20, 20_000).unwrap()[..],
        [Val::I32(20_000)]
    ));
    assert_eq!(trap_kind(depth(64 << 10, 20_000)), TrapKind::StackOverflow);
    assert!(matches!(depth(64 << 10, 100).unwrap()[..], [Val::I32(100)]));
}

/// The text's layout (`layout_order` in the compiler): trampolines and host adapters first, then
/// the exported functions in export order, then what they call, depth first in call-site order,
/// then the rest by index.
#[test]
fn the_text_puts_what_calls_reach_first_and_callees_after_their_callers() {
    let compiled = ephem::Compiler::new()
        .unwrap()
        .compile(
            br#"(module
              (table 1 funcref) (elem (i32.const 0) $f6)
              (func $f0 (result i32) i32.const 0 i32.const 1 i32.add)
              (func $f1 (result i32) i32.const 1)
              (func $f2 (result i32) call $f4)
              (func $f3 (export "first") (result i32) call $f2 call $f1 i32.add)
              (func $f4 (result i32) i32.const 4)
              (func $f5 (export "second") (result i32) i32.const 5)
              (func $f6 (result i32) i32.const 6)
              (export "second again" (func $f5)))"#,
        )
        .unwrap();
    let mut by_offset: Vec<usize> = (0..compiled.funcs.len()).collect();
    by_offset.sort_by_key(|&i| compiled.funcs[i].offset);
    assert_eq!(by_offset, [3, 5, 2, 4, 1, 0, 6]);
    let first_func = compiled.funcs.iter().map(|f| f.offset).min().unwrap();
    let entries = compiled.trampolines.iter().chain(&compiled.host_adapters);
    assert!(entries.clone().count() > 0);
    assert!(entries.clone().all(|&t| t < first_func));
}

#[test]
fn compiling_lays_functions_out_the_same_whatever_order_threads_take_them() {
    // Bodies grow towards the end of the module, so threads that take the largest first
    // compile them in reverse; each function calls the one before it.
    let mut wat = String::from("(module (func $f0 (result i32) i32.const 1)\n");
    for i in 1..64 {
        wat.push_str(&format!("(func $f{i} (result i32) call $f{}", i - 1));
        for _ in 0..i * 8 {
            wat.push_str(" i32.const 1 i32.add");
        }
        wat.push_str(")\n");
    }
    wat.push_str("(export \"last\" (func $f63)))");
    let compiler = ephem::Compiler::new().unwrap();
    let first = compiler.compile(wat.as_bytes()).unwrap();
    for _ in 0..3 {
        assert_eq!(compiler.compile(wat.as_bytes()).unwrap(), first);
    }
    // The export calls the one before it, which calls the one before it...: depth first.
    assert!(first.funcs.windows(2).all(|w| w[0].offset > w[1].offset));
    // 1 + the sum of 8i over i in 1..64.
    let mut store = Store::new(&Engine::default(), ());
    let instance = instantiate(&mut store, &wat);
    let r = call(&mut store, &instance, "last", &[]).unwrap();
    assert!(matches!(r[..], [Val::I32(n)] if n == 1 + 8 * (63 * 64 / 2)));
}

/// A large signature (past the small ids) gets its id from each engine's registry: an
/// artifact opened again by the engine that loaded it takes the ids it remembered, and one
/// loaded by another engine, whose registry numbers the signature otherwise, takes that
/// engine's (its exports' types and its `call_indirect` checks stay right).
#[test]
fn an_artifact_shared_by_two_engines_has_each_engines_type_ids() {
    const LARGE: &str = "(param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)";
    let wat = format!(
        r#"(module
          (type $t (func {LARGE}))
          (table 1 funcref) (elem (i32.const 0) $sum)
          (func $sum (export "sum") (type $t)
            (i32.add (local.get 0) (local.get 9)))
          (func (export "run") (result i32)
            (call_indirect (type $t) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 0)
              (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
              (i32.const 41) (i32.const 0))))"#
    );
    let (first, second) = (Engine::default(), Engine::default());
    // The second engine registers another large signature first, so its ids differ.
    let other = r#"(module (func (export "f")
      (param i64 i64 i64 i64 i64 i64 i64 i64 i64 i64)))"#;
    let mut store = Store::new(&second, ());
    let f = instantiate(&mut store, other)
        .get_func(&mut store, "f")
        .unwrap();
    assert_eq!(f.ty(&store).params, vec![ValType::I64; 10]);

    let artifact = Module::new(&first, wat.as_bytes())
        .unwrap()
        .artifact()
        .clone();
    for engine in [&first, &second, &first, &second] {
        let module = ephem::Module::from_artifact(engine, artifact.clone());
        let mut store = Store::new(engine, ());
        let instance = Linker::new(engine)
            .instantiate(&mut store, &module)
            .unwrap();
        let sum = instance.get_func(&mut store, "sum").unwrap();
        let ty = sum.ty(&store);
        assert_eq!(
            (ty.params, ty.results),
            (vec![ValType::I32; 10], vec![ValType::I32])
        );
        assert_eq!(
            call(&mut store, &instance, "run", &[]).unwrap()[0].i32(),
            Some(42)
        );
    }
}

/// `Compiler::with_clif_dir` writes each defined function's IR as translated, and that IR
/// reaches a join of many branches with the branches' values as its only parameters: locals
/// the branches leave alone are not passed along. (The translator seals each block once its
/// predecessors are known; sealed only at the end, every block of a switch passed every local
/// on, which register allocation paid for at each of its edges.)
#[test]
fn translated_ir_is_written_and_joins_pass_only_branch_values() {
    // A switch: a `br_table` to 64 nested blocks, each of which sends a constant to `$join`.
    let cases = 64;
    let mut body = String::from("(br_table");
    for c in 0..cases {
        body.push_str(&format!(" {c}"));
    }
    body.push_str(" 0 (local.get $x))");
    for c in 0..cases {
        body = format!("(block {body}) (br $join (i32.const {c}))");
    }
    let wat = format!(
        r#"(module
          (import "env" "f" (func))
          (func (param $x i32) (param $y i32) (result i32) (local $z i64)
            (local.set $z (i64.extend_i32_u (local.get $y)))
            (block $join (result i32) {body} (i32.const -1))
            (i32.add (local.get $y))
            (i32.add (i32.wrap_i64 (local.get $z)))))"#
    );
    let dir = ephem_test_support::temp_dir();
    let compiler = ephem::Compiler::new().unwrap().with_clif_dir(dir.path());
    compiler.compile(wat.as_bytes()).unwrap();
    // Function 1: the import is function 0, and has no IR of its own.
    assert!(!dir.path().join("wasm-function[0].clif").exists());
    let clif = std::fs::read_to_string(dir.path().join("wasm-function[1].clif")).unwrap();
    let params = |header: &str| header.matches(": i").count();
    let headers: Vec<&str> = clif
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("block") && l.ends_with(':'))
        .collect();
    assert!(headers.len() > 2, "{clif}");
    for header in &headers[1..] {
        assert!(params(header) <= 1, "{header} in\n{clif}");
    }
}
