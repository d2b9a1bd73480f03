//! `fresh-vs-wasmtime`: the fresh-instance workload (`ephem_bench::fresh`) on ephem and on wasmtime,
//! in one run, over the same modules, with the ratio per module.
//!
//! wasmtime is set up as its documentation recommends for many short-lived instances: the
//! pooling instance allocator (copy-on-write memory images, pooled memories and tables), and
//! modules precompiled to files once, then `Module::deserialize_file` on every invocation, since
//! the workload has too many modules to keep them loaded. Each invocation: deserialize, link
//! (unknown function imports trap, imported memories and tables are created), instantiate, call
//! the same export as ephem's side calls (see `ephem_bench::fresh`), drop the store and module.
//!
//! Host functions match ephem's side: wasmtime's own WASI preview 1 (`wasmtime-wasi`), with a
//! fresh context per invocation for modules that import it (stdout and stderr into memory
//! pipes), and Sightglass's `bench.start`/`bench.end` doing nothing.
//!
//! wasmtime's compiled files go to a directory of their own, beside ephem's cache.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use ephem_bench::fresh::{self, FreshArgs, Picker};

#[derive(Parser)]
#[command(about = "The fresh-instance workload on ephem and on wasmtime, side by side")]
struct Args {
    /// The workload, as `ephem bench fresh` takes it; `--dir` also holds wasmtime's files.
    #[command(flatten)]
    fresh: FreshArgs,
}

/// wasmtime's time per invocation, by part.
#[derive(Clone, Copy, Default)]
struct WtSample {
    deserialize: Duration,
    link: Duration,
    instantiate: Duration,
    call: Duration,
    teardown: Duration,
}

impl WtSample {
    fn total(&self) -> Duration {
        self.deserialize + self.link + self.instantiate + self.call + self.teardown
    }
}

fn wasmtime_engine() -> anyhow::Result<wasmtime::Engine> {
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    pool.total_memories(64)
        .total_tables(64)
        .total_core_instances(64);
    let mut config = wasmtime::Config::new();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    Ok(wasmtime::Engine::new(&config)?)
}

/// A wasmtime store's data: a WASI context for modules that import WASI.
struct WtData {
    wasi: Option<wasmtime_wasi::p1::WasiP1Ctx>,
}

/// The embedder's host functions for the module at `path`, defined once: WASI, the Sightglass
/// brackets, stubs that trap for the rest. Also: whether the module imports WASI.
fn wasmtime_host(
    engine: &wasmtime::Engine,
    path: &Path,
) -> anyhow::Result<(wasmtime::Linker<WtData>, bool)> {
    // SAFETY: as in `wasmtime_invoke`.
    let module = unsafe { wasmtime::Module::deserialize_file(engine, path)? };
    let mut linker = wasmtime::Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |d: &mut WtData| {
        d.wasi
            .as_mut()
            .expect("modules that import WASI get a context")
    })?;
    linker.func_wrap("bench", "start", || {})?;
    linker.func_wrap("bench", "end", || {})?;
    linker.define_unknown_imports_as_traps(&module)?;
    let wasi = module.imports().any(|i| i.module() == ephem_wasi::MODULE);
    Ok((linker, wasi))
}

/// A fresh WASI context, as ephem's side builds one: the module's name as its only argument,
/// output into memory.
fn wasmtime_wasi_ctx(name: &str) -> wasmtime_wasi::p1::WasiP1Ctx {
    use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
    wasmtime_wasi::WasiCtxBuilder::new()
        .arg(name)
        .stdout(MemoryOutputPipe::new(fresh::CAPTURE_BYTES))
        .stderr(MemoryOutputPipe::new(fresh::CAPTURE_BYTES))
        .build_p1()
}

