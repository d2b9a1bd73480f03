//! The fresh-instance workload, measured: what `ephem bench fresh` runs and what the wasmtime
//! comparison runs beside it.
//!
//! Every module is compiled once into the cache, and the embedder's host functions are defined
//! once (stubs that trap, of the types the module imports), as an embedder defines its API once.
//! Then each invocation picks a module at random and takes the whole path with no loaded module
//! carried over from earlier invocations: open the artifact from the cache by key, load its code,
//! link its imports (the host functions, and fresh memories and tables of the declared types),
//! instantiate in a new [`Store`] (memories, segments, start), call the export if one is named,
//! and tear everything down (drop the store and the module).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::{Cache, Compiler, Engine, Linker, Module, Store, Val, ValType};

/// A module of the workload, compiled into the cache.
#[derive(Clone, Debug)]
pub struct Subject {
    pub name: String,
    /// Its cache key (computed once, as an embedder that addresses modules by hash would).
    pub key: String,
    pub text_bytes: usize,
    pub artifact_bytes: u64,
}

/// One invocation's time, by part.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub open: Duration,
    pub load_code: Duration,
    pub link: Duration,
    pub memories: Duration,
    pub instantiate: Duration,
    pub call: Duration,
    pub teardown: Duration,
}

impl Sample {
    pub fn total(&self) -> Duration {
        self.open
            + self.load_code
            + self.link
            + self.memories
            + self.instantiate
            + self.call
            + self.teardown
    }

    /// The parts, named, in path order.
    pub fn parts(&self) -> [(&'static str, Duration); 7] {
        [
            ("open", self.open),
            ("load_code", self.load_code),
            ("link", self.link),
            ("memories", self.memories),
            ("instantiate", self.instantiate),
            ("call", self.call),
            ("teardown", self.teardown),
        ]
    }
}

/// Compiles every file into `cache` (if not there yet).
pub fn prepare(
    compiler: &Compiler,
    engine: &Engine,
    cache: &Cache,
    files: &[PathBuf],
) -> anyhow::Result<Vec<Subject>> {
    files
        .iter()
        .map(|path| {
            let wasm =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let (module, outcome) = crate::compile_cached(compiler, engine, cache, &wasm)
                .with_context(|| format!("compiling {}", path.display()))?;
            if let crate::Outcome::Uncached { why } = outcome {
                anyhow::bail!("the benchmark needs a working cache: {why}");
            }
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            Ok(Subject {
                name,
                key: Cache::key(&wasm, &compiler.fingerprint()),
                text_bytes: module.artifact().text_len(),
                artifact_bytes: module.artifact().file_len(),
            })
        })
        .collect()
}

/// Per module: every invocation's sample.
pub struct Results {
    pub subjects: Vec<Subject>,
    pub samples: Vec<Vec<Sample>>,
}

/// Runs the workload: each module once to warm up (the first open of a file verifies its
/// checksum, once per process), then `invocations * modules` invocations in random order.
pub fn measure(
    engine: &Engine,
    cache: &Cache,
    files: &[PathBuf],
    export: Option<&str>,
    invocations: usize,
) -> anyhow::Result<Results> {
    let subjects = prepare(&Compiler::new()?, engine, cache, files)?;
    let mut hosts = Vec::new();
    for s in &subjects {
        let module = Module::from_artifact(engine, cache.open(&s.key)?.context("cached")?);
        let mut host = Linker::new(engine);
        host.define_unknown_imports_as_traps(&module)?;
        invoke(engine, cache, s, &host, export)?;
        hosts.push(host);
    }
    let mut samples = vec![Vec::with_capacity(invocations); subjects.len()];
    let mut picker = Picker::new(0x5eed);
    for _ in 0..invocations * subjects.len() {
        let i = picker.pick(subjects.len());
        samples[i].push(invoke(engine, cache, &subjects[i], &hosts[i], export)?);
    }
    Ok(Results { subjects, samples })
}

/// Zero arguments of the given types.
pub fn zero_args(types: &[ValType]) -> Vec<Val> {
    types.iter().map(|&t| Val::default_for(t)).collect()
}

/// One invocation of `subject`. A trap in the called export counts as a finished call (the
/// workload runs untrusted code; trapping is one way for it to end).
pub fn invoke(
    engine: &Engine,
    cache: &Cache,
    subject: &Subject,
    host: &Linker<()>,
    export: Option<&str>,
) -> anyhow::Result<Sample> {
    let mut s = Sample::default();
    let t0 = Instant::now();
    let artifact = cache
        .open(&subject.key)?
        .with_context(|| format!("{} is not in the cache", subject.name))?;
    let module = Module::from_artifact(engine, artifact);
    let t1 = Instant::now();
    s.open = t1 - t0;
    let mut store = Store::new(engine, ());
    let pre = host.instantiate_pre(&module)?;
    let t2 = Instant::now();
    s.link = t2 - t1;
    let (instance, timings) = pre
        .instantiate_timed(&mut store)
        .with_context(|| format!("instantiating {}", subject.name))?;
    s.load_code = timings.load_code;
    s.memories = timings.memories;
    s.instantiate = timings.check_imports + timings.initialise;
    let t3 = Instant::now();
    if let Some(name) = export {
        let func = instance
            .get_func(&mut store, name)
            .with_context(|| format!("{} exports no function `{name}`", subject.name))?;
        let ty = func.ty(&store);
        let mut results = zero_args(&ty.results);
        let _ = func.call(&mut store, &zero_args(&ty.params), &mut results);
    }
    let t4 = Instant::now();
    s.call = t4 - t3;
    drop(store);
    drop(pre);
    drop(module);
    s.teardown = t4.elapsed();
    Ok(s)
}

/// Median and 90th percentile of `values`.
pub fn median_p90(values: &mut [Duration]) -> (Duration, Duration) {
    if values.is_empty() {
        return Default::default();
    }
    values.sort_unstable();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

/// A small deterministic generator for picking modules (xorshift64*): the benchmark's order is
/// the same on every run, and picking costs nothing next to what is measured.
pub struct Picker(u64);

impl Picker {
    pub fn new(seed: u64) -> Picker {
        Picker(seed | 1)
    }

    pub fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}
