//! Relaxed SIMD, in the specification's deterministic profile: every machine computes the
//! same result, which contract hosts need. So each relaxed operator is a plain one or a fixed
//! sequence: `relaxed_swizzle` is `swizzle`, `relaxed_laneselect` is `bitselect`,
//! `relaxed_min`/`max` are `min`/`max`, the relaxed truncations saturate, `relaxed_q15mulr_s`
//! is `q15mulr_sat_s`, `relaxed_madd` is a fused multiply-add (a library call on CPUs without
//! FMA) and `relaxed_nmadd` the same of `-a`, and the relaxed dot products treat both operands
//! as signed and sum exactly (the 16-bit one wrapping).

use cranelift_codegen::ir::InstBuilder;
use cranelift_codegen::ir::types::{F32X4, I8X16, I16X8, I32X4};
use cranelift_frontend::FunctionBuilder;
use wasmparser::Operator;

use super::Translator;
use super::lanes::float_lanes;

impl Translator<'_, '_> {
    /// Translates `op` if it is a relaxed SIMD operator; `false` if it is not.
    pub(super) fn relaxed_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match *op {
            O::I8x16RelaxedSwizzle => self.vbinary(I8X16, |b, x, y| b.ins().swizzle(x, y)),
            O::I8x16RelaxedLaneselect
            | O::I16x8RelaxedLaneselect
            | O::I32x4RelaxedLaneselect
            | O::I64x2RelaxedLaneselect => self.bitselect(),
            O::F32x4RelaxedMin | O::F64x2RelaxedMin => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fmin(x, y))
            }
            O::F32x4RelaxedMax | O::F64x2RelaxedMax => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fmax(x, y))
            }
            O::I32x4RelaxedTruncF32x4S => {
                self.vunary(F32X4, |b, x| b.ins().fcvt_to_sint_sat(I32X4, x))
            }
            O::I32x4RelaxedTruncF32x4U => {
                self.vunary(F32X4, |b, x| b.ins().fcvt_to_uint_sat(I32X4, x))
            }
            O::I32x4RelaxedTruncF64x2SZero => self.trunc_sat_zero(true),
            O::I32x4RelaxedTruncF64x2UZero => self.trunc_sat_zero(false),
            O::I16x8RelaxedQ15mulrS => self.vbinary(I16X8, |b, x, y| b.ins().sqmul_round_sat(x, y)),
            O::F32x4RelaxedMadd
            | O::F64x2RelaxedMadd
            | O::F32x4RelaxedNmadd
            | O::F64x2RelaxedNmadd => {
                let ty = float_lanes(op);
                let z = self.vpop(ty);
                let y = self.vpop(ty);
                let mut x = self.vpop(ty);
                if matches!(op, O::F32x4RelaxedNmadd | O::F64x2RelaxedNmadd) {
                    x = self.b.ins().fneg(x);
                }
                let v = self.b.ins().fma(x, y, z);
                self.push(v);
            }

            O::I16x8RelaxedDotI8x16I7x16S => self.vbinary(I8X16, Self::dot),
            O::I32x4RelaxedDotI8x16I7x16AddS => {
                let acc = self.vpop(I32X4);
                let y = self.vpop(I8X16);
                let x = self.vpop(I8X16);
                // Exact: the 16-bit pairwise sums widen before they are added.
                let (xl, yl) = (self.b.ins().swiden_low(x), self.b.ins().swiden_low(y));
                let low = self.b.ins().imul(xl, yl);
                let (xh, yh) = (self.b.ins().swiden_high(x), self.b.ins().swiden_high(y));
                let high = self.b.ins().imul(xh, yh);
                let pairs = |b: &mut FunctionBuilder<'_>, v| {
                    let (l, h) = (b.ins().swiden_low(v), b.ins().swiden_high(v));
                    b.ins().iadd_pairwise(l, h)
                };
                let low = pairs(&mut self.b, low);
                let high = pairs(&mut self.b, high);
                let dot = self.b.ins().iadd_pairwise(low, high);
                let v = self.b.ins().iadd(dot, acc);
                self.push(v);
            }
            _ => return false,
        }
        true
    }
}
