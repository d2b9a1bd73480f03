//! The fresh-instance workload, measured: what `ephem bench fresh` runs and what the wasmtime
//! comparison runs beside it (with the same arguments, [`FreshArgs`], flattened into its own).
//!
//! Every module is compiled once into the cache, and the embedder's host functions are defined
//! once, as an embedder defines its API once: WASI preview 1, Sightglass's `bench.start` and
//! `bench.end` (which do nothing here), and stubs that trap for any other import. A WASI
//! command runs with a fresh WASI context per invocation (its name as the only argument, no
//! directories, stdout and stderr captured in memory), built from a template made once.
//! Then each invocation picks a module at random and takes the whole path with no loaded module
//! carried over from earlier invocations: open the artifact from the cache by key, load its code,
//! link its imports (the host functions, and fresh memories and tables of the declared types),
//! instantiate in a new [`Store`] (memories, segments, start), call the module's export, and
//! tear everything down (drop the store and the module). The WASI context is built with the
//! store, in `link`.
//!
//! An invocation calls the module, since that is the workload: the export named by `--invoke`,
//! else `_start`, else the first exported function that takes no arguments ([`default_export`]);
//! a module with none of these is only instantiated, as `--instantiate-only` does for every one.
//! The wasmtime comparison calls the same export of each module.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ephem::{Cache, Engine, EngineConfig, Linker, Module, Store, Val, ValType};
use ephem_wasi::{Output, WasiCtx, WasiCtxBuilder};

use crate::metering::Metering;

/// What a guest may write to stdout or stderr in one invocation.
pub const CAPTURE_BYTES: usize = 1 << 20;

/// The host functions of the workload for `module`: WASI, Sightglass's brackets, and stubs
/// that trap for everything else it imports.
pub fn host(engine: &Engine, module: &Module) -> anyhow::Result<Linker<WasiCtx>> {
    let mut host = Linker::new(engine);
    ephem_wasi::add_to_linker(&mut host, |c: &mut WasiCtx| c)?;
    host.func_wrap("bench", "start", || {})?;
    host.func_wrap("bench", "end", || {})?;
    host.define_unknown_imports_as_traps(module)?;
    Ok(host)
}

/// The WASI context template for `subject`: its name as the only argument, output captured.
pub fn wasi_template(subject: &Subject) -> anyhow::Result<WasiCtxBuilder> {
    let mut b = WasiCtxBuilder::new();
    b.arg(&subject.name)?;
    b.stdout(Output::Capture(CAPTURE_BYTES))
        .stderr(Output::Capture(CAPTURE_BYTES));
    Ok(b)
}

/// Whether code is compiled with write marks (`bench fresh --write-marks`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMarks {
    On,
    Off,
}

/// Whether code is compiled with bounds checks (`bench fresh --bounds-checks`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundsChecks {
    On,
    Off,
}

/// How a subject's code is compiled: its metering, write marks and bounds checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    pub metering: Metering,
    pub write_marks: bool,
    pub bounds_checks: bool,
}

impl Code {
    /// The compiler of this code.
    pub fn compiler(self) -> anyhow::Result<ephem::Compiler> {
        let mut compiler = self.metering.compiler()?;
        if !self.write_marks {
            compiler = compiler.without_write_marks();
        }
        if !self.bounds_checks {
            compiler = compiler.without_bounds_checks();
        }
        Ok(compiler)
    }
}

/// Every combination of the settings given, in order (the compilations a run interleaves).
pub fn codes(
    meterings: &[Metering],
    write_marks: &[WriteMarks],
    bounds_checks: &[BoundsChecks],
) -> Vec<Code> {
    let mut codes = Vec::new();
    for &metering in meterings {
        for &marks in write_marks {
            for &checks in bounds_checks {
                codes.push(Code {
                    metering,
                    write_marks: marks == WriteMarks::On,
                    bounds_checks: checks == BoundsChecks::On,
                });
            }
        }
    }
    codes
}

/// A module of the workload, compiled into the cache.
#[derive(Clone, Debug)]
pub struct Subject {
    pub name: String,
    /// The export every invocation calls (with zero arguments), if any.
    pub export: Option<String>,
    /// Its cache key (computed once, as an embedder that addresses modules by hash would).
    pub key: String,
    pub text_bytes: usize,
    pub artifact_bytes: u64,
    /// How its code was compiled (its metering is also what its stores are given).
    pub code: Code,
}

