//! Cranelift trap codes used by generated code, and their meaning.

use cranelift_codegen::ir::TrapCode;
use ephem_module::TrapKind;

pub mod code {
    use cranelift_codegen::ir::TrapCode;
    pub const UNREACHABLE: TrapCode = TrapCode::unwrap_user(1);
    pub const UNDEFINED_ELEMENT: TrapCode = TrapCode::unwrap_user(2);
    pub const NULL_CALL: TrapCode = TrapCode::unwrap_user(3);
    pub const BAD_SIGNATURE: TrapCode = TrapCode::unwrap_user(4);
    pub const TABLE_OUT_OF_BOUNDS: TrapCode = TrapCode::unwrap_user(6);
    pub const INTERRUPTED: TrapCode = TrapCode::unwrap_user(7);
    pub const OUT_OF_FUEL: TrapCode = TrapCode::unwrap_user(8);
}

pub fn kind(trap: TrapCode) -> Option<TrapKind> {
    Some(match trap {
        TrapCode::STACK_OVERFLOW => TrapKind::StackOverflow,
        TrapCode::INTEGER_OVERFLOW => TrapKind::IntegerOverflow,
        TrapCode::HEAP_OUT_OF_BOUNDS => TrapKind::MemoryOutOfBounds,
        TrapCode::INTEGER_DIVISION_BY_ZERO => TrapKind::IntegerDivisionByZero,
        TrapCode::BAD_CONVERSION_TO_INTEGER => TrapKind::BadConversionToInteger,
        code::UNREACHABLE => TrapKind::Unreachable,
        code::UNDEFINED_ELEMENT => TrapKind::UndefinedElement,
        code::NULL_CALL => TrapKind::IndirectCallToNull,
        code::BAD_SIGNATURE => TrapKind::BadSignature,
        code::TABLE_OUT_OF_BOUNDS => TrapKind::TableOutOfBounds,
        code::INTERRUPTED => TrapKind::Interrupted,
        code::OUT_OF_FUEL => TrapKind::OutOfFuel,
        _ => return None,
    })
}

/// On x86-64, rewrites the `ud2` at each of `sites` in `code` to two `hlt`s.
///
/// A trap's instruction only has to fault at its site: the signal handler finds the trap's
/// kind in the artifact's trap table by the faulting address, whatever the signal. `ud2`
/// raises an invalid-opcode exception, which KVM intercepts on every guest (to emulate the
/// hypercall instructions), so each trap cost a VM exit: an out-of-bounds trap took 8.3 µs an
/// invocation against 3.2 µs with `hlt` (BENCHMARKS.md, nineteenth pass). `hlt` in user mode
/// raises a general-protection fault, a privilege check that comes before any VM exit,
/// reported at the instruction as SIGSEGV, the signal of guard-page faults. The second `hlt`
/// is never reached. A site that is not a `ud2` (a load whose fault is its trap) is left as
/// it is.
pub fn fault_without_vm_exit(code: &mut [u8], sites: impl IntoIterator<Item = u32>) {
    const UD2: [u8; 2] = [0x0f, 0x0b];
    const HLT_HLT: [u8; 2] = [0xf4, 0xf4];
    for site in sites {
        let at = site as usize;
        if let Some(bytes) = code.get_mut(at..at + 2)
            && *bytes == UD2
        {
            bytes.copy_from_slice(&HLT_HLT);
        }
    }
}
