//! `ephem run FILE [--invoke NAME] [ARGS…]`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ephem::{Engine, Linker, Val, ValType};

#[derive(clap::Args)]
pub struct Args {
    /// A .wasm or .wat module, or an artifact from `ephem compile`.
    file: PathBuf,
    /// Compile in memory instead of through the compile cache.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    cache: crate::cache::CacheArgs,
    /// The export to call (default: `_start`, or `main`, or the start function alone).
    #[arg(long)]
    invoke: Option<String>,
    /// Arguments, parsed by the export's parameter types.
    args: Vec<String>,
}

fn parse_arg(ty: ValType, s: &str) -> anyhow::Result<Val> {
    Ok(match ty {
        ValType::I32 => Val::I32(
            s.parse::<i64>()
                .map(|v| v as i32)
                .with_context(|| format!("`{s}` is not an i32"))?,
        ),
        ValType::I64 => Val::I64(
            s.parse::<i128>()
                .map(|v| v as i64)
                .with_context(|| format!("`{s}` is not an i64"))?,
        ),
        ValType::F32 => Val::F32(
            s.parse::<f32>()
                .with_context(|| format!("`{s}` is not an f32"))?
                .to_bits(),
        ),
        ValType::F64 => Val::F64(
            s.parse::<f64>()
                .with_context(|| format!("`{s}` is not an f64"))?
                .to_bits(),
        ),
        ValType::FuncRef | ValType::ExternRef => {
            bail!("reference arguments cannot be given on the command line")
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
        Val::ExternRef(r) => r.map_or("null".to_owned(), |r| format!("externref {r}")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::cache::check_no_cache(args.no_cache, &args.cache)?;
    let engine = Engine::default();
    let cache = if args.no_cache {
        None
    } else {
        Some(args.cache.cache()?)
    };
    let module = crate::cache::load(&engine, &args.file, cache.as_ref())?;
    // Imports a module needs from its home platform are stubs that trap when called.
    let instance = Linker::new()
        .define_unknown_imports_as_traps(&module)?
        .instantiate(&module)?;
    let name = match args.invoke {
        Some(name) => name,
        None => match ["_start", "main"]
            .into_iter()
            .find(|n| instance.get_func(n).is_ok())
        {
            Some(n) => n.to_owned(),
            None if args.args.is_empty() => return Ok(()),
            None => bail!("no export to call: pass --invoke NAME"),
        },
    };
    let func = instance.get_func(&name)?;
    let params = func.ty().params.clone();
    if params.len() != args.args.len() {
        bail!(
            "`{name}` takes {} arguments ({params:?}), {} given",
            params.len(),
            args.args.len()
        );
    }
    let vals = params
        .iter()
        .zip(&args.args)
        .map(|(&t, s)| parse_arg(t, s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for v in func.call(&engine, &vals)? {
        println!("{}", show(&v));
    }
    Ok(())
}
