//! The wasmtime side of the fresh-instance comparisons, set up as wasmtime's documentation
//! recommends for many short-lived instances: the pooling instance allocator (copy-on-write
//! memory images, pooled memories and tables), modules precompiled to files once.
//!
//! Host functions match ephem's side: wasmtime's own WASI preview 1 (`wasmtime-wasi`), with a
//! fresh context per invocation for modules that import it (stdout and stderr into memory
//! pipes), Sightglass's `bench.start`/`bench.end` doing nothing, and stubs that trap for every
//! other function import; imported memories and tables are created per store.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

/// What bounds a call when the engine is [`engine`]`(true)`: fuel, and a deadline in epoch
/// ticks (an [`EpochTicker`] advances them).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub fuel: u64,
    pub ticks: u64,
}

/// wasmtime's time per invocation, by part.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    pub deserialize: Duration,
    pub link: Duration,
    pub instantiate: Duration,
    pub call: Duration,
    pub teardown: Duration,
}

impl Sample {
    pub fn total(&self) -> Duration {
        self.deserialize + self.link + self.instantiate + self.call + self.teardown
    }
}

/// An engine with the pooling allocator; `bounded`: with fuel and epoch interruption, for
/// calls under [`Bounds`].
pub fn engine(bounded: bool) -> anyhow::Result<wasmtime::Engine> {
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    // Room for real modules: WebAssembly 2.0 allows several tables (wasm-bindgen's output has
    // a funcref and an externref table), and Rust programs' funcref tables pass the default
    // of 20 000 elements (Biome's has 21 752); the pool's defaults are one table of that size.
    pool.total_memories(64)
        .total_tables(64)
        .total_core_instances(64)
        .max_tables_per_module(8)
        .table_elements(1 << 17);
    let mut config = wasmtime::Config::new();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    config.consume_fuel(bounded).epoch_interruption(bounded);
    Ok(wasmtime::Engine::new(&config)?)
}

/// Advances an engine's epoch every tick until dropped.
pub struct EpochTicker {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: &wasmtime::Engine, tick: Duration) -> EpochTicker {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (engine, flag) = (engine.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        });
        EpochTicker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A store's data: a WASI context for modules that import WASI.
pub struct Data {
    wasi: Option<wasmtime_wasi::p1::WasiP1Ctx>,
}

/// The embedder's host functions for `module`, defined once: WASI, the Sightglass brackets,
/// stubs that trap for the rest. Also: whether the module imports WASI.
pub fn host(
    engine: &wasmtime::Engine,
    module: &wasmtime::Module,
) -> anyhow::Result<(wasmtime::Linker<Data>, bool)> {
    let mut linker = wasmtime::Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |d: &mut Data| {
        d.wasi
            .as_mut()
            .expect("modules that import WASI get a context")
    })?;
    linker.func_wrap("bench", "start", || {})?;
    linker.func_wrap("bench", "end", || {})?;
    linker.define_unknown_imports_as_traps(module)?;
    let wasi = module.imports().any(|i| i.module() == ephem_wasi::MODULE);
    Ok((linker, wasi))
}

/// The module in `path`, written by [`wasmtime::Engine::precompile_module`] of an engine
/// configured as `engine` is.
pub fn deserialize(engine: &wasmtime::Engine, path: &Path) -> anyhow::Result<wasmtime::Module> {
    // SAFETY: the files this package passes were written by `precompile_module` of an engine
    // of the same configuration in the same run, and nothing modifies them while it runs.
    Ok(unsafe { wasmtime::Module::deserialize_file(engine, path)? })
}

/// A fresh WASI context, as ephem's side builds one: the module's name as its only argument,
/// output into memory.
fn wasi_ctx(name: &str, capture: usize) -> wasmtime_wasi::p1::WasiP1Ctx {
    use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
    wasmtime_wasi::WasiCtxBuilder::new()
        .arg(name)
        .stdout(MemoryOutputPipe::new(capture))
        .stderr(MemoryOutputPipe::new(capture))
        .build_p1()
}

/// One invocation of `module`, loaded: a fresh store (under `bounds`, if given), its
/// imports linked, an instance, a call of `export` (zero arguments; a trap ends the call, as on
/// ephem's side), teardown. `deserialize` of the sample is left at zero.
pub fn invoke(
    engine: &wasmtime::Engine,
    module: &wasmtime::Module,
    (host, wasi): &(wasmtime::Linker<Data>, bool),
    name: &str,
    export: Option<&str>,
    bounds: Option<Bounds>,
) -> anyhow::Result<Sample> {
    let mut s = Sample::default();
    let t1 = Instant::now();
    let data = Data {
        wasi: wasi.then(|| wasi_ctx(name, ephem_bench::fresh::CAPTURE_BYTES)),
    };
    let mut store = wasmtime::Store::new(engine, data);
    if let Some(b) = bounds {
        store.set_fuel(b.fuel)?;
        store.set_epoch_deadline(b.ticks);
    }
    // Fresh memories and tables for this instance; the host functions are the embedder's.
    let mut imports = Vec::with_capacity(module.imports().len());
    for import in module.imports() {
        imports.push(match import.ty() {
            wasmtime::ExternType::Memory(ty) => wasmtime::Memory::new(&mut store, ty)?.into(),
            wasmtime::ExternType::Table(ty) => {
                wasmtime::Table::new(&mut store, ty, wasmtime::Ref::Func(None))?.into()
            }
            _ => host.get(&mut store, import.module(), import.name())?,
        });
    }
    let t2 = Instant::now();
    s.link = t2 - t1;
    let instance = wasmtime::Instance::new(&mut store, module, &imports)?;
    let t3 = Instant::now();
    s.instantiate = t3 - t2;
    if let Some(name) = export {
        let func = instance
            .get_func(&mut store, name)
            .with_context(|| format!("no export `{name}`"))?;
        let ty = func.ty(&store);
        let params: Vec<wasmtime::Val> = ty
            .params()
            .map(|t| wasmtime::Val::default_for_ty(&t).unwrap_or(wasmtime::Val::I32(0)))
            .collect();
        let mut results = vec![wasmtime::Val::I32(0); ty.results().len()];
        let _ = func.call(&mut store, &params, &mut results);
    }
    let t4 = Instant::now();
    s.call = t4 - t3;
    drop(store);
    s.teardown = t4.elapsed();
    Ok(s)
}

/// [`invoke`] with the module deserialized from `path` first and dropped after, timed.
pub fn invoke_file(
    engine: &wasmtime::Engine,
    path: &Path,
    host: &(wasmtime::Linker<Data>, bool),
    name: &str,
    export: Option<&str>,
    bounds: Option<Bounds>,
) -> anyhow::Result<Sample> {
    let t0 = Instant::now();
    let module = deserialize(engine, path)?;
    let deserialize = t0.elapsed();
    let mut s = invoke(engine, &module, host, name, export, bounds)?;
    let t = Instant::now();
    drop(module);
    s.teardown += t.elapsed();
    s.deserialize = deserialize;
    Ok(s)
}
