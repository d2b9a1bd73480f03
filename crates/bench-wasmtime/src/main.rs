//! `fresh-vs-wasmtime`: the fresh-instance workload (`ephem_bench::fresh`) on ephem and on wasmtime,
//! in one run, over the same modules, with the ratio per module.
//!
//! wasmtime is set up as [`ephem_bench_wasmtime::wt`] describes, with `Module::deserialize_file`
//! on every invocation, since the workload has too many modules to keep them loaded. Each
//! invocation: deserialize, link (unknown function imports trap, imported memories and tables
//! are created), instantiate, call the same export as ephem's side calls (see
//! `ephem_bench::fresh`), drop the store and module.
//!
//! wasmtime's compiled files go to a directory of their own, beside ephem's cache.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ephem_bench::fresh::{self, FreshArgs, Picker};
use ephem_bench_wasmtime::wt::{self, Sample as WtSample};

#[derive(Parser)]
#[command(about = "The fresh-instance workload on ephem and on wasmtime, side by side")]
struct Args {
    /// The workload, as `ephem bench fresh` takes it; `--dir` also holds wasmtime's files.
    #[command(flatten)]
    fresh: FreshArgs,
}

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
    let (dir, _temporary) = args.work_dir()?;

    // ephem.
    let ours = args.measure(&dir)?;

    // wasmtime, over the same modules, in the same random order.
    let engine = wt::engine(false)?;
    std::fs::create_dir_all(dir.join("wasmtime"))?;
    let mut paths = Vec::new();
    for (file, subject) in args.files.iter().zip(&ours.subjects) {
        let wasm = wat::parse_file(file).with_context(|| format!("reading {}", file.display()))?;
        let path = dir.join("wasmtime").join(format!("{}.cwasm", subject.key));
        std::fs::write(&path, engine.precompile_module(&wasm)?)?;
        let host = wt::host(&engine, &wt::deserialize(&engine, &path)?)?;
        let export = subject.export.as_deref();
        wt::invoke_file(&engine, &path, &host, &subject.name, export, None)?;
        paths.push((path, host));
    }
    let mut theirs = vec![Vec::with_capacity(args.invocations); paths.len()];
    let mut picker = Picker::new(0x5eed);
    for _ in 0..args.invocations * paths.len() {
        let i = picker.pick(paths.len());
        let (path, host) = &paths[i];
        let subject = &ours.subjects[i];
        let export = subject.export.as_deref();
        theirs[i].push(wt::invoke_file(
            &engine,
            path,
            host,
            &subject.name,
            export,
            None,
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
                    wt::invoke_file(&engine, path, host, &subject.name, export, None)?;
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
