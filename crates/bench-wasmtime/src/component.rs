//! `component-vs-wasmtime FILE=CALL… | FILE…`: a fresh instance of a component per call, on
//! ephem and on wasmtime, in one run, with the ratio per component. A `FILE` without a call is
//! a WASI 0.2 command: its `wasi:cli/run` runs with a fresh WASI context each time (ephem's
//! `ephem_wasi::p2`, wasmtime's `wasmtime-wasi`), output discarded on both.
//!
//! Each invocation: a new store, instantiate the component, look up and call the export as
//! CALL says (`greet("world")`, WAVE as `ephem run --invoke` takes it), drop the store. The
//! component stays loaded on both sides (an `InstancePre` on each, wasmtime's with the pooling
//! allocator of [`ephem_bench_wasmtime::wt::engine`]). The two runtimes take turns in blocks,
//! as `fresh-vs-wasmtime` does. Every component given is reported, also one that fails on
//! either side.
//!
//! With `--from-disk`, each invocation of an export first loads the component from its
//! compiled file and links it (ephem: `Component::from_artifact_file`, which keeps what a
//! thread opened as the cache keeps module entries; wasmtime: `Component::deserialize_file`),
//! as a server with more components than memory must: the comparison the fresh-path
//! target is about.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use ephem::component as ec;
use ephem_bench::fresh::median_p90;
use wasmtime::component as wc;

