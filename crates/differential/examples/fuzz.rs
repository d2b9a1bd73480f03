//! The long differential run: `cargo run --release -p ephem-differential --example fuzz --
//! --seconds 600 [--seed S] [--out DIR]`. Cases from `--seed` on, until the time is up; each
//! disagreement is shrunk with `wasm-shrink` and saved as `DIR/seed-N.wasm` (with the
//! difference in `DIR/seed-N.txt`). Prints how many modules, calls and mutants were compared.

#[path = "../tests/wasmtime_observer/mod.rs"]
mod wasmtime_observer;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use ephem_differential::{Ephem, Verdict, generate, plan, run_case, shrink};

#[derive(Parser)]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The first case's seed (cases take consecutive seeds).
    #[arg(long, default_value_t = 1_000_000)]
    seed: u64,
    /// Where reproducers go.
    #[arg(long, default_value = "fuzz-findings")]
    out: PathBuf,
    /// Damaged copies fed to the compiler per module.
    #[arg(long, default_value_t = 10)]
    mutants: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ephem = Ephem::new()?;
    let wasmtime = wasmtime_observer::Wasmtime::new()?;
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let (mut modules, mut calls, mut found, mut refused) = (0u64, 0u64, 0u64, 0u64);
    let (mut mutants, mut valid_mutants) = (0usize, 0usize);
    let mut seed = args.seed;
    while Instant::now() < end {
        let wasm = generate(seed)?;
        let plan = plan(&wasm, seed);
        modules += 1;
        match run_case(&wasm, &plan, &ephem, &wasmtime) {
            Verdict::Agree { calls: n, .. } => calls += n as u64,
            Verdict::BothRefused => refused += 1,
            Verdict::Differ(d) => {
                found += 1;
                eprintln!("seed {seed}: {d}");
                std::fs::create_dir_all(&args.out)?;
                let small = shrink(&wasm, seed, &ephem, &wasmtime).unwrap_or(wasm.clone());
                let base = args.out.join(format!("seed-{seed}"));
                std::fs::write(base.with_extension("wasm"), &small)?;
                std::fs::write(base.with_extension("txt"), format!("{d}\n"))?;
            }
        }
        match ephem.check_mutants(&wasm, seed, args.mutants) {
            Ok(stats) => {
                mutants += stats.checked;
                valid_mutants += stats.valid;
            }
            Err(e) => {
                found += 1;
                eprintln!("seed {seed}: mutant: {e}");
            }
        }
        seed += 1;
    }
    println!(
        "{} s: seeds {}..{seed}: {modules} modules, {calls} calls compared, {refused} refused by \
         both, {mutants} mutants ({valid_mutants} valid), {found} disagreements; {} GC \
         collections",
        args.seconds,
        args.seed,
        ephem.collections()
    );
    Ok(())
}
