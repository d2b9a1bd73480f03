//! A WASI context (arguments, environment, stdio, descriptor table) and the builder that is
//! its template.
//!
//! Cost per invocation is the design constraint: a service builds one context per fresh
//! instance. So the builder does the work once (it encodes arguments and environment into one
//! shared buffer each, opens preopened directories once and shares their descriptors), and
//! [`WasiCtxBuilder::build`] only clones reference counts and allocates the descriptor table:
//! one allocation, no system call.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use ephem_runtime::Shared;

use crate::abi::{Errno, rights};
use crate::mem::{GuestMemory, Result};

/// A template's arguments, environment and standard input, which its contexts share.
#[derive(Clone)]
pub(crate) struct Fixed {
    pub(crate) args: Strings,
    pub(crate) env: Strings,
    pub(crate) stdin: Input,
}

impl Fixed {
    /// Standard input: a context's own (`own`), else this template's.
    pub(crate) fn stdin_or<'a>(&'a self, own: &'a Option<Input>) -> &'a Input {
        own.as_ref().unwrap_or(&self.stdin)
    }
}

/// NUL-terminated strings back to back, as `args_get` and `environ_get` hand them out.
#[derive(Clone, Default)]
pub(crate) struct Strings {
    pub(crate) bytes: Vec<u8>,
    pub(crate) count: usize,
}

impl Strings {
    /// `args_get`/`environ_get`: the strings at `buf`, a pointer to each at `ptrs`.
    pub(crate) fn get(&self, m: &mut GuestMemory<'_>, ptrs: u32, buf: u32) -> Result<()> {
        m.write(buf, &self.bytes)?;
        let mut offset = 0u32;
        for (i, s) in self.bytes.split_inclusive(|&b| b == 0).enumerate() {
            m.set_u32(ptrs.wrapping_add(4 * i as u32), buf.wrapping_add(offset))?;
            offset += s.len() as u32;
        }
        Ok(())
    }

    /// `args_sizes_get`/`environ_sizes_get`: how many, and their bytes with the NULs.
    pub(crate) fn sizes_get(&self, m: &mut GuestMemory<'_>, count: u32, size: u32) -> Result<()> {
        m.set_size(count, self.count)?;
        m.set_size(size, self.bytes.len())
    }

    fn push(&mut self, s: &[u8]) -> std::result::Result<(), BuildError> {
        if s.contains(&0) {
            return Err(BuildError::Nul(String::from_utf8_lossy(s).into_owned()));
        }
        self.bytes.extend_from_slice(s);
        self.bytes.push(0);
        self.count += 1;
        Ok(())
    }
}

/// Where the guest's standard input comes from.
#[derive(Clone, Debug)]
pub enum Input {
    /// The host process's standard input.
    Inherit,
    /// These bytes, then end of file.
    Bytes(Arc<[u8]>),
}

/// Where the guest's standard output or error goes.
#[derive(Clone, Copy, Debug)]
pub enum Output {
    /// The host process's descriptor.
    Inherit,
    /// Into the context's buffer (read with [`WasiCtx::stdout`] / [`WasiCtx::stderr`]), at most
    /// this many bytes: a write past the bound writes what fits and then fails with `ENOSPC`.
    Capture(usize),
    /// Into the context's buffer, the first this many bytes; the rest is dropped and counted
    /// ([`WasiCtx::stderr_dropped`]) while writes succeed: for diagnostics, whose volume should
    /// not make the program fail.
    Head(usize),
    /// Nowhere; writes succeed.
    Discard,
}

/// How much a preopened directory allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirPerms {
    /// Read, list, stat and open files for reading only.
    ReadOnly,
    /// Also create, write, rename, link and remove.
    ReadWrite,
}

