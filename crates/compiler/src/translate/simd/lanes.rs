//! The vector type each SIMD operator works on, from its name: `i16x8.add` on `I16X8`, an
//! extending `i32x4.extend_low_i16x8_s` reading `I16X8`. Operators that share one translation
//! across lane widths take their type from here; the rest name theirs where they are
//! translated.

use cranelift_codegen::ir::Type;
use cranelift_codegen::ir::types::{F32X4, F64X2, I8X16, I16X8, I32X4, I64X2};
use wasmparser::Operator;

/// The integer vector type an `iNxM` operator is named for.
pub(super) fn int_lanes(op: &Operator<'_>) -> Type {
    use Operator as O;
    match op {
        O::I8x16Swizzle
        | O::I8x16Splat
        | O::I8x16Eq
        | O::I8x16Ne
        | O::I8x16LtS
        | O::I8x16LtU
        | O::I8x16GtS
        | O::I8x16GtU
        | O::I8x16LeS
        | O::I8x16LeU
        | O::I8x16GeS
        | O::I8x16GeU
        | O::I8x16Abs
        | O::I8x16Neg
        | O::I8x16Popcnt
        | O::I8x16AllTrue
        | O::I8x16Bitmask
        | O::I8x16NarrowI16x8S
        | O::I8x16NarrowI16x8U
        | O::I8x16Shl
        | O::I8x16ShrS
        | O::I8x16ShrU
        | O::I8x16Add
        | O::I8x16AddSatS
        | O::I8x16AddSatU
        | O::I8x16Sub
        | O::I8x16SubSatS
        | O::I8x16SubSatU
        | O::I8x16MinS
        | O::I8x16MinU
        | O::I8x16MaxS
        | O::I8x16MaxU
        | O::I8x16AvgrU
        | O::I8x16RelaxedSwizzle
        | O::I8x16RelaxedLaneselect => I8X16,
        O::I16x8Splat
        | O::I16x8Eq
        | O::I16x8Ne
        | O::I16x8LtS
        | O::I16x8LtU
        | O::I16x8GtS
        | O::I16x8GtU
        | O::I16x8LeS
        | O::I16x8LeU
        | O::I16x8GeS
        | O::I16x8GeU
        | O::I16x8ExtAddPairwiseI8x16S
        | O::I16x8ExtAddPairwiseI8x16U
        | O::I16x8Abs
        | O::I16x8Neg
        | O::I16x8Q15MulrSatS
        | O::I16x8AllTrue
        | O::I16x8Bitmask
        | O::I16x8NarrowI32x4S
        | O::I16x8NarrowI32x4U
        | O::I16x8ExtendLowI8x16S
        | O::I16x8ExtendHighI8x16S
        | O::I16x8ExtendLowI8x16U
        | O::I16x8ExtendHighI8x16U
        | O::I16x8Shl
        | O::I16x8ShrS
        | O::I16x8ShrU
        | O::I16x8Add
        | O::I16x8AddSatS
        | O::I16x8AddSatU
        | O::I16x8Sub
        | O::I16x8SubSatS
        | O::I16x8SubSatU
        | O::I16x8Mul
        | O::I16x8MinS
        | O::I16x8MinU
        | O::I16x8MaxS
        | O::I16x8MaxU
        | O::I16x8AvgrU
        | O::I16x8ExtMulLowI8x16S
        | O::I16x8ExtMulHighI8x16S
        | O::I16x8ExtMulLowI8x16U
        | O::I16x8ExtMulHighI8x16U
        | O::I16x8RelaxedLaneselect
        | O::I16x8RelaxedQ15mulrS
        | O::I16x8RelaxedDotI8x16I7x16S => I16X8,
        O::I32x4Splat
        | O::I32x4Eq
        | O::I32x4Ne
        | O::I32x4LtS
        | O::I32x4LtU
        | O::I32x4GtS
        | O::I32x4GtU
        | O::I32x4LeS
        | O::I32x4LeU
        | O::I32x4GeS
        | O::I32x4GeU
        | O::I32x4ExtAddPairwiseI16x8S
        | O::I32x4ExtAddPairwiseI16x8U
        | O::I32x4Abs
        | O::I32x4Neg
        | O::I32x4AllTrue
        | O::I32x4Bitmask
        | O::I32x4ExtendLowI16x8S
        | O::I32x4ExtendHighI16x8S
        | O::I32x4ExtendLowI16x8U
        | O::I32x4ExtendHighI16x8U
        | O::I32x4Shl
        | O::I32x4ShrS
        | O::I32x4ShrU
        | O::I32x4Add
        | O::I32x4Sub
        | O::I32x4Mul
        | O::I32x4MinS
        | O::I32x4MinU
        | O::I32x4MaxS
        | O::I32x4MaxU
        | O::I32x4DotI16x8S
        | O::I32x4ExtMulLowI16x8S
        | O::I32x4ExtMulHighI16x8S
        | O::I32x4ExtMulLowI16x8U
        | O::I32x4ExtMulHighI16x8U
        | O::I32x4TruncSatF32x4S
        | O::I32x4TruncSatF32x4U
        | O::I32x4TruncSatF64x2SZero
        | O::I32x4TruncSatF64x2UZero
        | O::I32x4RelaxedTruncF32x4S
        | O::I32x4RelaxedTruncF32x4U
        | O::I32x4RelaxedTruncF64x2SZero
        | O::I32x4RelaxedTruncF64x2UZero
        | O::I32x4RelaxedLaneselect
        | O::I32x4RelaxedDotI8x16I7x16AddS => I32X4,
        _ => I64X2,
    }
}

/// The float vector type an `fNxM` operator is named for.
pub(super) fn float_lanes(op: &Operator<'_>) -> Type {
    use Operator as O;
    match op {
        O::F32x4Eq
        | O::F32x4Ne
        | O::F32x4Lt
        | O::F32x4Gt
        | O::F32x4Le
        | O::F32x4Ge
        | O::F32x4Abs
        | O::F32x4Neg
        | O::F32x4Sqrt
        | O::F32x4Ceil
        | O::F32x4Floor
        | O::F32x4Trunc
        | O::F32x4Nearest
        | O::F32x4Add
        | O::F32x4Sub
        | O::F32x4Mul
        | O::F32x4Div
        | O::F32x4Min
        | O::F32x4Max
        | O::F32x4PMin
        | O::F32x4PMax
        | O::F32x4RelaxedMin
        | O::F32x4RelaxedMax
        | O::F32x4RelaxedMadd
        | O::F32x4RelaxedNmadd => F32X4,
        _ => F64X2,
    }
}

/// The vector type an extending operator (`…_i8x16_s` and the like) reads: half its lane width.
pub(super) fn narrow_lanes(op: &Operator<'_>) -> Type {
    match int_lanes(op) {
        I16X8 => I8X16,
        I32X4 => I16X8,
        _ => I32X4,
    }
}
