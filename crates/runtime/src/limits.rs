//! Resource limits per store: how much linear memory and how many table elements a guest may
//! take, and how many instances, memories and tables a store may hold.
//!
//! A store asks its [`ResourceLimiter`] (set with [`crate::Store::limiter`]; [`StoreLimits`]
//! is the ready-made one) before anything grows:
//! - a memory or table being created asks for its initial size; a refusal fails the
//!   instantiation (or the host's `Memory::new`) with an error of kind `Limit` naming the limit;
//! - `memory.grow` and `table.grow` from wasm ask for the new size; a refusal makes them return
//!   -1, as the specification allows, and the guest goes on;
//! - making an instance, memory or table beyond the counts fails like a creation.
//!
//! Without a limiter a store is bounded only by the engine: 4 GiB per memory (64 GiB less a
//! page for a 64-bit one), 10 million elements per table.

use ephem_module::{MemoryType, TableType};

use crate::Error;
use crate::store::StoreOpaque;

/// Decides whether a store's memories and tables may grow, and how many instances, memories
/// and tables it may have. Implemented by [`StoreLimits`]; an embedder may write its own (for
/// example one that charges growth to an account).
pub trait ResourceLimiter: Send {
    /// A memory wants to grow from `current` to `desired` bytes (`maximum`: its type's bound,
    /// if any). `current` is 0 when the memory is being created.
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> bool;

    /// A table wants to grow from `current` to `desired` elements (`maximum`: its type's bound,
    /// if any). `current` is 0 when the table is being created.
    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> bool;

    /// How many instances the store may hold.
    fn instances(&self) -> usize {
        DEFAULT_COUNT
    }

    /// How many tables the store may hold (defined by instances or made by the host).
    fn tables(&self) -> usize {
        DEFAULT_COUNT
    }

    /// How many memories the store may hold (defined by instances or made by the host).
    fn memories(&self) -> usize {
        DEFAULT_COUNT
    }
}

/// The default bound on the number of instances, memories and tables: high enough never to
/// matter for one invocation, low enough that a loop of instantiations stops.
pub const DEFAULT_COUNT: usize = 10_000;

/// A [`ResourceLimiter`] with fixed bounds; build one with [`StoreLimitsBuilder`].
#[derive(Clone, Debug)]
pub struct StoreLimits {
    memory_size: Option<usize>,
    table_elements: Option<usize>,
    instances: usize,
    tables: usize,
    memories: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            memory_size: None,
            table_elements: None,
            instances: DEFAULT_COUNT,
            tables: DEFAULT_COUNT,
            memories: DEFAULT_COUNT,
        }
    }
}

/// Builds [`StoreLimits`]; what is not set is unbounded (sizes) or [`DEFAULT_COUNT`] (counts).
#[derive(Clone, Debug, Default)]
pub struct StoreLimitsBuilder(StoreLimits);

impl StoreLimitsBuilder {
    /// No limits but the default counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes any one linear memory may have.
    pub fn memory_size(mut self, bytes: usize) -> Self {
        self.0.memory_size = Some(bytes);
        self
    }

    /// The most elements any one table may have.
    pub fn table_elements(mut self, elements: usize) -> Self {
        self.0.table_elements = Some(elements);
        self
    }

    /// How many instances the store may hold.
    pub fn instances(mut self, n: usize) -> Self {
        self.0.instances = n;
        self
    }

    /// How many tables the store may hold.
    pub fn tables(mut self, n: usize) -> Self {
        self.0.tables = n;
        self
    }

    /// How many memories the store may hold.
    pub fn memories(mut self, n: usize) -> Self {
        self.0.memories = n;
        self
    }

    /// The limits.
    pub fn build(self) -> StoreLimits {
        self.0
    }
}

impl ResourceLimiter for StoreLimits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> bool {
        self.memory_size.is_none_or(|limit| desired <= limit)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> bool {
        self.table_elements.is_none_or(|limit| desired <= limit)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

/// What wants to be made or to grow: a memory (sized in bytes) or a table (in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Growing {
    Memory,
    Table,
}

impl Growing {
    fn noun(self) -> &'static str {
        match self {
            Growing::Memory => "memory",
            Growing::Table => "table",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Growing::Memory => "bytes",
            Growing::Table => "elements",
        }
    }

    /// The error for a limiter's refusal to make one of `initial` bytes or elements.
    pub(crate) fn refused(self, initial: usize) -> Error {
        Error::Limit(format!(
            "the store's limiter refused a {} of {initial} {}",
            self.noun(),
            self.unit()
        ))
    }

    /// The count this kind adds to.
    pub(crate) fn resource(self) -> Resource {
        match self {
            Growing::Memory => Resource::Memories,
            Growing::Table => Resource::Tables,
        }
    }
}

/// A question for a store's limiter, asked through its type-erased entry point.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ask {
    /// May `what` grow from `current` to `desired` (0 to its initial size when made)?
    Grow {
        what: Growing,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    },
    /// How many instances, memories and tables the store may hold.
    Counts,
}

/// The limiter's answer to an [`Ask`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer {
    Grow(bool),
    Counts {
        instances: usize,
        memories: usize,
        tables: usize,
    },
}

/// Asks `limiter`.
pub(crate) fn answer(limiter: &mut dyn ResourceLimiter, ask: Ask) -> Answer {
    match ask {
        Ask::Grow {
            what: Growing::Memory,
            current,
            desired,
            maximum,
        } => Answer::Grow(limiter.memory_growing(current, desired, maximum)),
        Ask::Grow {
            what: Growing::Table,
            current,
            desired,
            maximum,
        } => Answer::Grow(limiter.table_growing(current, desired, maximum)),
        Ask::Counts => Answer::Counts {
            instances: limiter.instances(),
            memories: limiter.memories(),
            tables: limiter.tables(),
        },
    }
}

