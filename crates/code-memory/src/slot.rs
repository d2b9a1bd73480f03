//! One code slot's memory under each strategy, and the three steps every load takes through it:
//! `prepare` (make `[0, len)` writable), `publish` (make it executable) and `release`.
//!
//! Invariant kept by `publish`: after it, every byte of the slot at or beyond the current owner's
//! `len`, up to the highest byte any earlier owner published (`high_water`), holds
//! [`TRAP_FILL`]; bytes never written are zero. So the executable view shows exactly what the
//! current owner wrote in `[0, len)` and nothing of a previous module beyond it.

use std::io;
use std::os::fd::OwnedFd;

use crate::Strategy;
use crate::sys::{self, Anon, HUGE_PAGE_SIZE, Mapping, Prot, TRAP_FILL, round_up};

/// How many random addresses to try for a new write view before letting the kernel choose.
const REMAP_TRIES: usize = 8;

#[derive(Debug)]
pub(crate) enum SlotMem {
    /// `naive`: a fresh mapping per load, unmapped on release.
    Fresh {
        map: Option<Mapping>,
        capacity: usize,
    },
    /// `reuse`, `reuse-locked`, `reuse-shared`, `hugetlb`: one mapping flipped between RW and RX.
    Flip {
        map: Mapping,
        granule: usize,
        high_water: usize,
    },
    /// `dual`: one memory file seen through a read+execute view and a read+write view.
    Dual {
        file: OwnedFd,
        exec: Mapping,
        write: Mapping,
        high_water: usize,
        loads_since_remap: u32,
    },
    /// `rwx`: one read+write+execute mapping (opt-in baseline).
    Rwx { map: Mapping, high_water: usize },
}

impl SlotMem {
    /// Creates the memory for one slot of at least `capacity` bytes, pre-faulted.
    pub fn create(strategy: Strategy, capacity: usize) -> io::Result<SlotMem> {
        let page = sys::page_size();
        let flip = |anon: Anon, granule: usize| -> io::Result<SlotMem> {
            let map = Mapping::anonymous(round_up(capacity, granule), Prot::Rw, anon)?;
            Ok(SlotMem::Flip {
                map,
                granule,
                high_water: 0,
            })
        };
        match strategy {
            Strategy::Naive => Ok(SlotMem::Fresh {
                map: None,
                capacity: round_up(capacity, page),
            }),
            Strategy::Reuse => flip(Anon::Private, page),
            Strategy::ReuseLocked => flip(Anon::PrivateLocked, page),
            Strategy::ReuseShared => flip(Anon::Shared, page),
            Strategy::HugeTlb => flip(Anon::HugeTlb, HUGE_PAGE_SIZE),
            Strategy::Dual => {
                let len = round_up(capacity, page);
                let file = sys::memory_file(len)?;
                let exec = Mapping::shared_file(&file, len, Prot::Rx, None)?;
                let write = Mapping::shared_file(&file, len, Prot::Rw, None)?;
                let mut mem = SlotMem::Dual {
                    file,
                    exec,
                    write,
                    high_water: 0,
                    loads_since_remap: 0,
                };
                mem.prefault();
                Ok(mem)
            }
            Strategy::Rwx => Ok(SlotMem::Rwx {
                map: Mapping::anonymous(round_up(capacity, page), Prot::Rwx, Anon::Private)?,
                high_water: 0,
            }),
        }
    }

    /// Bytes a load may use without replacing this memory.
    pub fn capacity(&self) -> usize {
        match self {
            SlotMem::Fresh { capacity, .. } => *capacity,
            SlotMem::Flip { map, .. } | SlotMem::Rwx { map, .. } => map.size(),
            SlotMem::Dual { exec, .. } => exec.size(),
        }
    }

    /// Touches every page through both views, so that later loads take no page fault even where
    /// `MAP_POPULATE` left a page table entry read-only.
    fn prefault(&mut self) {
        if let SlotMem::Dual { exec, write, .. } = self {
            let page = sys::page_size();
            for off in (0..write.size()).step_by(page) {
                // SAFETY: both views are live mappings of `len` bytes; the write view is
                // writable, the exec view readable, and no reference into either exists.
                unsafe {
                    write.as_ptr().add(off).write_volatile(0);
                    exec.as_ptr().add(off).read_volatile();
                }
            }
        }
    }

