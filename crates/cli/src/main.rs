//! The `ephem` command line.

mod cache;
mod exit;
mod run;
mod serve;
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
    /// Serves modules over HTTP: uploads, and every call in a fresh instance.
    Serve(serve::Args),
    /// Runs WebAssembly script (.wast) files or directories of them.
    Wast(wast::Args),
    /// Benchmarks, printed as tables of ratios.
    #[command(subcommand)]
    Bench(ephem_bench::Bench),
}

fn main() -> std::process::ExitCode {
    exit::finish(dispatch(Cli::parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Compile(args) => cache::compile(args),
        Command::Cache(cmd) => cache::command(cmd),
        Command::Serve(args) => serve::serve(args),
        Command::Wast(args) => wast::run(args),
        Command::Bench(bench) => ephem_bench::run(bench),
    }
}
