//! The entries each thread keeps open: the artifact (file, header and metadata) of each entry
//! a thread opened last, so that opening one of them again makes no system call. Opening is the
//! largest part of an invocation once its text and image are kept (see docs/bench-log/).
//!
//! - **Bounds**: all threads together keep at most a quarter of the descriptors the process may
//!   have open (`RLIMIT_NOFILE`'s soft limit; at least 16, at most 1 024) and [`KEPT_BYTES`],
//!   so that a server with many threads runs out of neither; each thread an equal share of that
//!   for as many threads as there are cores (at least two threads), and at least 16. A thread
//!   that keeps as many as it may lets its least recently used entry go.
//! - **Asking**: at most once a [`KEPT_ASK_INTERVAL`] (by the coarse monotonic clock, which the
//!   vDSO reads), and at once when the cache made a change to its directory since, a thread asks
//!   the kept file, not the directory, whether it is still the entry: an `fstat` on the kept
//!   descriptor, instead of `openat`, `fstat`, `pread` and, when the artifact is dropped,
//!   `close`. It is while it still has a name (entries are never moved, so a removed or
//!   replaced entry's file has none) and the same [`Identity`] (what verification is
//!   remembered by). So a removed, replaced or changed entry is noticed within that interval (at
//!   once with [`Cache::asking_kept_entries_every`]`(Duration::ZERO)`), unless someone gave its
//!   file another name (a hard link), and then the kept artifact is still the key's, verified.
//!   Not on every open, because on that path the `fstat` would be the only system call (see
//!   docs/bench-log/); a runtime's in-memory module cache usually never asks. The file rather
//!   than the directory (`fstatat` of the name), because that costs less (see docs/bench-log/).
//! - **Between two asks** the kept artifact is still the key's: a replaced entry holds the same
//!   module compiled by the same compiler, and a removed one's file lives on until let go. Only
//!   a change in place, which needs write access to a read-only file of this user's (who could
//!   change the process as well), is read unverified meanwhile. A removed entry's disk space is
//!   freed when its thread lets the file go.
//! - **Per thread, not shared**: a hit touches nothing another thread touches; threads that
//!   shared one descriptor and a lock per entry did not scale across cores (see
//!   docs/bench-log/). A thread lets the entries of a dropped cache go at its next keep.
//! - **Indexed by key**: a thread that keeps hundreds finds one without a scan (see
//!   docs/bench-log/).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use super::Cache;
use crate::{Artifact, Identity};

/// How many bytes the artifacts all threads keep open may hold in memory (their headers,
/// metadata and segment data, which grow with a module's declarations, not its code).
pub const KEPT_BYTES: usize = 64 << 20;

/// How often a thread asks a kept entry's file whether it is still the entry (see the module
/// documentation), unless [`Cache::asking_kept_entries_every`] says otherwise.
pub const KEPT_ASK_INTERVAL: Duration = Duration::from_secs(1);

impl Cache {
    /// The artifact of entry `key` this thread keeps open, unless its file, when asked, is no
    /// longer the entry's or changed (see the module documentation); then it is let go.
    pub(super) fn open_kept(&self, key: &str) -> Option<Artifact> {
        let now = match self.ask_every {
            0 => 0,
            _ => coarse_nanos(),
        };
        self.open_kept_at(key, now)
    }

    /// [`Cache::open_kept`] at `now` (nanoseconds of the coarse monotonic clock).
    fn open_kept_at(&self, key: &str, now: u64) -> Option<Artifact> {
        let changes = self.changes.load(Ordering::Relaxed);
        let (artifact, ask) = get(&self.token, key, (now, changes), self.ask_every)?;
        if !ask {
            return Some(artifact);
        }
        match rustix::fs::fstat(artifact.file()) {
            Ok(stat) if stat.st_nlink > 0 && Identity::of(&stat) == artifact.identity() => {
                self.touch(&artifact, stat.st_atime);
                Some(artifact)
            }
            _ => {
                forget(&self.token, key);
                None
            }
        }
    }
}

/// The coarse monotonic clock in nanoseconds: read from the vDSO's data, without a system
/// call or a read of the time stamp counter.
pub(crate) fn coarse_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

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
pub(crate) fn per_thread_bound() -> usize {
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
        release(self.artifact.memory_bytes());
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
pub(crate) fn reserve(bytes: usize) -> bool {
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

/// Counts one entry of `bytes` fewer in all: one that [`reserve`] counted is let go.
pub(crate) fn release(bytes: usize) {
    IN_ALL.fetch_sub(1, Ordering::Relaxed);
    BYTES.fetch_sub(bytes, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::testing::stored;
    use super::*;
    use crate::Error;
    use crate::cache::write_atomic;

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
        let keys: Vec<String> = (0..per_thread_bound() as i32 + 3)
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
        let (kept, in_all) = counts();
        assert_eq!(kept, per_thread_bound());
        assert!(in_all <= in_all_bound());
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
        assert_eq!(counts().0, 1, "the dropped cache's entries are let go");
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
        assert!(!reserve(KEPT_BYTES + 1));
        assert!(in_all_bound() >= 16 && in_all_bound() <= 1024);
    }
}
