//! `ephem run FILE [--dir HOST[::GUEST]] [--env K=V] [--preload NAME=FILE] [--invoke NAME]
//! [--] [ARGS…]`: wasmtime's flags, with WASI preview 1 linked for every module (a component
//! goes to `component.rs`).

use std::path::PathBuf;

use anyhow::Context;
use ephem::{Engine, Linker, Store, StoreLimits, StoreLimitsBuilder, Val, ValType};
use ephem_wasi::{DirPerms, WasiCtx, WasiCtxBuilder};

use crate::exit::Usage;

#[derive(clap::Args)]
pub struct Args {
    /// A .wasm or .wat module, or an artifact from `ephem compile`.
    pub(crate) file: PathBuf,
    /// Compile in memory instead of through the compile cache.
    #[arg(long)]
    pub(crate) no_cache: bool,
    #[command(flatten)]
    pub(crate) cache: crate::cache::CacheArgs,
    #[command(flatten)]
    pub(crate) trust: crate::cache::TrustArgs,
    #[command(flatten)]
    pub(crate) image: crate::cache::ImageArgs,
    /// The export to call (default: `_start`, or `main`, or the start function alone).
    #[arg(long)]
    pub(crate) invoke: Option<String>,
    /// Satisfy imports the host does not provide: functions with stubs that trap when called,
    /// memories, tables and globals with fresh zeroed ones. Without it, such imports are
    /// refused, naming them.
    #[arg(long)]
    pub(crate) trap_unknown_imports: bool,
    /// The most bytes a linear memory may have (a `k`, `m` or `g` suffix for KiB, MiB, GiB):
    /// `memory.grow` past it returns -1, a larger initial memory fails to instantiate.
    #[arg(long, value_name = "SIZE", value_parser = ephem::units::parse_size_usize)]
    pub(crate) max_memory: Option<usize>,
    /// Interrupt the guest after this much wall-clock time (`500ms`, `2s`, `1m`; a plain number
    /// is seconds): it traps, and `ephem` exits with the trap code.
    #[arg(long, value_name = "DURATION", value_parser = ephem::units::parse_duration)]
    pub(crate) timeout: Option<std::time::Duration>,
    /// How much stack the guest may use (a `k` or `m` suffix for KiB, MiB; default 512k):
    /// deeper recursion traps.
    #[arg(long, value_name = "SIZE", value_parser = ephem::units::parse_size_usize)]
    pub(crate) max_stack: Option<usize>,
    /// Run with this much fuel (the module is compiled with metering): a guest that runs out
    /// traps, and `ephem` exits with the trap code.
    #[arg(long, value_name = "N")]
    pub(crate) fuel: Option<u64>,
    /// Print the fuel consumed to standard error (with `--fuel`), also when the guest traps.
    #[arg(long, requires = "fuel")]
    pub(crate) print_fuel: bool,
    /// Lets the guest use the host directory HOST as GUEST (default: HOST as given); it
    /// reaches nothing outside it. Repeatable.
    #[arg(long = "dir", value_name = "HOST[::GUEST]")]
    pub(crate) dirs: Vec<String>,
    /// As `--dir`, read-only: the guest may read and list, not create, change or remove.
    #[arg(long = "dir-ro", value_name = "HOST[::GUEST]")]
    pub(crate) dirs_ro: Vec<String>,
    /// An environment variable for the guest (`NAME` alone passes the host's value).
    /// Repeatable.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) envs: Vec<String>,
    /// Instantiates FILE first and links its exports under the module name NAME (e.g.
    /// `--preload bench=bench.wat`). Repeatable.
    #[arg(long = "preload", value_name = "NAME=FILE")]
    pub(crate) preloads: Vec<String>,
    /// The guest's arguments (after its name, the module's file name) for a WASI command;
    /// with `--invoke`, the export's arguments, parsed by its parameter types (integers
    /// signed or unsigned, in range).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) args: Vec<String>,
}

/// What a store of the command line holds.
pub(crate) struct Host {
    pub(crate) limits: StoreLimits,
    pub(crate) wasi: WasiCtx,
}

/// `HOST[::GUEST]`.
fn split_dir(spec: &str) -> (&str, &str) {
    spec.split_once("::").unwrap_or((spec, spec))
}

