//! WASI preview 1 (`wasi_snapshot_preview1`) for ephem: the host that C (wasi-libc), Rust
//! (`wasm32-wasip1`), TinyGo and Go (`GOOS=wasip1`) programs expect; and for components, the
//! first part of WASI 0.2 over the same context ([`p2`]).
//!
//! Three parts, and a fourth for `-pthread` programs ([`threads`]: `wasi-threads`'
//! `thread-spawn`, each thread a fresh instance on the shared memory):
//! - [`WasiCtx`] (`ctx`): one guest's arguments, environment, stdio and descriptors, made per
//!   invocation from a [`WasiCtxBuilder`] template without system calls.
//! - The sandbox (`fs`): a guest sees only the directories preopened for it, resolved by the
//!   kernel with `openat2(RESOLVE_BENEATH)`; nothing it names leads outside them.
//! - The functions (`host`), linked by [`add_to_linker`]: every preview 1 function, each
//!   either implemented or returning a documented errno (sockets and `proc_raise`: `ENOTSUP`).
//!   A guest pointer outside its memory is an `EFAULT` (`mem`), never a host fault.
//!
//! `proc_exit` ends the guest with [`I32Exit`], an error the call returns (read it with
//! [`exit_code`]); it is not a trap of the guest's making.
//!
//! ```
//! use ephem::{Engine, Linker, Store};
//! use ephem_wasi::{Output, WasiCtx};
//!
//! # fn main() -> anyhow::Result<()> {
//! let engine = Engine::default();
//! let module = ephem::Module::new(&engine, br#"(module
//!     (import "wasi_snapshot_preview1" "fd_write"
//!       (func $write (param i32 i32 i32 i32) (result i32)))
//!     (memory (export "memory") 1)
//!     (data (i32.const 16) "hi\n")
//!     (func (export "_start")
//!       (i32.store (i32.const 0) (i32.const 16))   ;; iovec: buf
//!       (i32.store (i32.const 4) (i32.const 3))    ;; iovec: len
//!       (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#)?;
//! let mut linker = Linker::new(&engine);
//! ephem_wasi::add_to_linker(&mut linker, |ctx: &mut WasiCtx| ctx)?;
//!
//! // The template, once; a context per invocation.
//! let mut template = WasiCtx::builder();
//! template.arg("prog")?.stdout(Output::Capture(1 << 20));
//! let mut store = Store::new(&engine, template.build());
//! let instance = linker.instantiate(&mut store, &module)?;
//! instance.get_typed_func::<(), ()>(&mut store, "_start")?.call(&mut store, ())?;
//! assert_eq!(store.data().stdout(), b"hi\n");
//! # Ok(())
//! # }
//! ```

#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod abi;
mod ctx;
mod fs;
mod host;
mod mem;
pub mod p2;
pub mod threads;

pub use abi::Errno;
pub use ctx::{BuildError, DirPerms, Input, MAX_FDS, Output, WasiCtx, WasiCtxBuilder};

use ephem_runtime::{Caller, Error, Extern, Linker};
use mem::GuestMemory;

/// The import module name of WASI preview 1.
pub const MODULE: &str = "wasi_snapshot_preview1";

/// The guest called `proc_exit` with this status: the call that was running returns an error
/// carrying it (see [`exit_code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("exit with status {0}")]
pub struct I32Exit(pub i32);

/// The guest's exit status, if `error` is its `proc_exit`.
pub fn exit_code(error: &Error) -> Option<i32> {
    error.trap()?.downcast_ref::<I32Exit>().map(|e| e.0)
}

/// A WASI function was called by an instance that exports no memory named `memory`.
#[derive(Debug, thiserror::Error)]
#[error("WASI functions need the calling instance to export its memory as `memory`")]
pub struct NoMemory;

/// Runs a WASI function with the context and the calling instance's memory; its errno is the
/// guest's result.
fn call<T>(
    caller: &mut Caller<'_, T>,
    get: fn(&mut T) -> &mut WasiCtx,
    f: impl FnOnce(&mut WasiCtx, &mut GuestMemory<'_>) -> mem::Result<()>,
) -> Result<i32, NoMemory> {
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Err(NoMemory);
    };
    let (bytes, data) = memory.host_bytes_and_store_mut(caller);
    let errno = match f(get(data), &mut GuestMemory(bytes)) {
        Ok(()) => Errno::SUCCESS,
        Err(e) => e,
    };
    Ok(i32::from(errno.0))
}

