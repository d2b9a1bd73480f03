//! The `ephem` crate's integration tests that need no process of their own, in one test binary
//! (each file under `tests/` is a binary of its own, linking everything again). The tests that
//! fork, count the process's mappings or descriptors, or disturb its signals stay in binaries
//! of their own beside this folder.

mod artifact;
mod bounds_checks;
mod cache;
mod edge_4gib;
mod embedding;
mod engine;
mod examples;
mod exceptions;
mod forged;
mod fuel;
mod gc_collection;
mod gc_objects;
mod gc_types;
mod hostile;
mod interrupt;
mod lazy_tables;
mod limits;
mod loop_marks;
mod simd;
mod snapshot;
mod spec;
mod table_reuse;
mod threads;
mod typed_refs;
mod w_xor_x;
mod wasmtime_names;
