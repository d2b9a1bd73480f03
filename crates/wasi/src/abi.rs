//! The preview 1 ABI: numbers and struct layouts from the witx definition, as wasi-libc's
//! `wasi/api.h` states and checks them (its `_Static_assert`s give the same offsets).
//!
//! Written out here rather than taken from a crate: the `wasi` crates are guest-side bindings,
//! and these constants are the interface itself, not logic.

use rustix::io::Errno as Host;

/// A WASI error number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub u16);

macro_rules! errnos {
    ($($name:ident = $n:literal),* $(,)?) => {
        #[allow(missing_docs)]
        impl Errno {
            $(pub const $name: Errno = Errno($n);)*
        }
    };
}

errnos! {
    SUCCESS = 0, TOOBIG = 1, ACCES = 2, AGAIN = 6, BADF = 8, BUSY = 10, DEADLK = 16,
    DQUOT = 19, EXIST = 20, FAULT = 21, FBIG = 22, ILSEQ = 25, INTR = 27, INVAL = 28, IO = 29,
    ISDIR = 31, LOOP = 32, MFILE = 33, MLINK = 34, NAMETOOLONG = 37, NFILE = 41, NODEV = 43,
    NOENT = 44, NOMEM = 48, NOSPC = 51, NOSYS = 52, NOTDIR = 54, NOTEMPTY = 55, NOTSUP = 58,
    NOTTY = 59, NXIO = 60, OVERFLOW = 61, PERM = 63, PIPE = 64, RANGE = 68, ROFS = 69,
    SPIPE = 70, TXTBSY = 74, XDEV = 75, NOTCAPABLE = 76,
}

impl From<Host> for Errno {
    /// The host's error as the guest sees it; anything without a WASI name is `EIO`.
    fn from(e: Host) -> Errno {
        const MAP: &[(Host, Errno)] = &[
            (Host::TOOBIG, Errno::TOOBIG),
            (Host::ACCESS, Errno::ACCES),
            (Host::AGAIN, Errno::AGAIN),
            (Host::BADF, Errno::BADF),
            (Host::BUSY, Errno::BUSY),
            (Host::DEADLK, Errno::DEADLK),
            (Host::DQUOT, Errno::DQUOT),
            (Host::EXIST, Errno::EXIST),
            (Host::FAULT, Errno::FAULT),
            (Host::FBIG, Errno::FBIG),
            (Host::ILSEQ, Errno::ILSEQ),
            (Host::INTR, Errno::INTR),
            (Host::INVAL, Errno::INVAL),
            (Host::IO, Errno::IO),
            (Host::ISDIR, Errno::ISDIR),
            (Host::LOOP, Errno::LOOP),
            (Host::MFILE, Errno::MFILE),
            (Host::MLINK, Errno::MLINK),
            (Host::NAMETOOLONG, Errno::NAMETOOLONG),
            (Host::NFILE, Errno::NFILE),
            (Host::NODEV, Errno::NODEV),
            (Host::NOENT, Errno::NOENT),
            (Host::NOMEM, Errno::NOMEM),
            (Host::NOSPC, Errno::NOSPC),
            (Host::NOSYS, Errno::NOSYS),
            (Host::NOTDIR, Errno::NOTDIR),
            (Host::NOTEMPTY, Errno::NOTEMPTY),
            (Host::NOTSUP, Errno::NOTSUP),
            (Host::NOTTY, Errno::NOTTY),
            (Host::NXIO, Errno::NXIO),
            (Host::OVERFLOW, Errno::OVERFLOW),
            (Host::PERM, Errno::PERM),
            (Host::PIPE, Errno::PIPE),
            (Host::RANGE, Errno::RANGE),
            (Host::ROFS, Errno::ROFS),
            (Host::SPIPE, Errno::SPIPE),
            (Host::TXTBSY, Errno::TXTBSY),
            (Host::XDEV, Errno::XDEV),
        ];
        MAP.iter()
            .find(|(h, _)| *h == e)
            .map_or(Errno::IO, |&(_, w)| w)
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Errno {
        e.raw_os_error()
            .map_or(Errno::IO, |n| Host::from_raw_os_error(n).into())
    }
}

/// `filetype`.
pub mod filetype {
    pub const UNKNOWN: u8 = 0;
    pub const BLOCK_DEVICE: u8 = 1;
    pub const CHARACTER_DEVICE: u8 = 2;
    pub const DIRECTORY: u8 = 3;
    pub const REGULAR_FILE: u8 = 4;
    pub const SOCKET_STREAM: u8 = 6;
    pub const SYMBOLIC_LINK: u8 = 7;
}

/// `fdflags`.
pub mod fdflags {
    pub const APPEND: u16 = 1;
    pub const DSYNC: u16 = 2;
    pub const NONBLOCK: u16 = 4;
    pub const RSYNC: u16 = 8;
    pub const SYNC: u16 = 16;
}

/// `oflags`.
pub mod oflags {
    pub const CREAT: u16 = 1;
    pub const DIRECTORY: u16 = 2;
    pub const EXCL: u16 = 4;
    pub const TRUNC: u16 = 8;
}

/// `lookupflags`.
pub const LOOKUP_SYMLINK_FOLLOW: u32 = 1;

/// `fstflags`.
pub mod fstflags {
    pub const ATIM: u16 = 1;
    pub const ATIM_NOW: u16 = 2;
    pub const MTIM: u16 = 4;
    pub const MTIM_NOW: u16 = 8;
}

/// `eventtype`.
pub mod eventtype {
    pub const CLOCK: u8 = 0;
    pub const FD_READ: u8 = 1;
    pub const FD_WRITE: u8 = 2;
}

/// `subclockflags`: the timeout is an absolute time of its clock.
pub const SUBSCRIPTION_CLOCK_ABSTIME: u16 = 1;
/// `eventrwflags`: the other end hung up.
pub const EVENT_FD_READWRITE_HANGUP: u16 = 1;

/// `rights`: only reported, not enforced beyond what the host's open modes and read-only
/// preopens enforce (see the crate documentation).
pub mod rights {
    pub const FD_DATASYNC: u64 = 1 << 0;
    pub const FD_READ: u64 = 1 << 1;
    pub const FD_SEEK: u64 = 1 << 2;
    pub const FD_FDSTAT_SET_FLAGS: u64 = 1 << 3;
    pub const FD_SYNC: u64 = 1 << 4;
    pub const FD_TELL: u64 = 1 << 5;
    pub const FD_WRITE: u64 = 1 << 6;
    pub const FD_ADVISE: u64 = 1 << 7;
    pub const FD_ALLOCATE: u64 = 1 << 8;
    pub const PATH_CREATE_DIRECTORY: u64 = 1 << 9;
    pub const PATH_CREATE_FILE: u64 = 1 << 10;
    pub const PATH_LINK_SOURCE: u64 = 1 << 11;
    pub const PATH_LINK_TARGET: u64 = 1 << 12;
    pub const PATH_OPEN: u64 = 1 << 13;
    pub const FD_READDIR: u64 = 1 << 14;
    pub const PATH_READLINK: u64 = 1 << 15;
    pub const PATH_RENAME_SOURCE: u64 = 1 << 16;
    pub const PATH_RENAME_TARGET: u64 = 1 << 17;
    pub const PATH_FILESTAT_GET: u64 = 1 << 18;
    pub const PATH_FILESTAT_SET_SIZE: u64 = 1 << 19;
    pub const PATH_FILESTAT_SET_TIMES: u64 = 1 << 20;
    pub const FD_FILESTAT_GET: u64 = 1 << 21;
    pub const FD_FILESTAT_SET_SIZE: u64 = 1 << 22;
    pub const FD_FILESTAT_SET_TIMES: u64 = 1 << 23;
    pub const PATH_SYMLINK: u64 = 1 << 24;
    pub const PATH_REMOVE_DIRECTORY: u64 = 1 << 25;
    pub const PATH_UNLINK_FILE: u64 = 1 << 26;
    pub const POLL_FD_READWRITE: u64 = 1 << 27;

