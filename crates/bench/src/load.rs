//! `ephem bench load`: the code-memory strategies side by side (the same workload as the
//! criterion benchmark `load`), as a table of ratios, JSON lines, or a chart.
//!
//! # The workload
//! The load workload that the benchmarks measure (criterion and `ephem bench load`), kept here so
//! both measure exactly the same thing.
//!
//! One *load* is: take a slot for `size` bytes, write the module (see [`Fill`]), publish, call the
//! code once, give the slot back. The `memcpy` baseline only writes the same bytes into ordinary
//! memory: the physical limit of any strategy. With several threads, each runs its own loads
//! against one shared pool and the result is the mean time per load per thread, so perfect
//! scaling keeps it flat as threads grow.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ephem_code_memory::{CodePool, Error, PoolConfig, RwxOptIn, Strategy};

#[derive(clap::Args)]
pub struct Args {
    /// Module sizes, with an optional k or m suffix (KiB, MiB).
    #[arg(long, value_delimiter = ',', default_value = "4k,64k,1m", value_parser = ephem::units::parse_nonzero_size)]
    sizes: Vec<usize>,
    /// Also measure with this many threads sharing one pool (1 thread is always measured).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Strategies to measure (default: all; `rwx` only with --allow-rwx).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<Strategy>,
    /// Include the `rwx` baseline, which breaks W^X.
    #[arg(long)]
    allow_rwx: bool,
    /// Loads per thread per measurement (default: scaled to the size).
    #[arg(long)]
    loads: Option<u64>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the comparison as an SVG chart to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// One measured row.
pub struct Row {
    pub target: Target,
    pub size: usize,
    pub fill: Fill,
    pub threads: usize,
    pub ns_per_load: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut strategies = if args.strategies.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        args.strategies.clone()
    };
    if !args.allow_rwx {
        if args.strategies.contains(&Strategy::Rwx) {
            bail!("the `rwx` strategy breaks W^X; pass --allow-rwx to measure it as a baseline");
        }
        strategies.retain(|s| *s != Strategy::Rwx);
    }
    let targets: Vec<Target> = std::iter::once(Target::Memcpy)
        .chain(strategies.into_iter().map(Target::Strategy))
        .collect();
    let mut thread_counts = vec![1];
    if args.threads > 1 {
        thread_counts.push(args.threads);
    }

    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for &threads in &thread_counts {
        for fill in [Fill::Page, Fill::Full] {
            for &size in &args.sizes {
                let loads = args
                    .loads
                    .unwrap_or(((64usize << 20) / size).clamp(200, 20_000) as u64);
                let group_start = rows.len();
                for &target in &targets {
                    match measure(target, size, fill, threads, loads) {
                        Ok(ns_per_load) => rows.push(Row {
                            target,
                            size,
                            fill,
                            threads,
                            ns_per_load,
                        }),
                        Err(e) => {
                            let note = format!("{}: {e}", target.name());
                            if !skipped.contains(&note) {
                                skipped.push(note);
                            }
                        }
                    }
                }
                print_group(&rows[group_start..], args.json);
            }
        }
    }
    for note in &skipped {
        eprintln!("skipped {note}");
    }
    if let Some(path) = &args.svg {
        crate::chart::write_svg(path, &rows)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(())
}

fn ns_of(rows: &[Row], name: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.target.name() == name)
        .map(|r| r.ns_per_load)
}

fn print_group(group: &[Row], json: bool) {
    let Some(first) = group.first() else { return };
    let memcpy = ns_of(group, "memcpy");
    let naive = ns_of(group, "naive");
    // Time relative to memcpy (>= 1: how far from the physical limit) and speed-up over naive.
    let vs_memcpy = |ns: f64| memcpy.map(|m| ns / m);
    let speedup = |ns: f64| naive.map(|n| n / ns);
    if json {
        for r in group {
            let line = serde_json::json!({
                "strategy": r.target.name(),
                "size": r.size,
                "fill": r.fill.name(),
                "threads": r.threads,
                "ns_per_load": (r.ns_per_load * 10.0).round() / 10.0,
                "vs_memcpy": vs_memcpy(r.ns_per_load),
                "speedup_vs_naive": speedup(r.ns_per_load),
            });
            println!("{line}");
        }
        return;
    }
    println!(
        "\n{} KiB, fill {}, {} thread(s)",
        first.size >> 10,
        first.fill.name(),
        first.threads
    );
    println!(
        "{:<14} {:>12} {:>10} {:>10}",
        "strategy", "ns/load", "×memcpy", "naive÷"
    );
    for r in group {
        let fmt = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.2}"));
        println!(
            "{:<14} {:>12.0} {:>10} {:>10}",
            r.target.name(),
            r.ns_per_load,
            fmt(vs_memcpy(r.ns_per_load)),
            fmt(speedup(r.ns_per_load)),
        );
    }
}

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
    let mut image = vec![ephem_code_memory::TRAP_FILL; size];
    for (index, page) in image.chunks_mut(ephem_code_memory::page_size()).enumerate() {
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
            for page in dst.chunks_mut(ephem_code_memory::page_size()) {
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
