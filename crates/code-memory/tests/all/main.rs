//! The code pool's integration tests that need no process of their own, in one test binary.
//! `rwx_baseline` (a writable and executable mapping the W^X checks here would see) and
//! `steady_state` (it forks, and counts the process's mappings) stay binaries of their own.

#[path = "../common/mod.rs"]
mod common;

mod affinity;
mod strategies;
