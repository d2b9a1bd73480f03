//! An open artifact: its header checked, its metadata decoded, the rest left in the file.
//!
//! Opening reads the header, the metadata and the function table with one or two `pread`s (one
//! for a file this process opened before: it remembers how much to read) and reads the
//! metadata in place; they grow with the module's declarations (types, imports, exports,
//! segments) and the segment data no image holds, never with its code. The text is read
//! straight into a code slot or mapped from the file, memory images are mapped or read straight
//! into linear memory, the trap table is read on the first trap. No mapping of the whole
//! file is made: mapping and unmapping it, and faulting its pages in, cost more than the reads.
//!
//! # Verification
//! The header is checked on every open (magic, format, ephem version, length, section bounds);
//! the checksum over the whole file, the metadata and the CPU features are checked once per file
//! identity (device, inode, size, modification time) per process, and the identity remembered.
//! Hashing a multi-megabyte artifact on every invocation would cost more than everything else in
//! the fresh path; hashing it once catches truncation, partial writes and corruption that
//! happened before this process saw the file, which is what a cache on disk suffers. Files are
//! replaced (rename), never rewritten in place: a new file is a new identity and is verified
//! again. Artifacts made in memory by this process ([`Artifact::from_compiled`]) are not hashed
//! at all.
//!
//! An artifact is native code: opening one from a directory an attacker can write is as unsafe
//! as running an executable from there. The checks make *accidental* damage safe, not hostile
//! files.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{LazyLock, Mutex, OnceLock};

use ephem_module::{
    ArchivedModuleInfo, ArchivedReloc, ArchivedTarget, CompiledModule, FuncLoc, TrapKind,
};
use rkyv::rend::u32_le;
use rkyv::util::AlignedVec;

use crate::format::{
    ArchivedMemoryImage, ArchivedMeta, EPHEM_VERSION, FILE_PAGE, FORMAT_VERSION, HEADER_SIZE,
    MAGIC, Section, off,
};
use crate::{Error, cpu};

/// Files whose text is shorter than [`SMALL_TEXT`] and ends within this many bytes are read up
/// to the end of the text on open (a small module's metadata, tables and data come before it).
const READ_WHOLE_FRONT_UP_TO: usize = 256 << 10;

/// Texts shorter than this are copied into code slots rather than mapped, by default: the
/// crossover measured by `ephem bench thresholds` (see BENCHMARKS.md). Opening reads such a text
/// with the metadata when the file is small enough (its first 256 KiB hold the whole text).
pub const SMALL_TEXT: usize = 160 << 10;

/// How much of the file the first read takes: the header and, for most modules, the metadata
/// and function table behind it.
const FIRST_READ: usize = 4 << 10;

/// A compiled module in a file (or a memory file), ready to load.
pub struct Artifact {
    file: File,
    file_len: u64,
    sections: [Range<u64>; 6],
    /// The file's first bytes: header, metadata (an archive, read in place), function table,
    /// segment data.
    front: AlignedVec<16>,
    /// The trap table, read on first use.
    traps: OnceLock<Vec<u8>>,
    /// Last access time (seconds) when opened, for the cache's eviction order.
    pub(crate) accessed: i64,
    identity: Identity,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("bytes", &self.file_len)
            .field("text", &self.text_len())
            .field("images", &self.meta().images.len())
            .finish()
    }
}

/// What identifies a file's contents: device, inode, size and modification time. Used to
/// remember that a file's checksum was verified, and by the runtime to recognise a memory image
/// it already has mapped (a live mapping keeps its inode from being reused).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: i64,
    mtime_ns: i64,
}

/// Files verified in this process (checksum, metadata, CPU), with how many bytes opening them
/// reads: the next open of the same identity reads exactly that much, with one `pread`.
static VERIFIED: LazyLock<Mutex<HashMap<Identity, usize>>> = LazyLock::new(Mutex::default);

