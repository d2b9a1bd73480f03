//! Executable code memory for ephem.
//!
//! A loader takes a slot from a [`CodePool`], writes machine code into it, publishes it
//! (makes it executable), runs it, and drops it to give the slot back. This crate knows nothing
//! about WebAssembly; it models every way the field makes code executable, as interchangeable
//! [`Strategy`]s behind that one lifecycle, so that they can be compared side by side.
//!
//! | strategy | per load |
//! | --- | --- |
//! | `naive` | `mmap` RW, write, `mprotect` RX, run, `munmap` |
//! | `reuse` | one private anonymous map per slot, `mprotect` RW → write → `mprotect` RX |
//! | `reuse-locked` | as `reuse`, mapped with `MAP_LOCKED` |
//! | `reuse-shared` | one *shared* anonymous map per slot, `mprotect` flips |
//! | `hugetlb` | 2 MiB huge pages, `mprotect` flips |
//! | `dual` (default) | a memory file mapped twice, read+execute and read+write: no system call |
//! | `rwx` | one read+write+execute map; a baseline behind [`RwxOptIn`] |
//!
//! # Invariants
//! - **W^X**: under every strategy but `rwx`, no mapping is writable and executable at once.
//!   `dual` writes through a view that is never executable and runs through one that is never
//!   writable.
//! - **No stale code**: publishing fills everything beyond the new code that an earlier owner
//!   wrote with trapping bytes, so a slot shows exactly what its current owner wrote.
//! - **Steady state makes no system call under `dual`**: slots are pre-faulted through both
//!   views; taking and returning one is a list operation under a mutex held for nothing else
//!   (a slot that still holds the text asked for is published without a write). The
//!   exceptions are slow paths: creating or growing a slot, and moving a write view (every
//!   [`PoolConfig::remap_every`] loads of that slot, to an address chosen at random).
//! - **Instruction caches**: publishing ends with `sys::flush_icache` over the written range
//!   (nothing on x86_64; required on aarch64).
//!
//! # `fork()`
//! A child process inherits every mapping. Private mappings (`naive`, `reuse`, `reuse-locked`,
//! `hugetlb`, `rwx`) become copy-on-write: parent and child diverge on their next write. Shared
//! mappings (`reuse-shared`, and both views of `dual`) stay shared: code one process writes into
//! a slot appears in the other's slot too. A process that forks while using a `dual` or
//! `reuse-shared` pool must not keep using that pool in both processes; build a fresh pool in the
//! child (`MAP_LOCKED` pages are, in addition, not locked in the child).
//!
//! # Unsafe code
//! Raw mappings are made, changed and unmapped only in `sys.rs`; `slot.rs` borrows a slot's
//! bytes for writing under the ownership rules `sys::Mapping::bytes_mut` states; `pool.rs`
//! asserts that published code may cross threads. Every `unsafe` block says why it is sound.

#![warn(clippy::undocumented_unsafe_blocks)]

mod arena;
pub mod near;
mod pool;
pub mod registry;
mod slot;
mod sys;

use std::fmt;
use std::io;
use std::str::FromStr;

pub use arena::TextId;
pub use pool::{Acquired, CodePool, CodeSlot, LoadedCode, PoolStats};
pub use sys::{TRAP_FILL, page_size};

/// How code memory is made executable. See the crate documentation for what each does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    Naive,
    Reuse,
    ReuseLocked,
    ReuseShared,
    HugeTlb,
    #[default]
    Dual,
    Rwx,
}

impl Strategy {
    /// Every strategy, in the order the benchmarks print them.
    pub const ALL: [Strategy; 7] = [
        Strategy::Naive,
        Strategy::Reuse,
        Strategy::ReuseLocked,
        Strategy::ReuseShared,
        Strategy::HugeTlb,
        Strategy::Dual,
        Strategy::Rwx,
    ];

    /// The strategy's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Reuse => "reuse",
            Strategy::ReuseLocked => "reuse-locked",
            Strategy::ReuseShared => "reuse-shared",
            Strategy::HugeTlb => "hugetlb",
            Strategy::Dual => "dual",
            Strategy::Rwx => "rwx",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown strategy `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// Permission to build an `rwx` pool. It can only be made in code, by name: no configuration
/// value or default produces one, so a read+write+execute mapping never appears by accident.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RwxOptIn(());

impl RwxOptIn {
    /// Acknowledges that an `rwx` pool breaks W^X and exists only as a benchmark baseline.
    pub fn benchmark_baseline_breaks_w_xor_x() -> RwxOptIn {
        RwxOptIn(())
    }
}

/// How a [`CodePool`] is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub strategy: Strategy,
    /// Bytes per slot (rounded up to the strategy's page size).
    pub slot_size: usize,
    /// Largest module a slot may grow to; larger requests fail with [`Error::TooLarge`].
    pub max_slot_size: usize,
    /// Most slots that exist at once; beyond it, [`CodePool::acquire`] fails with
    /// [`Error::Exhausted`].
    pub max_slots: usize,
    /// Slots created and pre-faulted when the pool is built.
    pub prefault_slots: usize,
    /// Under `dual`, a slot's write view moves to a fresh random address after this many loads
    /// through it (0 turns it off).
    pub remap_every: u32,
    /// Slots that may exist to keep texts for later loads of them ([`CodePool::acquire_text`]):
    /// a load of a text no free slot holds makes a new slot while fewer than this many exist,
    /// rather than overwrite the text freed longest ago.
    pub keep_texts: usize,
    /// Required for [`Strategy::Rwx`].
    pub rwx: Option<RwxOptIn>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            strategy: Strategy::Dual,
            slot_size: 1 << 20,
            max_slot_size: 1 << 30,
            max_slots: 1024,
            prefault_slots: std::thread::available_parallelism().map_or(1, |n| n.get()),
            remap_every: 1024,
            // At most 16 MiB of slots at the default size kept for texts.
            keep_texts: 16,
            rwx: None,
        }
    }
}

impl PoolConfig {
    /// The default configuration under `strategy`.
    pub fn with_strategy(strategy: Strategy) -> PoolConfig {
        PoolConfig {
            strategy,
            ..PoolConfig::default()
        }
    }
}

/// What can go wrong with code memory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("code memory strategy `{strategy}` is unavailable on this system: {source}")]
    Unavailable {
        strategy: Strategy,
        #[source]
        source: io::Error,
    },
    #[error(
        "the `rwx` strategy breaks W^X and needs an explicit opt-in (RwxOptIn); it is a benchmark baseline only"
    )]
    RwxNotOptedIn,
    #[error("code pool exhausted: all {max_slots} slots are in use")]
    Exhausted { max_slots: usize },
    #[error("code of {len} bytes exceeds the largest code slot ({max} bytes)")]
    TooLarge { len: usize, max: usize },
    #[error("cannot {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}
