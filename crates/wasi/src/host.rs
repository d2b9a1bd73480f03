//! The functions of `wasi_snapshot_preview1`, as methods of [`WasiCtx`] over the guest's
//! memory. Each returns `Ok` or the errno the guest gets; `lib.rs` links them.
//!
//! Documented departures: sockets (`sock_*`) return `ENOTSUP` (no socket can be opened or
//! inherited yet); `proc_raise` returns `ENOTSUP` (a guest cannot signal the host process);
//! blocking calls run to their end under an epoch deadline (the host is never stopped inside
//! its own code), except that a clock wait in `poll_oneoff` is cut short by the interrupt
//! signal, so that a sleeping guest stops at its deadline (waits on descriptors restart);
//! rights are reported and checked per descriptor, and a read-only preopen's files and
//! directories inherit rights without writes;
//! `fd_fdstat_set_flags` changes only files the guest opened (on stdio and directories, whose
//! host descriptors are shared, it succeeds without effect).

use std::io::IoSlice;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom, Timestamps};
use rustix::time::{ClockId, Timespec};

use crate::abi::{
    self, DIRENT_SIZE, EVENT_SIZE, Errno, FDSTAT_SIZE, FILESTAT_SIZE, SUBSCRIPTION_SIZE, eventtype,
    fdflags, filetype, fstflags, oflags, rights,
};
use crate::ctx::{Desc, Dir, Entry, Input, Listing, Output, Sink, WasiCtx, lookup};
use crate::fs;
use crate::mem::{GuestMemory, Result};

/// The guest's `O_ACCMODE`-deciding rights (as wasmtime reads them).
const READS: u64 = rights::FD_READ | rights::FD_READDIR;

fn host_stdin() -> BorrowedFd<'static> {
    // SAFETY: descriptor 0 is the process's standard input for the life of the process; the
    // borrow never closes it.
    unsafe { BorrowedFd::borrow_raw(0) }
}

fn host_output(err: bool) -> BorrowedFd<'static> {
    // SAFETY: as `host_stdin`, for descriptors 1 and 2.
    unsafe { BorrowedFd::borrow_raw(if err { 2 } else { 1 }) }
}

fn clock(id: u32) -> Result<ClockId> {
    Ok(match id {
        0 => ClockId::Realtime,
        1 => ClockId::Monotonic,
        2 => ClockId::ProcessCPUTime,
        3 => ClockId::ThreadCPUTime,
        _ => return Err(Errno::INVAL),
    })
}

pub(crate) fn nanos(t: Timespec) -> u64 {
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

pub(crate) fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

fn filetype_of(mode: u32) -> u8 {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => filetype::REGULAR_FILE,
        FileType::Directory => filetype::DIRECTORY,
        FileType::Symlink => filetype::SYMBOLIC_LINK,
        FileType::CharacterDevice => filetype::CHARACTER_DEVICE,
        FileType::BlockDevice => filetype::BLOCK_DEVICE,
        FileType::Socket => filetype::SOCKET_STREAM,
        _ => filetype::UNKNOWN,
    }
}

/// A `filestat` in the guest's layout.
// `struct stat`'s field types differ between architectures: the casts are needed elsewhere.
#[allow(clippy::unnecessary_cast)]
fn filestat(st: &rustix::fs::Stat) -> [u8; FILESTAT_SIZE as usize] {
    let mut b = [0u8; FILESTAT_SIZE as usize];
    let time = |s: i64, ns: u64| (s as u64).wrapping_mul(1_000_000_000).wrapping_add(ns);
    b[0..8].copy_from_slice(&(st.st_dev as u64).to_le_bytes()); // dev
    b[8..16].copy_from_slice(&(st.st_ino as u64).to_le_bytes()); // ino
    b[16] = filetype_of(st.st_mode as u32); // filetype
    b[24..32].copy_from_slice(&(st.st_nlink as u64).to_le_bytes()); // nlink
    b[32..40].copy_from_slice(&(st.st_size as u64).to_le_bytes()); // size
    let atim = time(st.st_atime as i64, st.st_atime_nsec as u64);
    let mtim = time(st.st_mtime as i64, st.st_mtime_nsec as u64);
    let ctim = time(st.st_ctime as i64, st.st_ctime_nsec as u64);
    b[40..48].copy_from_slice(&atim.to_le_bytes());
    b[48..56].copy_from_slice(&mtim.to_le_bytes());
    b[56..64].copy_from_slice(&ctim.to_le_bytes());
    b
}

/// Timestamps for `utimensat`/`futimens` from the guest's times and `fstflags`.
fn timestamps(atim: u64, mtim: u64, flags: u16) -> Result<Timestamps> {
    let one = |set: u16, now: u16, t: u64| match (flags & set != 0, flags & now != 0) {
        (true, true) => Err(Errno::INVAL),
        (true, false) => Ok(timespec(t)),
        (false, true) => Ok(Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        }),
        (false, false) => Ok(Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        }),
    };
    Ok(Timestamps {
        last_access: one(fstflags::ATIM, fstflags::ATIM_NOW, atim)?,
        last_modification: one(fstflags::MTIM, fstflags::MTIM_NOW, mtim)?,
    })
}

