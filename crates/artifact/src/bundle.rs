//! Bundles: one file that holds several module artifacts behind a front of its owner's, sealed
//! as a whole. A component artifact is one: its plan in front, its core modules' artifacts
//! behind, each starting on a page of its own.
//!
//! The front's layout and seal are the owner's; this file opens the file by the artifact's
//! rules (see `artifact/open.rs`) and opens the artifacts in it in place
//! ([`Bundle::artifact`]), so that their texts and images are mapped from the bundle's file as
//! a module's are from its own, instead of being copied out:
//! - a file someone else could change is read from a sealed snapshot and verified on every
//!   open; an unchangeable one is verified once per file identity and key, and later opens read
//!   only the front ([`Bundle::verified_front`]);
//! - each thread keeps what its owner made of the bundles it opened last
//!   ([`Bundle::open_kept`]), within the bounds of the cache's kept entries (descriptors and
//!   bytes, see `cache/kept.rs`), and asks the kept file, at most once a
//!   `KEPT_ASK_INTERVAL` (unless [`Bundle::ask_kept_every`] says otherwise), whether it is still the one at its path,
//!   as kept cache entries are asked: a file removed or replaced (by rename) has no name left,
//!   and one changed has another identity. So opening a kept bundle makes no system call.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::artifact::{Place, verify_seal};
use crate::cache::kept;
use crate::key::KeyId;
use crate::{Artifact, ArtifactKey, Error, Identity};

/// A bundle's file, open. Its place's `snapshot`: a sealed copy of a file that others could
/// change, or bytes in memory, verified on every open and never kept.
pub struct Bundle {
    place: Place,
    len: u64,
}

/// How often a kept bundle's file is asked whether it is still the one at its path (ns).
static ASK_EVERY: AtomicU64 = AtomicU64::new(kept::KEPT_ASK_INTERVAL.as_nanos() as u64);

/// Bundles verified in this process, by file identity and key, with the length of their front.
static VERIFIED: LazyLock<Mutex<HashMap<(Identity, KeyId), usize>>> = LazyLock::new(Mutex::default);

