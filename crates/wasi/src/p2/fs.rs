//! `wasi:filesystem` 0.2 over preview 1's descriptors: a descriptor's rep is its preview 1
//! descriptor number in the same context, so both previews share one table, its rights, and
//! its sandbox (every path resolved beneath its directory by `openat2`, see `crate::fs`).
//!
//! What is here: the preopened directories, `open-at`, reading and writing through streams and
//! at offsets, `stat`, `stat-at`, `get-type`, `get-flags`, `metadata-hash(-at)`, directory
//! listings, `create-directory-at`, `remove-directory-at`, `unlink-file-at`, `sync`,
//! `sync-data`. What is not (each traps when called, naming itself, in `ephem run`): renaming,
//! links, symlinks, `set-size`, `set-times`, `advise`, `is-same-object`. A directory opened
//! without `mutate-directory` may still be changed where its preopen allows it: the preopen's
//! permissions are what bounds a guest.

use std::os::fd::BorrowedFd;

use ephem_component::{Linker, Val};
use ephem_runtime::{HostError, StoreContextMut};
use rustix::fs::FileType;

use super::{
    InputStream, OutputStream, Stream, Table, arg, bytes, list_of_bytes, new_stream, ok, own,
    rep_of, set, u64_arg,
};
use crate::abi::{self, Errno, rights};
use crate::ctx::{Desc, WasiCtx};
use crate::host::retry;

/// The resource types of `wasi:filesystem/types`.
mod ty {
    pub struct Descriptor;
    pub struct DirectoryEntryStream;
}

/// A listing read whole when it is opened: names and types.
pub(crate) type Listing = std::vec::IntoIter<(String, &'static str)>;

/// The most entries a listing holds.
const MAX_ENTRIES: usize = 1 << 16;

/// The most listings a context holds at once (each read whole into the host's memory).
const MAX_LISTINGS: usize = 16;

/// The most bytes one `read` gives (as a stream's read: each byte is a value on its way out).
const MAX_READ: u64 = 64 << 10;

/// The most bytes of names one listing holds.
const MAX_LISTING_BYTES: usize = 4 << 20;

/// The rights that make a descriptor readable (as preview 1's `path_open` reads them).
const READS: u64 = rights::FD_READ | rights::FD_READDIR;

fn name(iface: &str) -> String {
    format!("wasi:filesystem/{iface}@{}", super::VERSION)
}

/// A preview 1 error as `error-code`'s case.
fn code(e: Errno) -> &'static str {
    const MAP: &[(Errno, &str)] = &[
        (Errno::ACCES, "access"),
        (Errno::AGAIN, "would-block"),
        (Errno::BADF, "bad-descriptor"),
        (Errno::BUSY, "busy"),
        (Errno::DEADLK, "deadlock"),
        (Errno::DQUOT, "quota"),
        (Errno::EXIST, "exist"),
        (Errno::FBIG, "file-too-large"),
        (Errno::ILSEQ, "illegal-byte-sequence"),
        (Errno::INTR, "interrupted"),
        (Errno::INVAL, "invalid"),
        (Errno::ISDIR, "is-directory"),
        (Errno::LOOP, "loop"),
        (Errno::MLINK, "too-many-links"),
        (Errno::NAMETOOLONG, "name-too-long"),
        (Errno::NODEV, "no-device"),
        (Errno::NOENT, "no-entry"),
        (Errno::NOMEM, "insufficient-memory"),
        (Errno::NOSPC, "insufficient-space"),
        (Errno::NOTDIR, "not-directory"),
        (Errno::NOTEMPTY, "not-empty"),
        (Errno::NOTSUP, "unsupported"),
        (Errno::NOSYS, "unsupported"),
        (Errno::NOTTY, "no-tty"),
        (Errno::NXIO, "no-such-device"),
        (Errno::OVERFLOW, "overflow"),
        (Errno::PERM, "not-permitted"),
        (Errno::NOTCAPABLE, "not-permitted"),
        (Errno::PIPE, "pipe"),
        (Errno::ROFS, "read-only"),
        (Errno::SPIPE, "invalid-seek"),
        (Errno::TXTBSY, "text-file-busy"),
        (Errno::XDEV, "cross-device"),
    ];
    MAP.iter().find(|(p1, _)| *p1 == e).map_or("io", |(_, c)| c)
}

