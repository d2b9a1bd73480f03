//! ephem's runtime: loads compiled modules through the code pool, instantiates them, runs them,
//! and turns faults in generated code into [`Trap`]s.
//!
//! It needs no compiler: it loads an [`Artifact`] (a file written by the compiler's side, or one
//! made in memory from an [`ephem_module::CompiledModule`]); the `cranelift` feature puts the
//! compiler in front of it (`Module::new`, as wasmtime's feature of that name). The embedder's view is wasmtime's:
//! an [`Engine`] (code pool, memory pool, type registry), a [`Module`] loaded into it, a
//! [`Store`] that owns everything instances make (see `store` for why that makes funcrefs
//! sound), [`Instance`]s made from a module and its imports ([`Extern`]s, resolved by name with
//! a [`Linker`], or once for many instantiations with an [`InstancePre`]), and [`Func`]s called
//! with [`Val`]s or, typed, through [`TypedFunc`]. Host functions are Rust closures
//! ([`Linker::func_wrap`]) that get a [`Caller`]: the store's data and the calling instance's
//! exports.
//!
//! GC objects live in a heap per store (see `gc`), which the host reads through [`AnyRef`],
//! [`StructRef`] and [`ArrayRef`].
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
#![warn(clippy::undocumented_unsafe_blocks)]

mod arch;
mod builtins;
#[cfg(feature = "cranelift")]
mod compile;
mod config;
mod context;
mod engine;
mod error;
mod exceptions;
mod externals;
mod func;
mod gc;
mod global;
mod instance;
mod instantiate;
mod interrupt;
mod libcalls;
mod limits;
mod linker;
mod load;
mod memory;
mod module;
// Public for `ephem bench syscalls`, which measures how its system call scales.
#[doc(hidden)]
pub mod pagemap;
mod refs;
mod shared;
mod signals;
mod store;
mod table;
mod trap;
mod typed;

#[cfg(feature = "cranelift")]
pub use compile::{compile_cached, compile_with, precompile, precompile_sealed};
pub use config::{Config, OptLevel};
pub use context::{AsContext, AsContextMut, StoreContext, StoreContextMut};
pub use engine::{
    DEFAULT_FIRST_GC_HEAP_BYTES, DEFAULT_MAP_TEXT_AT, DEFAULT_MAX_EXCEPTION_BYTES,
    DEFAULT_MAX_GC_HEAP_BYTES, DEFAULT_MAX_WASM_STACK, Engine, EngineConfig, EpochTicker,
};
pub use ephem_artifact::{Artifact, ArtifactKey, Bundle, Cache, Outcome};
pub use ephem_code_memory::{PoolConfig, Strategy};
#[cfg(feature = "cranelift")]
pub use ephem_compiler::{CompileError, Compiler, Proposals};
pub use ephem_module::{
    FieldType, FuncType, GlobalType, HeapType, ImportKind, MemoryType, RefType, StorageType,
    TableType, TrapKind, ValType,
};
pub use error::{Error, ErrorKind};
pub use exceptions::{ExnRef, Tag, TagType, ThrownException};
pub use externals::{Extern, Global, Memory, Table};
pub use func::{Caller, Func, HostError, Val};
pub use gc::types::{ArrayRefPre, ArrayType, StructRefPre, StructType};
#[doc(hidden)]
pub use instance::DefinedState;
pub use instance::Instance;
pub use instantiate::InstantiateTimings;
pub use limits::{DEFAULT_COUNT, ResourceLimiter, StoreLimits, StoreLimitsBuilder};
pub use linker::{InstancePre, Linker};
pub use memory::MemoryConfig;
pub use memory::{HostBytes, SharedMemory, WaitResult};
pub use module::{ExportRef, ExternType, ImportRef, Module};
pub use refs::{AnyRef, ArrayRef, EqRef, ExternRef, I31, StructRef};
pub use shared::Shared;
pub use signals::trap_signals;
pub use store::Store;
pub use trap::{FrameInfo, Trap};
pub use typed::{HostReturn, IntoFunc, TypedFunc, WasmParams, WasmResults, WasmTy};

use ephem_module::VmFuncRef;

/// `Result` with ephem's [`Error`] by default, as `wasmtime::Result` (whose error is `anyhow`'s).
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
