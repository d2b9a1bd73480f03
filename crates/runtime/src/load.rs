//! Loading a module's code, and reading its memory images: what instantiation takes from the
//! artifact file.
//!
//! A text goes into executable memory one of three ways (`ephem_code_memory`):
//! - **kept**: a code slot or mapping that still holds this very text (by [`text_id`]) is
//!   taken back as it is: no copy, no system call, its pages and instruction-cache lines
//!   still warm;
//! - **mapped**: a text without relocations of at least the engine's `map_text_at` bytes is
//!   mapped read+execute straight from the artifact file;
//! - **copied**: anything else is read from the file into a free slot's write view, padded
//!   with trap bytes, relocated against this process's libcalls, and published.
//!
//! Either way it is registered with the module (its `ModuleInner`) as tag, so that a trap can
//! be traced back to its trap table (see `trap`).
//!
//! Invariants: W^X — no mapping is ever writable and executable at once (under every code
//! pool strategy but `rwx`, a baseline one must opt into: see `ephem_code_memory`); with the
//! default strategy a code slot is a memory file mapped twice, read+write and read+execute at
//! another address, so loading writes through the one and code runs through the other. And in
//! steady state (the text kept) loading makes no system call.
//!
//! Memories know nothing of the artifact format: [`ArtifactImage`] is how they read an
//! artifact's memory image ([`ImageSource`]).

use std::sync::Arc;

use ephem_artifact::Artifact;
use ephem_code_memory::{Acquired, LoadedCode, TextId};
use ephem_module::{Reloc, native};

use crate::memory::ImageSource;
use crate::{Error, Module};

/// Copies (or maps) the module's text into executable memory and relocates it, or takes back
/// a slot or arena region that still holds it.
pub(crate) fn load_code(module: &Module) -> Result<LoadedCode, Error> {
    let m = &*module.inner;
    let artifact = &m.artifact;
    let text_len = artifact.text_len();
    let tag = Arc::as_ptr(&module.inner) as usize;
    let id = m.engine.reuses_texts().then(|| text_id(artifact));
    if artifact.relocs().is_empty() && m.engine.maps_text(text_len) {
        return Ok(LoadedCode::map_file(
            artifact.file(),
            artifact.text_file_offset(),
            text_len,
            tag,
            id,
        )?);
    }
    let pool = m.engine.code_pool();
    let mut slot = match id {
        Some(id) => match pool.acquire_text(text_len.max(1), id, tag)? {
            Acquired::Kept(code) => return Ok(code),
            Acquired::Empty(slot) => slot,
        },
        None => pool.acquire(text_len.max(1))?,
    };
    let bytes = slot.bytes_mut();
    // Straight from the file into the slot's write view: one copy, no mapping.
    artifact.read_text(&mut bytes[..text_len])?;
    bytes[text_len..].fill(ephem_code_memory::TRAP_FILL);
    for r in artifact.relocs() {
        let r: Reloc = native(r);
        let at = r.offset as usize;
        let value = (crate::libcalls::address(r.target) as i64).wrapping_add(r.addend);
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    Ok(slot.publish_tagged(tag)?)
}

/// What names an artifact's text for taking back code memory that still holds it: equal ids
/// must mean equal bytes once loaded. The seal is a keyed hash of the whole file, and the
/// relocations point at this process's libcalls, the same for every load. The device and
/// inode are added for files opened without checking their seal: their text is another
/// file's only if that file is this one (a mapped file's inode stays alive; an unmapped one
/// that is reused must also carry the very same seal).
fn text_id(artifact: &ephem_artifact::Artifact) -> TextId {
    let seal = artifact.seal();
    let word = |i: usize| u64::from_le_bytes(seal[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let [dev, ino, ..] = artifact.identity().words();
    TextId([word(0), word(1), word(2), word(3), dev, ino])
}

/// A memory image of an artifact, as memories take it.
pub(crate) struct ArtifactImage<'a> {
    artifact: &'a Artifact,
    image: &'a ephem_artifact::format::ArchivedMemoryImage,
}

impl<'a> ArtifactImage<'a> {
    /// The image of `artifact`'s memory `index`, if it has one.
    pub(crate) fn of(artifact: &'a Artifact, index: u32) -> Option<ArtifactImage<'a>> {
        artifact
            .image(index)
            .map(|image| ArtifactImage { artifact, image })
    }
}

impl ImageSource for ArtifactImage<'_> {
    fn range(&self) -> (usize, usize) {
        (
            self.image.offset.to_native() as usize,
            self.image.len.to_native() as usize,
        )
    }
    fn file(&self) -> (std::os::fd::BorrowedFd<'_>, ephem_artifact::Identity, u64) {
        (
            self.artifact.file(),
            self.artifact.identity(),
            self.artifact.image_file_offset(self.image),
        )
    }
    fn shared_file(&self) -> Arc<std::fs::File> {
        self.artifact.shared_file()
    }
    fn read(&self, dst: &mut [u8]) -> Result<(), Error> {
        Ok(self.artifact.read_image(self.image, dst)?)
    }
    fn spans(&self) -> Result<Vec<(usize, usize)>, Error> {
        let spans = self.artifact.image_spans(self.image)?;
        Ok(spans.map(|(s, e)| (s as usize, e as usize)).collect())
    }
}
