//! A host written against wasmtime's names only, as a wasmtime user would write it: porting it to
//! ephem is the `use` line below. If a name or a signature it uses drifts from wasmtime's, this
//! stops compiling.

use ephem as wasmtime;
use wasmtime::{Caller, Config, Engine, Linker, Module, OptLevel, Store, TypedFunc};

/// Calls `module`'s export `f`, wasmtime-style, with `wasmtime::Result`.
fn call_f(engine: &Engine, module: &Module) -> wasmtime::Result<i32> {
    let mut store = Store::new(engine, ());
    let instance = Linker::new(engine).instantiate(&mut store, module)?;
    let f = instance.get_typed_func::<(), i32>(&mut store, "f")?;
    f.call(&mut store, ())
}

const WAT: &str = r#"(module
  (import "host" "double" (func $double (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "run") (param i32) (result i32)
    (i32.store (i32.const 0) (local.get 0))
    (i32.add (call $double (i32.load (i32.const 0))) (i32.const 1))))"#;

/// What a typical wasmtime host does: configure, compile, link a host function that reads the
/// caller's memory, instantiate, call through a `TypedFunc`, read the store's data and fuel.
fn host(config: &Config, wasm: &[u8]) -> anyhow::Result<(i32, u32, u64)> {
    let engine = Engine::new(config)?;
    let module = Module::new(&engine, wasm)?;
    let mut linker = Linker::new(&engine);
    linker.func_wrap(
        "host",
        "double",
        |mut caller: Caller<'_, u32>, x: i32| -> i32 {
            let memory = caller
                .get_export("memory")
                .and_then(|e| e.into_memory())
                .unwrap();
            let mut bytes = [0; 4];
            memory.read(&caller, 0, &mut bytes).unwrap();
            assert_eq!(i32::from_le_bytes(bytes), x, "the caller's memory");
            *caller.data_mut() += 1;
            x * 2
        },
    )?;
    let mut store = Store::new(&engine, 0u32);
    store.set_fuel(10_000)?;
    store.set_epoch_deadline(1);
    let instance = linker.instantiate(&mut store, &module)?;
    let run: TypedFunc<i32, i32> = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
    let result = run.call(&mut store, 20)?;
    let fuel_left = store.get_fuel()?;
    Ok((result, *store.data(), fuel_left))
}

#[test]
fn a_host_written_for_wasmtime_runs() {
    let mut config = Config::new();
    config
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(256 << 10)
        .cranelift_opt_level(OptLevel::Speed);
    let (result, calls, fuel_left) = host(&config, WAT.as_bytes()).unwrap();
    assert_eq!((result, calls), (41, 1));
    assert!(fuel_left < 10_000, "metered code paid for what it ran");

    // The text format and binaries alike; another optimisation level gives the same answer.
    config.cranelift_opt_level(OptLevel::None);
    let binary = wat::parse_str(WAT).unwrap();
    let (result, calls, _) = host(&config, &binary).unwrap();
    assert_eq!((result, calls), (41, 1));
}

#[test]
fn unmetered_code_cannot_run_in_a_store_with_fuel() {
    // `consume_fuel` reaches the compiler: without it, the store's fuel refuses the module.
    let err = host(&Config::new(), WAT.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("fuel"), "{err}");
}

#[test]
fn bad_wasm_is_an_error_not_a_panic() {
    let engine = Engine::default();
    assert!(Module::new(&engine, b"\0asm\x01\0\0\0\x01").is_err());
    // `from_binary` takes binaries only, as wasmtime's.
    assert!(Module::from_binary(&engine, b"(module)").is_err());
    assert!(Module::from_binary(&engine, &wat::parse_str("(module)").unwrap()).is_ok());
    assert!(Module::new(&engine, "(module (func (result i32)))").is_err());
    let missing = std::env::temp_dir().join("ephem-no-such-module.wasm");
    let e = Module::from_file(&engine, &missing).unwrap_err();
    assert!(e.to_string().contains("no-such-module"), "{e}");
}

#[test]
fn modules_serialize_and_deserialize_sealed() {
    let tmp = ephem_test_support::temp_dir();
    let mut config = Config::new();
    config.artifact_key(wasmtime::ArtifactKey::generate().unwrap());
    let engine = Engine::new(&config).unwrap();

    let source = tmp.path().join("m.wat");
    std::fs::write(
        &source,
        r#"(module (func (export "f") (result i32) (i32.const 7)))"#,
    )
    .unwrap();
    let module = Module::from_file(&engine, &source).unwrap();
    let path = tmp.path().join("m.ephem");
    std::fs::write(&path, module.serialize().unwrap()).unwrap();

    // SAFETY: the file was serialized above by an engine with the same key.
    let loaded = unsafe { Module::deserialize_file(&engine, &path) }.unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &loaded)
        .unwrap();
    let f = instance.get_typed_func::<(), i32>(&mut store, "f").unwrap();
    assert_eq!(f.call(&mut store, ()).unwrap(), 7);

    // `Engine::precompile_module` writes the same kind of file without loading anything.
    let precompiled = tmp.path().join("p.ephem");
    std::fs::write(
        &precompiled,
        engine
            .precompile_module(br#"(module (func (export "f") (result i32) (i32.const 8)))"#)
            .unwrap(),
    )
    .unwrap();
    // SAFETY: written above by an engine with the same key.
    let loaded = unsafe { Module::deserialize_file(&engine, &precompiled) }.unwrap();
    assert_eq!(call_f(&engine, &loaded).unwrap(), 8);

    // From memory too; one changed byte is refused.
    let bytes = module.serialize().unwrap();
    // SAFETY: serialized above by this engine.
    let from_memory = unsafe { Module::deserialize(&engine, &bytes) }.unwrap();
    assert_eq!(call_f(&engine, &from_memory).unwrap(), 7);
    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    // SAFETY: expected to be refused before anything of it runs.
    assert!(unsafe { Module::deserialize(&engine, &damaged) }.is_err());

    // Another key does not verify it: deserializing checks the seal.
    let mut other = Config::new();
    other.artifact_key(wasmtime::ArtifactKey::generate().unwrap());
    let other = Engine::new(&other).unwrap();
    // SAFETY: the call is expected to refuse the file before anything of it runs.
    let refused = unsafe { Module::deserialize_file(&other, &path) };
    assert!(
        refused.is_err(),
        "a file sealed with another key is refused"
    );
}

#[test]
fn features_are_named_as_wasmtime_names_them_and_what_ephem_lacks_is_refused() {
    let mut config = Config::new();
    config
        .wasm_simd(true)
        .wasm_bulk_memory(true)
        .wasm_reference_types(true)
        .wasm_multi_value(true)
        .wasm_gc(false)
        .wasm_exceptions(false);
    assert!(Engine::new(&config).is_ok());
    config.wasm_gc(true);
    assert!(Engine::new(&config).is_ok());
    config.wasm_component_model(true);
    assert!(Engine::new(&config).is_ok(), "components are on");
    config.wasm_component_model(false).wasm_simd(false);
    let e = Engine::new(&config).unwrap_err().to_string();
    assert!(
        e.contains("component model") && e.contains("SIMD"),
        "both refusals are named: {e}"
    );
    // Asking again the other way takes each back.
    config.wasm_component_model(true).wasm_simd(true);
    assert!(Engine::new(&config).is_ok());
}