impl Subject {
    /// `module:export`, or the module alone when nothing is called; with its metering when
    /// there is any.
    pub fn label(&self) -> String {
        let label = match &self.export {
            Some(export) => format!("{}:{export}", self.name),
            None => self.name.clone(),
        };
        let label = match self.code.metering {
            Metering::Off => label,
            m => format!("{label} [{}]", m.name()),
        };
        let label = match self.code.write_marks {
            true => label,
            false => format!("{label} [no marks]"),
        };
        match self.code.bounds_checks {
            true => label,
            false => format!("{label} [no checks]"),
        }
    }
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
    /// Whether the call trapped (it still counts: trapping is one way for a guest to end).
    pub trapped: bool,
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

/// Which export an invocation calls.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// This one, in every module.
    Named(&'a str),
    /// Each module's [`default_export`].
    Default,
    /// None: instantiate only (which runs the start function).
    Nothing,
}

/// The export the workload calls in `module` when none is named: `_start`, else the first
/// exported function without parameters, in export order.
pub fn default_export(module: &Module) -> Option<String> {
    let callable: Vec<&str> = module
        .exports()
        .filter(|e| matches!(&e.ty, ephem::ExternType::Func(t) if t.params.is_empty()))
        .map(|e| e.name)
        .collect();
    let start = callable.iter().find(|&&name| name == "_start");
    start.or(callable.first()).map(|&name| name.to_owned())
}

/// Compiles every file into `cache` (if not there yet) for `metering`, and picks the export
/// each calls.
pub fn prepare(
    code: Code,
    engine: &Engine,
    cache: &Cache,
    files: &[PathBuf],
    call: Call<'_>,
) -> anyhow::Result<Vec<Subject>> {
    let compiler = &code.compiler()?;
    files
        .iter()
        .map(|path| {
            let wasm =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let (module, outcome) = ephem::compile_cached(compiler, engine, cache, &wasm)
                .with_context(|| format!("compiling {}", path.display()))?;
            if let ephem::Outcome::Uncached { why } = outcome {
                anyhow::bail!("the benchmark needs a working cache: {why}");
            }
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let export = match call {
                Call::Named(name) => Some(name.to_owned()),
                Call::Default => default_export(&module),
                Call::Nothing => None,
            };
            Ok(Subject {
                name,
                export,
                key: Cache::key(&wasm, &compiler.fingerprint()),
                text_bytes: module.artifact().text_len(),
                artifact_bytes: module.artifact().file_len(),
                code,
            })
        })
        .collect()
}

/// Per module: every invocation's sample; and, with more than one thread, throughput.
pub struct Results {
    pub subjects: Vec<Subject>,
    pub samples: Vec<Vec<Sample>>,
    pub throughput: Option<Throughput>,
}

/// Invocations per second, on one thread and on `threads` threads sharing one engine and
/// cache (each thread as many invocations as the one-thread turns made).
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    pub threads: usize,
    pub single: f64,
    pub multi: f64,
}

/// Turns of one thread and of N, alternated: this machine's speed drifts between them
/// otherwise.
const TURNS: usize = 5;

impl Throughput {
    /// Throughput of `per_thread` invocations per thread, each `invoke(i)` of a subject `i` of
    /// `subjects` picked at random (a seed per thread and turn).
    pub fn of_picks(
        threads: usize,
        per_thread: usize,
        subjects: usize,
        invoke: impl Fn(usize) -> anyhow::Result<()> + Sync,
    ) -> anyhow::Result<Throughput> {
        Throughput::measure(threads, per_thread, |seed, invocations| {
            let mut picker = Picker::new(0x5eed + seed);
            (0..invocations).try_for_each(|_| invoke(picker.pick(subjects)))
        })
    }

