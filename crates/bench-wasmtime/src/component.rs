//! `component-vs-wasmtime FILE=CALL…`: a fresh instance of a component per call, on ephem and
//! on wasmtime, in one run, with the ratio per component.
//!
//! Each invocation: a new store, instantiate the component, look up and call the export as
//! CALL says (`greet("world")`, WAVE as `ephem run --invoke` takes it), drop the store. The
//! component stays loaded on both sides (ephem's `Component`, wasmtime's `InstancePre` of its
//! `Component`, with the pooling allocator of [`ephem_bench_wasmtime::wt::engine`]): ephem has
//! no component artifact yet, so loading from disk is not part of this comparison. The two
//! runtimes take turns in blocks, as `fresh-vs-wasmtime` does. Every component given is
//! reported, also one that fails on either side.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use ephem::component as ec;
use ephem_bench::fresh::median_p90;
use wasmtime::component as wc;

#[derive(Parser)]
#[command(about = "A fresh component instance per call, on ephem and on wasmtime")]
struct Args {
    /// Components and the call to make on each: `FILE=NAME(ARGS…)`.
    #[arg(required = true)]
    subjects: Vec<String>,
    /// Invocations per runtime and component.
    #[arg(long, default_value_t = 20_000)]
    invocations: usize,
}

/// Invocations in one turn of one runtime.
const BLOCK: usize = 500;

fn to_wasmtime(v: &ec::Val) -> wc::Val {
    use ec::Val as E;
    use wc::Val as W;
    let b = |v: &Option<Box<E>>| v.as_deref().map(|v| Box::new(to_wasmtime(v)));
    match v {
        E::Bool(x) => W::Bool(*x),
        E::S8(x) => W::S8(*x),
        E::U8(x) => W::U8(*x),
        E::S16(x) => W::S16(*x),
        E::U16(x) => W::U16(*x),
        E::S32(x) => W::S32(*x),
        E::U32(x) => W::U32(*x),
        E::S64(x) => W::S64(*x),
        E::U64(x) => W::U64(*x),
        E::Float32(x) => W::Float32(*x),
        E::Float64(x) => W::Float64(*x),
        E::Char(x) => W::Char(*x),
        E::String(x) => W::String(x.clone()),
        E::List(x) => W::List(x.iter().map(to_wasmtime).collect()),
        E::Record(x) => W::Record(x.iter().map(|(n, v)| (n.clone(), to_wasmtime(v))).collect()),
        E::Tuple(x) => W::Tuple(x.iter().map(to_wasmtime).collect()),
        E::Variant(n, p) => W::Variant(n.clone(), b(p)),
        E::Enum(n) => W::Enum(n.clone()),
        E::Option(p) => W::Option(b(p)),
        E::Result(Ok(p)) => W::Result(Ok(b(p))),
        E::Result(Err(p)) => W::Result(Err(b(p))),
        E::Flags(f) => W::Flags(f.clone()),
        E::Resource(_) => unreachable!("WAVE has no form for handles, so no argument is one"),
    }
}

/// One component on both runtimes, ready to be invoked.
struct Subject {
    label: String,
    ephem: Box<dyn Fn() -> anyhow::Result<String>>,
    wasmtime: Box<dyn Fn() -> anyhow::Result<String>>,
}

fn prepare(spec: &str, wt_engine: &wasmtime::Engine) -> anyhow::Result<Subject> {
    let (file, call) = spec
        .split_once('=')
        .with_context(|| format!("`{spec}`: expected FILE=CALL"))?;
    let wasm = wat::parse_file(file).with_context(|| format!("reading {file}"))?;

    let engine = ephem::Engine::default();
    let component = ec::Component::new(&engine, &wasm)?;
    let funcs = component.exported_funcs();
    let (name, args) = ec::wave::parse_call(call, |name| {
        funcs
            .iter()
            .find(|(path, _)| path.len() == 1 && path[0] == name)
            .map(|(_, ty)| ty.params.iter().map(|(_, t)| t).collect())
    })
    .with_context(|| format!("`{call}`"))?;
    let has_result = funcs
        .iter()
        .any(|(p, ty)| p[0] == name && ty.result.is_some());
    let linker = ec::Linker::<()>::new(&engine);
    let ephem = {
        let (name, args) = (name.clone(), args.clone());
        Box::new(move || -> anyhow::Result<String> {
            let mut store = ephem::Store::new(&engine, ());
            let instance = linker.instantiate(&mut store, &component)?;
            let func = instance
                .get_func(&mut store, name.as_str())
                .context("no export")?;
            let mut results = vec![ec::Val::Bool(false); has_result as usize];
            func.call(&mut store, &args, &mut results)?;
            Ok(results.iter().map(ToString::to_string).collect())
        })
    };

    let wt_component = wc::Component::new(wt_engine, &wasm)?;
    let pre = wc::Linker::<()>::new(wt_engine).instantiate_pre(&wt_component)?;
    let wt_args: Vec<wc::Val> = args.iter().map(to_wasmtime).collect();
    let wt_engine = wt_engine.clone();
    let wasmtime = Box::new(move || -> anyhow::Result<String> {
        let mut store = wasmtime::Store::new(&wt_engine, ());
        let instance = pre.instantiate(&mut store)?;
        let func = instance
            .get_func(&mut store, name.as_str())
            .context("no export")?;
        let mut results = vec![wc::Val::Bool(false); has_result as usize];
        func.call(&mut store, &wt_args, &mut results)?;
        Ok(format!("{results:?}"))
    });
    Ok(Subject {
        label: format!(
            "{} {call}",
            std::path::Path::new(file).file_name().unwrap().display()
        ),
        ephem,
        wasmtime,
    })
}

fn us(d: Duration) -> String {
    format!("{:.2}", d.as_nanos() as f64 / 1000.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let wt_engine = ephem_bench_wasmtime::wt::engine(false)?;
    println!(
        "{:<40} {:>12} {:>12} {:>14} {:>14} {:>8}",
        "component and call",
        "ephem med µs",
        "ephem p90 µs",
        "wasmtime med µs",
        "wasmtime p90 µs",
        "ratio"
    );
    for spec in &args.subjects {
        let measured = prepare(spec, &wt_engine).and_then(|subject| {
            // Both once first: a failure is reported instead of timed.
            (subject.ephem)().context("ephem")?;
            (subject.wasmtime)().context("wasmtime")?;
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for round in 0..args.invocations.div_ceil(BLOCK) {
                let n = BLOCK.min(args.invocations - round * BLOCK);
                for ephem_turn in [round % 2 == 0, round % 2 == 1] {
                    for _ in 0..n {
                        let start = Instant::now();
                        if ephem_turn {
                            (subject.ephem)()?;
                            ours.push(start.elapsed());
                        } else {
                            (subject.wasmtime)()?;
                            theirs.push(start.elapsed());
                        }
                    }
                }
            }
            Ok((
                subject.label,
                median_p90(&mut ours),
                median_p90(&mut theirs),
            ))
        });
        match measured {
            Ok((label, (em, ep), (wm, wp))) => println!(
                "{:<40} {:>12} {:>12} {:>14} {:>14} {:>7.1}×",
                label,
                us(em),
                us(ep),
                us(wm),
                us(wp),
                wm.as_nanos() as f64 / em.as_nanos().max(1) as f64
            ),
            Err(e) => println!("{spec:<40} failed: {e:#}"),
        }
    }
    Ok(())
}
