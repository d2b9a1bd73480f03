//! What ephem knows about a compiled module: its WebAssembly-level description ([`ModuleInfo`]),
//! its machine code and where things are in it ([`CompiledModule`]), and the layout of the
//! per-instance context that the code reads ([`VmOffsets`]).
//!
//! This crate is shared by the compiler, which produces a [`CompiledModule`], and the runtime,
//! which loads one; it depends on neither, so a runtime-only build needs no compiler.
//!
//! # The calling convention
//! Every wasm function uses Cranelift's `tail` calling convention (so that `return_call` is a
//! real tail call): it takes the callee's instance context (`vmctx`), then the caller's (null
//! when the host calls), so that a host function knows which instance called it, then its wasm
//! parameters, and returns its wasm results. The text also holds, per function type, an *entry
//! trampoline* `fn(vmctx, callee, values: *mut ValRaw)` in the host's system calling
//! convention, which the host calls (arguments in, results out through `values`), and a *host
//! adapter* with the wasm signature that wasm calls to reach a host function (see
//! [`HostFuncHeader`]).
//!
//! Metered code ([`ModuleInfo::metered`]) also passes the store's remaining fuel in the
//! target's pinned register (x86_64: `r15`), which it never uses otherwise: set before every
//! call and return, read at entry and after every call. The runtime loads it from the store
//! when it enters wasm, writes it back when wasm returns or traps, and around host functions.
//! Unmetered code keeps that register as callee-saved, so the two kinds cannot call each other
//! (a store runs only one).
//!
//! The runtime enters wasm through an entry stub that calls the entry trampoline, with the
//! address of the `Raise` builtin at [`ENTRY_FRAME_RAISE`] from the stub's frame pointer. A
//! failed bounds check (x86-64) reaches it by following frame pointers up to the frame the
//! trampoline's call made, without the vmctx, which the function may no longer hold.
//!
//! The crate's files: `types.rs` (value and function types, constant expressions, small ids),
//! `info.rs` ([`ModuleInfo`] and its parts), `compiled.rs` ([`CompiledModule`], traps and
//! relocations), `vmctx.rs` (the instance context's layout and the builtins), `gc.rs` (GC objects and
//! references), `funcrefs.rs`
//! (where funcrefs live, lazy tables) and `check.rs` (the consistency check of an info read
//! from a file).

#![forbid(unsafe_code)]

mod check;
mod compiled;
mod funcrefs;
pub mod gc;
mod info;
mod types;
mod vmctx;

use rkyv::Deserialize;

pub use compiled::*;
pub use funcrefs::{FuncrefLayout, LazyTable};
pub use gc::VmGcHeap;
pub use info::*;
pub use types::*;
pub use vmctx::*;

/// The native value of an archived one (see [`ArchivedModuleInfo`]).
///
/// For the plain data in module metadata this cannot fail: the archive was validated when the
/// artifact was opened, and these types own no resources.
pub fn native<T, A>(archived: &A) -> T
where
    A: Deserialize<T, rkyv::rancor::Strategy<rkyv::de::Pool, rkyv::rancor::Error>>,
{
    rkyv::deserialize::<T, rkyv::rancor::Error>(archived)
        .expect("validated plain data always deserializes")
}

/// Where the runtime's entry stub keeps the address of the `Raise` builtin: this many bytes
/// from its frame pointer (the frame pointer an entry trampoline saves). See the calling
/// convention above.
pub const ENTRY_FRAME_RAISE: i32 = -48;
