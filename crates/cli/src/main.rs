//! The `ephem` command line.

#![warn(clippy::undocumented_unsafe_blocks)]

/// `println!` that returns a failed write instead of panicking: a reader that closed the pipe
/// early (`ephem cache stats | head -1`) ends the command quietly (see `exit::finish`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod cache;
mod component;
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
    exit::finish(dispatch(Cli::parse_from(with_default_command(
        std::env::args_os(),
    ))))
}

/// `ephem [RUN OPTIONS] prog.wasm …` is `ephem run …`, as with `wasmtime`: a first argument
/// that is neither a command's name nor one of the top level's own flags (help, version) starts
/// a run.
fn with_default_command(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let mut args: Vec<_> = args.into_iter().collect();
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        let command = Cli::command();
        let named = first == "help" || command.find_subcommand(first).is_some();
        let top_level_flag = ["-h", "--help", "-V", "--version"].contains(&first);
        if !named && !top_level_flag {
            args.insert(1, "run".into());
        }
    }
    args
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Compile(args) => cache::compile(args),
        Command::Cache(cmd) => cache::command(cmd),
        Command::Serve(args) => serve::serve(args),
        Command::Wast(args) => wast::run(args),
        Command::Bench(bench) => {
            // The benchmarks print as they go, through `println!`, which panics on a closed
            // pipe while Rust ignores SIGPIPE; they run no guest that writes to our stdout, so
            // they may end as a Unix filter does when its reader stops (`ephem bench … | head`).
            // SAFETY: setting a signal's disposition to its default, before any thread exists
            // that could be handling it; no handler of ours is replaced (the runtime handles
            // other signals only).
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            ephem_bench::run(bench)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_default_command;

    fn args(list: &[&str]) -> Vec<String> {
        let list = list.iter().map(std::ffi::OsString::from);
        with_default_command(list)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn a_module_as_first_argument_is_run() {
        assert_eq!(
            args(&["ephem", "hello.wasm", "x"]),
            ["ephem", "run", "hello.wasm", "x"]
        );
        assert_eq!(
            args(&["ephem", "run", "a.wasm"]),
            ["ephem", "run", "a.wasm"]
        );
        assert_eq!(
            args(&["ephem", "cache", "stats"]),
            ["ephem", "cache", "stats"]
        );
        assert_eq!(args(&["ephem", "--help"]), ["ephem", "--help"]);
        assert_eq!(args(&["ephem", "-V"]), ["ephem", "-V"]);
        assert_eq!(
            args(&["ephem", "--dir", ".", "a.wasm"]),
            ["ephem", "run", "--dir", ".", "a.wasm"]
        );
        assert_eq!(args(&["ephem", "help"]), ["ephem", "help"]);
        assert_eq!(args(&["ephem"]), ["ephem"]);
    }
}
