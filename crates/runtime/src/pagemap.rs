//! What the kernel holds for each page of a range of this process's memory, from Linux's
//! `/proc/self/pagemap`.
//!
//! A memory slot's reset uses it to touch only what an instance touched (see
//! `memory`): a page never faulted in needs nothing, a page of a mapped image the
//! instance only read still holds the file and can stay mapped for the next instance, and a page
//! it wrote can be zeroed in place, staying resident, instead of being discarded and faulted in
//! again. Discarding everything (`madvise(MADV_DONTNEED)`) instead would also make the kernel
//! flush every other core's TLB for this process, which is what limited two threads' throughput.
//!
//! [`touched`] hands back the runs of pages that are not absent. It asks the kernel with the
//! `PAGEMAP_SCAN` ioctl (Linux 6.7) where it can: the kernel skips ranges without page tables
//! whole and answers in runs, so the cost follows where pages were touched, not the range's
//! size. Older kernels answer with an error once, and from then on the file is read: one
//! 64-bit entry per page, one `pread`, merged into the same runs, which costs per page asked
//! about, touched or not (see `memory::reset` for how resets bound that).
//!
//! Where the file cannot be read at all (not Linux, `/proc` not mounted, a sandbox),
//! [`touched`] says so and the caller discards instead.

use std::ffi::c_void;
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};

/// The host page size the entries describe (4 KiB on every target ephem supports).
pub const PAGE: usize = 4096;

/// One touched page's state. A page never faulted in (or discarded) reads as zeros or as its
/// file, with nothing to undo: [`touched`] leaves such pages out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// Swapped out: it holds data that only discarding removes.
    Swapped,
    /// Present and private to this mapping: an anonymous page, or a copy of a file page the
    /// process wrote (or the shared zero page, after a read).
    Private,
    /// Present and shared with its file (a mapped image page the process only read).
    File,
}

/// Pages `[start, end)` (byte offsets from the address asked about), all in state `page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pages {
    pub start: usize,
    pub end: usize,
    pub page: Page,
}

/// How the page map is asked: see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Scan,
    Read,
}

fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP
        .get_or_init(|| File::open("/proc/self/pagemap").ok())
        .as_ref()
}

/// Whether `PAGEMAP_SCAN` failed once (an older kernel): the file is read from then on.
static NO_SCAN: AtomicBool = AtomicBool::new(false);

/// Whether asking for a range costs by what was touched in it rather than by its size.
pub(crate) fn cost_follows_touched() -> bool {
    !NO_SCAN.load(Ordering::Relaxed)
}

/// The pages of `[addr, addr + len)` (both page-aligned) that are present or swapped, as runs
/// in address order, into `runs`; `false` when the page map cannot be read.
///
/// Only with `files` are pages shared with a file told apart ([`Page::File`]); without, they
/// read as [`Page::Private`]. Telling them apart makes `PAGEMAP_SCAN` look up every present
/// page's descriptor, which a range with no file mapped in it does not need.
pub fn touched(addr: *const u8, len: usize, files: bool, runs: &mut Vec<Pages>) -> bool {
    if cost_follows_touched() {
        if let Some(ok) = touched_by(Way::Scan, addr, len, files, runs) {
            return ok;
        }
        NO_SCAN.store(true, Ordering::Relaxed);
    }
    touched_by(Way::Read, addr, len, files, runs).unwrap_or(false)
}

/// [`touched`] one way; `None` if that way is not supported here.
fn touched_by(
    way: Way,
    addr: *const u8,
    len: usize,
    files: bool,
    runs: &mut Vec<Pages>,
) -> Option<bool> {
    runs.clear();
    let Some(file) = pagemap() else {
        return Some(false);
    };
    match way {
        Way::Scan => scan(file, addr as u64, len as u64, files, runs)
            .ok()
            .map(|()| true),
        Way::Read => Some(read(file, addr, len, files, runs)),
    }
}

// The kernel's `PAGEMAP_SCAN` interface (include/uapi/linux/fs.h).
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `ioctl(PAGEMAP_SCAN)`: returns how many regions it filled in.
struct Scan<'a>(&'a mut PmScanArg);

// SAFETY: the opcode is `_IOWR('f', 16, struct pm_scan_arg)` and the argument is that struct,
// laid out as the kernel's; the regions it points at are a live, writable buffer of `vec_len`
// (see `scan`). The kernel writes the struct and the regions, hence mutating.
unsafe impl Ioctl for Scan<'_> {
    type Output = usize;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        opcode::read_write::<PmScanArg>(b'f', 16)
    }

    fn as_ptr(&mut self) -> *mut c_void {
        std::ptr::from_mut(self.0).cast()
    }

    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<usize> {
        Ok(usize::try_from(out).unwrap_or(0))
    }
}

