//! The code pool: a bounded set of slots shared by many threads.
//!
//! Free slots sit in a lock-free bounded queue ([`ArrayQueue`]) that holds the slot memory
//! itself, so taking a slot is one atomic pop that hands its memory to the caller by value and
//! giving it back is one push: no lock, no system call. Slots are created lazily up to
//! `max_slots` (the first `prefault_slots` when the pool is built); a slot too small for a
//! module is replaced by one of the next power-of-two size up to `max_slot_size`. Both are slow
//! paths that make system calls; steady state does not.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use std::os::fd::BorrowedFd;

use crossbeam_queue::ArrayQueue;

use crate::arena::TextId;
use crate::slot::SlotMem;
use crate::sys::{Mapping, Prot};
use crate::{Error, PoolConfig, Strategy};
use crate::{arena, registry};

/// A pool of code slots under one [`Strategy`]. Cheap to clone; clones share the slots.
#[derive(Clone)]
pub struct CodePool {
    inner: Arc<Inner>,
}

struct Inner {
    config: PoolConfig,
    free: ArrayQueue<Slot>,
    /// Slots that exist, free or in use; never above `config.max_slots`.
    created: AtomicUsize,
    remaps: AtomicU64,
    replaced: AtomicU64,
}

/// Counters of the pool's slow paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slots that exist (free or in use).
    pub slots: usize,
    /// Write views moved to a fresh random address.
    pub write_view_remaps: u64,
    /// Slots replaced by a larger one because a module did not fit.
    pub slots_grown: u64,
}

impl CodePool {
    /// Builds a pool and pre-faults its first `config.prefault_slots` slots.
    ///
    /// Fails with [`Error::RwxNotOptedIn`] for [`Strategy::Rwx`] without the opt-in, and with
    /// [`Error::Unavailable`] when the system cannot provide the strategy's memory (no huge page
    /// pool for `hugetlb`, a too-low `RLIMIT_MEMLOCK` for `reuse-locked`).
    pub fn new(config: PoolConfig) -> Result<CodePool, Error> {
        if config.strategy == Strategy::Rwx && config.rwx.is_none() {
            return Err(Error::RwxNotOptedIn);
        }
        let max_slots = config.max_slots.max(1);
        let prefault = config.prefault_slots.min(max_slots);
        let inner = Inner {
            free: ArrayQueue::new(max_slots),
            created: AtomicUsize::new(0),
            remaps: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            config: PoolConfig {
                max_slots,
                ..config
            },
        };
        for _ in 0..prefault {
            let slot = inner.create(inner.config.slot_size)?;
            inner.created.fetch_add(1, Ordering::Relaxed);
            if inner.free.push(slot).is_err() {
                unreachable!("the queue holds max_slots");
            }
        }
        Ok(CodePool {
            inner: Arc::new(inner),
        })
    }

    /// The pool's configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// Takes a slot for `len` bytes of code and makes them writable.
    pub fn acquire(&self, len: usize) -> Result<CodeSlot, Error> {
        let inner = &*self.inner;
        let max = inner.config.max_slot_size;
        if len > max {
            return Err(Error::TooLarge { len, max });
        }
        let mut slot = match inner.free.pop() {
            Some(slot) => slot,
            None => {
                inner
                    .created
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < inner.config.max_slots).then_some(n + 1)
                    })
                    .map_err(|_| Error::Exhausted {
                        max_slots: inner.config.max_slots,
                    })?;
                match inner.create(inner.config.slot_size.max(len)) {
                    Ok(slot) => slot,
                    Err(e) => {
                        inner.created.fetch_sub(1, Ordering::AcqRel);
                        return Err(e);
                    }
                }
            }
        };
        if slot.mem.capacity() < len {
            let size = len.next_power_of_two().min(max);
            match SlotMem::create(inner.config.strategy, size) {
                Ok(bigger) => {
                    inner.replaced.fetch_add(1, Ordering::Relaxed);
                    slot.mem = bigger;
                }
                Err(source) => {
                    inner.give_back(slot);
                    return Err(Error::Io {
                        op: "grow code slot",
                        source,
                    });
                }
            }
        }
        match slot.mem.prepare(len, inner.config.remap_every) {
            Ok(moved) => {
                if moved {
                    inner.remaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(source) => {
                inner.give_back(slot);
                return Err(Error::Io {
                    op: "make code slot writable",
                    source,
                });
            }
        }
        Ok(CodeSlot {
            pool: self.inner.clone(),
            slot: Some(slot),
            len,
        })
    }

    /// Counters of the pool's slow paths.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            slots: self.inner.created.load(Ordering::Acquire),
            write_view_remaps: self.inner.remaps.load(Ordering::Relaxed),
            slots_grown: self.inner.replaced.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for CodePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodePool")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A slot's memory and its entry in the code [`registry`], which it holds for its lifetime.
struct Slot {
    mem: SlotMem,
    entry: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        registry::give_back(self.entry);
    }
}

