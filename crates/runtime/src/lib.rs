//! ephem's runtime: loads compiled modules through the code pool, instantiates them, runs them,
//! and turns faults in generated code into [`Trap`]s.
//!
//! It needs no compiler: it loads an [`Artifact`] (a file written by the compiler's side, or one
//! made in memory from an [`ephem_module::CompiledModule`]). The embedder's view is wasmtime's:
//! an [`Engine`] (code pool, memory pool, type registry), a [`Module`] loaded into it, a
//! [`Store`] that owns everything instances make (see `store` for why that makes funcrefs
//! sound), [`Instance`]s made from a module and its imports ([`Extern`]s, resolved by name with
//! a [`Linker`], or once for many instantiations with an [`InstancePre`]), and [`Func`]s called
//! with [`Val`]s or, typed, through [`TypedFunc`]. Host functions are Rust closures
//! ([`Linker::func_wrap`]) that get a [`Caller`]: the store's data and the calling instance's
//! exports.
//!
//! Bounding guests: a store's [`ResourceLimiter`] (see `limits`) bounds what it may take; an
//! epoch deadline ([`Store::set_epoch_deadline`]) interrupts any module (see `interrupt`), and
//! fuel ([`Store::set_fuel`]) meters modules compiled for it.
//!
//! Threads: [`Engine`], [`Module`], [`Linker`] and [`InstancePre`] are `Send + Sync` (for
//! `T: Send`), and a [`Store`] is `Send`: one linker serves every worker thread, each with
//! stores of its own.
//!
//! Platform: Linux on x86_64 (`arch` holds the only assembly; `signals` the signal handling).

#![warn(missing_docs)]

mod arch;
mod engine;
mod externals;
mod func;
mod instance;
mod interrupt;
mod libcalls;
mod limits;
mod linker;
mod memory;
// Public for `ephem bench syscalls`, which measures how its system call scales.
#[doc(hidden)]
pub mod pagemap;
mod shared;
mod signals;
mod store;
mod table;
mod typed;

use std::sync::Arc;

pub use engine::{DEFAULT_MAP_TEXT_AT, DEFAULT_MAX_WASM_STACK, Engine, EngineConfig, EpochTicker};
pub use ephem_artifact::{Artifact, ArtifactKey, Cache, Outcome};
pub use ephem_code_memory::{PoolConfig, Strategy};
pub use ephem_module::{FuncType, GlobalType, MemoryType, TableType, TrapKind, ValType};
pub use externals::{Extern, Global, Memory, Table};
pub use func::{Caller, ExternRef, Func, HostError, Val};
#[doc(hidden)]
pub use instance::DefinedState;
pub use instance::{ExportRef, ExternType, ImportRef, Instance, InstantiateTimings, Module};
pub use limits::{DEFAULT_COUNT, ResourceLimiter, StoreLimits, StoreLimitsBuilder};
pub use linker::{InstancePre, Linker};
pub use memory::HostBytes;
pub use memory::MemoryConfig;
pub use shared::Shared;
pub use signals::trap_signals;
pub use store::{AsContext, AsContextMut, Store, StoreContext, StoreContextMut};
pub use typed::{HostReturn, IntoFunc, TypedFunc, WasmParams, WasmResults, WasmTy};

use ephem_module::VmFuncRef;

/// A trap: wasm execution stopped for one of the reasons in [`TrapKind`].
#[derive(Clone, Debug)]
pub struct Trap {
    /// Why execution stopped.
    pub kind: TrapKind,
    /// The wasm function (index in its module) and code offset within it, where known.
    pub func: Option<u32>,
    /// See `func`.
    pub offset: Option<u32>,
    /// The wasm functions on the stack when it trapped, innermost first (at most 32).
    backtrace: Vec<FrameInfo>,
    /// For [`TrapKind::HostError`]: the error the host function returned.
    error: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// One wasm frame of a trap's backtrace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// The function's index in its module.
    pub func: u32,
    /// Its name from the module's name section, if it has one.
    pub name: Option<String>,
    /// The code offset within the function.
    pub offset: u32,
}