fn scan(
    file: &File,
    addr: u64,
    len: u64,
    files: bool,
    runs: &mut Vec<Pages>,
) -> rustix::io::Result<()> {
    // Room for a few dozen regions: the kernel allocates a buffer as large for every call,
    // which costs more than another call where an instance touched hundreds of scattered
    // pages (BENCHMARKS.md).
    let mut regions = [PageRegion::default(); 64];
    let mut at = addr;
    while at < addr + len {
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            start: at,
            end: addr + len,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED | if files { PAGE_IS_FILE } else { 0 },
            ..PmScanArg::default()
        };
        // SAFETY: see `Scan`: `arg` points at `regions`, which outlives the call.
        let filled = unsafe { rustix::ioctl::ioctl(file.as_fd(), Scan(&mut arg))? };
        for r in &regions[..filled.min(regions.len())] {
            let page = if r.categories & PAGE_IS_SWAPPED != 0 {
                Page::Swapped
            } else if r.categories & PAGE_IS_FILE != 0 {
                Page::File
            } else {
                Page::Private
            };
            push(
                runs,
                (r.start - addr) as usize,
                (r.end - addr) as usize,
                page,
            );
        }
        // The walk stops early only when the regions ran out; it always moves forward.
        if arg.walk_end <= at {
            break;
        }
        at = arg.walk_end;
    }
    Ok(())
}

fn read(file: &File, addr: *const u8, len: usize, files: bool, runs: &mut Vec<Pages>) -> bool {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;
    thread_local! {
        static ENTRIES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    ENTRIES.with_borrow_mut(|raw| {
        let pages = len / PAGE;
        raw.clear();
        raw.resize(pages, 0);
        // SAFETY: a u64 buffer viewed as its bytes (any byte pattern is a valid u64).
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<u8>(), pages * 8) };
        let first = (addr as usize / PAGE) as u64 * 8;
        if std::os::unix::fs::FileExt::read_exact_at(file, bytes, first).is_err() {
            return false;
        }
        for (k, &entry) in raw.iter().enumerate() {
            let page = if entry & SWAPPED != 0 {
                Page::Swapped
            } else if entry & PRESENT == 0 {
                continue;
            } else if files && entry & FILE_OR_SHARED != 0 {
                Page::File
            } else {
                Page::Private
            };
            push(runs, k * PAGE, (k + 1) * PAGE, page);
        }
        true
    })
}

/// Appends a run, merged with the last one where it continues it.
fn push(runs: &mut Vec<Pages>, start: usize, end: usize, page: Page) {
    match runs.last_mut() {
        Some(last) if last.end == start && last.page == page => last.end = end,
        _ => runs.push(Pages { start, end, page }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn map(len: usize, fd: Option<&File>) -> *mut u8 {
        let prot = rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE;
        let flags = rustix::mm::MapFlags::PRIVATE;
        // SAFETY: fresh mappings the kernel places; nothing else is affected.
        unsafe {
            match fd {
                None => rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, flags),
                Some(f) => rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, f, 0),
            }
        }
        .unwrap()
        .cast()
    }

    /// Both ways see the same runs: absent pages left out, written anonymous pages and
    /// written file pages private, file pages only read as the file's.
    #[test]
    fn both_ways_see_what_was_touched() {
        let anon = map(64 * PAGE, None);
        let ways: Vec<Way> = [Way::Scan, Way::Read]
            .into_iter()
            .filter(|&w| touched_by(w, anon, PAGE, true, &mut Vec::new()) == Some(true))
            .collect();
        if !ways.contains(&Way::Read) {
            eprintln!("no /proc/self/pagemap here: nothing to check");
            return;
        }
        eprintln!("ways: {ways:?}");
        let mut file = tempfile_in_tmp();
        file.write_all(&[7u8; 8 * PAGE]).unwrap();
        let mapped = map(8 * PAGE, Some(&file));
        // SAFETY: inside the mappings.
        unsafe {
            for k in [2, 3, 4, 40] {
                anon.add(k * PAGE).write(1);
            }
            let _ = std::ptr::read_volatile(mapped.add(PAGE));
            let _ = std::ptr::read_volatile(mapped.add(2 * PAGE));
            mapped.add(2 * PAGE).write(1);
            let _ = std::ptr::read_volatile(mapped.add(5 * PAGE));
        }
        let runs = |way, addr, len, files| {
            let mut runs = Vec::new();
            assert_eq!(touched_by(way, addr, len, files, &mut runs), Some(true));
            runs
        };
        let p = |start: usize, end: usize, page| Pages {
            start: start * PAGE,
            end: end * PAGE,
            page,
        };
        for &way in &ways {
            for files in [true, false] {
                assert_eq!(
                    runs(way, anon, 64 * PAGE, files),
                    [p(2, 5, Page::Private), p(40, 41, Page::Private)],
                    "{way:?}"
                );
                // Fault-around may map neighbours of a page read: check only the pages touched.
                let file_runs = runs(way, mapped, 8 * PAGE, files);
                let state = |k: usize| {
                    file_runs
                        .iter()
                        .find(|r| (r.start..r.end).contains(&(k * PAGE)))
                        .map(|r| r.page)
                };
                // Not told apart, file pages read as private ones.
                let read_only = if files { Page::File } else { Page::Private };
                assert_eq!(state(1), Some(read_only), "{way:?} {files}");
                assert_eq!(state(2), Some(Page::Private), "{way:?} {files}");
                assert_eq!(state(5), Some(read_only), "{way:?} {files}");
            }
        }
        // SAFETY: our own mappings, no references into them.
        unsafe {
            rustix::mm::munmap(anon.cast(), 64 * PAGE).unwrap();
            rustix::mm::munmap(mapped.cast(), 8 * PAGE).unwrap();
        }
    }

    fn tempfile_in_tmp() -> File {
        let path = std::env::temp_dir().join(format!("ephem-pagemap-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file
    }
}