/// A function's result: `ok` of `v`, or the error as `error-code`.
fn result(r: Result<Option<Val>, Errno>) -> Val {
    match r {
        Ok(v) => ok(v),
        Err(e) => Val::Result(Err(Some(Box::new(Val::Enum(code(e).into()))))),
    }
}

fn path(v: &Val) -> Result<Vec<u8>, HostError> {
    match v {
        Val::String(s) => Ok(s.as_bytes().to_vec()),
        other => Err(format!("a path expected, not {other:?}").into()),
    }
}

fn flags(v: &Val) -> Result<&[String], HostError> {
    match v {
        Val::Flags(f) => Ok(f),
        other => Err(format!("flags expected, not {other:?}").into()),
    }
}

fn has(flags: &[String], name: &str) -> bool {
    flags.iter().any(|f| f == name)
}

fn type_name(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "regular-file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic-link",
        FileType::CharacterDevice => "character-device",
        FileType::BlockDevice => "block-device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        _ => "unknown",
    }
}

// `struct stat`'s field types differ between architectures: the casts are needed elsewhere.
#[allow(clippy::unnecessary_cast)]
fn stat_val(st: &rustix::fs::Stat) -> Val {
    let time = |s: i64, ns: u64| {
        Val::Option(Some(Box::new(Val::Record(vec![
            ("seconds".into(), Val::U64(s.max(0) as u64)),
            ("nanoseconds".into(), Val::U32(ns as u32)),
        ]))))
    };
    Val::Record(vec![
        (
            "type".into(),
            Val::Enum(type_name(st.st_mode as u32).into()),
        ),
        ("link-count".into(), Val::U64(st.st_nlink as u64)),
        ("size".into(), Val::U64(st.st_size as u64)),
        (
            "data-access-timestamp".into(),
            time(st.st_atime as i64, st.st_atime_nsec as u64),
        ),
        (
            "data-modification-timestamp".into(),
            time(st.st_mtime as i64, st.st_mtime_nsec as u64),
        ),
        (
            "status-change-timestamp".into(),
            time(st.st_ctime as i64, st.st_ctime_nsec as u64),
        ),
    ])
}

/// A file's identity as `metadata-hash-value`: its device and inode, mixed.
#[allow(clippy::unnecessary_cast)]
fn hash_val(st: &rustix::fs::Stat) -> Val {
    let (dev, ino) = (st.st_dev as u64, st.st_ino as u64);
    let mix = |x: u64| x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    Val::Record(vec![
        ("lower".into(), Val::U64(mix(ino) ^ dev)),
        ("upper".into(), Val::U64(mix(dev) ^ ino)),
    ])
}

fn fstat(ctx: &WasiCtx, fd: u32) -> Result<rustix::fs::Stat, Errno> {
    let host = ctx.fs_fd(fd, rights::FD_FILESTAT_GET)?;
    retry(|| rustix::fs::fstat(host))
}

/// Reads from `file` at `at` into `buf`.
pub(crate) fn pread(file: BorrowedFd<'_>, buf: &mut [u8], at: u64) -> Result<usize, Errno> {
    retry(|| rustix::io::pread(file, &mut *buf, at))
}

/// Writes `data` whole to `file` at `at` (its end, with `append`): the bytes written.
pub(crate) fn pwrite(
    file: BorrowedFd<'_>,
    data: &[u8],
    at: u64,
    append: bool,
) -> Result<usize, Errno> {
    let host = file;
    let mut at = match append {
        true => retry(|| rustix::fs::fstat(host))?.st_size as u64,
        false => at,
    };
    let mut done = 0;
    while done < data.len() {
        let n = retry(|| rustix::io::pwrite(host, &data[done..], at))?;
        if n == 0 {
            return Err(Errno::IO);
        }
        done += n;
        at += n as u64;
    }
    Ok(done)
}

