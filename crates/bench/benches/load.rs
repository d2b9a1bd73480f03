//! Load cost of every code-memory strategy beside a plain `memcpy`, for 4 KiB, 64 KiB and 1 MiB
//! modules under both write models, on one thread and on two threads sharing a pool.
//! `ephem bench load` measures the same workload and prints ratios.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ephem_bench::load::{Fill, Target, bench_pool, module_image, run_loads};
use ephem_code_memory::{CodePool, Strategy};

const SIZES: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];

fn targets() -> impl Iterator<Item = Target> {
    std::iter::once(Target::Memcpy).chain(Strategy::ALL.into_iter().map(Target::Strategy))
}

fn pool_for(target: Target, size: usize, threads: usize) -> Option<Option<CodePool>> {
    match target {
        Target::Memcpy => Some(None),
        Target::Strategy(s) => match bench_pool(s, size, threads) {
            Ok(pool) => Some(Some(pool)),
            Err(e) => {
                eprintln!("skipping {s}: {e}");
                None
            }
        },
    }
}

fn load(c: &mut Criterion) {
    for threads in [1usize, 2] {
        for fill in [Fill::Page, Fill::Full] {
            for size in SIZES {
                let mut group =
                    c.benchmark_group(format!("load/{}/{}KiB/{threads}t", fill.name(), size >> 10));
                let image = module_image(size);
                for target in targets() {
                    let Some(pool) = pool_for(target, size, threads) else {
                        continue;
                    };
                    group.bench_function(BenchmarkId::from_parameter(target.name()), |b| {
                        b.iter_custom(|loads| {
                            // Each thread does `loads` loads; report the slowest thread's time.
                            std::thread::scope(|s| {
                                let handles: Vec<_> = (0..threads)
                                    .map(|_| {
                                        s.spawn(|| {
                                            run_loads(target, pool.as_ref(), &image, fill, loads)
                                                .expect("load failed")
                                        })
                                    })
                                    .collect();
                                handles
                                    .into_iter()
                                    .map(|h| h.join().unwrap())
                                    .max()
                                    .unwrap()
                            })
                        })
                    });
                }
                group.finish();
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = load
}
criterion_main!(benches);
