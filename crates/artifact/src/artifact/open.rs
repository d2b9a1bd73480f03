//! Opening an artifact: reading its header and metadata, and verifying it once per file.
//!
//! Opening reads the header, the metadata and the segment data no image holds with one or two
//! `pread`s (one for a file this process opened before: it remembers how much to read) and
//! reads the metadata in place; they grow with the module's declarations (types, imports,
//! exports, eager functions, segments neither an image nor a lazy table holds), not with its
//! code, its functions, its lazy tables or the segments its images hold. The text is read
//! straight into a code slot or mapped from the file, memory images are mapped or read straight
//! into linear memory; the function table, the names and the trap table are read on the first
//! trap, an image's spans when a memory that may hold data takes it. No mapping of the whole
//! file is made: mapping and unmapping it, and faulting its pages in, cost more than the reads.
//!
//! # Verification
//! The header is checked on every open (magic, format, ephem version, length, section bounds).
//! The seal (a keyed hash of the whole file, see [`crate::ArtifactKey`]), the metadata (every
//! index and range the runtime reads, [`ephem_module::ModuleInfo::check`] and the tables, see
//! `check.rs`) and the CPU features are checked once per file identity (device, inode, size,
//! modification time) and key per process, and the identity remembered. Hashing a
//! multi-megabyte artifact on every invocation would cost more than everything else in the
//! fresh path.
//!
//! Remembering an identity is sound only for a file that nobody changes in place: the cache
//! writes its entries read-only and replaces them only by rename (a new file is a new identity).
//! A file that another user could write, or that has a write permission bit set, is
//! *snapshotted* instead: copied into a sealed memory file, which nobody can change, and
//! verified on every open. So code and images are only ever mapped from files that this user
//! (or root) made read-only, and a guest fault reading such a file after it was truncated anyway
//! (`SIGBUS`) is reported as an I/O error naming the file (see the runtime), not as a guest
//! trap.
//!
//! Without the key the metadata checks still run ([`Artifact::open_unverified`]): they keep a
//! damaged or forged file from making the runtime read out of bounds, but only the key vouches
//! for the machine code and for what only the code knows (its vmctx layout, its types).
//! Artifacts made in memory by this process ([`Artifact::from_compiled`]) are not checked.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use ephem_module::CompiledModule;
use rkyv::util::AlignedVec;

use super::{Artifact, Identity, Opened, damaged, read_at, u32_at, u64_at};
use crate::format::{EPHEM_VERSION, FILE_PAGE, FORMAT_VERSION, HEADER_SIZE, MAGIC, Section, off};
use crate::key::KeyId;
use crate::owner::unchangeable;
use crate::{ArtifactKey, Error, cpu};

/// How much of the file the first read takes: the header and, for most modules, the metadata,
/// segment data and tables behind it (the text starts on the next page at the earliest).
const FIRST_READ: usize = 4 << 10;

/// Artifacts verified in this process, by file identity, where in the file they start (0 but
/// in a bundle) and key (seal under the key, or `None` when opened unverified or within a
/// bundle; metadata; CPU), with how many bytes opening them reads: the next open of the same
/// place reads exactly that much, with one `pread`.
type VerifiedAs = (Identity, u64, Option<KeyId>);
type Verified = HashMap<VerifiedAs, usize, foldhash::fast::RandomState>;
static VERIFIED: LazyLock<Mutex<Verified>> = LazyLock::new(Mutex::default);

/// A sealed memory file holding what `file` holds now: nobody can write, grow or shrink it.
fn snapshot(file: &File) -> Result<File, Error> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "ephem-artifact-snapshot",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )
    .map_err(std::io::Error::from)?;
    let mut copy = File::from(fd);
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