fn wasmtime_invoke(
    engine: &wasmtime::Engine,
    path: &Path,
    (host, wasi): &(wasmtime::Linker<WtData>, bool),
    name: &str,
    export: Option<&str>,
) -> anyhow::Result<WtSample> {
    let mut s = WtSample::default();
    let t0 = Instant::now();
    // SAFETY: the file was written by `precompile_module` of this engine's configuration in this
    // run, and nothing modifies it while the benchmark runs.
    let module = unsafe { wasmtime::Module::deserialize_file(engine, path)? };
    let t1 = Instant::now();
    s.deserialize = t1 - t0;
    let data = WtData {
        wasi: wasi.then(|| wasmtime_wasi_ctx(name)),
    };
    let mut store = wasmtime::Store::new(engine, data);
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
    let instance = wasmtime::Instance::new(&mut store, &module, &imports)?;
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
        // A trap ends the invocation, as in ephem's workload.
        let _ = func.call(&mut store, &params, &mut results);
    }
    let t4 = Instant::now();
    s.call = t4 - t3;
    drop(store);
    drop(module);
    s.teardown = t4.elapsed();
    Ok(s)
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_nanos() as f64 / 1000.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse().fresh;
    let (dir, _temporary) = args.work_dir()?;

    // ephem.
    let ours = args.measure(&dir)?;

    // wasmtime, over the same modules, in the same random order.
    let wt = wasmtime_engine()?;
    std::fs::create_dir_all(dir.join("wasmtime"))?;
    let mut paths = Vec::new();
    for (file, subject) in args.files.iter().zip(&ours.subjects) {
        let wasm = wat::parse_file(file).with_context(|| format!("reading {}", file.display()))?;
        let path = dir.join("wasmtime").join(format!("{}.cwasm", subject.key));
        std::fs::write(&path, wt.precompile_module(&wasm)?)?;
        let host = wasmtime_host(&wt, &path)?;
        wasmtime_invoke(&wt, &path, &host, &subject.name, subject.export.as_deref())?;
        paths.push((path, host));
    }
    let mut theirs = vec![Vec::with_capacity(args.invocations); paths.len()];
    let mut picker = Picker::new(0x5eed);
    for _ in 0..args.invocations * paths.len() {
        let i = picker.pick(paths.len());
        let (path, host) = &paths[i];
        let subject = &ours.subjects[i];
        theirs[i].push(wasmtime_invoke(
            &wt,
            path,
            host,
            &subject.name,
            subject.export.as_deref(),
        )?);
    }

    // Throughput on `--threads` threads, as ephem's side measured it.
    let throughput = (args.threads > 1)
        .then(|| {
            let per_thread = args.invocations * paths.len();
            fresh::Throughput::measure(args.threads, per_thread, |thread| {
                let mut picker = Picker::new(0x5eed + thread as u64);
                for _ in 0..per_thread {
                    let i = picker.pick(paths.len());
                    let (path, host) = &paths[i];
                    let subject = &ours.subjects[i];
                    let export = subject.export.as_deref();
                    wasmtime_invoke(&wt, path, host, &subject.name, export)?;
                }
                Ok(())
            })
        })
        .transpose()?;

    if !args.json {
        println!(
            "{:<16} {:>12} {:>12} {:>14} {:>14} {:>8}",
            "module", "ephem med µs", "ephem p90 µs", "wasmtime med µs", "wasmtime p90 µs", "ratio"
        );
    }
    for (i, subject) in ours.subjects.iter().enumerate() {
        let mut e: Vec<Duration> = ours.samples[i].iter().map(|s| s.total()).collect();
        let mut w: Vec<Duration> = theirs[i].iter().map(WtSample::total).collect();
        let (em, ep) = fresh::median_p90(&mut e);
        let (wm, wp) = fresh::median_p90(&mut w);
        let ratio = wm.as_nanos() as f64 / em.as_nanos().max(1) as f64;
        if args.json {
            let part = |f: fn(&WtSample) -> Duration| {
                let mut v: Vec<Duration> = theirs[i].iter().map(f).collect();
                fresh::median_p90(&mut v).0.as_nanos() as u64
            };
            println!(
                "{}",
                serde_json::json!({"runtime": "ephem", "module": subject.name,
                    "export": subject.export,
                    "median_ns": em.as_nanos() as u64, "p90_ns": ep.as_nanos() as u64})
            );
            println!(
                "{}",
                serde_json::json!({"runtime": "wasmtime", "module": subject.name,
                    "export": subject.export,
                    "median_ns": wm.as_nanos() as u64, "p90_ns": wp.as_nanos() as u64,
                    "parts_median_ns": {
                        "deserialize": part(|s| s.deserialize), "link": part(|s| s.link),
                        "instantiate": part(|s| s.instantiate), "call": part(|s| s.call),
                        "teardown": part(|s| s.teardown)}})
            );
            println!(
                "{}",
                serde_json::json!({"module": subject.name, "wasmtime_over_ephem": ratio})
            );
        } else {
            println!(
                "{:<16} {:>12} {:>12} {:>14} {:>14} {:>7.1}×",
                subject.label(),
                us(em),
                us(ep),
                us(wm),
                us(wp),
                ratio
            );
        }
    }
    if let (Some(ours), Some(theirs)) = (ours.throughput, throughput) {
        ours.print("ephem", args.json);
        theirs.print("wasmtime", args.json);
    }
    Ok(())
}