    /// Times `work(seed, n)` (which makes `n` invocations, `per_thread` in all over the turns)
    /// on one thread and on `threads` at once, in alternating turns (see
    /// [`crate::threads::slowest`]). Each thread of a turn first makes a tenth as many,
    /// untimed: a new thread's first invocations set up what it keeps (entries, texts, memory
    /// slots), which would otherwise weigh on short turns' scaling
    /// (docs/bench-log/fresh-path-18-no-system-call-per-invocation.md).
    pub fn measure(
        threads: usize,
        per_thread: usize,
        work: impl Fn(u64, usize) -> anyhow::Result<()> + Sync,
    ) -> anyhow::Result<Throughput> {
        let n = per_thread.div_ceil(TURNS);
        let (mut one, mut many) = (Duration::ZERO, Duration::ZERO);
        for turn in 0..TURNS as u64 {
            let seed = turn * 1000;
            let warm_up = |seed| work(seed, n.div_ceil(10));
            one += crate::threads::slowest(1, seed, warm_up, |seed| work(seed, n))?;
            many += crate::threads::slowest(threads, seed + 500, warm_up, |seed| work(seed, n))?;
        }
        let invocations = (TURNS * n) as f64;
        Ok(Throughput {
            threads,
            single: invocations / one.as_secs_f64(),
            multi: threads as f64 * invocations / many.as_secs_f64(),
        })
    }

    pub fn print(&self, runtime: &str, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::json!({"runtime": runtime, "threads": self.threads,
                    "single_per_s": self.single, "multi_per_s": self.multi,
                    "scaling": self.multi / self.single})
            );
        } else {
            println!(
                "{runtime} throughput: {:.0}/s on 1 thread, {:.0}/s on {} threads ({:.2}×)",
                self.single,
                self.multi,
                self.threads,
                self.multi / self.single
            );
        }
    }
}

/// The workload on ephem, ready to run: every module (under each metering) compiled into the
/// cache, the host functions defined, and each module invoked once to warm up (the first open
/// of a file verifies its seal, once per process).
pub struct Workload<'a> {
    engine: &'a Engine,
    cache: &'a Cache,
    pub subjects: Vec<Subject>,
    hosts: Vec<(Linker<WasiCtx>, WasiCtxBuilder)>,
}

impl<'a> Workload<'a> {
    pub fn prepare(
        engine: &'a Engine,
        cache: &'a Cache,
        files: &[PathBuf],
        call: Call<'_>,
        codes: &[Code],
    ) -> anyhow::Result<Workload<'a>> {
        let mut subjects = Vec::new();
        for &code in codes {
            subjects.extend(prepare(code, engine, cache, files, call)?);
        }
        let mut hosts = Vec::new();
        for s in &subjects {
            let module = Module::from_artifact(engine, cache.open(&s.key)?.context("cached")?);
            let host = (host(engine, &module)?, wasi_template(s)?);
            invoke(engine, cache, s, &host)?;
            hosts.push(host);
        }
        Ok(Workload {
            engine,
            cache,
            subjects,
            hosts,
        })
    }

    /// One invocation of subject `i`.
    pub fn invoke(&self, i: usize) -> anyhow::Result<Sample> {
        invoke(self.engine, self.cache, &self.subjects[i], &self.hosts[i])
    }

    /// Throughput on `threads` threads against one, each making `per_thread` invocations in
    /// random order.
    pub fn throughput(&self, threads: usize, per_thread: usize) -> anyhow::Result<Throughput> {
        Throughput::of_picks(threads, per_thread, self.subjects.len(), |i| {
            self.invoke(i).map(drop)
        })
    }
}

