//! Compiling in the process (the `cranelift` feature): wasmtime's front door, `Module::new`.
//!
//! The runtime itself only runs artifacts; this module puts the compiler in front of it, as
//! wasmtime's `cranelift` feature does. A module compiled here goes through an artifact in a
//! memory file ([`Module::from_compiled`]), so it takes exactly the loading path of one read
//! from disk. [`precompile`] also runs the start function at compile time where that is what
//! every instantiation would do (see `snapshot`).

mod snapshot;

use std::path::Path;
use std::sync::OnceLock;

use ephem_compiler::Compiler;
use ephem_module::CompiledModule;

use crate::config::{CompilerConfig, OptLevel};
use crate::{ArtifactKey, Cache, Engine, Error, Module, Outcome};

/// The engine's compiler, built on first use (a runtime-only user of the engine never pays
/// for one).
pub(crate) struct EngineCompiler {
    config: CompilerConfig,
    built: OnceLock<Result<Compiler, String>>,
}

impl EngineCompiler {
    pub(crate) fn new(config: CompilerConfig) -> EngineCompiler {
        EngineCompiler {
            config,
            built: OnceLock::new(),
        }
    }

    pub(crate) fn get(&self) -> Result<&Compiler, Error> {
        let c = self.config;
        let built = self.built.get_or_init(|| {
            let opt_level = match c.opt_level {
                OptLevel::None => "none",
                OptLevel::Speed => "speed",
                OptLevel::SpeedAndSize => "speed_and_size",
            };
            let mut compiler = Compiler::with_settings(&[("opt_level", opt_level)], &[])
                .map_err(|e| e.to_string())?
                .with_proposals(c.proposals);
            if c.fuel {
                compiler = compiler.with_fuel();
            }
            if !c.bounds_checks {
                compiler = compiler.without_bounds_checks();
            }
            if !c.write_marks {
                compiler = compiler.without_write_marks();
            }
            Ok(compiler)
        });
        built
            .as_ref()
            .map_err(|e| Error::compile(std::io::Error::other(e.clone())))
    }
}

impl Module {
    /// Validates and compiles `bytes` (a wasm binary, or the text format) with the engine's
    /// compiler (see [`crate::Config`]).
    pub fn new(engine: &Engine, bytes: impl AsRef<[u8]>) -> Result<Module, Error> {
        compile_with(engine.compiler()?, engine, bytes.as_ref())
    }

    /// As [`Module::new`], for a wasm binary only (the text format is refused, as in
    /// wasmtime).
    pub fn from_binary(engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
        if !bytes.starts_with(b"\0asm") {
            return Err(Error::compile(std::io::Error::other(
                "not a wasm binary (it does not start with `\\0asm`)",
            )));
        }
        Module::new(engine, bytes)
    }

    /// Reads and compiles the wasm or text-format file at `path`.
    pub fn from_file(engine: &Engine, path: impl AsRef<Path>) -> Result<Module, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("reading {}: {e}", path.display()),
            ))
        })?;
        Module::new(engine, bytes)
    }
}

impl Engine {
    /// Compiles `bytes` (wasm or the text format) into a sealed artifact file's bytes, without
    /// loading it: what [`Module::serialize`] of [`Module::new`]'s module would give, for
    /// [`Module::deserialize_file`] or `ephem run` elsewhere (wasmtime's name for it).
    pub fn precompile_module(&self, bytes: &[u8]) -> Result<Vec<u8>, Error> {
        precompile_sealed(self.compiler()?, bytes, self.artifact_key(true)?)
    }
}

/// As [`Module::new`], with a given compiler.
pub fn compile_with(compiler: &Compiler, engine: &Engine, bytes: &[u8]) -> Result<Module, Error> {
    Module::from_compiled(engine, &precompile(compiler, bytes)?)
}

/// Compiles `bytes` (wasm or wat) without an engine, for an artifact file: what
/// [`Module::new`] loads. Like it, runs the module's start function now where that is what
/// every instantiation would do (see `snapshot`; [`Compiler::compile`] alone does not).
pub fn precompile(compiler: &Compiler, bytes: &[u8]) -> Result<CompiledModule, Error> {
    let compiled = compiler.compile(bytes).map_err(Error::compile)?;
    if compiled.info.start.is_none() {
        return Ok(compiled);
    }
    let wasm = wat::parse_bytes(bytes).map_err(Error::compile)?;
    Ok(snapshot::apply(compiled, &wasm))
}

/// As [`precompile`], written as an artifact file's bytes sealed with `key`. The artifact
/// records the compile cache's key for `bytes`, so the file is also a valid cache entry for it.
pub fn precompile_sealed(
    compiler: &Compiler,
    bytes: &[u8],
    key: &ArtifactKey,
) -> Result<Vec<u8>, Error> {
    let compiled = precompile(compiler, bytes)?;
    let source = Cache::source(&Cache::key(bytes, &compiler.fingerprint()));
    Ok(ephem_artifact::to_bytes(&compiled, &source, key))
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
