//! Finding an entry's file: by name relative to the cache directory's descriptor once it is
//! open (the kernel then walks no path), never blocking on a FIFO and never following a
//! symbolic link; and telling whether an opened artifact is the key's.
//!
//! Invariants: the directory descriptor in `Cache::dir_fd` is the cache's own, closed only when
//! the cache is dropped; one replaced (someone replaced the directory) moves to
//! `Cache::retired` and stays open until then too, since another thread may still be opening
//! through it. The hot path allocates nothing for an entry's name.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use rustix::io::Errno;

use super::{Cache, EXT};
use crate::Error;

impl Cache {
    /// Opens the file of entry `key` (never blocking on a FIFO, never through a symbolic
    /// link): relative to the directory once it is open, else by path. An entry the directory
    /// lacks but the path finds means the directory was replaced: the new one is opened for
    /// the next entries.
    pub(super) fn open_entry(&self, key: &str) -> Result<std::fs::File, Error> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = self.dir_fd.load(Ordering::Acquire);
        if dir >= 0 {
            let (mut stack, mut heap) = ([0; 128], String::new());
            let name = entry_name(key, &mut stack, &mut heap);
            // SAFETY: a non-negative `dir_fd` is a descriptor this cache owns and closes only
            // when dropped (a replaced one is kept open in `retired` until then), so it stays
            // open while `&self` borrows it here.
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
            // SAFETY: `old` came from `dir_fd`: a descriptor this cache owns and closes only
            // when dropped (a replaced one is kept open in `retired`), so it stays open for
            // the two `fstat`s.
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
                    // SAFETY: the exchange took `old` out of `dir_fd`, which owned it, and only
                    // this thread's exchange could; threads may still borrow it, so it is kept
                    // open in `retired` until the cache is dropped, never closed here.
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
pub(super) fn source_is(key: &str, source: &[u8; 32]) -> bool {
    let k = key.as_bytes();
    if k.len() != 64 || !k.iter().all(u8::is_ascii_hexdigit) {
        return Cache::source(key) == *source;
    }
    let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    k.chunks_exact(2)
        .zip(source)
        .all(|(pair, &b)| nibble(pair[0]) << 4 | nibble(pair[1]) == b)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
