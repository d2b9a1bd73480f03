//! ephem's benchmarks, kept out of the product crates: what `ephem bench …` runs, what the
//! wasmtime comparison (`fresh-vs-wasmtime`) runs beside wasmtime, and the criterion benches.
//!
//! - [`fresh`]: the real workload, a fresh instance of a randomly picked cached module per
//!   invocation, timed by part through the runtime's one measurement seam
//!   (`InstancePre::instantiate_timed`).
//! - [`metering`]: what bounds a benchmark's guests (a deadline, fuel).
//! - [`load`]: every way the field makes code executable, side by side (the code pool's
//!   strategies, a plain copy as the physical limit), with a chart.
//! - [`syscalls`]: how the system calls of the fresh path scale across threads on this machine.
//! - [`threads`]: timing work on several threads at once, for both scaling measurements.
//! - [`thresholds`]: copying against mapping for texts and memory images across sizes, where
//!   the engine's defaults come from.
//!
//! Current results and the commands that produced them are in BENCHMARKS.md; their history is in
//! docs/bench-log/.

#![warn(clippy::undocumented_unsafe_blocks)]

mod chart;
pub mod fresh;
pub mod load;
pub mod metering;
pub mod stress;
pub mod syscalls;
pub mod threads;
pub mod thresholds;

use std::time::Duration;

/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// `ephem bench …`.
#[derive(clap::Subcommand)]
pub enum Bench {
    /// Time per load of every code-memory strategy beside a plain memcpy.
    Load(load::Args),
    /// The real workload: a fresh instance of a randomly picked cached module per invocation.
    Fresh(fresh::FreshArgs),
    /// Copying against mapping text and memory images, across sizes.
    Thresholds(thresholds::Args),
    /// Writes generated modules of the shapes that made the fresh path grow (many functions,
    /// many data segments, a large funcref table, an imported memory touched by the start
    /// function), for `bench fresh`.
    StressModules(stress::Args),
    /// How the system calls the fresh path makes scale from one thread to several, here.
    Syscalls(syscalls::Args),
}

/// Runs a benchmark command.
pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Load(args) => load::run(args),
        Bench::Fresh(args) => fresh::run(args),
        Bench::Thresholds(args) => thresholds::run(args),
        Bench::StressModules(args) => stress::run(args),
        Bench::Syscalls(args) => syscalls::run(args),
    }
}