/// The guest's WASI context: its name and arguments, environment, preopens, inherited stdio
/// (a template: every thread of a `wasi-threads` program builds its context from it).
pub(crate) fn wasi(args: &Args) -> anyhow::Result<WasiCtxBuilder> {
    let mut b = WasiCtxBuilder::new();
    b.inherit_stdio();
    b.arg(args.file.display().to_string())?;
    b.args(&args.args)?;
    for spec in &args.envs {
        match spec.split_once('=') {
            Some((k, v)) => b.env(k, v)?,
            None => match std::env::var_os(spec) {
                Some(v) => b.env(spec, v.as_encoded_bytes())?,
                None => &mut b,
            },
        };
    }
    let dirs = args.dirs.iter().map(|d| (d, DirPerms::ReadWrite));
    for (spec, perms) in dirs.chain(args.dirs_ro.iter().map(|d| (d, DirPerms::ReadOnly))) {
        let (host, guest) = split_dir(spec);
        b.preopened_dir(host, guest, perms)?;
    }
    Ok(b)
}

/// The store limits the flags ask for (`--max-memory`).
pub(crate) fn limits(args: &Args) -> StoreLimits {
    let mut limits = StoreLimitsBuilder::new();
    if let Some(bytes) = args.max_memory {
        limits = limits.memory_size(bytes);
    }
    limits.build()
}

/// Puts a store under its limits, `fuel` and the deadline `timeout` asks for (modules' stores,
/// each `wasi-threads` thread's, components').
pub(crate) fn bound(
    store: &mut Store<Host>,
    fuel: Option<u64>,
    timeout: Option<std::time::Duration>,
) -> Result<(), ephem::Error> {
    store.limiter(|h| &mut h.limits);
    if let Some(fuel) = fuel {
        store.set_fuel(fuel)?;
    }
    if timeout.is_some() {
        store.set_epoch_deadline(u64::from(TICKS_PER_TIMEOUT));
    }
    Ok(())
}

/// With `--print-fuel`, the fuel the store's guest consumed, on standard error.
pub(crate) fn print_fuel(args: &Args, store: &Store<Host>) -> anyhow::Result<()> {
    if let (true, Some(fuel)) = (args.print_fuel, args.fuel) {
        eprintln!("fuel consumed: {}", fuel - store.get_fuel()?);
    }
    Ok(())
}

/// Ticks per `--timeout`: the deadline is reached between 19/20 and the whole of it.
pub(crate) const TICKS_PER_TIMEOUT: u32 = 20;

/// An integer argument for a parameter of `bits` bits: signed or unsigned, never wrapped.
fn parse_int(s: &str, bits: u32) -> Option<i128> {
    let v = s.parse::<i128>().ok()?;
    let (min, max) = (-(1i128 << (bits - 1)), (1i128 << bits) - 1);
    (min..=max).contains(&v).then_some(v)
}

fn parse_arg(ty: ValType, s: &str) -> Result<Val, Usage> {
    let bad = |what: &str| Usage(format!("`{s}` is not {what}"));
    Ok(match ty {
        ValType::I32 => {
            Val::I32(parse_int(s, 32).ok_or_else(|| bad("an i32 (from -2^31 to 2^32-1)"))? as i32)
        }
        ValType::I64 => {
            Val::I64(parse_int(s, 64).ok_or_else(|| bad("an i64 (from -2^63 to 2^64-1)"))? as i64)
        }
        ValType::F32 => Val::F32(s.parse::<f32>().map_err(|_| bad("an f32"))?.to_bits()),
        ValType::F64 => Val::F64(s.parse::<f64>().map_err(|_| bad("an f64"))?.to_bits()),
        // As wasmtime takes it: the 128 bits as one number, hexadecimal with `0x`.
        ValType::V128 => Val::V128(
            match s.strip_prefix("0x") {
                Some(hex) => u128::from_str_radix(hex, 16),
                None => s.parse::<u128>(),
            }
            .map_err(|_| bad("a v128 (a 128-bit number, 0x for hexadecimal)"))?,
        ),
        ValType::Ref(_) => {
            return Err(Usage(
                "reference arguments cannot be given on the command line".into(),
            ));
        }
    })
}

