//! The compile cache: artifacts in one directory, named by the hash of what produced them.
//!
//! - **Key**: BLAKE3 of the compiler's fingerprint, ephem's version, the format version and the
//!   wasm bytes. Embedders that already identify modules by a hash compute the key once
//!   ([`Cache::key`]) and open by key on every invocation, so the hot path never hashes wasm.
//!   Every artifact records the key it was compiled for ([`Artifact::source`]); an entry holding
//!   another one is damage.
//! - **Sealed**: entries are sealed with the deployment's [`ArtifactKey`]: the one given
//!   ([`Cache::with_key`]), else the `key` file in the directory, made on first use (mode 0600).
//!   An entry that does not verify is damage.
//! - **Atomic, read-only writes**: an artifact is written to a temporary file in the same
//!   directory (mode 0444), flushed to disk and renamed into place, so a reader sees a whole file
//!   or none, whatever other processes or crashes do. Entries are never written in place, which
//!   is what lets a process verify a file once and remember its identity (see [`Artifact`]). Two
//!   processes compiling the same module both rename a complete, identical file.
//! - **Damage**: an entry that cannot be used (damaged, unsealed, another module's, other
//!   version, other CPU, not an artifact, not a regular file) is removed and recompiled. Entries
//!   are opened without blocking and without following a symbolic link, so a FIFO or a link at
//!   a key's path is replaced, never waited on or followed.
//! - **Size bound**: after each write, least recently used entries are removed until the
//!   directory is within the bound, counting the blocks files take on disk. Use is recorded in
//!   the access time, which a hit sets when it is more than [`TOUCH_INTERVAL_SECS`] old (so
//!   hits rarely make an extra system call). A full disk (`ENOSPC`) evicts room for the entry
//!   and the write is tried once more.
//! - **Temporary files** are named after their writer's process id; one whose writer is gone
//!   (or older than [`STALE_TEMP_SECS`]) is stale, counted by [`Cache::stats`] and removed by the
//!   next write, eviction and [`Cache::clear`]. This assumes the processes sharing a cache
//!   directory share a pid namespace.
//! - **Failure to write** (unwritable directory, full disk) never fails a load: the artifact is
//!   kept in memory and [`Outcome::Uncached`] says why.
//! - **Entries kept open, per thread**: each thread keeps the artifacts of the entries it
//!   opened last open (file, header and metadata). All threads together keep at most a quarter
//!   of the descriptors the process may have open (`RLIMIT_NOFILE`'s soft limit; at least 16,
//!   at most 1 024) and [`KEPT_BYTES`], so that a server with many threads runs out of neither;
//!   each thread an equal share of that for as many threads as there are cores (at least 16).
//!   So many because opening is the largest part of an invocation once its text and image are
//!   kept: with 16 per thread, 300 distinct modules taking turns spent 3.7–4.1 µs of a 5.4 µs
//!   (png) to 7.7 µs (zstd) invocation opening their entries (BENCHMARKS.md, fifteenth pass).
//!   Opening one of them again makes no system call. At most once a [`KEPT_ASK_INTERVAL`] (by
//!   the coarse monotonic clock, which the vDSO reads) it asks the file, not the directory,
//!   whether it is still the entry (`fstat` on the kept descriptor, instead of `openat`,
//!   `fstat`, `pread` and, when the artifact is dropped, `close`): it is while it still has a
//!   name (entries are never moved, so a removed or replaced entry's file has none) and the
//!   same [`Identity`] (what verification is remembered by). So a removed, replaced or changed
//!   entry is noticed within that interval (at once with [`Cache::asking_kept_entries_every`]
//!   `(Duration::ZERO)`), unless someone gave its file another name (a hard link), and then
//!   the kept artifact is still the key's, verified. Until then the kept artifact is still
//!   the key's: a replaced entry holds the same module compiled by the same compiler, and a
//!   removed one's file lives on until let go. Only a change in place, which needs write
//!   access to a read-only file of this user's (who could change the process as well), is
//!   read unverified meanwhile. Asking on every open cost an `fstat`, 0.3–0.4 µs of a 1.5 µs
//!   invocation (BENCHMARKS.md, eighteenth pass), on the path that makes no system call
//!   else; a runtime's in-memory module cache usually never asks. A removed entry's disk
//!   space is freed when its thread lets the file go. Per thread, not shared: threads that
//!   shared one descriptor and a lock per entry scaled 1.25x on two cores instead of 1.9x
//!   (`BENCHMARKS.md`, tenth pass). Asking the directory instead (`fstatat` of the name),
//!   the open took 1.0 µs of a 1.9 µs small-mem invocation (eleventh pass).

