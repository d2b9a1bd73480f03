//! The size bound: what the cache directory holds, recording use in access times, evicting
//! the least recently used entries, and removing files.
//!
//! Use is recorded in an entry's access time, which a hit sets only when it is older than
//! [`TOUCH_INTERVAL_SECS`], so that hits rarely make an extra system call.
//!
//! Invariants: after each write, stale temporary files (see `tmp.rs`) and then the least
//! recently used entries are removed until the directory takes at most the cache's bound,
//! counted in the blocks files take on disk; neither the entry just written nor a running
//! writer's temporary file is removed for it. A write that finds the disk full evicts at least
//! its own size and is tried once more, no more. A file another process removed meanwhile is
//! not an error.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use super::tmp::{TEMP_EXT, is_stale};
use super::{Cache, EXT};
use crate::Artifact;

/// A hit refreshes an entry's access time when it is older than this.
pub const TOUCH_INTERVAL_SECS: i64 = 3600;

/// One file in the cache directory.
pub(super) struct File {
    path: PathBuf,
    /// Allocated on disk.
    pub(super) bytes: u64,
    accessed: i64,
    pub(super) kind: Kind,
}

#[derive(PartialEq)]
pub(super) enum Kind {
    Entry,
    Temp { stale: bool },
}

impl Cache {
    /// Writes an entry; on a full disk, evicts at least its size and tries once more.
    pub(super) fn store(
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

    /// Sets the access time of a hit that was last recorded long ago (see
    /// [`TOUCH_INTERVAL_SECS`]).
    pub(super) fn touch(&self, artifact: &Artifact, accessed: i64) {
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
    pub(super) fn files(&self) -> std::io::Result<Vec<File>> {
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
                    stale: is_stale(&path, meta.mtime(), now),
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
    pub(super) fn evict(&self, keep: &Path, target: u64) -> std::io::Result<()> {
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

    /// [`Cache::clear`]'s removals.
    pub(super) fn remove_all(&self) -> std::io::Result<usize> {
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

/// Removes a file; one that is already gone (another process removed it) is not an error.
/// Whether this call removed it.
fn remove(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Seconds since the epoch, now.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Removes whatever is at an entry's path (a damaged file, a FIFO, a link, a directory), best
/// effort: the next write replaces it anyway, or reports why it cannot.
pub(super) fn remove_entry(path: &Path) {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let _ = if is_dir {
        std::fs::remove_dir_all(path)
    } else {
        remove(path).map(drop)
    };
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::Ordering;

    use rustix::io::Errno;

    use super::super::testing::{compiled, stored};
    use crate::Error;
    use crate::cache::{Cache, Outcome, write_atomic};

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
}
