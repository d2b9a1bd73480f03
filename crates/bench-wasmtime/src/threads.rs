//! `threads-vs-wasmtime`: atomics-heavy kernels (`programs/threads/`) on several threads at
//! once, on ephem and on wasmtime (its default configuration, with threads), side by side.
//!
//! A kernel imports `env.memory`, a shared memory of one page, and exports `run(thread, n) ->
//! i32`. A round makes a new shared memory, and on each of `--threads` threads a store and an
//! instance on it (the fresh-instance path each engine has), which wait at a barrier; the
//! round's time runs from the first thread's call to the end of the last one's. The two
//! engines take turns, round by round, and the largest of their threads' results (the total
//! the last one saw) must be the same. Every program given
//! is reported, including one that fails in either engine.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Atomics-heavy kernels on several threads, on ephem and on wasmtime")]
struct Args {
    /// Kernels (`.wat` or `.wasm`).
    files: Vec<PathBuf>,
    /// Threads that run each kernel at once.
    #[arg(long, default_value_t = 2)]
    threads: i32,
    /// What each thread's `run` is given.
    #[arg(long, default_value_t = 1_000_000)]
    n: i32,
    /// Rounds per engine (the median is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

/// One round's time and the threads' results.
type Round = (Duration, Vec<i32>);

/// Runs one round: on each of `threads` threads, `setup(thread)` makes the thread's store and
/// instance and gives its call, which runs once every thread is ready. The time runs from the
/// first call's start to the last one's end.
fn round<S, C>(threads: i32, setup: S) -> anyhow::Result<Round>
where
    S: Fn(i32) -> anyhow::Result<C> + Send + Sync + 'static,
    C: FnOnce() -> anyhow::Result<i32>,
{
    let setup = Arc::new(setup);
    let ready = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (setup, ready) = (setup.clone(), ready.clone());
            std::thread::spawn(move || -> anyhow::Result<(Instant, Instant, i32)> {
                let call = setup(t);
                // (Waits even when the setup failed, so that no thread waits for it forever.)
                ready.wait();
                let call = call?;
                let start = Instant::now();
                let result = call()?;
                Ok((start, Instant::now(), result))
            })
        })
        .collect();
    ready.wait();
    let mut runs = Vec::new();
    for h in handles {
        runs.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a thread panicked"))??,
        );
    }
    let first = runs.iter().map(|r| r.0).min().expect("threads ran");
    let last = runs.iter().map(|r| r.1).max().expect("threads ran");
    let mut results: Vec<i32> = runs.iter().map(|r| r.2).collect();
    results.sort();
    Ok((last - first, results))
}

fn ephem_round(
    engine: &ephem::Engine,
    module: &ephem::Module,
    threads: i32,
    n: i32,
) -> anyhow::Result<Round> {
    let memory = ephem::SharedMemory::new(engine, ephem::MemoryType::shared(1, 1))?;
    let (engine, module) = (engine.clone(), module.clone());
    round(threads, move |t| {
        let mut store = ephem::Store::new(&engine, ());
        let mut linker = ephem::Linker::new(&engine);
        linker.define(&store, "env", "memory", memory.clone())?;
        let instance = linker.instantiate(&mut store, &module)?;
        let run = instance.get_typed_func::<(i32, i32), i32>(&mut store, "run")?;
        Ok(move || Ok(run.call(&mut store, (t, n))?))
    })
}

fn wasmtime_round(
    engine: &wasmtime::Engine,
    module: &wasmtime::Module,
    threads: i32,
    n: i32,
) -> anyhow::Result<Round> {
    let memory = wasmtime::SharedMemory::new(engine, wasmtime::MemoryType::shared(1, 1))?;
    let (engine, module) = (engine.clone(), module.clone());
    round(threads, move |t| {
        let mut store = wasmtime::Store::new(&engine, ());
        let mut linker = wasmtime::Linker::new(&engine);
        linker.define(&store, "env", "memory", memory.clone())?;
        let instance = linker.instantiate(&mut store, &module)?;
        let run = instance.get_typed_func::<(i32, i32), i32>(&mut store, "run")?;
        Ok(move || Ok(run.call(&mut store, (t, n))?))
    })
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// One program, both engines: (ephem's median, wasmtime's median).
fn compare(file: &PathBuf, args: &Args) -> anyhow::Result<(Duration, Duration)> {
    let wasm = wat::parse_file(file)?;
    let ephem_engine = ephem::Engine::default();
    let ephem_module = ephem::Module::new(&ephem_engine, &wasm)?;
    let mut config = wasmtime::Config::new();
    config.wasm_threads(true).shared_memory(true);
    let engine = wasmtime::Engine::new(&config)?;
    let module = wasmtime::Module::new(&engine, &wasm)?;
    let (mut e, mut w) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        // Turns alternate which engine goes first.
        let mut both = [0, 1];
        if r % 2 == 1 {
            both.reverse();
        }
        let mut results = [Vec::new(), Vec::new()];
        for which in both {
            let (time, got) = match which {
                0 => ephem_round(&ephem_engine, &ephem_module, args.threads, args.n)?,
                _ => wasmtime_round(&engine, &module, args.threads, args.n)?,
            };
            [&mut e, &mut w][which].push(time);
            results[which] = got;
        }
        // What each thread saw depends on how they interleaved; the last to finish sees the
        // total, which must be the same.
        anyhow::ensure!(
            results[0].last() == results[1].last(),
            "the engines disagree: ephem {:?}, wasmtime {:?}",
            results[0],
            results[1]
        );
    }
    Ok((median(e), median(w)))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "{} threads, n = {}, median of {} rounds (ms, from the first thread's start to the last one's end)",
        args.threads, args.n, args.rounds
    );
    println!(
        "{:<24} {:>10} {:>10} {:>8}",
        "program", "ephem", "wasmtime", "ratio"
    );
    let mut failed = 0;
    for file in &args.files {
        let name = file.file_stem().unwrap_or_default().to_string_lossy();
        match compare(file, &args) {
            Ok((e, w)) => println!(
                "{name:<24} {:>10} {:>10} {:>7.2}×",
                ms(e),
                ms(w),
                e.as_secs_f64() / w.as_secs_f64()
            ),
            Err(err) => {
                failed += 1;
                println!("{name:<24} failed: {err:#}");
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} programs failed",
        args.files.len()
    );
    Ok(())
}