fn damaged(why: impl Into<String>) -> Error {
    Error::Damaged(why.into())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// One 8-byte entry of the function table.
fn func_loc(entry: &[u8]) -> FuncLoc {
    FuncLoc {
        offset: u32_at(entry, 0),
        len: u32_at(entry, 4),
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether `bytes` start like an artifact (to tell one from a wasm file).
pub fn is_artifact(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), Error> {
    file.read_exact_at(buf, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => damaged("shorter than its header says"),
        _ => Error::Io(e),
    })
}

impl Artifact {
    /// Opens the artifact at `path`.
    pub fn open(path: &Path) -> Result<Artifact, Error> {
        Artifact::from_file(File::open(path)?, true)
    }

    /// Serialises `compiled` into an anonymous memory file and opens that: a module compiled
    /// in this process takes exactly the path of one read from disk (its memory images are
    /// mapped copy-on-write from the memory file).
    pub fn from_compiled(compiled: &CompiledModule) -> Result<Artifact, Error> {
        Artifact::in_memory(&crate::to_bytes(compiled))
    }

    /// Opens artifact bytes this process wrote, through a memory file (not hashed: see the
    /// module documentation).
    pub(crate) fn in_memory(bytes: &[u8]) -> Result<Artifact, Error> {
        let fd = rustix::fs::memfd_create("ephem-artifact", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        // SAFETY: `fd` is a fresh descriptor we own; the File takes ownership of it.
        let mut file = unsafe { File::from_raw_fd(fd.into_raw_fd()) };
        file.write_all(bytes)?;
        Artifact::from_file(file, false)
    }

    /// Opens the artifact in `file`; with `verify`, its checksum is checked unless this file
    /// identity was verified before.
    fn from_file(file: File, verify: bool) -> Result<Artifact, Error> {
        let stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        let file_len = u64::try_from(stat.st_size).map_err(|_| damaged("impossible size"))?;
        let identity = Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mtime: stat.st_mtime,
            mtime_ns: stat.st_mtime_nsec as i64,
        };
        let known = verify
            .then(|| {
                let verified = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
                verified.get(&identity).copied()
            })
            .flatten();
        let mut front = AlignedVec::<16>::new();
        front.resize(known.unwrap_or(FIRST_READ).min(file_len as usize), 0);
        read_at(&file, &mut front, 0)?;
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
            return Err(Error::NotArtifact);
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
        let mut sections: [Range<u64>; 6] = Default::default();
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

        // Header, metadata, function table and segment data, in that order at the front of the
        // file; and for a small module everything up to the end of its text, so that loading its
        // code into a code slot is a copy from memory, with no system call of its own.
        let sec = |s: Section| sections[s as usize].end;
        let text = &sections[Section::Text as usize];
        let small = text.end - text.start < SMALL_TEXT as u64;
        let mut need = sec(Section::Meta)
            .max(sec(Section::Funcs))
            .max(sec(Section::Data));
        if small && text.end <= READ_WHOLE_FRONT_UP_TO as u64 {
            need = need.max(text.end);
        }
        let need = need as usize;
        if need > front.len() {
            let got = front.len();
            front.resize(need, 0);
            read_at(&file, &mut front[got..], got as u64)?;
        }
        let artifact = Artifact {
            file,
            file_len,
            sections,
            front,
            traps: OnceLock::new(),
            accessed: stat.st_atime,
            identity,
        };
        if known.is_some() {
            return Ok(artifact);
        }

        // Everything that is proportional to the file or to the metadata is done once per file
        // identity (see the module documentation); artifacts this process wrote are trusted.
        if verify || cfg!(debug_assertions) {
            if verify {
                let mut whole = vec![0u8; file_len as usize];
                read_at(&artifact.file, &mut whole, 0)?;
                let h = &artifact.front[..HEADER_SIZE];
                if crate::format::checksum(&whole)[..] != h[off::CHECKSUM..off::CHECKSUM + 32] {
                    return Err(damaged("checksum mismatch"));
                }
            }
            rkyv::access::<ArchivedMeta, rkyv::rancor::Error>(artifact.meta_bytes())
                .map_err(|e| damaged(format!("metadata: {e}")))?;
            artifact.check_consistency()?;
        }
        let target = &artifact.meta().target;
        cpu::check(
            &target.arch,
            target.cpu_features.iter().map(|f| f.as_str()),
            cpu::host_has,
        )?;
        if verify {
            VERIFIED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(identity, artifact.front.len());
        }
        Ok(artifact)
    }

    /// Section `s` as opening read it, if it did: the metadata, function table and segment
    /// data always (`from_file` reads up to the end of the last of them), a small module's text
    /// and trap table too.
    fn in_front(&self, s: Section) -> Option<&[u8]> {
        let r = &self.sections[s as usize];
        self.front.get(r.start as usize..r.end as usize)
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

    /// Cross-checks the metadata against the sections, so that nothing read later indexes out
    /// of bounds. Proportional to the metadata, like decoding it.
    fn check_consistency(&self) -> Result<(), Error> {
        let m = self.meta();
        let info = &m.info;
        let text = self.text_len();
        let sec = |s: Section| self.section_len(s);
        let types = info.types.len();
        let imports_fit = info.imported_funcs.to_native() as usize <= info.funcs.len()
            && info.imported_memories.to_native() as usize <= info.memories.len()
            && info.imported_tables.to_native() as usize <= info.tables.len()
            && info.imported_globals.to_native() as usize <= info.globals.len();
        let ok = imports_fit
            && sec(Section::Funcs) == 8 * info.defined_funcs()
            && sec(Section::Traps) % 8 == 0
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
            && m.escaping.iter().all(|f| {
                (info.imported_funcs.to_native()..info.funcs.len() as u32).contains(&f.to_native())
            })
            && info.datas.iter().all(|d| {
                d.range.start <= d.range.end
                    && d.range.end.to_native() as usize <= sec(Section::Data)
            })
            && m.images.iter().all(|i| {
                let (memory, offset, len) = (
                    i.memory.to_native(),
                    i.offset.to_native(),
                    i.len.to_native(),
                );
                let section_offset = i.section_offset.to_native();
                let mut last = offset;
                let spans_fit = i.spans.iter().all(|[start, end]| {
                    let (start, end) = (start.to_native(), end.to_native());
                    let fits = last <= start && start < end && end <= offset.saturating_add(len);
                    last = end;
                    fits
                });
                (memory as usize) < info.memories.len()
                    && spans_fit
                    && offset % FILE_PAGE as u64 == 0
                    && section_offset % FILE_PAGE as u64 == 0
                    && section_offset.saturating_add(len) <= sec(Section::Images) as u64
                    && offset.saturating_add(len)
                        <= u64::from(info.memories[memory as usize].min.to_native()) * 65536
            });
        if ok {
            Ok(())
        } else {
            Err(damaged("metadata does not match the sections"))
        }
    }

    fn section_len(&self, s: Section) -> usize {
        let r = &self.sections[s as usize];
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
        let (len, start) = (self.section_len(s), self.sections[s as usize].start);
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            let at = start + bytes.len() as u64;
            let n = rustix::io::pread(&self.file, rustix::buffer::spare_capacity(&mut bytes), at)
                .map_err(std::io::Error::from)?;
            if n == 0 {
                return Err(damaged("shorter than its header says"));
            }
        }
        Ok(bytes)
    }

    /// What identifies the file's contents (see [`Identity`]).
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// The file (for mapping its text or images).
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Size of the whole file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The module's description, read in place.
    pub fn info(&self) -> &ArchivedModuleInfo {
        &self.meta().info
    }

    pub fn target(&self) -> &ArchivedTarget {
        &self.meta().target
    }

    /// Length of the machine code.
    pub fn text_len(&self) -> usize {
        self.section_len(Section::Text)
    }

    /// Copies the machine code into `dst` (`text_len` bytes): from memory when opening read it
    /// (small modules), else from the file.
    pub fn read_text(&self, dst: &mut [u8]) -> Result<(), Error> {
        match self.in_front(Section::Text) {
            Some(bytes) if bytes.len() == dst.len() => {
                dst.copy_from_slice(bytes);
                Ok(())
            }
            _ => read_at(&self.file, dst, self.text_file_offset()),
        }
    }

    /// Where the text starts in the file (page-aligned); the rest of its last page is `int3`.
    pub fn text_file_offset(&self) -> u64 {
        self.sections[Section::Text as usize].start
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

    /// The defined functions whose funcrefs instantiation must fill in (module indices,
    /// sorted; see the format).
    pub fn escaping(&self) -> &[u32_le] {
        &self.meta().escaping
    }

    /// Host adapter offset, per type.
    pub fn host_adapters(&self) -> &[u32_le] {
        &self.meta().host_adapters
    }

    /// Where defined function `i` (0 = the first defined one) is in the text.
    pub fn func(&self, i: usize) -> FuncLoc {
        func_loc(&self.read_on_open(Section::Funcs)[i * 8..i * 8 + 8])
    }

    /// Where every defined function is in the text, in order.
    pub fn funcs(&self) -> impl ExactSizeIterator<Item = FuncLoc> + '_ {
        self.read_on_open(Section::Funcs)
            .chunks_exact(8)
            .map(func_loc)
    }

    /// The defined function whose code contains text `offset` (module index), and the
    /// offset within it.
    pub fn func_at(&self, offset: u32) -> Option<(u32, u32)> {
        let n = self.info().defined_funcs();
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.func(mid).offset <= offset {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let f = self.func(lo.checked_sub(1)?);
        (offset < f.offset.saturating_add(f.len)).then(|| {
            (
                self.info().imported_funcs.to_native() + lo as u32 - 1,
                offset - f.offset,
            )
        })
    }

    /// The kind of trap raised by the instruction at text `offset`, if it is a trapping one
    /// (`None` also when the trap table cannot be read).
    pub fn trap_at(&self, offset: u32) -> Option<TrapKind> {
        let t = self.lazy_section(&self.traps, Section::Traps).ok()?;
        let (mut lo, mut hi) = (0, t.len() / 8);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match u32_at(t, mid * 8).cmp(&offset) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return TrapKind::from_code(u32_at(t, mid * 8 + 4)),
            }
        }
        None
    }

    /// The memory images, at most one per memory.
    pub fn images(&self) -> &[ArchivedMemoryImage] {
        &self.meta().images
    }

    /// The image of memory `memory` (module index), if it has one.
    pub fn image(&self, memory: u32) -> Option<&ArchivedMemoryImage> {
        self.meta().images.iter().find(|i| i.memory == memory)
    }

    /// Reads an image into `dst` (`image.len` bytes).
    pub fn read_image(&self, image: &ArchivedMemoryImage, dst: &mut [u8]) -> Result<(), Error> {
        read_at(&self.file, dst, self.image_file_offset(image))
    }

    /// Where an image starts in the file (page-aligned).
    pub fn image_file_offset(&self, image: &ArchivedMemoryImage) -> u64 {
        self.sections[Section::Images as usize].start + image.section_offset.to_native()
    }
}
