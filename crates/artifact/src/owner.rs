//! Whose files can be trusted to stay as they are. Whoever owns a file can change its
//! permissions, and anyone may write a file with a write permission bit for them, so a file is
//! unchangeable only if it belongs to this process's user or root and has no write bit.
//!
//! Opening an artifact remembers a verified file only if it is unchangeable (it snapshots any
//! other, see `artifact/open.rs`), and a key file is refused unless its owner is this user or
//! root (see [`crate::ArtifactKey::from_file`]). Here rather than in either, so that neither
//! depends on the other for it.

use std::sync::OnceLock;

/// Whether a file owned by `uid` belongs to this process's user or root: whoever owns a file
/// can change its permissions, so only such files can be trusted to stay as they are (the
/// effective user id is asked once).
pub(crate) fn ours_or_roots(uid: u32) -> bool {
    static EUID: OnceLock<u32> = OnceLock::new();
    uid == 0 || uid == *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Whether nobody but this user or root can change the file in place: no write permission bit,
/// and owned by this user or root (the owner could add one).
pub(crate) fn unchangeable(stat: &rustix::fs::Stat) -> bool {
    stat.st_mode & 0o222 == 0 && ours_or_roots(stat.st_uid)
}
