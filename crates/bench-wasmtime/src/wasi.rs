//! `wasi-vs-wasmtime`: WASI programs (the Sightglass layout) on ephem and on wasmtime, in one
//! run: execution time between the program's `bench.start` and `bench.end` calls, and compile
//! time, with ratios and their geometric means.
//!
//! Each program runs as wasmtime's Sightglass runner runs it: its directory preopened as `.`,
//! its name as its only argument, a fresh instance and WASI context per run (stdout and
//! stderr into memory, stdout checked against `NAME.stdout.expected` or
//! `default.stdout.expected` where there is one, so that both engines are known to have done
//! the work). A program that fails in either engine (does not compile, traps, prints something
//! else) is reported as failed, with why, and the others still run; the means are over those
//! that ran, and the command fails at the end if any did not. Runs alternate between the
//! engines. Both compile with their default settings (Cranelift, optimised for speed); wasmtime
//! with its default engine configuration and its own WASI (`wasmtime-wasi`). With several `--metering` modes,
//! `--bounds-checks on,off` or `--write-marks on,off`, every combination of a program runs in the
//! same round-robin, so their overheads share the machine's state.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ephem_bench::fresh::{BoundsChecks, Code, WriteMarks, codes};
use ephem_bench::metering::Metering;
use ephem_bench_wasmtime::{geomean, median, ms};

#[derive(Parser)]
#[command(about = "WASI programs on ephem and on wasmtime: execution and compile time")]
struct Args {
    /// Directories of programs (`*.wasm` or `*.wat`, each with its inputs beside it).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Runs per program and engine (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Metering modes to compile and run both engines with, side by side in the run
    /// (`off,deadline,fuel,both`): a deadline, fuel or both, with a deadline and fuel that
    /// never run out (wasmtime compiles epoch checks in for a deadline; ephem nothing). Overheads are against the first mode given.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    metering: Vec<Metering>,
    /// Whether ephem's code checks bounds (`on,off`: both, side by side; wasmtime runs the
    /// same either way).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    bounds_checks: Vec<BoundsChecks>,
    /// Whether ephem's stores set write marks (`on,off`: both, side by side; wasmtime runs the
    /// same either way).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    write_marks: Vec<WriteMarks>,
}

/// What a run's host functions record.
#[derive(Default)]
struct Marks {
    start: Option<Instant>,
    end: Option<Instant>,
}

impl Marks {
    fn measured(&self) -> anyhow::Result<Duration> {
        match (self.start, self.end) {
            (Some(s), Some(e)) => Ok(e - s),
            _ => bail!("the program did not call bench.start and bench.end"),
        }
    }
}

struct Ours {
    wasi: ephem_wasi::WasiCtx,
    marks: Marks,
}

struct Theirs {
    wasi: wasmtime_wasi::p1::WasiP1Ctx,
    marks: Marks,
}

const OUTPUT: usize = 64 << 20;

/// One program on ephem: compile time, and a function that runs it once.
struct EphemProgram {
    compile: Duration,
    pre: ephem::InstancePre<Ours>,
    template: ephem_wasi::WasiCtxBuilder,
    engine: ephem::Engine,
    metering: Metering,
}