impl Bundle {
    /// Opens the file at `path` (never blocking on a FIFO), a snapshot of it if others could
    /// change it.
    pub fn open(path: &Path) -> Result<Bundle, Error> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)?;
        let (place, len) = Place::of(file, Some(path.to_owned()), true)?;
        Ok(Bundle { place, len })
    }

    /// A bundle of bytes in memory, through a memory file (verified on every open).
    pub fn from_bytes(bytes: &[u8]) -> Result<Bundle, Error> {
        let (mut place, len) = Place::of(crate::artifact::memory_file(bytes)?, None, false)?;
        place.snapshot = true;
        Ok(Bundle { place, len })
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's first `front` bytes, once the whole file was verified under `key`: its seal
    /// (the 32 bytes at `seal_at`) must be the keyed BLAKE3 of the file with those bytes as
    /// zeros. The file is read and hashed in pieces, never held whole; a file whose identity was
    /// verified under `key` before is not read past `front`.
    pub fn verified_front(
        &self,
        key: &ArtifactKey,
        seal_at: usize,
        front: usize,
    ) -> Result<Vec<u8>, Error> {
        let front = (front as u64).min(self.len);
        let id = (self.place.identity, key.id());
        let known = !self.place.snapshot
            && (VERIFIED.lock().unwrap_or_else(|e| e.into_inner())).contains_key(&id);
        if known {
            return self.read(0..front);
        }
        let kept = verify_seal(&self.place.file, self.len, key, seal_at as u64, front)?;
        if !self.place.snapshot {
            (VERIFIED.lock().unwrap_or_else(|e| e.into_inner())).insert(id, front as usize);
        }
        Ok(kept)
    }

    /// The bytes at `range` of the file.
    pub fn read(&self, range: Range<u64>) -> Result<Vec<u8>, Error> {
        let len = (range.end.checked_sub(range.start))
            .filter(|_| range.end <= self.len)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| crate::artifact::damaged("a range past the end of the file"))?;
        let mut bytes = vec![0; len];
        self.place.file.read_exact_at(&mut bytes, range.start)?;
        Ok(bytes)
    }

    /// Opens the artifact at `range` of the file in place: its header and metadata are
    /// checked (once per file identity and place, unless a snapshot), its own seal is not.
    ///
    /// # Safety
    /// The caller vouches for its machine code, as for [`Artifact::open_unverified`]: here by
    /// having verified the bundle's seal over the whole file ([`Bundle::verified_front`]).
    pub unsafe fn artifact(&self, range: Range<u64>) -> Result<Artifact, Error> {
        if range.end > self.len || range.start > range.end {
            return Err(crate::artifact::damaged(
                "an artifact past the end of its bundle",
            ));
        }
        let place = self.place.clone();
        // SAFETY: the caller vouches for the bytes at `range` (see above).
        unsafe { Artifact::within(place, range) }
    }

    /// Asks kept bundles' files every `interval` (for the whole process) whether they are still
    /// the ones at their paths, instead of once a second: zero asks on every open.
    pub fn ask_kept_every(interval: Duration) {
        let ns = interval.as_nanos().try_into().unwrap_or(u64::MAX);
        ASK_EVERY.store(ns, Ordering::Relaxed);
    }

    /// What `load` makes of the bundle at `path`, or what it made of it on this thread before
    /// if the file is still the one at `path` (see the module documentation); what is made for
    /// another `owner` (an engine) or `key` is kept apart.
    pub fn open_kept<V: Clone + 'static, E: From<Error>>(
        path: &Path,
        owner: u64,
        key: &ArtifactKey,
        load: impl FnOnce(Bundle) -> Result<V, E>,
    ) -> Result<V, E> {
        Bundle::open_kept_at(path, (owner, key.id()), kept::coarse_nanos(), load)
    }

    /// [`Bundle::open_kept`] at `now` (the coarse clock, ns).
    fn open_kept_at<V: Clone + 'static, E: From<Error>>(
        path: &Path,
        tag: (u64, KeyId),
        now: u64,
        load: impl FnOnce(Bundle) -> Result<V, E>,
    ) -> Result<V, E> {
        if let Some(v) = Kept::get(path, tag, now) {
            return Ok(v);
        }
        let bundle = Bundle::open(path)?;
        let keep = (!bundle.place.snapshot)
            .then(|| (Arc::clone(&bundle.place.file), bundle.place.identity));
        let value = load(bundle)?;
        if let Some((file, identity)) = keep {
            Kept::put(path, tag, file, identity, Box::new(value.clone()), now);
        }
        Ok(value)
    }
}

/// What a thread keeps of a bundle it opened: its file, to ask, and what its owner made of it.
struct Kept {
    path: Box<Path>,
    tag: (u64, KeyId),
    file: Arc<File>,
    identity: Identity,
    value: Box<dyn Any>,
    /// When the file was last asked (the coarse clock), and last used (a count).
    asked: u64,
    used: u64,
}

thread_local! {
    static KEPT: RefCell<(Vec<Kept>, u64)> = const { RefCell::new((Vec::new(), 0)) };
}

impl Drop for Kept {
    fn drop(&mut self) {
        kept::release(0);
    }
}

