//! An open artifact: its header checked, its metadata decoded, the rest left in the file.
//! [`Artifact`] is a handle: the cache keeps a thread's recent entries open, and opening one of
//! them again hands out another handle without reading anything (see [`crate::Cache`]).
//!
//! Opening reads the header, the metadata and the segment data no image holds with one or two
//! `pread`s (one for a file this process opened before: it remembers how much to read) and
//! reads the metadata in place; they grow with the module's declarations (types, imports,
//! exports, eager functions, segments neither an image nor a lazy table holds), not with its
//! code, its functions, its lazy tables or the segments its images hold. The text is read straight into a code slot or mapped from the
//! file, memory images are mapped or read straight into linear memory; the function table, the
//! names and the trap table are read on the first trap, an image's spans when a memory that may
//! hold data takes it. No mapping of the whole file is made: mapping and unmapping it, and
//! faulting its pages in, cost more than the reads.
//!
//! # Verification
//! The header is checked on every open (magic, format, ephem version, length, section bounds).
//! The seal (a keyed hash of the whole file, see [`crate::ArtifactKey`]), the metadata (every
//! index and range the runtime reads, [`ephem_module::ModuleInfo::check`] and the tables here)
//! and the CPU features are checked once per file identity (device, inode, size, modification
//! time) and key per process, and the identity remembered. Hashing a multi-megabyte artifact on
//! every invocation would cost more than everything else in the fresh path.
//!
//! Remembering an identity is sound only for a file that nobody changes in place: the cache
//! writes its entries read-only and replaces them only by rename (a new file is a new identity).
//! A file that another user could write, or that has a write permission bit set, is *snapshotted*
//! instead: copied into a sealed memory file, which nobody can change, and verified on every
//! open. So code and images are only ever mapped from files that this user (or root) made
//! read-only, and a guest fault reading such a file after it was truncated anyway (`SIGBUS`) is
//! reported as an I/O error naming the file (see the runtime), not as a guest trap.
//!
//! Without the key the metadata checks still run ([`Artifact::open_unverified`]): they keep a
//! damaged or forged file from making the runtime read out of bounds, but only the key vouches
//! for the machine code and for what only the code knows (its vmctx layout, its types).
//! Artifacts made in memory by this process ([`Artifact::from_compiled`]) are not checked.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use ephem_module::{
    ArchivedModuleInfo, ArchivedReloc, ArchivedTarget, CompiledModule, FuncLoc, TrapKind,
};
use rkyv::rend::u32_le;
use rkyv::util::AlignedVec;

use crate::format::{
    ArchivedMemoryImage, ArchivedMeta, EPHEM_VERSION, FILE_PAGE, FORMAT_VERSION, HEADER_SIZE,
    MAGIC, Section, TRAP_BLOCK, off,
};
use crate::key::KeyId;
use crate::{ArtifactKey, Error, cpu};

/// How much of the file the first read takes: the header and, for most modules, the metadata
/// and function table behind it.
const FIRST_READ: usize = 4 << 10;

/// A compiled module in a file (or a memory file), ready to load. A handle: clones share the
/// open file, the bytes read on open and the tables read later (the cache keeps entries open
/// this way, see [`crate::Cache`]).
#[derive(Clone)]
pub struct Artifact(Arc<Opened>);

/// What an [`Artifact`] handle shares.
struct Opened {
    /// Shared with memory slots that keep this artifact's image mapped (see
    /// [`Artifact::shared_file`]).
    file: Arc<File>,
    /// Where it was opened from (for errors), if from a path.
    path: Option<PathBuf>,
    file_len: u64,
    sections: [Range<u64>; Section::ALL.len()],
    /// The file's first bytes: header, metadata (an archive, read in place), segment data (and
    /// everything up to the end of a small module's text).
    front: AlignedVec<16>,
    /// The trap table, read on first use.
    traps: OnceLock<Vec<u8>>,
    /// The trap table's index (see the format), read on the first trap.
    trap_index: OnceLock<Vec<u8>>,
    /// The images' spans, read on first use.
    spans: OnceLock<Vec<u8>>,
    /// The function table and the names, read on first use.
    funcs: OnceLock<Vec<u8>>,
    names: OnceLock<Vec<u8>>,
    /// The canonical type ids a runtime's engine gave the module's types, with the id of that
    /// engine (see [`Artifact::type_ids`]).
    type_ids: OnceLock<(u64, Arc<[u32]>)>,
    /// Last access time (seconds) when opened, for the cache's eviction order.
    accessed: i64,
    identity: Identity,
    /// Read from a sealed copy of a file that others could change (see the module docs).
    snapshot: bool,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("bytes", &self.0.file_len)
            .field("text", &self.text_len())
            .field("images", &self.meta().images.len())
            .finish()
    }
}

/// What identifies a file's contents: device, inode, size and modification time. Used to
/// remember that a file's seal was verified, and by the runtime to recognise a memory image
/// it already has mapped (a live mapping keeps its inode from being reused).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: i64,
    mtime_ns: i64,
}

impl Identity {
    /// The identity of the file `stat` describes.
    pub fn of(stat: &rustix::fs::Stat) -> Identity {
        Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mtime: stat.st_mtime,
            mtime_ns: stat.st_mtime_nsec as i64,
        }
    }

    /// The identity as plain words (device, inode, size, modification time in seconds and
    /// nanoseconds), for keys of other crates.
    pub fn words(&self) -> [u64; 5] {
        [
            self.dev,
            self.ino,
            self.size as u64,
            self.mtime as u64,
            self.mtime_ns as u64,
        ]
    }
}

