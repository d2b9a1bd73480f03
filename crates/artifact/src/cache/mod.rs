//! The compile cache: artifacts in one directory, named by the hash of what produced them.
//!
//! This file owns [`Cache`], its configuration and its public API. Beside it, `entry.rs` finds
//! an entry's file and tells whether it is the key's, `kept.rs` keeps the entries each thread
//! opened, `evict.rs` bounds the directory's size and removes files, and `tmp.rs` writes
//! temporary files and renames them into place. What the cache keeps true, wherever that is
//! done:
//!
//! - **Key**: BLAKE3 of the compiler's fingerprint, ephem's version, the format version and the
//!   wasm bytes. Embedders that already identify modules by a hash compute the key once
//!   ([`Cache::key`]) and open by key on every invocation, so the hot path never hashes wasm.
//!   Every artifact records the key it was compiled for ([`Artifact::source`]); an entry holding
//!   another one is damage.
//! - **Sealed**: entries are sealed with the deployment's [`ArtifactKey`]: the one given
//!   ([`Cache::with_key`]), else the `key` file in the directory, made on first use (mode 0600).
//!   An entry that does not verify is damage.
//! - **Atomic, read-only writes** (`tmp.rs`): an artifact is written to a temporary file in the
//!   same directory (mode 0444), flushed to disk and renamed into place, so a reader sees a whole
//!   file or none, whatever other processes or crashes do. Entries are never written in place,
//!   which is what lets a process verify a file once and remember its identity (see
//!   [`Artifact`]). Two processes compiling the same module both rename a complete, identical
//!   file.
//! - **Damage** (`entry.rs`): an entry that cannot be used (damaged, unsealed, another module's,
//!   other version, other CPU, not an artifact, not a regular file) is removed and recompiled.
//!   Entries are opened without blocking and without following a symbolic link, so a FIFO or a
//!   link at a key's path is replaced, never waited on or followed.
//! - **Size bound** (`evict.rs`): after each write, least recently used entries are removed
//!   until the directory is within the bound, counting the blocks files take on disk. Use is
//!   recorded in the access time, which a hit sets when it is more than
//!   [`TOUCH_INTERVAL_SECS`](evict::TOUCH_INTERVAL_SECS) old (so hits rarely make an extra
//!   system call). A full disk (`ENOSPC`) evicts room for the entry and the write is tried once
//!   more.
//! - **Temporary files** (`tmp.rs`) are named after their writer's process id; one whose writer
//!   is gone (or older than [`STALE_TEMP_SECS`]) is stale, counted by [`Cache::stats`] and
//!   removed by the next write, eviction and [`Cache::clear`]. This assumes the processes
//!   sharing a cache directory share a pid namespace.
//! - **Failure to write** (unwritable directory, full disk) never fails a load: the artifact is
//!   kept in memory and [`Outcome::Uncached`] says why.
//! - **Entries kept open, per thread** (`kept.rs`): each thread keeps the artifacts of the
//!   entries it opened last open, within bounds on descriptors and memory, and opens one of
//!   them again without a system call. At most once a
//!   [`KEPT_ASK_INTERVAL`](kept::KEPT_ASK_INTERVAL), and at once after a change made through
//!   this cache, it asks the kept file whether it is still the entry, so that a removed,
//!   replaced or changed entry is noticed within that interval.

mod entry;
mod evict;
pub(crate) mod kept;
mod tmp;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ephem_module::CompiledModule;
use rustix::io::Errno;

use crate::format::{EPHEM_VERSION, FORMAT_VERSION};
use crate::{Artifact, ArtifactKey, Error};
use entry::source_is;
use evict::{Kind, remove_entry};
use kept::{KEPT_ASK_INTERVAL, coarse_nanos};
pub(crate) use tmp::write_temp;
pub use tmp::{STALE_TEMP_SECS, write_atomic};

/// File name extension of cache entries.
const EXT: &str = "ephem";