    /// Makes `[0, len)` writable for the new owner. `remap_every` > 0 moves a dual slot's write
    /// view to a fresh random address once that many loads went through it; returns whether it
    /// moved.
    pub fn prepare(&mut self, len: usize, remap_every: u32) -> io::Result<bool> {
        debug_assert!(len <= self.capacity());
        match self {
            SlotMem::Fresh { map, .. } => {
                let size = round_up(len.max(1), sys::page_size());
                *map = Some(Mapping::anonymous(size, Prot::Rw, Anon::Private)?);
                Ok(false)
            }
            SlotMem::Flip {
                map,
                granule,
                high_water,
            } => {
                map.protect(round_up(len.max(*high_water).max(1), *granule), Prot::Rw)?;
                Ok(false)
            }
            SlotMem::Dual {
                file,
                write,
                loads_since_remap,
                ..
            } => {
                *loads_since_remap += 1;
                if remap_every == 0 || *loads_since_remap <= remap_every {
                    return Ok(false);
                }
                let fresh = remap(file, write.size())?;
                // Dropping the old view unmaps it: its address no longer reaches the code.
                *write = fresh;
                *loads_since_remap = 1;
                self.prefault();
                Ok(true)
            }
            SlotMem::Rwx { .. } => Ok(false),
        }
    }

    /// The writable bytes `[0, len)`, valid between `prepare(len)` and `publish(len)`.
    pub fn writable(&mut self, len: usize) -> &mut [u8] {
        let map = match self {
            SlotMem::Fresh { map, .. } => map.as_mut().expect("prepared"),
            SlotMem::Flip { map, .. } | SlotMem::Rwx { map, .. } => map,
            SlotMem::Dual { write, .. } => write,
        };
        // SAFETY: `prepare(len)` made `[0, len)` writable (the dual write view and the rwx map
        // always are), and the `&mut self` borrow makes this the only reference until publish.
        unsafe { map.bytes_mut(len) }
    }

    /// Makes the owner's `[0, len)` executable and returns its address.
    pub fn publish(&mut self, len: usize) -> io::Result<*const u8> {
        let exec_ptr = match self {
            SlotMem::Fresh { map, .. } => {
                let map = map.as_mut().expect("prepared");
                map.protect(map.size(), Prot::Rx)?;
                map.as_ptr()
            }
            SlotMem::Flip {
                map,
                granule,
                high_water,
            } => {
                let hw = *high_water;
                // SAFETY: `prepare` made `[0, round_up(max(len, hw)))` writable; no other
                // reference exists while we hold `&mut self`.
                trap_fill(unsafe { map.bytes_mut(hw.max(len)) }, len);
                *high_water = len;
                map.protect(round_up(len.max(hw).max(1), *granule), Prot::Rx)?;
                map.as_ptr()
            }
            SlotMem::Dual {
                exec,
                write,
                high_water,
                ..
            } => {
                // SAFETY: the write view is always writable; `&mut self` makes this exclusive.
                trap_fill(unsafe { write.bytes_mut((*high_water).max(len)) }, len);
                *high_water = len;
                exec.as_ptr()
            }
            SlotMem::Rwx { map, high_water } => {
                // SAFETY: the rwx map is always writable; `&mut self` makes this exclusive.
                trap_fill(unsafe { map.bytes_mut((*high_water).max(len)) }, len);
                *high_water = len;
                map.as_ptr()
            }
        };
        sys::flush_icache(exec_ptr, len);
        Ok(exec_ptr)
    }

    /// Where the code last published with `len` bytes still executes, if this memory keeps it
    /// after release, untouched: then it can be published again without being written (the
    /// flipping strategies leave it read+execute; `naive` unmaps it).
    pub fn kept(&self, len: usize) -> Option<*const u8> {
        match self {
            SlotMem::Fresh { .. } => None,
            SlotMem::Flip {
                map, high_water, ..
            }
            | SlotMem::Rwx { map, high_water } => {
                (*high_water == len).then(|| map.as_ptr() as *const u8)
            }
            SlotMem::Dual {
                exec, high_water, ..
            } => (*high_water == len).then(|| exec.as_ptr() as *const u8),
        }
    }

    /// Ends a load: the code is no longer executed by its owner.
    pub fn release(&mut self) {
        if let SlotMem::Fresh { map, .. } = self {
            *map = None;
        }
    }
}

/// Overwrites `bytes[from..]` (what an earlier owner left beyond the new code) with traps.
fn trap_fill(bytes: &mut [u8], from: usize) {
    if let Some(rest) = bytes.get_mut(from..) {
        rest.fill(TRAP_FILL);
    }
}

/// Maps a new write view of `file` at a random address.
fn remap(file: &OwnedFd, len: usize) -> io::Result<Mapping> {
    for _ in 0..REMAP_TRIES {
        let Some(addr) = sys::random_address(len) else {
            break;
        };
        match Mapping::shared_file(file, len, Prot::Rw, Some(addr)) {
            Ok(map) => return Ok(map),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    // The kernel's own choice is randomised by ASLR too.
    Mapping::shared_file(file, len, Prot::Rw, None)
}
