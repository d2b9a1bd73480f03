//! Uploaded modules: their wasm kept by content hash, their artifacts in a bounded store.
//!
//! - **Identity**: a module's id is the BLAKE3 hash of its wasm bytes (64 hex digits), so the
//!   same module uploaded twice, or to two nodes, is one module.
//! - **Two directories**: `modules/ID.wasm` keeps what was uploaded (written atomically; the
//!   durable record, never evicted), and the artifact store (ephem's compile [`Cache`]) keeps
//!   compiled code, bounded in size. An artifact evicted, damaged or compiled for another CPU
//!   is compiled again from the kept wasm on its next call. Nodes that share both directories
//!   (and the artifact key) share modules and compiled code: what one node compiled, the others
//!   open.
//! - **Artifact key**: the cache entry of module `ID` is `Cache::key(ID, fingerprint)`, so a
//!   call finds its artifact from the id alone, without reading or hashing the wasm.
//! - **Compiled once**: concurrent uploads (or first calls) of one module in this process wait
//!   for one compile ([`Registry::module`] holds a lock per id while it compiles).
//!
//! - **An object store** ([`Bucket`]) may sit behind both directories, for a fleet whose nodes
//!   share no file system: see [`crate::store`] for what it holds and how nodes use it.
//!
//! Every method blocks (file system, compiler): call them off the async threads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ephem::component::Component;
use ephem::{Cache, Compiler, Engine, Module, Outcome};

use crate::store::Bucket;

/// Why a module could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No module with this id was uploaded (or it was deleted).
    #[error("no module {0}")]
    NotFound(String),
    /// The bytes are not a valid module, or use what ephem does not support.
    #[error("{0}")]
    Invalid(String),
    /// Storage or the compiler's machinery failed.
    #[error("{0}")]
    Internal(String),
}

/// What a call to [`Registry::module`] found.
pub struct Found {
    pub module: Module,
    /// Where its artifact came from.
    pub origin: Origin,
}

/// Where a module's artifact came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// This node's artifact store.
    Hit,
    /// The fleet's object store.
    Fetched,
    /// Compiled here, and stored.
    Compiled,
    /// Compiled here, but it could not be stored: it is in memory only.
    Uncached,
}

impl Origin {
    /// Its name in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Origin::Hit => "hit",
            Origin::Fetched => "fetched",
            Origin::Compiled => "compiled",
            Origin::Uncached => "uncached",
        }
    }
}

/// The modules of one server.
pub struct Registry {
    modules_dir: PathBuf,
    cache: Cache,
    compiler: Compiler,
    fingerprint: String,
    engine: Engine,
    bucket: Option<Bucket>,
    /// Ids being compiled in this process, each with the lock its compile holds.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// Whether `id` has the form of a module id (so that it can name a file).
pub fn is_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The id of `wasm`.
fn id_of(wasm: &[u8]) -> String {
    blake3::hash(wasm).to_hex().to_string()
}

impl Registry {
    pub fn new(
        modules_dir: PathBuf,
        cache: Cache,
        compiler: Compiler,
        engine: Engine,
    ) -> std::io::Result<Registry> {
        std::fs::create_dir_all(&modules_dir)?;
        Ok(Registry {
            modules_dir,
            fingerprint: compiler.fingerprint(),
            cache,
            compiler,
            engine,
            bucket: None,
            compiling: Mutex::new(HashMap::new()),
        })
    }