/// Runs the workload: `invocations` invocations of each module in random order, so that the
/// meterings are measured interleaved, after a warm-up ([`Workload::prepare`]).
pub fn measure(
    engine: &Engine,
    cache: &Cache,
    files: &[PathBuf],
    call: Call<'_>,
    codes: &[Code],
    invocations: usize,
    threads: usize,
) -> anyhow::Result<Results> {
    let work = Workload::prepare(engine, cache, files, call, codes)?;
    let n = work.subjects.len();
    let mut samples = vec![Vec::with_capacity(invocations); n];
    let mut picker = Picker::new(0x5eed);
    for _ in 0..invocations * n {
        let i = picker.pick(n);
        samples[i].push(work.invoke(i)?);
    }
    let throughput = (threads > 1)
        .then(|| work.throughput(threads, invocations * n))
        .transpose()?;
    Ok(Results {
        subjects: work.subjects,
        samples,
        throughput,
    })
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
    (host, wasi): &(Linker<WasiCtx>, WasiCtxBuilder),
) -> anyhow::Result<Sample> {
    let mut s = Sample::default();
    let t0 = Instant::now();
    let artifact = cache
        .open(&subject.key)?
        .with_context(|| format!("{} is not in the cache", subject.name))?;
    let module = Module::from_artifact(engine, artifact);
    let t1 = Instant::now();
    s.open = t1 - t0;
    let mut store = Store::new(engine, wasi.build());
    subject.code.metering.arm(&mut store);
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
    if let Some(name) = &subject.export {
        let func = instance
            .get_func(&mut store, name)
            .with_context(|| format!("{} exports no function `{name}`", subject.name))?;
        let ty = func.ty(&store);
        let mut results = zero_args(&ty.results);
        s.trapped = func
            .call(&mut store, &zero_args(&ty.params), &mut results)
            .is_err();
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

/// The workload's arguments, shared by `ephem bench fresh` and the wasmtime comparison (which
/// flattens them into its own).
#[derive(clap::Args, Clone, Debug)]
pub struct FreshArgs {
    /// Modules (.wasm or .wat).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Call this export (with zero arguments) in every invocation; default: `_start`, else
    /// each module's first exported function without parameters.
    #[arg(long, conflicts_with = "instantiate_only")]
    pub invoke: Option<String>,
    /// Call nothing: only instantiate (which runs the start function).
    #[arg(long)]
    pub instantiate_only: bool,
    /// Invocations per module (modules are picked at random, so each gets about this many).
    #[arg(long, default_value_t = 2000)]
    pub invocations: usize,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run the modules under each of these meterings, interleaved (`off`, `deadline`, `fuel`,
    /// `both`; comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub metering: Vec<Metering>,
    /// Run the modules compiled with write marks, without, or both, interleaved (`on`, `off`;
    /// comma-separated): what the marks save on the fresh path.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub write_marks: Vec<WriteMarks>,
    /// Run the modules compiled with bounds checks, without, or both, interleaved (`on`,
    /// `off`; comma-separated): what a memory that grows without a system call saves, and what
    /// the checks cost (see `Compiler::without_bounds_checks`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub bounds_checks: Vec<BoundsChecks>,
    /// Also run the invocations on this many threads at once, over one engine and one cache,
    /// and report throughput against one thread.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Directory for compiled modules (default: a fresh temporary one, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Map texts of at least this many bytes from the artifact instead of copying them
    /// (default: the engine's).
    #[arg(long, value_parser = ephem::units::parse_size_usize)]
    pub map_text_at: Option<usize>,
    /// Map memory images of at least this many bytes instead of copying them.
    #[arg(long, value_parser = ephem::units::parse_size_usize)]
    pub map_image_at: Option<usize>,
    /// Do not let idle memory slots keep their images mapped for the same module: what a
    /// workload whose modules never repeat pays.
    #[arg(long)]
    pub no_image_reuse: bool,
    /// Do not take back code memory that still holds a module's text: every load copies or maps
    /// its text as if new to the process (with `--no-image-reuse` and `--no-entry-reuse`, a
    /// workload whose modules never repeat).
    #[arg(long)]
    pub no_text_reuse: bool,
    /// Keep no cache entries open: every invocation opens its module's entry and reads it.
    #[arg(long)]
    pub no_entry_reuse: bool,
    /// Bytes of each memory slot zeroed in place (kept resident) on reset.
    #[arg(long, value_parser = ephem::units::parse_size_usize)]
    pub keep_resident: Option<usize>,
    /// Bytes of the pages an instance wrote that a reset zeroes in place (found through the
    /// page map); 0 turns the page map off, which is how resets worked before it.
    #[arg(long, value_parser = ephem::units::parse_size_usize)]
    pub resident_dirty_bytes: Option<usize>,
}

impl FreshArgs {
    /// The engine these arguments ask for.
    pub fn engine(&self) -> anyhow::Result<Engine> {
        if self.invocations == 0 {
            bail!("--invocations must be at least 1");
        }
        let mut config = EngineConfig {
            map_text_at: self.map_text_at,
            ..EngineConfig::default()
        };
        if let Some(at) = self.map_image_at {
            config.memory.map_image_at = at;
        }
        config.reuse_texts = !self.no_text_reuse;
        config.memory.reuse_images = !self.no_image_reuse;
        if let Some(keep) = self.keep_resident {
            config.memory.keep_resident = keep;
        }
        if let Some(bytes) = self.resident_dirty_bytes {
            config.memory.resident_dirty_bytes = bytes;
        }
        Ok(Engine::with_config(config)?)
    }

    /// The working directory, and the temporary directory that holds it when none was
    /// given (removed when dropped).
    pub fn work_dir(&self) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
        Ok(match &self.dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let tmp = tempfile::Builder::new().prefix("ephem-fresh-").tempdir()?;
                (tmp.path().to_path_buf(), Some(tmp))
            }
        })
    }

    /// Which export the invocations call.
    pub fn call(&self) -> Call<'_> {
        match (&self.invoke, self.instantiate_only) {
            (Some(name), _) => Call::Named(name),
            (None, true) => Call::Nothing,
            (None, false) => Call::Default,
        }
    }

    /// The compilations the run interleaves.
    pub fn codes(&self) -> Vec<Code> {
        codes(&self.metering, &self.write_marks, &self.bounds_checks)
    }

    /// ephem's cache in the working directory `dir`.
    pub fn cache(&self, dir: &std::path::Path) -> Cache {
        Cache::new(dir.join("ephem"), u64::MAX).keeping_entries_open(!self.no_entry_reuse)
    }

    /// Runs the workload on ephem, with the cache in `dir`.
    pub fn measure(&self, dir: &std::path::Path) -> anyhow::Result<Results> {
        let engine = self.engine()?;
        let cache = self.cache(dir);
        measure(
            &engine,
            &cache,
            &self.files,
            self.call(),
            &self.codes(),
            self.invocations,
            self.threads,
        )
    }
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_nanos() as f64 / 1000.0)
}