fn show(v: &Val) -> String {
    match v {
        Val::I32(v) => v.to_string(),
        Val::I64(v) => v.to_string(),
        Val::F32(b) => f32::from_bits(*b).to_string(),
        Val::F64(b) => f64::from_bits(*b).to_string(),
        Val::FuncRef(f) => if f.is_some() { "funcref" } else { "null" }.to_owned(),
        Val::ExternRef(r) => r.map_or("null".to_owned(), |r| match r.data() {
            Some(n) => format!("externref {n}"),
            None => "externref".to_owned(),
        }),
        Val::ExnRef(e) => if e.is_some() { "exnref" } else { "null" }.to_owned(),
        Val::AnyRef(None) => "null".to_owned(),
        Val::AnyRef(Some(r)) => match r.as_i31() {
            Some(i) => format!("i31 {}", i.get_i32()),
            None => "anyref".to_owned(),
        },
        Val::V128(v) => format!("{v:#034x}"),
    }
}

/// The file's bytes; of a component artifact only its magic, since it is opened in place.
fn read_unless_component_artifact(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(ephem::component::MAGIC.len());
    (&mut file)
        .take(ephem::component::MAGIC.len() as u64)
        .read_to_end(&mut head)?;
    if !ephem::component::is_component_artifact(&head) {
        file.read_to_end(&mut head)?;
    }
    Ok(head)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::cache::check_no_cache(args.no_cache, &args.cache)?;
    let engine = Engine::with_config(ephem::EngineConfig {
        max_wasm_stack: args.max_stack,
        ..ephem::EngineConfig::default()
    })?;
    let cache = if args.no_cache {
        None
    } else {
        Some(args.cache.cache()?)
    };
    // Fuel metering only where asked for (it costs time in loops).
    let mut compiler = args.image.apply(ephem::Compiler::new()?);
    if args.fuel.is_some() {
        compiler = compiler.with_fuel();
    }
    let bytes = read_unless_component_artifact(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    if crate::component::is_component(&bytes) {
        return crate::component::run(&args, &engine, &compiler, cache.as_ref(), &bytes);
    }
    let load = |path| {
        let cache = (&args.cache, cache.as_ref());
        crate::cache::load(&compiler, &engine, path, cache, &args.trust)
    };
    let module = load(&args.file)?;
    let mut linker = Linker::new(&engine);
    ephem_wasi::add_to_linker(&mut linker, |h: &mut Host| &mut h.wasi)?;
    let threads = ephem_wasi::threads::Threads::<Host>::default();
    ephem_wasi::threads::add_to_linker(&mut linker, &threads)?;
    let template = wasi(&args)?;
    let limits = limits(&args);
    let (fuel, timeout) = (args.fuel, args.timeout);
    // Every store, the main thread's and each `wasi-threads` thread's, has the same limits,
    // fuel and deadline.
    let setup = move |store: &mut Store<Host>| bound(store, fuel, timeout);
    let make = {
        let (template, limits) = (template.clone(), limits.clone());
        move || Host {
            limits: limits.clone(),
            wasi: template.build(),
        }
    };
    let mut store = Store::new(&engine, make());
    setup(&mut store)?;
    // Started before instantiation, so that start functions are bounded too.
    let _ticker = timeout.map(|timeout| engine.start_epoch_ticker(timeout / TICKS_PER_TIMEOUT));
    for spec in &args.preloads {
        let (name, path) = spec
            .split_once('=')
            .ok_or_else(|| Usage(format!("`--preload {spec}`: expected NAME=FILE")))?;
        let preload = load(path.as_ref())?;
        let instance = linker
            .instantiate(&mut store, &preload)
            .with_context(|| format!("instantiating {path}"))?;
        linker.instance(&mut store, name, instance)?;
    }
    if args.trap_unknown_imports {
        linker.define_unknown_imports_as_traps(&module)?;
    }
    // A `wasi-threads` program imports its memory, shared: made here, for every thread.
    let shared = module.imports().find_map(|i| match i.kind {
        ephem::ImportKind::Memory(ty) if ty.shared => Some((i.module, i.name, ty)),
        _ => None,
    });
    if let Some((import_module, import_name, ty)) = shared {
        if !args.preloads.is_empty() {
            // (A preloaded instance lives in the main thread's store, out of other threads'
            // reach.)
            return Err(
                Usage("`--preload` does not combine with a wasi-threads program".into()).into(),
            );
        }
        let memory = ephem::SharedMemory::new(&engine, ty)?;
        // Every store, the main thread's and each other's, gets a memory of it from the
        // linker (in place of a fresh one `--trap-unknown-imports` may have stood in with).
        linker.allow_shadowing(true);
        linker.define(&store, import_module, import_name, memory)?;
        let stack = (8usize << 20).max(engine.max_wasm_stack().saturating_mul(2));
        let on_error = |tid: u32, e: ephem::Error| {
            // A thread's exit or trap ends the program, as it would on the main thread.
            let e = anyhow::Error::from(e).context(format!("thread {tid}"));
            std::process::exit(i32::from(crate::exit::report(Err(e))));
        };
        let made = ephem_wasi::threads::WasiThreads::new(
            &engine,
            &module,
            &linker,
            move || Ok(make()),
            setup,
            on_error,
            stack,
        );
        let _ = threads.set(made);
    }
    let pre = linker.instantiate_pre(&module).with_context(|| {
        format!(
            "linking {} (`--trap-unknown-imports` stubs imports this host does not provide)",
            args.file.display()
        )
    })?;
    let instance = pre.instantiate(&mut store)?;
    // A WASI command: `_start`, with the arguments given to the guest.
    let command = instance.get_func(&mut store, "_start");
    if let (None, Some(start)) = (&args.invoke, command) {
        let ran = start.call(&mut store, &[], &mut []);
        print_fuel(&args, &store)?;
        return uncaught(&mut store, ran);
    }
    // A reactor is initialised before its export is called.
    if let Some(init) = instance.get_func(&mut store, "_initialize") {
        let ran = init.call(&mut store, &[], &mut []);
        uncaught(&mut store, ran)?;
    }
    let name = match &args.invoke {
        Some(name) => name.clone(),
        None if instance.get_func(&mut store, "main").is_some() => "main".to_owned(),
        None if args.args.is_empty() => return Ok(()),
        None => return Err(Usage("no export to call: pass --invoke NAME".into()).into()),
    };
    let func = instance
        .get_func(&mut store, &name)
        .ok_or_else(|| Usage(format!("the module exports no function `{name}`")))?;
    let ty = func.ty(&store);
    if ty.params.len() != args.args.len() {
        return Err(Usage(format!(
            "`{name}` takes {} arguments ({:?}), {} given",
            ty.params.len(),
            ty.params,
            args.args.len()
        ))
        .into());
    }
    let vals = ty
        .params
        .iter()
        .zip(&args.args)
        .map(|(&t, s)| parse_arg(t, s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut results: Vec<Val> = ty.results.iter().map(|&t| Val::default_for(t)).collect();
    let called = func.call(&mut store, &vals, &mut results);
    print_fuel(&args, &store)?;
    uncaught(&mut store, called)?;
    for v in &results {
        outln!("{}", show(v))?;
    }
    Ok(())
}

/// `ran`, with what an exception no handler caught carried said in the error.
fn uncaught<T>(store: &mut ephem::Store<T>, ran: Result<(), ephem::Error>) -> anyhow::Result<()> {
    match ran {
        Err(e @ ephem::Error::Exception(_)) => {
            let exn = store.take_pending_exception();
            let values = exn.map_or_else(Vec::new, |x| x.fields(&*store));
            let values: Vec<String> = values.iter().map(show).collect();
            let what = format!("uncaught wasm exception carrying ({})", values.join(", "));
            Err(anyhow::Error::new(e).context(what))
        }
        ran => Ok(ran?),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_int;

    #[test]
    fn integers_are_taken_signed_or_unsigned_and_never_wrapped() {
        assert_eq!(parse_int("-2147483648", 32), Some(-2147483648));
        assert_eq!(parse_int("4294967295", 32), Some(4294967295));
        assert_eq!(parse_int("4294967296", 32), None);
        assert_eq!(parse_int("-2147483649", 32), None);
        assert_eq!(
            parse_int("18446744073709551615", 64),
            Some(u64::MAX as i128)
        );
        assert_eq!(parse_int("18446744073709551616", 64), None);
        assert_eq!(parse_int("-9223372036854775809", 64), None);
        assert_eq!(parse_int("1.5", 32), None);
    }
}
