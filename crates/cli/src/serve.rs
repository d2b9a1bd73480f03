//! `ephem serve`: the HTTP server of `ephem-serve`, configured by a TOML file (`--config`) with
//! flags over it; with `--component FILE`, one `wasi:http` component answering every request.

use std::net::SocketAddr;
use std::path::PathBuf;

use ephem_serve::{Config, Server};

#[derive(clap::Args)]
pub struct Args {
    /// A TOML configuration file (see `ephem-serve`'s `Config`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to listen (default 127.0.0.1:8080; beyond loopback only with `--token-file`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Where modules and artifacts are kept (default `ephem-data`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The artifact store, shared by a fleet (default DATA_DIR/artifacts).
    #[arg(long, value_name = "DIR")]
    artifacts_dir: Option<PathBuf>,
    /// Uploaded modules, shared by a fleet (default DATA_DIR/modules).
    #[arg(long, value_name = "DIR")]
    modules_dir: Option<PathBuf>,
    /// An object store the fleet shares modules and artifacts through, instead of shared
    /// directories (`s3://bucket/prefix` and the like with the `cloud` feature, `file:///dir`);
    /// needs `--artifact-key`.
    #[arg(long, value_name = "URL")]
    object_store: Option<String>,
    /// The fleet's artifact key (64 hex digits; default: a key made in the artifact store).
    #[arg(long, value_name = "FILE")]
    artifact_key: Option<PathBuf>,
    /// A file with the bearer token uploads and calls must present.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Calls running at once (default: the CPUs).
    #[arg(long)]
    workers: Option<usize>,
    /// Calls waiting for a worker before `503` (default: as many as workers).
    #[arg(long)]
    queue: Option<usize>,
    /// Fuel per call at most.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Wall-clock time per call at most (`500ms`, `2s`).
    #[arg(long, value_name = "DURATION", value_parser = ephem::units::parse_duration)]
    timeout: Option<std::time::Duration>,
    /// Linear memory per instance at most (`k`, `m`, `g` suffixes).
    #[arg(long, value_name = "SIZE", value_parser = ephem::units::parse_size_usize)]
    max_memory: Option<usize>,
    /// Largest module upload (`k`, `m`, `g` suffixes).
    #[arg(long, value_name = "SIZE", value_parser = ephem::units::parse_size_usize)]
    max_module: Option<usize>,
    /// Accepts modules importing what the server lacks: such functions trap when called,
    /// memories and tables are fresh per call.
    #[arg(long)]
    trap_unknown_imports: bool,
    /// Logs a line per request (off by default: it costs throughput).
    #[arg(long)]
    access_log: bool,
    /// Logs as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
    /// Serves this `wasi:http/proxy` component at every path, a fresh instance per request
    /// (as `wasmtime serve FILE`), instead of the module API.
    #[arg(long, value_name = "FILE")]
    component: Option<PathBuf>,
}

impl Args {
    fn config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        c.listen = self.listen.unwrap_or(c.listen);
        c.data_dir = self.data_dir.unwrap_or(c.data_dir);
        c.artifacts_dir = self.artifacts_dir.or(c.artifacts_dir);
        c.modules_dir = self.modules_dir.or(c.modules_dir);
        c.object_store = self.object_store.or(c.object_store);
        c.artifact_key_file = self.artifact_key.or(c.artifact_key_file);
        c.token_file = self.token_file.or(c.token_file);
        c.workers = self.workers.unwrap_or(c.workers);
        c.queue = self.queue.or(c.queue);
        c.trap_unknown_imports |= self.trap_unknown_imports;
        c.access_log |= self.access_log;
        let l = &mut c.limits;
        l.fuel = self.fuel.unwrap_or(l.fuel);
        l.timeout_ms = self.timeout.map_or(l.timeout_ms, |t| t.as_millis() as u64);
        l.max_memory = self.max_memory.map_or(l.max_memory, |m| m as u64);
        l.max_module = self.max_module.unwrap_or(l.max_module);
        Ok(c)
    }
}

pub fn serve(args: Args) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = (tracing_subscriber::fmt())
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if args.log_json {
        logs.json().init();
    } else {
        logs.init();
    }
    let component = match &args.component {
        Some(path) => Some(
            std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let config = args.config()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let server = match &component {
                Some(bytes) => Server::bind_component(config, bytes).await?,
                None => Server::bind(config).await?,
            };
            tracing::info!(address = %server.local_addr()?, "listening");
            server.run(ephem_serve::shutdown_signal()).await
        })
}
