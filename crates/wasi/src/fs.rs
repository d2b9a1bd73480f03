//! Guest paths, resolved beneath a directory descriptor and never outside it.
//!
//! The kernel does the resolution: every path is opened with `openat2` and
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, which refuses absolute paths, `..` above the
//! base, and symlinks (absolute or relative, or swapped in during the walk) that lead out, all
//! atomically. Operations that act on a name rather than open it (`mkdir`, `unlink`, `rename`,
//! `symlink`, `link`, `readlink`, `stat` without following) first open the name's parent
//! that way, then act on the last component relative to it with a call that does not follow a
//! final symlink. A guest that swaps a symlink in at any moment therefore reaches at most the
//! link itself. Following a final symlink where a call cannot (`path_filestat_set_times`,
//! `path_link`) is done here by reading links and resolving their targets beneath the base
//! again ([`resolve`]).
//!
//! `openat2` needs Linux 5.6; on an older kernel every path operation fails with `ENOSYS`
//! rather than fall back to a weaker check.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno as Host;

use crate::abi::Errno;
use crate::mem::Result;

/// As Linux's limit on symlinks followed in one resolution.
const MAX_SYMLINKS: usize = 40;

/// A directory descriptor to act relative to: the guest's own, or a parent opened for one call.
pub(crate) enum Base<'a> {
    Borrowed(BorrowedFd<'a>),
    Owned(OwnedFd),
}

impl AsFd for Base<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Base::Borrowed(fd) => *fd,
            Base::Owned(fd) => fd.as_fd(),
        }
    }
}

fn check_relative(path: &[u8]) -> Result<()> {
    match path.first() {
        None => Err(Errno::NOENT),
        Some(b'/') => Err(Errno::NOTCAPABLE),
        Some(_) if path.contains(&0) => Err(Errno::INVAL),
        Some(_) => Ok(()),
    }
}

/// Opens `path` beneath `dir`.
pub(crate) fn open(dir: BorrowedFd<'_>, path: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd> {
    check_relative(path)?;
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    // `EAGAIN`: a rename raced with a `..` in the walk; the kernel asks for a retry.
    for _ in 0..8 {
        match rustix::fs::openat2(dir, path, flags | OFlags::CLOEXEC, mode, how) {
            Err(Host::AGAIN) => continue,
            Err(Host::XDEV) => return Err(Errno::NOTCAPABLE),
            other => return other.map_err(Errno::from),
        }
    }
    Err(Errno::AGAIN)
}

/// The directory holding `path`'s last component, opened beneath `dir`, and that component:
/// never empty, `.` or `..` is taken as the directory itself (`.` in it), and trailing
/// slashes are dropped.
pub(crate) fn parent<'a>(dir: BorrowedFd<'a>, path: &[u8]) -> Result<(Base<'a>, Vec<u8>)> {
    check_relative(path)?;
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let trimmed = &path[..end];
    let (head, last) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => (Some(&trimmed[..i]), &trimmed[i + 1..]),
        None => (None, trimmed),
    };
    let as_dir = OFlags::PATH | OFlags::DIRECTORY;
    if last == b"." || last == b".." {
        let fd = open(dir, trimmed, as_dir, Mode::empty())?;
        return Ok((Base::Owned(fd), b".".to_vec()));
    }
    let base = match head {
        None => Base::Borrowed(dir),
        // "a//b": the head's trailing slashes are harmless to openat2.
        Some(head) => Base::Owned(open(dir, head, as_dir, Mode::empty())?),
    };
    Ok((base, last.to_vec()))
}

/// As [`parent`], following the last component while it is a symlink (each target resolved
/// beneath `dir` again) when `follow` is set.
pub(crate) fn resolve<'a>(
    dir: BorrowedFd<'a>,
    path: &[u8],
    follow: bool,
) -> Result<(Base<'a>, Vec<u8>)> {
    let mut path = path.to_vec();
    for _ in 0..MAX_SYMLINKS {
        let (base, last) = parent(dir, &path)?;
        if !follow {
            return Ok((base, last));
        }
        let target = match rustix::fs::readlinkat(&base, last.as_slice(), Vec::new()) {
            Ok(target) => target.into_bytes(),
            Err(Host::INVAL | Host::NOENT) => return Ok((base, last)),
            Err(e) => return Err(e.into()),
        };
        if target.first() == Some(&b'/') {
            return Err(Errno::NOTCAPABLE);
        }
        // The link's directory, then its target.
        let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let dir_len = path[..end]
            .iter()
            .rposition(|&b| b == b'/')
            .map_or(0, |i| i + 1);
        path.truncate(dir_len);
        path.extend_from_slice(&target);
    }
    Err(Errno::LOOP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn name(r: Result<(Base<'_>, Vec<u8>)>) -> Result<String> {
        r.map(|(_, last)| String::from_utf8(last).unwrap())
    }

    #[test]
    fn parents_stay_beneath_and_names_are_single_components() {
        let dir = ephem_test_support::temp_dir();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("root")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("up")).unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let fd = fd.as_fd();
        assert_eq!(name(parent(fd, b"a")), Ok("a".into()));
        assert_eq!(name(parent(fd, b"sub/a")), Ok("a".into()));
        assert_eq!(name(parent(fd, b"sub/a//")), Ok("a".into()));
        assert_eq!(name(parent(fd, b"sub/..")), Ok(".".into()));
        assert_eq!(name(parent(fd, b"")), Err(Errno::NOENT));
        assert_eq!(name(parent(fd, b"/etc/passwd")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"..")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"../x")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"sub/../../x")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"root/etc")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"up/x")), Err(Errno::NOTCAPABLE));
        assert_eq!(name(parent(fd, b"a\0b")), Err(Errno::INVAL));
        // Following a final link to outside is refused; not following names the link.
        assert_eq!(name(resolve(fd, b"root", true)), Err(Errno::NOTCAPABLE));
        assert_eq!(name(resolve(fd, b"root", false)), Ok("root".into()));
        assert_eq!(name(resolve(fd, b"up", true)), Err(Errno::NOTCAPABLE));
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        assert_eq!(name(resolve(fd, b"loop", true)), Err(Errno::LOOP));
        std::os::unix::fs::symlink("sub/../sub", dir.path().join("inside")).unwrap();
        assert_eq!(name(resolve(fd, b"inside", true)), Ok("sub".into()));
    }
}