impl EphemProgram {
    fn new(wasm: &[u8], dir: &Path, name: &str, code: Code) -> anyhow::Result<EphemProgram> {
        let engine = ephem::Engine::default();
        let compiler = code.compiler()?;
        let t = Instant::now();
        let compiled = compiler.compile(wasm)?;
        let compile = t.elapsed();
        let module = ephem::Module::from_compiled(&engine, &compiled)?;
        let mut linker = ephem::Linker::new(&engine);
        ephem_wasi::add_to_linker(&mut linker, |d: &mut Ours| &mut d.wasi)?;
        linker.func_wrap("bench", "start", |mut c: ephem::Caller<'_, Ours>| {
            c.data_mut().marks.start = Some(Instant::now())
        })?;
        linker.func_wrap("bench", "end", |mut c: ephem::Caller<'_, Ours>| {
            c.data_mut().marks.end = Some(Instant::now())
        })?;
        let pre = linker.instantiate_pre(&module)?;
        let mut template = ephem_wasi::WasiCtxBuilder::new();
        template
            .arg(name)?
            .stdout(ephem_wasi::Output::Capture(OUTPUT))
            .stderr(ephem_wasi::Output::Capture(OUTPUT))
            .preopened_dir(dir, ".", ephem_wasi::DirPerms::ReadWrite)?;
        Ok(EphemProgram {
            compile,
            pre,
            template,
            engine,
            metering: code.metering,
        })
    }

    /// The measured time and the program's stdout.
    fn run(&self) -> anyhow::Result<(Duration, Vec<u8>)> {
        let data = Ours {
            wasi: self.template.build(),
            marks: Marks::default(),
        };
        let mut store = ephem::Store::new(&self.engine, data);
        self.metering.arm(&mut store);
        let instance = self.pre.instantiate(&mut store)?;
        let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
        match start.call(&mut store, ()) {
            Ok(()) => {}
            Err(e) if ephem_wasi::exit_code(&e) == Some(0) => {}
            Err(e) => return Err(e.into()),
        }
        let data = store.data_mut();
        Ok((data.marks.measured()?, data.wasi.take_stdout()))
    }
}

/// One program on wasmtime.
struct WasmtimeProgram {
    compile: Duration,
    pre: wasmtime::InstancePre<Theirs>,
    engine: wasmtime::Engine,
    dir: PathBuf,
    name: String,
    metering: Metering,
}

impl WasmtimeProgram {
    fn new(
        wasm: &[u8],
        dir: &Path,
        name: &str,
        metering: Metering,
    ) -> anyhow::Result<WasmtimeProgram> {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(metering.deadline());
        config.consume_fuel(metering.fuel());
        let engine = wasmtime::Engine::new(&config)?;
        let t = Instant::now();
        let module = wasmtime::Module::new(&engine, wasm)?;
        let compile = t.elapsed();
        let mut linker = wasmtime::Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |d: &mut Theirs| &mut d.wasi)?;
        linker.func_wrap("bench", "start", |mut c: wasmtime::Caller<'_, Theirs>| {
            c.data_mut().marks.start = Some(Instant::now())
        })?;
        linker.func_wrap("bench", "end", |mut c: wasmtime::Caller<'_, Theirs>| {
            c.data_mut().marks.end = Some(Instant::now())
        })?;
        let pre = linker.instantiate_pre(&module)?;
        Ok(WasmtimeProgram {
            compile,
            pre,
            engine,
            dir: dir.to_owned(),
            name: name.to_owned(),
            metering,
        })
    }

    fn run(&self) -> anyhow::Result<(Duration, Vec<u8>)> {
        use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
        let stdout = MemoryOutputPipe::new(OUTPUT);
        let wasi = wasmtime_wasi::WasiCtxBuilder::new()
            .arg(&self.name)
            .stdout(stdout.clone())
            .stderr(MemoryOutputPipe::new(OUTPUT))
            .preopened_dir(&self.dir, ".", wasmtime_wasi::FsPerms::ReadWrite)?
            .build_p1();
        let data = Theirs {
            wasi,
            marks: Marks::default(),
        };
        let mut store = wasmtime::Store::new(&self.engine, data);
        if self.metering.deadline() {
            store.set_epoch_deadline(u64::MAX / 2);
        }
        if self.metering.fuel() {
            store.set_fuel(u64::MAX)?;
        }
        let instance = self.pre.instantiate(&mut store)?;
        let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
        if let Err(e) = start.call(&mut store, ()) {
            match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(wasmtime_wasi::I32Exit(0)) => {}
                _ => return Err(e.into()),
            }
        }
        let measured = store.data().marks.measured()?;
        drop(store);
        Ok((measured, stdout.contents().to_vec()))
    }
}

