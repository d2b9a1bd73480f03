//! The code pool: a bounded set of slots shared by many threads.
//!
//! Free slots sit in one list, in the order they were given back, behind a mutex held only to
//! take or put one (no system call, no allocation: the list has room for every slot); in front
//! of it, each thread keeps the last few slots it released that hold a known text (`near`),
//! so that a thread loading the same small texts again takes no lock. Slots are
//! created lazily up to `max_slots` (the first `prefault_slots` when the pool is built); a slot
//! too small for a module is replaced by one of the next power-of-two size up to
//! `max_slot_size`. Both are slow paths that make system calls; steady state does not.
//!
//! # Text affinity
//! A free slot keeps the code it last published. A load that names its text ([`TextId`],
//! [`CodePool::acquire_text`]) takes back a free slot that still holds exactly that text and
//! publishes it as it is: nothing is written, so the instruction cache keeps the code's lines
//! (writing code, even the same bytes, evicts them, and on x86_64 every load would then
//! refetch its code: see docs/bench-log/) and the write view is not touched.
//! A load whose text no free slot holds takes a slot that holds no known text, else a new slot
//! while fewer than [`PoolConfig::keep_texts`] exist, else the slot freed longest ago. Equal ids
//! must mean equal bytes, relocations included: the caller's promise, as for the arena.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::os::fd::BorrowedFd;

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
    free: Mutex<Free>,
    remaps: AtomicU64,
    replaced: AtomicU64,
}

/// The free slots, oldest given back first, and how many slots exist (free or in use; never
/// above `config.max_slots`).
struct Free {
    slots: VecDeque<Slot>,
    created: usize,
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

/// What [`CodePool::acquire_text`] found.
#[derive(Debug)]
pub enum Acquired {
    /// A free slot still held the text: published again as it was.
    Kept(LoadedCode),
    /// A slot to write the text into.
    Empty(CodeSlot),
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
            free: Mutex::new(Free {
                slots: VecDeque::with_capacity(max_slots),
                created: 0,
            }),
            remaps: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            config: PoolConfig {
                max_slots,
                ..config
            },
        };
        for _ in 0..prefault {
            let slot = inner.create(inner.config.slot_size)?;
            let mut free = inner.lock();
            free.created += 1;
            free.slots.push_back(slot);
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
        match self.take(len, None)? {
            Taken::Held(_) => unreachable!("only a named text is held"),
            Taken::Free(slot) => self.make_writable(slot, len, None),
        }
    }

    /// As [`CodePool::acquire`] for the text `text` of `len` bytes, or that text already
    /// published (registered with `tag`, as [`CodeSlot::publish_tagged`] does) when a free slot
    /// still holds it; see the module documentation. A slot returned empty remembers `text` once
    /// published.
    pub fn acquire_text(&self, len: usize, text: TextId, tag: usize) -> Result<Acquired, Error> {
        match self.take(len, Some(text))? {
            Taken::Held(slot) => Ok(Acquired::Kept(LoadedCode::from_slot(
                self.inner.clone(),
                slot,
                len,
                tag,
            ))),
            Taken::Free(slot) => Ok(Acquired::Empty(self.make_writable(
                slot,
                len,
                Some(text),
            )?)),
        }
    }

