//! `ephem serve`: modules in over HTTP, every request in a fresh instance.
//!
//! A client uploads a module (`PUT /modules`), gets its id (the hash of its bytes), and calls
//! it (`POST /modules/{id}/invoke/{export}` with JSON arguments, or `POST /modules/{id}/run`
//! for a WASI command with the body as stdin or as a file in its directory). Every call gets a
//! fresh store, WASI context and instance, bounded by fuel, a wall-clock deadline and a memory
//! limit ([`Limits`]), on one of a fixed number of workers; when they are busy and the queue is
//! full the answer is `503` at once. The routes and statuses are in [`http`].
//!
//! The parts:
//! - [`config`]: the TOML configuration and the per-request limits.
//! - [`registry`]: uploaded modules (kept by hash) and their compiled artifacts (ephem's
//!   compile cache, bounded). Sharing both directories makes a fleet: a module compiled by one
//!   node runs on all of them.
//! - [`store`]: the fleet's object store, for nodes that share no directory.
//! - [`exec`]: one call, in a fresh store.
//! - [`http`]: routes (axum), bearer-token checks, the worker gate.
//! - [`metrics`]: Prometheus metrics.
//! - [`component`]: `ephem serve --component`, one `wasi:http` component at every path.
//!
//! Embedders mount [`Server::router`] in their own axum application, or run [`Server::run`].

#![forbid(unsafe_code)]

pub mod component;
pub mod config;
pub mod exec;
pub mod http;
pub mod metrics;
pub mod registry;
pub mod store;

pub use object_store;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
pub use config::{Config, Limits};

/// A server bound to its address, ready to run.
pub struct Server {
    shared: Arc<http::Shared>,
    listener: tokio::net::TcpListener,
}

impl Server {
    /// Sets up the server `config` describes and binds its address (port 0: any free port).
    /// Refuses a non-loopback address without a token.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let objects = (config.object_store.as_deref())
            .map(store::open_url)
            .transpose()?;
        Server::bind_with(config, objects).await
    }

    /// As [`Server::bind`], with `objects` as the fleet's object store (`None`: none), in
    /// place of whatever `config.object_store` names.
    pub async fn bind_with(
        config: Config,
        objects: Option<Arc<dyn object_store::ObjectStore>>,
    ) -> anyhow::Result<Server> {
        Server::bind_shared(shared(config, objects, None)?).await
    }

    /// A server answering every request with the `wasi:http/proxy` component in `bytes`
    /// (compiled now, through the artifact cache), a fresh instance per request.
    pub async fn bind_component(config: Config, bytes: &[u8]) -> anyhow::Result<Server> {
        Server::bind_shared(shared(config, None, Some(bytes))?).await
    }

    async fn bind_shared(shared: http::Shared) -> anyhow::Result<Server> {
        let shared = Arc::new(shared);
        let listener = tokio::net::TcpListener::bind(shared.config.listen)
            .await
            .with_context(|| format!("listening on {}", shared.config.listen))?;
        Ok(Server { shared, listener })
    }

    /// Where the server listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The server's routes, to mount in another axum application.
    pub fn router(&self) -> axum::Router {
        http::router(self.shared.clone())
    }

    /// The worker pool, for routes mounted beside [`Server::router`]'s.
    pub fn workers(&self) -> http::Workers {
        http::Workers(self.shared.clone())
    }

    /// Serves until `shutdown` completes, then waits for the requests in flight.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let router = self.router();
        http::serve(self.listener, router, shutdown).await?;
        Ok(())
    }
}

/// What the handlers share, from `config`.
fn shared(
    config: Config,
    objects: Option<Arc<dyn object_store::ObjectStore>>,
    component: Option<&[u8]>,
) -> anyhow::Result<http::Shared> {
    let token = match &config.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            let token = text.trim().as_bytes().to_vec();
            if token.len() < 16 {
                bail!("the token in {} is shorter than 16 bytes", path.display());
            }
            Some(token)
        }
        None => None,
    };
    if token.is_none() && !config.listen.ip().is_loopback() {
        bail!(
            "listening on {}, beyond this machine, needs a token (`token_file`, `--token-file`)",
            config.listen
        );
    }
    let engine = ephem::Engine::default();
    // Every call is bounded by fuel and a deadline; fuel must be compiled in.
    let compiler = ephem::Compiler::new()?.with_fuel();
    let artifacts = config.artifacts_dir();
    let cache = match &config.artifact_key_file {
        Some(path) => {
            let key = ephem::ArtifactKey::from_file(path)
                .with_context(|| format!("reading the artifact key {}", path.display()))?;
            ephem::Cache::with_key(&artifacts, config.artifacts_max_bytes, key)
        }
        None => ephem::Cache::new(&artifacts, config.artifacts_max_bytes),
    };
    // A module deleted through another node sharing these directories is called no more at
    // once: each call asks its kept artifact's file (an `fstat`, small beside a request).
    let cache = cache.asking_kept_entries_every(std::time::Duration::ZERO);
    let component = (component)
        .map(|bytes| component::Handler::new(&engine, &compiler, &cache, bytes).map(Arc::new))
        .transpose()?;
    let mut registry =
        registry::Registry::new(config.modules_dir(), cache, compiler, engine.clone())
            .with_context(|| format!("creating {}", config.modules_dir().display()))?;
    if let Some(objects) = objects {
        if config.artifact_key_file.is_none() {
            bail!(
                "an object store needs the fleet's artifact key (`artifact_key_file`, \
                 `--artifact-key`): without it each node would seal with a key of its own"
            );
        }
        let recheck = std::time::Duration::from_secs(config.object_store_recheck_secs);
        let bucket = store::Bucket::new(objects, tokio::runtime::Handle::current(), recheck);
        registry = registry.with_bucket(bucket);
    }
    let scratch = config.scratch_dir();
    let exec = exec::Executor::new(&engine, scratch.clone(), config.trap_unknown_imports)
        .with_context(|| format!("setting up {}", scratch.display()))?;
    let mut shared = http::Shared::new(config, registry, exec, token);
    shared.component = component;
    Ok(shared)
}

/// Completes on SIGTERM or SIGINT (Ctrl-C): the signal for a graceful shutdown.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: finishing the requests in flight");
}