/// Files verified in this process (seal under the key, or `None` when opened unverified;
/// metadata; CPU), with how many bytes opening them reads: the next open of the same identity
/// reads exactly that much, with one `pread`.
type Verified = HashMap<(Identity, Option<KeyId>), usize, foldhash::fast::RandomState>;
static VERIFIED: LazyLock<Mutex<Verified>> = LazyLock::new(Mutex::default);

/// Whether a file owned by `uid` belongs to this process's user or root: whoever owns a file
/// can change its permissions, so only such files can be trusted to stay as they are (the
/// effective user id is asked once).
pub(crate) fn ours_or_roots(uid: u32) -> bool {
    static EUID: OnceLock<u32> = OnceLock::new();
    uid == 0 || uid == *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Whether nobody but this user or root can change the file in place: no write permission bit,
/// and owned by this user or root (the owner could add one).
fn unchangeable(stat: &rustix::fs::Stat) -> bool {
    stat.st_mode & 0o222 == 0 && ours_or_roots(stat.st_uid)
}

/// A sealed memory file holding what `file` holds now: nobody can write, grow or shrink it.
fn snapshot(file: &File) -> Result<File, Error> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "ephem-artifact-snapshot",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )
    .map_err(std::io::Error::from)?;
    // SAFETY: `fd` is a fresh descriptor we own; the File takes ownership of it.
    let mut copy = unsafe { File::from_raw_fd(fd.into_raw_fd()) };
    let mut reader = file;
    rustix::fs::seek(reader, rustix::fs::SeekFrom::Start(0)).map_err(std::io::Error::from)?;
    std::io::copy(&mut reader, &mut copy)?;
    rustix::fs::fcntl_add_seals(
        &copy,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )
    .map_err(std::io::Error::from)?;
    Ok(copy)
}

fn damaged(why: impl Into<String>) -> Error {
    Error::Damaged(why.into())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// How many entries the names section has (its first word), checked against its length.
fn names_count(names: &[u8]) -> Result<usize, Error> {
    if names.is_empty() {
        return Ok(0);
    }
    let count = names.get(..4).map(|b| u32_at(b, 0) as usize);
    count
        .filter(|&n| n <= (names.len() - 4) / 12)
        .ok_or_else(|| damaged("the names section is shorter than its count says"))
}

/// Where the names' bytes start in a names section of `count` entries.
fn names_base(count: usize) -> usize {
    4 + count * 12
}

/// Entry `k` of the names section: function, and the range of its name's bytes in the section
/// (of `count` entries).
fn name_entry(names: &[u8], count: usize, k: usize) -> (u32, Range<usize>) {
    let at = 4 + k * 12;
    let base = names_base(count);
    let (start, end) = (
        u32_at(names, at + 4) as usize,
        u32_at(names, at + 8) as usize,
    );
    (u32_at(names, at), base + start..base + end)
}

/// Bytes of one entry of the function table: code offset, then function (0 = the first
/// defined one). Each function's code reaches to the next one's, the last one's to the end of
/// the machine code (the compiler puts the trampolines and host adapters first, and nothing but
/// padding between functions).
const FUNC_ENTRY: usize = 8;

/// Entry `k` of the function `table`: its function and where its code is, up to the next
/// entry's code (the last one's up to `code_len`; the length wraps when entries are out of
/// order, which the full check refuses).
fn func_entry(table: &[[u8; FUNC_ENTRY]], k: usize, code_len: u32) -> (u32, FuncLoc) {
    let offset = u32_at(&table[k], 0);
    let end = table.get(k + 1).map_or(code_len, |next| u32_at(next, 0));
    let loc = FuncLoc {
        offset,
        len: end.wrapping_sub(offset),
    };
    (u32_at(&table[k], 4), loc)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether `bytes` start like an artifact (to tell one from a wasm file): the magic, or a
/// header that is an artifact's in all but a damaged magic (so that opening it reports the
/// damage, rather than the bytes being read as wasm or text).
pub fn is_artifact(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC) || looks_like_artifact(bytes)
}

/// An artifact header with a damaged magic: at most two of its bytes differ, or the format and
/// ephem version fields that follow it are intact.
fn looks_like_artifact(h: &[u8]) -> bool {
    let Some(magic) = h.get(off::MAGIC..off::MAGIC + 8) else {
        return false;
    };
    let differ = magic.iter().zip(&MAGIC).filter(|(a, b)| a != b).count();
    let version = EPHEM_VERSION.as_bytes();
    let fields_intact = h.get(off::FORMAT..off::FORMAT + 4) == Some(&FORMAT_VERSION.to_le_bytes())
        && h.get(off::VERSION..off::VERSION + version.len()) == Some(version);
    differ <= 2 || fields_intact
}

/// Front buffers of dropped artifacts, kept per thread for the next opens: a buffer of tens of
/// KiB, allocated and freed on every invocation, costs more in the allocator (which coalesces
/// such chunks on free) than the read that fills it.
mod spare {
    use std::cell::RefCell;

    use rkyv::util::AlignedVec;

    /// Buffers kept per thread.
    const KEEP: usize = 4;
    /// Larger buffers are freed: a module that big is rare, and its open costs far more.
    const MAX_BYTES: usize = 1 << 20;

    thread_local! {
        static FRONTS: RefCell<Vec<AlignedVec<16>>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty buffer, with the capacity an earlier artifact left if any.
    pub(super) fn take() -> AlignedVec<16> {
        FRONTS
            .try_with(|f| f.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Keeps `front` for a later [`take`] (its bytes are dropped).
    pub(super) fn give_back(mut front: AlignedVec<16>) {
        if front.capacity() == 0 || front.capacity() > MAX_BYTES {
            return;
        }
        front.clear();
        // During thread exit the buffer is simply freed.
        let _ = FRONTS.try_with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(front);
            }
        });
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        spare::give_back(std::mem::take(&mut self.front));
    }
}

/// Reads the file's bytes from `front.len()` up to `end` onto the end of `front`, into its spare
/// capacity: zeroing a buffer that is about to be overwritten costs as much as a third of the
/// read.
fn read_front(file: &File, front: &mut AlignedVec<16>, end: usize) -> Result<(), Error> {
    front.reserve(end.saturating_sub(front.len()));
    while front.len() < end {
        let at = front.len();
        // SAFETY: `reserve` made room for `end` bytes; the spare part is only written.
        let spare = unsafe {
            std::slice::from_raw_parts_mut(
                front
                    .as_mut_ptr()
                    .add(at)
                    .cast::<std::mem::MaybeUninit<u8>>(),
                end - at,
            )
        };
        let (read, _) = rustix::io::pread(file, spare, at as u64).map_err(std::io::Error::from)?;
        if read.is_empty() {
            return Err(damaged("shorter than its header says"));
        }
        // SAFETY: `pread` initialised the `read.len()` bytes after `at`.
        unsafe { front.set_len(at + read.len()) };
    }
    Ok(())
}

/// The kind of the trap at code `offset` among sorted trap table `entries`.
fn trap_in(entries: &[u8], offset: u32) -> Option<TrapKind> {
    let (entries, _) = entries.as_chunks::<8>();
    let k = entries
        .binary_search_by_key(&offset, |e| u32_at(e, 0))
        .ok()?;
    TrapKind::from_code(u32_at(&entries[k], 4))
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), Error> {
    file.read_exact_at(buf, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => damaged("shorter than its header says"),
        _ => Error::Io(e),
    })
}