/// What the table calls a program: its file's stem, or its directory's name for Sightglass's
/// `benchmark.wasm`.
fn label(dir: &Path, name: &str) -> String {
    match (name, dir.file_name()) {
        ("benchmark", Some(d)) => d.to_string_lossy().into_owned(),
        _ => name.to_owned(),
    }
}

/// Measured times below this are too short to compare (timer and call overheads dominate):
/// reported, left out of the means.
const TOO_SHORT: Duration = Duration::from_micros(100);

/// The programs under `dirs`: (directory, file, name).
fn programs(dirs: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, PathBuf, String)>> {
    let mut found = Vec::new();
    for dir in dirs {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let path = e?.path();
            if path.extension().is_some_and(|x| x == "wasm" || x == "wat") {
                let name = path
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                found.push((dir.clone(), path, name));
                // Sightglass names every program `benchmark` in a directory of its name.
            }
        }
    }
    found.sort();
    Ok(found)
}

/// One program in one mode (metering, and ephem's bounds checks) on both engines, and its runs
/// so far.
struct Pair {
    code: Code,
    ours: EphemProgram,
    theirs: WasmtimeProgram,
    ephem_runs: Vec<Duration>,
    wasmtime_runs: Vec<Duration>,
}

/// Per mode: ratios that go into the geometric means.
#[derive(Default)]
struct Means {
    exec: Vec<f64>,
    compile: Vec<f64>,
    ephem_overhead: Vec<f64>,
    wasmtime_overhead: Vec<f64>,
}