/// Default size bound: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// A compile cache in one directory (created on first write).
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    /// The deployment's key: given, or loaded from (made in) the directory on first use.
    key: OnceLock<Result<ArtifactKey, String>>,
    /// The directory, open once an entry was found in it (-1 before): entries are opened
    /// relative to it, which spares the kernel a walk of the directory's path on every open
    /// (see [`Cache::open_entry`]).
    dir_fd: AtomicI32,
    /// Descriptors of directories found at `dir` before the one `dir_fd` holds (someone
    /// replaced the directory): closed with the cache, since another thread may still be
    /// opening through one.
    retired: Mutex<Vec<OwnedFd>>,
    /// What the entries each thread keeps open know this cache by; they let it go when it is
    /// dropped (see [`kept`]).
    token: Arc<()>,
    /// Whether threads keep entries open (see [`Cache::keeping_entries_open`]).
    keep_open: bool,
    /// How often a kept entry's file is asked whether it is still the entry, in nanoseconds of
    /// the coarse monotonic clock (see [`Cache::asking_kept_entries_every`]).
    ask_every: u64,
    /// How many times this cache changed its directory (stored, evicted, removed an entry):
    /// a kept entry is asked again when this moved since it was last asked, so that a change
    /// made through this cache is noticed at once by every thread.
    changes: AtomicU64,
}

impl Drop for Cache {
    fn drop(&mut self) {
        kept::cache_dropped();
        let fd = *self.dir_fd.get_mut();
        if fd >= 0 {
            // SAFETY: a non-negative `dir_fd` is a descriptor `open_dir` opened and gave to the
            // cache, which nothing else closes; `&mut self` means no thread borrows it any more.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
}

/// Where an artifact came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Found in the cache.
    Hit,
    /// Compiled and stored (replacing a damaged or foreign entry, if `replaced` says why).
    Compiled { replaced: Option<String> },
    /// Compiled, but it could not be stored; loaded from memory instead.
    Uncached { why: String },
}

/// What the cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    /// Temporary files, of writers still running or stale.
    pub temps: usize,
    /// Bytes on disk (allocated blocks) of entries and temporary files.
    pub bytes: u64,
    pub max_bytes: u64,
}

impl Cache {
    /// A cache in `dir` whose artifacts are sealed with the key in `dir/key` (made on first
    /// use).
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Cache {
        Cache {
            dir: dir.into(),
            max_bytes,
            key: OnceLock::new(),
            dir_fd: AtomicI32::new(-1),
            retired: Mutex::default(),
            token: Arc::new(()),
            keep_open: true,
            ask_every: KEPT_ASK_INTERVAL.as_nanos() as u64,
            changes: AtomicU64::new(0),
        }
    }

    /// Whether threads keep the entries they open open (the default; see the module
    /// documentation). Off, every open asks the directory and reads the entry: what a workload
    /// whose modules never repeat pays (`ephem bench fresh --no-entry-reuse`).
    pub fn keeping_entries_open(mut self, on: bool) -> Cache {
        self.keep_open = on;
        self
    }

    /// How often a thread asks the file of an entry it keeps open whether it is still the
    /// entry: once a second by default; `Duration::ZERO` asks on every open, so that a
    /// removed, replaced or changed entry is noticed at once (see the module documentation).
    pub fn asking_kept_entries_every(mut self, interval: Duration) -> Cache {
        self.ask_every = interval.as_nanos().try_into().unwrap_or(u64::MAX);
        self
    }

    /// A cache in `dir` whose artifacts are sealed with `key` (a key a fleet shares).
    pub fn with_key(dir: impl Into<PathBuf>, max_bytes: u64, key: ArtifactKey) -> Cache {
        let cache = Cache::new(dir, max_bytes);
        let _ = cache.key.set(Ok(key));
        cache
    }

    /// Where the cache keeps the key it makes.
    pub fn key_path(&self) -> PathBuf {
        self.dir.join("key")
    }

