//! What the side-by-side binaries of this package share: the statistics their tables report,
//! and the wasmtime side of the fresh-instance comparisons ([`wt`]).

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod oha;
pub mod wt;

use std::time::Duration;

pub use ephem_bench::median;

/// `d` in milliseconds, three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// The geometric mean of ratios.
pub fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}
