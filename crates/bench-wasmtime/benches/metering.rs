//! Metering on ephem and on wasmtime, side by side in one run: the C kernels of
//! `crates/bench/kernels` without metering, under a deadline and with fuel, in both runtimes
//! (wasmtime: `Config::epoch_interruption`, `Config::consume_fuel`; ephem compiles nothing in
//! for deadlines).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const C_KERNELS: &[u8] = include_bytes!("../../bench/kernels/kernels.wasm");
const KERNELS: [(&str, i32); 5] = [
    ("sort", 20_000),
    ("crc", 20),
    ("matmul", 2),
    ("sieve", 200_000),
    ("fib", 20),
];
const MODES: [&str; 3] = ["off", "deadline", "fuel"];

fn ephem_kernels(c: &mut Criterion) {
    let engine = ephem::Engine::default();
    // Deadlines as a server runs them: a ticker advances the epoch (every tick looks at the
    // running threads' deadlines; none is reached here).
    let _ticker = engine.start_epoch_ticker(std::time::Duration::from_millis(1));
    let mut group = c.benchmark_group("metering-ephem");
    for mode in MODES {
        let compiler = match mode {
            "fuel" => ephem::Compiler::new().unwrap().with_fuel(),
            _ => ephem::Compiler::new().unwrap(),
        };
        let module = ephem::compile_with(&compiler, &engine, C_KERNELS).unwrap();
        for (kernel, arg) in KERNELS {
            let mut store = ephem::Store::new(&engine, ());
            match mode {
                "deadline" => store.set_epoch_deadline(1 << 40),
                "fuel" => store.set_fuel(u64::MAX).unwrap(),
                _ => {}
            }
            let instance = ephem::Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let f = instance
                .get_typed_func::<i32, i32>(&mut store, kernel)
                .unwrap();
            group.bench_function(BenchmarkId::new(kernel, mode), |b| {
                b.iter(|| f.call(&mut store, arg).unwrap())
            });
        }
    }
    group.finish();
}

fn wasmtime_kernels(c: &mut Criterion) {
    let mut group = c.benchmark_group("metering-wasmtime");
    for mode in MODES {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(mode == "deadline");
        config.consume_fuel(mode == "fuel");
        let engine = wasmtime::Engine::new(&config).unwrap();
        let module = wasmtime::Module::new(&engine, C_KERNELS).unwrap();
        for (kernel, arg) in KERNELS {
            let mut store = wasmtime::Store::new(&engine, ());
            match mode {
                "deadline" => store.set_epoch_deadline(1 << 40),
                "fuel" => store.set_fuel(u64::MAX).unwrap(),
                _ => {}
            }
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
            let f = instance
                .get_typed_func::<i32, i32>(&mut store, kernel)
                .unwrap();
            group.bench_function(BenchmarkId::new(kernel, mode), |b| {
                b.iter(|| f.call(&mut store, arg).unwrap())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, ephem_kernels, wasmtime_kernels);
criterion_main!(benches);
