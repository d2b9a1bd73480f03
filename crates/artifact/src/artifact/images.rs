//! Memory images: per initialised linear memory, a page-aligned copy of its initial contents in
//! the file, which an instance's memory maps copy-on-write or reads, and the spans its data
//! segments write (for a memory that may hold data already, read on first use).
//!
//! Invariant (checked on verification): every image lies within its section and within its
//! memory's minimum size, starts on a page in both, and its spans are sorted, disjoint and
//! within it.

use super::{Artifact, damaged, read_at, u64_at};
use crate::Error;
use crate::format::{ArchivedMemoryImage, Section};

impl Artifact {
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

    /// Where data segment `data` (module index) is in the metadata's data segments
    /// ([`ephem_module::ArchivedModuleInfo::datas`]), if the artifact keeps it: it does not keep
    /// the active segments its images hold, which instantiation has applied and dropped.
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
        self.0.base
            + self.0.sections[Section::Images as usize].start
            + image.section_offset.to_native()
    }
}
