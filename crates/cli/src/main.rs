//! The `ephem` command line.

mod bench_fresh;
mod bench_load;
mod bench_thresholds;
mod cache;
mod chart;
mod exit;
mod run;
mod wast;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ephem",
    version,
    about = "A WebAssembly runtime for one fresh instance per call",
    after_help = "Exit codes: 0 success, 1 error, 2 usage error, 134 the guest trapped."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a module (.wasm, .wat or artifact): calls an export and prints its results, one
    /// per line.
    Run(run::Args),
    /// Compiles a module into an artifact file.
    Compile(cache::CompileArgs),
    /// The compile cache.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Runs WebAssembly script (.wast) files or directories of them.
    Wast(wast::Args),
    /// Benchmarks, printed as tables of ratios.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Time per load of every code-memory strategy beside a plain memcpy.
    Load(bench_load::Args),
    /// The real workload: a fresh instance of a randomly picked cached module per invocation.
    Fresh(bench_fresh::Args),
    /// Copying against mapping text and memory images, across sizes.
    Thresholds(bench_thresholds::Args),
}

fn main() -> std::process::ExitCode {
    exit::finish(dispatch(Cli::parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Compile(args) => cache::compile(args),
        Command::Cache(cmd) => cache::command(cmd),
        Command::Wast(args) => wast::run(args),
        Command::Bench(Bench::Load(args)) => bench_load::run(args),
        Command::Bench(Bench::Fresh(args)) => bench_fresh::run(args),
        Command::Bench(Bench::Thresholds(args)) => bench_thresholds::run(args),
    }
}