impl Inner {
    fn create(&self, capacity: usize) -> Result<Slot, Error> {
        let mem = SlotMem::create(self.config.strategy, capacity).map_err(|source| {
            match self.config.strategy {
                // These fail for want of a system resource, not because of a bug or bad input.
                Strategy::HugeTlb | Strategy::ReuseLocked => Error::Unavailable {
                    strategy: self.config.strategy,
                    source,
                },
                _ => Error::Io {
                    op: "create code slot",
                    source,
                },
            }
        })?;
        let entry = registry::take().ok_or(Error::Exhausted {
            max_slots: registry::CAPACITY,
        })?;
        Ok(Slot { mem, entry })
    }

    fn give_back(&self, mut slot: Slot) {
        registry::clear(slot.entry);
        slot.mem.release();
        // Cannot fail: at most `max_slots` slots exist and the queue holds that many.
        let _ = self.free.push(slot);
    }
}

/// A slot taken for one module: `[0, len)` is writable until [`CodeSlot::publish`].
pub struct CodeSlot {
    pool: Arc<Inner>,
    slot: Option<Slot>,
    len: usize,
}

impl CodeSlot {
    /// The bytes to write the module's code into. The loader must write all of them: what it
    /// leaves untouched keeps whatever the slot held.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        self.slot.as_mut().expect("live slot").mem.writable(len)
    }

    /// Makes the written code executable (and no longer writable through any view it gave out).
    pub fn publish(self) -> Result<LoadedCode, Error> {
        self.publish_tagged(0)
    }

    /// As [`CodeSlot::publish`], and records the code in the [`registry`] with `tag`, which
    /// [`registry::lookup`] returns for any address inside it until the code is dropped.
    pub fn publish_tagged(mut self, tag: usize) -> Result<LoadedCode, Error> {
        let mut slot = self.slot.take().expect("live slot");
        match slot.mem.publish(self.len) {
            Ok(ptr) => {
                registry::set(slot.entry, ptr as usize, ptr as usize + self.len, tag);
                Ok(LoadedCode {
                    backing: Backing::Slot {
                        pool: self.pool.clone(),
                        slot: Some(slot),
                    },
                    ptr,
                    len: self.len,
                })
            }
            Err(source) => {
                self.pool.give_back(slot);
                Err(Error::Io {
                    op: "make code executable",
                    source,
                })
            }
        }
    }
}

impl Drop for CodeSlot {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.give_back(slot);
        }
    }
}

impl fmt::Debug for CodeSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeSlot").field("len", &self.len).finish()
    }
}

/// Published, executable code. Dropping it returns the slot to its pool (or unmaps the file).
pub struct LoadedCode {
    backing: Backing,
    ptr: *const u8,
    len: usize,
}

enum Backing {
    Slot {
        pool: Arc<Inner>,
        slot: Option<Slot>,
    },
    File {
        _map: FileMap,
        entry: usize,
    },
}

/// Where a text mapped from a file lives (held for its drop: released or unmapped).
enum FileMap {
    Arena(#[allow(dead_code)] arena::Region),
    Own(#[allow(dead_code)] Mapping),
}

// SAFETY: the code is immutable while published and its memory is owned by this value;
// the raw pointer is only an address into that memory.
unsafe impl Send for LoadedCode {}
// SAFETY: as above; shared access only reads the address.
unsafe impl Sync for LoadedCode {}

impl LoadedCode {
    /// Maps `len` bytes of `file` at `offset` (page-aligned) read+execute, private, straight
    /// from the page cache: zero copy, and the pages are shared with every other process that
    /// maps the same file. Registered in the [`registry`] with `tag`, like published slots.
    ///
    /// This is the loading path for code too large to copy cheaply; it makes a system call
    /// (`mmap`, into a region of the arena (`arena.rs`) that the drop releases without
    /// unmapping) and takes page faults on first execution of each page, unless `id` names a
    /// text that a free region still maps, which is then taken back as it is. The file must not
    /// be modified while mapped (ephem only ever replaces files by rename).
    pub fn map_file(
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        tag: usize,
        id: Option<TextId>,
    ) -> Result<LoadedCode, Error> {
        let io = |source| Error::Io {
            op: "map code from file",
            source,
        };
        let (map, ptr) = match arena::place(file, offset, len, id).map_err(io)? {
            Some(region) => {
                let ptr = region.as_ptr();
                (FileMap::Arena(region), ptr)
            }
            None => {
                let map = Mapping::private_file(file, offset, len.max(1), Prot::Rx).map_err(io)?;
                let ptr = map.as_ptr() as *const u8;
                (FileMap::Own(map), ptr)
            }
        };
        let entry = registry::take().ok_or(Error::Exhausted {
            max_slots: registry::CAPACITY,
        })?;
        registry::set(entry, ptr as usize, ptr as usize + len, tag);
        Ok(LoadedCode {
            backing: Backing::File { _map: map, entry },
            ptr,
            len,
        })
    }

    /// Address of the first byte of code in the executable view.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Length of the published code.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no code was published.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for LoadedCode {
    fn drop(&mut self) {
        match &mut self.backing {
            Backing::Slot { pool, slot } => {
                if let Some(slot) = slot.take() {
                    pool.give_back(slot);
                }
            }
            // The registry entry goes before the mapping (dropped after this) is unmapped.
            Backing::File { entry, .. } => registry::give_back(*entry),
        }
    }
}

impl fmt::Debug for LoadedCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedCode")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
