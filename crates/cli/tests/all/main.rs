//! The command line's integration tests, in one test binary (each file under `tests/` is a
//! binary of its own, linking everything again). Each test runs `ephem` as a child process.

mod bench_fresh;
mod bench_load;
mod bench_stress;
mod cache;
mod readme;
mod run_and_wast;
mod serve;
mod wasi;