    /// The key entries are sealed with.
    pub fn artifact_key(&self) -> Result<&ArtifactKey, Error> {
        self.key
            .get_or_init(|| {
                ArtifactKey::load_or_create(&self.key_path()).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|why| Error::Key(why.clone()))
    }

    /// `$EPHEM_CACHE_DIR`, else `$XDG_CACHE_HOME/ephem`, else `$HOME/.cache/ephem`.
    pub fn default_dir() -> Option<PathBuf> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("EPHEM_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("ephem")))
            .or_else(|| var("HOME").map(|d| d.join(".cache").join("ephem")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of `wasm` compiled by a compiler with `fingerprint`.
    pub fn key(wasm: &[u8], fingerprint: &str) -> String {
        let mut h = blake3::Hasher::new();
        h.update(fingerprint.as_bytes());
        h.update(&[0]);
        h.update(EPHEM_VERSION.as_bytes());
        h.update(&FORMAT_VERSION.to_le_bytes());
        h.update(wasm);
        h.finalize().to_hex().to_string()
    }

    /// What an artifact for the entry `key` records as its source ([`Artifact::source`]): the
    /// key's 32 bytes (a key from [`Cache::key`] is their hex), or the hash of a key of the
    /// embedder's own. An artifact written elsewhere with this source is a valid entry.
    pub fn source(key: &str) -> [u8; 32] {
        match blake3::Hash::from_hex(key) {
            Ok(h) => *h.as_bytes(),
            Err(_) => *blake3::hash(key.as_bytes()).as_bytes(),
        }
    }

    /// Where the entry for `key` lives.
    pub fn path(&self, key: &str) -> PathBuf {
        // One allocation: this is on every invocation's path.
        let mut path = PathBuf::with_capacity(self.dir.as_os_str().len() + key.len() + 16);
        path.push(&self.dir);
        path.push(key);
        path.as_mut_os_string().push(".");
        path.as_mut_os_string().push(EXT);
        path
    }

    /// Opens the entry for `key`. `Ok(None)` when there is none; an entry that cannot be used
    /// is removed and reported as the error, which names it.
    pub fn open(&self, key: &str) -> Result<Option<Artifact>, Error> {
        let sealer = self.artifact_key()?;
        if let Some(artifact) = self.keep_open.then(|| self.open_kept(key)).flatten() {
            return Ok(Some(artifact));
        }
        let opened = self.open_entry(key).and_then(|file| {
            let artifact = Artifact::from_opened(file, self.path(key), Some(sealer))?;
            if source_is(key, &artifact.source()) {
                Ok(artifact)
            } else {
                Err(Error::OtherSource)
            }
        });
        let e = match opened {
            Ok(artifact) => {
                self.touch(&artifact, artifact.accessed());
                if self.keep_open && !artifact.is_snapshot() {
                    let changes = self.changes.load(Ordering::Relaxed);
                    kept::keep(
                        &self.token,
                        key,
                        artifact.clone(),
                        (coarse_nanos(), changes),
                    );
                }
                return Ok(Some(artifact));
            }
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            // Not an entry a reader may follow or open: a symbolic link, a socket.
            Err(Error::Io(e))
                if matches!(Errno::from_io_error(&e), Some(Errno::LOOP | Errno::NXIO)) =>
            {
                Error::Damaged(format!("not a regular file ({e})"))
            }
            Err(e) => e,
        };
        // Only a failure needs the path again (the artifact keeps it). An I/O error says
        // nothing of the entry; anything else is damage, and the entry goes.
        let path = self.path(key);
        if !matches!(e, Error::Io(_)) {
            remove_entry(&path);
            self.changed();
        }
        Err(Error::Entry {
            path,
            source: Box::new(e),
        })
    }

    /// The artifact for `key`: from the cache, or made by `compile` and stored.
    pub fn get_or_compile<E>(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<CompiledModule, E>,
    ) -> Result<(Artifact, Outcome), E>
    where
        E: From<Error>,
    {
        self.get_or_compile_with(key, compile, write_atomic)
    }

    /// As [`Cache::get_or_compile`], writing files with `write` (tests inject failures here).
    fn get_or_compile_with<E>(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<CompiledModule, E>,
        write: impl Fn(&Path, &[u8]) -> std::io::Result<()>,
    ) -> Result<(Artifact, Outcome), E>
    where
        E: From<Error>,
    {
        let replaced = match self.open(key) {
            Ok(Some(artifact)) => return Ok((artifact, Outcome::Hit)),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        let compiled = compile()?;
        let sealer = match self.artifact_key() {
            Ok(k) => k,
            Err(e) => {
                let why = format!("cannot use the compile cache {}: {e}", self.dir.display());
                let artifact = Artifact::from_compiled(&compiled)?;
                return Ok((artifact, Outcome::Uncached { why }));
            }
        };
        let bytes = crate::to_bytes(&compiled, &Cache::source(key), sealer);
        let path = self.path(key);
        let stored = self.store(&path, &bytes, write).and_then(|()| {
            let _ = self.evict(&path, self.max_bytes);
            Artifact::open_with(path.clone(), Some(sealer), true)
                .map_err(|e| std::io::Error::other(e.to_string()))
        });
        match stored {
            Ok(artifact) => Ok((artifact, Outcome::Compiled { replaced })),
            Err(e) => {
                let why = format!(
                    "cannot use the compile cache {}: {}: {e}",
                    self.dir.display(),
                    path.display()
                );
                Ok((Artifact::in_memory(&bytes)?, Outcome::Uncached { why }))
            }
        }
    }

    /// Stores `bytes`, an artifact file made elsewhere (another node of a fleet), as the entry
    /// for `key`, and opens it. It is checked like any entry: one that is not sealed with this
    /// cache's key, or was compiled from another module, is removed and is the error.
    pub fn insert(&self, key: &str, bytes: &[u8]) -> Result<Artifact, Error> {
        self.artifact_key()?;
        let path = self.path(key);
        self.store(&path, bytes, write_atomic)?;
        let _ = self.evict(&path, self.max_bytes);
        // `None`: another process evicted it at once; as good as not stored.
        self.open(key)?
            .ok_or_else(|| Error::Io(std::io::ErrorKind::NotFound.into()))
    }

    /// Counts a change this cache made to its directory (see [`Cache::changes`]): after it, so
    /// that a thread that asks when it sees the count move sees the change.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// What the directory holds now.
    pub fn stats(&self) -> std::io::Result<CacheStats> {
        let files = self.files()?;
        Ok(CacheStats {
            entries: files.iter().filter(|f| f.kind == Kind::Entry).count(),
            temps: files.iter().filter(|f| f.kind != Kind::Entry).count(),
            bytes: files.iter().map(|f| f.bytes).sum(),
            max_bytes: self.max_bytes,
        })
    }

    /// Removes every entry and stale temporary file; returns how many entries. Files another
    /// process removed meanwhile are not an error.
    pub fn clear(&self) -> std::io::Result<usize> {
        let cleared = self.remove_all();
        self.changed();
        cleared
    }
}

/// Modules and entries for the tests of the cache's files.
#[cfg(test)]
mod testing {
    use super::{Cache, CompiledModule, Error};

    /// Module `n`: it exports `f`, which returns `n`.
    pub(super) fn compiled(n: i32) -> CompiledModule {
        let wat = format!(r#"(module (func (export "f") (result i32) i32.const {n}))"#);
        ephem_compiler::Compiler::new()
            .unwrap()
            .compile(wat.as_bytes())
            .unwrap()
    }

    /// Compiles module `n` into `cache` under key `n` (if it is not there), and returns the key.
    pub(super) fn stored(cache: &Cache, n: i32) -> String {
        let key = format!("{n:064x}");
        cache
            .get_or_compile(&key, || Ok::<_, Error>(compiled(n)))
            .unwrap();
        key
    }
}

#[cfg(test)]
mod tests {
    use super::testing::compiled;
    use super::*;

    /// An artifact made by another cache with the same key is taken in and opened; one sealed
    /// with another key, or stored under another module's key, is refused and not kept.
    #[test]
    fn an_artifact_from_another_node_is_checked_as_it_is_taken_in() {
        let key = ArtifactKey::generate().unwrap();
        let (here, there, other) = (
            ephem_test_support::temp_dir(),
            ephem_test_support::temp_dir(),
            ephem_test_support::temp_dir(),
        );
        let made = Cache::with_key(there.path(), u64::MAX, key.clone());
        let (k1, k2) = (format!("{:064x}", 1), format!("{:064x}", 2));
        made.get_or_compile(&k1, || Ok::<_, Error>(compiled(1)))
            .unwrap();
        let bytes = std::fs::read(made.path(&k1)).unwrap();

        let cache = Cache::with_key(here.path(), u64::MAX, key);
        let artifact = cache.insert(&k1, &bytes).unwrap();
        assert_eq!(artifact.source(), Cache::source(&k1));
        assert!(cache.open(&k1).unwrap().is_some());

        let refused = cache.insert(&k2, &bytes).unwrap_err();
        assert!(refused.to_string().contains("another module"), "{refused}");
        assert!(!cache.path(&k2).exists());

        let foreign = Cache::with_key(other.path(), u64::MAX, ArtifactKey::generate().unwrap());
        let refused = foreign.insert(&k1, &bytes).unwrap_err();
        assert!(refused.to_string().contains("sealed"), "{refused}");
        assert!(!foreign.path(&k1).exists());
    }
}