/// A context could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Arguments and environment are C strings for the guest.
    #[error("`{0}` contains a NUL byte")]
    Nul(String),
    /// An environment variable's name.
    #[error("environment variable name `{0}` is empty or contains `=`")]
    EnvName(String),
    /// A directory to preopen.
    #[error("cannot open directory {path}: {source}")]
    Dir {
        /// The host path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Clone)]
struct Preopen {
    fd: Arc<OwnedFd>,
    guest: Arc<str>,
    perms: DirPerms,
}

/// The template of a [`WasiCtx`]: arguments, environment, stdio and preopened directories.
/// Build it once; [`WasiCtxBuilder::build`] makes a context per invocation cheaply.
#[derive(Clone)]
pub struct WasiCtxBuilder {
    /// What every context built from this template reads and never changes: one reference per
    /// context, counted in the building thread's shard (a [`Shared`] borrow), so that threads
    /// building contexts from one template write no common count.
    fixed: Shared<Fixed>,
    stdout: Output,
    stderr: Output,
    preopens: Vec<Preopen>,
}

impl Default for WasiCtxBuilder {
    fn default() -> Self {
        WasiCtxBuilder::new()
    }
}

impl WasiCtxBuilder {
    /// No arguments, no environment, no directories; stdin empty, stdout and stderr discarded.
    pub fn new() -> WasiCtxBuilder {
        WasiCtxBuilder {
            fixed: Shared::new(Fixed {
                args: Strings::default(),
                env: Strings::default(),
                stdin: Input::Bytes(Arc::from([])),
            }),
            stdout: Output::Discard,
            stderr: Output::Discard,
            preopens: Vec::new(),
        }
    }

    /// Appends an argument (the first is the program's name, by convention).
    pub fn arg(&mut self, arg: impl AsRef<[u8]>) -> std::result::Result<&mut Self, BuildError> {
        Shared::make_mut(&mut self.fixed).args.push(arg.as_ref())?;
        Ok(self)
    }

    /// Appends arguments.
    pub fn args<A: AsRef<[u8]>>(
        &mut self,
        args: impl IntoIterator<Item = A>,
    ) -> std::result::Result<&mut Self, BuildError> {
        for a in args {
            self.arg(a)?;
        }
        Ok(self)
    }

    /// Sets an environment variable (appended; the guest sees them in this order).
    pub fn env(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> std::result::Result<&mut Self, BuildError> {
        let (key, value) = (key.as_ref(), value.as_ref());
        if key.is_empty() || key.contains(&b'=') {
            return Err(BuildError::EnvName(
                String::from_utf8_lossy(key).into_owned(),
            ));
        }
        Shared::make_mut(&mut self.fixed)
            .env
            .push(&[key, b"=", value].concat())?;
        Ok(self)
    }

    /// Standard input, output and error of the host process.
    pub fn inherit_stdio(&mut self) -> &mut Self {
        Shared::make_mut(&mut self.fixed).stdin = Input::Inherit;
        self.stdout = Output::Inherit;
        self.stderr = Output::Inherit;
        self
    }

    /// Where standard input comes from (per context: see also [`WasiCtx::set_stdin`]).
    pub fn stdin(&mut self, input: Input) -> &mut Self {
        Shared::make_mut(&mut self.fixed).stdin = input;
        self
    }

    /// Where standard output goes.
    pub fn stdout(&mut self, output: Output) -> &mut Self {
        self.stdout = output;
        self
    }

    /// Where standard error goes.
    pub fn stderr(&mut self, output: Output) -> &mut Self {
        self.stderr = output;
        self
    }

    /// Opens `host` now and lets the guest use it as `guest` (e.g. `.` or `/data`): the guest
    /// reaches nothing outside it (see `fs`). Descriptors 3, 4, … in the order added.
    pub fn preopened_dir(
        &mut self,
        host: impl AsRef<Path>,
        guest: &str,
        perms: DirPerms,
    ) -> std::result::Result<&mut Self, BuildError> {
        let host = host.as_ref();
        let fd = rustix::fs::open(
            host,
            rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| BuildError::Dir {
            path: host.display().to_string(),
            source: e.into(),
        })?;
        self.preopens.push(Preopen {
            fd: Arc::new(fd),
            guest: guest.into(),
            perms,
        });
        Ok(self)
    }

    /// A context from this template: clones of shared buffers and descriptors, one allocation.
    pub fn build(&self) -> WasiCtx {
        let mut fds = Vec::with_capacity(3 + self.preopens.len() + SPARE_FDS);
        let stdio = |desc| Some(Entry::new(desc, rights::STDIO, 0));
        fds.extend([stdio(Desc::Stdin), stdio(Desc::Stdout), stdio(Desc::Stderr)]);
        fds.extend(self.preopens.iter().map(|p| {
            let (base, inheriting) = dir_rights(p.perms);
            Some(Entry::new(
                Desc::Dir(Dir {
                    fd: p.fd.clone(),
                    preopen: Some(p.guest.clone()),
                    perms: p.perms,
                    listing: None,
                }),
                base,
                inheriting,
            ))
        }));
        WasiCtx {
            fixed: self.fixed.borrow(),
            fds,
            stdin: None,
            stdin_pos: 0,
            stdout: Sink::new(self.stdout),
            stderr: Sink::new(self.stderr),
            p2: Default::default(),
        }
    }
}

/// The most descriptors a guest may hold open (each may be a host descriptor).
pub const MAX_FDS: usize = 1024;

/// Room in a fresh descriptor table for files the guest opens before it must grow.
const SPARE_FDS: usize = 4;

/// Rights (base, inheriting) of a directory with `perms`.
pub(crate) fn dir_rights(perms: DirPerms) -> (u64, u64) {
    match perms {
        DirPerms::ReadWrite => (rights::DIR, rights::DIR | rights::FILE),
        DirPerms::ReadOnly => {
            let dir = rights::DIR & !(rights::DIR_CHANGES | rights::FD_FILESTAT_SET_TIMES);
            let file = rights::FILE
                & !(rights::WRITE | rights::FD_FILESTAT_SET_TIMES | rights::FD_FILESTAT_SET_SIZE);
            (dir, dir | file)
        }
    }
}

/// A captured or inherited output stream.
pub(crate) struct Sink {
    pub(crate) kind: Output,
    pub(crate) buf: Vec<u8>,
    /// Bytes an [`Output::Head`] dropped.
    pub(crate) dropped: u64,
}

impl Sink {
    fn new(kind: Output) -> Sink {
        Sink {
            kind,
            buf: Vec::new(),
            dropped: 0,
        }
    }
}

/// One open descriptor of the guest's.
pub(crate) struct Entry {
    pub(crate) desc: Desc,
    pub(crate) rights: u64,
    pub(crate) inheriting: u64,
}

/// The entry of `fd` in `fds`, if it has every right in `needed` (a function of the table
/// alone, for callers that borrow the context's other fields at the same time).
pub(crate) fn lookup(fds: &[Option<Entry>], fd: u32, needed: u64) -> Result<&Entry> {
    let entry = fds
        .get(fd as usize)
        .and_then(Option::as_ref)
        .ok_or(Errno::BADF)?;
    entry.allows(needed)?;
    Ok(entry)
}

impl Entry {
    /// `Ok` if the entry has every right in `needed`.
    pub(crate) fn allows(&self, needed: u64) -> Result<()> {
        match self.rights & needed == needed {
            true => Ok(()),
            false => Err(Errno::NOTCAPABLE),
        }
    }

    pub(crate) fn new(desc: Desc, rights: u64, inheriting: u64) -> Entry {
        Entry {
            desc,
            rights,
            inheriting,
        }
    }
}

pub(crate) enum Desc {
    Stdin,
    Stdout,
    Stderr,
    File(OwnedFd),
    Dir(Dir),
}

pub(crate) struct Dir {
    /// Shared between contexts for preopens: only ever used as the base of `*at` calls.
    pub(crate) fd: Arc<OwnedFd>,
    /// The guest's name for a preopened directory.
    pub(crate) preopen: Option<Arc<str>>,
    pub(crate) perms: DirPerms,
    /// An open listing for `fd_readdir`, kept between calls.
    pub(crate) listing: Option<Listing>,
}

/// A directory listing in progress: `fd_readdir` continues it when the guest asks for the
/// entries after the last one it was given (or after the one before, when that was cut short).
pub(crate) struct Listing {
    pub(crate) dir: rustix::fs::Dir,
    /// How many entries have been read from `dir`: the cookie of the last one.
    pub(crate) read: u64,
    /// The last entry read, as the guest receives it, when it did not fit whole.
    pub(crate) cut: Option<Vec<u8>>,
}

/// The state of WASI for one instance (or several linked in one store).
pub struct WasiCtx {
    pub(crate) fixed: Shared<Fixed>,
    pub(crate) fds: Vec<Option<Entry>>,
    /// Standard input set for this context alone ([`WasiCtx::set_stdin`]), in place of the
    /// template's.
    pub(crate) stdin: Option<Input>,
    pub(crate) stdin_pos: usize,
    pub(crate) stdout: Sink,
    pub(crate) stderr: Sink,
    /// WASI 0.2's pollables, streams and HTTP objects (none until a component asks for one).
    pub(crate) p2: crate::p2::State,
}

impl WasiCtx {
    /// A builder (the template of contexts).
    pub fn builder() -> WasiCtxBuilder {
        WasiCtxBuilder::new()
    }

    /// Where standard input comes from: this context's own, else the template's.
    pub(crate) fn stdin(&self) -> &Input {
        self.fixed.stdin_or(&self.stdin)
    }

    /// Feeds these bytes to the guest as standard input, from the start.
    pub fn set_stdin(&mut self, bytes: impl Into<Arc<[u8]>>) {
        self.stdin = Some(Input::Bytes(bytes.into()));
        self.stdin_pos = 0;
    }

    /// What the guest wrote to standard output, when it is captured.
    pub fn stdout(&self) -> &[u8] {
        &self.stdout.buf
    }

    /// What the guest wrote to standard error, when it is captured.
    pub fn stderr(&self) -> &[u8] {
        &self.stderr.buf
    }

    /// Bytes written to standard output past an [`Output::Head`] bound, and dropped.
    pub fn stdout_dropped(&self) -> u64 {
        self.stdout.dropped
    }

    /// Bytes written to standard error past an [`Output::Head`] bound, and dropped.
    pub fn stderr_dropped(&self) -> u64 {
        self.stderr.dropped
    }

    /// Takes the captured standard output, leaving it empty.
    pub fn take_stdout(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.stdout.buf)
    }

    /// Takes the captured standard error, leaving it empty.
    pub fn take_stderr(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.stderr.buf)
    }

    /// The entry of `fd`, if it has every right in `needed`.
    pub(crate) fn entry(&self, fd: u32, needed: u64) -> Result<&Entry> {
        lookup(&self.fds, fd, needed)
    }

    /// The directory `fd`, if it has every right in `needed`.
    pub(crate) fn dir(&self, fd: u32, needed: u64) -> Result<&Dir> {
        let entry = self.entry(fd, 0)?;
        let Desc::Dir(dir) = &entry.desc else {
            return Err(Errno::NOTDIR);
        };
        entry.allows(needed)?;
        Ok(dir)
    }

    /// Puts `entry` at the lowest free descriptor.
    pub(crate) fn push(&mut self, entry: Entry) -> Result<u32> {
        let fd = match self.fds.iter().position(Option::is_none) {
            Some(free) => {
                self.fds[free] = Some(entry);
                free
            }
            None if self.fds.len() >= MAX_FDS => return Err(Errno::MFILE),
            None => {
                self.fds.push(Some(entry));
                self.fds.len() - 1
            }
        };
        u32::try_from(fd).map_err(|_| Errno::MFILE)
    }
}