/// What is being counted or sized, for the messages of refusals.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resource {
    Instances,
    Memories,
    Tables,
}

impl Resource {
    pub(crate) fn refused(self, limit: usize) -> Error {
        let what = match self {
            Resource::Instances => "instances",
            Resource::Memories => "memories",
            Resource::Tables => "tables",
        };
        Error::Limit(format!("the store's limit of {limit} {what} is reached"))
    }
}

/// How a store asks its limiter.
///
/// Each of these takes the store as one raw pointer, derived as
/// [`raw_store`](crate::context::raw_store) derives it, with provenance over the whole
/// `StoreInner<T>`: the limiter and the embedder's data it lives in follow the store's opaque
/// part, where no reference to that part reaches. The contract of each: `store` is such a
/// pointer to a live store, and while the call runs no mutable reference into the store is
/// alive (shared references to its opaque part may be: the limiter touches only the fields
/// after it).
impl StoreOpaque {
    /// Asks the store's limiter, if it has one.
    ///
    /// # Safety
    /// See the contract above.
    unsafe fn ask(store: *mut StoreOpaque, ask: Ask) -> Option<Answer> {
        // SAFETY: per the contract, `store` is live and nothing borrows it mutably: a read of
        // one field.
        let f = unsafe { (*store).limiter }?;
        // SAFETY: per the contract; `f` was made for this store's data type.
        unsafe { f(store, ask) }
    }

    /// Whether a memory or table (`what`) of `initial` bytes or elements (`maximum` likewise)
    /// may be added: the count, then the initial size.
    ///
    /// # Safety
    /// See the contract above.
    unsafe fn admit(
        store: *mut StoreOpaque,
        what: Growing,
        initial: usize,
        maximum: Option<usize>,
    ) -> Result<(), Error> {
        // SAFETY: per the contract.
        let Some(Answer::Counts {
            memories, tables, ..
        }) = (unsafe { StoreOpaque::ask(store, Ask::Counts) })
        else {
            return Ok(());
        };
        // SAFETY: per the contract, `store` is live and nothing borrows it mutably: a shared
        // borrow for two reads.
        let counted = unsafe { &*store };
        let (have, limit) = match what {
            Growing::Memory => (counted.memories.len(), memories),
            Growing::Table => (counted.tables.len(), tables),
        };
        if have >= limit {
            return Err(what.resource().refused(limit));
        }
        // SAFETY: per the contract.
        if unsafe { StoreOpaque::may_grow(store, what, 0, initial, maximum) } {
            Ok(())
        } else {
            Err(what.refused(initial))
        }
    }

    /// Whether a memory of type `ty` may be added.
    ///
    /// # Safety
    /// See the contract above.
    pub(crate) unsafe fn admit_memory(
        store: *mut StoreOpaque,
        ty: MemoryType,
    ) -> Result<(), Error> {
        let bytes = |pages: u32| ty.bytes(pages) as usize;
        // SAFETY: per the contract.
        unsafe { StoreOpaque::admit(store, Growing::Memory, bytes(ty.min), ty.max.map(bytes)) }
    }

    /// Whether a table of type `ty` may be added.
    ///
    /// # Safety
    /// See the contract above.
    pub(crate) unsafe fn admit_table(store: *mut StoreOpaque, ty: TableType) -> Result<(), Error> {
        let (min, max) = (ty.min as usize, ty.max.map(|m| m as usize));
        // SAFETY: per the contract.
        unsafe { StoreOpaque::admit(store, Growing::Table, min, max) }
    }

    /// Whether another instance may be added.
    ///
    /// # Safety
    /// See the contract above.
    pub(crate) unsafe fn admit_instance(store: *mut StoreOpaque) -> Result<(), Error> {
        // SAFETY: per the contract.
        let Some(Answer::Counts { instances, .. }) =
            (unsafe { StoreOpaque::ask(store, Ask::Counts) })
        else {
            return Ok(());
        };
        // SAFETY: per the contract, `store` is live and nothing borrows it mutably: a shared
        // borrow for one read.
        if unsafe { &*store }.instances.len() >= instances {
            return Err(Resource::Instances.refused(instances));
        }
        Ok(())
    }

    /// Whether a memory or table (`what`) may grow from `current` to `desired` bytes or
    /// elements.
    ///
    /// # Safety
    /// See the contract above.
    unsafe fn may_grow(
        store: *mut StoreOpaque,
        what: Growing,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> bool {
        let ask = Ask::Grow {
            what,
            current,
            desired,
            maximum,
        };
        // SAFETY: per the contract.
        !matches!(
            unsafe { StoreOpaque::ask(store, ask) },
            Some(Answer::Grow(false))
        )
    }

    /// Whether a memory or table (`what`) of `current` bytes or elements may grow by `delta`
    /// more (`maximum`: its type's bound): what `memory.grow`, `table.grow` and the host's
    /// `grow` ask. Growing by nothing is allowed without asking.
    ///
    /// # Safety
    /// See the contract above.
    pub(crate) unsafe fn may_grow_by(
        store: *mut StoreOpaque,
        what: Growing,
        current: usize,
        delta: usize,
        maximum: Option<usize>,
    ) -> bool {
        let desired = current.saturating_add(delta);
        // SAFETY: per the contract.
        delta == 0 || unsafe { StoreOpaque::may_grow(store, what, current, desired, maximum) }
    }
}