/// `ephem bench fresh`: the workload on ephem, per module, by part.
pub fn run(args: FreshArgs) -> anyhow::Result<()> {
    let (dir, _temporary) = args.work_dir()?;
    let r = args.measure(&dir)?;
    if !args.json {
        println!(
            "{:<16} {:>9} {:>9} {:>9} | medians (µs): {}",
            "module",
            "text KiB",
            "median µs",
            "p90 µs",
            Sample::default()
                .parts()
                .map(|(name, _)| format!("{name:>11}"))
                .join(" ")
        );
    }
    for (subject, samples) in r.subjects.iter().zip(&r.samples) {
        let (median, p90) = median_p90(&mut samples.iter().map(Sample::total).collect::<Vec<_>>());
        let parts: Vec<(&str, Duration, Duration)> = (0..7)
            .map(|k| {
                let mut v: Vec<Duration> = samples.iter().map(|s| s.parts()[k].1).collect();
                let (m, p) = median_p90(&mut v);
                (Sample::default().parts()[k].0, m, p)
            })
            .collect();
        if args.json {
            let parts_json: serde_json::Map<String, serde_json::Value> = parts
                .iter()
                .map(|(name, m, p)| {
                    (
                        name.to_string(),
                        serde_json::json!({"median_ns": m.as_nanos() as u64, "p90_ns": p.as_nanos() as u64}),
                    )
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "runtime": "ephem",
                    "module": subject.name,
                    "export": subject.export,
                    "metering": subject.code.metering.name(),
                    "write_marks": subject.code.write_marks,
                    "bounds_checks": subject.code.bounds_checks,
                    "median_ns": median.as_nanos() as u64,
                    "p90_ns": p90.as_nanos() as u64,
                    "invocations": samples.len(),
                    "trapped": samples.iter().filter(|s| s.trapped).count(),
                    "text_bytes": subject.text_bytes,
                    "artifact_bytes": subject.artifact_bytes,
                    "parts": parts_json,
                })
            );
        } else {
            println!(
                "{:<16} {:>9} {:>9} {:>9} |               {}",
                subject.label(),
                subject.text_bytes / 1024,
                us(median),
                us(p90),
                parts
                    .iter()
                    .map(|(_, m, _)| format!("{:>11}", us(*m)))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    if let Some(t) = r.throughput {
        t.print("ephem", args.json);
    }
    Ok(())
}
