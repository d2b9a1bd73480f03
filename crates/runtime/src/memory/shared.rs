//! Shared memories ([`SharedMemory`], the threads proposal): a linear memory that several
//! stores, on several threads, use at once, so that it outlives any one store.
//!
//! A shared memory takes a slot from its engine's pool as any memory does (so a module that
//! defines one still reuses reservations), but it is *tight* (its slot's accessible part is
//! exactly its length, for code with or without bounds checks) and never *untouched* (it
//! takes no idle image; an instance copies its segments in). Generated code stores no write
//! marks into it, and when its last handle goes the slot goes back to the pool to be reset by
//! the kernel's page map (`reset`), as the slot of a memory the host wrote unmarked is.
//!
//! In a store, a shared memory is a [`LinearMemory`](super::LinearMemory) that points at the
//! shared definition (`base`, `length`) instead of one of its own, so every instance of every
//! store reads one length. Growth takes the memory's lock, makes the new pages accessible,
//! and only then publishes the new length (`Release`); code reads the length anew at every
//! bounds check (see the compiler's `bounds`), and a length never shrinks, so an access that a
//! check admits is always to accessible pages.
//!
//! Waiting and notifying (`memory.atomic.wait32`/`wait64`/`notify`) are `wait`'s.
//!
//! The host's view: other threads may write a shared memory at any time. [`SharedMemory::data`]
//! gives its bytes as cells, `Memory::read`/`write` copy without making a Rust reference, and
//! [`HostBytes`](crate::HostBytes) (what WASI reads and writes through) copies a byte at a time
//! as atomics. A store's [`Memory`](crate::Memory) of a shared memory still hands out slices
//! (`Memory::data`, `data_mut`), which are only as good as the program's own
//! synchronisation: another thread's write while one lives is a race. An embedder sharing a
//! memory between threads reads it through the first three.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ephem_module::{MemoryType, VmMemory};

use super::slot::Slot;
use super::{host_pages, max_pages};

/// A linear memory shared between threads: a cheap handle (clones name the same memory) that
/// any store of its engine can import, on any thread.
#[derive(Clone)]
pub struct SharedMemory(Arc<Inner>);

struct Inner {
    /// What generated code reads: `base` never changes, `length` only grows, written under
    /// `slot`'s lock and read atomically.
    def: UnsafeCell<VmMemory>,
    ty: MemoryType,
    slot: Mutex<Option<Slot>>,
    engine: crate::Engine,
}

// SAFETY: `def.base` is fixed at creation and `def.length` is only written under the `slot`
// lock, with an atomic store, and read with atomic loads (here and in generated code); the
// slot itself is behind the lock. The bytes are shared with every thread by design: that is
// what a shared memory is, and WebAssembly's memory model governs the races on them.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("ty", &self.0.ty)
            .field("len", &self.data_size())
            .finish()
    }
}

impl SharedMemory {
    /// A new zeroed shared memory of type `ty` (which must be shared, with a maximum) in
    /// `engine`'s pool.
    pub fn new(engine: &crate::Engine, ty: MemoryType) -> Result<SharedMemory, crate::Error> {
        if !ty.shared || !ty.is_valid() || u64::from(ty.min) > max_pages(ty) {
            return Err(crate::Error::Usage(format!(
                "a shared memory of {} pages of 2^{} bytes, at most {:?}, cannot be made (a \
                 shared memory's type is shared, with a maximum)",
                ty.min, ty.page_size_log2, ty.max
            )));
        }
        let pool = engine.memory_pool();
        let len = ty.bytes(ty.min) as usize;
        pool.reserve(len)?;
        let made = (|| -> Result<Slot, crate::Error> {
            let mut slot = pool.take(host_pages(len), None, false, ty.large())?;
            let failed = |e| crate::Error::Limit(format!("cannot make a shared memory: {e}"));
            slot.unmap_image().map_err(failed)?;
            slot.set_accessible(host_pages(len)).map_err(failed)?;
            Ok(slot)
        })();
        let slot = made.inspect_err(|_| pool.release_bytes(len))?;
        Ok(SharedMemory(Arc::new(Inner {
            def: UnsafeCell::new(VmMemory {
                base: slot.base,
                length: len as u64,
            }),
            ty,
            slot: Mutex::new(Some(slot)),
            engine: engine.borrow(),
        })))
    }

    /// The engine whose pool the memory's slot comes from.
    pub(crate) fn engine(&self) -> &crate::Engine {
        &self.0.engine
    }

    /// The definition generated code reads.
    pub(crate) fn vm(&self) -> *mut VmMemory {
        self.0.def.get()
    }

    fn length(&self) -> &AtomicU64 {
        // SAFETY: `length` is a properly aligned `u64` that lives as long as `self`, and every
        // access to it is atomic (see `Inner`'s `Send`).
        unsafe { AtomicU64::from_ptr(&raw mut (*self.0.def.get()).length) }
    }

    /// The first byte.
    pub fn base(&self) -> *mut u8 {
        // SAFETY: `base` is never written after creation.
        unsafe { (*self.0.def.get()).base }
    }