    /// A free slot for `len` bytes: one holding `text` if any does, else per the module
    /// documentation (a new one when none is free, up to `max_slots`).
    fn take(&self, len: usize, text: Option<TextId>) -> Result<Taken, Error> {
        let inner = &*self.inner;
        let max = inner.config.max_slot_size;
        if len > max {
            return Err(Error::TooLarge { len, max });
        }
        let holds = |s: &Slot| text.is_some() && s.holds == text && s.mem.kept(len).is_some();
        if let Some(slot) = near::take(inner, holds) {
            return Ok(Taken::Held(slot));
        }
        let mut free = inner.lock();
        if let Some(i) = free.slots.iter().rposition(holds) {
            let slot = free.slots.remove(i).expect("found");
            return Ok(Taken::Held(slot));
        }
        // This thread's kept slots count as free ones (they were on the list before).
        let idle = free.slots.len() + near::count(inner);
        let unknown = free.slots.iter().position(|s| s.holds.is_none());
        let fresh = free.created < inner.config.max_slots
            && (idle == 0 || free.created < inner.config.keep_texts);
        let slot = match unknown {
            Some(i) => free.slots.remove(i).expect("found"),
            None if fresh => {
                free.created += 1;
                drop(free);
                return match inner.create(inner.config.slot_size.max(len)) {
                    Ok(slot) => Ok(Taken::Free(slot)),
                    Err(e) => {
                        inner.lock().created -= 1;
                        Err(e)
                    }
                };
            }
            // The one freed longest ago: on the list, else kept by this thread.
            None => (free.slots.pop_front())
                .or_else(|| near::take_oldest(inner))
                .ok_or(Error::Exhausted {
                    max_slots: inner.config.max_slots,
                })?,
        };
        Ok(Taken::Free(slot))
    }

    /// Grows `slot` if it is too small for `len` bytes and makes them writable.
    fn make_writable(
        &self,
        mut slot: Slot,
        len: usize,
        text: Option<TextId>,
    ) -> Result<CodeSlot, Error> {
        let inner = &*self.inner;
        // What it held is about to be overwritten.
        slot.holds = None;
        if slot.mem.capacity() < len {
            let size = len.next_power_of_two().min(inner.config.max_slot_size);
            match SlotMem::create(inner.config.strategy, size) {
                Ok(bigger) => {
                    inner.replaced.fetch_add(1, Ordering::Relaxed);
                    slot.mem = bigger;
                }
                Err(source) => {
                    self.inner.give_back(slot);
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
                self.inner.give_back(slot);
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
            text,
        })
    }

    /// Counters of the pool's slow paths.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            slots: self.inner.lock().created,
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

/// A free entry of the code [`registry`], for a new slot or a text's own mapping.
fn registry_entry() -> Result<usize, Error> {
    registry::take().ok_or(Error::Exhausted {
        max_slots: registry::CAPACITY,
    })
}

/// A slot's memory, its entry in the code [`registry`] (held for its lifetime), and the text it
/// holds if it is known to be exactly one (see the module documentation).
struct Slot {
    mem: SlotMem,
    entry: usize,
    holds: Option<TextId>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        registry::give_back(self.entry);
    }
}

/// What [`CodePool::take`] found: a slot holding the text asked for, or one to write.
enum Taken {
    Held(Slot),
    Free(Slot),
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Free> {
        // Nothing panics while holding it; a poisoned list is still consistent.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

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
        let entry = registry_entry()?;
        Ok(Slot {
            mem,
            entry,
            holds: None,
        })
    }

    /// Takes back a slot: this thread keeps it if it holds a known text (see [`near`]), else
    /// it goes on the list (or the slot this thread kept longest goes on its pool's list).
    fn give_back(self: &Arc<Self>, mut slot: Slot) {
        registry::clear(slot.entry);
        slot.mem.release();
        if let Some(slot) = near::put(self, slot) {
            self.keep_free(slot);
        }
    }

