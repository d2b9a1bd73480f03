//! The trap codes generated code gives Cranelift's trapping instructions, and the
//! [`TrapKind`] each one means in the artifact's trap table. Cranelift's own codes serve for
//! stack overflow, integer arithmetic, conversions and linear memory (accesses and bounds
//! checks alike); the user codes in [`code`] for the rest. How a trap instruction is encoded,
//! and how a failed bounds check raises its trap without a signal, is the `arch` module's.

use cranelift_codegen::ir::TrapCode;
use ephem_module::TrapKind;

/// The translator's trap codes.
pub mod code {
    use cranelift_codegen::ir::TrapCode;
    pub const UNREACHABLE: TrapCode = TrapCode::unwrap_user(1);
    pub const UNDEFINED_ELEMENT: TrapCode = TrapCode::unwrap_user(2);
    pub const NULL_CALL: TrapCode = TrapCode::unwrap_user(3);
    pub const BAD_SIGNATURE: TrapCode = TrapCode::unwrap_user(4);
    pub const TABLE_OUT_OF_BOUNDS: TrapCode = TrapCode::unwrap_user(6);
    pub const INTERRUPTED: TrapCode = TrapCode::unwrap_user(7);
    pub const OUT_OF_FUEL: TrapCode = TrapCode::unwrap_user(8);
    pub const NULL_REFERENCE: TrapCode = TrapCode::unwrap_user(9);
    pub const UNALIGNED_ATOMIC: TrapCode = TrapCode::unwrap_user(10);
    pub const WAIT_ON_UNSHARED: TrapCode = TrapCode::unwrap_user(11);
    pub const CAST_FAILURE: TrapCode = TrapCode::unwrap_user(12);
    pub const ARRAY_OUT_OF_BOUNDS: TrapCode = TrapCode::unwrap_user(13);
    pub const GC_HEAP_EXHAUSTED: TrapCode = TrapCode::unwrap_user(14);
}

/// The kind of trap `trap` raises; `None` for a code generated code never uses.
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
        code::NULL_REFERENCE => TrapKind::NullReference,
        code::UNALIGNED_ATOMIC => TrapKind::UnalignedAtomic,
        code::WAIT_ON_UNSHARED => TrapKind::WaitOnUnsharedMemory,
        code::CAST_FAILURE => TrapKind::CastFailure,
        code::ARRAY_OUT_OF_BOUNDS => TrapKind::ArrayOutOfBounds,
        code::GC_HEAP_EXHAUSTED => TrapKind::GcHeapExhausted,
        _ => return None,
    })
}
