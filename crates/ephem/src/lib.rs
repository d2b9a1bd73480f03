//! ephem: a WebAssembly runtime for one fresh instance per call.
//!
//! This crate is the runtime ([`ephem_runtime`], re-exported here) with, under the default
//! `cranelift` feature, the compiler in front of it: [`Module::new`] turns wasm or wat bytes
//! into a module, as in wasmtime. Without the feature (`default-features = false`) the crate
//! only runs precompiled artifacts ([`Module::deserialize_file`]) and pulls in no compiler.
//! [`wast`] runs WebAssembly script files (the official spec tests). Every fallible function
//! returns the one [`Error`] type, whose [`Error::kind`] says what went wrong.
//!
//! The API is wasmtime's, where it has a name for the thing: an [`Engine`], [`Module`]s,
//! a [`Store`] per invocation that owns what instances make, a [`Linker`] of host functions
//! defined once, [`InstancePre`] for instantiating one module many times, [`TypedFunc`] calls.
//!
//! ```
//! use ephem::{Caller, Config, Engine, Linker, Module, Store};
//!
//! # fn main() -> Result<(), ephem::Error> {
//! let engine = Engine::new(&Config::new())?;
//! let module = Module::new(
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

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod units;
#[cfg(feature = "cranelift")]
pub mod wast;

pub use ephem_module::CompiledModule;
pub use ephem_runtime::*;

/// The component model, as wasmtime's `component` module: [`component::Component`],
/// [`component::Linker`], [`component::Instance`], [`component::Val`] (see the crate
/// `ephem-component` for what is supported yet). Without the `cranelift` feature, components
/// load from their artifacts only.
pub use ephem_component as component;
