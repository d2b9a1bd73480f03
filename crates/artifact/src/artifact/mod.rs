//! An open artifact: a handle ([`Artifact`]) on the file, the bytes opening read, and the
//! sections read on first use. Clones share all of it: the cache keeps a thread's recent entries
//! open, and opening one of them again hands out another handle without reading anything (see
//! [`crate::Cache`]).
//!
//! This file owns the handle, what its clones share (`Opened`), and the accessors of what
//! opening read (header, metadata, segment data). Beside it: `open.rs` opens files and verifies
//! them (see there), `check.rs` holds the metadata checks that verification runs, `tables.rs`
//! the function, name and trap tables (read on first use, for traps and backtraces), and
//! `images.rs` the memory images.
//!
//! Invariants: `front` holds at least the header, the metadata and the segment data, and never
//! changes once opened; the metadata in it was validated (`check.rs`) for this file identity and
//! key, or was written by this process, before anything reads it in place (`Artifact::meta`). A
//! section read after opening is read once, into its `OnceLock`, and never changes either (the
//! trap table's blocks, read one per lookup, are the exception: nothing keeps them).

mod check;
mod images;
mod open;
mod tables;

use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ephem_module::{ArchivedModuleInfo, ArchivedReloc, ArchivedTarget};
use rkyv::rend::u32_le;
use rkyv::util::AlignedVec;

use crate::Error;
use crate::format::{ArchivedMeta, Section, off};

#[cfg(test)]
pub(crate) use open::SEAL_PIECE;
pub use open::is_artifact;
pub(crate) use open::{Place, memory_file, verify_seal};

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
    /// Where the artifact starts in the file: 0 for a file of its own, a page boundary for
    /// one of the artifacts a bundle holds (see `crate::Bundle`). Sections are relative to it.
    base: u64,
    /// The artifact's length (the file's, for a file of its own).
    file_len: u64,
    sections: [Range<u64>; Section::ALL.len()],
    /// The file's first bytes: header, metadata (an archive, read in place), segment data, and
    /// whatever else the first read took (a small module's tables; never its text, which
    /// starts on a page of its own).
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
    /// Read from a sealed copy of a file that others could change (see `open.rs`).
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

pub(crate) fn damaged(why: impl Into<String>) -> Error {
    Error::Damaged(why.into())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), Error> {
    file.read_exact_at(buf, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => damaged("shorter than its header says"),
        _ => Error::Io(e),
    })
}

impl Artifact {
    /// Section `s` as opening read it, if it did: the metadata and the segment data always
    /// (`from_file` reads up to the end of the later of them), and any section that lies
    /// within the first read (a small module's function, trap, spans and names tables).
    fn in_front(&self, s: Section) -> Option<&[u8]> {
        let r = &self.0.sections[s as usize];
        self.0.front.get(r.start as usize..r.end as usize)
    }

    /// A section opening always reads (metadata, segment data).
    fn read_on_open(&self, s: Section) -> &[u8] {
        self.in_front(s).expect("from_file reads these sections")
    }

    fn meta_bytes(&self) -> &[u8] {
        self.read_on_open(Section::Meta)
    }

    /// The metadata, in place.
    fn meta(&self) -> &ArchivedMeta {
        // SAFETY: `from_file` hands out no artifact whose metadata bytes were not validated as
        // an `ArchivedMeta` (`check_metadata`, now or when this file identity and key were
        // first opened) unless this process wrote them; `front` is owned by the shared state,
        // never changes after opening, and keeps the archive (at `HEADER_SIZE`) 16-aligned.
        unsafe { rkyv::access_unchecked::<ArchivedMeta>(self.meta_bytes()) }
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
            let at = self.0.base + start + bytes.len() as u64;
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

    /// Size of the artifact (of the whole file, unless it is one of a bundle's).
    pub fn file_len(&self) -> u64 {
        self.0.file_len
    }

    /// The artifact's bytes, as a file of its own would hold them.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let len = usize::try_from(self.0.file_len)
            .map_err(|_| damaged("larger than the address space"))?;
        let mut bytes = vec![0; len];
        read_at(&self.0.file, &mut bytes, self.0.base)?;
        Ok(bytes)
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

    /// The call with exception handlers whose return address is text offset `ret`, if any.
    pub fn call_site(&self, ret: u32) -> Option<&ephem_module::ArchivedCallSite> {
        let sites = &self.meta().call_sites;
        let i = sites
            .binary_search_by_key(&ret, |s| s.ret.to_native())
            .ok()?;
        Some(&sites[i])
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
        self.0.base + self.0.sections[Section::Text as usize].start
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
}