impl Artifact {
    /// Opens the artifact at `path` for execution: it must be sealed under `key`. Its metadata
    /// and CPU features are checked too (see the module documentation).
    pub fn open(path: &Path, key: &ArtifactKey) -> Result<Artifact, Error> {
        Artifact::open_with(path.to_owned(), Some(key), false)
    }

    /// Opens the artifact at `path` without checking its seal: its metadata is checked, so a
    /// damaged file is refused, but its machine code is run as it is.
    ///
    /// # Safety
    /// The caller vouches that the file's machine code is what ephem compiled for it (that
    /// nobody could have written it but a trusted compiler): running forged code is running
    /// an arbitrary native program.
    pub unsafe fn open_unverified(path: &Path) -> Result<Artifact, Error> {
        Artifact::open_with(path.to_owned(), None, false)
    }

    /// Opens `path` (never blocking on a FIFO; with `nofollow`, not through a symlink), then as
    /// [`Artifact::open`], or unverified without a key.
    pub(crate) fn open_with(
        path: PathBuf,
        key: Option<&ArtifactKey>,
        nofollow: bool,
    ) -> Result<Artifact, Error> {
        use rustix::fs::OFlags;
        let mut flags = OFlags::NONBLOCK;
        if nofollow {
            flags |= OFlags::NOFOLLOW;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(&path)?;
        Artifact::from_opened(file, path, key)
    }

    /// As [`Artifact::open_with`], for `file`, already opened from `path`.
    pub(crate) fn from_opened(
        file: File,
        path: PathBuf,
        key: Option<&ArtifactKey>,
    ) -> Result<Artifact, Error> {
        Artifact::from_file(file, Some(path), Some(key))
    }

    /// Serialises `compiled` into an anonymous memory file and opens that: a module compiled
    /// in this process takes exactly the path of one read from disk (its memory images are
    /// mapped copy-on-write from the memory file).
    pub fn from_compiled(compiled: &CompiledModule) -> Result<Artifact, Error> {
        let unsealed = ArtifactKey::from_bytes([0; 32]);
        Artifact::in_memory(&crate::to_bytes(compiled, &[0; 32], &unsealed))
    }

    /// Opens artifact bytes this process wrote, through a memory file (not checked: see the
    /// module documentation).
    pub(crate) fn in_memory(bytes: &[u8]) -> Result<Artifact, Error> {
        let fd = rustix::fs::memfd_create("ephem-artifact", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        // SAFETY: `fd` is a fresh descriptor we own; the File takes ownership of it.
        let mut file = unsafe { File::from_raw_fd(fd.into_raw_fd()) };
        file.write_all(bytes)?;
        Artifact::from_file(file, None, None)
    }

    /// Opens the artifact in `file`. `check`: `None` for bytes this process wrote (nothing is
    /// checked but the header); else the key to verify the seal with (`Some(None)`: the
    /// metadata only), unless this file identity and key were verified before.
    fn from_file(
        file: File,
        path: Option<PathBuf>,
        check: Option<Option<&ArtifactKey>>,
    ) -> Result<Artifact, Error> {
        let mut file = file;
        let mut stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(damaged("not a regular file"));
        }
        // A file someone could change in place is read from a snapshot, verified every time
        // (never remembered).
        let remember = check.is_some() && unchangeable(&stat);
        if check.is_some() && !remember {
            file = snapshot(&file)?;
            stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        }
        let file_len = u64::try_from(stat.st_size).map_err(|_| damaged("impossible size"))?;
        let identity = Identity::of(&stat);
        let remembered_as = check
            .filter(|_| remember)
            .map(|key| (identity, key.map(ArtifactKey::id)));
        let known = remembered_as.as_ref().and_then(|id| {
            let verified = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
            verified.get(id).copied()
        });
        let mut front = spare::take();
        read_front(
            &file,
            &mut front,
            known.unwrap_or(FIRST_READ).min(file_len as usize),
        )?;
        if front.len() < HEADER_SIZE {
            return Err(
                if !front.is_empty() && MAGIC.starts_with(&front[..front.len().min(8)]) {
                    damaged(format!("truncated to {file_len} bytes"))
                } else {
                    Error::NotArtifact
                },
            );
        }

        let h = &front[..HEADER_SIZE];
        if h[off::MAGIC..off::MAGIC + 8] != MAGIC {
            return Err(if looks_like_artifact(h) {
                damaged("bad magic")
            } else {
                Error::NotArtifact
            });
        }
        let format = u32_at(h, off::FORMAT);
        if format != FORMAT_VERSION {
            return Err(Error::Format { found: format });
        }
        let version = &h[off::VERSION..off::VERSION + off::VERSION_LEN];
        let version = &version[..version
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(version.len())];
        if version != EPHEM_VERSION.as_bytes() {
            return Err(Error::Version {
                found: String::from_utf8_lossy(version).into_owned(),
            });
        }
        let header_len = u64_at(h, off::FILE_LEN);
        if header_len != file_len {
            return Err(damaged(format!(
                "{file_len} bytes on disk, the header says {header_len}"
            )));
        }
        let mut sections: [Range<u64>; Section::ALL.len()] = Default::default();
        for (i, s) in Section::ALL.iter().enumerate() {
            let at = off::SECTIONS + i * 16;
            let (start, size) = (u64_at(h, at), u64_at(h, at + 8));
            let end = start.checked_add(size).filter(|&e| e <= file_len);
            let aligned =
                !matches!(s, Section::Text | Section::Images) || start % FILE_PAGE as u64 == 0;
            match end {
                Some(end) if start >= HEADER_SIZE as u64 && aligned => sections[i] = start..end,
                _ => return Err(damaged(format!("{s:?} section out of bounds"))),
            }
        }

        // Header, metadata and segment data, in that order at the front of the file.
        let sec = |s: Section| sections[s as usize].end;
        let need = sec(Section::Meta).max(sec(Section::Data)) as usize;
        read_front(&file, &mut front, need)?;
        let artifact = Artifact(Arc::new(Opened {
            file: Arc::new(file),
            path,
            file_len,
            sections,
            front,
            traps: OnceLock::new(),
            trap_index: OnceLock::new(),
            spans: OnceLock::new(),
            funcs: OnceLock::new(),
            type_ids: OnceLock::new(),
            names: OnceLock::new(),
            accessed: stat.st_atime,
            identity,
            snapshot: check.is_some() && !remember,
        }));
        let Some(key) = check else {
            // Written by this process: trusted (and checked in debug builds, for the tests).
            if cfg!(debug_assertions) {
                artifact.check_metadata()?;
            }
            return Ok(artifact);
        };
        if known.is_some() {
            return Ok(artifact);
        }

        // Everything that is proportional to the file or to the metadata is done once per file
        // identity and key (see the module documentation).
        if let Some(key) = key {
            let mut whole = vec![0u8; file_len as usize];
            read_at(&artifact.0.file, &mut whole, 0)?;
            let h = &artifact.0.front[..HEADER_SIZE];
            if crate::format::seal(&whole, key)[..] != h[off::SEAL..off::SEAL + 32] {
                return Err(Error::Unsealed);
            }
        }
        artifact.check_metadata()?;
        let target = &artifact.meta().target;
        cpu::check(
            &target.arch,
            target.cpu_features.iter().map(|f| f.as_str()),
            cpu::host_has,
        )?;
        if let Some(id) = remembered_as {
            VERIFIED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, artifact.0.front.len());
        }
        Ok(artifact)
    }

