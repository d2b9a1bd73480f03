//! The platform layer: thin wrappers over the system calls that code memory needs.
//!
//! Everything that touches raw mappings lives here, so the rest of the crate is safe code.
//! A [`Mapping`] owns a range of address space and unmaps it when dropped. Linux first (via
//! rustix); another platform would provide the same small surface: anonymous and file-backed
//! mappings, protection changes, a memory file for the dual view, and an instruction-cache
//! maintenance step after code is written.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::{self, NonNull};

use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags, mmap, mmap_anonymous, mprotect, munmap};

#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "ephem-code-memory: instruction-cache maintenance (sys::flush_icache) and the trap fill byte \
     are only written for x86_64 so far; aarch64 needs `dc cvau` / `ic ivau` over the written range"
);

/// The byte that fills code memory no current owner wrote: `int3` traps if ever executed.
pub const TRAP_FILL: u8 = 0xCC;

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Size of a huge page used by the `hugetlb` strategy.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Rounds `n` up to a multiple of `align` (a power of two).
pub fn round_up(n: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    (n + align - 1) & !(align - 1)
}

/// Access a mapping grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    Rw,
    Rx,
    /// Only for the opt-in `rwx` baseline.
    Rwx,
}

impl Prot {
    fn map_flags(self) -> ProtFlags {
        match self {
            Prot::Rw => ProtFlags::READ | ProtFlags::WRITE,
            Prot::Rx => ProtFlags::READ | ProtFlags::EXEC,
            Prot::Rwx => ProtFlags::READ | ProtFlags::WRITE | ProtFlags::EXEC,
        }
    }
    fn mprotect_flags(self) -> MprotectFlags {
        match self {
            Prot::Rw => MprotectFlags::READ | MprotectFlags::WRITE,
            Prot::Rx => MprotectFlags::READ | MprotectFlags::EXEC,
            Prot::Rwx => MprotectFlags::READ | MprotectFlags::WRITE | MprotectFlags::EXEC,
        }
    }
}

/// How an anonymous mapping is backed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anon {
    Private,
    PrivateLocked,
    Shared,
    HugeTlb,
}

