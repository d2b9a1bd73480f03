//! Compiled modules on disk: the artifact format, opening and verifying artifacts, linear
//! memory images, and the compile cache.
//!
//! An artifact is what the compiler produced ([`ephem_module::CompiledModule`]) laid out for
//! loading without deserialising: a fixed header, metadata and tables read in place (the
//! metadata is an `rkyv` archive, validated once per file), the text on its own pages (so it
//! can be mapped executable straight from the file) and one page-aligned image per initialised
//! linear memory (so an instance's memory can be a private copy-on-write mapping of the file).
//! See [`mod@format`] for the layout and [`Artifact`] for how opening checks it. The runtime
//! loads an [`Artifact`]; nothing here needs the compiler.
//!
//! The [`Cache`] stores artifacts by the hash of the wasm they came from and the compiler's
//! fingerprint. Artifacts are sealed with a deployment's [`ArtifactKey`]: one that does not
//! verify under the key is never opened for execution unless the embedder opts in
//! ([`Artifact::open_unverified`]).
//!
//! A [`Bundle`] is one file holding several artifacts behind a front of its owner's, sealed as a
//! whole (a component artifact); its artifacts are opened in place.
//!
//! Files: `format.rs` (layout and writer), `artifact/` (an open artifact: opening and
//! verifying, metadata checks, tables, images), `bundle.rs` (bundles, and what each thread
//! keeps of them), `cache/` (the compile cache: entries, the
//! entries each thread keeps open, eviction, temporary files), `key.rs` (the deployment's key),
//! `cpu.rs` (CPU features) and `owner.rs` (whose files can be trusted to stay as they are).
//! `unsafe` is confined to `artifact/` (reading into a buffer's spare capacity, reading the
//! metadata archive in place) and `cache/` (the directory's raw descriptor), each block with
//! its reason; [`Artifact::open_unverified`] is `unsafe` to call, for its caller vouches for
//! the machine code.

#![warn(clippy::undocumented_unsafe_blocks)]

mod artifact;
mod bundle;
mod cache;
pub mod cpu;
pub mod format;
mod key;
mod owner;

pub use artifact::{Artifact, Identity, is_artifact};
pub use bundle::Bundle;
pub use cache::{Cache, CacheStats, DEFAULT_MAX_BYTES, Outcome, STALE_TEMP_SECS, write_atomic};
pub use format::{ArchivedMemoryImage, MemoryImage, to_bytes};
pub use key::ArtifactKey;

/// Why an artifact cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not an ephem artifact")]
    NotArtifact,
    #[error("artifact key {0}")]
    Key(String),
    #[error(
        "artifact was not sealed with this deployment's key (forged, or from another deployment)"
    )]
    Unsealed,
    #[error("artifact was compiled from another module than the cache entry's")]
    OtherSource,
    #[error("{}: {source}", path.display())]
    Entry {
        path: std::path::PathBuf,
        source: Box<Error>,
    },
    #[error(
        "artifact format {found} is not the one this ephem reads ({})",
        format::FORMAT_VERSION
    )]
    Format { found: u32 },
    #[error(
        "artifact was written by ephem {found:?}; this is ephem {}",
        format::EPHEM_VERSION
    )]
    Version { found: String },
    #[error("artifact is damaged: {0}")]
    Damaged(String),
    #[error("artifact is for {found}; this machine is {}", std::env::consts::ARCH)]
    Arch { found: String },
    #[error("artifact needs CPU feature `{0}`, which this machine lacks")]
    CpuFeature(String),
    #[error("artifact needs CPU feature `{0}`, which this ephem does not know")]
    UnknownCpuFeature(String),
}
