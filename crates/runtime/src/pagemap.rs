//! What the kernel holds for each page of a range of this process's memory: Linux's
//! `/proc/self/pagemap`, one 64-bit entry per page, read with one `pread`.
//!
//! A memory slot's reset uses it to touch only what an instance touched (see
//! [`crate::memory`]): a page never faulted in needs nothing, a page of a mapped image the
//! instance only read still holds the file and can stay mapped for the next instance, and a page
//! it wrote can be zeroed in place, staying resident, instead of being discarded and faulted in
//! again. Discarding everything (`madvise(MADV_DONTNEED)`) instead would also make the kernel
//! flush every other core's TLB for this process, which is what limited two threads' throughput.
//!
//! Where the file cannot be read (not Linux, `/proc` not mounted, a sandbox), [`read`] says so
//! and the caller discards as before.

use std::fs::File;
use std::sync::OnceLock;

/// The host page size the entries describe (4 KiB on every target ephem supports).
pub(crate) const PAGE: usize = 4096;

/// One page's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Page {
    /// Never faulted in (or discarded): it reads as zeros or as its file, with nothing to undo.
    Absent,
    /// Swapped out: it holds data that only discarding removes.
    Swapped,
    /// Present and private to this mapping: an anonymous page, or a copy of a file page the
    /// process wrote (or the shared zero page, after a read).
    Private,
    /// Present and shared with its file (a mapped image page the process only read).
    File,
}

const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE_OR_SHARED: u64 = 1 << 61;

impl Page {
    /// The state an entry of [`read`] says.
    pub(crate) fn of(entry: u64) -> Page {
        if entry & SWAPPED != 0 {
            Page::Swapped
        } else if entry & PRESENT == 0 {
            Page::Absent
        } else if entry & FILE_OR_SHARED != 0 {
            Page::File
        } else {
            Page::Private
        }
    }
}

fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP
        .get_or_init(|| File::open("/proc/self/pagemap").ok())
        .as_ref()
}

/// The entries for the pages of `[addr, addr + len)` (both page-aligned) into `raw` (see
/// [`Page::of`]), or `false` when the page map cannot be read.
pub(crate) fn read(addr: *const u8, len: usize, raw: &mut Vec<u64>) -> bool {
    let Some(file) = pagemap() else {
        return false;
    };
    let pages = len / PAGE;
    raw.clear();
    raw.resize(pages, 0);
    // SAFETY: a u64 buffer viewed as its bytes (any byte pattern is a valid u64).
    let bytes = unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<u8>(), pages * 8) };
    let first = (addr as usize / PAGE) as u64 * 8;
    let mut done = 0;
    while done < bytes.len() {
        match rustix::io::pread(file, &mut bytes[done..], first + done as u64) {
            Ok(0) | Err(_) => return false,
            Ok(n) => done += n,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_read_as_absent_then_private_once_written() {
        // SAFETY: a fresh private anonymous mapping of our own.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                4 * PAGE,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .unwrap()
        .cast::<u8>();
        let mut raw = Vec::new();
        let pages = |raw: &Vec<u64>| raw.iter().map(|&e| Page::of(e)).collect::<Vec<_>>();
        if !read(base, 4 * PAGE, &mut raw) {
            eprintln!("no /proc/self/pagemap here: nothing to check");
            return;
        }
        assert_eq!(pages(&raw), [Page::Absent; 4]);
        // SAFETY: inside the mapping.
        unsafe { base.add(2 * PAGE).write(1) };
        assert!(read(base, 4 * PAGE, &mut raw));
        assert_eq!(
            pages(&raw),
            [Page::Absent, Page::Absent, Page::Private, Page::Absent]
        );
        // SAFETY: our own mapping, no references into it.
        unsafe { rustix::mm::munmap(base.cast(), 4 * PAGE).unwrap() };
    }
}
