//! `ephem run COMPONENT --invoke 'f(args…)'` (a component, or its artifact from `ephem
//! compile`): a component's exported function called with
//! arguments and its result printed in WAVE, as `wasmtime run --invoke` does, under the same
//! limits, fuel and deadline as a module.
//!
//! Without `--invoke`, a command: `wasi:cli/run`'s `run`, with WASI 0.2 as far as ephem has it
//! (`ephem_wasi::p2`: arguments, environment, exit status, standard streams, clocks, random,
//! the `--dir` directories); what it does not have of WASI yet traps when called, naming
//! itself.

use anyhow::Context;
use ephem::component::{self as ec, Component};
use ephem::{Cache, Compiler, Engine, Store};

use crate::exit::Usage;
use crate::run::{self, Args, Host, TICKS_PER_TIMEOUT};

/// Whether `bytes` are a component: its artifact, the binary's layer field, or text that starts
/// with `(component`.
pub fn is_component(bytes: &[u8]) -> bool {
    Component::is_component(bytes)
        || ec::is_component_artifact(bytes)
        || std::str::from_utf8(bytes).is_ok_and(|t| past_comments(t).starts_with("(component"))
}

/// `text` past leading white space and comments (`;; …` lines, `(; … ;)` blocks).
fn past_comments(mut text: &str) -> &str {
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix(";;") {
            text = rest.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(rest) = text.strip_prefix("(;") {
            text = rest.split_once(";)").map_or("", |(_, after)| after);
        } else {
            return text;
        }
    }
}

/// A component error, with a core engine error (a trap above all) as its own cause, so that
/// the exit code sees it.
pub fn error(e: ec::Error) -> anyhow::Error {
    match e {
        ec::Error::Runtime(inner) => inner.into(),
        other => other.into(),
    }
}

pub fn run(
    args: &Args,
    engine: &Engine,
    compiler: &Compiler,
    cache: Option<&Cache>,
    bytes: &[u8],
) -> anyhow::Result<()> {
    if !args.preloads.is_empty() {
        return Err(Usage("`--preload` is for core modules, not components".into()).into());
    }
    let component = if ec::is_component_artifact(bytes) {
        if args.trust.trust_artifact {
            return Err(Usage(
                "`--trust-artifact` is for module artifacts; a component's is always verified"
                    .into(),
            )
            .into());
        }
        Component::from_artifact_file(engine, &args.file, &args.cache.key()?)
            .map_err(error)
            .with_context(|| format!("opening {}", args.file.display()))?
    } else {
        Component::new_with(engine, bytes, compiler, |compiler, wasm| match cache {
            Some(cache) => ephem::compile_cached(compiler, engine, cache, wasm).map(|(m, _)| m),
            None => ephem::compile_with(compiler, engine, wasm),
        })
        .map_err(error)
        .with_context(|| format!("compiling {}", args.file.display()))?
    };
    let host = Host {
        limits: run::limits(args),
        wasi: run::wasi(args)?.build(),
    };
    let mut store = Store::new(engine, host);
    run::bound(&mut store, args.fuel, args.timeout)?;
    let _ticker =
        (args.timeout).map(|timeout| engine.start_epoch_ticker(timeout / TICKS_PER_TIMEOUT));
    let mut linker = ec::Linker::new(engine);
    ephem_wasi::p2::add_to_linker(&mut linker, |h: &mut Host| &mut h.wasi).map_err(error)?;
    ephem_wasi::p2::add_filesystem_to_linker(&mut linker, |h: &mut Host| &mut h.wasi)
        .map_err(error)?;
    // What ephem does not provide of WASI yet traps when called, naming itself; anything else
    // missing is a link error unless asked for the same.
    let trap_all = args.trap_unknown_imports;
    linker
        .define_unknown_imports_as_traps(&component, |shown| {
            trap_all || shown.starts_with("`wasi:")
        })
        .map_err(error)?;
    let instance = linker
        .instantiate(&mut store, &component)
        .map_err(error)
        .with_context(|| format!("linking {}", args.file.display()))?;
    let Some(call) = &args.invoke else {
        // A command: `wasi:cli/run`'s `run`, as `wasmtime run` calls it.
        let funcs = component.exported_funcs();
        let run = funcs.iter().find(|(path, _)| {
            path.len() == 2 && path[0].starts_with("wasi:cli/run@0.2.") && path[1] == "run"
        });
        let Some((path, _)) = run else {
            return Err(Usage(format!(
                "{} exports no `wasi:cli/run`: call one of its exports with `--invoke 'name(args…)'`",
                args.file.display()
            ))
            .into());
        };
        let index = instance.get_export_index(&mut store, None, &path[0]);
        let index = index.and_then(|i| instance.get_export_index(&mut store, Some(&i), "run"));
        let func = index
            .and_then(|i| instance.get_func(&mut store, i))
            .expect("listed among the exports");
        let mut result = [ec::Val::Bool(false)];
        let ran = func.call(&mut store, &[], &mut result).map_err(error);
        run::print_fuel(args, &store)?;
        ran?;
        // `run` returning `err` is the command failing: status 1, nothing said, as wasmtime.
        return match &result[0] {
            ec::Val::Result(Ok(_)) => Ok(()),
            _ => Err(ephem_wasi::I32Exit(1).into()),
        };
    };
    let funcs = component.exported_funcs();
    // A function the component exports itself, or one of an exported instance by its name
    // alone when only one has it.
    let find = |name: &str| -> Option<&(Vec<String>, &ec::FuncType)> {
        let top = funcs
            .iter()
            .find(|(path, _)| path.len() == 1 && path[0] == name);
        let mut inner = funcs
            .iter()
            .filter(|(path, _)| path.last().is_some_and(|n| n == name));
        top.or_else(|| match (inner.next(), inner.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        })
    };
    let (name, params) = ec::wave::parse_call(call, |name| {
        find(name).map(|(_, ty)| ty.params.iter().map(|(_, t)| t).collect())
    })
    .map_err(|e| Usage(format!("`--invoke {call}`: {e}")))?;
    let (path, ty) = find(&name).expect("found when parsed");
    let mut index = None;
    for part in path {
        index = instance.get_export_index(&mut store, index.as_ref(), part);
    }
    let func = index
        .and_then(|i| instance.get_func(&mut store, i))
        .ok_or_else(|| Usage(format!("the component exports no function `{name}`")))?;
    let mut results = vec![ec::Val::Bool(false); ty.result.is_some() as usize];
    let called = func.call(&mut store, &params, &mut results).map_err(error);
    run::print_fuel(args, &store)?;
    called?;
    for v in &results {
        outln!("{v}")?;
    }
    Ok(())
}
