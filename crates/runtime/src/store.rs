//! Stores: the owner of everything instances make.
//!
//! A [`Store<T>`] owns every instance, memory, table, global and host function created in it,
//! and the embedder's data `T`; they are dropped together when the store is. Everything an
//! embedder holds ([`crate::Instance`], [`crate::Func`], [`crate::Memory`], …) is a small
//! `Copy` handle: the store's id and an index or a pointer into the store, valid only with that
//! store (using one with another store panics, as in wasmtime).
//!
//! # Why this is sound
//! Generated code and tables hold raw pointers: a funcref points into its instance's vmctx, a
//! vmctx points at memories, tables and globals, and an imported host function's funcref at
//! its host context. All of them point into the same store, because imports and table or
//! global writes are only accepted from the store being used, and nothing in a store is freed
//! before the store itself. So a funcref stored in another instance's table can always be
//! called: its instance lives as long as the table does.
//!
//! # Why a store is `Send`
//! A store holds reference-counted and raw pointers that are not `Send` on their own, but
//! every one of them points into the store (or at engine-wide state that is `Sync`), and no
//! handle gives out anything but copies of ids. Moving the store moves all of them at once.
//! The one thread-bound value generated code reads, the stack limit, lives in the store and is
//! rewritten for the current thread on every entry into wasm.
//!
//! # Cost
//! Creating a store is one allocation (the boxed inner part, so that its address, which
//! instances point at, never changes); its vectors are those a store dropped earlier on the
//! same thread left, emptied, so a store per invocation does not allocate them again.

use std::cell::{Cell, UnsafeCell};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::func::{HostFailure, HostFunc};
use crate::global::GlobalData;
use crate::instance::InstanceData;
use crate::limits::{Answer, Ask, ResourceLimiter};
use crate::linker::Hosts;
use crate::memory::LinearMemory;
use crate::shared::Shared;
use crate::table::TableData;
use crate::{Engine, VmFuncRef};

/// Identifies one store among all stores of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StoreId(NonZeroU64);

impl StoreId {
    /// A new id. Each thread takes ids from a block of [`StoreId::BLOCK`] it reserved, so that
    /// threads making stores do not all write one counter.
    fn next() -> StoreId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        thread_local! {
            /// The next id of this thread's block, and the block's end.
            static BLOCK: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
        }
        let reserve = || {
            let start = NEXT.fetch_add(StoreId::BLOCK, Ordering::Relaxed);
            assert!(start < u64::MAX - StoreId::BLOCK, "2^64 stores");
            start
        };
        let id = BLOCK
            .try_with(|block| {
                let (mut next, mut end) = block.get();
                if next == end {
                    next = reserve();
                    end = next + StoreId::BLOCK;
                }
                block.set((next + 1, end));
                next
            })
            // A thread that is exiting takes a block of its own for this one id.
            .unwrap_or_else(|_| reserve());
        StoreId(NonZeroU64::new(id).expect("ids start at 1"))
    }

    const BLOCK: u64 = 1024;
}

/// A handle's place in a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Stored {
    pub(crate) store: StoreId,
    pub(crate) index: u32,
}