use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ephem_module::CompiledModule;

use crate::format::{EPHEM_VERSION, FORMAT_VERSION};
use rustix::io::Errno;

use crate::{Artifact, ArtifactKey, Error, Identity};

/// File name extension of cache entries.
const EXT: &str = "ephem";
/// File name extension of temporary files.
const TEMP_EXT: &str = "tmp";
/// A temporary file older than this is stale even if a process with its writer's id runs.
pub const STALE_TEMP_SECS: u64 = 600;
/// A hit refreshes an entry's access time when it is older than this.
pub const TOUCH_INTERVAL_SECS: i64 = 3600;
/// Default size bound: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// How many bytes the artifacts all threads keep open may hold in memory (their headers,
/// metadata and segment data: 8 KiB for the corpus's zstd, 16 KiB for png and quickjs).
pub const KEPT_BYTES: usize = 64 << 20;
/// How often a thread asks a kept entry's file whether it is still the entry (see the module
/// documentation), by default.
pub const KEPT_ASK_INTERVAL: Duration = Duration::from_secs(1);

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
            // SAFETY: the cache's own descriptor, no longer shared (`&mut self`).
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

/// One file in the cache directory.
struct File {
    path: PathBuf,
    /// Allocated on disk.
    bytes: u64,
    accessed: i64,
    kind: Kind,
}

#[derive(PartialEq)]
enum Kind {
    Entry,
    Temp { stale: bool },
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

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

    /// The artifact of entry `key` this thread keeps open, unless its file, when asked, is no
    /// longer the entry's or changed (see the module documentation); then it is let go.
    fn open_kept(&self, key: &str) -> Option<Artifact> {
        let now = match self.ask_every {
            0 => 0,
            _ => coarse_nanos(),
        };
        self.open_kept_at(key, now)
    }

    /// [`Cache::open_kept`] at `now` (nanoseconds of the coarse monotonic clock).
    fn open_kept_at(&self, key: &str, now: u64) -> Option<Artifact> {
        let changes = self.changes.load(Ordering::Relaxed);
        let (artifact, ask) = kept::get(&self.token, key, (now, changes), self.ask_every)?;
        if !ask {
            return Some(artifact);
        }
        match rustix::fs::fstat(artifact.file()) {
            Ok(stat) if stat.st_nlink > 0 && Identity::of(&stat) == artifact.identity() => {
                self.touch(&artifact, stat.st_atime);
                Some(artifact)
            }
            _ => {
                kept::forget(&self.token, key);
                None
            }
        }
    }