/// Reads the artifact's bytes (starting at `base` of the file) from `front.len()` up to `end`
/// onto the end of `front`, into its spare capacity: zeroing a buffer that is about to be
/// overwritten costs as much as a third of the read.
fn read_front(file: &File, base: u64, front: &mut AlignedVec<16>, end: usize) -> Result<(), Error> {
    front.reserve(end.saturating_sub(front.len()));
    while front.len() < end {
        let at = front.len();
        // SAFETY: `reserve` made the capacity at least `end`, so `[at, end)` lies inside the
        // allocation; it is viewed as `MaybeUninit<u8>` (no uninitialised byte is read), and
        // no other reference to `front` lives while `spare` does.
        let spare = unsafe {
            std::slice::from_raw_parts_mut(
                front
                    .as_mut_ptr()
                    .add(at)
                    .cast::<std::mem::MaybeUninit<u8>>(),
                end - at,
            )
        };
        let (read, _) =
            rustix::io::pread(file, spare, base + at as u64).map_err(std::io::Error::from)?;
        if read.is_empty() {
            return Err(damaged("shorter than its header says"));
        }
        // SAFETY: `pread` initialised the `read.len()` bytes after `at`, which lie within the
        // capacity (`read.len() <= end - at`).
        unsafe { front.set_len(at + read.len()) };
    }
    Ok(())
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

    /// Opens artifact bytes held in memory (as `Module::serialize` gives them), checked as
    /// [`Artifact::open`] checks a file: the seal with `key`, then the metadata.
    pub fn from_bytes(bytes: &[u8], key: &ArtifactKey) -> Result<Artifact, Error> {
        Artifact::from_file(memory_file(bytes)?, None, Some(Some(key)))
    }

    /// Opens artifact bytes this process wrote, through a memory file (not checked: see the
    /// module documentation).
    pub(crate) fn in_memory(bytes: &[u8]) -> Result<Artifact, Error> {
        Artifact::from_file(memory_file(bytes)?, None, None)
    }

    /// Opens the artifact in `file`. `check`: `None` for bytes this process wrote (nothing is
    /// checked but the header); else the key to verify the seal with (`Some(None)`: the
    /// metadata only), unless this file identity and key were verified before.
    fn from_file(
        file: File,
        path: Option<PathBuf>,
        check: Option<Option<&ArtifactKey>>,
    ) -> Result<Artifact, Error> {
        let (place, file_len) = Place::of(file, path, check.is_some())?;
        let remembered_as = check
            .filter(|_| !place.snapshot)
            .map(|key| (place.identity, 0, key.map(ArtifactKey::id)));
        let known = remembered_as.as_ref().and_then(known);
        let artifact = Artifact::parse(place, 0..file_len, known)?;
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
            verify_seal(&artifact.0.file, file_len, key, off::SEAL as u64, 0)?;
        }
        artifact.verify(remembered_as)
    }

    /// Opens the artifact that lies at `range` of a bundle's file (see [`crate::Bundle`]):
    /// its header and metadata are checked, and its CPU features, once per file identity and
    /// place (every time in a snapshot); its seal is not read.
    ///
    /// # Safety
    /// As [`Artifact::open_unverified`]: the caller vouches for the machine code, here by the
    /// bundle's seal, verified over the whole file.
    pub(crate) unsafe fn within(place: Place, range: Range<u64>) -> Result<Artifact, Error> {
        if !range.start.is_multiple_of(FILE_PAGE as u64) {
            return Err(damaged(
                "an artifact in a bundle starts off a page boundary",
            ));
        }
        let remembered_as = (!place.snapshot).then_some((place.identity, range.start, None));
        let known = remembered_as.as_ref().and_then(known);
        let artifact = Artifact::parse(place, range, known)?;
        match known {
            Some(_) => Ok(artifact),
            None => artifact.verify(remembered_as),
        }
    }

    /// Reads the header at `range.start` of the file and the front (header, metadata, segment
    /// data; `known`: how much an earlier open of this place read), and checks the header:
    /// magic, format, version, length and section bounds.
    fn parse(place: Place, range: Range<u64>, known: Option<usize>) -> Result<Artifact, Error> {
        let (base, file_len) = (range.start, range.end.saturating_sub(range.start));
        let file = place.file;
        let mut front = spare::take();
        read_front(
            &file,
            base,
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
        read_front(&file, base, &mut front, need)?;
        Ok(Artifact(Arc::new(Opened {
            file,
            path: place.path,
            base,
            file_len,
            sections,
            front,
            traps: OnceLock::new(),
            trap_index: OnceLock::new(),
            spans: OnceLock::new(),
            funcs: OnceLock::new(),
            type_ids: OnceLock::new(),
            names: OnceLock::new(),
            accessed: place.accessed,
            identity: place.identity,
            snapshot: place.snapshot,
        })))
    }

    /// Checks the metadata and the CPU features, and remembers the place as verified.
    fn verify(self, remembered_as: Option<VerifiedAs>) -> Result<Artifact, Error> {
        self.check_metadata()?;
        let target = &self.meta().target;
        cpu::check(
            &target.arch,
            target.cpu_features.iter().map(|f| f.as_str()),
            cpu::host_has,
        )?;
        if let Some(id) = remembered_as {
            VERIFIED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, self.0.front.len());
        }
        Ok(self)
    }
}