    /// The registry with `bucket` behind its directories.
    pub fn with_bucket(self, bucket: Bucket) -> Registry {
        Registry {
            bucket: Some(bucket),
            ..self
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn source_path(&self, id: &str) -> PathBuf {
        self.modules_dir.join(format!("{id}.wasm"))
    }

    fn cache_key(&self, id: &str) -> String {
        Cache::key(id.as_bytes(), &self.fingerprint)
    }

    /// Validates and compiles `wasm` (unless its artifact exists), checks the module with
    /// `check`, and keeps it. Returns its id, and whether it was new (not kept before).
    pub fn put(
        &self,
        wasm: &[u8],
        check: impl FnOnce(&Module) -> Result<(), String>,
    ) -> Result<(String, Found, bool), RegistryError> {
        let id = id_of(wasm);
        let found = self.compiled(&id, || Ok(wasm.to_vec()))?;
        check(&found.module).map_err(RegistryError::Invalid)?;
        let new = self.keep(&id, wasm)?;
        Ok((id, found, new))
    }

    /// As [`Registry::put`] for a component: validated, its core modules compiled through the
    /// artifact store (each its own entry, as any module's), checked by `check`, and kept, with
    /// its component artifact beside its wasm (see [`Registry::component`]).
    pub fn put_component(
        &self,
        wasm: &[u8],
        check: impl FnOnce(&Component) -> Result<(), String>,
    ) -> Result<(String, Component, bool), RegistryError> {
        let id = id_of(wasm);
        let component = self.compile_component(wasm)?;
        check(&component).map_err(RegistryError::Invalid)?;
        let new = self.keep(&id, wasm)?;
        self.keep_component_artifact(&id, &component);
        Ok((id, component, new))
    }

    /// The component `id`: opened from its component artifact (`modules/ID.cwasm`, sealed with
    /// the store's key; kept open per thread while the file stays), else compiled again from
    /// its kept wasm (its modules' artifacts from the store, where they are) and its artifact
    /// written again. So a component that is not kept loaded costs a file's open, not a parse
    /// and a plan, however many components there are.
    pub fn component(&self, id: &str) -> Result<Component, RegistryError> {
        if !is_id(id) {
            return Err(RegistryError::NotFound(id.to_owned()));
        }
        self.hold(id)?;
        let key =
            (self.cache.artifact_key()).map_err(|e| RegistryError::Internal(e.to_string()))?;
        let path = self.component_path(id);
        match Component::from_artifact_file(&self.engine, &path, key) {
            Ok(component) => return Ok(component),
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!(component = id, "compiling again: {e}"),
        }
        let wasm = std::fs::read(self.source_path(id)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RegistryError::NotFound(id.to_owned()),
            _ => RegistryError::Internal(format!("reading component {id}: {e}")),
        })?;
        let component = self.compile_component(&wasm)?;
        self.keep_component_artifact(id, &component);
        Ok(component)
    }

    fn component_path(&self, id: &str) -> PathBuf {
        self.modules_dir.join(format!("{id}.cwasm"))
    }

    /// Writes component `id`'s artifact; one that cannot be written is compiled again from
    /// the wasm when next opened (the failure is logged, the upload or call goes on).
    fn keep_component_artifact(&self, id: &str, component: &Component) {
        let written = (self.cache.artifact_key())
            .map_err(|e| e.to_string())
            .and_then(|key| component.to_artifact(key).map_err(|e| e.to_string()))
            .and_then(|bytes| {
                ephem_artifact::write_atomic(&self.component_path(id), &bytes)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            tracing::warn!(component = id, "its artifact was not kept: {e}");
        }
    }

    /// Whether what was uploaded as `id` is a component (else a module, or nothing).
    pub fn is_component(&self, id: &str) -> bool {
        if !is_id(id) || self.hold(id).is_err() {
            return false;
        }
        let mut head = [0; 8];
        let read = std::fs::File::open(self.source_path(id))
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
        read.is_ok() && Component::is_component(&head)
    }

    fn compile_component(&self, wasm: &[u8]) -> Result<Component, RegistryError> {
        let compiled = Component::new_with(&self.engine, wasm, &self.compiler, |c, module| {
            ephem::compile_cached(c, &self.engine, &self.cache, module).map(|(m, _)| m)
        });
        compiled.map_err(|e| match e {
            ephem::component::Error::Invalid(_) | ephem::component::Error::Unsupported(_) => {
                RegistryError::Invalid(e.to_string())
            }
            ephem::component::Error::Runtime(inner)
                if inner.kind() == ephem::ErrorKind::Compile =>
            {
                RegistryError::Invalid(inner.to_string())
            }
            e => RegistryError::Internal(e.to_string()),
        })
    }

    /// Keeps `wasm` as `id` (here, and in the bucket if there is one): whether it is new.
    fn keep(&self, id: &str, wasm: &[u8]) -> Result<bool, RegistryError> {
        let path = self.source_path(id);
        let mut new = !path.is_file();
        if new {
            ephem_artifact::write_atomic(&path, wasm)
                .map_err(|e| RegistryError::Internal(format!("keeping the module: {e}")))?;
        }
        if let Some(bucket) = &self.bucket {
            let held = bucket.has_module(id, crate::store::TRANSFER_TIMEOUT);
            new = !held.map_err(RegistryError::Internal)?;
            if new {
                bucket
                    .put_module(id, wasm)
                    .map_err(RegistryError::Internal)?;
            }
            bucket.saw(id);
        }
        Ok(new)
    }

    /// The module `id`, opened from its artifact, or compiled again from its kept wasm.
    pub fn module(&self, id: &str) -> Result<Found, RegistryError> {
        if !is_id(id) {
            return Err(RegistryError::NotFound(id.to_owned()));
        }
        self.hold(id)?;
        self.compiled(id, || {
            std::fs::read(self.source_path(id)).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => RegistryError::NotFound(id.to_owned()),
                _ => RegistryError::Internal(format!("reading module {id}: {e}")),
            })
        })
    }

