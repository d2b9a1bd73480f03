//! ephem: a WebAssembly runtime for one fresh instance per call.
//!
//! This crate puts the compiler ([`ephem_compiler`]) in front of the runtime
//! ([`ephem_runtime`], re-exported here): [`compile`] turns wasm or wat bytes into a
//! [`Module`]. A deployment that only runs precompiled modules uses the runtime alone.
//! [`wast`] runs WebAssembly script files (the official spec tests). Every fallible function
//! returns the one [`Error`] type, whose [`Error::kind`] says what went wrong.

pub mod wast;

pub use ephem_compiler::{CompileError, Compiler};
pub use ephem_runtime::*;

/// Validates and compiles wasm (binary or text) for `engine`, for this CPU.
pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
    compile_with(&Compiler::new().map_err(Error::compile)?, engine, bytes)
}

/// As [`compile`], with a given compiler.
pub fn compile_with(compiler: &Compiler, engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
    Module::new(engine, &compiler.compile(bytes).map_err(Error::compile)?)
}

/// The module for `wasm`, through `cache`: opened if cached, else compiled and stored. The
/// [`Outcome`] says which, and why the cache could not be used if it could not.
pub fn compile_cached(
    compiler: &Compiler,
    engine: &Engine,
    cache: &Cache,
    wasm: &[u8],
) -> Result<(Module, Outcome), Error> {
    let key = Cache::key(wasm, &compiler.fingerprint());
    let (artifact, outcome) =
        cache.get_or_compile(&key, || compiler.compile(wasm).map_err(Error::compile))?;
    Ok((Module::from_artifact(engine, artifact), outcome))
}