/// The guest's `fdflags` of host open flags.
fn fdflags_of(flags: OFlags) -> u16 {
    let mut f = 0;
    for (host, wasi) in [
        (OFlags::APPEND, fdflags::APPEND),
        (OFlags::NONBLOCK, fdflags::NONBLOCK),
        (OFlags::DSYNC, fdflags::DSYNC),
        (OFlags::SYNC, fdflags::SYNC),
        (OFlags::RSYNC, fdflags::RSYNC),
    ] {
        if flags.contains(host) {
            f |= wasi;
        }
    }
    f
}

/// Host open flags of the guest's `fdflags`.
fn oflags_of(f: u16) -> OFlags {
    let mut flags = OFlags::empty();
    for (wasi, host) in [
        (fdflags::APPEND, OFlags::APPEND),
        (fdflags::NONBLOCK, OFlags::NONBLOCK),
        (fdflags::DSYNC, OFlags::DSYNC),
        (fdflags::SYNC, OFlags::SYNC),
        (fdflags::RSYNC, OFlags::RSYNC),
    ] {
        if f & wasi != 0 {
            flags |= host;
        }
    }
    flags
}

/// Reads into the guest's buffers one at a time (they may overlap, so they are never borrowed
/// together), until one is not filled.
fn read_each(
    m: &mut GuestMemory<'_>,
    iovs: &[(u32, u32)],
    mut read: impl FnMut(&mut [u8], usize) -> Result<usize>,
) -> Result<usize> {
    let mut total = 0;
    for &(ptr, len) in iovs {
        let n = m.fill(ptr, len, |buf| read(buf, total))?;
        total += n;
        if n < len as usize {
            break;
        }
    }
    Ok(total)
}

/// Fills `out` with the kernel's random bytes (preview 1's `random_get`, preview 2's
/// `get-random-bytes`).
pub(crate) fn fill_random(out: &mut [u8]) -> Result<()> {
    let mut filled = 0;
    while filled < out.len() {
        filled += retry(|| {
            rustix::rand::getrandom(&mut out[filled..], rustix::rand::GetRandomFlags::empty())
        })?;
    }
    Ok(())
}

/// Retries a call interrupted by a signal.
pub(crate) fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> Result<T> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(Errno::from),
        }
    }
}

/// Writes `bytes` to the context's standard output (or error, `err`): what preview 2's output
/// streams do with preview 1's sinks.
pub(crate) fn write_stdio(ctx: &mut WasiCtx, err: bool, bytes: &[u8]) -> Result<usize> {
    let sink = if err {
        &mut ctx.stderr
    } else {
        &mut ctx.stdout
    };
    write_sink(sink, err, &[IoSlice::new(bytes)])
}

/// Reads into `buf` from `data` at `*at` (advanced past what was read): the bytes read, 0 at
/// its end.
pub(crate) fn read_bytes(data: &[u8], at: &mut usize, buf: &mut [u8]) -> usize {
    let rest = &data[*at..];
    let n = rest.len().min(buf.len());
    buf[..n].copy_from_slice(&rest[..n]);
    *at += n;
    n
}

/// Reads into `buf` from the context's standard input; 0 at its end.
pub(crate) fn read_stdin(ctx: &mut WasiCtx, buf: &mut [u8]) -> Result<usize> {
    let WasiCtx {
        fixed,
        stdin,
        stdin_pos,
        ..
    } = ctx;
    match fixed.stdin_or(stdin) {
        Input::Inherit => retry(|| rustix::io::read(host_stdin(), &mut *buf)),
        Input::Bytes(data) => Ok(read_bytes(data, stdin_pos, buf)),
    }
}

fn write_sink(sink: &mut Sink, err: bool, bufs: &[IoSlice<'_>]) -> Result<usize> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    match sink.kind {
        Output::Inherit => retry(|| rustix::io::writev(host_output(err), bufs)),
        Output::Discard => Ok(total),
        Output::Capture(limit) | Output::Head(limit) => {
            let room = limit.saturating_sub(sink.buf.len());
            let head = matches!(sink.kind, Output::Head(_));
            if room == 0 && total > 0 && !head {
                return Err(Errno::NOSPC);
            }
            let mut left = room.min(total);
            let kept = left;
            for b in bufs {
                let take = left.min(b.len());
                sink.buf.extend_from_slice(&b[..take]);
                left -= take;
            }
            if head {
                sink.dropped += (total - kept) as u64;
                return Ok(total);
            }
            Ok(kept)
        }
    }
}

/// One subscription of `poll_oneoff`, parsed.
enum Sub {
    /// Nanoseconds from now until it fires.
    Clock(u64),
    /// Ready now (in-memory stdio, regular files), with the bytes available.
    Ready(u64),
    /// Wait on a host descriptor (inherited stdio) for reading (`true`) or writing.
    Wait(BorrowedFd<'static>, bool),
    /// The descriptor is bad: reported in the event.
    Failed(Errno),
}

// The functions take the ABI's arguments as they come.
#[allow(clippy::too_many_arguments)]
impl WasiCtx {
    pub(crate) fn args_get(&mut self, m: &mut GuestMemory<'_>, argv: u32, buf: u32) -> Result<()> {
        self.fixed.args.get(m, argv, buf)
    }

    pub(crate) fn args_sizes_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        n: u32,
        size: u32,
    ) -> Result<()> {
        self.fixed.args.sizes_get(m, n, size)
    }

