//! `ephem run COMPONENT --invoke 'f(args…)'` (a component, or its artifact from `ephem
//! compile`): a component's exported function called with
//! arguments and its result printed in WAVE, as `wasmtime run --invoke` does, under the same
//! limits, fuel and deadline as a module.
//!
//! WASI 0.2 is not provided yet: a component that imports anything fails to link, naming the
//! import, and one run without `--invoke` (a `wasi:cli/run` command) is refused with that
//! reason.

use anyhow::Context;
use ephem::component::{self as ec, Component};
use ephem::{Cache, Compiler, Engine, Store, StoreLimits, StoreLimitsBuilder};

use crate::exit::Usage;
use crate::run::{Args, TICKS_PER_TIMEOUT};

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
        Component::from_artifact(engine, bytes, &args.cache.key()?)
            .map_err(error)
            .with_context(|| format!("opening {}", args.file.display()))?
    } else {
        Component::new_with(engine, bytes, |wasm| match cache {
            Some(cache) => ephem::compile_cached(compiler, engine, cache, wasm).map(|(m, _)| m),
            None => ephem::compile_with(compiler, engine, wasm),
        })
        .map_err(error)
        .with_context(|| format!("compiling {}", args.file.display()))?
    };
    let mut limits = StoreLimitsBuilder::new();
    if let Some(bytes) = args.max_memory {
        limits = limits.memory_size(bytes);
    }
    let mut store = Store::new(engine, limits.build());
    store.limiter(|l: &mut StoreLimits| l);
    if let Some(fuel) = args.fuel {
        store.set_fuel(fuel)?;
    }
    if args.timeout.is_some() {
        store.set_epoch_deadline(u64::from(TICKS_PER_TIMEOUT));
    }
    let _ticker =
        (args.timeout).map(|timeout| engine.start_epoch_ticker(timeout / TICKS_PER_TIMEOUT));
    let Some(call) = &args.invoke else {
        return Err(Usage(format!(
            "{} is a component: ephem calls its exports with `--invoke 'name(args…)'`; running \
             it as a `wasi:cli/run` command needs WASI 0.2, which ephem does not provide yet",
            args.file.display()
        ))
        .into());
    };
    let linker = ec::Linker::new(engine);
    let instance = linker
        .instantiate(&mut store, &component)
        .map_err(error)
        .with_context(|| {
            format!(
                "linking {} (WASI 0.2 and other component imports are not provided yet)",
                args.file.display()
            )
        })?;
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
    if let (true, Some(fuel)) = (args.print_fuel, args.fuel) {
        eprintln!("fuel consumed: {}", fuel - store.get_fuel()?);
    }
    called?;
    for v in &results {
        outln!("{v}")?;
    }
    Ok(())
}
