//! What metering costs in running code: the same kernels without it (the default), under a
//! deadline (nothing compiled in: see the runtime's `interrupt`), and compiled with fuel, side
//! by side. Kernels: an iterative loop (a check
//! per iteration), recursive calls (a check per call), and a nested loop over memory, written in
//! wat; and C compiled by clang (`kernels/kernels.c`, rebuilt by `kernels/build.sh`): quicksort,
//! table-driven CRC-32, a 64×64 matrix product, a sieve, recursive Fibonacci.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ephem::{Compiler, Engine, Linker, Store, TypedFunc};

const KERNELS: &str = r#"(module
  (memory 1)
  (func (export "loop") (param $n i32) (result i64) (local $a i64) (local $b i64) (local $t i64)
    (local.set $b (i64.const 1))
    (block $done (loop $next
      (br_if $done (i32.eqz (local.get $n)))
      (local.set $t (i64.add (local.get $a) (local.get $b)))
      (local.set $a (local.get $b)) (local.set $b (local.get $t))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $next)))
    (local.get $a))
  (func $fib (export "recursion") (param $n i32) (result i64)
    (if (result i64) (i32.lt_u (local.get $n) (i32.const 2))
      (then (i64.extend_i32_u (local.get $n)))
      (else (i64.add (call $fib (i32.sub (local.get $n) (i32.const 1)))
                     (call $fib (i32.sub (local.get $n) (i32.const 2)))))))
  (func (export "memory") (param $rounds i32) (result i64) (local $i i32) (local $sum i64)
    (block $done (loop $round
      (br_if $done (i32.eqz (local.get $rounds)))
      (local.set $i (i32.const 0))
      (block $end (loop $word
        (br_if $end (i32.ge_u (local.get $i) (i32.const 65536)))
        (i32.store (local.get $i) (i32.add (i32.load (local.get $i)) (local.get $i)))
        (local.set $sum (i64.add (local.get $sum) (i64.load32_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $word)))
      (local.set $rounds (i32.sub (local.get $rounds) (i32.const 1)))
      (br $round)))
    (local.get $sum)))"#;

const C_KERNELS: &[u8] = include_bytes!("../kernels/kernels.wasm");

fn metering(c: &mut Criterion) {
    let engine = Engine::default();
    let off = Compiler::new().unwrap();
    let fuel = Compiler::new().unwrap().with_fuel();
    let mut group = c.benchmark_group("metering");
    let kernels: [(&str, i32, &[u8]); 8] = [
        ("loop", 100_000, KERNELS.as_bytes()),
        ("recursion", 20, KERNELS.as_bytes()),
        ("memory", 20, KERNELS.as_bytes()),
        ("sort", 20_000, C_KERNELS),
        ("crc", 20, C_KERNELS),
        ("matmul", 2, C_KERNELS),
        ("sieve", 200_000, C_KERNELS),
        ("fib", 20, C_KERNELS),
    ];
    for (kernel, arg, wasm) in kernels {
        for (mode, compiler) in [("off", &off), ("deadline", &off), ("fuel", &fuel)] {
            let module = ephem::compile_with(compiler, &engine, wasm).unwrap();
            let mut store = Store::new(&engine, ());
            if mode == "fuel" {
                store.set_fuel(u64::MAX).unwrap();
            }
            if mode == "deadline" {
                store.set_epoch_deadline(1 << 40);
            }
            let instance = Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let func = instance.get_func(&mut store, kernel).unwrap();
            let id = BenchmarkId::new(kernel, mode);
            // The wat kernels return i64, the C ones i32.
            match func.typed::<i32, i64>(&store) {
                Ok(f) => group.bench_function(id, |b| b.iter(|| f.call(&mut store, arg).unwrap())),
                Err(_) => {
                    let f: TypedFunc<i32, i32> = func.typed(&store).unwrap();
                    group.bench_function(id, |b| b.iter(|| f.call(&mut store, arg).unwrap()))
                }
            };
        }
    }
    group.finish();
}

criterion_group!(benches, metering);
criterion_main!(benches);
