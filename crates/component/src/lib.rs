//! The component model for ephem, with wasmtime's `component::*` names: [`Component`],
//! [`Linker`], [`Instance`], [`Func`], [`TypedFunc`], [`Val`].
//!
//! A component is compiled once into its core modules and a *plan* (`inline`): the component's
//! nesting, aliases and instantiations worked out at compile time into a straight list of core
//! instantiations and lowered functions. Instantiating runs that list in one store, so a
//! component's fresh instance costs what its core instances cost, and fuel, deadlines and
//! resource limits apply as to any core instance of the store.
//!
//! The stages, one file each:
//! - `translate`: validation (wasmparser) and each component's definitions, types converted;
//! - `inline`: the definitions run over symbolic values into a plan (`plan`);
//! - `artifact`: a compiled component as one sealed file, loaded without the compiler;
//! - `abi`: the canonical ABI, lifting and lowering [`Val`]s through core values and memory;
//! - `instance`: running a plan in a store, and calling lifted functions;
//! - `linker`: host functions by name and path, checked against the types they are lowered at;
//! - `resources`: resource types (the host's, and those components define), handle tables,
//!   `resource.new`, `.rep` and `.drop`;
//! - `typed`: Rust types as component types, for [`TypedFunc`] and [`LinkerInstance::func_wrap`];
//! - [`wave`]: values as text, as `wasmtime run --invoke` reads and prints them.
//!
//! Not yet supported (each refused with [`Error::Unsupported`] when a component is compiled):
//! async, the threads
//! built-ins, fixed-length lists, maps, error contexts, value imports and exports, start
//! functions, imported modules and components. A call between two
//! parts of one component goes through the host's lifting and lowering (`Callee::Lifted`), not
//! through generated adapter code. A component artifact is loaded whole into memory (its
//! modules' artifacts copied into memory files); the per-invocation path from disk that modules
//! have (an artifact kept open per thread, images mapped from the file) is not there yet.

#![warn(missing_docs)]

mod abi;
mod artifact;
#[cfg(feature = "cranelift")]
mod inline;
mod instance;
mod linker;
mod plan;
mod resources;
#[cfg(feature = "cranelift")]
mod translate;
mod typed;
mod types;
mod values;
pub mod wave;

use std::sync::Arc;

use ephem_runtime::{ArtifactKey, Engine, Module};

pub use artifact::{MAGIC, is_component_artifact};
pub use instance::{ComponentExportIndex, Func, Instance, TypedFunc};
pub use linker::{InstancePre, Linker, LinkerInstance};
pub use resources::{Resource, ResourceAny, ResourceTable, ResourceTableError, ResourceType};
pub use typed::{ComponentNamedList, ComponentType};
pub use types::{Case, Field, FuncType, Type};
pub use values::Val;

/// What can go wrong compiling, linking or calling a component.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a valid component.
    #[error("invalid component: {0}")]
    Invalid(String),
    /// A component artifact that cannot be used: not one, another format or version, not
    /// sealed with the key given, damaged.
    #[error("component artifact: {0}")]
    Artifact(String),
    /// Valid, but uses a part of the component model ephem does not run yet.
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// A core module of the component failed to compile or instantiate, or a core call
    /// trapped.
    #[error(transparent)]
    Runtime(#[from] ephem_runtime::Error),
    /// A guest broke the canonical ABI (a bad pointer, discriminant, char or string); the
    /// call traps with this.
    #[error("canonical ABI: {0}")]
    Abi(String),
    /// A host function failed; the guest that called it traps with this.
    #[error(transparent)]
    Host(ephem_runtime::HostError),
    /// An import the linker does not define, or defines with another type.
    #[error("link error: {0}")]
    Link(String),
    /// The API was used in a way that cannot work: wrong argument types, no such export.
    #[error("{0}")]
    Usage(String),
}

impl From<ephem_artifact::Error> for Error {
    fn from(e: ephem_artifact::Error) -> Error {
        Error::Runtime(e.into())
    }
}

#[cfg(feature = "cranelift")]
impl From<wasmparser::BinaryReaderError> for Error {
    fn from(e: wasmparser::BinaryReaderError) -> Error {
        Error::Invalid(e.to_string())
    }
}

/// A compiled component: its core modules and the plan that instantiates them.
#[derive(Clone)]
pub struct Component {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    modules: Vec<Module>,
    plan: plan::Plan,
}

impl Component {
    /// Validates and compiles a component from its binary or text form (with the engine's
    /// compiler).
    #[cfg(feature = "cranelift")]
    pub fn new(engine: &Engine, bytes: impl AsRef<[u8]>) -> Result<Component, Error> {
        Component::new_with(engine, bytes, engine.compiler()?, |compiler, wasm| {
            ephem_runtime::compile_with(compiler, engine, wasm)
        })
    }

