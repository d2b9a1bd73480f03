//! The seam between the compiler and one architecture's machine code.
//!
//! Cranelift emits each function's code; everything the compiler itself reads or writes in
//! machine code goes through an [`Arch`]: the filler between functions, resolving calls from
//! one function to another, rewriting trap instructions, and sending failed bounds checks to
//! code that raises their trap without a signal. The rest of the compiler knows no encoding.
//!
//! [`for_isa`] chooses the implementation for a Cranelift target, in this one place. Only
//! x86-64 is written (`x86_64.rs`); another architecture is a new file here that implements
//! [`Arch`] and a line in [`for_isa`]. Its required methods link a text; the provided ones
//! leave trap instructions as Cranelift emitted them and raise every trap by signal, which is
//! correct, only slower when many threads trap at once.

mod x86_64;

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::{Final, MachBufferFinalized};
use ephem_module::TrapKind;

use crate::CompileError;

/// The machine code of one architecture (see the module's doc).
pub trait Arch: Sync {
    /// The byte that fills the gaps between units in a text; executing it traps.
    fn filler(&self) -> u8;

    /// Whether a relocation of `kind` to a function of the module is one [`Arch::link`]
    /// resolves (a call, or an address taken relative to the code).
    fn links(&self, kind: Reloc) -> bool;

    /// Makes the reference at `site` in `text` (a relocation [`Arch::links`], or a
    /// [`RaiseCall`]) reach `target`, both offsets in the text, with Cranelift's `addend`.
    fn link(
        &self,
        text: &mut [u8],
        site: u32,
        target: u32,
        addend: i64,
    ) -> Result<(), CompileError>;

    /// Rewrites the trap instructions at the `traps` sites of one function's `code` into
    /// whatever faults cheapest here. The signal handler finds a trap's kind by the faulting
    /// address in the artifact's trap table, whatever the signal, so any faulting instruction
    /// of the same length will do.
    fn rewrite_traps(&self, code: &mut [u8], traps: &[(u32, TrapKind)]) {
        let _ = (code, traps);
    }

    /// Whether [`Arch::raise_failed_checks`] is written: the translator then marks each bounds
    /// check (see [`Raised`]).
    fn raises_failed_checks(&self) -> bool {
        false
    }

    /// Sends each of `raised`'s checks in `code` (one function, as Cranelift emitted it in
    /// `emitted`, with its `traps`) that fails to a call appended to the function, which the
    /// linker points at [`Arch::raise_stub`]; `None` where it sent none. Only branch targets
    /// change, so the function runs as before until a check fails.
    fn raise_failed_checks(
        &self,
        code: &mut Vec<u8>,
        emitted: &MachBufferFinalized<Final>,
        traps: &[(u32, TrapKind)],
        raised: &Raised,
    ) -> Option<RaiseCall> {
        let _ = (code, emitted, traps, raised);
        None
    }

    /// The code that failed checks call (see [`Arch::raise_failed_checks`]), placed at
    /// `layout.stub`, one per text: it raises `MemoryOutOfBounds` through the `Raise` builtin
    /// as `unreachable` does, or returns where it cannot.
    fn raise_stub(&self, layout: &StubLayout) -> Vec<u8> {
        let _ = layout;
        unreachable!("no failed check is sent to a raise stub on this architecture")
    }
}

/// The machine code of the architecture `isa` generates code for; `None`: not written.
pub fn for_isa(isa: &dyn TargetIsa) -> Option<&'static dyn Arch> {
    match isa.name() {
        "x64" => Some(&x86_64::X86_64),
        _ => None,
    }
}

/// How a function's failed bounds checks can trap without a signal: each check's `trapnz`
/// carries the source location of its number (`0..checks`), which Cranelift also gives the
/// check's trap instruction, so that [`Arch::raise_failed_checks`] can find each check's
/// branch to its trap instruction. Nothing else in the function's IR changes, so its registers
/// are allocated as without it: a branch in the IR to a block that raises the trap, or a
/// store of the vmctx where such code could find it, makes compute slower (BENCHMARKS.md).
pub struct Raised {
    pub checks: u32,
}

/// The call that [`Arch::raise_failed_checks`] appended to a function.
pub struct RaiseCall {
    /// The reference to [`Arch::raise_stub`], for [`Arch::link`]: where it is in the
    /// function's code, and its addend.
    pub site: u32,
    pub addend: i64,
    /// Where the call returns to when the stub cannot raise the trap: a `MemoryOutOfBounds`
    /// trap instruction, which traps by signal.
    pub trap: u32,
}

/// Where [`Arch::raise_stub`] looks, as offsets in the text: the entry trampolines' code, the
/// functions' code (which ends where the stub begins), and the stub itself.
pub struct StubLayout {
    pub trampolines: std::ops::Range<u32>,
    pub functions_start: u32,
    pub stub: u32,
}