/// The listing of directory `fd`.
#[allow(clippy::unnecessary_cast)]
fn list(ctx: &WasiCtx, fd: u32) -> Result<Listing, Errno> {
    let host = ctx.fs_fd(fd, rights::FD_READDIR)?;
    let dir = retry(|| rustix::fs::Dir::read_from(host))?;
    let mut entries = Vec::new();
    let mut names = 0;
    for entry in dir {
        let entry = entry.map_err(Errno::from)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names += name.len();
        if entries.len() >= MAX_ENTRIES || names > MAX_LISTING_BYTES {
            return Err(Errno::NOMEM);
        }
        let name = String::from_utf8(name.to_vec()).map_err(|_| Errno::ILSEQ)?;
        let kind = match entry.file_type() {
            FileType::Unknown => {
                let st =
                    rustix::fs::statat(host, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
                st.map_or("unknown", |st| type_name(st.st_mode as u32))
            }
            t => type_name(t.as_raw_mode()),
        };
        entries.push((name, kind));
    }
    entries.sort();
    Ok(entries.into_iter())
}

/// Adds `wasi:filesystem` (`types` and `preopens`) to `linker`, with each store's context
/// found by `get`.
pub fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    use ephem_component::ResourceType as R;
    let mut types = linker.instance(&name("types"))?;
    types.resource(
        "descriptor",
        R::host::<ty::Descriptor>(),
        move |mut s: StoreContextMut<'_, T>, rep| {
            let slot = get(s.data_mut()).fds.get_mut(rep as usize);
            let slot = slot.ok_or("no such descriptor")?;
            // A preopened directory stays: each `get-directories` hands out a new handle to
            // it, and dropping one leaves the others (and the next call's) working.
            if let Some(Desc::Dir(d)) = slot.as_ref().map(|e| &e.desc)
                && d.preopen.is_some()
            {
                return Ok(());
            }
            slot.take()
                .map(drop)
                .ok_or_else(|| "no such descriptor".into())
        },
    )?;
    types.resource(
        "directory-entry-stream",
        R::host::<ty::DirectoryEntryStream>(),
        move |mut s: StoreContextMut<'_, T>, rep| get(s.data_mut()).p2.listings.take(rep).map(drop),
    )?;
    types.func_new("filesystem-error-code", |_, _, _, r| {
        set(r, Val::Option(None))
    })?;

    // Methods of a descriptor with no other parameter.
    type Plain = fn(&mut WasiCtx, u32) -> Result<Option<Val>, Errno>;
    let plain: [(&str, Plain); 6] = [
        ("stat", |c, fd| Ok(Some(stat_val(&fstat(c, fd)?)))),
        ("get-type", |c, fd| {
            Ok(Some(Val::Enum(type_name(fstat(c, fd)?.st_mode).into())))
        }),
        ("metadata-hash", |c, fd| Ok(Some(hash_val(&fstat(c, fd)?)))),
        ("get-flags", |c, fd| {
            let entry = c.entry(fd, 0)?;
            let mut f = Vec::new();
            if entry.rights & READS != 0 {
                f.push("read".to_string());
            }
            if entry.rights & rights::FD_WRITE != 0 {
                f.push("write".to_string());
            }
            if matches!(entry.desc, Desc::Dir(_)) && entry.rights & rights::PATH_CREATE_FILE != 0 {
                f.push("mutate-directory".to_string());
            }
            Ok(Some(Val::Flags(f)))
        }),
        ("sync", |c, fd| {
            let host = c.fs_fd(fd, rights::FD_SYNC)?;
            retry(|| rustix::fs::fsync(host)).map(|()| None)
        }),
        ("sync-data", |c, fd| {
            let host = c.fs_fd(fd, rights::FD_DATASYNC)?;
            retry(|| rustix::fs::fdatasync(host)).map(|()| None)
        }),
    ];
    for (method, f) in plain {
        types.func_new(
            &format!("[method]descriptor.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
                set(r, result(f(get(s.data_mut()), fd)))
            },
        )?;
    }
    // Methods of a descriptor and a path.
    type AtPath = fn(&mut WasiCtx, u32, &[u8]) -> Result<Option<Val>, Errno>;
    let at_path: [(&str, AtPath); 3] = [
        ("create-directory-at", |c, fd, p| {
            c.create_directory_at(fd, p).map(|()| None)
        }),
        ("remove-directory-at", |c, fd, p| {
            c.remove_directory_at(fd, p).map(|()| None)
        }),
        ("unlink-file-at", |c, fd, p| {
            c.unlink_file_at(fd, p).map(|()| None)
        }),
    ];
    for (method, f) in at_path {
        types.func_new(
            &format!("[method]descriptor.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let (fd, at) = (rep_of::<ty::Descriptor>(arg(p, 0)?)?, path(arg(p, 1)?)?);
                set(r, result(f(get(s.data_mut()), fd, &at)))
            },
        )?;
    }
    // Methods of a descriptor, path flags and a path.
    type Stat = fn(&rustix::fs::Stat) -> Val;
    for (method, shown) in [
        ("stat-at", stat_val as Stat),
        ("metadata-hash-at", hash_val as Stat),
    ] {
        types.func_new(
            &format!("[method]descriptor.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
                let follow = has(flags(arg(p, 1)?)?, "symlink-follow");
                let at = path(arg(p, 2)?)?;
                let lookup = if follow {
                    abi::LOOKUP_SYMLINK_FOLLOW
                } else {
                    0
                };
                let st = get(s.data_mut()).stat_at(fd, lookup, &at);
                set(r, result(st.map(|st| Some(shown(&st)))))
            },
        )?;
    }
    types.func_new(
        "[method]descriptor.open-at",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
            let follow = has(flags(arg(p, 1)?)?, "symlink-follow");
            let at = path(arg(p, 2)?)?;
            let open = flags(arg(p, 3)?)?;
            let access = flags(arg(p, 4)?)?;
            // A directory is not created, made exclusively or truncated by `open-at`.
            let creating = ["create", "exclusive", "truncate"]
                .iter()
                .any(|f| has(open, f));
            if has(open, "directory") && creating {
                return set(r, result(Err(Errno::INVAL)));
            }
            let mut oflags = 0;
            for (name, bit) in [
                ("create", abi::oflags::CREAT),
                ("directory", abi::oflags::DIRECTORY),
                ("exclusive", abi::oflags::EXCL),
                ("truncate", abi::oflags::TRUNC),
            ] {
                if has(open, name) {
                    oflags |= bit;
                }
            }
            // Every right, less reading or writing where not asked for; `open_at` keeps what
            // the directory may hand on.
            let mut base = u64::MAX;
            if !has(access, "read") {
                base &= !READS;
            }
            if !has(access, "write") {
                base &= !rights::WRITE;
            }
            let lookup = if follow {
                abi::LOOKUP_SYMLINK_FOLLOW
            } else {
                0
            };
            let ctx = get(s.data_mut());
            let opened = ctx.open_at(fd, lookup, &at, oflags, base, u64::MAX, 0);
            set(r, result(opened.map(|fd| Some(own::<ty::Descriptor>(fd)))))
        },
    )?;
    for (method, write, append) in [
        ("read-via-stream", false, false),
        ("write-via-stream", true, false),
        ("append-via-stream", true, true),
    ] {
        types.func_new(
            &format!("[method]descriptor.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
                let at = if append { 0 } else { u64_arg(arg(p, 1)?)? };
                let ctx = get(s.data_mut());
                let needed = if write {
                    rights::FD_WRITE
                } else {
                    rights::FD_READ
                };
                // The stream's own descriptor: it reads and writes that file even if the
                // guest's number for it is closed and given to another.
                // As many as a guest may hold descriptors: each is a host descriptor.
                if ctx.p2.file_streams >= crate::ctx::MAX_FDS {
                    return set(r, result(Err(Errno::NFILE)));
                }
                let file = ctx
                    .fs_fd(fd, needed)
                    .and_then(|host| retry(|| rustix::io::fcntl_dupfd_cloexec(host, 0)));
                let file = match file {
                    Ok(file) => file,
                    Err(e) => return set(r, result(Err(e))),
                };
                let stream = Stream::File { file, at, append };
                let v = match write {
                    true => new_stream::<OutputStream>(ctx, stream)?,
                    false => new_stream::<InputStream>(ctx, stream)?,
                };
                ctx.p2.file_streams += 1;
                set(r, ok(Some(v)))
            },
        )?;
    }
    types.func_new(
        "[method]descriptor.read",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
            let len = u64_arg(arg(p, 1)?)?.min(MAX_READ) as usize;
            let at = u64_arg(arg(p, 2)?)?;
            let mut buf = vec![0; len];
            let ctx = get(s.data_mut());
            let file = ctx.fs_fd(fd, rights::FD_READ);
            let read = file.and_then(|f| pread(f, &mut buf, at)).map(|n| {
                let end = Val::Bool(n == 0 && len > 0);
                Some(Val::Tuple(vec![list_of_bytes(&buf[..n]), end]))
            });
            set(r, result(read))
        },
    )?;
    types.func_new(
        "[method]descriptor.write",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let fd = rep_of::<ty::Descriptor>(arg(p, 0)?)?;
            let data = bytes(arg(p, 1)?)?;
            let at = u64_arg(arg(p, 2)?)?;
            let ctx = get(s.data_mut());
            let file = ctx.fs_fd(fd, rights::FD_WRITE);
            let written = file.and_then(|f| pwrite(f, &data, at, false));
            set(r, result(written.map(|n| Some(Val::U64(n as u64)))))
        },
    )?;
    types.func_new(
        "[method]descriptor.read-directory",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            if ctx.p2.listings.live() >= MAX_LISTINGS {
                return set(r, result(Err(Errno::NOMEM)));
            }
            let listing = match list(ctx, rep_of::<ty::Descriptor>(arg(p, 0)?)?) {
                Ok(l) => l,
                Err(e) => return set(r, result(Err(e))),
            };
            let rep = ctx.p2.listings.push(listing)?;
            set(r, ok(Some(own::<ty::DirectoryEntryStream>(rep))))
        },
    )?;
    types.func_new(
        "[method]directory-entry-stream.read-directory-entry",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let listing = get(s.data_mut())
                .p2
                .listings
                .get_mut(rep_of::<ty::DirectoryEntryStream>(arg(p, 0)?)?)?;
            let entry = listing.next().map(|(name, kind)| {
                Box::new(Val::Record(vec![
                    ("type".into(), Val::Enum(kind.into())),
                    ("name".into(), Val::String(name)),
                ]))
            });
            set(r, ok(Some(Val::Option(entry))))
        },
    )?;

    let mut preopens = linker.instance(&name("preopens"))?;
    preopens.func_new(
        "get-directories",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            let ctx = get(s.data_mut());
            let dirs = (ctx.fds.iter().enumerate())
                .filter_map(|(fd, e)| match e.as_ref().map(|e| &e.desc) {
                    Some(Desc::Dir(d)) => d.preopen.as_ref().map(|name| {
                        Val::Tuple(vec![
                            own::<ty::Descriptor>(fd as u32),
                            Val::String(name.to_string()),
                        ])
                    }),
                    _ => None,
                })
                .collect();
            set(r, Val::List(dirs))
        },
    )?;
    Ok(())
}

/// The context's listings in progress, by rep.
pub(crate) type Listings = Table<Listing>;
