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
//! Every method blocks (file system, compiler): call them off the async threads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ephem::{Cache, Compiler, Engine, Module, Outcome};

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
    /// Whether the artifact was opened (`Hit`) or had to be compiled.
    pub outcome: Outcome,
}

/// The modules of one server.
pub struct Registry {
    modules_dir: PathBuf,
    cache: Cache,
    compiler: Compiler,
    fingerprint: String,
    engine: Engine,
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
            compiling: Mutex::new(HashMap::new()),
        })
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
        let path = self.source_path(&id);
        let new = !path.is_file();
        if new {
            ephem_artifact::write_atomic(&path, wasm)
                .map_err(|e| RegistryError::Internal(format!("keeping the module: {e}")))?;
        }
        Ok((id, found, new))
    }

    /// The module `id`, opened from its artifact, or compiled again from its kept wasm.
    pub fn module(&self, id: &str) -> Result<Found, RegistryError> {
        if !is_id(id) {
            return Err(RegistryError::NotFound(id.to_owned()));
        }
        self.compiled(id, || {
            std::fs::read(self.source_path(id)).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => RegistryError::NotFound(id.to_owned()),
                _ => RegistryError::Internal(format!("reading module {id}: {e}")),
            })
        })
    }

    /// Whether module `id` is kept (uploaded and not deleted).
    pub fn is_kept(&self, id: &str) -> bool {
        is_id(id) && self.source_path(id).is_file()
    }

    /// Forgets module `id`: its wasm and its artifact. `false` if there was none.
    pub fn delete(&self, id: &str) -> Result<bool, RegistryError> {
        if !is_id(id) {
            return Ok(false);
        }
        let removed = match std::fs::remove_file(self.source_path(id)) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(RegistryError::Internal(format!("deleting {id}: {e}"))),
        };
        let _ = std::fs::remove_file(self.cache.path(&self.cache_key(id)));
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
            return Ok(Found {
                module: Module::from_artifact(&self.engine, artifact),
                outcome: Outcome::Hit,
            });
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
            let got = self.cache.get_or_compile(&key, || {
                let wasm = source()?;
                (self.compiler.compile(&wasm)).map_err(|e| RegistryError::Invalid(e.to_string()))
            });
            got.map(|(artifact, outcome)| Found {
                module: Module::from_artifact(&self.engine, artifact),
                outcome,
            })
        };
        let mut compiling = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&lock) == 2 {
            compiling.remove(id);
        }
        result
    }
}

impl From<ephem_artifact::Error> for RegistryError {
    fn from(e: ephem_artifact::Error) -> RegistryError {
        RegistryError::Internal(e.to_string())
    }
}
