//! ephem: a WebAssembly runtime for one fresh instance per call.
//!
//! This crate puts the compiler ([`ephem_compiler`]) in front of the runtime
//! ([`ephem_runtime`], re-exported here): [`compile`] turns wasm or wat bytes into a
//! [`Module`]. A deployment that only runs precompiled modules uses the runtime alone.
//! [`wast`] runs WebAssembly script files (the official spec tests). Every fallible function
//! returns the one [`Error`] type, whose [`Error::kind`] says what went wrong.
//!
//! The API is wasmtime's, where it has a name for the thing: an [`Engine`], [`Module`]s,
//! a [`Store`] per invocation that owns what instances make, a [`Linker`] of host functions
//! defined once, [`InstancePre`] for instantiating one module many times, [`TypedFunc`] calls.
//!
//! ```
//! use ephem::{Caller, Engine, Linker, Store};
//!
//! # fn main() -> Result<(), ephem::Error> {
//! let engine = Engine::default();
//! let module = ephem::compile(
//!     &engine,
//!     br#"(module
//!           (import "host" "double" (func $double (param i32) (result i32)))
//!           (func (export "run") (param i32) (result i32)
//!             (i32.add (call $double (local.get 0)) (i32.const 1))))"#,
//! )?;
//!
//! // Host functions are plain closures; `Caller` gives the store's data.
//! let mut linker = Linker::new(&engine);
//! linker.func_wrap("host", "double", |mut caller: Caller<'_, u32>, x: i32| {
//!     *caller.data_mut() += 1;
//!     x * 2
//! })?;
//!
//! // One store per invocation: dropping it frees the instance and everything it made.
//! let mut store = Store::new(&engine, 0u32);
//! let instance = linker.instantiate(&mut store, &module)?;
//! let run = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
//! assert_eq!(run.call(&mut store, 20)?, 41);
//! assert_eq!(*store.data(), 1, "the host function ran once");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod snapshot;
pub mod wast;

pub use ephem_compiler::{CompileError, Compiler, Proposals};
pub use ephem_module::CompiledModule;
pub use ephem_runtime::*;

/// Validates and compiles wasm (binary or text) for `engine`, for this CPU.
pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
    compile_with(&Compiler::new().map_err(Error::compile)?, engine, bytes)
}

/// As [`compile`], with a given compiler.
pub fn compile_with(compiler: &Compiler, engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
    Module::new(engine, &precompile(compiler, bytes)?)
}

/// Compiles `bytes` (wasm or wat) without an engine, for an artifact file: what [`compile`]
/// loads. Like it, runs the module's start function now where that is what every
/// instantiation would do (see `snapshot`; [`Compiler::compile`] alone does not).
pub fn precompile(compiler: &Compiler, bytes: &[u8]) -> Result<CompiledModule, Error> {
    let compiled = compiler.compile(bytes).map_err(Error::compile)?;
    if compiled.info.start.is_none() {
        return Ok(compiled);
    }
    let wasm = wat::parse_bytes(bytes).map_err(Error::compile)?;
    Ok(snapshot::apply(compiled, &wasm))
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
    let (artifact, outcome) = cache.get_or_compile(&key, || precompile(compiler, wasm))?;
    Ok((Module::from_artifact(engine, artifact), outcome))
}
