//! The load workload that the benchmarks measure (criterion and `ephem bench load`), kept here so
//! both measure exactly the same thing.
//!
//! One *load* is: take a slot for `size` bytes, write the module (see [`Fill`]), publish, call the
//! code once, give the slot back. The `memcpy` baseline only writes the same bytes into ordinary
//! memory: the physical limit of any strategy. With several threads, each runs its own loads
//! against one shared pool and the result is the mean time per load per thread, so perfect
//! scaling keeps it flat as threads grow.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::{CodePool, Error, PoolConfig, RwxOptIn, Strategy, sys};

/// What a load writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fill {
    /// One `ret` at the start of every page.
    Page,
    /// The module's full bytes.
    Full,
}

impl Fill {
    pub fn name(self) -> &'static str {
        match self {
            Fill::Page => "page",
            Fill::Full => "full",
        }
    }
}

/// What is measured: a strategy, or the plain copy baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Memcpy,
    Strategy(Strategy),
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Memcpy => "memcpy",
            Target::Strategy(s) => s.name(),
        }
    }
}

/// A module image of `size` bytes: every page starts with `mov eax, <page index>; ret`, and the
/// rest is `int3`.
pub fn module_image(size: usize) -> Vec<u8> {
    let mut image = vec![sys::TRAP_FILL; size];
    for (index, page) in image.chunks_mut(sys::page_size()).enumerate() {
        let mut code = [0xB8, 0, 0, 0, 0, 0xC3];
        code[1..5].copy_from_slice(&(index as u32).to_le_bytes());
        let n = code.len().min(page.len());
        page[..n].copy_from_slice(&code[..n]);
    }
    image
}

fn write(dst: &mut [u8], image: &[u8], fill: Fill) {
    match fill {
        Fill::Full => dst.copy_from_slice(image),
        Fill::Page => {
            for page in dst.chunks_mut(sys::page_size()) {
                page[0] = 0xC3;
            }
        }
    }
}

/// A pool configured for the benchmark: enough pre-faulted slots of `size` for `threads`.
pub fn bench_pool(strategy: Strategy, size: usize, threads: usize) -> Result<CodePool, Error> {
    CodePool::new(PoolConfig {
        slot_size: size,
        max_slots: threads * 2,
        prefault_slots: threads,
        rwx: Some(RwxOptIn::benchmark_baseline_breaks_w_xor_x()),
        ..PoolConfig::with_strategy(strategy)
    })
}

/// Runs `loads` loads one after another and returns the time they took.
pub fn run_loads(
    target: Target,
    pool: Option<&CodePool>,
    image: &[u8],
    fill: Fill,
    loads: u64,
) -> Result<Duration, Error> {
    let start = Instant::now();
    match (target, pool) {
        (Target::Strategy(_), Some(pool)) => {
            for _ in 0..loads {
                let mut slot = pool.acquire(image.len())?;
                write(slot.bytes_mut(), image, fill);
                let code = slot.publish()?;
                // SAFETY: the slot starts with `mov eax, imm32; ret` (full) or `ret` (page),
                // published as executable just now; both are complete functions of this type.
                let entry: extern "C" fn() -> u32 = unsafe { std::mem::transmute(code.as_ptr()) };
                black_box(entry());
            }
        }
        _ => {
            let mut dst = vec![0u8; image.len()];
            for _ in 0..loads {
                write(black_box(&mut dst[..]), image, fill);
                black_box(dst.as_ptr());
            }
        }
    }
    Ok(start.elapsed())
}

/// Measures `target` with `threads` threads doing `loads` loads each (after a warm-up), and
/// returns nanoseconds per load (mean over threads).
pub fn measure(
    target: Target,
    size: usize,
    fill: Fill,
    threads: usize,
    loads: u64,
) -> Result<f64, Error> {
    let threads = threads.max(1);
    let pool = match target {
        Target::Strategy(s) => Some(bench_pool(s, size, threads)?),
        Target::Memcpy => None,
    };
    let image = module_image(size);
    let barrier = Barrier::new(threads);
    let results: Vec<Result<Duration, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let warm = run_loads(target, pool.as_ref(), &image, fill, (loads / 10).max(10));
                    barrier.wait();
                    warm?;
                    run_loads(target, pool.as_ref(), &image, fill, loads)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    });
    let mut total = Duration::ZERO;
    for r in results {
        total += r?;
    }
    Ok(total.as_nanos() as f64 / threads as f64 / loads as f64)
}
