//! `wasi-threads`: the `wasi` module's `thread-spawn`, with which a `-pthread` program
//! (clang's `wasm32-wasip1-threads`) starts threads.
//!
//! A program of that target imports its memory, shared, and exports `wasi_thread_start(tid,
//! start_arg)`. `thread-spawn(start_arg)` gives the new thread an id, and runs, on a new host
//! thread, a fresh instance of the same module in a store of its own, linked to the same
//! shared memory, calling `wasi_thread_start`: ephem's usual fresh instance, one per thread.
//!
//! Each thread's store gets its data from the embedder's `make` (for `ephem run`, a WASI
//! context built from the same template: the same arguments, environment, preopened
//! directories and standard streams). Descriptors a thread opens are its own: wasi-libc's
//! threads share memory, and a program that opens a file on one thread and reads it on another
//! does not run here as under wasmtime (whose threads share one descriptor table).
//!
//! A thread that exits (`proc_exit`) or traps ends the whole program: the embedder's
//! `on_error` hears it (`ephem run` exits the process, as wasmtime does). Each thread's store
//! gets its limits from the embedder's `setup`: in `ephem run`, `--fuel` and `--timeout` bound
//! each thread on its own, from its start. Fuel stays each store's, as wasmtime's does; the
//! main thread's deadline ends the whole program (the program ends with its main thread, and a
//! deadline ends a wait too), so `--timeout` bounds the program as a whole.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use ephem_runtime::{Caller, Engine, Error, Linker, Module, Store};

/// The import module of `thread-spawn`.
pub const MODULE: &str = "wasi";

/// The largest thread id (ids are positive `i32`s of 29 bits: wasi-libc keeps flags above).
const MAX_TID: u32 = 0x1FFF_FFFF;

/// What finishes a thread's store (limits, fuel, deadline).
type Setup<T> = Box<dyn Fn(&mut Store<T>) -> Result<(), Error> + Send + Sync>;

/// What a thread's store is made with; see [`WasiThreads::new`].
pub struct WasiThreads<T> {
    engine: Engine,
    module: Module,
    /// Every import, the shared memory among them (one linker serves every thread's store).
    linker: Linker<T>,
    make: Box<dyn Fn() -> Result<T, Error> + Send + Sync>,
    setup: Setup<T>,
    on_error: Box<dyn Fn(u32, Error) + Send + Sync>,
    stack_size: usize,
    next: AtomicU32,
}

/// Where [`add_to_linker`] finds the [`WasiThreads`] once it is made (the linker it holds
/// defines `thread-spawn` itself, which holds this weakly: the embedder keeps it).
pub type Threads<T> = Arc<OnceLock<WasiThreads<T>>>;

/// Defines `wasi`'s `thread-spawn` in `linker`; it spawns through `threads` once that is set
/// (until then, and when a thread cannot be made, it returns -1, as the proposal says).
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    threads: &Threads<T>,
) -> Result<(), Error> {
    // Weakly: the `WasiThreads` holds the linker, which holds this function. (A thread that
    // runs holds it strongly.)
    let threads = Arc::downgrade(threads);
    linker.func_wrap(
        MODULE,
        "thread-spawn",
        move |_: Caller<'_, T>, start_arg: i32| {
            let Some(threads) = threads.upgrade() else {
                return -1;
            };
            match threads.get() {
                Some(t) => t.spawn(&threads, start_arg),
                None => -1,
            }
        },
    )?;
    Ok(())
}

impl<T: Send + 'static> WasiThreads<T> {
    /// Threads of `module`, linked with `linker`, which has all it imports: its shared memory
    /// (defined as a [`SharedMemory`](ephem_runtime::SharedMemory), which each store gets a
    /// memory of), WASI and `thread-spawn`. A thread's store takes its data from `make`, then
    /// `setup` (limits, fuel, deadline); a thread that exits or traps is given to `on_error`
    /// with its id; each runs on a host thread with `stack_size` bytes of stack.
    pub fn new(
        engine: &Engine,
        module: &Module,
        linker: &Linker<T>,
        make: impl Fn() -> Result<T, Error> + Send + Sync + 'static,
        setup: impl Fn(&mut Store<T>) -> Result<(), Error> + Send + Sync + 'static,
        on_error: impl Fn(u32, Error) + Send + Sync + 'static,
        stack_size: usize,
    ) -> WasiThreads<T> {
        WasiThreads {
            engine: engine.clone(),
            module: module.clone(),
            linker: linker.clone(),
            make: Box::new(make),
            setup: Box::new(setup),
            on_error: Box::new(on_error),
            stack_size,
            next: AtomicU32::new(1),
        }
    }

    /// `thread-spawn`: the new thread's id, or -1.
    fn spawn(&self, threads: &Threads<T>, start_arg: i32) -> i32 {
        let next = |tid: u32| (tid <= MAX_TID).then_some(tid + 1);
        let Ok(tid) = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, next)
        else {
            return -1;
        };
        let threads = threads.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("wasi-thread-{tid}"))
            .stack_size(self.stack_size)
            .spawn(move || {
                let this = threads.get().expect("set before any thread spawns");
                if let Err(e) = this.run(tid, start_arg) {
                    (this.on_error)(tid, e);
                }
            });
        match spawned {
            Ok(_) => tid as i32,
            Err(_) => -1,
        }
    }

    /// The thread: a fresh instance in a store of its own, `wasi_thread_start(tid, arg)`.
    fn run(&self, tid: u32, start_arg: i32) -> Result<(), Error> {
        let mut store = Store::new(&self.engine, (self.make)()?);
        (self.setup)(&mut store)?;
        let instance = self.linker.instantiate(&mut store, &self.module)?;
        let start = instance.get_typed_func::<(i32, i32), ()>(&mut store, "wasi_thread_start")?;
        start.call(&mut store, (tid as i32, start_arg))?;
        Ok(())
    }
}