/// An open file and what it is: where artifacts are opened from.
#[derive(Clone)]
pub(crate) struct Place {
    pub(crate) file: Arc<File>,
    pub(crate) path: Option<PathBuf>,
    pub(crate) identity: Identity,
    /// Last access time (seconds) when opened.
    pub(crate) accessed: i64,
    /// A sealed copy of a file that others could change: verified on every open.
    pub(crate) snapshot: bool,
}

impl Place {
    /// `file`, opened from `path`, and its length: a regular file; when it is to be
    /// `checked`, one someone could change in place is replaced by a sealed snapshot of it,
    /// verified every time (never remembered).
    pub(crate) fn of(
        file: File,
        path: Option<PathBuf>,
        checked: bool,
    ) -> Result<(Place, u64), Error> {
        let mut file = file;
        let mut stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(damaged("not a regular file"));
        }
        let snapshot = checked && !unchangeable(&stat);
        if snapshot {
            file = self::snapshot(&file)?;
            stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        }
        let len = u64::try_from(stat.st_size).map_err(|_| damaged("impossible size"))?;
        let place = Place {
            file: Arc::new(file),
            path,
            identity: Identity::of(&stat),
            accessed: stat.st_atime,
            snapshot,
        };
        Ok((place, len))
    }
}

/// How much of a file is read and hashed at once when its seal is verified.
pub(crate) const SEAL_PIECE: usize = 1 << 20;

/// Checks that the 32 bytes at `seal_at` of `file` (`len` bytes) are its seal
/// ([`crate::format::seal_at`]), reading and hashing it in pieces, never holding it whole. Returns its first `keep` bytes as they are.
pub(crate) fn verify_seal(
    file: &File,
    len: u64,
    key: &ArtifactKey,
    seal_at: u64,
    keep: u64,
) -> Result<Vec<u8>, Error> {
    let seal_range = seal_at..seal_at + 32;
    if seal_range.end > len {
        return Err(damaged("shorter than its seal"));
    }
    let keep = keep.min(len);
    let mut hasher = blake3::Hasher::new_keyed(key.bytes());
    let mut kept = Vec::with_capacity(keep as usize);
    let mut seal = [0; 32];
    let mut piece = vec![0; SEAL_PIECE.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(SEAL_PIECE as u64) as usize;
        let piece = &mut piece[..n];
        read_at(file, piece, at)?;
        // The seal's bytes: kept aside, and hashed as zeros.
        let end = at + n as u64;
        let (from, to) = (seal_range.start.max(at), seal_range.end.min(end));
        if from < to {
            let (f, t) = ((from - at) as usize, (to - at) as usize);
            let into = (from - seal_range.start) as usize;
            seal[into..into + (t - f)].copy_from_slice(&piece[f..t]);
            piece[f..t].fill(0);
        }
        if at < keep {
            kept.extend_from_slice(&piece[..(keep - at).min(n as u64) as usize]);
        }
        hasher.update(piece);
        at = end;
    }
    if *hasher.finalize().as_bytes() != seal {
        return Err(Error::Unsealed);
    }
    // The seal's bytes given back as they are in the file.
    let (f, t) = (
        seal_range.start as usize,
        (seal_range.end as usize).min(kept.len()),
    );
    if f < t {
        kept[f..t].copy_from_slice(&seal[..t - f]);
    }
    Ok(kept)
}

/// How many bytes opening `id` read, if it was verified before.
fn known(id: &VerifiedAs) -> Option<usize> {
    let verified = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
    verified.get(id).copied()
}

/// An anonymous memory file holding `bytes`, to open as an artifact.
pub(crate) fn memory_file(bytes: &[u8]) -> Result<File, Error> {
    let fd = rustix::fs::memfd_create("ephem-artifact", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(std::io::Error::from)?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    Ok(file)
}