    /// Section `s` as opening read it, if it did: the metadata, function table and segment
    /// data always (`from_file` reads up to the end of the last of them), a small module's text
    /// and trap table too.
    fn in_front(&self, s: Section) -> Option<&[u8]> {
        let r = &self.0.sections[s as usize];
        self.0.front.get(r.start as usize..r.end as usize)
    }

    /// A section opening always reads (metadata, function table, segment data).
    fn read_on_open(&self, s: Section) -> &[u8] {
        self.in_front(s).expect("from_file reads these sections")
    }

    fn meta_bytes(&self) -> &[u8] {
        self.read_on_open(Section::Meta)
    }

    /// The metadata, in place.
    fn meta(&self) -> &ArchivedMeta {
        // SAFETY: `meta_bytes` were validated as an `ArchivedMeta` when this file identity was
        // first opened (or were written by this process), and `front` is owned and immutable.
        unsafe { rkyv::access_unchecked::<ArchivedMeta>(self.meta_bytes()) }
    }

    /// Validates the metadata archive, then cross-checks it against itself and the sections, so
    /// that nothing read later indexes out of bounds. Proportional to the metadata.
    fn check_metadata(&self) -> Result<(), Error> {
        rkyv::access::<ArchivedMeta, rkyv::rancor::Error>(self.meta_bytes())
            .map_err(|e| damaged(format!("metadata: {e}")))?;
        let info: ephem_module::ModuleInfo = ephem_module::native(&self.meta().info);
        info.check()
            .map_err(|why| damaged(format!("metadata: {why}")))?;
        let derived = self.meta().small_ids.as_slice()
            == crate::format::small_ids(&info).as_slice()
            && self.meta().imports_digest == crate::format::imports_digest(&info);
        if !derived {
            return Err(damaged(
                "metadata: the type ids or the imports' digest are not the module's",
            ));
        }
        let eager = info.escaping();
        if self.eager() != eager.as_slice() {
            return Err(damaged(
                "metadata: the eager functions are not the module's",
            ));
        }
        let slots = crate::format::elem_slots(&info, &eager);
        let archived = &self.meta().elem_slots;
        let same = slots.len() == archived.len()
            && (slots.iter().zip(archived.iter())).all(|(s, a)| a.as_slice() == s.as_slice());
        if !same {
            return Err(damaged(
                "metadata: the element segments' funcref slots are not theirs",
            ));
        }
        self.check_consistency()?;
        self.check_tables()
    }

