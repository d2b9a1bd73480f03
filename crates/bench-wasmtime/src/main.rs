//! `fresh-vs-wasmtime`: the fresh-instance workload (`ephem_bench::fresh`) on ephem and on wasmtime,
//! in one run, over the same modules, with the ratio per module.
//!
//! wasmtime is set up as [`ephem_bench_wasmtime::wt`] describes, with `Module::deserialize_file`
//! on every invocation, since the workload has too many modules to keep them loaded. Each
//! invocation: deserialize, link (unknown function imports trap, imported memories and tables
//! are created), instantiate, call the same export as ephem's side calls (see
//! `ephem_bench::fresh`), drop the store and module.
//!
//! The two runtimes take turns in blocks of the same random picks (see `main`). wasmtime's
//! compiled files go to a directory of their own, beside ephem's cache.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ephem_bench::fresh::{self, FreshArgs, Picker, Workload};
use ephem_bench_wasmtime::wt::{self, Sample as WtSample};

#[derive(Parser)]
#[command(about = "The fresh-instance workload on ephem and on wasmtime, side by side")]
struct Args {
    /// The workload, as `ephem bench fresh` takes it; `--dir` also holds wasmtime's files.
    #[command(flatten)]
    fresh: FreshArgs,
}

/// Invocations per runtime and module (on average) in one turn of the interleaved measurement:
/// enough that the first, after the other runtime's turn, weighs little at p90.
const BLOCK_PER_MODULE: usize = 64;

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_nanos() as f64 / 1000.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse().fresh;
    if args.metering != [ephem_bench::metering::Metering::Off] {
        anyhow::bail!(
            "the comparison with wasmtime runs unmetered; `ephem bench fresh --metering` \
             measures what metering costs ephem"
        );
    }
    if args.write_marks != [ephem_bench::fresh::WriteMarks::On] {
        anyhow::bail!(
            "the comparison with wasmtime runs ephem's default code; `ephem bench fresh \
             --write-marks on,off` measures what the marks save"
        );
    }
    if args.bounds_checks.len() != 1 {
        anyhow::bail!(
            "the comparison with wasmtime runs one kind of ephem code: `--bounds-checks on` or \
             `off`; `ephem bench fresh --bounds-checks on,off` compares the two"
        );
    }
    let (dir, _temporary) = args.work_dir()?;

    // ephem.
    let ephem_engine = args.engine()?;
    let cache = args.cache(&dir);
    let work = Workload::prepare(
        &ephem_engine,
        &cache,
        &args.files,
        args.call(),
        &args.codes(),
    )?;

    // wasmtime, over the same modules.
    let engine = wt::engine(false)?;
    std::fs::create_dir_all(dir.join("wasmtime"))?;
    let mut paths = Vec::new();
    for (file, subject) in args.files.iter().zip(&work.subjects) {
        let wasm = wat::parse_file(file).with_context(|| format!("reading {}", file.display()))?;
        let path = dir.join("wasmtime").join(format!("{}.cwasm", subject.key));
        std::fs::write(&path, engine.precompile_module(&wasm)?)?;
        let host = wt::host(&engine, &wt::deserialize(&engine, &path)?)?;
        let export = subject.export.as_deref();
        wt::invoke_file(&engine, &path, &host, &subject.name, export, None)?;
        paths.push((path, host));
    }
    let wasmtime_invoke = |i: usize| {
        let (path, host) = &paths[i];
        let subject = &work.subjects[i];
        let export = subject.export.as_deref();
        wt::invoke_file(&engine, path, host, &subject.name, export, None)
    };

    // Both, in blocks of the same random picks, taking turns at going first: a machine whose
    // speed drifts during the run slows both alike, while each block runs with its runtime's
    // own data in the caches, as a node running only that runtime would.
    let n = paths.len();
    let mut ours = vec![Vec::with_capacity(args.invocations); n];
    let mut theirs = vec![Vec::with_capacity(args.invocations); n];
    let mut picker = Picker::new(0x5eed);
    let total = args.invocations * n;
    let block = BLOCK_PER_MODULE * n;
    for round in 0..total.div_ceil(block) {
        let picks: Vec<usize> = (0..block.min(total - round * block))
            .map(|_| picker.pick(n))
            .collect();
        for ephem_turn in [round % 2 == 0, round % 2 == 1] {
            for &i in &picks {
                if ephem_turn {
                    ours[i].push(work.invoke(i)?);
                } else {
                    theirs[i].push(wasmtime_invoke(i)?);
                }
            }
        }
    }

    // Throughput on `--threads` threads, the same way for both.
    let throughput = (args.threads > 1)
        .then(|| -> anyhow::Result<_> {
            let per_thread = args.invocations * n;
            let ours = work.throughput(args.threads, per_thread)?;
            let theirs = fresh::Throughput::of_picks(args.threads, per_thread, n, |i| {
                wasmtime_invoke(i).map(drop)
            })?;
            Ok((ours, theirs))
        })
        .transpose()?;

    if !args.json {
        println!(
            "{:<16} {:>12} {:>12} {:>14} {:>14} {:>8}",
            "module", "ephem med µs", "ephem p90 µs", "wasmtime med µs", "wasmtime p90 µs", "ratio"
        );
    }
    for (i, subject) in work.subjects.iter().enumerate() {
        let mut e: Vec<Duration> = ours[i].iter().map(|s| s.total()).collect();
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
    if let Some((ours, theirs)) = throughput {
        ours.print("ephem", args.json);
        theirs.print("wasmtime", args.json);
    }
    Ok(())
}