/// Compiles `path` in every mode on both engines and runs each `runs` times, round-robin over
/// engines and modes so that drift on the machine hits all alike; every run's output must be
/// the expected one where there is one (`NAME.stdout.expected`, or `default.stdout.expected`).
fn run_program(
    path: &Path,
    dir: &Path,
    name: &str,
    modes: &[Code],
    runs: usize,
) -> anyhow::Result<Vec<Pair>> {
    let wasm = wat::parse_file(path).with_context(|| format!("reading {}", path.display()))?;
    let mut pairs = Vec::new();
    for &code in modes {
        let ours = EphemProgram::new(&wasm, dir, name, code).context("ephem")?;
        let theirs = WasmtimeProgram::new(&wasm, dir, name, code.metering).context("wasmtime")?;
        pairs.push(Pair {
            code,
            ours,
            theirs,
            ephem_runs: Vec::new(),
            wasmtime_runs: Vec::new(),
        });
    }
    let expected = [
        format!("{name}.stdout.expected"),
        "default.stdout.expected".into(),
    ]
    .iter()
    .find_map(|f| std::fs::read(dir.join(f)).ok());
    for _ in 0..runs {
        for p in &mut pairs {
            let (t, out) = p.ours.run().context("ephem")?;
            let (u, theirs) = p.theirs.run().context("wasmtime")?;
            if let Some(expected) = &expected {
                if &out != expected {
                    bail!("ephem's output differs from the expected output");
                }
                if &theirs != expected {
                    bail!("wasmtime's output differs from the expected output");
                }
            }
            p.ephem_runs.push(t);
            p.wasmtime_runs.push(u);
        }
    }
    Ok(pairs)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let modes = codes(&args.metering, &args.write_marks, &args.bounds_checks);
    // Code without checks or marks is named so, as `bench fresh` names it: both are defaults.
    let name_of = |code: &Code| {
        let mut name = code.metering.name().to_owned();
        if !code.bounds_checks {
            name.push_str(",no checks");
        }
        if !code.write_marks {
            name.push_str(",no marks");
        }
        name
    };
    if !args.json {
        println!(
            "{:<22} {:<18} {:>10} {:>11} {:>7} | {:>8} {:>8} | {:>10} {:>11} {:>7}",
            "program",
            "mode",
            "ephem ms",
            "wasmtime ms",
            "ratio",
            "ephem÷",
            "wtime÷",
            "compile ms",
            "wasmtime ms",
            "ratio"
        );
    }
    let mut means: Vec<Means> = modes.iter().map(|_| Means::default()).collect();
    let mut failed = Vec::new();
    for (dir, path, name) in programs(&args.dirs)? {
        let label = label(&dir, &name);
        // A program that cannot run in either engine is reported, and the others still run.
        let pairs = match run_program(&path, &dir, &name, &modes, args.runs) {
            Ok(pairs) => pairs,
            Err(e) => {
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({"program": label, "error": format!("{e:#}")})
                    );
                } else {
                    // One line in the table (a trap's backtrace follows its first line).
                    let why = format!("{e:#}");
                    println!("{label:<22} FAILED: {}", why.lines().next().unwrap_or(""));
                }
                failed.push(label);
                continue;
            }
        };
        let medians: Vec<(Duration, Duration)> = pairs
            .iter()
            .map(|p| {
                (
                    median(p.ephem_runs.clone()),
                    median(p.wasmtime_runs.clone()),
                )
            })
            .collect();
        let (e0, w0) = medians[0];
        for ((p, &(e, w)), m) in pairs.iter().zip(&medians).zip(&mut means) {
            let exec = e.as_secs_f64() / w.as_secs_f64();
            let compile = p.ours.compile.as_secs_f64() / p.theirs.compile.as_secs_f64();
            let (eo, wo) = (
                e.as_secs_f64() / e0.as_secs_f64(),
                w.as_secs_f64() / w0.as_secs_f64(),
            );
            let comparable = e0.min(w0) >= TOO_SHORT;
            if comparable {
                m.exec.push(exec);
                m.ephem_overhead.push(eo);
                m.wasmtime_overhead.push(wo);
            }
            m.compile.push(compile);
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"program": label,
                        "metering": p.code.metering.name(),
                        "bounds_checks": p.code.bounds_checks,
                        "write_marks": p.code.write_marks,
                        "ephem_exec_ns": e.as_nanos() as u64,
                        "wasmtime_exec_ns": w.as_nanos() as u64, "exec_ratio": exec,
                        "ephem_over_first_mode": eo, "wasmtime_over_first_mode": wo,
                        "ephem_compile_ns": p.ours.compile.as_nanos() as u64,
                        "wasmtime_compile_ns": p.theirs.compile.as_nanos() as u64,
                        "compile_ratio": compile, "in_mean": comparable})
                );
            } else {
                let ratio = |x: f64| match comparable {
                    true => format!("{x:>6.2}×"),
                    false => format!("{:>7}", "short"),
                };
                println!(
                    "{:<22} {:<18} {:>10} {:>11} {} | {:>8} {:>8} | {:>10} {:>11} {:>6.2}×",
                    label,
                    name_of(&p.code),
                    ms(e),
                    ms(w),
                    ratio(exec),
                    ratio(eo),
                    ratio(wo),
                    ms(p.ours.compile),
                    ms(p.theirs.compile),
                    compile
                );
            }
        }
    }
    for (code, m) in modes.iter().zip(&means) {
        if m.exec.is_empty() {
            eprintln!("no program ran long enough to compare");
            break;
        }
        let (ge, gc) = (geomean(&m.exec), geomean(&m.compile));
        let (eo, wo) = (geomean(&m.ephem_overhead), geomean(&m.wasmtime_overhead));
        if args.json {
            println!(
                "{}",
                serde_json::json!({"metering": code.metering.name(),
                    "bounds_checks": code.bounds_checks, "write_marks": code.write_marks,
                    "geomean_exec_ratio": ge,
                    "geomean_compile_ratio": gc, "geomean_ephem_over_first_mode": eo,
                    "geomean_wasmtime_over_first_mode": wo})
            );
        } else {
            println!(
                "geometric mean, {}: execution {ge:.2}× wasmtime's time, compile {gc:.2}×; \
                 over the first mode: ephem {eo:.2}×, wasmtime {wo:.2}×",
                name_of(code)
            );
        }
    }
    // The means are over the programs that ran; the run fails if any did not.
    if !failed.is_empty() {
        bail!(
            "{} of the programs failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}