    /// The function and trap tables: every defined function has one entry, its code lies inside
    /// the machine code without overlapping another's, in order; the trap table is sorted and
    /// names known kinds.
    fn check_tables(&self) -> Result<(), Error> {
        let text = u64::from(self.code_len());
        let mut code = vec![None; self.info().defined_funcs()];
        for (func, f) in self.funcs()? {
            // The length is what lies before the next entry (or the end): 0 when two share an
            // offset, wrapped past the text when they are out of order.
            if f.len == 0 || u64::from(f.offset) + u64::from(f.len) > text {
                return Err(damaged(
                    "a function's code lies outside the text, or overlaps another's",
                ));
            }
            match code.get_mut(func as usize) {
                Some(slot @ None) => *slot = Some(f.offset),
                _ => {
                    return Err(damaged(
                        "the function table names a function twice, or none",
                    ));
                }
            }
        }
        let imported = self.info().imported_funcs.to_native();
        let code_is = |f: u32, at: u32| {
            f.checked_sub(imported)
                .and_then(|f| code.get(f as usize).copied().flatten())
                .is_some_and(|offset| offset == at)
        };
        let code_matches = (self.eager().iter())
            .zip(self.eager_code())
            .all(|(f, code)| code_is(f.to_native(), code.to_native()));
        if self.eager().len() != self.eager_code().len() || !code_matches {
            return Err(damaged(
                "the eager functions' code is not the function table's",
            ));
        }
        self.check_lazy(code_is)?;
        let names = self.lazy_section(&self.0.names, Section::Names)?;
        let count = names_count(names)?;
        let mut last = None;
        for k in 0..count {
            let (func, bytes) = name_entry(names, count, k);
            let in_bounds = bytes.start <= bytes.end && bytes.end <= names.len();
            if last.is_some_and(|l| l >= func)
                || func >= self.info().funcs.len() as u32
                || !in_bounds
            {
                return Err(damaged(
                    "the names table is not sorted by function, or lies outside",
                ));
            }
            last = Some(func);
        }
        let traps = self.lazy_section(&self.0.traps, Section::Traps)?;
        let (entries, index) = traps.split_at(8 * self.trap_count());
        let indexed = (entries.chunks_exact(8).step_by(TRAP_BLOCK))
            .zip(index.chunks_exact(4))
            .all(|(e, i)| e[..4] == *i);
        if !indexed {
            return Err(damaged("the trap table's index is not its own"));
        }
        let mut last = None;
        for entry in entries.chunks_exact(8) {
            let at = u32_at(entry, 0);
            if last.is_some_and(|l| l >= at)
                || u64::from(at) >= text
                || TrapKind::from_code(u32_at(entry, 4)).is_none()
            {
                return Err(damaged(
                    "the trap table is not sorted, or names unknown traps",
                ));
            }
            last = Some(at);
        }
        Ok(())
    }

    /// The lazy funcrefs and tables in the text: the slots name defined functions, sorted,
    /// with their code as the function table has it, and none eager; every table element is
    /// null or a slot; tables are defined funcref ones, each named once.
    fn check_lazy(&self, code_is: impl Fn(u32, u32) -> bool) -> Result<(), Error> {
        // Only what follows the code: the lazy data is all there.
        let code_len = self.code_len() as usize;
        let mut tail = vec![0; self.text_len().saturating_sub(code_len)];
        read_at(
            &self.0.file,
            &mut tail,
            self.text_file_offset() + code_len as u64,
        )?;
        let words = |at: u32, count: u32| {
            let start = (at as usize).checked_sub(code_len)?;
            let end = (count as usize)
                .checked_mul(4)
                .and_then(|n| n.checked_add(start));
            let bytes = end
                .filter(|_| (at as usize).is_multiple_of(4))
                .and_then(|e| tail.get(start..e));
            bytes.map(|b| {
                b.chunks_exact(4)
                    .map(|w| u32_at(w, 0))
                    .collect::<Vec<u32>>()
            })
        };
        let bad = |why: &str| damaged(format!("the lazy funcrefs: {why}"));
        let (at, count) = self.lazy_slots();
        let slots = words(at, count.checked_mul(2).ok_or_else(|| bad("too many"))?)
            .ok_or_else(|| bad("outside the text"))?;
        let (slots, _) = slots.as_chunks::<2>();
        let eager = self.eager();
        let sound = slots.windows(2).all(|w| w[0][0] < w[1][0])
            && (slots.iter())
                .all(|&[f, code]| code_is(f, code) && eager.binary_search(&f.into()).is_err());
        if !sound {
            return Err(bad("not the module's functions"));
        }
        let info = self.info();
        let all = self.funcref_slots();
        let mut seen = Vec::new();
        for t in self.meta().lazy_tables.iter() {
            let (table, len) = (t.table.to_native(), t.len.to_native());
            let ty = info.tables.get(table as usize);
            let fits = ty.is_some_and(|ty| {
                table >= info.imported_tables.to_native()
                    && matches!(ty.elem, ephem_module::ArchivedValType::FuncRef)
                    && len <= ty.min.to_native()
            });
            let elements = words(t.at.to_native(), len).ok_or_else(|| bad("outside the text"))?;
            if !fits || seen.contains(&table) || elements.iter().any(|&e| e > all) {
                return Err(bad(
                    "a table that cannot be lazy, or an element that is no slot",
                ));
            }
            seen.push(table);
        }
        Ok(())
    }