    /// As [`Component::new`], with each core module compiled by `compile` (through a cache,
    /// or with fuel metering, as the embedder compiles modules), which is given `compiler` as
    /// a component's modules need it: [`Compiler::assuming_exports_grow`], since the parts of
    /// a component grow each other's memories (the preview 1 adapter grows the main module's).
    ///
    /// [`Compiler::assuming_exports_grow`]: ephem_runtime::Compiler::assuming_exports_grow
    #[cfg(feature = "cranelift")]
    pub fn new_with(
        engine: &Engine,
        bytes: impl AsRef<[u8]>,
        compiler: &ephem_runtime::Compiler,
        mut compile: impl FnMut(&ephem_runtime::Compiler, &[u8]) -> Result<Module, ephem_runtime::Error>,
    ) -> Result<Component, Error> {
        let compiler = compiler.clone().assuming_exports_grow();
        let bytes = wat::parse_bytes(bytes.as_ref())
            .map_err(|e| Error::Usage(format!("not a component in the text format: {e}")))?;
        let read = translate::read(&bytes)?;
        let modules = (read.modules.iter().zip(&read.module_names))
            .map(|(range, name)| {
                let module = compile(&compiler, &bytes[range.clone()])?;
                if let Some(name) = name {
                    module.set_name(name);
                }
                Ok(module)
            })
            .collect::<Result<Vec<_>, ephem_runtime::Error>>()?;
        let imports: inline::ModuleImports = (modules.iter())
            .map(|m| {
                m.imports()
                    .map(|i| (i.module.to_string(), i.name.to_string()))
                    .collect()
            })
            .collect();
        let plan = inline::inline(&read.translations, &imports)?;
        Ok(Component {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                modules,
                plan,
            }),
        })
    }

    /// As [`Component::new`], from a file.
    #[cfg(feature = "cranelift")]
    pub fn from_file(
        engine: &Engine,
        path: impl AsRef<std::path::Path>,
    ) -> Result<Component, Error> {
        let bytes = std::fs::read(path.as_ref())
            .map_err(|e| Error::Usage(format!("reading {}: {e}", path.as_ref().display())))?;
        Component::new(engine, bytes)
    }

    /// The component as an artifact's bytes, sealed with `key` (see `artifact`).
    pub fn to_artifact(&self, key: &ArtifactKey) -> Result<Vec<u8>, Error> {
        artifact::write(&self.inner.plan, &self.inner.modules, key)
    }

    /// Loads a component from artifact bytes [`Component::to_artifact`] wrote, which must be
    /// sealed with `key`; nothing is compiled. The bytes are copied into a memory file, and
    /// verified whole on every call: for a file, [`Component::from_artifact_file`] verifies
    /// once and maps instead.
    pub fn from_artifact(
        engine: &Engine,
        bytes: &[u8],
        key: &ArtifactKey,
    ) -> Result<Component, Error> {
        let bundle = ephem_artifact::Bundle::from_bytes(bytes)?;
        Component::from_bundle(engine, &bundle, key)
    }

    /// Opens the component artifact at `path`, which must be sealed with `key`; nothing is
    /// compiled. Its core modules are opened in place (their code and memory images mapped
    /// from the file), its seal is verified once per file in a process, and each thread keeps
    /// what it opened last, so that opening the same file again makes no system call while it
    /// is still the one at `path` (asked at most once a second, as the cache asks the entries
    /// it keeps; see `ephem_artifact::Bundle`). What a thread keeps holds its engine until the
    /// thread lets it go (its least recently used first, beyond a per-thread bound).
    pub fn from_artifact_file(
        engine: &Engine,
        path: impl AsRef<std::path::Path>,
        key: &ArtifactKey,
    ) -> Result<Component, Error> {
        ephem_artifact::Bundle::open_kept(path.as_ref(), engine.id(), key, |bundle| {
            Component::from_bundle(engine, &bundle, key)
        })
    }

    fn from_bundle(
        engine: &Engine,
        bundle: &ephem_artifact::Bundle,
        key: &ArtifactKey,
    ) -> Result<Component, Error> {
        let (plan, modules) = artifact::open(engine, bundle, key)?;
        Ok(Component {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                modules,
                plan,
            }),
        })
    }

    /// The component as an artifact sealed with the engine's key (wasmtime's name).
    pub fn serialize(&self) -> Result<Vec<u8>, Error> {
        self.to_artifact(self.inner.engine.artifact_key(true)?)
    }

    /// Loads an artifact [`Component::serialize`] wrote, verified with the engine's key.
    ///
    /// # Safety
    /// As for `Module::deserialize`: an artifact is native code; ephem checks its seal, so
    /// the caller's part is that the key is the deployment's own.
    pub unsafe fn deserialize(
        engine: &Engine,
        bytes: impl AsRef<[u8]>,
    ) -> Result<Component, Error> {
        Component::from_artifact(engine, bytes.as_ref(), engine.artifact_key(false)?)
    }

    /// As [`Component::deserialize`], from a file (as [`Component::from_artifact_file`]).
    ///
    /// # Safety
    /// As for [`Component::deserialize`].
    pub unsafe fn deserialize_file(
        engine: &Engine,
        path: impl AsRef<std::path::Path>,
    ) -> Result<Component, Error> {
        Component::from_artifact_file(engine, path, engine.artifact_key(false)?)
    }

    /// The engine the component was compiled for.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The names of the component's imports, in order.
    pub fn imports(&self) -> impl Iterator<Item = &str> {
        self.inner.plan.imports.iter().map(|(n, _)| n.as_str())
    }

    /// The component's exported functions, each by its path (an instance's name first for a
    /// function an exported instance holds) and type.
    pub fn exported_funcs(&self) -> Vec<(Vec<String>, &FuncType)> {
        fn walk<'a>(
            plan: &'a plan::Plan,
            prefix: &[String],
            exports: &'a [(String, plan::Export)],
            out: &mut Vec<(Vec<String>, &'a FuncType)>,
        ) {
            for (name, export) in exports {
                let mut path = prefix.to_vec();
                path.push(name.clone());
                match export {
                    plan::Export::Func(l) => out.push((path, &plan.lifts[*l].ty)),
                    plan::Export::Instance(items) => walk(plan, &path, items, out),
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.inner.plan, &[], &self.inner.plan.exports, &mut out);
        out
    }

    /// Whether `bytes` start like a component rather than a core module (by the binary's
    /// layer field; text is not looked at).
    pub fn is_component(bytes: &[u8]) -> bool {
        // A binary's preamble: the magic, then version 0x0d and layer 1 (a core module's
        // layer is 0).
        bytes.starts_with(b"\0asm") && bytes.get(6..8) == Some(&[1, 0])
    }
}