    /// Puts a free slot on the list.
    fn keep_free(&self, slot: Slot) {
        // No allocation: the list has room for `max_slots`, and at most that many exist.
        self.lock().slots.push_back(slot);
    }
}

impl crate::near::Pool<Slot> for Inner {
    fn take_back(&self, slot: Slot) {
        self.keep_free(slot);
    }
}

/// A slot taken for one module: `[0, len)` is writable until [`CodeSlot::publish`].
pub struct CodeSlot {
    pool: Arc<Inner>,
    slot: Option<Slot>,
    len: usize,
    /// The text being written, remembered by the slot once published.
    text: Option<TextId>,
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
                slot.holds = self.text.filter(|_| slot.mem.kept(self.len).is_some());
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
    File(#[allow(dead_code)] FileMap),
}

/// Where a text mapped from a file lives, held for its drop: released (clearing the region's
/// registry entry) or unmapped.
enum FileMap {
    Arena(#[allow(dead_code)] arena::Region),
    Own(#[allow(dead_code)] OwnMap),
}

/// A text's own mapping and the registry entry taken for it.
struct OwnMap {
    entry: usize,
    _map: Mapping,
}

impl Drop for OwnMap {
    /// The registry entry goes before the mapping (dropped after this) is unmapped.
    fn drop(&mut self) {
        registry::give_back(self.entry);
    }
}

// SAFETY: the code is immutable while published and its memory is owned by this value;
// the raw pointer is only an address into that memory.
unsafe impl Send for LoadedCode {}
// SAFETY: `&LoadedCode` only hands out the address and length (no method writes through the
// pointer), and the published code does not change while it is shared.
unsafe impl Sync for LoadedCode {}

impl LoadedCode {
    /// The code `slot` still holds (of `len` bytes), published again with `tag`.
    fn from_slot(pool: Arc<Inner>, slot: Slot, len: usize, tag: usize) -> LoadedCode {
        let ptr = slot
            .mem
            .kept(len)
            .expect("taken only while it holds its code");
        registry::set(slot.entry, ptr as usize, ptr as usize + len, tag);
        LoadedCode {
            backing: Backing::Slot {
                pool,
                slot: Some(slot),
            },
            ptr,
            len,
        }
    }

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
                region.register(len, tag);
                let ptr = region.as_ptr();
                (FileMap::Arena(region), ptr)
            }
            None => {
                let map = Mapping::private_file(file, offset, len.max(1), Prot::Rx).map_err(io)?;
                let entry = registry_entry()?;
                let ptr = map.as_ptr() as *const u8;
                registry::set(entry, ptr as usize, ptr as usize + len, tag);
                let map = OwnMap { entry, _map: map };
                (FileMap::Own(map), ptr)
            }
        };
        Ok(LoadedCode {
            backing: Backing::File(map),
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
            Backing::File(_) => {}
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

/// The free slots each thread keeps, in front of their pools' lists: a slot released while it
/// holds a known text stays with the thread that released it, which takes it back for that
/// text without the pool's lock (and without reading the list), so that threads loading small
/// texts do not take turns at one lock on every load. A thread keeps [`near::PER_THREAD`]
/// slots of all pools at most; the oldest goes to its pool's list when a newer one comes, and
/// all go there when the thread exits. A thread that finds no free slot on the list takes the
/// oldest it keeps before it makes a new one or fails; slots another thread keeps wait for it.
mod near {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::{Inner, Slot};
    use crate::near::{Kept, keep, with};

    /// Slots a thread keeps, of all pools together.
    pub(super) const PER_THREAD: usize = 8;

    thread_local! {
        static NEAR: RefCell<Kept<Inner, Slot>> = const { RefCell::new(Kept::new()) };
    }

    /// This thread's most recently released slot of `pool` that `wanted` accepts.
    pub(super) fn take(pool: &Inner, wanted: impl Fn(&Slot) -> bool) -> Option<Slot> {
        with(&NEAR, |kept| kept.take(pool, wanted)).flatten()
    }

    /// This thread's least recently released slot of `pool`.
    pub(super) fn take_oldest(pool: &Inner) -> Option<Slot> {
        with(&NEAR, |kept| kept.take_oldest(pool, |_| true)).flatten()
    }

    /// How many slots of `pool` this thread keeps.
    pub(super) fn count(pool: &Inner) -> usize {
        with(&NEAR, |kept| kept.count(pool)).unwrap_or(0)
    }

    /// Keeps `slot` of `pool` if it holds a known text; returns the slot of `pool` that goes
    /// to its list: `slot` itself (no known text, or the thread is exiting) or the oldest kept.
    pub(super) fn put(pool: &Arc<Inner>, slot: Slot) -> Option<Slot> {
        if slot.holds.is_none() {
            return Some(slot);
        }
        keep(&NEAR, pool, slot, PER_THREAD, PER_THREAD)
    }
}
