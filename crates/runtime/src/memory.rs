//! Linear memories.
//!
//! Each memory reserves [`RESERVATION`] bytes of address space, inaccessible except for its
//! current pages. Generated code adds a 32-bit address and a 32-bit offset to the base without
//! a bounds check: any such access lands inside the reservation, so an out-of-bounds one
//! faults and the fault becomes a trap. The base never moves, so growing is a protection change.

use std::cell::UnsafeCell;
use std::ptr::null_mut;

use ephem_module::{MemoryType, VmMemory};
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

pub const PAGE: u64 = 65536;
/// Most pages a 32-bit memory can have.
pub const MAX_PAGES: u32 = 65536;
/// Address space behind each memory base: 4 GiB of addresses plus 4 GiB of offsets, plus a
/// page for the widest access.
pub const RESERVATION: usize = (8 << 30) + PAGE as usize;

/// A linear memory, shared by the instance defining it and every importer.
pub struct Memory {
    def: Box<UnsafeCell<VmMemory>>,
    ty: MemoryType,
}

impl Memory {
    /// Reserves the address space and makes the first `ty.min` pages accessible (zeroed).
    pub fn new(ty: MemoryType) -> Result<Memory, crate::Error> {
        // SAFETY: a fresh private mapping the kernel places; nothing else is affected.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                null_mut(),
                RESERVATION,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| crate::Error::Resource(format!("cannot reserve linear memory: {e}")))?;
        let memory = Memory {
            def: Box::new(UnsafeCell::new(VmMemory {
                base: base.cast(),
                length: 0,
            })),
            ty,
        };
        if memory.grow(ty.min).is_none() {
            return Err(crate::Error::Resource(format!(
                "cannot allocate {} pages of linear memory",
                ty.min
            )));
        }
        Ok(memory)
    }

    pub fn ty(&self) -> MemoryType {
        MemoryType {
            min: self.pages(),
            max: self.ty.max,
        }
    }

    /// The definition generated code reads.
    pub fn vm(&self) -> *mut VmMemory {
        self.def.get()
    }

    pub fn base(&self) -> *mut u8 {
        // SAFETY: plain read of our own definition.
        unsafe { (*self.def.get()).base }
    }

    pub fn len(&self) -> usize {
        // SAFETY: plain read of our own definition.
        unsafe { (*self.def.get()).length as usize }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pages(&self) -> u32 {
        (self.len() as u64 / PAGE) as u32
    }

    /// Grows by `delta` pages; returns the old size in pages, or `None` past the maximum.
    pub fn grow(&self, delta: u32) -> Option<u32> {
        let old = self.pages();
        let new = old.checked_add(delta)?;
        if new > self.ty.max.unwrap_or(MAX_PAGES).min(MAX_PAGES) {
            return None;
        }
        if delta > 0 {
            let start = self.len();
            let bytes = delta as usize * PAGE as usize;
            // SAFETY: the range lies inside our reservation, past the accessible pages.
            unsafe {
                rustix::mm::mprotect(
                    self.base().add(start).cast(),
                    bytes,
                    MprotectFlags::READ | MprotectFlags::WRITE,
                )
            }
            .ok()?;
            // SAFETY: only this memory's owners write its definition, never concurrently.
            unsafe { (*self.def.get()).length = new as u64 * PAGE };
        }
        Some(old)
    }

    /// Copies `buf.len()` bytes at `offset` out of the memory.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), crate::Error> {
        let end = offset.checked_add(buf.len()).filter(|&e| e <= self.len());
        let end = end.ok_or_else(|| {
            crate::Error::Resource(format!(
                "read of {} bytes at {offset} is out of bounds",
                buf.len()
            ))
        })?;
        // SAFETY: bounds checked; the embedder is not running wasm while it holds `&self` here.
        buf.copy_from_slice(unsafe { &self.bytes()[offset..end] });
        Ok(())
    }

    /// Copies `data` into the memory at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), crate::Error> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.len());
        let end = end.ok_or_else(|| {
            crate::Error::Resource(format!(
                "write of {} bytes at {offset} is out of bounds",
                data.len()
            ))
        })?;
        // SAFETY: as above.
        unsafe { self.bytes()[offset..end].copy_from_slice(data) };
        Ok(())
    }

    /// The accessible bytes.
    ///
    /// # Safety
    /// No wasm code may run on this memory while the slice is alive.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the documented caller contract.
    pub unsafe fn bytes(&self) -> &mut [u8] {
        // SAFETY: `[base, base + len)` is mapped read+write; exclusivity per the contract.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len()) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: we own the reservation; no instance using it remains (they hold an Rc).
        let _ = unsafe { rustix::mm::munmap(self.base().cast(), RESERVATION) };
    }
}