    /// Opens the file of entry `key` (never blocking on a FIFO, never through a symbolic
    /// link): relative to the directory once it is open, else by path. An entry the directory
    /// lacks but the path finds means the directory was replaced: the new one is opened for
    /// the next entries.
    fn open_entry(&self, key: &str) -> Result<std::fs::File, Error> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = self.dir_fd.load(Ordering::Acquire);
        if dir >= 0 {
            let (mut stack, mut heap) = ([0; 128], String::new());
            let name = entry_name(key, &mut stack, &mut heap);
            // SAFETY: `dir_fd` holds a descriptor this cache owns and closes only when
            // dropped; replaced ones are kept open in `retired` until then.
            let dir = unsafe { BorrowedFd::borrow_raw(dir) };
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => return Ok(fd.into()),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(Error::Io(e.into())),
            }
        }
        let fd = rustix::fs::open(self.path(key), flags, Mode::empty())
            .map_err(|e| Error::Io(e.into()))?;
        self.open_dir();
        Ok(fd.into())
    }

    /// Opens the directory for [`Cache::open_entry`], unless the descriptor it has is of the
    /// same directory.
    fn open_dir(&self) {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let Ok(fresh) = rustix::fs::open(&self.dir, flags, Mode::empty()) else {
            return;
        };
        let old = self.dir_fd.load(Ordering::Acquire);
        if old >= 0 {
            // SAFETY: as in `open_entry`.
            let old_fd = unsafe { BorrowedFd::borrow_raw(old) };
            let same = match (rustix::fs::fstat(old_fd), rustix::fs::fstat(&fresh)) {
                (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
                _ => false,
            };
            if same {
                return;
            }
        }
        let raw = fresh.as_raw_fd();
        match self
            .dir_fd
            .compare_exchange(old, raw, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                std::mem::forget(fresh);
                if old >= 0 {
                    // SAFETY: the descriptor `dir_fd` owned until the exchange above.
                    let old = unsafe { OwnedFd::from_raw_fd(old) };
                    self.retired
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(old);
                }
            }
            // Another thread replaced it meanwhile: theirs stays, this one is closed.
            Err(_) => drop(fresh),
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

    /// Writes an entry; on a full disk, evicts at least its size and tries once more.
    fn store(
        &self,
        path: &Path,
        bytes: &[u8],
        write: impl Fn(&Path, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let written = match write(path, bytes) {
            Err(e) if Errno::from_io_error(&e) == Some(Errno::NOSPC) => {
                let total: u64 = self.files()?.iter().map(|f| f.bytes).sum();
                self.evict(path, total.saturating_sub(bytes.len() as u64))?;
                write(path, bytes)
            }
            other => other,
        };
        self.changed();
        written
    }

    /// Counts a change this cache made to its directory (see [`Cache::changes`]): after it, so
    /// that a thread that asks when it sees the count move sees the change.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the access time of a hit that was last recorded long ago (see the module docs).
    fn touch(&self, artifact: &Artifact, accessed: i64) {
        let now = now_secs();
        if now - accessed > TOUCH_INTERVAL_SECS {
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

    /// Every entry and temporary file.
    fn files(&self) -> std::io::Result<Vec<File>> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => {
                let why = format!("reading {}: {e}", self.dir.display());
                return Err(std::io::Error::new(e.kind(), why));
            }
        };
        let now = now_secs();
        for entry in dir {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let path = entry.path();
            let (entry, temp) = match path.extension() {
                Some(e) => (e == EXT, e == TEMP_EXT),
                None => continue,
            };
            if !entry && !temp {
                continue;
            }
            // Gone meanwhile (another process evicted or renamed it): not ours to count.
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let kind = if entry {
                Kind::Entry
            } else {
                Kind::Temp {
                    stale: now - meta.mtime() > STALE_TEMP_SECS as i64
                        || !temp_writer(&path).is_some_and(process_runs),
                }
            };
            out.push(File {
                path,
                bytes: meta.blocks() * 512,
                accessed: meta.atime(),
                kind,
            });
        }
        Ok(out)
    }

    /// Removes stale temporary files, then least recently used entries (never `keep`) until
    /// the cache takes at most `target` bytes.
    fn evict(&self, keep: &Path, target: u64) -> std::io::Result<()> {
        let mut files = self.files()?;
        let mut total: u64 = files.iter().map(|f| f.bytes).sum();
        for f in files
            .iter()
            .filter(|f| f.kind == Kind::Temp { stale: true })
        {
            if remove(&f.path).is_ok() {
                total -= f.bytes;
            }
        }
        files.retain(|f| f.kind == Kind::Entry);
        files.sort_by_key(|f| f.accessed);
        let mut removed = false;
        for f in files {
            if total <= target {
                break;
            }
            if f.path != keep && remove(&f.path).is_ok() {
                total -= f.bytes;
                removed = true;
            }
        }
        if removed {
            self.changed();
        }
        Ok(())
    }

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

    /// [`Cache::clear`]'s removals.
    fn remove_all(&self) -> std::io::Result<usize> {
        let mut entries = 0;
        for f in self.files()? {
            if f.kind == (Kind::Temp { stale: false }) {
                continue;
            }
            match remove(&f.path) {
                Ok(removed) => entries += usize::from(removed && f.kind == Kind::Entry),
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("removing {}: {e}", f.path.display()),
                    ));
                }
            }
        }
        Ok(entries)
    }
}