/// Defines every function of `wasi_snapshot_preview1` in `linker`; `get` finds the
/// [`WasiCtx`] in the store's data.
pub fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), Error> {
    macro_rules! link {
        ($($name:ident $(as $method:ident)? ($($arg:ident: $ty:ty),*);)*) => {$(
            linker.func_wrap(
                MODULE,
                stringify!($name),
                move |mut caller: Caller<'_, T>, $($arg: $ty),*| {
                    call(&mut caller, get, |ctx, m| link!(@method ctx m $name $($method)? ($($arg),*)))
                },
            )?;
        )*};
        (@method $ctx:ident $m:ident $name:ident ($($arg:ident),*)) => { $ctx.$name($m, $($arg),*) };
        (@method $ctx:ident $m:ident $name:ident $method:ident ($($arg:ident),*)) => {
            { let _ = ($($arg,)*); $ctx.$method($m) }
        };
    }
    link! {
        args_get(argv: u32, buf: u32);
        args_sizes_get(count: u32, size: u32);
        environ_get(environ: u32, buf: u32);
        environ_sizes_get(count: u32, size: u32);
        clock_res_get(id: u32, res: u32);
        clock_time_get(id: u32, precision: u64, time: u32);
        random_get(buf: u32, len: u32);
        sched_yield();
        proc_raise(signal: u32);
        fd_read(fd: u32, iovs: u32, n: u32, nread: u32);
        fd_pread(fd: u32, iovs: u32, n: u32, offset: u64, nread: u32);
        fd_write(fd: u32, iovs: u32, n: u32, nwritten: u32);
        fd_pwrite(fd: u32, iovs: u32, n: u32, offset: u64, nwritten: u32);
        fd_seek(fd: u32, offset: i64, whence: u32, new: u32);
        fd_tell(fd: u32, out: u32);
        fd_close(fd: u32);
        fd_renumber(from: u32, to: u32);
        fd_fdstat_get(fd: u32, out: u32);
        fd_fdstat_set_flags(fd: u32, flags: u32);
        fd_fdstat_set_rights(fd: u32, base: u64, inheriting: u64);
        fd_filestat_get(fd: u32, out: u32);
        fd_filestat_set_size(fd: u32, size: u64);
        fd_filestat_set_times(fd: u32, atim: u64, mtim: u64, flags: u32);
        fd_advise(fd: u32, offset: u64, len: u64, advice: u32);
        fd_allocate(fd: u32, offset: u64, len: u64);
        fd_sync(fd: u32);
        fd_datasync(fd: u32);
        fd_prestat_get(fd: u32, out: u32);
        fd_prestat_dir_name(fd: u32, path: u32, len: u32);
        fd_readdir(fd: u32, buf: u32, len: u32, cookie: u64, used: u32);
        path_open(fd: u32, lookup: u32, path: u32, path_len: u32, oflags: u32, base: u64,
            inheriting: u64, flags: u32, out: u32);
        path_create_directory(fd: u32, path: u32, len: u32);
        path_remove_directory(fd: u32, path: u32, len: u32);
        path_unlink_file(fd: u32, path: u32, len: u32);
        path_rename(fd: u32, old: u32, old_len: u32, new_fd: u32, new: u32, new_len: u32);
        path_symlink(old: u32, old_len: u32, fd: u32, new: u32, new_len: u32);
        path_link(fd: u32, lookup: u32, old: u32, old_len: u32, new_fd: u32, new: u32,
            new_len: u32);
        path_readlink(fd: u32, path: u32, len: u32, buf: u32, buf_len: u32, used: u32);
        path_filestat_get(fd: u32, lookup: u32, path: u32, len: u32, out: u32);
        path_filestat_set_times(fd: u32, lookup: u32, path: u32, len: u32, atim: u64,
            mtim: u64, flags: u32);
        poll_oneoff(subs: u32, events: u32, n: u32, nevents: u32);
        sock_accept as sock_unsupported(fd: u32, flags: u32, out: u32);
        sock_recv as sock_unsupported(fd: u32, data: u32, data_len: u32, flags: u32,
            len_out: u32, flags_out: u32);
        sock_send as sock_unsupported(fd: u32, data: u32, data_len: u32, flags: u32,
            len_out: u32);
        sock_shutdown as sock_unsupported(fd: u32, how: u32);
    }
    linker.func_wrap(MODULE, "proc_exit", |code: i32| -> Result<(), I32Exit> {
        Err(I32Exit(code))
    })?;
    Ok(())
}
