//! `gc-vs-wasmtime`: allocation-heavy GC programs (`programs/gc/`) on ephem and on wasmtime
//! (its default configuration: GC on, its default collector), side by side in one run.
//!
//! A program exports `run(n) -> i32`. A round, per engine: a new store, an instance, the call
//! `run(n)`, the store dropped; its time covers all of that, which is what a fresh instance per
//! call costs. The engines take turns, round by round, and must return the same value. Every
//! program given is reported, including one that fails in either engine (ephem collects
//! nothing yet: a program that allocates past its GC heap's bound traps there).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Allocation-heavy GC programs on ephem and on wasmtime, side by side")]
struct Args {
    /// Programs (`.wat` or `.wasm`) exporting `run(n) -> i32`.
    files: Vec<PathBuf>,
    /// What `run` is given, per program in the order given (the last repeats).
    #[arg(long, value_delimiter = ',', default_value = "14")]
    n: Vec<i32>,
    /// Rounds per engine (the median is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

fn ephem_round(
    engine: &ephem::Engine,
    module: &ephem::Module,
    n: i32,
) -> anyhow::Result<(Duration, i32)> {
    let start = Instant::now();
    let mut store = ephem::Store::new(engine, ());
    let instance = ephem::Instance::new(&mut store, module, &[])?;
    let run = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
    let got = run.call(&mut store, n)?;
    drop(store);
    Ok((start.elapsed(), got))
}

fn wasmtime_round(
    engine: &wasmtime::Engine,
    module: &wasmtime::Module,
    n: i32,
) -> anyhow::Result<(Duration, i32)> {
    let start = Instant::now();
    let mut store = wasmtime::Store::new(engine, ());
    let instance = wasmtime::Instance::new(&mut store, module, &[])?;
    let run = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
    let got = run.call(&mut store, n)?;
    drop(store);
    Ok((start.elapsed(), got))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// One program, both engines: (ephem's median, wasmtime's median).
fn compare(file: &PathBuf, n: i32, rounds: usize) -> anyhow::Result<(Duration, Duration)> {
    let wasm = wat::parse_file(file)?;
    let ephem_engine = ephem::Engine::default();
    let ephem_module = ephem::Module::new(&ephem_engine, &wasm)?;
    let engine = wasmtime::Engine::new(&wasmtime::Config::new())?;
    let module = wasmtime::Module::new(&engine, &wasm)?;
    let (mut e, mut w) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // Turns alternate which engine goes first.
        let mut both = [0, 1];
        if r % 2 == 1 {
            both.reverse();
        }
        let mut results = [0, 0];
        for which in both {
            let (time, got) = match which {
                0 => ephem_round(&ephem_engine, &ephem_module, n)
                    .map_err(|err| anyhow::anyhow!("ephem: {err:#}"))?,
                _ => wasmtime_round(&engine, &module, n)
                    .map_err(|err| anyhow::anyhow!("wasmtime: {err:#}"))?,
            };
            [&mut e, &mut w][which].push(time);
            results[which] = got;
        }
        anyhow::ensure!(
            results[0] == results[1],
            "the engines disagree: ephem {}, wasmtime {}",
            results[0],
            results[1]
        );
    }
    Ok((median(e), median(w)))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "median of {} rounds (ms: store, instance, run(n), drop)",
        args.rounds
    );
    println!(
        "{:<20} {:>6} {:>10} {:>10} {:>8}",
        "program", "n", "ephem", "wasmtime", "ratio"
    );
    let (mut failed, mut logs) = (0, Vec::new());
    for (k, file) in args.files.iter().enumerate() {
        let name = file.file_stem().unwrap_or_default().to_string_lossy();
        let n = *args.n.get(k).or(args.n.last()).expect("a default");
        match compare(file, n, args.rounds) {
            Ok((e, w)) => {
                let ratio = e.as_secs_f64() / w.as_secs_f64();
                logs.push(ratio.ln());
                println!(
                    "{name:<20} {n:>6} {:>10} {:>10} {ratio:>7.2}×",
                    ms(e),
                    ms(w)
                );
            }
            Err(err) => {
                failed += 1;
                println!("{name:<20} {n:>6} failed: {err:#}");
            }
        }
    }
    if !logs.is_empty() {
        let geomean = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
        println!("geometric mean over {} programs: {geomean:.2}×", logs.len());
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} programs failed",
        args.files.len()
    );
    Ok(())
}