    /// Whether module `id` is kept (uploaded and not deleted).
    pub fn is_kept(&self, id: &str) -> bool {
        is_id(id) && self.source_path(id).is_file() && self.still_in_bucket(id).is_ok()
    }

    /// With a bucket, makes this node hold module `id`'s wasm: fetched from the bucket if it
    /// does not, else checked to be still there ([`Registry::still_in_bucket`]). Without a
    /// bucket the modules directory is the record and there is nothing to do.
    fn hold(&self, id: &str) -> Result<(), RegistryError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        let path = self.source_path(id);
        if path.is_file() {
            return self.still_in_bucket(id);
        }
        let wasm = (bucket.get_module(id).map_err(RegistryError::Internal)?)
            .ok_or_else(|| RegistryError::NotFound(id.to_owned()))?;
        if id_of(&wasm) != id {
            return Err(RegistryError::Internal(format!(
                "the object store holds other bytes than module {id} under its name"
            )));
        }
        ephem_artifact::write_atomic(&path, &wasm)
            .map_err(|e| RegistryError::Internal(format!("keeping module {id}: {e}")))?;
        bucket.saw(id);
        Ok(())
    }

    /// For a module this node holds: with a bucket, when it was last seen there longer ago
    /// than the recheck interval, whether it still is; one that is gone is forgotten here too.
    fn still_in_bucket(&self, id: &str) -> Result<(), RegistryError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        if bucket.seen_lately(id) {
            return Ok(());
        }
        match bucket.has_module(id, crate::store::CHECK_TIMEOUT) {
            Ok(true) => {}
            Ok(false) => {
                self.forget_here(id)?;
                return Err(RegistryError::NotFound(id.to_owned()));
            }
            // Served from this node's copy, and checked again after the interval, so an
            // unreachable bucket does not hold up every call.
            Err(e) => tracing::warn!(module = id, "serving this node's copy: {e}"),
        }
        bucket.saw(id);
        Ok(())
    }

    /// Forgets module `id`: its wasm and its artifact, everywhere they are kept. `false` if
    /// there was none.
    pub fn delete(&self, id: &str) -> Result<bool, RegistryError> {
        if !is_id(id) {
            return Ok(false);
        }
        // The bucket first: it is the record, and a failure there leaves everything as it was.
        let in_bucket = match &self.bucket {
            Some(bucket) => {
                (bucket.delete(id, &self.cache_key(id))).map_err(RegistryError::Internal)?
            }
            None => false,
        };
        Ok(self.forget_here(id)? || in_bucket)
    }

    /// Removes this node's copies of module `id`; whether its wasm was here.
    fn forget_here(&self, id: &str) -> Result<bool, RegistryError> {
        let removed = match std::fs::remove_file(self.source_path(id)) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(RegistryError::Internal(format!("deleting {id}: {e}"))),
        };
        let _ = std::fs::remove_file(self.cache.path(&self.cache_key(id)));
        let _ = std::fs::remove_file(self.component_path(id));
        Ok(removed)
    }

    /// The artifact of `id` opened, or compiled from the wasm `source` gives, once per process
    /// however many ask at the same time.
    fn compiled(
        &self,
        id: &str,
        source: impl FnOnce() -> Result<Vec<u8>, RegistryError>,
    ) -> Result<Found, RegistryError> {
        let key = self.cache_key(id);
        // The common case: the artifact is there.
        if let Ok(Some(artifact)) = self.cache.open(&key) {
            return Ok(self.found(artifact, Origin::Hit));
        }
        let lock = Arc::clone(
            self.compiling
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(id.to_owned())
                .or_default(),
        );
        let result = {
            let _compiling = lock.lock().unwrap_or_else(|p| p.into_inner());
            self.fetch_or_compile(id, &key, source)
        };
        let mut compiling = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&lock) == 2 {
            compiling.remove(id);
        }
        result
    }

    /// The artifact for cache key `key` (of module `id`): this node's, else the bucket's (one
    /// that does not verify is compiled again), else compiled from `source` and, with a
    /// bucket, put there for the other nodes.
    fn fetch_or_compile(
        &self,
        id: &str,
        key: &str,
        source: impl FnOnce() -> Result<Vec<u8>, RegistryError>,
    ) -> Result<Found, RegistryError> {
        if let Some(bucket) = &self.bucket {
            // Another thread may have fetched or compiled it while this one waited.
            if let Ok(Some(artifact)) = self.cache.open(key) {
                return Ok(self.found(artifact, Origin::Hit));
            }
            match bucket.get_artifact(key) {
                Ok(Some(bytes)) => match self.cache.insert(key, &bytes) {
                    Ok(artifact) => return Ok(self.found(artifact, Origin::Fetched)),
                    Err(e) => tracing::warn!(
                        module = id,
                        "compiling, not using the object store's artifact: {e}"
                    ),
                },
                Ok(None) => {}
                Err(e) => tracing::warn!(module = id, "compiling: {e}"),
            }
        }
        let (artifact, outcome) = self.cache.get_or_compile(key, || {
            let wasm = source()?;
            ephem::precompile(&self.compiler, &wasm)
                .map_err(|e| RegistryError::Invalid(e.to_string()))
        })?;
        let origin = match outcome {
            Outcome::Hit => Origin::Hit,
            Outcome::Compiled { .. } => Origin::Compiled,
            Outcome::Uncached { .. } => Origin::Uncached,
        };
        if let (Origin::Compiled, Some(bucket)) = (origin, &self.bucket) {
            // A failure here costs the other nodes a compile each, nothing more.
            let shared = read_file(&artifact).and_then(|bytes| bucket.put_artifact(key, &bytes));
            if let Err(e) = shared {
                tracing::warn!(module = id, "compiled artifact not shared: {e}");
            }
        }
        Ok(self.found(artifact, origin))
    }

    fn found(&self, artifact: ephem::Artifact, origin: Origin) -> Found {
        Found {
            module: Module::from_artifact(&self.engine, artifact),
            origin,
        }
    }
}

/// Whether opening a component artifact failed because there is no file.
fn is_not_found(e: &ephem::component::Error) -> bool {
    matches!(
        e,
        ephem::component::Error::Runtime(ephem::Error::Artifact(ephem_artifact::Error::Io(io)))
            if io.kind() == std::io::ErrorKind::NotFound
    )
}

/// The whole file of `artifact`, as stored.
fn read_file(artifact: &ephem::Artifact) -> Result<Vec<u8>, String> {
    (artifact.to_bytes()).map_err(|e| format!("reading the artifact: {e}"))
}

impl From<ephem_artifact::Error> for RegistryError {
    fn from(e: ephem_artifact::Error) -> RegistryError {
        RegistryError::Internal(e.to_string())
    }
}
