//! [`MemoryConfig`]: how an engine pools and initialises linear memories. The defaults are what
//! `ephem bench fresh` and `ephem bench thresholds` chose (see BENCHMARKS.md); nothing here runs
//! per invocation but [`MemoryConfig::mapping`], which makes no system call.

use super::image::{ImageSource, MappedImage};

/// How instances' memories are pooled and initialised. The defaults come from `ephem bench
/// fresh` and `ephem bench thresholds` (see BENCHMARKS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Reset slots kept for reuse; more are unmapped when freed.
    pub max_idle_slots: usize,
    /// Bytes at the start of a slot zeroed in place (kept resident) rather than discarded. Each
    /// reset reads this much and zeroes what is not zero; each page of it that an instance
    /// touches saves a page fault. The default holds the data segments of the corpus's larger
    /// modules (`ephem bench fresh --keep-resident`, BENCHMARKS.md).
    pub keep_resident: usize,
    /// Bytes of the pages an instance wrote that a reset zeroes in place, keeping them
    /// resident for the next instance, in slots larger than `keep_resident` or with an image
    /// (see `reset`); pages written past this are discarded. It bounds what an idle slot keeps
    /// resident beyond `keep_resident`; 0 discards them all. A reset by write marks zeroes up to
    /// the larger of this and `keep_resident` in place, wherever in the slot the marked pages
    /// are.
    pub resident_dirty_bytes: usize,
    /// Whether the next memory of the same artifact may take an idle slot's mapped image as it
    /// is (see `slot`). Off, every memory replaces the image it finds: the cost of a workload
    /// whose modules never repeat.
    pub reuse_images: bool,
    /// Images of at least this many bytes are mapped from the artifact. Smaller ones are
    /// copied if they lie within the first `keep_resident` bytes, where the slot's pages are
    /// resident; copying into pages that must first be faulted in is slower than mapping at
    /// every size measured (`ephem bench thresholds`). The default, 0, maps every image: a
    /// mapped image stays in its slot for the next instance, where a copied one's pages are
    /// zeroed at every reset (BENCHMARKS.md).
    pub map_image_at: usize,
    /// The most bytes all linear memories of the engine may have together, live ones at their
    /// current sizes (`None`: unbounded). A memory that would pass it is not made (an error of
    /// kind `Limit`), and growth that would pass it fails (`memory.grow` returns -1).
    pub max_total_bytes: Option<usize>,
}

impl MemoryConfig {
    /// How `image` goes into a memory: mapped (`Some`), or copied (`None`).
    pub(super) fn mapping(&self, image: &impl ImageSource) -> Option<MappedImage> {
        let (offset, len) = image.range();
        let resident = offset + len <= self.keep_resident;
        (len >= self.map_image_at || !resident).then(|| {
            let (_, file, file_offset) = image.file();
            MappedImage {
                file,
                file_offset,
                offset,
                len,
                reusable: true,
            }
        })
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_idle_slots: 128,
            reuse_images: true,
            keep_resident: 128 << 10,
            resident_dirty_bytes: 2 << 20,
            map_image_at: 0,
            max_total_bytes: None,
        }
    }
}