#[derive(Parser)]
#[command(about = "A fresh component instance per call, on ephem and on wasmtime")]
struct Args {
    /// Components and the call to make on each: `FILE=NAME(ARGS…)`, or `FILE` for a WASI
    /// command.
    #[arg(required = true)]
    subjects: Vec<String>,
    /// Invocations per runtime and component.
    #[arg(long, default_value_t = 20_000)]
    invocations: usize,
    /// Load the component from its compiled file on every invocation (ephem's component
    /// artifact, wasmtime's serialized component with `deserialize_file`), then link it,
    /// instead of keeping it loaded: the fresh path with loading (for a command, the linker
    /// with WASI stays; the component is linked to it per invocation).
    #[arg(long)]
    from_disk: bool,
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

/// What a WASI command's store holds on wasmtime's side.
struct WtWasi {
    ctx: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for WtWasi {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// One component compiled to a file by each runtime, for `--from-disk`, in a directory that
/// lives as long as this.
struct Files {
    _dir: tempfile::TempDir,
    ours: std::path::PathBuf,
    key: ephem::ArtifactKey,
    theirs: std::path::PathBuf,
}

impl Files {
    /// Writes each runtime's compiled `component`; ephem's read-only, as `ephem compile` and
    /// the cache write artifacts (a file others could change is opened from a snapshot,
    /// verified every time).
    fn write(ours: &ec::Component, theirs: &wc::Component) -> anyhow::Result<Arc<Files>> {
        let dir = tempfile::tempdir()?;
        let key = ephem::ArtifactKey::generate()?;
        let files = Files {
            ours: dir.path().join("ephem"),
            theirs: dir.path().join("wasmtime"),
            _dir: dir,
            key,
        };
        std::fs::write(&files.ours, ours.to_artifact(&files.key)?)?;
        std::fs::set_permissions(
            &files.ours,
            std::os::unix::fs::PermissionsExt::from_mode(0o444),
        )?;
        std::fs::write(&files.theirs, theirs.serialize()?)?;
        Ok(Arc::new(files))
    }

    /// ephem's component, opened from its file.
    fn ephem(&self, engine: &ephem::Engine) -> anyhow::Result<ec::Component> {
        Ok(ec::Component::from_artifact_file(
            engine, &self.ours, &self.key,
        )?)
    }

    /// wasmtime's component, deserialized from its file.
    fn wasmtime(&self, engine: &wasmtime::Engine) -> anyhow::Result<wc::Component> {
        // SAFETY: the file was written by `serialize` of this engine (`Files::write`), and
        // nothing modifies it while the benchmark runs.
        Ok(unsafe { wc::Component::deserialize_file(engine, &self.theirs)? })
    }
}

/// A WASI command on both runtimes.
fn prepare_command(
    file: &str,
    wt_engine: &wasmtime::Engine,
    from_disk: bool,
) -> anyhow::Result<Subject> {
    let wasm = std::fs::read(file).with_context(|| format!("reading {file}"))?;

    let engine = ephem::Engine::default();
    let component = ec::Component::new(&engine, &wasm)?;
    let mut linker = ec::Linker::<ephem_wasi::WasiCtx>::new(&engine);
    ephem_wasi::p2::add_to_linker(&mut linker, |c| c)?;
    ephem_wasi::p2::add_filesystem_to_linker(&mut linker, |c| c)?;
    linker.define_unknown_imports_as_traps(&component, |_| true)?;
    let ephem_pre = linker.instantiate_pre(&component)?;
    let mut template = ephem_wasi::WasiCtx::builder();
    template.arg(file)?;
    let run = (component.exported_funcs().into_iter())
        .map(|(path, _)| path)
        .find(|p| p.len() == 2 && p[0].starts_with("wasi:cli/run@0.2.") && p[1] == "run")
        .context("no wasi:cli/run")?;
    let wt_component = wc::Component::new(wt_engine, &wasm)?;
    let files = Files::write(&component, &wt_component)?;
    let ours = files.clone();
    let ephem = Box::new(move || -> anyhow::Result<String> {
        let ephem_pre = match from_disk {
            true => linker.instantiate_pre(&ours.ephem(&engine)?)?,
            false => ephem_pre.clone(),
        };
        let mut store = ephem::Store::new(&engine, template.build());
        let instance = ephem_pre.instantiate(&mut store)?;
        let i = instance.get_export_index(&mut store, None, &run[0]);
        let i = i.and_then(|i| instance.get_export_index(&mut store, Some(&i), "run"));
        let func = i
            .and_then(|i| instance.get_func(&mut store, i))
            .context("no run")?;
        let mut out = [ec::Val::Bool(false)];
        func.call(&mut store, &[], &mut out)?;
        Ok(out[0].to_string())
    });

    let mut wt_linker = wc::Linker::<WtWasi>::new(wt_engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut wt_linker)?;
    let pre = wasmtime_wasi::p2::bindings::sync::CommandPre::new(
        wt_linker.instantiate_pre(&wt_component)?,
    )?;
    let wt_engine = wt_engine.clone();
    let file_arg = file.to_string();
    let wasmtime = Box::new(move || -> anyhow::Result<String> {
        let pre = match from_disk {
            true => wasmtime_wasi::p2::bindings::sync::CommandPre::new(
                wt_linker.instantiate_pre(&files.wasmtime(&wt_engine)?)?,
            )?,
            false => pre.clone(),
        };
        let ctx = wasmtime_wasi::WasiCtxBuilder::new().arg(&file_arg).build();
        let host = WtWasi {
            ctx,
            table: Default::default(),
        };
        let mut store = wasmtime::Store::new(&wt_engine, host);
        let command = pre.instantiate(&mut store)?;
        let ran = command.wasi_cli_run().call_run(&mut store)?;
        Ok(format!("{ran:?}"))
    });
    Ok(Subject {
        label: std::path::Path::new(file)
            .file_name()
            .unwrap()
            .display()
            .to_string(),
        ephem,
        wasmtime,
    })
}

fn prepare(spec: &str, wt_engine: &wasmtime::Engine, from_disk: bool) -> anyhow::Result<Subject> {
    let Some((file, call)) = spec.split_once('=') else {
        return prepare_command(spec, wt_engine, from_disk);
    };
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
    let wt_component = wc::Component::new(wt_engine, &wasm)?;
    let files = Files::write(&component, &wt_component)?;
    let pre = ec::Linker::<()>::new(&engine).instantiate_pre(&component)?;
    let ephem = {
        let (name, args, ours) = (name.clone(), args.clone(), files.clone());
        Box::new(move || -> anyhow::Result<String> {
            let pre = match from_disk {
                true => ec::Linker::<()>::new(&engine).instantiate_pre(&ours.ephem(&engine)?)?,
                false => pre.clone(),
            };
            let mut store = ephem::Store::new(&engine, ());
            let instance = pre.instantiate(&mut store)?;
            let func = instance
                .get_func(&mut store, name.as_str())
                .context("no export")?;
            let mut results = vec![ec::Val::Bool(false); has_result as usize];
            func.call(&mut store, &args, &mut results)?;
            Ok(results.iter().map(ToString::to_string).collect())
        })
    };

    let pre = wc::Linker::<()>::new(wt_engine).instantiate_pre(&wt_component)?;
    let wt_args: Vec<wc::Val> = args.iter().map(to_wasmtime).collect();
    let wt_engine = wt_engine.clone();
    let wasmtime = Box::new(move || -> anyhow::Result<String> {
        let pre = match from_disk {
            true => {
                wc::Linker::<()>::new(&wt_engine).instantiate_pre(&files.wasmtime(&wt_engine)?)?
            }
            false => pre.clone(),
        };
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
        let measured = prepare(spec, &wt_engine, args.from_disk).and_then(|subject| {
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
            Err(e) => {
                // The error's first line: a trap's backtrace would break the table.
                let e = format!("{e:#}");
                println!("{spec:<40} failed: {}", e.lines().next().unwrap_or(""));
            }
        }
    }
    Ok(())
}
