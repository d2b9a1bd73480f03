//! Where a memory's initial contents come from, and how a slot holds them.
//!
//! The loader describes an artifact's memory image as an [`ImageSource`] (`load::ArtifactImage`):
//! memories know nothing of the artifact format. A slot maps an image private, copy-on-write,
//! over its pages ([`MappedImage`]), so that pages an instance only reads stay shared in the
//! page cache, and keeps it mapped while idle, so that the next memory of the same artifact
//! file and size takes it with no system call at all. A slot keeps the image's file open
//! ([`ImageFile`]) and copies of the image pages instances wrote, so that its reset copies them
//! back without reading the file again (see `reset`).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use ephem_artifact::Identity;

/// Where a memory's initial contents come from: bytes for a page-aligned range of the memory,
/// stored page-aligned in a file (so that they can be mapped copy-on-write), and the spans of
/// that range that data segments write. The loader implements it over the artifact format;
/// memories know nothing of that format.
pub(crate) trait ImageSource {
    /// The range of the memory the image covers: offset and length in bytes, page-aligned.
    fn range(&self) -> (usize, usize);
    /// The file holding the image, its identity, and where in it the image starts.
    fn file(&self) -> (BorrowedFd<'_>, Identity, u64);
    /// The same file, for a slot to keep while it maps the image (see [`ImageFile`]).
    fn shared_file(&self) -> Arc<std::fs::File>;
    /// Reads the whole image into `dst` (of the image's length).
    fn read(&self, dst: &mut [u8]) -> Result<(), crate::Error>;
    /// The spans (start, end; memory offsets) that data segments write, in order.
    fn spans(&self) -> Result<Vec<(usize, usize)>, crate::Error>;
}

/// A memory image mapped (private, copy-on-write) from an artifact file into a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MappedImage {
    pub(super) file: Identity,
    pub(super) file_offset: u64,
    pub(super) offset: usize,
    pub(super) len: usize,
    /// Whether the next memory of the same image may take it as it is. Without image reuse
    /// ([`crate::MemoryConfig::reuse_images`]), a reset slot keeps its image mapped but marked not
    /// reusable: no memory wants it, so the next one replaces it.
    pub(super) reusable: bool,
}

/// The file a slot's image is mapped from (its artifact's descriptor, shared), and pristine copies of
/// image pages that instances wrote, as the file holds them: read once, the first time a reset
/// finds the page written, so that later resets copy it back from memory instead of with a
/// `pread` (an instance that writes its data section writes the same pages every time). At
/// most [`PRISTINE_PAGES`] per slot.
pub(super) struct ImageFile {
    pub(super) file: Arc<std::fs::File>,
    /// (offset in the memory, the page).
    pub(super) pristine: Vec<(usize, Box<[u8]>)>,
}

impl ImageFile {
    /// The pristine copy of the image page at memory offset `at` (at `file_at` in the file):
    /// the one kept, else read from the file and kept while there is room for it; `None` when
    /// it is not kept and there is no room.
    pub(super) fn pristine(&mut self, at: usize, file_at: u64) -> std::io::Result<Option<&[u8]>> {
        use crate::pagemap::PAGE as HOST_PAGE;
        use std::os::unix::fs::FileExt;
        if let Some(k) = self.pristine.iter().position(|(o, _)| *o == at) {
            return Ok(Some(&self.pristine[k].1));
        }
        if self.pristine.len() >= PRISTINE_PAGES {
            return Ok(None);
        }
        let mut page = vec![0; HOST_PAGE].into_boxed_slice();
        self.file.read_exact_at(&mut page, file_at)?;
        self.pristine.push((at, page));
        Ok(self.pristine.last().map(|(_, page)| &**page))
    }
}

/// The most pristine image pages a slot keeps (64 KiB; with the pool's 128 idle slots, 8 MiB
/// at most).
const PRISTINE_PAGES: usize = 16;
