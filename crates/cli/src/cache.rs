//! `ephem compile` (of a module or a component), `ephem cache stats|clear`, and how every
//! command finds modules: artifacts are opened, wasm goes through the compile cache unless
//! `--no-cache`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use ephem::{ArtifactKey, Cache, Compiler, Engine, Module, Outcome};

/// Where the compile cache is, and the key artifacts are sealed with.
#[derive(clap::Args, Clone, Debug)]
pub struct CacheArgs {
    /// Compile cache directory (default: $EPHEM_CACHE_DIR, else the user cache directory).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Size bound of the cache in MiB; least recently used entries go first.
    #[arg(long, value_name = "MIB", default_value_t = ephem_artifact::DEFAULT_MAX_BYTES >> 20)]
    cache_max_mib: u64,
    /// The deployment's artifact key: a file of 64 hex digits that only this user (or root)
    /// can write. Artifacts are sealed with it and only artifacts it verifies are run
    /// (default: the `key` file in the cache directory, made on first use).
    #[arg(long, value_name = "FILE")]
    artifact_key: Option<PathBuf>,
}

impl CacheArgs {
    fn dir(&self) -> anyhow::Result<PathBuf> {
        match &self.cache_dir {
            Some(d) => Ok(d.clone()),
            None => Cache::default_dir()
                .context("no cache directory: set $EPHEM_CACHE_DIR or $HOME, or pass --cache-dir"),
        }
    }

    pub fn cache(&self) -> anyhow::Result<Cache> {
        let (dir, max) = (self.dir()?, self.cache_max_mib << 20);
        Ok(match &self.artifact_key {
            Some(file) => Cache::with_key(dir, max, ArtifactKey::from_file(file)?),
            None => Cache::new(dir, max),
        })
    }

    /// The key artifacts are sealed with and verified by.
    pub fn key(&self) -> anyhow::Result<ArtifactKey> {
        Ok(self.cache()?.artifact_key()?.clone())
    }
}

/// How artifact files given on the command line are opened.
#[derive(clap::Args, Clone, Debug)]
pub struct TrustArgs {
    /// Run artifact files without checking that they are sealed with the deployment's key
    /// (their metadata is still checked). Only for artifacts from a source you trust as you
    /// would trust an executable.
    #[arg(long)]
    pub trust_artifact: bool,
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
    cache: (&CacheArgs, Option<&Cache>),
    trust: &TrustArgs,
) -> anyhow::Result<Module> {
    let (cache_args, cache) = cache;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if ephem_artifact::is_artifact(&bytes) {
        let opened = if trust.trust_artifact {
            // SAFETY: the user asked for this file's code to be run as it is.
            unsafe { Module::from_file_unverified(engine, path) }
        } else {
            let key = cache_args.key()?;
            Module::from_artifact_file(engine, path, &key)
        };
        return opened.with_context(|| format!("opening {}", path.display()));
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
    /// Also write each function's Cranelift IR, as translated, to DIR/wasm-function[N].clif
    /// (as `wasmtime compile --emit-clif`), to read beside another engine's.
    #[arg(long, value_name = "DIR")]
    emit_clif: Option<PathBuf>,
    /// The key it is sealed with (see `--artifact-key`), and the cache whose key is the default.
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    image: ImageArgs,
}

/// What a compiled artifact holds, and what its code does besides the module's work.
#[derive(clap::Args, Clone, Debug)]
pub struct ImageArgs {
    /// The largest memory image an artifact may hold (a `k`, `m` or `g` suffix for KiB, MiB,
    /// GiB; 0: none): a memory whose initial data spans more is initialised by copying its
    /// segments instead.
    #[arg(long, value_name = "SIZE", value_parser = ephem::units::parse_size_usize)]
    max_image_size: Option<usize>,
    /// Compile stores without write marks: slightly faster compute, a slower reset of each
    /// instance's memory (it reads the memory, or asks the kernel, instead).
    #[arg(long)]
    no_write_marks: bool,
    /// Compile memory accesses without comparing them with the memory's length (an access
    /// past it traps by a fault instead): slightly faster compute, but a module that grows its
    /// memory in every call then makes two system calls per call and does not scale across
    /// threads.
    #[arg(long)]
    no_bounds_checks: bool,
}

impl ImageArgs {
    pub fn apply(&self, mut compiler: Compiler) -> Compiler {
        if let Some(bytes) = self.max_image_size {
            compiler = compiler.with_max_image_bytes(bytes as u64);
        }
        if self.no_write_marks {
            compiler = compiler.without_write_marks();
        }
        if self.no_bounds_checks {
            compiler = compiler.without_bounds_checks();
        }
        compiler
    }
}

/// `ephem compile IN -o OUT`.
pub fn compile(args: CompileArgs) -> anyhow::Result<()> {
    // The output's directory must exist: a mistyped path is an error, not a new directory
    // (the cache's writer makes its own directories; this is not the cache).
    if let Some(dir) = args.output.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        anyhow::bail!(
            "writing {}: the directory {} does not exist",
            args.output.display(),
            dir.display()
        );
    }
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let mut compiler = args.image.apply(Compiler::new()?);
    if let Some(dir) = &args.emit_clif {
        std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
        compiler = compiler.with_clif_dir(dir);
    }
    let key = args.cache.key()?;
    let sealed = if crate::component::is_component(&bytes) {
        // Every core module compiled, then the plan and their artifacts in one sealed file.
        let engine = Engine::default();
        ephem::component::Component::new_with(&engine, &bytes, &compiler, |compiler, wasm| {
            ephem::compile_with(compiler, &engine, wasm)
        })
        .and_then(|c| c.to_artifact(&key))
        .map_err(crate::component::error)
    } else {
        ephem::precompile_sealed(&compiler, &bytes, &key).map_err(anyhow::Error::from)
    }
    .with_context(|| format!("compiling {}", args.input.display()))?;
    ephem_artifact::write_atomic(&args.output, &sealed)
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
            outln!("directory: {}", cache.dir().display())?;
            outln!("entries: {}", s.entries)?;
            outln!("temporary files: {}", s.temps)?;
            outln!("bytes: {}", s.bytes)?;
            outln!("max_bytes: {}", s.max_bytes)?;
        }
        CacheCommand::Clear(args) => {
            let cache = args.cache()?;
            let n = cache.clear()?;
            outln!("removed {n} entries from {}", cache.dir().display())?;
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