    /// Cross-checks the metadata against the sections.
    fn check_consistency(&self) -> Result<(), Error> {
        let m = self.meta();
        let info = &m.info;
        let text = self.code_len() as usize;
        let sec = |s: Section| self.section_len(s);
        let types = info.types.len();
        let imports_fit = info.imported_funcs.to_native() as usize <= info.funcs.len()
            && info.imported_memories.to_native() as usize <= info.memories.len()
            && info.imported_tables.to_native() as usize <= info.tables.len()
            && info.imported_globals.to_native() as usize <= info.globals.len();
        let ok = imports_fit
            && text <= self.text_len()
            && sec(Section::Funcs) == FUNC_ENTRY * info.defined_funcs()
            && sec(Section::Traps) == crate::format::traps_len(m.trap_count.to_native() as usize)
            && m.trampolines.len() == types
            && m.host_adapters.len() == types
            && m.trampolines
                .iter()
                .chain(m.host_adapters.iter())
                .all(|o| (o.to_native() as usize) < text)
            && m.relocs
                .iter()
                .all(|r| (r.offset.to_native() as usize).saturating_add(8) <= text)
            && info.funcs.iter().all(|t| (t.to_native() as usize) < types)
            && m.eager.iter().all(|f| {
                (info.imported_funcs.to_native()..info.funcs.len() as u32).contains(&f.to_native())
            })
            && info.datas.iter().all(|d| {
                d.range.start <= d.range.end
                    && d.range.end.to_native() as usize <= sec(Section::Data)
            })
            && m.data_index.len() == info.datas.len()
            && m.data_index.windows(2).all(|w| w[0] < w[1])
            && sec(Section::Spans) % 16 == 0
            && m.images.iter().all(|i| {
                let (memory, offset, len) = (
                    i.memory.to_native(),
                    i.offset.to_native(),
                    i.len.to_native(),
                );
                let section_offset = i.section_offset.to_native();
                let [first, end] = i.spans.map(|s| s.to_native() as usize);
                (memory as usize) < info.memories.len()
                    && first <= end
                    && end <= sec(Section::Spans) / 16
                    && offset % FILE_PAGE as u64 == 0
                    && section_offset % FILE_PAGE as u64 == 0
                    && section_offset.saturating_add(len) <= sec(Section::Images) as u64
                    && offset.saturating_add(len)
                        <= u64::from(info.memories[memory as usize].min.to_native()) * 65536
            });
        if !ok {
            return Err(damaged("metadata does not match the sections"));
        }
        // Each image's spans: sorted, disjoint, within the image.
        for image in m.images.iter() {
            let (offset, len) = (image.offset.to_native(), image.len.to_native());
            let mut last = offset;
            for (start, end) in self.image_spans(image)? {
                if !(last <= start && start < end && end <= offset.saturating_add(len)) {
                    return Err(damaged("an image's spans do not fit it"));
                }
                last = end;
            }
        }
        Ok(())
    }

    fn section_len(&self, s: Section) -> usize {
        let r = &self.0.sections[s as usize];
        (r.end - r.start) as usize
    }

