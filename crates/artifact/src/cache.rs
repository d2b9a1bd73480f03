//! The compile cache: artifacts in one directory, named by the hash of what produced them.
//!
//! - **Key**: BLAKE3 of the compiler's fingerprint, ephem's version, the format version and the
//!   wasm bytes. Embedders that already identify modules by a hash compute the key once
//!   ([`Cache::key`]) and open by key on every invocation, so the hot path never hashes wasm.
//! - **Atomic writes**: an artifact is written to a temporary file in the same directory,
//!   flushed to disk and renamed into place, so a reader sees a whole file or none, whatever
//!   other processes or crashes do. Two processes compiling the same module both rename a
//!   complete, identical file; the last one wins.
//! - **Damage**: an entry that cannot be used (damaged, other version, other CPU, not an
//!   artifact) is removed and recompiled.
//! - **Size bound**: after each write, least recently used entries are removed until the
//!   directory is within the bound. Use is recorded in the access time, which a hit sets when it
//!   is more than [`TOUCH_INTERVAL_SECS`] old (so hits rarely make an extra system call).
//! - **Failure to write** (unwritable directory, full disk) never fails a load: the artifact is
//!   kept in memory and [`Outcome::Uncached`] says why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ephem_module::CompiledModule;

use crate::format::{EPHEM_VERSION, FORMAT_VERSION};
use crate::{Artifact, Error};

/// File name extension of cache entries.
const EXT: &str = "ephem";
/// A hit refreshes an entry's access time when it is older than this.
pub const TOUCH_INTERVAL_SECS: i64 = 3600;
/// Default size bound: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// A compile cache in one directory (created on first write).
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
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
    pub bytes: u64,
    pub max_bytes: u64,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Cache {
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Cache {
        Cache {
            dir: dir.into(),
            max_bytes,
        }
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
    /// is removed and reported as the error.
    pub fn open(&self, key: &str) -> Result<Option<Artifact>, Error> {
        let path = self.path(key);
        match Artifact::open(&path) {
            Ok(artifact) => {
                self.touch(&artifact);
                Ok(Some(artifact))
            }
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(Error::Io(e)) => Err(Error::Io(e)),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
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
        let replaced = match self.open(key) {
            Ok(Some(artifact)) => return Ok((artifact, Outcome::Hit)),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        let bytes = crate::to_bytes(&compile()?);
        let path = self.path(key);
        let stored = write_atomic(&path, &bytes).and_then(|()| {
            let _ = self.evict(&path);
            Artifact::open(&path).map_err(|e| std::io::Error::other(e.to_string()))
        });
        match stored {
            Ok(artifact) => Ok((artifact, Outcome::Compiled { replaced })),
            Err(e) => {
                let why = format!("cannot use the compile cache {}: {e}", self.dir.display());
                Ok((Artifact::in_memory(&bytes)?, Outcome::Uncached { why }))
            }
        }
    }

    /// Sets the access time of a hit that was last recorded long ago (see the module docs).
    fn touch(&self, artifact: &Artifact) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if now - artifact.accessed > TOUCH_INTERVAL_SECS {
            let times = rustix::fs::Timestamps {
                last_access: rustix::fs::Timespec {
                    tv_sec: now,
                    tv_nsec: 0,
                },
                last_modification: rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rustix::fs::UTIME_OMIT,
                },
            };
            // Best effort: a read-only cache still works, it just evicts less precisely.
            let _ = rustix::fs::futimens(artifact.file(), &times);
        }
    }

    /// Every entry: path, size, last access time.
    fn entries(&self) -> std::io::Result<Vec<(PathBuf, u64, i64)>> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in dir {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == EXT)
                && let Ok(st) = rustix::fs::stat(&path)
            {
                out.push((path, st.st_size as u64, st.st_atime));
            }
        }
        Ok(out)
    }

    /// Removes least recently used entries (never `keep`) until the cache fits its bound.
    fn evict(&self, keep: &Path) -> std::io::Result<()> {
        let mut entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        for (path, size, _) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> std::io::Result<CacheStats> {
        let entries = self.entries()?;
        Ok(CacheStats {
            entries: entries.len(),
            bytes: entries.iter().map(|e| e.1).sum(),
            max_bytes: self.max_bytes,
        })
    }

    /// Removes every entry; returns how many.
    pub fn clear(&self) -> std::io::Result<usize> {
        let entries = self.entries()?;
        for (path, _, _) in &entries {
            std::fs::remove_file(path)?;
        }
        Ok(entries.len())
    }
}

/// Writes `bytes` to `path` so that `path` never holds a partial file: a temporary file in the
/// same directory, flushed to disk, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}
