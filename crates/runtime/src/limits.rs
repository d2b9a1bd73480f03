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
//! Without a limiter a store is bounded only by the engine: 4 GiB per memory, 10 million
//! elements per table.

use crate::Error;

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