    /// A whole section: from the bytes read on open if it lies there, else read once, on first
    /// use.
    fn lazy_section<'a>(
        &'a self,
        cell: &'a OnceLock<Vec<u8>>,
        s: Section,
    ) -> Result<&'a [u8], Error> {
        if let Some(bytes) = self.in_front(s) {
            return Ok(bytes);
        }
        if let Some(bytes) = cell.get() {
            return Ok(bytes);
        }
        let bytes = self.read_section(s)?;
        Ok(cell.get_or_init(|| bytes))
    }

    /// A section's bytes, read into spare capacity: zeroing a buffer that is about to be
    /// overwritten costs as much as a third of the read.
    fn read_section(&self, s: Section) -> Result<Vec<u8>, Error> {
        let (len, start) = (self.section_len(s), self.0.sections[s as usize].start);
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            let at = start + bytes.len() as u64;
            let n = rustix::io::pread(&self.0.file, rustix::buffer::spare_capacity(&mut bytes), at)
                .map_err(std::io::Error::from)?;
            if n == 0 {
                return Err(damaged("shorter than its header says"));
            }
        }
        Ok(bytes)
    }

    /// Where the artifact was opened from, if from a path.
    pub fn path(&self) -> Option<&Path> {
        self.0.path.as_deref()
    }

    /// The cache key of the wasm this artifact was compiled from (see [`crate::Cache::key`]),
    /// as the header records it.
    pub fn source(&self) -> [u8; 32] {
        self.0.front[off::SOURCE..off::SOURCE + 32]
            .try_into()
            .expect("32 bytes")
    }

    /// Last access time (seconds) of the file when it was opened.
    pub(crate) fn accessed(&self) -> i64 {
        self.0.accessed
    }

    /// The bytes it holds in memory: its header, metadata and segment data.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.0.front.capacity()
    }

    /// Whether this was read from a sealed copy of a file that others could change: a copy
    /// whose identity no directory entry holds.
    pub(crate) fn is_snapshot(&self) -> bool {
        self.0.snapshot
    }

    /// What identifies the file's contents (see [`Identity`]).
    pub fn identity(&self) -> Identity {
        self.0.identity
    }

    /// The seal as the header holds it: a keyed hash of the whole file, so equal seals mean
    /// equal files (verified against the key unless opened unverified).
    pub fn seal(&self) -> [u8; 32] {
        let mut seal = [0; 32];
        seal.copy_from_slice(&self.0.front[off::SEAL..off::SEAL + 32]);
        seal
    }

    /// The file (for mapping its text or images).
    pub fn file(&self) -> BorrowedFd<'_> {
        self.0.file.as_fd()
    }

    /// The open file, for a holder that outlives this artifact (a memory slot that keeps the
    /// image mapped, and reads pristine pages from it): one descriptor, closed when the last
    /// holder lets it go, instead of a duplicate per holder (two system calls).
    pub fn shared_file(&self) -> Arc<File> {
        Arc::clone(&self.0.file)
    }

    /// Size of the whole file.
    pub fn file_len(&self) -> u64 {
        self.0.file_len
    }

    /// The module's description, read in place.
    pub fn info(&self) -> &ArchivedModuleInfo {
        &self.meta().info
    }

    pub fn target(&self) -> &ArchivedTarget {
        &self.meta().target
    }

    /// Per type of [`Artifact::info`], its [`ephem_module::small_id`], or `None` for a type
    /// without one.
    pub fn small_ids(&self) -> impl ExactSizeIterator<Item = Option<u32>> + '_ {
        (self.meta().small_ids.iter())
            .map(|&id| Some(id.to_native()).filter(|&id| id != crate::format::NOT_SMALL))
    }

    /// The canonical type ids of the module's types for the engine a runtime knows as
    /// `engine`: `ids()` for the first engine that asks, remembered for it and shared with
    /// every module loaded from this artifact (an artifact kept open is loaded again and again
    /// by the same engine); computed each time for any other.
    pub fn type_ids(&self, engine: u64, ids: impl FnOnce() -> Vec<u32>) -> Arc<[u32]> {
        let mut ids = Some(ids);
        let (by, kept) = self
            .0
            .type_ids
            .get_or_init(|| (engine, (ids.take().expect("called once"))().into()));
        match ids {
            Some(ids) if *by != engine => ids().into(),
            _ => kept.clone(),
        }
    }

    /// What identifies the module's imports: two artifacts with the same digest have the same
    /// imports (module, name, kind and type, in order).
    pub fn imports_digest(&self) -> &[u8; 32] {
        &self.meta().imports_digest
    }

    /// Length of the machine code.
    pub fn text_len(&self) -> usize {
        self.section_len(Section::Text)
    }

    /// Reads the machine code into `dst` (`text_len` bytes) from the file.
    pub fn read_text(&self, dst: &mut [u8]) -> Result<(), Error> {
        read_at(&self.0.file, dst, self.text_file_offset())
    }

    /// Where the text starts in the file (page-aligned); the rest of its last page is `int3`.
    pub fn text_file_offset(&self) -> u64 {
        self.0.sections[Section::Text as usize].start
    }

    /// The bytes of every data segment that no image holds
    /// ([`ephem_module::DataSegment::range`] indexes them), read on open.
    pub fn data(&self) -> &[u8] {
        self.read_on_open(Section::Data)
    }

    pub fn relocs(&self) -> &[ArchivedReloc] {
        &self.meta().relocs
    }

    /// Entry trampoline offset, per type.
    pub fn trampolines(&self) -> &[u32_le] {
        &self.meta().trampolines
    }

    /// Per item of element segment `elem`, the funcref slot of a `ref.func` item (see the
    /// format's `Meta::elem_slots`).
    pub fn elem_slots(&self, elem: u32) -> &[u32_le] {
        &self.meta().elem_slots[elem as usize]
    }

    /// The defined functions whose funcrefs instantiation fills in (module indices, sorted;
    /// see `ephem_module::FuncrefLayout`).
    pub fn eager(&self) -> &[u32_le] {
        &self.meta().eager
    }

    /// The machine code's length (the text's first bytes; lazy funcref data follows it).
    pub fn code_len(&self) -> u32 {
        self.meta().code_len.to_native()
    }

    /// Funcref slots in all: imported, eager and lazy.
    pub fn funcref_slots(&self) -> u32 {
        self.first_lazy_slot() + self.meta().lazy_slots.to_native()
    }

    /// The first lazy funcref slot, after the imported and eager ones (see
    /// `ephem_module::FuncrefLayout`).
    pub fn first_lazy_slot(&self) -> u32 {
        self.info().imported_funcs.to_native() + self.eager().len() as u32
    }

    /// Where the lazy slots' functions and code offsets are in the text: `(at, count)`, 8
    /// bytes per slot (function index, code offset), sorted by function.
    pub fn lazy_slots(&self) -> (u32, u32) {
        let m = self.meta();
        (m.lazy_at.to_native(), m.lazy_slots.to_native())
    }

    /// Where table `table`'s initial elements are in the text, if it is lazy: `(at, len)`,
    /// a u32 per element (0 null, else funcref slot + 1).
    pub fn lazy_table(&self, table: u32) -> Option<(u32, u32)> {
        let t = self.meta().lazy_tables.iter().find(|t| t.table == table)?;
        Some((t.at.to_native(), t.len.to_native()))
    }

    /// Host adapter offset, per type.
    pub fn host_adapters(&self) -> &[u32_le] {
        &self.meta().host_adapters
    }

    /// Where each eager function's code starts (see [`Artifact::eager`]).
    pub fn eager_code(&self) -> &[u32_le] {
        &self.meta().eager_code
    }

    /// Every defined function (0 = the first defined one) and where it is in the text, with
    /// the padding after it, in the order of the text.
    pub fn funcs(&self) -> Result<impl ExactSizeIterator<Item = (u32, FuncLoc)> + '_, Error> {
        let table = self.lazy_section(&self.0.funcs, Section::Funcs)?;
        let (table, _) = table.as_chunks::<FUNC_ENTRY>();
        let code_len = self.code_len();
        Ok((0..table.len()).map(move |k| func_entry(table, k, code_len)))
    }

    /// The name section's name of function `func`, if it has one (read on first use).
    pub fn func_name(&self, func: u32) -> Option<String> {
        let names = self.lazy_section(&self.0.names, Section::Names).ok()?;
        let count = names_count(names).ok()?;
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (f, bytes) = name_entry(names, count, mid);
            match f.cmp(&func) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(String::from_utf8_lossy(names.get(bytes)?).into_owned());
                }
            }
        }
        None
    }

    /// The defined function whose code contains text `offset` (module index), and the
    /// offset within it.
    pub fn func_at(&self, offset: u32) -> Option<(u32, u32)> {
        let table = self.lazy_section(&self.0.funcs, Section::Funcs).ok()?;
        let (table, _) = table.as_chunks::<FUNC_ENTRY>();
        let k = (table.partition_point(|e| u32_at(e, 0) <= offset)).checked_sub(1)?;
        let (func, f) = func_entry(table, k, self.code_len());
        (offset < f.offset.wrapping_add(f.len)).then(|| {
            (
                self.info().imported_funcs.to_native() + func,
                offset - f.offset,
            )
        })
    }

    /// The kind of trap raised by the instruction at text `offset`, if it is a trapping one
    /// (`None` also when the trap table cannot be read).
    pub fn trap_at(&self, offset: u32) -> Option<TrapKind> {
        let count = self.trap_count();
        let whole = self
            .in_front(Section::Traps)
            .or(self.0.traps.get().map(Vec::as_slice));
        if let Some(t) = whole {
            return trap_in(&t[..8 * count], offset);
        }
        // The block of the index entry at or before `offset`, read alone.
        let index = match self.0.trap_index.get() {
            Some(index) => index,
            None => {
                let r = &self.0.sections[Section::Traps as usize];
                let mut index = vec![0; count.div_ceil(TRAP_BLOCK) * 4];
                read_at(&self.0.file, &mut index, r.start + 8 * count as u64).ok()?;
                self.0.trap_index.get_or_init(|| index)
            }
        };
        let (index, _) = index.as_chunks::<4>();
        let block =
            (index.partition_point(|&at| u32::from_le_bytes(at) <= offset)).checked_sub(1)?;
        let first = block * TRAP_BLOCK;
        let mut entries = vec![0; 8 * TRAP_BLOCK.min(count - first)];
        let start = self.0.sections[Section::Traps as usize].start + 8 * first as u64;
        read_at(&self.0.file, &mut entries, start).ok()?;
        trap_in(&entries, offset)
    }

    /// Entries in the trap table.
    fn trap_count(&self) -> usize {
        self.meta().trap_count.to_native() as usize
    }

    /// The memory images, at most one per memory.
    pub fn images(&self) -> &[ArchivedMemoryImage] {
        &self.meta().images
    }

    /// The image of memory `memory` (module index), if it has one.
    pub fn image(&self, memory: u32) -> Option<&ArchivedMemoryImage> {
        self.meta().images.iter().find(|i| i.memory == memory)
    }

    /// The ranges of linear memory (start, end) that `image`'s data segments write, in order
    /// (read from the file on first use).
    pub fn image_spans(
        &self,
        image: &ArchivedMemoryImage,
    ) -> Result<impl Iterator<Item = (u64, u64)> + '_, Error> {
        let all = self.lazy_section(&self.0.spans, Section::Spans)?;
        let [first, end] = image.spans.map(|s| s.to_native() as usize);
        let entries = all
            .get(first * 16..end * 16)
            .ok_or_else(|| damaged("an image's spans lie outside the section"))?;
        Ok(entries
            .chunks_exact(16)
            .map(|e| (u64_at(e, 0), u64_at(e, 8))))
    }

    /// Where data segment `data` (module index) is in [`ArchivedModuleInfo::datas`], if the
    /// artifact keeps it: it does not keep the active segments its images hold, which
    /// instantiation has applied and dropped.
    pub fn data_slot(&self, data: u32) -> Option<usize> {
        self.meta()
            .data_index
            .binary_search_by_key(&data, |d| d.to_native())
            .ok()
    }

    /// Reads an image into `dst` (`image.len` bytes).
    pub fn read_image(&self, image: &ArchivedMemoryImage, dst: &mut [u8]) -> Result<(), Error> {
        read_at(&self.0.file, dst, self.image_file_offset(image))
    }

    /// Where an image starts in the file (page-aligned).
    pub fn image_file_offset(&self, image: &ArchivedMemoryImage) -> u64 {
        self.0.sections[Section::Images as usize].start + image.section_offset.to_native()
    }
}