    /// What an open file may be asked to do.
    pub const FILE: u64 = FD_DATASYNC
        | FD_READ
        | FD_SEEK
        | FD_FDSTAT_SET_FLAGS
        | FD_SYNC
        | FD_TELL
        | FD_WRITE
        | FD_ADVISE
        | FD_ALLOCATE
        | FD_FILESTAT_GET
        | FD_FILESTAT_SET_SIZE
        | FD_FILESTAT_SET_TIMES
        | POLL_FD_READWRITE;
    /// What a directory that may change may be asked to do.
    pub const DIR: u64 = FD_FDSTAT_SET_FLAGS
        | FD_SYNC
        | FD_DATASYNC
        | FD_READDIR
        | FD_FILESTAT_GET
        | FD_FILESTAT_SET_TIMES
        | PATH_OPEN
        | PATH_READLINK
        | PATH_FILESTAT_GET
        | DIR_CHANGES;
    /// What a read-only directory refuses.
    pub const DIR_CHANGES: u64 = PATH_CREATE_DIRECTORY
        | PATH_CREATE_FILE
        | PATH_LINK_SOURCE
        | PATH_LINK_TARGET
        | PATH_RENAME_SOURCE
        | PATH_RENAME_TARGET
        | PATH_FILESTAT_SET_SIZE
        | PATH_FILESTAT_SET_TIMES
        | PATH_SYMLINK
        | PATH_REMOVE_DIRECTORY
        | PATH_UNLINK_FILE;
    /// What a file opened for writing needs (wasi-libc asks for these with `O_WRONLY`).
    pub const WRITE: u64 = FD_WRITE | FD_ALLOCATE | FD_FILESTAT_SET_SIZE | FD_DATASYNC;
    /// What stdin, stdout and stderr offer.
    pub const STDIO: u64 =
        FD_READ | FD_WRITE | FD_FDSTAT_SET_FLAGS | FD_FILESTAT_GET | POLL_FD_READWRITE;
}

/// Sizes of the structs the guest passes and receives (offsets are in the code that writes
/// them, each beside its field name).
pub const IOVEC_SIZE: u32 = 8;
pub const FDSTAT_SIZE: u32 = 24;
pub const FILESTAT_SIZE: u32 = 64;
pub const DIRENT_SIZE: u32 = 24;
pub const SUBSCRIPTION_SIZE: u32 = 48;
pub const EVENT_SIZE: u32 = 32;