impl std::fmt::Display for FrameInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} (function {})", self.func)?,
            None => write!(f, "function {}", self.func)?,
        }
        write!(f, " at code offset {:#x}", self.offset)
    }
}

impl Trap {
    pub(crate) fn new(kind: TrapKind) -> Trap {
        Trap {
            kind,
            func: None,
            offset: None,
            backtrace: Vec::new(),
            error: None,
        }
    }

    pub(crate) fn host(error: HostError) -> Trap {
        Trap {
            error: Some(error.into()),
            ..Trap::new(TrapKind::HostError)
        }
    }

    /// The error a host function returned, for a trap of kind [`TrapKind::HostError`].
    pub fn host_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.error.as_deref()
    }

    /// The wasm functions on the stack when it trapped, innermost first (at most 32; empty for
    /// a trap outside wasm code, such as an instantiation's out-of-bounds segment).
    pub fn backtrace(&self) -> &[FrameInfo] {
        &self.backtrace
    }

    /// The host function's error as `E`, if it is one.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.host_error()?.downcast_ref()
    }
}

impl std::fmt::Display for Trap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "wasm trap: {}", self.kind.message())?;
        if let Some(e) = &self.error {
            write!(f, ": {e}")?;
        }
        if !self.backtrace.is_empty() {
            write!(f, "\nwasm backtrace:")?;
            for (i, frame) in self.backtrace.iter().enumerate() {
                write!(f, "\n  {i:>2}: {frame}")?;
            }
        }
        Ok(())
    }
}

/// What can go wrong, from bytes to results: one type for the whole embedding API, with a
/// [`ErrorKind`] to match on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The module is not valid (or not supported) WebAssembly.
    #[error("{0}")]
    Compile(Box<dyn std::error::Error + Send + Sync>),
    /// Imports missing or of the wrong type.
    #[error("link error: {0}")]
    Link(String),
    /// Wasm execution trapped.
    #[error("{0}")]
    Trap(Trap),
    /// A compiled artifact could not be written, read or used.
    #[error(transparent)]
    Artifact(#[from] ephem_artifact::Error),
    /// A resource limit: memory, tables, code space.
    #[error("resource limit: {0}")]
    Limit(String),
    /// Code memory could not be had.
    #[error(transparent)]
    CodeMemory(#[from] ephem_code_memory::Error),
    /// An I/O error outside artifacts.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The API was used in a way that cannot work: wrong argument types, no such export.
    #[error("{0}")]
    Usage(String),
}

/// What kind of [`Error`] happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// See [`Error::Compile`].
    Compile,
    /// See [`Error::Link`].
    Link,
    /// See [`Error::Trap`].
    Trap,
    /// See [`Error::Artifact`].
    Artifact,
    /// See [`Error::Limit`] and [`Error::CodeMemory`].
    Limit,
    /// See [`Error::Io`].
    Io,
    /// See [`Error::Usage`].
    Usage,
}

impl Error {
    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Compile(_) => ErrorKind::Compile,
            Error::Link(_) => ErrorKind::Link,
            Error::Trap(_) => ErrorKind::Trap,
            Error::Artifact(_) => ErrorKind::Artifact,
            Error::Limit(_) | Error::CodeMemory(_) => ErrorKind::Limit,
            Error::Io(_) => ErrorKind::Io,
            Error::Usage(_) => ErrorKind::Usage,
        }
    }

    /// The trap, if this error is one.
    pub fn trap(&self) -> Option<&Trap> {
        match self {
            Error::Trap(t) => Some(t),
            _ => None,
        }
    }

    /// A compile error from any source (the compiler's own type lives in another crate).
    pub fn compile(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Compile(Box::new(e))
    }
}

/// Compile-time checks of the threading promises in the crate documentation.
#[allow(dead_code)]
fn assert_thread_safety() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Engine>();
    send_sync::<Module>();
    send_sync::<Linker<std::cell::Cell<u8>>>();
    send_sync::<InstancePre<std::cell::Cell<u8>>>();
    send::<Store<std::cell::Cell<u8>>>();
    send_sync::<Func>();
    send_sync::<Instance>();
    send_sync::<Memory>();
}
