//! The `ephem` command line.

mod bench_load;
mod chart;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ephem",
    version,
    about = "A WebAssembly runtime for one fresh instance per call"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks, printed as tables of ratios.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Time per load of every code-memory strategy beside a plain memcpy.
    Load(bench_load::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(Bench::Load(args)) => bench_load::run(args),
    }
}