    pub(crate) fn environ_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        env: u32,
        buf: u32,
    ) -> Result<()> {
        self.fixed.env.get(m, env, buf)
    }

    pub(crate) fn environ_sizes_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        n: u32,
        size: u32,
    ) -> Result<()> {
        self.fixed.env.sizes_get(m, n, size)
    }

    pub(crate) fn clock_res_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        id: u32,
        res: u32,
    ) -> Result<()> {
        m.set_u64(res, nanos(rustix::time::clock_getres(clock(id)?)))
    }

    pub(crate) fn clock_time_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        id: u32,
        _precision: u64,
        time: u32,
    ) -> Result<()> {
        m.set_u64(time, nanos(rustix::time::clock_gettime(clock(id)?)))
    }

    pub(crate) fn random_get(&mut self, m: &mut GuestMemory<'_>, buf: u32, len: u32) -> Result<()> {
        m.fill(buf, len, |out| fill_random(out).map(|()| out.len()))?;
        Ok(())
    }

    pub(crate) fn sched_yield(&mut self, _m: &mut GuestMemory<'_>) -> Result<()> {
        std::thread::yield_now();
        Ok(())
    }

    pub(crate) fn proc_raise(&mut self, _m: &mut GuestMemory<'_>, _signal: u32) -> Result<()> {
        Err(Errno::NOTSUP)
    }

    // --- descriptors -------------------------------------------------------------------------

    fn read(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        at: Option<u64>,
    ) -> Result<usize> {
        let iovs = m.iovecs(iovs, n)?;
        let needed = rights::FD_READ | at.map_or(0, |_| rights::FD_SEEK);
        let WasiCtx {
            fds,
            fixed,
            stdin,
            stdin_pos,
            ..
        } = self;
        let stdin = fixed.stdin_or(stdin);
        let entry = lookup(fds, fd, needed)?;
        match (&entry.desc, at) {
            (Desc::Stdin, Some(_)) => Err(Errno::SPIPE),
            (Desc::Stdin, None) => match stdin {
                Input::Inherit => read_each(m, &iovs, |buf, _| {
                    retry(|| rustix::io::read(host_stdin(), &mut *buf))
                }),
                Input::Bytes(data) => {
                    read_each(m, &iovs, |buf, _| Ok(read_bytes(data, stdin_pos, buf)))
                }
            },
            (Desc::File(file), None) => read_each(m, &iovs, |buf, _| {
                retry(|| rustix::io::read(file, &mut *buf))
            }),
            (Desc::File(file), Some(offset)) => read_each(m, &iovs, |buf, done| {
                let at = offset.checked_add(done as u64).ok_or(Errno::OVERFLOW)?;
                retry(|| rustix::io::pread(file, &mut *buf, at))
            }),
            (Desc::Dir(_), _) => Err(Errno::ISDIR),
            (Desc::Stdout | Desc::Stderr, _) => Err(Errno::BADF),
        }
    }

    fn write(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        at: Option<u64>,
    ) -> Result<usize> {
        let iovs = m.iovecs(iovs, n)?;
        let bufs = m.gather(&iovs)?;
        let bufs: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        let needed = rights::FD_WRITE | at.map_or(0, |_| rights::FD_SEEK);
        let WasiCtx {
            fds,
            stdout,
            stderr,
            ..
        } = self;
        let entry = lookup(fds, fd, needed)?;
        match (&entry.desc, at) {
            (Desc::Stdout | Desc::Stderr, Some(_)) => Err(Errno::SPIPE),
            (Desc::Stdout, None) => write_sink(stdout, false, &bufs),
            (Desc::Stderr, None) => write_sink(stderr, true, &bufs),
            (Desc::File(file), None) => retry(|| rustix::io::writev(file, &bufs)),
            (Desc::File(file), Some(offset)) => retry(|| rustix::io::pwritev(file, &bufs, offset)),
            (Desc::Dir(_), _) => Err(Errno::ISDIR),
            (Desc::Stdin, _) => Err(Errno::BADF),
        }
    }

    pub(crate) fn fd_read(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        nread: u32,
    ) -> Result<()> {
        let total = self.read(m, fd, iovs, n, None)?;
        m.set_size(nread, total)
    }

    pub(crate) fn fd_pread(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        offset: u64,
        nread: u32,
    ) -> Result<()> {
        let total = self.read(m, fd, iovs, n, Some(offset))?;
        m.set_size(nread, total)
    }

    pub(crate) fn fd_write(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        nwritten: u32,
    ) -> Result<()> {
        let total = self.write(m, fd, iovs, n, None)?;
        m.set_size(nwritten, total)
    }

    pub(crate) fn fd_pwrite(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        iovs: u32,
        n: u32,
        offset: u64,
        nwritten: u32,
    ) -> Result<()> {
        let total = self.write(m, fd, iovs, n, Some(offset))?;
        m.set_size(nwritten, total)
    }

    /// The host descriptor behind `fd`: a file's or directory's, or the process's own for
    /// inherited stdio; `None` for in-memory stdio.
    fn host_fd(&self, fd: u32, needed: u64) -> Result<Option<BorrowedFd<'_>>> {
        let entry = self.entry(fd, needed)?;
        Ok(match &entry.desc {
            Desc::File(f) => Some(f.as_fd()),
            Desc::Dir(d) => Some(d.fd.as_fd()),
            Desc::Stdin => matches!(self.stdin(), Input::Inherit).then(host_stdin),
            Desc::Stdout => matches!(self.stdout.kind, Output::Inherit).then(|| host_output(false)),
            Desc::Stderr => matches!(self.stderr.kind, Output::Inherit).then(|| host_output(true)),
        })
    }

    /// A file's descriptor (not stdio, not a directory).
    fn file(&self, fd: u32, needed: u64) -> Result<BorrowedFd<'_>> {
        let entry = self.entry(fd, 0)?;
        match &entry.desc {
            Desc::File(f) => entry.allows(needed).map(|()| f.as_fd()),
            Desc::Dir(_) => Err(Errno::ISDIR),
            _ => Err(Errno::SPIPE),
        }
    }

    pub(crate) fn fd_seek(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        offset: i64,
        whence: u32,
        new: u32,
    ) -> Result<()> {
        let needed = if offset == 0 && whence == 1 {
            rights::FD_TELL
        } else {
            rights::FD_SEEK
        };
        let pos = match whence {
            0 => SeekFrom::Start(u64::try_from(offset).map_err(|_| Errno::INVAL)?),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(Errno::INVAL),
        };
        let file = self.file(fd, needed)?;
        let at = retry(|| rustix::fs::seek(file, pos))?;
        m.set_u64(new, at)
    }

    pub(crate) fn fd_tell(&mut self, m: &mut GuestMemory<'_>, fd: u32, out: u32) -> Result<()> {
        let file = self.file(fd, rights::FD_TELL)?;
        let at = retry(|| rustix::fs::seek(file, SeekFrom::Current(0)))?;
        m.set_u64(out, at)
    }

    pub(crate) fn fd_close(&mut self, _m: &mut GuestMemory<'_>, fd: u32) -> Result<()> {
        let slot = self.fds.get_mut(fd as usize).ok_or(Errno::BADF)?;
        slot.take().map(drop).ok_or(Errno::BADF)
    }

    pub(crate) fn fd_renumber(
        &mut self,
        _m: &mut GuestMemory<'_>,
        from: u32,
        to: u32,
    ) -> Result<()> {
        self.entry(from, 0)?;
        self.entry(to, 0)?;
        if from != to {
            self.fds[to as usize] = self.fds[from as usize].take();
        }
        Ok(())
    }

    pub(crate) fn fd_fdstat_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        out: u32,
    ) -> Result<()> {
        let entry = self.entry(fd, 0)?;
        let (rights, inheriting) = (entry.rights, entry.inheriting);
        let (filetype, flags) = match self.host_fd(fd, 0)? {
            Some(host) => (
                filetype_of(retry(|| rustix::fs::fstat(host))?.st_mode as u32),
                fdflags_of(retry(|| rustix::fs::fcntl_getfl(host))?),
            ),
            None => (filetype::UNKNOWN, 0),
        };
        let mut b = [0u8; FDSTAT_SIZE as usize];
        b[0] = filetype; // fs_filetype
        b[2..4].copy_from_slice(&flags.to_le_bytes()); // fs_flags
        b[8..16].copy_from_slice(&rights.to_le_bytes()); // fs_rights_base
        b[16..24].copy_from_slice(&inheriting.to_le_bytes()); // fs_rights_inheriting
        m.write(out, &b)
    }

    pub(crate) fn fd_fdstat_set_flags(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        flags: u32,
    ) -> Result<()> {
        let flags = u16::try_from(flags).map_err(|_| Errno::INVAL)?;
        // Linux changes only these after opening.
        let settable = fdflags::APPEND | fdflags::NONBLOCK;
        if flags & !settable != 0 {
            return Err(Errno::NOTSUP);
        }
        // Only a file of the guest's own is changed. Stdio and directories share host
        // descriptors (the process's stdio, preopens shared between contexts), whose flags are
        // not the guest's to change: the request is accepted and has no effect (Go sets its
        // stdio non-blocking at start).
        self.entry(fd, rights::FD_FDSTAT_SET_FLAGS)?;
        let Ok(host) = self.file(fd, 0) else {
            return Ok(());
        };
        let current = retry(|| rustix::fs::fcntl_getfl(host))?;
        let new = (current - (OFlags::APPEND | OFlags::NONBLOCK)) | oflags_of(flags);
        retry(|| rustix::fs::fcntl_setfl(host, new))
    }

    pub(crate) fn fd_fdstat_set_rights(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        base: u64,
        inheriting: u64,
    ) -> Result<()> {
        let entry = self
            .fds
            .get_mut(fd as usize)
            .and_then(Option::as_mut)
            .ok_or(Errno::BADF)?;
        if base & !entry.rights != 0 || inheriting & !entry.inheriting != 0 {
            return Err(Errno::NOTCAPABLE);
        }
        entry.rights = base;
        entry.inheriting = inheriting;
        Ok(())
    }

    pub(crate) fn fd_filestat_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        out: u32,
    ) -> Result<()> {
        let stat = match self.host_fd(fd, rights::FD_FILESTAT_GET)? {
            Some(host) => filestat(&retry(|| rustix::fs::fstat(host))?),
            None => [0; FILESTAT_SIZE as usize],
        };
        m.write(out, &stat)
    }

    pub(crate) fn fd_filestat_set_size(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        size: u64,
    ) -> Result<()> {
        let file = self.file(fd, rights::FD_FILESTAT_SET_SIZE)?;
        retry(|| rustix::fs::ftruncate(file, size))
    }

    pub(crate) fn fd_filestat_set_times(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        atim: u64,
        mtim: u64,
        flags: u32,
    ) -> Result<()> {
        let times = timestamps(atim, mtim, flags as u16)?;
        let host = self
            .host_fd(fd, rights::FD_FILESTAT_SET_TIMES)?
            .ok_or(Errno::BADF)?;
        retry(|| rustix::fs::futimens(host, &times))
    }

    pub(crate) fn fd_advise(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        offset: u64,
        len: u64,
        advice: u32,
    ) -> Result<()> {
        use rustix::fs::Advice;
        let advice = match advice {
            0 => Advice::Normal,
            1 => Advice::Sequential,
            2 => Advice::Random,
            3 => Advice::WillNeed,
            4 => Advice::DontNeed,
            5 => Advice::NoReuse,
            _ => return Err(Errno::INVAL),
        };
        let file = self.file(fd, rights::FD_ADVISE)?;
        retry(|| rustix::fs::fadvise(file, offset, NonZeroU64::new(len), advice))
    }

    pub(crate) fn fd_allocate(
        &mut self,
        _m: &mut GuestMemory<'_>,
        fd: u32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let file = self.file(fd, rights::FD_ALLOCATE)?;
        retry(|| rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), offset, len))
    }

    pub(crate) fn fd_sync(&mut self, _m: &mut GuestMemory<'_>, fd: u32) -> Result<()> {
        let host = self.host_fd(fd, rights::FD_SYNC)?.ok_or(Errno::INVAL)?;
        retry(|| rustix::fs::fsync(host))
    }

    pub(crate) fn fd_datasync(&mut self, _m: &mut GuestMemory<'_>, fd: u32) -> Result<()> {
        let host = self.host_fd(fd, rights::FD_DATASYNC)?.ok_or(Errno::INVAL)?;
        retry(|| rustix::fs::fdatasync(host))
    }

    pub(crate) fn fd_prestat_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        out: u32,
    ) -> Result<()> {
        let Desc::Dir(Dir {
            preopen: Some(name),
            ..
        }) = &self.entry(fd, 0)?.desc
        else {
            return Err(Errno::BADF);
        };
        let mut b = [0u8; 8];
        // tag 0 (a directory), then pr_name_len.
        b[4..8].copy_from_slice(&(name.len() as u32).to_le_bytes());
        m.write(out, &b)
    }

    pub(crate) fn fd_prestat_dir_name(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        path: u32,
        len: u32,
    ) -> Result<()> {
        let Desc::Dir(Dir {
            preopen: Some(name),
            ..
        }) = &self.entry(fd, 0)?.desc
        else {
            return Err(Errno::BADF);
        };
        if (len as usize) < name.len() {
            return Err(Errno::NAMETOOLONG);
        }
        m.write(path, name.as_bytes())
    }

    pub(crate) fn fd_readdir(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        buf: u32,
        len: u32,
        cookie: u64,
        used: u32,
    ) -> Result<()> {
        self.dir(fd, rights::FD_READDIR)?;
        let Some(Entry {
            desc: Desc::Dir(dir),
            ..
        }) = self.fds[fd as usize].as_mut()
        else {
            unreachable!("checked above")
        };
        // The listing continues where the last call stopped, or repeats the entry it cut
        // short; any other cookie starts it over.
        let listing = match &mut dir.listing {
            Some(l)
                if cookie >= l.read
                    || (l.cut.is_some() && l.read.checked_sub(1) == Some(cookie)) =>
            {
                l
            }
            slot => slot.insert(Listing {
                dir: retry(|| rustix::fs::Dir::read_from(&*dir.fd))?,
                read: 0,
                cut: None,
            }),
        };
        let filled = m.fill(buf, len, |out| {
            let mut filled = 0;
            // Copies `bytes` into the rest of `out`; `false` if they did not all fit.
            let mut put = |bytes: &[u8]| {
                let n = bytes.len().min(out.len() - filled);
                out[filled..filled + n].copy_from_slice(&bytes[..n]);
                filled += n;
                n == bytes.len()
            };
            if let Some(cut) = listing.cut.take()
                && cookie < listing.read
                && !put(&cut)
            {
                listing.cut = Some(cut);
            }
            while listing.cut.is_none() {
                let Some(entry) = listing.dir.read() else {
                    break;
                };
                let entry = entry.map_err(Errno::from)?;
                listing.read += 1;
                if listing.read <= cookie {
                    continue;
                }
                let name = entry.file_name().to_bytes();
                let mut head = [0u8; DIRENT_SIZE as usize];
                head[0..8].copy_from_slice(&listing.read.to_le_bytes()); // d_next
                head[8..16].copy_from_slice(&entry.ino().to_le_bytes()); // d_ino
                head[16..20].copy_from_slice(&(name.len() as u32).to_le_bytes()); // d_namlen
                head[20] = filetype_of(entry.file_type().as_raw_mode()); // d_type
                // A full buffer tells the guest to call again from the last entry it got whole.
                if !(put(&head) && put(name)) {
                    listing.cut = Some([&head[..], name].concat());
                }
            }
            Ok(filled)
        })?;
        m.set_size(used, filled)
    }

    // --- paths -------------------------------------------------------------------------------

    pub(crate) fn path_open(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        lookup: u32,
        path: u32,
        path_len: u32,
        oflags: u32,
        base: u64,
        inheriting: u64,
        flags: u32,
        out: u32,
    ) -> Result<()> {
        // The result's place first: a descriptor is never opened that the guest cannot learn.
        m.slice(out, 4)?;
        let path = m.slice(path, path_len)?.into_owned();
        let new = self.open_at(
            fd,
            lookup,
            &path,
            oflags as u16,
            base,
            inheriting,
            flags as u16,
        )?;
        m.set_u32(out, new)
    }

    /// `path_open` without guest memory (preview 2's `open-at` too): the new descriptor.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open_at(
        &mut self,
        fd: u32,
        lookup: u32,
        path: &[u8],
        oflags: u16,
        base: u64,
        inheriting: u64,
        flags: u16,
    ) -> Result<u32> {
        let mut needed = rights::PATH_OPEN;
        if oflags & oflags::CREAT != 0 {
            needed |= rights::PATH_CREATE_FILE;
        }
        if oflags & oflags::TRUNC != 0 {
            needed |= rights::PATH_FILESTAT_SET_SIZE;
        }
        let dir = self.dir(fd, needed)?;
        let parent = self.entry(fd, 0)?;
        let (allowed, perms) = (parent.inheriting, dir.perms);
        let write = base & rights::FD_WRITE != 0;
        if write && allowed & rights::FD_WRITE == 0 {
            return Err(Errno::NOTCAPABLE);
        }
        let mut host = if oflags & oflags::DIRECTORY != 0 {
            OFlags::DIRECTORY | OFlags::RDONLY
        } else {
            match (base & READS != 0, write) {
                (true, true) => OFlags::RDWR,
                (false, true) => OFlags::WRONLY,
                _ => OFlags::RDONLY,
            }
        };
        for (wasi, flag) in [
            (oflags::CREAT, OFlags::CREATE),
            (oflags::EXCL, OFlags::EXCL),
            (oflags::TRUNC, OFlags::TRUNC),
        ] {
            if oflags & wasi != 0 {
                host |= flag;
            }
        }
        host |= oflags_of(flags) | OFlags::NOCTTY;
        if lookup & abi::LOOKUP_SYMLINK_FOLLOW == 0 {
            host |= OFlags::NOFOLLOW;
        }
        // openat2 refuses a mode without O_CREAT.
        let mode = match host.contains(OFlags::CREATE) {
            true => Mode::from_raw_mode(0o666),
            false => Mode::empty(),
        };
        let opened = fs::open(dir.fd.as_fd(), path, host, mode)?;
        let is_dir = oflags & oflags::DIRECTORY != 0
            || FileType::from_raw_mode(retry(|| rustix::fs::fstat(&opened))?.st_mode)
                == FileType::Directory;
        let entry = if is_dir {
            let dir = Dir {
                fd: opened.into(),
                preopen: None,
                perms,
                listing: None,
            };
            Entry::new(Desc::Dir(dir), base & allowed, inheriting & allowed)
        } else {
            Entry::new(Desc::File(opened), base & allowed & rights::FILE, 0)
        };
        self.push(entry)
    }

    pub(crate) fn path_create_directory(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        path: u32,
        len: u32,
    ) -> Result<()> {
        self.create_directory_at(fd, &m.slice(path, len)?)
    }

    /// `path_create_directory` without guest memory.
    pub(crate) fn create_directory_at(&self, fd: u32, path: &[u8]) -> Result<()> {
        let dir = self.dir(fd, rights::PATH_CREATE_DIRECTORY)?;
        let (base, last) = fs::parent(dir.fd.as_fd(), path)?;
        retry(|| rustix::fs::mkdirat(&base, last.as_slice(), Mode::from_raw_mode(0o777)))
    }

    pub(crate) fn path_remove_directory(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        path: u32,
        len: u32,
    ) -> Result<()> {
        self.remove_directory_at(fd, &m.slice(path, len)?)
    }

    /// `path_remove_directory` without guest memory.
    pub(crate) fn remove_directory_at(&self, fd: u32, path: &[u8]) -> Result<()> {
        let dir = self.dir(fd, rights::PATH_REMOVE_DIRECTORY)?;
        let (base, last) = fs::parent(dir.fd.as_fd(), path)?;
        retry(|| rustix::fs::unlinkat(&base, last.as_slice(), AtFlags::REMOVEDIR))
    }

    pub(crate) fn path_unlink_file(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        path: u32,
        len: u32,
    ) -> Result<()> {
        self.unlink_file_at(fd, &m.slice(path, len)?)
    }

    /// `path_unlink_file` without guest memory.
    pub(crate) fn unlink_file_at(&self, fd: u32, path: &[u8]) -> Result<()> {
        let dir = self.dir(fd, rights::PATH_UNLINK_FILE)?;
        let (base, last) = fs::parent(dir.fd.as_fd(), path)?;
        if path.ends_with(b"/") {
            // "file/" names a directory: never a file to unlink.
            let st =
                retry(|| rustix::fs::statat(&base, last.as_slice(), AtFlags::SYMLINK_NOFOLLOW))?;
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            return Err(if is_dir { Errno::ISDIR } else { Errno::NOTDIR });
        }
        retry(|| rustix::fs::unlinkat(&base, last.as_slice(), AtFlags::empty()))
    }

    pub(crate) fn path_rename(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        old: u32,
        old_len: u32,
        new_fd: u32,
        new: u32,
        new_len: u32,
    ) -> Result<()> {
        let from = self.dir(fd, rights::PATH_RENAME_SOURCE)?;
        let to = self.dir(new_fd, rights::PATH_RENAME_TARGET)?;
        let (b1, l1) = fs::parent(from.fd.as_fd(), &m.slice(old, old_len)?)?;
        let (b2, l2) = fs::parent(to.fd.as_fd(), &m.slice(new, new_len)?)?;
        retry(|| rustix::fs::renameat(&b1, l1.as_slice(), &b2, l2.as_slice()))
    }

    pub(crate) fn path_symlink(
        &mut self,
        m: &mut GuestMemory<'_>,
        old: u32,
        old_len: u32,
        fd: u32,
        new: u32,
        new_len: u32,
    ) -> Result<()> {
        let dir = self.dir(fd, rights::PATH_SYMLINK)?;
        let target = m.slice(old, old_len)?;
        if target.contains(&0) {
            return Err(Errno::INVAL);
        }
        let (base, last) = fs::parent(dir.fd.as_fd(), &m.slice(new, new_len)?)?;
        retry(|| rustix::fs::symlinkat(&*target, &base, last.as_slice()))
    }

    pub(crate) fn path_link(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        lookup: u32,
        old: u32,
        old_len: u32,
        new_fd: u32,
        new: u32,
        new_len: u32,
    ) -> Result<()> {
        let from = self.dir(fd, rights::PATH_LINK_SOURCE)?;
        let to = self.dir(new_fd, rights::PATH_LINK_TARGET)?;
        let follow = lookup & abi::LOOKUP_SYMLINK_FOLLOW != 0;
        let (b1, l1) = fs::resolve(from.fd.as_fd(), &m.slice(old, old_len)?, follow)?;
        let (b2, l2) = fs::parent(to.fd.as_fd(), &m.slice(new, new_len)?)?;
        retry(|| rustix::fs::linkat(&b1, l1.as_slice(), &b2, l2.as_slice(), AtFlags::empty()))
    }

    pub(crate) fn path_readlink(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        path: u32,
        len: u32,
        buf: u32,
        buf_len: u32,
        used: u32,
    ) -> Result<()> {
        let dir = self.dir(fd, rights::PATH_READLINK)?;
        let (base, last) = fs::parent(dir.fd.as_fd(), &m.slice(path, len)?)?;
        let target = retry(|| rustix::fs::readlinkat(&base, last.as_slice(), Vec::new()))?;
        let target = target.as_bytes();
        let n = target.len().min(buf_len as usize);
        m.write(buf, &target[..n])?;
        m.set_size(used, n)
    }

    pub(crate) fn path_filestat_get(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        lookup: u32,
        path: u32,
        len: u32,
        out: u32,
    ) -> Result<()> {
        let st = self.stat_at(fd, lookup, &m.slice(path, len)?)?;
        m.write(out, &filestat(&st))
    }

    /// `path_filestat_get` without guest memory: the host's stat.
    pub(crate) fn stat_at(&self, fd: u32, lookup: u32, path: &[u8]) -> Result<rustix::fs::Stat> {
        let dir = self.dir(fd, rights::PATH_FILESTAT_GET)?;
        if lookup & abi::LOOKUP_SYMLINK_FOLLOW != 0 {
            let file = fs::open(dir.fd.as_fd(), path, OFlags::PATH, Mode::empty())?;
            retry(|| rustix::fs::fstat(&file))
        } else {
            let (base, last) = fs::parent(dir.fd.as_fd(), path)?;
            retry(|| rustix::fs::statat(&base, last.as_slice(), AtFlags::SYMLINK_NOFOLLOW))
        }
    }

    /// The host descriptor of `fd` (a file or a directory) if it has every right in `needed`.
    pub(crate) fn fs_fd(&self, fd: u32, needed: u64) -> Result<BorrowedFd<'_>> {
        match &self.entry(fd, needed)?.desc {
            Desc::File(f) => Ok(f.as_fd()),
            Desc::Dir(d) => Ok(d.fd.as_fd()),
            _ => Err(Errno::BADF),
        }
    }

    pub(crate) fn path_filestat_set_times(
        &mut self,
        m: &mut GuestMemory<'_>,
        fd: u32,
        lookup: u32,
        path: u32,
        len: u32,
        atim: u64,
        mtim: u64,
        flags: u32,
    ) -> Result<()> {
        let times = timestamps(atim, mtim, flags as u16)?;
        let dir = self.dir(fd, rights::PATH_FILESTAT_SET_TIMES)?;
        let follow = lookup & abi::LOOKUP_SYMLINK_FOLLOW != 0;
        let (base, last) = fs::resolve(dir.fd.as_fd(), &m.slice(path, len)?, follow)?;
        retry(|| rustix::fs::utimensat(&base, last.as_slice(), &times, AtFlags::SYMLINK_NOFOLLOW))
    }

    // --- polling -----------------------------------------------------------------------------

    pub(crate) fn poll_oneoff(
        &mut self,
        m: &mut GuestMemory<'_>,
        subs: u32,
        events: u32,
        n: u32,
        nevents: u32,
    ) -> Result<()> {
        if n == 0 {
            return Err(Errno::INVAL);
        }
        let in_bytes = n.checked_mul(SUBSCRIPTION_SIZE).ok_or(Errno::FAULT)?;
        m.slice(subs, in_bytes)?;
        m.slice(events, n.checked_mul(EVENT_SIZE).ok_or(Errno::FAULT)?)?;
        let mut parsed = Vec::with_capacity(n as usize);
        for i in 0..n {
            let s = subs + i * SUBSCRIPTION_SIZE;
            let (userdata, tag) = (m.u64(s)?, m.u8(s + 8)?);
            let sub = match tag {
                eventtype::CLOCK => {
                    let id = clock(m.u32(s + 16)?)?;
                    let timeout = m.u64(s + 24)?;
                    let absolute = m.u16(s + 40)? & abi::SUBSCRIPTION_CLOCK_ABSTIME != 0;
                    let now = nanos(rustix::time::clock_gettime(id));
                    Sub::Clock(if absolute {
                        timeout.saturating_sub(now)
                    } else {
                        timeout
                    })
                }
                eventtype::FD_READ | eventtype::FD_WRITE => {
                    let fd = m.u32(s + 16)?;
                    let read = tag == eventtype::FD_READ;
                    match self.poll_target(fd, read) {
                        Ok(sub) => sub,
                        Err(e) => Sub::Failed(e),
                    }
                }
                _ => return Err(Errno::INVAL),
            };
            parsed.push((userdata, tag, sub));
        }
        // Immediate results first; wait only when there are none.
        let ready_now = parsed
            .iter()
            .any(|(_, _, s)| matches!(s, Sub::Ready(_) | Sub::Failed(_) | Sub::Clock(0)));
        let timeout = parsed
            .iter()
            .filter_map(|(_, _, s)| match s {
                Sub::Clock(t) => Some(*t),
                _ => None,
            })
            .min();
        let mut waits: Vec<rustix::event::PollFd<'_>> = parsed
            .iter()
            .filter_map(|(_, _, s)| match s {
                Sub::Wait(fd, read) => Some(rustix::event::PollFd::new(
                    fd,
                    if *read {
                        rustix::event::PollFlags::IN
                    } else {
                        rustix::event::PollFlags::OUT
                    },
                )),
                _ => None,
            })
            .collect();
        let start = rustix::time::clock_gettime(ClockId::Monotonic);
        if !ready_now {
            let limit = timeout.map(timespec);
            if waits.is_empty() {
                if let Some(t) = &limit {
                    // Cut short by a signal (the runtime's interrupt: the deadline passed, and
                    // the guest stops as this returns), it reports only what is due.
                    let _ = rustix::thread::nanosleep(t);
                }
            } else {
                retry(|| rustix::event::poll(&mut waits, limit.as_ref()))?;
            }
        }
        let elapsed =
            nanos(rustix::time::clock_gettime(ClockId::Monotonic)).saturating_sub(nanos(start));
        let mut revents = waits.iter().map(|w| w.revents());
        let mut written = 0u32;
        for (userdata, tag, sub) in &parsed {
            let (error, nbytes, flags) = match sub {
                Sub::Clock(t) if *t <= elapsed => (Errno::SUCCESS, 0, 0),
                Sub::Clock(_) => continue,
                Sub::Ready(bytes) => (Errno::SUCCESS, *bytes, 0),
                Sub::Failed(e) => (*e, 0, 0),
                Sub::Wait(..) => {
                    let r = revents.next().expect("one per wait");
                    if r.is_empty() {
                        continue;
                    }
                    let hangup = r.contains(rustix::event::PollFlags::HUP);
                    (
                        Errno::SUCCESS,
                        0,
                        if hangup {
                            abi::EVENT_FD_READWRITE_HANGUP
                        } else {
                            0
                        },
                    )
                }
            };
            let mut e = [0u8; EVENT_SIZE as usize];
            e[0..8].copy_from_slice(&userdata.to_le_bytes()); // userdata
            e[8..10].copy_from_slice(&error.0.to_le_bytes()); // error
            e[10] = *tag; // type
            e[16..24].copy_from_slice(&nbytes.to_le_bytes()); // fd_readwrite.nbytes
            e[24..26].copy_from_slice(&flags.to_le_bytes()); // fd_readwrite.flags
            m.write(events + written * EVENT_SIZE, &e)?;
            written += 1;
        }
        m.set_u32(nevents, written)
    }

    /// What polling `fd` for reading (or writing) waits on.
    fn poll_target(&self, fd: u32, read: bool) -> Result<Sub> {
        let entry = self.entry(fd, rights::POLL_FD_READWRITE)?;
        let inherited = |host: BorrowedFd<'static>| Sub::Wait(host, read);
        Ok(match &entry.desc {
            Desc::Stdin => match self.stdin() {
                Input::Inherit => inherited(host_stdin()),
                Input::Bytes(b) => Sub::Ready((b.len() - self.stdin_pos) as u64),
            },
            Desc::Stdout if matches!(self.stdout.kind, Output::Inherit) => {
                inherited(host_output(false))
            }
            Desc::Stderr if matches!(self.stderr.kind, Output::Inherit) => {
                inherited(host_output(true))
            }
            Desc::Stdout | Desc::Stderr | Desc::File(_) => Sub::Ready(0),
            Desc::Dir(_) => return Err(Errno::BADF),
        })
    }

    pub(crate) fn sock_unsupported(&mut self, _m: &mut GuestMemory<'_>) -> Result<()> {
        Err(Errno::NOTSUP)
    }
}
