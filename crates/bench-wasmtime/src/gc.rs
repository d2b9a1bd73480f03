//! `gc-vs-wasmtime`: allocation-heavy GC programs (`programs/gc/`) on ephem and on wasmtime
//! (its default configuration: GC on, its default collector), side by side in one run.
//!
//! A program exports `run(n) -> i32`, or the export named after a `#` in its path
//! (`compute.wasm#binaryTrees`). A round, per engine: a new store, an instance, the call, the
//! store dropped; its time covers all of that, which is what a fresh instance per call costs.
//! The engines take turns, round by round, and must return the same value. Every program given
//! is reported, including one that fails in either engine. A program may import WASI's
//! `random_get` (Kotlin/Wasm's runtime does), which both engines answer with zeros.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Allocation-heavy GC programs on ephem and on wasmtime, side by side")]
struct Args {
    /// Programs (`.wat` or `.wasm`) exporting `run(n) -> i32`, or `FILE#EXPORT` for another
    /// export of that type.
    files: Vec<String>,
    /// What `run` is given, per program in the order given (the last repeats).
    #[arg(long, value_delimiter = ',', default_value = "14")]
    n: Vec<i32>,
    /// Rounds per engine (the median is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

/// The module name and field of WASI's `random_get`, the one import a program may have.
const RANDOM_GET: (&str, &str) = ("wasi_snapshot_preview1", "random_get");

fn ephem_round(
    linker: &ephem::Linker<()>,
    module: &ephem::Module,
    export: &str,
    n: i32,
) -> anyhow::Result<(Duration, i32)> {
    let start = Instant::now();
    let mut store = ephem::Store::new(linker.engine(), ());
    let instance = linker.instantiate(&mut store, module)?;
    let run = instance.get_typed_func::<i32, i32>(&mut store, export)?;
    let got = run.call(&mut store, n)?;
    drop(store);
    Ok((start.elapsed(), got))
}

fn wasmtime_round(
    linker: &wasmtime::Linker<()>,
    module: &wasmtime::Module,
    export: &str,
    n: i32,
) -> anyhow::Result<(Duration, i32)> {
    let start = Instant::now();
    let mut store = wasmtime::Store::new(linker.engine(), ());
    let instance = linker.instantiate(&mut store, module)?;
    let run = instance.get_typed_func::<i32, i32>(&mut store, export)?;
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
fn compare(
    file: &PathBuf,
    export: &str,
    n: i32,
    rounds: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let wasm = wat::parse_file(file)?;
    let ephem_engine = ephem::Engine::default();
    let ephem_module = ephem::Module::new(&ephem_engine, &wasm)?;
    let mut ephem_linker = ephem::Linker::new(&ephem_engine);
    ephem_linker.func_wrap(RANDOM_GET.0, RANDOM_GET.1, |_: i32, _: i32| 0i32)?;
    let engine = wasmtime::Engine::new(&wasmtime::Config::new())?;
    let module = wasmtime::Module::new(&engine, &wasm)?;
    let mut linker = wasmtime::Linker::new(&engine);
    linker.func_wrap(RANDOM_GET.0, RANDOM_GET.1, |_: i32, _: i32| 0i32)?;
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
                0 => ephem_round(&ephem_linker, &ephem_module, export, n)
                    .map_err(|err| anyhow::anyhow!("ephem: {err:#}"))?,
                _ => wasmtime_round(&linker, &module, export, n)
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
        "{:<36} {:>7} {:>10} {:>10} {:>8}",
        "program", "n", "ephem", "wasmtime", "ratio"
    );
    let (mut failed, mut logs) = (0, Vec::new());
    for (k, spec) in args.files.iter().enumerate() {
        let (path, export) = spec.rsplit_once('#').unwrap_or((spec, "run"));
        let file = PathBuf::from(path);
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        let name = match export {
            "run" => stem.into_owned(),
            _ => format!("{stem}#{export}"),
        };
        let n = *args.n.get(k).or(args.n.last()).expect("a default");
        match compare(&file, export, n, args.rounds) {
            Ok((e, w)) => {
                let ratio = e.as_secs_f64() / w.as_secs_f64();
                logs.push(ratio.ln());
                println!(
                    "{name:<36} {n:>7} {:>10} {:>10} {ratio:>7.2}×",
                    ms(e),
                    ms(w)
                );
            }
            Err(err) => {
                failed += 1;
                println!("{name:<36} {n:>7} failed: {err:#}");
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
