//! What differs between architectures: the assembly that enters wasm and lands after a trap,
//! and the registers of a signal context. Everything else about calls and traps is in
//! `signals`. Only x86_64 Linux is written; another target fails to build here rather than
//! at run time (aarch64 needs its own stub, and the code pool's instruction-cache maintenance).

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86_64;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use x86_64::*;

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("ephem's runtime supports Linux on x86_64 only (see `arch`)");