/// Where an instance's memories, tables and globals are in its store: indices into the store's
/// lists, apart in type from the module's indices into its index spaces (plain `u32`s), which
/// an instance maps to these.
macro_rules! store_index {
    ($($(#[$doc:meta])* $name:ident($field:ident: $ty:ty);)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) u32);

        impl $name {
            /// What this index names in `store`.
            pub(crate) fn of(self, store: &StoreOpaque) -> &$ty {
                &store.$field[self.0 as usize]
            }
        }
    )*};
}

store_index! {
    /// A memory's index in its store.
    StoreMemory(memories: LinearMemory);
    /// A table's index in its store.
    StoreTable(tables: TableData);
    /// A global's index in its store.
    StoreGlobal(globals: GlobalData);
}

/// Everything instances make, and the embedder's data. See the module documentation.
pub struct Store<T> {
    pub(crate) inner: Box<StoreInner<T>>,
}

/// The store's state; `opaque` first, so that a pointer to it is a pointer to its opaque part
/// (what type-erased code such as a host function's context receives).
#[repr(C)]
pub(crate) struct StoreInner<T> {
    pub(crate) opaque: StoreOpaque,
    pub(crate) data: T,
    limiter: Option<Limiter<T>>,
}

/// How a store finds its [`ResourceLimiter`] in its data (see [`Store::limiter`]).
type Limiter<T> = Box<dyn (FnMut(&mut T) -> &mut dyn ResourceLimiter) + Send>;

/// Asks the limiter of the `StoreInner<T>` that `store` is the opaque part of.
///
/// # Safety
/// `store` must point into a `StoreInner<T>` with provenance over all of it, and nothing may
/// borrow its data or limiter during the call (the opaque part may be borrowed: this touches
/// only the fields after it).
unsafe fn ask_limiter<T>(store: *mut StoreOpaque, ask: Ask) -> Option<Answer> {
    let inner = store.cast::<StoreInner<T>>();
    // SAFETY: per the contract; the two fields are disjoint from each other and from `opaque`.
    let (limiter, data) = unsafe {
        (
            &mut *std::ptr::addr_of_mut!((*inner).limiter),
            &mut *std::ptr::addr_of_mut!((*inner).data),
        )
    };
    Some(crate::limits::answer(limiter.as_mut()?(data), ask))
}

/// The part of a store that does not depend on `T`. Public only so that the typed-value
/// traits can name it; not reachable from outside the crate.
#[doc(hidden)]
pub struct StoreOpaque {
    pub(crate) id: StoreId,
    pub(crate) engine: Engine,
    /// Dropped first: code leaves the trap registry before anything it points at goes. Boxed:
    /// an instance's address is fixed, because its vmctx points at it.
    #[allow(clippy::vec_box)]
    pub(crate) instances: Vec<Box<InstanceData>>,
    pub(crate) memories: Vec<LinearMemory>,
    pub(crate) tables: Vec<TableData>,
    pub(crate) globals: Vec<GlobalData>,
    pub(crate) host_funcs: Vec<StoredHostFunc>,
    /// What keeps host functions alive (see [`Kept`]).
    keep: Vec<Kept>,
    /// What the last failed host function left for the caller to report or resume.
    pub(crate) host_failure: Option<HostFailure>,
    /// The stack limit every vmctx of this store points at (see `signals`). In the boxed
    /// inner part, so its address is fixed.
    pub(crate) stack_limit: UnsafeCell<usize>,
    /// The epoch at which this store's guests are interrupted (never, by default). Atomic: the
    /// signal handler reads it (see `interrupt`).
    pub(crate) epoch_deadline: AtomicU64,
    /// Fuel left for metered code (unlimited until [`Store::set_fuel`]); every vmctx points at
    /// it. Below zero once a charge could not be paid.
    pub(crate) fuel: UnsafeCell<i64>,
    fuel_enabled: bool,
    /// Whether this store's instances run metered code, once it has one. Metered code passes
    /// the fuel in the pinned register, which unmetered code keeps as its own (see
    /// `ephem_module`), so the two kinds cannot call each other and a store runs one.
    metered: Option<bool>,
    /// `ask_limiter` for this store's data type, once a limiter is set.
    pub(crate) limiter: Option<unsafe fn(*mut StoreOpaque, Ask) -> Option<Answer>>,
    /// Tags and exceptions (see `exceptions`), made on first use (`StoreOpaque::exceptions`).
    pub(crate) exceptions: std::cell::OnceCell<Box<crate::exceptions::Exceptions>>,
    /// GC objects (see `gc`); every vmctx points at its `VmGcHeap`.
    pub(crate) gc: crate::gc::GcHeap,
}

/// A store's vectors, empty: a dropped store's are kept per thread for the next store, since a
/// store per invocation would otherwise allocate each of them again on its first use.
#[derive(Default)]
struct Parts {
    #[allow(clippy::vec_box)]
    instances: Vec<Box<InstanceData>>,
    memories: Vec<LinearMemory>,
    tables: Vec<TableData>,
    globals: Vec<GlobalData>,
    host_funcs: Vec<StoredHostFunc>,
    keep: Vec<Kept>,
}

thread_local! {
    static SPARE_PARTS: std::cell::Cell<Option<Parts>> = const { std::cell::Cell::new(None) };
}

impl Parts {
    /// Larger vectors are freed rather than kept: a store that held that much is rare.
    const MAX_KEPT: usize = 64;

    fn take() -> Parts {
        SPARE_PARTS
            .try_with(|spare| spare.take())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Keeps these (emptied) vectors for the next [`Parts::take`] on this thread.
    fn give_back(self) {
        let small = [
            self.instances.capacity(),
            self.memories.capacity(),
            self.tables.capacity(),
            self.globals.capacity(),
            self.host_funcs.capacity(),
            self.keep.capacity(),
        ]
        .iter()
        .all(|&c| c <= Self::MAX_KEPT);
        if small {
            // During thread exit they are simply freed.
            let _ = SPARE_PARTS.try_with(|spare| spare.set(Some(self)));
        }
    }
}

impl Drop for StoreOpaque {
    fn drop(&mut self) {
        // In the fields' order, as without this: instances first (see the field).
        self.instances.clear();
        self.memories.clear();
        self.tables.clear();
        self.globals.clear();
        self.host_funcs.clear();
        self.keep.clear();
        Parts {
            instances: std::mem::take(&mut self.instances),
            memories: std::mem::take(&mut self.memories),
            tables: std::mem::take(&mut self.tables),
            globals: std::mem::take(&mut self.globals),
            host_funcs: std::mem::take(&mut self.host_funcs),
            keep: std::mem::take(&mut self.keep),
        }
        .give_back();
    }
}

/// What keeps a store's host functions alive: one function's own reference, or a linker's
/// functions (one entry for all of those an `InstancePre` imports, however many
/// instantiations).
pub(crate) enum Kept {
    Func(#[allow(dead_code, reason = "held, never read")] Arc<HostFunc>),
    Hosts(Shared<Hosts>),
}

/// A host function made in (or imported into) a store.
pub(crate) struct StoredHostFunc {
    /// Kept alive by an entry of the store's `keep`.
    pub(crate) func: std::ptr::NonNull<HostFunc>,
    /// Its funcref in the vmctx of the first instance that imported it: how wasm code can call
    /// it through a table (it needs an importing module's adapter for its type).
    pub(crate) funcref: Option<std::ptr::NonNull<VmFuncRef>>,
}

// SAFETY: see "Why a store is `Send`" in the module documentation: every pointer in the store
// points into it or at `Sync` engine state, and the thread-bound stack limit is rewritten on
// every entry into wasm.
unsafe impl Send for StoreOpaque {}

impl<T> Store<T> {
    /// A new, empty store for `engine`, holding `data`.
    pub fn new(engine: &Engine, data: T) -> Store<T> {
        Store {
            inner: Box::new(StoreInner {
                opaque: {
                    let Parts {
                        instances,
                        memories,
                        tables,
                        globals,
                        host_funcs,
                        keep,
                    } = Parts::take();
                    StoreOpaque {
                        id: StoreId::next(),
                        engine: engine.borrow(),
                        instances,
                        memories,
                        tables,
                        globals,
                        host_funcs,
                        keep,
                        host_failure: None,
                        stack_limit: UnsafeCell::new(0),
                        epoch_deadline: AtomicU64::new(u64::MAX),
                        fuel: UnsafeCell::new(i64::MAX),
                        fuel_enabled: false,
                        metered: None,
                        limiter: None,
                        exceptions: Default::default(),
                        gc: Default::default(),
                    }
                },
                data,
                limiter: None,
            }),
        }
    }

    /// Sets how the store finds its [`ResourceLimiter`] in its data, typically
    /// `store.limiter(|data| &mut data.limits)` with a [`crate::StoreLimits`] in the data.
    /// Every later instantiation, memory or table creation and growth asks it (see `limits`).
    pub fn limiter(
        &mut self,
        limiter: impl (FnMut(&mut T) -> &mut dyn ResourceLimiter) + Send + 'static,
    ) {
        self.inner.limiter = Some(Box::new(limiter));
        self.inner.opaque.limiter = Some(ask_limiter::<T>);
    }

    /// The engine this store belongs to.
    pub fn engine(&self) -> &Engine {
        &self.inner.opaque.engine
    }

    /// Interrupts this store's guests once the engine's epoch has advanced `ticks` past its
    /// current value (see [`Engine::increment_epoch`]): a guest running wasm code traps with
    /// `Interrupted` at once, one in a host function when that returns, and a call that would
    /// begin after it does not begin. Any module can be interrupted; nothing is compiled in for
    /// it. `u64::MAX` ticks: never. A store may be given a new deadline after an interruption
    /// and run again.
    pub fn set_epoch_deadline(&mut self, ticks: u64) {
        self.inner.opaque.set_epoch_deadline(ticks);
    }

    /// How many times the store's GC heap has been collected (see `gc`): a collection runs
    /// when an allocation does not fit the heap.
    pub fn gc_collections(&self) -> u64 {
        self.inner.opaque.gc.collections()
    }

    /// Gives the store `fuel` to run metered code with (see the compiler's `with_fuel`): what
    /// it runs is subtracted, and it traps with `OutOfFuel` once none is left; a call into wasm
    /// with none left traps before it runs anything. May be called again after that
    /// (refuelling). From then on the store refuses unmetered modules. What a guest ran before
    /// a trap is paid for, up to its last function entry, loop header, call or return. Never
    /// fails: the `Result` is wasmtime's signature, kept so that its hosts port unchanged.
    pub fn set_fuel(&mut self, fuel: u64) -> Result<(), crate::Error> {
        self.inner.opaque.set_fuel(fuel);
        Ok(())
    }

    /// The fuel left; an error of kind `Usage` if the store was never given fuel.
    pub fn get_fuel(&self) -> Result<u64, crate::Error> {
        self.inner.opaque.get_fuel()
    }

    /// The exception that ended the last call into wasm uncaught (the call's error is
    /// [`crate::ThrownException`]), taken: `None` once taken, or if there was none. It is kept
    /// until taken or until the host's next call into wasm, which forgets it.
    pub fn take_pending_exception(&mut self) -> Option<crate::ExnRef> {
        let opaque = &self.inner.opaque;
        opaque.exceptions().take_pending(opaque)
    }

    /// The embedder's data.
    pub fn data(&self) -> &T {
        &self.inner.data
    }

    /// The embedder's data, mutably.
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.inner.data
    }

    /// Drops everything in the store and returns the embedder's data.
    pub fn into_data(self) -> T {
        let StoreInner { opaque, data, .. } = *self.inner;
        drop(opaque);
        data
    }
}

impl<T> std::fmt::Debug for Store<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.inner.opaque;
        f.debug_struct("Store")
            .field("instances", &o.instances.len())
            .field("memories", &o.memories.len())
            .field("tables", &o.tables.len())
            .field("globals", &o.globals.len())
            .finish()
    }
}