impl Kept {
    /// The value kept for `path` and `tag`, asking its file whether it is still the one at
    /// `path` if it was not asked within the interval (and letting it go if not).
    fn get<V: Clone + 'static>(path: &Path, tag: (u64, KeyId), now: u64) -> Option<V> {
        KEPT.try_with(|kept| {
            let (entries, uses) = &mut *kept.borrow_mut();
            let at = (entries.iter()).position(|k| k.tag == tag && &*k.path == path)?;
            let entry = &mut entries[at];
            if now.wrapping_sub(entry.asked) >= ASK_EVERY.load(Ordering::Relaxed) {
                let same = rustix::fs::fstat(&*entry.file)
                    .is_ok_and(|stat| stat.st_nlink > 0 && Identity::of(&stat) == entry.identity);
                if !same {
                    entries.swap_remove(at);
                    return None;
                }
                entry.asked = now;
            }
            *uses += 1;
            entry.used = *uses;
            entry.value.downcast_ref::<V>().cloned()
        })
        .ok()
        .flatten()
    }

    /// Keeps `value` for `path` and `tag`, in place of this thread's least recently used
    /// bundle when it keeps as many as it may, or of none when all threads do.
    fn put(
        path: &Path,
        tag: (u64, KeyId),
        file: Arc<File>,
        identity: Identity,
        value: Box<dyn Any>,
        now: u64,
    ) {
        let _ = KEPT.try_with(|kept| {
            let (entries, uses) = &mut *kept.borrow_mut();
            entries.retain(|k| !(k.tag == tag && &*k.path == path));
            if entries.len() >= kept::per_thread_bound() {
                let oldest = (entries.iter().enumerate())
                    .min_by_key(|(_, k)| k.used)
                    .map(|(at, _)| at);
                entries.swap_remove(oldest.expect("not empty"));
            }
            if !kept::reserve(0) {
                return;
            }
            *uses += 1;
            entries.push(Kept {
                path: path.into(),
                tag,
                file,
                identity,
                value,
                asked: now,
                used: *uses,
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::artifact::SEAL_PIECE;
    use crate::write_atomic;

    /// A thread keeps what was made of a bundle while its file is the one at its path: within
    /// the interval it is taken without asking, at its end a replaced or removed file is
    /// noticed; a file others could change is never kept.
    #[test]
    fn a_bundle_is_kept_while_its_file_is_the_one_at_its_path() {
        let tmp = ephem_test_support::temp_dir();
        let path = tmp.path().join("bundle");
        let loads = Cell::new(0);
        let open = |now: u64| {
            Bundle::open_kept_at(&path, (1, 2), now, |b| {
                loads.set(loads.get() + 1);
                Ok::<_, Error>(String::from_utf8(b.read(0..b.len())?).unwrap())
            })
        };
        let interval = kept::KEPT_ASK_INTERVAL.as_nanos() as u64;
        let t = kept::coarse_nanos();
        write_atomic(&path, b"first").unwrap();
        assert_eq!(open(t).unwrap(), "first");
        assert_eq!(open(t).unwrap(), "first");
        assert_eq!(loads.get(), 1, "kept");

        write_atomic(&path, b"second").unwrap();
        assert_eq!(open(t + interval - 1).unwrap(), "first", "not asked yet");
        assert_eq!(open(t + interval).unwrap(), "second", "asked: replaced");
        assert_eq!(loads.get(), 2);
        assert_eq!(open(t + interval).unwrap(), "second");

        std::fs::remove_file(&path).unwrap();
        assert!(open(t + 3 * interval).is_err(), "removed");

        std::fs::write(&path, b"writable").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let before = loads.get();
        open(t + 3 * interval).unwrap();
        open(t + 3 * interval).unwrap();
        assert_eq!(
            loads.get(),
            before + 2,
            "a changeable file is opened every time"
        );
    }

    /// A bundle's seal is checked over the whole file, read in pieces, with its own bytes as
    /// zeros: the front comes back as the file holds it; another key, or a byte changed past
    /// the first piece or in the seal, is refused.
    #[test]
    fn a_bundle_is_verified_over_the_whole_file() {
        let tmp = ephem_test_support::temp_dir();
        let key = ArtifactKey::from_bytes([7; 32]);
        let sealed = |mut file: Vec<u8>| {
            crate::format::reseal_at(&mut file, 20, &key);
            file
        };
        let file = sealed((0..3 * SEAL_PIECE + 123).map(|i| (i % 251) as u8).collect());
        let open = |name: &str, bytes: &[u8]| {
            let path = tmp.path().join(name);
            write_atomic(&path, bytes).unwrap();
            Bundle::open(&path).unwrap()
        };
        let bundle = open("good", &file);
        assert_eq!(bundle.verified_front(&key, 20, 100).unwrap(), &file[..100]);
        assert_eq!(bundle.verified_front(&key, 20, 100).unwrap(), &file[..100]);
        let other = ArtifactKey::from_bytes([8; 32]);
        assert!(matches!(
            bundle.verified_front(&other, 20, 100),
            Err(Error::Unsealed)
        ));
        for at in [30, SEAL_PIECE + 5, file.len() - 1] {
            let mut changed = file.clone();
            changed[at] ^= 1;
            let forged = open(&format!("changed-{at}"), &changed);
            assert!(
                matches!(forged.verified_front(&key, 20, 100), Err(Error::Unsealed)),
                "byte {at}"
            );
        }
        assert!(
            open("short", &file[..40])
                .verified_front(&key, 20, 100)
                .is_err()
        );
    }
}
