//! Real modules in ephem and in wasmtime: `cargo run --release -p ephem-differential --example
//! agree -- FILE.wasm... [--fuel N] [--seed S]`. Each module's imports are stubbed alike in
//! both engines, every exported function is called on zeros and on two drawn argument vectors
//! (the fuzzer's plan), each call in a fresh instance as ephem runs invocations, both engines
//! metered, and each call's results or trap and the state it left compared (see the crate's
//! docs). Prints a line per module; exits with 1 if any disagrees.

#[path = "../tests/wasmtime_observer/mod.rs"]
mod wasmtime_observer;

use std::path::PathBuf;

use clap::Parser;
use ephem_differential::{Ephem, Plan, Verdict, plan, run_case};

#[derive(Parser)]
struct Args {
    /// The modules.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Fuel for instantiation and for each call, in each engine.
    #[arg(long, default_value_t = 100_000_000)]
    fuel: u64,
    /// Seed of the drawn arguments.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ephem = Ephem::metered(args.fuel)?;
    let wasmtime = wasmtime_observer::Wasmtime::metered(args.fuel)?;
    let mut differ = 0;
    for file in &args.files {
        let wasm = std::fs::read(file)?;
        let plan = Plan {
            fresh: true,
            ..plan(&wasm, args.seed)
        };
        let verdict = run_case(&wasm, &plan, &ephem, &wasmtime);
        let name = file.display();
        match verdict {
            Verdict::Agree { calls, unfinished } => println!(
                "{name}: agree on {calls} of {} calls{}",
                plan.calls.len(),
                if unfinished {
                    " (the others ran out of fuel in one engine or both)"
                } else {
                    ""
                }
            ),
            Verdict::BothRefused => println!("{name}: refused by both"),
            Verdict::Differ(d) => {
                differ += 1;
                println!("{name}: DIFFER: {d}");
            }
        }
    }
    if differ > 0 {
        std::process::exit(1);
    }
    Ok(())
}