/// An owned range of mapped address space, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Mapping` is plain owned address space; nothing about it is tied to the thread that
// created it. Access to its bytes is governed by the owners in this crate (one owner per slot).
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` only hands out the address and length, never the bytes; the methods that
// change the mapping through `&self` (`place_file`, `clear`, `protect`) are system calls whose
// callers own the range they change.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of fresh anonymous memory, pre-faulted (`MAP_POPULATE`).
    pub fn anonymous(len: usize, prot: Prot, anon: Anon) -> io::Result<Mapping> {
        let mut flags = MapFlags::POPULATE;
        flags |= match anon {
            Anon::Private => MapFlags::PRIVATE,
            Anon::PrivateLocked => MapFlags::PRIVATE | MapFlags::LOCKED,
            Anon::Shared => MapFlags::SHARED,
            Anon::HugeTlb => MapFlags::PRIVATE | MapFlags::HUGETLB | MapFlags::HUGE_2MB,
        };
        // SAFETY: a null hint without MAP_FIXED lets the kernel choose an unused range, so no
        // existing mapping (and no Rust object) is affected.
        let ptr = unsafe { mmap_anonymous(ptr::null_mut(), len, prot.map_flags(), flags)? };
        Ok(Mapping::from_raw(ptr, len))
    }

    /// Maps `len` bytes of `file` from offset 0 as a shared, pre-faulted view. With `hint`, the
    /// view is placed exactly there if that range is free (`MAP_FIXED_NOREPLACE`, never replacing
    /// anything), and the call fails with `EEXIST` otherwise.
    pub fn shared_file(
        file: &OwnedFd,
        len: usize,
        prot: Prot,
        hint: Option<usize>,
    ) -> io::Result<Mapping> {
        let mut flags = MapFlags::SHARED | MapFlags::POPULATE;
        let addr = match hint {
            Some(addr) => {
                flags |= MapFlags::FIXED_NOREPLACE;
                addr as *mut _
            }
            None => ptr::null_mut(),
        };
        // SAFETY: either the kernel chooses a free range, or MAP_FIXED_NOREPLACE refuses to map
        // over anything that exists; no existing mapping is replaced.
        let ptr = unsafe { mmap(addr, len, prot.map_flags(), flags, file.as_fd(), 0)? };
        Ok(Mapping::from_raw(ptr, len))
    }

    /// Maps `len` bytes of `file` from `offset` (page-aligned) as a private view: pages come
    /// from the page cache, shared with every other mapping of the file, until written
    /// (`Prot::Rx` views are never written).
    pub fn private_file(
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        prot: Prot,
    ) -> io::Result<Mapping> {
        // SAFETY: the kernel chooses a free range; no existing mapping is replaced.
        let ptr = unsafe {
            mmap(
                ptr::null_mut(),
                len,
                prot.map_flags(),
                MapFlags::PRIVATE,
                file,
                offset,
            )?
        };
        Ok(Mapping::from_raw(ptr, len))
    }

    fn from_raw(ptr: *mut core::ffi::c_void, len: usize) -> Mapping {
        Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null on success"),
            len,
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn size(&self) -> usize {
        self.len
    }

    /// Reserves `len` bytes of address space: inaccessible, not backed by memory, for
    /// [`Mapping::place_file`] to map into.
    pub fn reserve(len: usize) -> io::Result<Mapping> {
        // SAFETY: a null hint without MAP_FIXED lets the kernel choose an unused range, so no
        // existing mapping (and no Rust object) is affected.
        let ptr = unsafe {
            mmap_anonymous(
                ptr::null_mut(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )?
        };
        Ok(Mapping::from_raw(ptr, len))
    }

    /// Maps `len` bytes of `file` from `offset` (page-aligned) read+execute, private, over
    /// `[at, at + len)` of this mapping, replacing whatever was mapped there in the same call.
    ///
    /// The caller guarantees that nothing uses that range (no code runs in it, no reference
    /// points into it).
    ///
    /// Pages are not populated up front: an instance runs a few pages of its text, which
    /// fault in (sixteen at a time, by the kernel's fault-around), while `MAP_POPULATE` would
    /// map all of it on every load of a text new to the process (see docs/bench-log/).
    pub(crate) fn place_file(
        &self,
        at: usize,
        len: usize,
        file: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<()> {
        assert!(at.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: MAP_FIXED replaces only pages inside this mapping, which we own; per the
        // contract nothing uses them.
        unsafe {
            mmap(
                self.ptr.as_ptr().add(at).cast(),
                len,
                Prot::Rx.map_flags(),
                MapFlags::PRIVATE | MapFlags::FIXED,
                file,
                offset,
            )?
        };
        Ok(())
    }

    /// Makes `[at, at + len)` of this mapping inaccessible, unbacked address space again. The
    /// same contract as [`Mapping::place_file`].
    pub(crate) fn clear(&self, at: usize, len: usize) -> io::Result<()> {
        assert!(at.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: MAP_FIXED replaces only pages inside this mapping (asserted above), which we
        // own; per the contract nothing uses them, and they become inaccessible.
        unsafe {
            mmap_anonymous(
                self.ptr.as_ptr().add(at).cast(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::NORESERVE,
            )?
        };
        Ok(())
    }

    /// Changes the protection of `[0, len)` of this mapping.
    ///
    /// The caller guarantees that no Rust reference into the range outlives a change that
    /// removes write access; in this crate, writable slices are borrowed from an owner that the
    /// flip to read+execute consumes.
    pub(crate) fn protect(&self, len: usize, prot: Prot) -> io::Result<()> {
        assert!(len <= self.len);
        // SAFETY: the range lies inside this mapping (asserted above), which we own; per the
        // caller contract no reference into it outlives the loss of write access.
        unsafe { mprotect(self.ptr.as_ptr().cast(), len, prot.mprotect_flags())? };
        Ok(())
    }

    /// The mapping's bytes, for writing. Only valid while the mapping is writable.
    ///
    /// # Safety
    /// The range `[0, len)` must currently be mapped writable and no other reference to it may
    /// exist for the returned lifetime.
    pub(crate) unsafe fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.len);
        // SAFETY: in bounds of a live mapping; writability and exclusivity per the contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this range; nothing borrows it once the owner is dropped. An error here
        // could only mean invalid arguments, which the constructor rules out.
        let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Creates an anonymous memory file of `len` bytes, the backing of a dual-mapped code slot.
pub fn memory_file(len: usize) -> io::Result<OwnedFd> {
    let fd = memfd_create("ephem-code", MemfdFlags::CLOEXEC)?;
    ftruncate(&fd, len as u64)?;
    Ok(fd)
}

/// A random page-aligned address in the lower half of the user address space, for placing a
/// write view where an attacker cannot predict it.
pub fn random_address(len: usize) -> Option<usize> {
    let mut bytes = [0u8; 8];
    rustix::rand::getrandom(&mut bytes[..], rustix::rand::GetRandomFlags::empty()).ok()?;
    // Between 4 GiB and 64 TiB: clear of the executable, heap and stacks on x86_64's 47-bit
    // user space, with 34 bits of page-granular entropy.
    let lo = 1usize << 32;
    let hi = (1usize << 46) - len;
    let span = hi - lo;
    let addr = lo + (u64::from_ne_bytes(bytes) as usize % span);
    Some(addr & !(page_size() - 1))
}

/// Makes freshly written code visible to instruction fetch on `[ptr, ptr + len)`.
///
/// x86_64 keeps instruction caches coherent with stores, including stores through another
/// virtual alias of the same physical page, so there is nothing to do. On aarch64 this must
/// clean the data cache and invalidate the instruction cache over the range (`dc cvau`,
/// `dsb ish`, `ic ivau`, `dsb ish`, `isb`); see the compile error above.
#[inline]
pub fn flush_icache(_ptr: *const u8, _len: usize) {}