impl StoreOpaque {
    /// Panics unless `stored` belongs to this store (handle misuse by the embedder, which
    /// wasmtime treats the same way).
    #[track_caller]
    pub(crate) fn check(&self, store: StoreId) {
        assert!(
            store == self.id,
            "a handle was used with a store it does not belong to"
        );
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn set_epoch_deadline(&mut self, ticks: u64) {
        let deadline = self.engine.current_epoch().saturating_add(ticks);
        self.epoch_deadline.store(deadline, Ordering::SeqCst);
        // A host function moving the deadline of the call it runs in.
        if crate::signals::current_store() == (self as *mut StoreOpaque).cast() {
            crate::interrupt::moved(self.engine.id(), deadline);
        }
    }

    /// Whether the store's calls have a deadline (a guest that waits must then ask whether
    /// it passed: see `memory::wait`).
    pub(crate) fn has_deadline(&self) -> bool {
        self.epoch_deadline.load(Ordering::Relaxed) != u64::MAX
    }

    /// What interrupts this store's calls into wasm.
    pub(crate) fn deadline(&self) -> crate::signals::Deadline {
        crate::signals::Deadline {
            epoch: self.engine.epoch(),
            deadline: &self.epoch_deadline,
        }
    }

    pub(crate) fn set_fuel(&mut self, fuel: u64) {
        *self.fuel.get_mut() = i64::try_from(fuel).unwrap_or(i64::MAX);
        self.fuel_enabled = true;
    }

    /// Whether this store runs metered code and has no fuel left: a call into wasm then runs
    /// nothing.
    pub(crate) fn out_of_fuel(&self) -> bool {
        // SAFETY: no wasm runs while the store is borrowed; a plain read.
        self.runs_metered() && unsafe { *self.fuel.get() } <= 0
    }

    pub(crate) fn get_fuel(&self) -> Result<u64, crate::Error> {
        if !self.fuel_enabled {
            return Err(crate::Error::Usage("the store was never given fuel".into()));
        }
        // SAFETY: no wasm runs while the store is borrowed; a plain read.
        Ok(unsafe { *self.fuel.get() }.max(0) as u64)
    }

    /// Takes `fuel` from the store; if there is not that much, takes all of it and fails with
    /// an `OutOfFuel` trap.
    pub(crate) fn consume_fuel(&mut self, fuel: u64) -> Result<(), crate::Error> {
        self.get_fuel()?;
        let left = self.fuel.get_mut();
        match left.checked_sub_unsigned(fuel).filter(|&l| l >= 0) {
            Some(l) => {
                *left = l;
                Ok(())
            }
            None => {
                *left = -1;
                Err(crate::Error::Trap(crate::Trap::new(
                    crate::TrapKind::OutOfFuel,
                )))
            }
        }
    }

    /// Whether an instance of code compiled with or without metering may join the store: it
    /// must be metered once the store has fuel, and of the kind of the store's instances.
    pub(crate) fn admits_code(&self, metered: bool) -> Result<(), crate::Error> {
        let kind = |m| if m { "with" } else { "without" };
        if self.fuel_enabled && !metered {
            return Err(crate::Error::Usage(
                "the module was compiled without fuel metering and cannot run in a store with fuel"
                    .into(),
            ));
        }
        match self.metered {
            Some(m) if m != metered => Err(crate::Error::Usage(format!(
                "the module was compiled {} fuel metering and the store's instances {} it: \
                 one store runs only one kind",
                kind(metered),
                kind(m)
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the store's instances run metered code (see [`StoreOpaque::admits_code`]).
    pub(crate) fn runs_metered(&self) -> bool {
        self.metered == Some(true)
    }

    pub(crate) fn instance(&self, stored: Stored) -> &InstanceData {
        self.check(stored.store);
        &self.instances[stored.index as usize]
    }

    pub(crate) fn memory(&self, stored: Stored) -> &LinearMemory {
        self.check(stored.store);
        &self.memories[stored.index as usize]
    }

    pub(crate) fn table(&self, stored: Stored) -> &TableData {
        self.check(stored.store);
        &self.tables[stored.index as usize]
    }

    pub(crate) fn global(&self, stored: Stored) -> &GlobalData {
        self.check(stored.store);
        &self.globals[stored.index as usize]
    }

    fn stored(&self, index: usize) -> Stored {
        Stored {
            store: self.id,
            index: index as u32,
        }
    }

    pub(crate) fn push_memory(&mut self, memory: LinearMemory) -> Stored {
        self.memories.push(memory);
        self.stored(self.memories.len() - 1)
    }

    pub(crate) fn push_table(&mut self, table: TableData) -> Stored {
        self.tables.push(table);
        self.stored(self.tables.len() - 1)
    }

    pub(crate) fn push_global(&mut self, global: GlobalData) -> Stored {
        self.globals.push(global);
        self.stored(self.globals.len() - 1)
    }

    pub(crate) fn push_instance(&mut self, instance: Box<InstanceData>) -> Stored {
        self.metered = Some(instance.metered());
        self.instances.push(instance);
        self.stored(self.instances.len() - 1)
    }

    pub(crate) fn push_host_func(&mut self, func: Arc<HostFunc>) -> Stored {
        let ptr = std::ptr::NonNull::from(&*func);
        self.keep.push(Kept::Func(func));
        // SAFETY: just kept.
        unsafe { self.push_kept_host_func(ptr) }
    }

    /// Keeps a linker's host functions alive (once, when the last kept are the same).
    pub(crate) fn keep(&mut self, hosts: &Shared<Hosts>) {
        if !matches!(self.keep.last(), Some(Kept::Hosts(h)) if Shared::ptr_eq(h, hosts)) {
            self.keep.push(Kept::Hosts(hosts.borrow()));
        }
    }

    /// Adds a host function without keeping it.
    ///
    /// # Safety
    /// Something in `keep` must keep `func` alive.
    pub(crate) unsafe fn push_kept_host_func(
        &mut self,
        func: std::ptr::NonNull<HostFunc>,
    ) -> Stored {
        self.host_funcs.push(StoredHostFunc {
            func,
            funcref: None,
        });
        self.stored(self.host_funcs.len() - 1)
    }

    /// The host function at `index`.
    pub(crate) fn host_func(&self, index: u32) -> &HostFunc {
        // SAFETY: kept alive by `keep` as long as the store (see `StoredHostFunc::func`).
        unsafe { self.host_funcs[index as usize].func.as_ref() }
    }

    /// The index the next instance will have.
    pub(crate) fn next_instance(&self) -> Stored {
        self.stored(self.instances.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids stay unique across threads that each take them from blocks of their own, past the
    /// end of a block.
    #[test]
    fn store_ids_are_unique_across_threads() {
        let per_thread = 3 * StoreId::BLOCK as usize / 2;
        let ids: Vec<StoreId> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..per_thread).map(|_| StoreId::next()).collect::<Vec<_>>()))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 4 * per_thread);
    }
}
