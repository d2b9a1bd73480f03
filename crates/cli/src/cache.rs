//! `ephem compile`, `ephem cache stats|clear`, and how every command finds modules: artifacts
//! are opened, wasm goes through the compile cache unless `--no-cache`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use ephem::{Cache, Compiler, Engine, Module, Outcome};

/// Where the compile cache is.
#[derive(clap::Args, Clone, Debug)]
pub struct CacheArgs {
    /// Compile cache directory (default: $EPHEM_CACHE_DIR, else the user cache directory).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Size bound of the cache in MiB; least recently used entries go first.
    #[arg(long, value_name = "MIB", default_value_t = ephem_artifact::DEFAULT_MAX_BYTES >> 20)]
    cache_max_mib: u64,
}

impl CacheArgs {
    pub fn cache(&self) -> anyhow::Result<Cache> {
        let dir = match &self.cache_dir {
            Some(d) => d.clone(),
            None => Cache::default_dir().context(
                "no cache directory: set $EPHEM_CACHE_DIR or $HOME, or pass --cache-dir",
            )?,
        };
        Ok(Cache::new(dir, self.cache_max_mib << 20))
    }
}

/// Says once per process why the cache could not be used.
pub fn report(outcome: &Outcome) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    match outcome {
        Outcome::Uncached { why } if !WARNED.swap(true, Ordering::Relaxed) => {
            eprintln!("warning: {why}; compiling in memory")
        }
        Outcome::Compiled {
            replaced: Some(why),
        } => eprintln!("note: replaced a cache entry that could not be used ({why})"),
        _ => {}
    }
}

/// The module in `path`: an artifact is opened as it is; wasm or wat is compiled by
/// `compiler`, through `cache` when given.
pub fn load(
    compiler: &Compiler,
    engine: &Engine,
    path: &Path,
    cache: Option<&Cache>,
) -> anyhow::Result<Module> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if ephem_artifact::is_artifact(&bytes) {
        return Module::from_file(engine, path)
            .with_context(|| format!("opening {}", path.display()));
    }
    let module = match cache {
        Some(cache) => {
            let (module, outcome) = ephem::compile_cached(compiler, engine, cache, &bytes)
                .with_context(|| format!("compiling {}", path.display()))?;
            report(&outcome);
            module
        }
        None => ephem::compile_with(compiler, engine, &bytes)
            .with_context(|| format!("compiling {}", path.display()))?,
    };
    Ok(module)
}

#[derive(clap::Args)]
pub struct CompileArgs {
    /// A .wasm or .wat module.
    input: PathBuf,
    /// Where to write the artifact.
    #[arg(short, long)]
    output: PathBuf,
}

/// `ephem compile IN -o OUT`.
pub fn compile(args: CompileArgs) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let compiled = Compiler::new()?
        .compile(&bytes)
        .with_context(|| format!("compiling {}", args.input.display()))?;
    ephem_artifact::write_atomic(&args.output, &ephem_artifact::to_bytes(&compiled))
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum CacheCommand {
    /// Entries and bytes in the cache.
    Stats(CacheArgs),
    /// Removes every entry.
    Clear(CacheArgs),
}

pub fn command(cmd: CacheCommand) -> anyhow::Result<()> {
    match cmd {
        CacheCommand::Stats(args) => {
            let cache = args.cache()?;
            let s = cache.stats()?;
            println!("directory: {}", cache.dir().display());
            println!("entries: {}", s.entries);
            println!("bytes: {}", s.bytes);
            println!("max_bytes: {}", s.max_bytes);
        }
        CacheCommand::Clear(args) => {
            let cache = args.cache()?;
            let n = cache.clear()?;
            println!("removed {n} entries from {}", cache.dir().display());
        }
    }
    Ok(())
}

/// Refuses a `--no-cache` given with cache options (they would be silently ignored).
pub fn check_no_cache(no_cache: bool, args: &CacheArgs) -> anyhow::Result<()> {
    if no_cache && args.cache_dir.is_some() {
        bail!("--no-cache and --cache-dir contradict each other");
    }
    Ok(())
}
