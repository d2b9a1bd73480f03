//! ephem's runtime: loads compiled modules through the code pool, instantiates them, runs them,
//! and turns faults in generated code into [`Trap`]s.
//!
//! It needs no compiler: it loads an [`Artifact`] (a file written by the compiler's side, or one
//! made in memory from an [`ephem_module::CompiledModule`]). The embedder's view is the usual
//! one: an [`Engine`] (code pool, memory pool, type registry), a [`Module`] loaded into it, an [`Instance`] made from the module and its imports ([`Extern`]s, resolved by
//! name with a [`Linker`]), and [`Func`]s called with [`Val`]s.
//!
//! Instances are deliberately not `Send`: everything about one lives on the thread that made it
//! (the workload is one fresh instance per invocation per thread), which is what lets generated
//! code find its stack limit through the instance context.
//!
//! # Lifetimes: a known gap
//! A function reference stored in a table or global holds a raw pointer into its instance, and
//! does not keep that instance alive. An embedder that shares tables or funcref globals between
//! instances (as the spec tests' `register` does) must keep those instances alive as long as the
//! shared tables and globals are used: calling or reading a funcref whose instance was dropped
//! is undefined behaviour. The fresh workload (every instance with its own imports, all dropped
//! together) is not affected. The real fix is a store that owns linked instances together, as
//! wasmtime's does; it is not built yet.
//!
//! Platform: Linux on x86_64 (see `signals` for the only assembly and signal code).

mod engine;
mod instance;
mod libcalls;
mod linker;
mod memory;
mod signals;
mod table;
mod typed;
mod values;

use std::rc::Rc;

pub use engine::{DEFAULT_MAP_TEXT_AT, Engine, EngineConfig};
pub use ephem_artifact::{Artifact, Cache, Outcome};
pub use ephem_code_memory::{PoolConfig, Strategy};
pub use ephem_module::{FuncType, GlobalType, MemoryType, TableType, TrapKind, ValType};
pub use instance::{ImportRef, Instance, InstantiateTimings, Module};
pub use linker::Linker;
pub use memory::{Memory, MemoryConfig};
pub use table::{Global, Table};
pub use typed::{TypedFunc, WasmParams, WasmResults, WasmTy};
pub use values::{Func, HostError, Val};

/// Something an instance imports or exports.
#[derive(Clone)]
pub enum Extern {
    Func(Func),
    Memory(Rc<Memory>),
    Table(Rc<Table>),
    Global(Rc<Global>),
}

impl std::fmt::Debug for Extern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Extern::Func(func) => write!(f, "func {:?}", func.ty()),
            Extern::Memory(m) => write!(f, "memory {:?}", m.ty()),
            Extern::Table(t) => write!(f, "table {:?}", t.ty()),
            Extern::Global(g) => write!(f, "global {:?}", g.ty),
        }
    }
}

/// A trap: wasm execution stopped for one of the reasons in [`TrapKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trap {
    pub kind: TrapKind,
    /// The wasm function (index in its module) and code offset within it, where known.
    pub func: Option<u32>,
    pub offset: Option<u32>,
    /// For [`TrapKind::HostError`]: what the host function said.
    pub host_message: Option<String>,
}

impl Trap {
    pub(crate) fn new(kind: TrapKind) -> Trap {
        Trap {
            kind,
            func: None,
            offset: None,
            host_message: None,
        }
    }
    pub(crate) fn host(message: String) -> Trap {
        Trap {
            host_message: Some(message),
            ..Trap::new(TrapKind::HostError)
        }
    }
}

impl std::fmt::Display for Trap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "wasm trap: {}", self.kind.message())?;
        if let Some(msg) = &self.host_message {
            write!(f, ": {msg}")?;
        }
        if let (Some(func), Some(offset)) = (self.func, self.offset) {
            write!(f, " (in function {func}, at code offset {offset:#x})")?;
        }
        Ok(())
    }
}

/// What can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Trap(Trap),
    #[error("link error: {0}")]
    Link(String),
    #[error("type mismatch: {0}")]
    Type(String),
    #[error("resource limit: {0}")]
    Resource(String),
    #[error("no export named `{0}`")]
    NoExport(String),
    #[error(transparent)]
    CodeMemory(#[from] ephem_code_memory::Error),
    #[error(transparent)]
    Artifact(#[from] ephem_artifact::Error),
}

impl Error {
    /// The trap, if this error is one.
    pub fn trap(&self) -> Option<&Trap> {
        match self {
            Error::Trap(t) => Some(t),
            _ => None,
        }
    }
}
