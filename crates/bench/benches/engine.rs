//! Baselines for the engine: compile time; one invocation of a loaded module (load its code into
//! the pool, link, instantiate with a data segment, call, tear down); and the fresh path, where
//! the module is also opened from the compile cache every time.

use criterion::{Criterion, criterion_group, criterion_main};
use ephem::{Cache, Compiler, Engine, Linker, Module, Store};

const SMALL: &[u8] = include_bytes!("../../../examples/fib.wat");

/// Instantiates `fib.wat` in a new store, calls `fib(20)`, checks the result, drops the store.
fn instantiate_and_call(engine: &Engine, linker: &Linker<()>, module: &Module) {
    let mut store = Store::new(engine, ());
    let instance = linker.instantiate(&mut store, module).unwrap();
    let fib = instance
        .get_typed_func::<i32, i64>(&mut store, "fib")
        .unwrap();
    assert_eq!(fib.call(&mut store, 20).unwrap(), 6765);
}

fn engine(c: &mut Criterion) {
    let compiler = Compiler::new().unwrap();
    let wasm = wat::parse_bytes(SMALL).unwrap().into_owned();
    c.bench_function("compile/fib.wat", |b| {
        b.iter(|| compiler.compile(&wasm).unwrap())
    });
    if let Ok(zstd) = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/corpus/zstd.wasm"
    )) {
        let mut group = c.benchmark_group("compile");
        group.sample_size(10);
        group.bench_function("zstd.wasm", |b| b.iter(|| compiler.compile(&zstd).unwrap()));
        group.finish();
    }

    let engine = Engine::default();
    let linker = Linker::new(&engine);
    let module = ephem::compile_with(&compiler, &engine, &wasm).unwrap();
    c.bench_function("invocation/fib.wat load+instantiate+call+teardown", |b| {
        b.iter(|| {
            instantiate_and_call(&engine, &linker, &module);
        })
    });

    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path(), u64::MAX);
    let key = Cache::key(&wasm, &compiler.fingerprint());
    ephem::compile_cached(&compiler, &engine, &cache, &wasm).unwrap();
    c.bench_function("fresh/fib.wat open+load+instantiate+call+teardown", |b| {
        b.iter(|| {
            let artifact = cache.open(&key).unwrap().unwrap();
            let module = Module::from_artifact(&engine, artifact);
            instantiate_and_call(&engine, &linker, &module);
        })
    });
}

criterion_group!(benches, engine);
criterion_main!(benches);
