//! ephem: a WebAssembly runtime for one fresh instance per call.
//!
//! This crate puts the compiler ([`ephem_compiler`]) in front of the runtime
//! ([`ephem_runtime`], re-exported here): [`compile`] turns wasm or wat bytes into a
//! [`Module`]. A deployment that only runs precompiled modules uses the runtime alone.
//! [`wast`] runs WebAssembly script files (the official spec tests).

pub mod wast;

pub use ephem_compiler::CompileError;
pub use ephem_runtime::*;

/// Anything that can go wrong between bytes and results.
#[derive(Debug, thiserror::Error)]
pub enum EphemError {
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Runtime(#[from] Error),
}

/// Validates and compiles wasm (binary or text) for `engine`.
pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Module, CompileError> {
    Ok(Module::new(engine, ephem_compiler::compile(bytes)?))
}
