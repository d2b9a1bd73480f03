//! [`Error`]: the one error type of the embedding API, from bytes to results, with an
//! [`ErrorKind`] to match on.
//!
//! Every fallible public function returns it, so that an embedder handles one type; a trap is
//! one of its kinds (see `trap`). Nothing here runs on the per-invocation path unless something
//! fails.

use crate::Trap;

/// What can go wrong, from bytes to results: one type for the whole embedding API, with a
/// [`ErrorKind`] to match on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The module is not valid (or not supported) WebAssembly.
    #[error("{0}")]
    Compile(Box<dyn std::error::Error + Send + Sync>),
    /// Imports missing or of the wrong type.
    #[error("link error: {0}")]
    Link(String),
    /// Wasm execution trapped.
    #[error("{0}")]
    Trap(Trap),
    /// A wasm exception reached the host uncaught; the store holds it
    /// (`Store::take_pending_exception`).
    #[error("{0}")]
    Exception(crate::ThrownException),
    /// A compiled artifact could not be written, read or used.
    #[error(transparent)]
    Artifact(#[from] ephem_artifact::Error),
    /// A resource limit: memory, tables, code space.
    #[error("resource limit: {0}")]
    Limit(String),
    /// Code memory could not be had.
    #[error(transparent)]
    CodeMemory(#[from] ephem_code_memory::Error),
    /// An I/O error outside artifacts.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The API was used in a way that cannot work: wrong argument types, no such export.
    #[error("{0}")]
    Usage(String),
}

/// What kind of [`Error`] happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// See [`Error::Compile`].
    Compile,
    /// See [`Error::Link`].
    Link,
    /// See [`Error::Trap`].
    Trap,
    /// See [`Error::Exception`].
    Exception,
    /// See [`Error::Artifact`].
    Artifact,
    /// See [`Error::Limit`] and [`Error::CodeMemory`].
    Limit,
    /// See [`Error::Io`].
    Io,
    /// See [`Error::Usage`].
    Usage,
}

impl Error {
    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Compile(_) => ErrorKind::Compile,
            Error::Link(_) => ErrorKind::Link,
            Error::Trap(_) => ErrorKind::Trap,
            Error::Exception(_) => ErrorKind::Exception,
            Error::Artifact(_) => ErrorKind::Artifact,
            Error::Limit(_) | Error::CodeMemory(_) => ErrorKind::Limit,
            Error::Io(_) => ErrorKind::Io,
            Error::Usage(_) => ErrorKind::Usage,
        }
    }

    /// The trap, if this error is one.
    pub fn trap(&self) -> Option<&Trap> {
        match self {
            Error::Trap(t) => Some(t),
            _ => None,
        }
    }

    /// A compile error from any source (the compiler's own type lives in another crate).
    pub fn compile(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Compile(Box::new(e))
    }
}
