//! `compile-vs-wasmtime`: how long ephem and wasmtime take to compile the same modules, in one
//! run. Each compile is in memory, from the wasm bytes to code ready to be saved (ephem:
//! `Compiler::compile`; wasmtime: `Module::new` with its default configuration, parallel
//! compilation on). Both compilers use every core. Compiles alternate between the engines and
//! the median of `--runs` is reported, with the ratio and its geometric mean over the modules.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use ephem_bench_wasmtime::{geomean, median, ms};

#[derive(Parser)]
#[command(about = "Compile time of modules on ephem and on wasmtime, side by side")]
struct Args {
    /// Modules (.wasm or .wat).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Compiles per module and engine (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    let compiler = ephem::Compiler::new()?;
    let engine = wasmtime::Engine::new(&wasmtime::Config::new())?;
    if !args.json {
        println!(
            "{:<36} {:>10} {:>12} {:>8}",
            "module", "ephem ms", "wasmtime ms", "ratio"
        );
    }
    let mut ratios = Vec::new();
    for file in &args.files {
        let wasm = wat::parse_file(file).with_context(|| format!("reading {}", file.display()))?;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let t = Instant::now();
            compiler
                .compile(&wasm)
                .with_context(|| format!("ephem compiling {}", file.display()))?;
            ours.push(t.elapsed());
            let t = Instant::now();
            wasmtime::Module::new(&engine, &wasm)
                .map_err(|e| anyhow::anyhow!("wasmtime compiling {}: {e}", file.display()))?;
            theirs.push(t.elapsed());
        }
        let (ours, theirs): (Duration, Duration) = (median(ours), median(theirs));
        let ratio = ours.as_secs_f64() / theirs.as_secs_f64();
        ratios.push(ratio);
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if args.json {
            println!(
                "{}",
                serde_json::json!({"module": name, "ephem_ns": ours.as_nanos() as u64,
                    "wasmtime_ns": theirs.as_nanos() as u64, "ratio": ratio})
            );
        } else {
            println!(
                "{name:<36} {:>10} {:>12} {ratio:>7.2}×",
                ms(ours),
                ms(theirs)
            );
        }
    }
    let g = geomean(&ratios);
    if args.json {
        println!("{}", serde_json::json!({"geomean_ratio": g}));
    } else {
        println!("geometric mean: ephem takes {g:.2}× wasmtime's compile time");
    }
    Ok(())
}