    /// The memory's type, with its current size as minimum.
    pub fn ty(&self) -> MemoryType {
        MemoryType {
            min: self.size() as u32,
            ..self.0.ty
        }
    }

    /// The size in pages.
    pub fn size(&self) -> u64 {
        self.data_size() as u64 >> self.0.ty.page_size_log2
    }

    /// The size in bytes.
    pub fn data_size(&self) -> usize {
        self.length().load(Ordering::Acquire) as usize
    }

    /// The bytes, which other threads may be reading and writing as this one does: hence
    /// cells, as wasmtime's `SharedMemory::data` gives them.
    pub fn data(&self) -> &[UnsafeCell<u8>] {
        // SAFETY: `[base, base + length)` is accessible for as long as the memory lives (it
        // never shrinks), and `UnsafeCell<u8>` has `u8`'s layout.
        unsafe { std::slice::from_raw_parts(self.base().cast(), self.data_size()) }
    }

    /// Grows by `delta` pages (within the type's maximum and the engine's bound); returns the
    /// old size in pages.
    pub fn grow(&self, delta: u64) -> Result<u64, crate::Error> {
        self.grow_pages(delta).ok_or_else(|| {
            crate::Error::Limit(format!(
                "cannot grow a shared memory of {} pages by {delta}",
                self.size()
            ))
        })
    }

    /// As [`SharedMemory::grow`]; `None` when the memory cannot grow so.
    pub(crate) fn grow_pages(&self, delta: u64) -> Option<u64> {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slot.as_mut()?;
        let old = self.size();
        let new = old.checked_add(delta)?;
        if new > max_pages(self.0.ty) {
            return None;
        }
        if delta > 0 {
            let (start, end) = (self.data_size(), (new << self.0.ty.page_size_log2) as usize);
            let pool = self.0.engine.memory_pool();
            if !pool.reserve_bytes(end - start) {
                return None;
            }
            if slot.set_accessible(host_pages(end)).is_err() {
                pool.release_bytes(end - start);
                return None;
            }
            self.length().store(end as u64, Ordering::Release);
        }
        Some(old)
    }

    /// Whether `a` and `b` are the same memory.
    pub fn same(a: &SharedMemory, b: &SharedMemory) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// Wakes at most `count` threads waiting at byte `addr` of this memory; returns how many
    /// it woke (see `wait`).
    pub fn atomic_notify(&self, addr: u64, count: u32) -> Result<u32, crate::Error> {
        let at = self.atomic_at(addr, 4)?;
        Ok(super::wait::notify(at, count))
    }

    /// Waits at byte `addr` until notified, unless the 4 bytes there differ from `expected`,
    /// for at most `timeout` (none: without end).
    pub fn atomic_wait32(
        &self,
        addr: u64,
        expected: u32,
        timeout: Option<std::time::Duration>,
    ) -> Result<WaitResult, crate::Error> {
        self.wait(addr, super::wait::Expected::U32(expected), timeout)
    }

    /// As [`SharedMemory::atomic_wait32`], comparing 8 bytes.
    pub fn atomic_wait64(
        &self,
        addr: u64,
        expected: u64,
        timeout: Option<std::time::Duration>,
    ) -> Result<WaitResult, crate::Error> {
        self.wait(addr, super::wait::Expected::U64(expected), timeout)
    }

    fn wait(
        &self,
        addr: u64,
        expected: super::wait::Expected,
        timeout: Option<std::time::Duration>,
    ) -> Result<WaitResult, crate::Error> {
        let at = self.atomic_at(addr, expected.size())?;
        Ok(super::wait::wait(at, expected, timeout, None).into())
    }

    /// The native address of an atomic access of `size` bytes at `addr`, which must be
    /// aligned and within the memory.
    fn atomic_at(&self, addr: u64, size: u64) -> Result<usize, crate::Error> {
        if !addr.is_multiple_of(size) {
            return Err(crate::Error::Usage(format!(
                "unaligned atomic access at {addr}"
            )));
        }
        if addr
            .checked_add(size)
            .is_none_or(|end| end > self.data_size() as u64)
        {
            return Err(crate::Error::Usage(format!(
                "atomic access at {addr} is out of bounds"
            )));
        }
        Ok(self.base() as usize + addr as usize)
    }
}

/// What a wait ended with (wasmtime's name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitResult {
    /// Notified.
    Ok,
    /// The value was not the one expected: no wait.
    Mismatch,
    /// The timeout passed.
    TimedOut,
}

impl From<super::wait::Woke> for WaitResult {
    fn from(w: super::wait::Woke) -> WaitResult {
        match w {
            super::wait::Woke::Notified => WaitResult::Ok,
            super::wait::Woke::NotEqual => WaitResult::Mismatch,
            super::wait::Woke::TimedOut | super::wait::Woke::Stopped => WaitResult::TimedOut,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(slot) = self
            .slot
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let pool = self.engine.memory_pool();
        let len = self.def.get_mut().length as usize;
        pool.release_bytes(len);
        // Reset by the page map: nothing marked what was written.
        pool.give_back(
            slot,
            host_pages(self.ty.bytes(self.ty.min) as usize),
            false,
            false,
        );
    }
}
