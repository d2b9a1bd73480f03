//! [`Trap`]: why wasm execution stopped, where, and the wasm frames it stopped in.
//!
//! The signal handler and the unwinding stubs (`signals`) record only raw code addresses in a
//! [`TrapSite`]: they run where nothing may allocate or take a lock. A trap is made from the
//! site here, after the call into wasm has returned through its landing, on the host's own
//! stack: the kind (named by generated code, by the host, or looked up in the artifact's trap
//! table by the faulting offset), the function and offset, and a backtrace resolved through
//! each frame's artifact.
//!
//! Invariant: a site's registry tag is the `ModuleInner` of the published code it lies in
//! (`load` registers every text with its module as tag), and that code's instance is alive in
//! the store that ran the call, which keeps its module. So a tag may be read back as a module
//! for as long as the caller holds that store, which it does until the trap is made.

use std::sync::Arc;

use ephem_module::TrapKind;

use crate::module::ModuleInner;
use crate::signals::{CodeSite, TrapSite};
use crate::{Error, HostError};

/// A trap: wasm execution stopped for one of the reasons in [`TrapKind`].
#[derive(Clone, Debug)]
pub struct Trap {
    /// Why execution stopped.
    pub kind: TrapKind,
    /// The wasm function (index in its module) and code offset within it, where known.
    pub func: Option<u32>,
    /// See `func`.
    pub offset: Option<u32>,
    /// The wasm functions on the stack when it trapped, innermost first (at most 32).
    backtrace: Vec<FrameInfo>,
    /// For [`TrapKind::HostError`]: the error the host function returned.
    pub(crate) error: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// One wasm frame of a trap's backtrace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Its module's name, where the embedder gave it one ([`crate::Module::set_name`]).
    pub module: Option<Arc<str>>,
    /// The function's index in its module.
    pub func: u32,
    /// Its name from the module's name section, if it has one.
    pub name: Option<String>,
    /// The code offset within the function.
    pub offset: u32,
}

impl std::fmt::Display for FrameInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(module) = &self.module {
            write!(f, "{module}!")?;
        }
        match &self.name {
            Some(name) => write!(f, "{name} (function {})", self.func)?,
            None => write!(f, "function {}", self.func)?,
        }
        write!(f, " at code offset {:#x}", self.offset)
    }
}

impl Trap {
    pub(crate) fn new(kind: TrapKind) -> Trap {
        Trap {
            kind,
            func: None,
            offset: None,
            backtrace: Vec::new(),
            error: None,
        }
    }

    pub(crate) fn host(error: HostError) -> Trap {
        Trap {
            error: Some(error.into()),
            ..Trap::new(TrapKind::HostError)
        }
    }

    /// The error a host function returned, for a trap of kind [`TrapKind::HostError`].
    pub fn host_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.error.as_deref()
    }

    /// The wasm functions on the stack when it trapped, innermost first (at most 32; empty for
    /// a trap outside wasm code, such as an instantiation's out-of-bounds segment).
    pub fn backtrace(&self) -> &[FrameInfo] {
        &self.backtrace
    }

    /// The host function's error as `E`, if it is one.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.host_error()?.downcast_ref()
    }
}

impl std::fmt::Display for Trap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "wasm trap: {}", self.kind.message())?;
        if let Some(e) = &self.error {
            write!(f, ": {e}")?;
        }
        if !self.backtrace.is_empty() {
            write!(f, "\nwasm backtrace:")?;
            for (i, frame) in self.backtrace.iter().enumerate() {
                write!(f, "\n  {i:>2}: {frame}")?;
            }
        }
        Ok(())
    }
}

/// The module whose published code `site` lies in.
///
/// # Safety
/// `site` was recorded during a call into wasm whose store is still alive and borrowed by the
/// caller (see the module documentation).
unsafe fn module_of<'a>(site: &CodeSite) -> &'a ModuleInner {
    // SAFETY: per the contract, the tag is the `ModuleInner` of published code whose instance
    // (and so whose module) the store that ran the call keeps alive.
    unsafe { &*(site.tag as *const ModuleInner) }
}

/// Resolves a trap site (from the signal handler or an unwinding stub) to a [`Trap`].
impl Trap {
    /// A `SIGBUS` in wasm code is no trap: the only memory that can raise it is a mapping of an
    /// artifact file (text or memory image) that was truncated underneath (guard regions raise
    /// `SIGSEGV`). It is reported as an I/O error naming the artifact of the code that faulted.
    pub(crate) fn file_fault(site: &TrapSite) -> Option<Error> {
        if site.signal != libc::SIGBUS {
            return None;
        }
        // SAFETY: the caller of a call into wasm turns its site into an error while it still
        // holds the store that ran the call.
        let module = unsafe { module_of(&site.at) };
        let file = module.artifact.path().map_or_else(
            || "an in-memory artifact".to_owned(),
            |p| p.display().to_string(),
        );
        Some(Error::Artifact(ephem_artifact::Error::Io(
            std::io::Error::other(format!(
                "{file} could not be read while in use (it was truncated or changed underneath)"
            )),
        )))
    }

    pub(crate) fn from_site(site: &TrapSite) -> Trap {
        // SAFETY: the caller of a call into wasm makes the trap while it still holds the store
        // that ran the call.
        let module = unsafe { module_of(&site.at) };
        let offset = (site.at.pc - site.at.code_start) as u32;
        let artifact = &module.artifact;
        // Raised: generated code named the kind. Signal 0: a host function failed (the site is
        // its adapter's call, not a trap).
        let kind = match (site.raised, site.signal) {
            (Some(kind), _) => kind,
            (None, 0) => TrapKind::HostError,
            (None, crate::interrupt::INTERRUPT) => TrapKind::Interrupted,
            (None, signal) => artifact.trap_at(offset).unwrap_or(match signal {
                libc::SIGSEGV => TrapKind::MemoryOutOfBounds,
                libc::SIGFPE => TrapKind::IntegerDivisionByZero,
                _ => TrapKind::Unreachable,
            }),
        };
        let (func, offset) = artifact
            .func_at(offset)
            .map_or((None, None), |(f, o)| (Some(f), Some(o)));
        // Return addresses point after their call: look up the call itself. Frames of
        // trampolines and host adapters have no function and are left out.
        let callers = site.callers[..site.depth]
            .iter()
            .map(|c| CodeSite { pc: c.pc - 1, ..*c });
        let backtrace = std::iter::once(site.at)
            .chain(callers)
            .filter_map(|c| {
                // SAFETY: every frame the site recorded lies in code of an instance of the
                // store that ran the call, which is still held.
                let module = unsafe { module_of(&c) };
                let (func, offset) = module.artifact.func_at((c.pc - c.code_start) as u32)?;
                Some(FrameInfo {
                    module: module.name.get().cloned(),
                    func,
                    name: module.artifact.func_name(func),
                    offset,
                })
            })
            .collect();
        Trap {
            func,
            offset,
            backtrace,
            ..Trap::new(kind)
        }
    }
}