/// The file name of entry `key`: written into `stack` when it fits (the hot path allocates
/// nothing), else into `heap`.
fn entry_name<'a>(key: &'a str, stack: &'a mut [u8; 128], heap: &'a mut String) -> &'a str {
    let len = key.len() + 1 + EXT.len();
    if len <= stack.len() {
        stack[..key.len()].copy_from_slice(key.as_bytes());
        stack[key.len()] = b'.';
        stack[key.len() + 1..len].copy_from_slice(EXT.as_bytes());
        std::str::from_utf8(&stack[..len]).expect("made of a str and ASCII")
    } else {
        *heap = format!("{key}.{EXT}");
        heap
    }
}

/// Whether `source` is what [`Cache::source`] makes of `key`, without decoding the key into a
/// buffer: this is on every invocation's path.
fn source_is(key: &str, source: &[u8; 32]) -> bool {
    let k = key.as_bytes();
    if k.len() != 64 || !k.iter().all(u8::is_ascii_hexdigit) {
        return Cache::source(key) == *source;
    }
    let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    k.chunks_exact(2)
        .zip(source)
        .all(|(pair, &b)| nibble(pair[0]) << 4 | nibble(pair[1]) == b)
}

/// Removes a file; one that is already gone (another process removed it) is not an error.
/// Whether this call removed it.
fn remove(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The coarse monotonic clock in nanoseconds: read from the vDSO's data, without a system
/// call or a read of the time stamp counter.
fn coarse_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// Seconds since the epoch, now.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Removes whatever is at an entry's path (a damaged file, a FIFO, a link, a directory), best
/// effort: the next write replaces it anyway, or reports why it cannot.
fn remove_entry(path: &Path) {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let _ = if is_dir {
        std::fs::remove_dir_all(path)
    } else {
        remove(path).map(drop)
    };
}

/// A temporary file for `path` in its directory: `.NAME.PID.N.tmp`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    dir.join(format!(
        ".{name}.{}.{}.{TEMP_EXT}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The process id a temporary file's name records.
fn temp_writer(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let mut parts = name.rsplit('.');
    let (_tmp, _n, pid) = (parts.next()?, parts.next()?, parts.next()?);
    pid.parse().ok()
}

/// Whether a process with this id exists (in this pid namespace).
fn process_runs(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Writes `bytes` to `path` so that `path` never holds a partial file and is never written in
/// place: a read-only temporary file (mode 0444) in the same directory, flushed to disk, then
/// renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = write_temp(path, bytes, 0o444)?;
    let renamed = std::fs::rename(&temp, path);
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    renamed
}

/// Writes `bytes` to a new temporary file for `path` (see [`temp_path`]) with exactly `mode`,
/// flushed to disk; returns its path. Nothing is left behind on failure.
pub(crate) fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temp = temp_path(path);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        // The umask may have taken bits away; `mode` is what is wanted, whatever it is.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// The entries each thread keeps open (see the module documentation): per thread, so that a
/// hit touches nothing another thread touches. Indexed by key, so that a thread keeping
/// hundreds finds one without a scan (opening one of 300 kept entries took 0.9 µs with a scan,
/// 0.6–0.7 µs indexed).
mod kept {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, LazyLock, Weak};

    use super::KEPT_BYTES;
    use crate::Artifact;

    /// Entries kept by all threads, and the bytes they hold.
    static IN_ALL: AtomicUsize = AtomicUsize::new(0);
    static BYTES: AtomicUsize = AtomicUsize::new(0);
    /// Caches dropped so far: a thread lets their entries go when this moves.
    static DROPPED: AtomicU64 = AtomicU64::new(0);

    /// How many entries all threads together may keep: a quarter of the descriptors the process
    /// may have open (`RLIMIT_NOFILE`'s soft limit), at least 16 and at most 1 024.
    pub(super) fn in_all_bound() -> usize {
        static BOUND: LazyLock<usize> = LazyLock::new(|| {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
            limit.map_or(1024, |n| (n / 4).clamp(16, 1024) as usize)
        });
        *BOUND
    }

    /// How many entries each thread may keep: an equal share for as many threads as the
    /// machine runs at once (a server's workers, one per core), at least 16.
    pub(super) fn per_thread_bound() -> usize {
        static BOUND: LazyLock<usize> = LazyLock::new(|| {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            // Never all of it to one thread: other threads of a process with one core still open.
            let threads = threads.max(2);
            (in_all_bound() / threads).max(16)
        });
        *BOUND
    }

    /// A cache was dropped: every thread lets its entries go at its next keep.
    pub(super) fn cache_dropped() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }

    thread_local! {
        static KEPT: RefCell<Thread> = RefCell::new(Thread::default());
    }

    /// A thread's entries, in no order, each with when it was last used, and the index from
    /// (cache, hash of key) to its place. A hit writes only its entry's use; the least recently
    /// used is found by a scan, only when a thread that keeps as many as it may opens another
    /// (a miss: an `openat` and a `pread` besides).
    #[derive(Default)]
    struct Thread {
        entries: Vec<Kept>,
        index: HashMap<(usize, u64), usize, foldhash::fast::RandomState>,
        uses: u64,
        dropped_seen: u64,
    }

    struct Kept {
        /// The cache's token: gone when the cache is dropped.
        cache: Weak<()>,
        key: Box<str>,
        artifact: Artifact,
        /// Its place's key in the index, and when it was last used.
        slot: (usize, u64),
        used: u64,
        /// When its file was last asked whether it is still the entry (the coarse clock, ns),
        /// and how many changes its cache had made by then.
        asked: (u64, u64),
    }

    impl Kept {
        fn is(&self, cache: &Arc<()>, key: &str) -> bool {
            std::ptr::eq(self.cache.as_ptr(), Arc::as_ptr(cache)) && &*self.key == key
        }
    }

    impl Drop for Kept {
        fn drop(&mut self) {
            IN_ALL.fetch_sub(1, Ordering::Relaxed);
            BYTES.fetch_sub(self.artifact.memory_bytes(), Ordering::Relaxed);
        }
    }

    impl Thread {
        /// The index's key: a kept entry holds its cache's token (a `Weak`), so no other cache
        /// gets its address meanwhile; equal hashes are told apart by [`Kept::is`].
        fn slot(&self, cache: &Arc<()>, key: &str) -> (usize, u64) {
            (
                Arc::as_ptr(cache) as usize,
                self.index.hasher().hash_one(key),
            )
        }

        /// Where entry `key` of `cache`, whose index key is `slot`, is, if kept.
        fn find(&self, slot: (usize, u64), cache: &Arc<()>, key: &str) -> Option<usize> {
            let at = *self.index.get(&slot)?;
            self.entries[at].is(cache, key).then_some(at)
        }

        fn remove(&mut self, at: usize) -> Kept {
            let kept = self.entries.swap_remove(at);
            if self.index.get(&kept.slot) == Some(&at) {
                self.index.remove(&kept.slot);
            }
            if let Some(moved) = self.entries.get(at) {
                let last = self.entries.len();
                if self.index.get(&moved.slot) == Some(&last) {
                    self.index.insert(moved.slot, at);
                }
            }
            kept
        }

        fn insert(&mut self, mut kept: Kept) {
            self.uses += 1;
            kept.used = self.uses;
            self.index.insert(kept.slot, self.entries.len());
            self.entries.push(kept);
        }

        fn oldest(&self) -> Option<usize> {
            (self.entries.iter().enumerate())
                .min_by_key(|(_, k)| k.used)
                .map(|(at, _)| at)
        }
    }

    /// The artifact this thread keeps for entry `key` of `cache`, now the most recently used,
    /// and whether its file is to be asked whether it is still the entry: when it was last
    /// asked `every` or more before `now.0`, or before the cache's change `now.1` (then `now`
    /// counts as asked).
    pub(super) fn get(
        cache: &Arc<()>,
        key: &str,
        now: (u64, u64),
        every: u64,
    ) -> Option<(Artifact, bool)> {
        KEPT.try_with(|kept| {
            let kept = &mut *kept.borrow_mut();
            let at = kept.find(kept.slot(cache, key), cache, key)?;
            kept.uses += 1;
            let entry = &mut kept.entries[at];
            entry.used = kept.uses;
            let ask = now.0.wrapping_sub(entry.asked.0) >= every || now.1 != entry.asked.1;
            if ask {
                entry.asked = now;
            }
            Some((entry.artifact.clone(), ask))
        })
        .ok()
        .flatten()
    }

    /// Keeps `artifact` for entry `key` of `cache`, in place of this thread's least recently
    /// used one when this thread, or all of them, keep as many as they may. Entries of caches
    /// since dropped are let go here.
    pub(super) fn keep(cache: &Arc<()>, key: &str, artifact: Artifact, now: (u64, u64)) {
        let bytes = artifact.memory_bytes();
        if bytes > KEPT_BYTES {
            return;
        }
        let _ = KEPT.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            let dropped = DROPPED.load(Ordering::Relaxed);
            if kept.dropped_seen != dropped {
                kept.dropped_seen = dropped;
                let mut at = kept.entries.len();
                while at > 0 {
                    at -= 1;
                    if kept.entries[at].cache.strong_count() == 0 {
                        kept.remove(at);
                    }
                }
            }
            let slot = kept.slot(cache, key);
            if let Some(at) = kept.find(slot, cache, key) {
                kept.remove(at);
            }
            if kept.entries.len() >= per_thread_bound() {
                let oldest = kept.oldest().expect("not empty");
                kept.remove(oldest);
            }
            // All threads keep as many (or as much) as they may: this one lets its oldest go
            // instead, until there is room or it keeps none.
            while !reserve(bytes) {
                let Some(oldest) = kept.oldest() else {
                    return;
                };
                kept.remove(oldest);
            }
            kept.insert(Kept {
                cache: Arc::downgrade(cache),
                key: key.into(),
                artifact,
                slot,
                used: 0,
                asked: now,
            });
        });
    }

    /// Counts one more entry of `bytes` in all, if within the bounds.
    pub(super) fn reserve(bytes: usize) -> bool {
        let one_more = |n: usize| (n < in_all_bound()).then_some(n + 1);
        if (IN_ALL.fetch_update(Ordering::Relaxed, Ordering::Relaxed, one_more)).is_err() {
            return false;
        }
        let more = |b: usize| (b + bytes <= KEPT_BYTES).then_some(b + bytes);
        if (BYTES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, more)).is_err() {
            IN_ALL.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Lets entry `key` of `cache` go, if this thread keeps it.
    pub(super) fn forget(cache: &Arc<()>, key: &str) {
        let _ = KEPT.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            if let Some(at) = kept.find(kept.slot(cache, key), cache, key) {
                kept.remove(at);
            }
        });
    }

    /// How many entries this thread keeps, and all threads together.
    #[cfg(test)]
    pub(super) fn counts() -> (usize, usize) {
        let here = KEPT.with(|kept| kept.borrow().entries.len());
        (here, IN_ALL.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(n: i32) -> CompiledModule {
        let wat = format!(r#"(module (func (export "f") (result i32) i32.const {n}))"#);
        ephem_compiler::Compiler::new()
            .unwrap()
            .compile(wat.as_bytes())
            .unwrap()
    }

    /// Compiles module `n` into `cache` under key `n` (if it is not there), and returns the key.
    fn stored(cache: &Cache, n: i32) -> String {
        let key = format!("{n:064x}");
        cache
            .get_or_compile(&key, || Ok::<_, Error>(compiled(n)))
            .unwrap();
        key
    }

    #[test]
    fn a_source_matches_exactly_its_own_key() {
        let hex = Cache::key(b"(module)", "fp");
        let keys = [
            hex.clone(),
            hex.to_uppercase(),
            "x".repeat(64),
            "an embedder's own key".to_owned(),
        ];
        for key in &keys {
            assert!(source_is(key, &Cache::source(key)), "{key}");
            for other in keys.iter().filter(|o| !o.eq_ignore_ascii_case(key)) {
                assert!(!source_is(key, &Cache::source(other)), "{key} / {other}");
            }
        }
        let mut off_by_one = Cache::source(&hex);
        off_by_one[31] ^= 1;
        assert!(!source_is(&hex, &off_by_one));
    }

    /// A thread keeps an entry's artifact open and takes it again while the entry's name still
    /// holds its file, unchanged: asking on every open, the same bytes renamed over it, a
    /// change in place and a removal are each noticed on the next open.
    #[test]
    fn an_entry_is_kept_open_while_its_file_is_the_entrys() {
        let tmp = ephem_test_support::temp_dir();
        let cache = Cache::new(tmp.path(), u64::MAX).asking_kept_entries_every(Duration::ZERO);
        let key = stored(&cache, 1);
        let open = || cache.open(&key).unwrap().expect("an entry");
        let first = open();
        assert!(Arc::ptr_eq(&first.shared_file(), &open().shared_file()));

        // The same bytes under a new inode (another process compiled it again).
        let path = cache.path(&key);
        let bytes = std::fs::read(&path).unwrap();
        write_atomic(&path, &bytes).unwrap();
        let renamed = open();
        assert!(!Arc::ptr_eq(&first.shared_file(), &renamed.shared_file()));
        assert_ne!(renamed.identity(), first.identity());
        assert!(Arc::ptr_eq(&renamed.shared_file(), &open().shared_file()));

        // Changed in place (after making it writable): the seal no longer holds.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut changed = bytes.clone();
        let last = changed.len() - 1;
        changed[last] ^= 0xff;
        std::fs::write(&path, &changed).unwrap();
        assert!(matches!(cache.open(&key), Err(Error::Entry { .. })));
        assert!(!path.exists(), "a damaged entry is removed");

        stored(&cache, 1);
        let again = open();
        std::fs::remove_file(&path).unwrap();
        assert!(cache.open(&key).unwrap().is_none(), "removed");
        drop(again);
    }

    /// By default a kept entry's file is asked whether it is still the entry once a
    /// [`KEPT_ASK_INTERVAL`]: within it, the kept artifact is taken without asking, although
    /// the entry was replaced or removed by someone else; at its end, that is noticed. A
    /// change made through the cache is noticed at once.
    #[test]
    fn a_kept_entry_is_asked_once_an_interval() {
        let tmp = ephem_test_support::temp_dir();
        let cache = Cache::new(tmp.path(), u64::MAX);
        let key = stored(&cache, 1);
        let path = cache.path(&key);
        let interval = KEPT_ASK_INTERVAL.as_nanos() as u64;
        // The entry is kept (and counts as asked) between `before` and `after`.
        let before = coarse_nanos();
        let first = cache.open(&key).unwrap().expect("an entry");
        let after = coarse_nanos();
        let same = |a: &Artifact| Arc::ptr_eq(&first.shared_file(), &a.shared_file());

        let bytes = std::fs::read(&path).unwrap();
        write_atomic(&path, &bytes).unwrap();
        let within = before + interval - 1;
        assert!(cache.open_kept_at(&key, within).is_some_and(|a| same(&a)));
        std::fs::remove_file(&path).unwrap();
        assert!(cache.open_kept_at(&key, within).is_some_and(|a| same(&a)));
        assert!(cache.open_kept_at(&key, after + interval).is_none());
        assert!(cache.open(&key).unwrap().is_none(), "removed");

        // Asked and still the entry: kept, and not asked again within the next interval.
        let key = stored(&cache, 2);
        let path = cache.path(&key);
        let t = coarse_nanos();
        let kept = cache.open(&key).unwrap().expect("an entry");
        let later = t + 2 * interval;
        let again = cache.open_kept_at(&key, later).expect("still the entry");
        assert!(Arc::ptr_eq(&kept.shared_file(), &again.shared_file()));
        std::fs::remove_file(&path).unwrap();
        assert!(cache.open_kept_at(&key, later + interval - 1).is_some());
        assert!(cache.open_kept_at(&key, later + interval).is_none());

        // A change made through the cache is noticed at once.
        let key = stored(&cache, 3);
        cache.open(&key).unwrap().expect("an entry");
        let t = coarse_nanos();
        assert!(cache.open_kept_at(&key, t).is_some());
        assert_eq!(cache.clear().unwrap(), 1);
        assert!(cache.open_kept_at(&key, t).is_none(), "cleared");
    }

    /// Each thread keeps its own (a descriptor of its own), at most its bound, and
    /// lets a dropped cache's go.
    #[test]
    fn each_thread_keeps_its_own_entries_up_to_its_bound() {
        let tmp = ephem_test_support::temp_dir();
        let cache = Cache::new(tmp.path(), u64::MAX);
        let keys: Vec<String> = (0..kept::per_thread_bound() as i32 + 3)
            .map(|n| stored(&cache, n))
            .collect();
        let file = |key: &str| cache.open(key).unwrap().unwrap().shared_file();
        let here = file(&keys[0]);
        std::thread::scope(|s| {
            s.spawn(|| {
                let there = file(&keys[0]);
                assert!(!Arc::ptr_eq(&here, &there), "another thread's own");
                assert!(Arc::ptr_eq(&there, &file(&keys[0])));
            });
        });
        let files: Vec<Arc<std::fs::File>> = keys.iter().map(|key| file(key)).collect();
        let (kept, in_all) = kept::counts();
        assert_eq!(kept, kept::per_thread_bound());
        assert!(in_all <= kept::in_all_bound());
        // Each of the newest is found again, kept (the file it had), and is its own key's.
        for (key, was) in keys.iter().zip(&files).skip(keys.len() - kept) {
            let artifact = cache.open(key).unwrap().unwrap();
            let source: String = artifact
                .source()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(&source, key);
            assert!(Arc::ptr_eq(&artifact.shared_file(), was), "{key} kept");
        }
        assert!(
            !Arc::ptr_eq(&here, &file(&keys[0])),
            "the oldest was let go"
        );

        drop(cache);
        let other = ephem_test_support::temp_dir();
        let cache = Cache::new(other.path(), u64::MAX);
        let key = stored(&cache, 7);
        cache.open(&key).unwrap().unwrap();
        assert_eq!(
            kept::counts().0,
            1,
            "the dropped cache's entries are let go"
        );
    }

    /// A cache that keeps no entries open reads each entry again on every open.
    #[test]
    fn a_cache_keeping_no_entries_open_reads_them_every_time() {
        let tmp = ephem_test_support::temp_dir();
        let cache = Cache::new(tmp.path(), u64::MAX).keeping_entries_open(false);
        let key = stored(&cache, 5);
        let file = || cache.open(&key).unwrap().unwrap().shared_file();
        assert!(!Arc::ptr_eq(&file(), &file()), "opened anew");
        let cache = Cache::new(tmp.path(), u64::MAX);
        let file = || cache.open(&key).unwrap().unwrap().shared_file();
        assert!(Arc::ptr_eq(&file(), &file()), "kept by default");
    }

    /// An entry is kept only within the bound on bytes in all, and one that does not fit
    /// counts nothing.
    #[test]
    fn kept_entries_stay_within_the_bytes_bound() {
        assert!(!kept::reserve(KEPT_BYTES + 1));
        assert!(kept::in_all_bound() >= 16 && kept::in_all_bound() <= 1024);
    }

    /// A disk that is full until something is removed: the first write fails with `ENOSPC`,
    /// eviction makes room (the least recently used entry goes), and the one retry stores the
    /// entry.
    #[test]
    fn a_full_disk_evicts_room_and_retries_once() {
        let tmp = ephem_test_support::temp_dir();
        let cache = Cache::new(tmp.path(), u64::MAX);
        for n in 0..3 {
            stored(&cache, n);
        }
        let full = std::sync::atomic::AtomicUsize::new(0);
        let write = |path: &Path, bytes: &[u8]| {
            if full.fetch_add(1, Ordering::Relaxed) == 0 {
                return Err(std::io::Error::from(Errno::NOSPC));
            }
            write_atomic(path, bytes)
        };
        let key = format!("{:064x}", 99);
        let (_, outcome) = cache
            .get_or_compile_with(&key, || Ok::<_, Error>(compiled(99)), write)
            .unwrap();
        assert_eq!(outcome, Outcome::Compiled { replaced: None });
        assert_eq!(full.load(Ordering::Relaxed), 2, "one retry");
        let stats = cache.stats().unwrap();
        assert!(stats.entries < 4, "room was made: {stats:?}");
        assert!(cache.path(&key).exists());

        // A disk that stays full: one retry only, and the module still loads, from memory.
        let always_full = |_: &Path, _: &[u8]| Err(std::io::Error::from(Errno::NOSPC));
        let key = format!("{:064x}", 100);
        let (_, outcome) = cache
            .get_or_compile_with(&key, || Ok::<_, Error>(compiled(100)), always_full)
            .unwrap();
        match outcome {
            Outcome::Uncached { why } => {
                assert!(why.contains(&*cache.path(&key).to_string_lossy()), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

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
