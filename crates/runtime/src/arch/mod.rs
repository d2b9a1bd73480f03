//! What differs between architectures: the assembly through which the host enters wasm and
//! lands after a trap, the stubs through which generated code calls host functions
//! (`ephem_host_call`) and raises traps without a signal (`ephem_raise`), and the registers of
//! a signal context. Everything else about calls and traps is in `signals` (entering and
//! unwinding), `func` (host calls) and `builtins`. Only x86_64 Linux is written; another target
//! fails to build here rather than at run time (aarch64 needs its own stubs, and the code
//! pool's instruction-cache maintenance).

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86_64;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use x86_64::*;

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("ephem's runtime supports Linux on x86_64 only (see `arch`)");
