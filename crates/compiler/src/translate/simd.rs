//! Fixed-width SIMD (`v128`), on Cranelift's vector types; relaxed SIMD is `simd/relaxed.rs`.
//!
//! A `v128` travels as `I8X16` everywhere values meet (locals, block parameters, calls,
//! returns, `select`): on the operand stack it keeps the vector type of the operator that made
//! it, each operator bitcasts its operands to the lane type it works on where they differ, and
//! values leaving the stack for a meeting place are bitcast to `I8X16` ([`Translator::top`]).
//! Bitcasts cost no machine code; making them only where types differ keeps the IR small.
//!
//! Most operators are one Cranelift instruction with the wasm semantics. The others:
//! - `pmin`/`pmax` are a compare and a select (`b < a ? b : a`), in the operand order the x64
//!   backend turns into `minps`/`maxps`;
//! - dot products, pairwise and extending multiplies widen, multiply and add pairwise;
//! - `trunc_sat_f64x2_*_zero` converts to 64-bit lanes and narrows with a zero vector.
//!
//! The vector type each operator works on comes from its name (`simd/lanes.rs`).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32X4, F64X2, I8, I8X16, I16, I16X8, I32, I32X4, I64, I64X2};
use cranelift_codegen::ir::{ConstantData, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use wasmparser::Operator;

use super::Translator;
use super::memory::{Access, memory_index};
use lanes::{float_lanes, int_lanes, narrow_lanes};

mod lanes;
mod relaxed;

/// Lane-type changes between vector types read the register as little-endian bytes.
fn little() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

impl Translator<'_, '_> {
    /// Memory access flags for a `v128` load or store.
    fn vheap(&self) -> MemFlagsData {
        self.heap().with_endianness(Endianness::Little)
    }

    /// `v` as a vector of type `ty`.
    pub(super) fn lanes(&mut self, v: Value, ty: Type) -> Value {
        if self.b.func.dfg.value_type(v) == ty {
            v
        } else {
            self.b.ins().bitcast(ty, little(), v)
        }
    }

    fn vpop(&mut self, ty: Type) -> Value {
        let v = self.pop();
        self.lanes(v, ty)
    }

    /// `v` as values meet: a vector as `I8X16`, anything else as it is.
    pub(super) fn canonical(&mut self, v: Value) -> Value {
        if self.b.func.dfg.value_type(v).is_vector() {
            self.lanes(v, I8X16)
        } else {
            v
        }
    }

    fn vunary(&mut self, ty: Type, f: impl FnOnce(&mut FunctionBuilder<'_>, Value) -> Value) {
        let x = self.vpop(ty);
        let v = f(&mut self.b, x);
        self.push(v);
    }

    fn vbinary(
        &mut self,
        ty: Type,
        f: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value,
    ) {
        let y = self.vpop(ty);
        let x = self.vpop(ty);
        let v = f(&mut self.b, x, y);
        self.push(v);
    }

    /// A vector shift: the vector of lane type `ty`, then an i32 amount (which Cranelift takes
    /// modulo the lane width, as wasm does).
    fn vshift(
        &mut self,
        ty: Type,
        f: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value,
    ) {
        let amount = self.pop();
        let x = self.vpop(ty);
        let v = f(&mut self.b, x, amount);
        self.push(v);
    }

    /// A lane-wise test (`any_true`, `all_true`) or `bitmask`, as an i32.
    fn vtest(&mut self, ty: Type, f: impl FnOnce(&mut FunctionBuilder<'_>, Value) -> Value) {
        let x = self.vpop(ty);
        let v = f(&mut self.b, x);
        let v = if self.b.func.dfg.value_type(v) == I32 {
            v
        } else {
            self.b.ins().uextend(I32, v)
        };
        self.push(v);
    }

    fn vconst(&mut self, ty: Type, bytes: &[u8]) -> Value {
        let c = self
            .b
            .func
            .dfg
            .constants
            .insert(ConstantData::from(bytes.to_vec()));
        self.b.ins().vconst(ty, c)
    }

    /// Lane-wise `x < y ? y : x` with `lt` (the order the x64 backend matches for `pmin`/`pmax`).
    fn pselect(&mut self, ty: Type, pmin: bool) {
        let y = self.vpop(ty);
        let x = self.vpop(ty);
        let (l, r) = if pmin { (y, x) } else { (x, y) };
        let lt = self.b.ins().fcmp(FloatCC::LessThan, l, r);
        let lt = self.lanes(lt, ty);
        let v = self.b.ins().bitselect(lt, y, x);
        self.push(v);
    }

    /// `a * b` of the low or high halves of two vectors of `ty`, widened (signed or not).
    fn extmul(&mut self, ty: Type, high: bool, signed: bool) {
        self.vbinary(ty, |b, x, y| {
            let widen = |b: &mut FunctionBuilder<'_>, v| match (high, signed) {
                (false, true) => b.ins().swiden_low(v),
                (true, true) => b.ins().swiden_high(v),
                (false, false) => b.ins().uwiden_low(v),
                (true, false) => b.ins().uwiden_high(v),
            };
            let (x, y) = (widen(b, x), widen(b, y));
            b.ins().imul(x, y)
        });
    }

    /// Lane-wise signed products of two vectors of `ty`, widened and added in pairs.
    fn dot(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
        let (xl, yl) = (b.ins().swiden_low(x), b.ins().swiden_low(y));
        let low = b.ins().imul(xl, yl);
        let (xh, yh) = (b.ins().swiden_high(x), b.ins().swiden_high(y));
        let high = b.ins().imul(xh, yh);
        b.ins().iadd_pairwise(low, high)
    }

    /// A memory access of `size` bytes; the vector operand (of lane loads and stores) is
    /// popped first.
    fn lane_access(&mut self, m: wasmparser::MemArg, ty: Type, size: u32) -> (Value, Access) {
        let v = self.vpop(ty);
        let a = self.access(memory_index(&m), m.offset, size);
        (v, a)
    }

    /// Translates `op` if it is a SIMD operator; `false` if it is not.
    pub(super) fn simd_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match *op {
            O::V128Load { memarg } => {
                let addr = self.address(memory_index(&memarg), memarg.offset, 16);
                let flags = self.vheap();
                let v = self.b.ins().load(I8X16, flags, addr, 0);
                self.push(v);
            }
            O::V128Store { memarg } => {
                let (v, a) = self.lane_access(memarg, I8X16, 16);
                let flags = self.vheap();
                self.b.ins().store(flags, v, a.addr, 0);
                self.mark_written(&a);
            }
            O::V128Load8x8S { memarg }
            | O::V128Load8x8U { memarg }
            | O::V128Load16x4S { memarg }
            | O::V128Load16x4U { memarg }
            | O::V128Load32x2S { memarg }
            | O::V128Load32x2U { memarg } => {
                let addr = self.address(memory_index(&memarg), memarg.offset, 8);
                let flags = self.vheap();
                let ins = self.b.ins();
                let v = match *op {
                    O::V128Load8x8S { .. } => ins.sload8x8(flags, addr, 0),
                    O::V128Load8x8U { .. } => ins.uload8x8(flags, addr, 0),
                    O::V128Load16x4S { .. } => ins.sload16x4(flags, addr, 0),
                    O::V128Load16x4U { .. } => ins.uload16x4(flags, addr, 0),
                    O::V128Load32x2S { .. } => ins.sload32x2(flags, addr, 0),
                    _ => ins.uload32x2(flags, addr, 0),
                };
                self.push(v);
            }
            O::V128Load8Splat { memarg }
            | O::V128Load16Splat { memarg }
            | O::V128Load32Splat { memarg }
            | O::V128Load64Splat { memarg } => {
                let (scalar, vector) = match *op {
                    O::V128Load8Splat { .. } => (I8, I8X16),
                    O::V128Load16Splat { .. } => (I16, I16X8),
                    O::V128Load32Splat { .. } => (I32, I32X4),
                    _ => (I64, I64X2),
                };
                let addr = self.address(memory_index(&memarg), memarg.offset, scalar.bytes());
                let flags = self.vheap();
                let x = self.b.ins().load(scalar, flags, addr, 0);
                let v = self.b.ins().splat(vector, x);
                self.push(v);
            }
            O::V128Load32Zero { memarg } | O::V128Load64Zero { memarg } => {
                let (scalar, vector) = match *op {
                    O::V128Load32Zero { .. } => (I32, I32X4),
                    _ => (I64, I64X2),
                };
                let addr = self.address(memory_index(&memarg), memarg.offset, scalar.bytes());
                let flags = self.vheap();
                let x = self.b.ins().load(scalar, flags, addr, 0);
                let v = self.b.ins().scalar_to_vector(vector, x);
                self.push(v);
            }
            O::V128Load8Lane { memarg, lane }
            | O::V128Load16Lane { memarg, lane }
            | O::V128Load32Lane { memarg, lane }
            | O::V128Load64Lane { memarg, lane } => {
                let (scalar, vector) = match *op {
                    O::V128Load8Lane { .. } => (I8, I8X16),
                    O::V128Load16Lane { .. } => (I16, I16X8),
                    O::V128Load32Lane { .. } => (I32, I32X4),
                    _ => (I64, I64X2),
                };
                let (v, a) = self.lane_access(memarg, vector, vector.lane_type().bytes());
                let flags = self.vheap();
                let x = self.b.ins().load(scalar, flags, a.addr, 0);
                let v = self.b.ins().insertlane(v, x, lane);
                self.push(v);
            }
            O::V128Store8Lane { memarg, lane }
            | O::V128Store16Lane { memarg, lane }
            | O::V128Store32Lane { memarg, lane }
            | O::V128Store64Lane { memarg, lane } => {
                let vector = match *op {
                    O::V128Store8Lane { .. } => I8X16,
                    O::V128Store16Lane { .. } => I16X8,
                    O::V128Store32Lane { .. } => I32X4,
                    _ => I64X2,
                };
                let (v, a) = self.lane_access(memarg, vector, vector.lane_type().bytes());
                let x = self.b.ins().extractlane(v, lane);
                let flags = self.vheap();
                self.b.ins().store(flags, x, a.addr, 0);
                self.mark_written(&a);
            }
            O::V128Const { value } => {
                let v = self.vconst(I8X16, value.bytes());
                self.push(v);
            }
            O::I8x16Shuffle { lanes } => {
                let mask = self
                    .b
                    .func
                    .dfg
                    .immediates
                    .push(ConstantData::from(lanes.to_vec()));
                self.vbinary(I8X16, |b, x, y| b.ins().shuffle(x, y, mask));
            }
            O::I8x16Swizzle => self.vbinary(I8X16, |b, x, y| b.ins().swizzle(x, y)),

            O::I8x16Splat | O::I16x8Splat => {
                let (scalar, vector) = match *op {
                    O::I8x16Splat => (I8, I8X16),
                    _ => (I16, I16X8),
                };
                let x = self.pop();
                let x = self.b.ins().ireduce(scalar, x);
                let v = self.b.ins().splat(vector, x);
                self.push(v);
            }
            O::I32x4Splat | O::I64x2Splat | O::F32x4Splat | O::F64x2Splat => {
                let vector = match *op {
                    O::I32x4Splat => I32X4,
                    O::I64x2Splat => I64X2,
                    O::F32x4Splat => F32X4,
                    _ => F64X2,
                };
                let x = self.pop();
                let v = self.b.ins().splat(vector, x);
                self.push(v);
            }
            O::I8x16ExtractLaneS { lane } | O::I16x8ExtractLaneS { lane } => {
                let vector = if matches!(op, O::I8x16ExtractLaneS { .. }) {
                    I8X16
                } else {
                    I16X8
                };
                let v = self.vpop(vector);
                let x = self.b.ins().extractlane(v, lane);
                let x = self.b.ins().sextend(I32, x);
                self.push(x);
            }
            O::I8x16ExtractLaneU { lane } | O::I16x8ExtractLaneU { lane } => {
                let vector = if matches!(op, O::I8x16ExtractLaneU { .. }) {
                    I8X16
                } else {
                    I16X8
                };
                let v = self.vpop(vector);
                let x = self.b.ins().extractlane(v, lane);
                let x = self.b.ins().uextend(I32, x);
                self.push(x);
            }
            O::I32x4ExtractLane { lane }
            | O::I64x2ExtractLane { lane }
            | O::F32x4ExtractLane { lane }
            | O::F64x2ExtractLane { lane } => {
                let vector = match *op {
                    O::I32x4ExtractLane { .. } => I32X4,
                    O::I64x2ExtractLane { .. } => I64X2,
                    O::F32x4ExtractLane { .. } => F32X4,
                    _ => F64X2,
                };
                let v = self.vpop(vector);
                let x = self.b.ins().extractlane(v, lane);
                self.push(x);
            }
            O::I8x16ReplaceLane { lane }
            | O::I16x8ReplaceLane { lane }
            | O::I32x4ReplaceLane { lane }
            | O::I64x2ReplaceLane { lane }
            | O::F32x4ReplaceLane { lane }
            | O::F64x2ReplaceLane { lane } => {
                let (narrow, vector) = match *op {
                    O::I8x16ReplaceLane { .. } => (Some(I8), I8X16),
                    O::I16x8ReplaceLane { .. } => (Some(I16), I16X8),
                    O::I32x4ReplaceLane { .. } => (None, I32X4),
                    O::I64x2ReplaceLane { .. } => (None, I64X2),
                    O::F32x4ReplaceLane { .. } => (None, F32X4),
                    _ => (None, F64X2),
                };
                let x = self.pop();
                let x = match narrow {
                    Some(t) => self.b.ins().ireduce(t, x),
                    None => x,
                };
                let v = self.vpop(vector);
                let v = self.b.ins().insertlane(v, x, lane);
                self.push(v);
            }

            O::I8x16Eq | O::I16x8Eq | O::I32x4Eq | O::I64x2Eq => self.vicmp(op, IntCC::Equal),
            O::I8x16Ne | O::I16x8Ne | O::I32x4Ne | O::I64x2Ne => self.vicmp(op, IntCC::NotEqual),
            O::I8x16LtS | O::I16x8LtS | O::I32x4LtS | O::I64x2LtS => {
                self.vicmp(op, IntCC::SignedLessThan)
            }
            O::I8x16LtU | O::I16x8LtU | O::I32x4LtU => self.vicmp(op, IntCC::UnsignedLessThan),
            O::I8x16GtS | O::I16x8GtS | O::I32x4GtS | O::I64x2GtS => {
                self.vicmp(op, IntCC::SignedGreaterThan)
            }
            O::I8x16GtU | O::I16x8GtU | O::I32x4GtU => self.vicmp(op, IntCC::UnsignedGreaterThan),
            O::I8x16LeS | O::I16x8LeS | O::I32x4LeS | O::I64x2LeS => {
                self.vicmp(op, IntCC::SignedLessThanOrEqual)
            }
            O::I8x16LeU | O::I16x8LeU | O::I32x4LeU => {
                self.vicmp(op, IntCC::UnsignedLessThanOrEqual)
            }
            O::I8x16GeS | O::I16x8GeS | O::I32x4GeS | O::I64x2GeS => {
                self.vicmp(op, IntCC::SignedGreaterThanOrEqual)
            }
            O::I8x16GeU | O::I16x8GeU | O::I32x4GeU => {
                self.vicmp(op, IntCC::UnsignedGreaterThanOrEqual)
            }
            O::F32x4Eq | O::F64x2Eq => self.vfcmp(op, FloatCC::Equal),
            O::F32x4Ne | O::F64x2Ne => self.vfcmp(op, FloatCC::NotEqual),
            O::F32x4Lt | O::F64x2Lt => self.vfcmp(op, FloatCC::LessThan),
            O::F32x4Gt | O::F64x2Gt => self.vfcmp(op, FloatCC::GreaterThan),
            O::F32x4Le | O::F64x2Le => self.vfcmp(op, FloatCC::LessThanOrEqual),
            O::F32x4Ge | O::F64x2Ge => self.vfcmp(op, FloatCC::GreaterThanOrEqual),

            O::V128Not => self.vunary(I8X16, |b, x| b.ins().bnot(x)),
            O::V128And => self.vbinary(I8X16, |b, x, y| b.ins().band(x, y)),
            O::V128AndNot => self.vbinary(I8X16, |b, x, y| {
                let not_y = b.ins().bnot(y);
                b.ins().band(x, not_y)
            }),
            O::V128Or => self.vbinary(I8X16, |b, x, y| b.ins().bor(x, y)),
            O::V128Xor => self.vbinary(I8X16, |b, x, y| b.ins().bxor(x, y)),
            O::V128Bitselect => self.bitselect(),
            O::V128AnyTrue => self.vtest(I8X16, |b, x| b.ins().vany_true(x)),
            O::I8x16AllTrue | O::I16x8AllTrue | O::I32x4AllTrue | O::I64x2AllTrue => {
                self.vtest(int_lanes(op), |b, x| b.ins().vall_true(x))
            }
            O::I8x16Bitmask | O::I16x8Bitmask | O::I32x4Bitmask | O::I64x2Bitmask => {
                self.vtest(int_lanes(op), |b, x| b.ins().vhigh_bits(I32, x))
            }

            O::I8x16Abs | O::I16x8Abs | O::I32x4Abs | O::I64x2Abs => {
                self.vunary(int_lanes(op), |b, x| b.ins().iabs(x))
            }
            O::I8x16Neg | O::I16x8Neg | O::I32x4Neg | O::I64x2Neg => {
                self.vunary(int_lanes(op), |b, x| b.ins().ineg(x))
            }
            O::I8x16Popcnt => self.vunary(I8X16, |b, x| b.ins().popcnt(x)),
            O::I8x16Shl | O::I16x8Shl | O::I32x4Shl | O::I64x2Shl => {
                self.vshift(int_lanes(op), |b, x, y| b.ins().ishl(x, y))
            }
            O::I8x16ShrS | O::I16x8ShrS | O::I32x4ShrS | O::I64x2ShrS => {
                self.vshift(int_lanes(op), |b, x, y| b.ins().sshr(x, y))
            }
            O::I8x16ShrU | O::I16x8ShrU | O::I32x4ShrU | O::I64x2ShrU => {
                self.vshift(int_lanes(op), |b, x, y| b.ins().ushr(x, y))
            }
            O::I8x16Add | O::I16x8Add | O::I32x4Add | O::I64x2Add => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().iadd(x, y))
            }
            O::I8x16Sub | O::I16x8Sub | O::I32x4Sub | O::I64x2Sub => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().isub(x, y))
            }
            O::I16x8Mul | O::I32x4Mul | O::I64x2Mul => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().imul(x, y))
            }
            O::I8x16AddSatS | O::I16x8AddSatS => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().sadd_sat(x, y))
            }
            O::I8x16AddSatU | O::I16x8AddSatU => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().uadd_sat(x, y))
            }
            O::I8x16SubSatS | O::I16x8SubSatS => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().ssub_sat(x, y))
            }
            O::I8x16SubSatU | O::I16x8SubSatU => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().usub_sat(x, y))
            }
            O::I8x16MinS | O::I16x8MinS | O::I32x4MinS => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().smin(x, y))
            }
            O::I8x16MinU | O::I16x8MinU | O::I32x4MinU => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().umin(x, y))
            }
            O::I8x16MaxS | O::I16x8MaxS | O::I32x4MaxS => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().smax(x, y))
            }
            O::I8x16MaxU | O::I16x8MaxU | O::I32x4MaxU => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().umax(x, y))
            }
            O::I8x16AvgrU | O::I16x8AvgrU => {
                self.vbinary(int_lanes(op), |b, x, y| b.ins().avg_round(x, y))
            }
            O::I16x8Q15MulrSatS => self.vbinary(I16X8, |b, x, y| b.ins().sqmul_round_sat(x, y)),
            O::I8x16NarrowI16x8S => self.vbinary(I16X8, |b, x, y| b.ins().snarrow(x, y)),
            O::I8x16NarrowI16x8U => self.vbinary(I16X8, |b, x, y| b.ins().unarrow(x, y)),
            O::I16x8NarrowI32x4S => self.vbinary(I32X4, |b, x, y| b.ins().snarrow(x, y)),
            O::I16x8NarrowI32x4U => self.vbinary(I32X4, |b, x, y| b.ins().unarrow(x, y)),

            O::I16x8ExtendLowI8x16S | O::I32x4ExtendLowI16x8S | O::I64x2ExtendLowI32x4S => {
                self.vunary(narrow_lanes(op), |b, x| b.ins().swiden_low(x))
            }
            O::I16x8ExtendHighI8x16S | O::I32x4ExtendHighI16x8S | O::I64x2ExtendHighI32x4S => {
                self.vunary(narrow_lanes(op), |b, x| b.ins().swiden_high(x))
            }
            O::I16x8ExtendLowI8x16U | O::I32x4ExtendLowI16x8U | O::I64x2ExtendLowI32x4U => {
                self.vunary(narrow_lanes(op), |b, x| b.ins().uwiden_low(x))
            }
            O::I16x8ExtendHighI8x16U | O::I32x4ExtendHighI16x8U | O::I64x2ExtendHighI32x4U => {
                self.vunary(narrow_lanes(op), |b, x| b.ins().uwiden_high(x))
            }
            O::I16x8ExtAddPairwiseI8x16S | O::I32x4ExtAddPairwiseI16x8S => {
                self.vunary(narrow_lanes(op), |b, x| {
                    let (l, h) = (b.ins().swiden_low(x), b.ins().swiden_high(x));
                    b.ins().iadd_pairwise(l, h)
                })
            }
            O::I16x8ExtAddPairwiseI8x16U | O::I32x4ExtAddPairwiseI16x8U => {
                self.vunary(narrow_lanes(op), |b, x| {
                    let (l, h) = (b.ins().uwiden_low(x), b.ins().uwiden_high(x));
                    b.ins().iadd_pairwise(l, h)
                })
            }
            O::I16x8ExtMulLowI8x16S | O::I32x4ExtMulLowI16x8S | O::I64x2ExtMulLowI32x4S => {
                self.extmul(narrow_lanes(op), false, true)
            }
            O::I16x8ExtMulHighI8x16S | O::I32x4ExtMulHighI16x8S | O::I64x2ExtMulHighI32x4S => {
                self.extmul(narrow_lanes(op), true, true)
            }
            O::I16x8ExtMulLowI8x16U | O::I32x4ExtMulLowI16x8U | O::I64x2ExtMulLowI32x4U => {
                self.extmul(narrow_lanes(op), false, false)
            }
            O::I16x8ExtMulHighI8x16U | O::I32x4ExtMulHighI16x8U | O::I64x2ExtMulHighI32x4U => {
                self.extmul(narrow_lanes(op), true, false)
            }
            O::I32x4DotI16x8S => self.vbinary(I16X8, Self::dot),

            O::F32x4Abs | O::F64x2Abs => self.vunary(float_lanes(op), |b, x| b.ins().fabs(x)),
            O::F32x4Neg | O::F64x2Neg => self.vunary(float_lanes(op), |b, x| b.ins().fneg(x)),
            O::F32x4Sqrt | O::F64x2Sqrt => self.vunary(float_lanes(op), |b, x| b.ins().sqrt(x)),
            O::F32x4Ceil | O::F64x2Ceil => self.vunary(float_lanes(op), |b, x| b.ins().ceil(x)),
            O::F32x4Floor | O::F64x2Floor => self.vunary(float_lanes(op), |b, x| b.ins().floor(x)),
            O::F32x4Trunc | O::F64x2Trunc => self.vunary(float_lanes(op), |b, x| b.ins().trunc(x)),
            O::F32x4Nearest | O::F64x2Nearest => {
                self.vunary(float_lanes(op), |b, x| b.ins().nearest(x))
            }
            O::F32x4Add | O::F64x2Add => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fadd(x, y))
            }
            O::F32x4Sub | O::F64x2Sub => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fsub(x, y))
            }
            O::F32x4Mul | O::F64x2Mul => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fmul(x, y))
            }
            O::F32x4Div | O::F64x2Div => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fdiv(x, y))
            }
            O::F32x4Min | O::F64x2Min => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fmin(x, y))
            }
            O::F32x4Max | O::F64x2Max => {
                self.vbinary(float_lanes(op), |b, x, y| b.ins().fmax(x, y))
            }
            O::F32x4PMin | O::F64x2PMin => self.pselect(float_lanes(op), true),
            O::F32x4PMax | O::F64x2PMax => self.pselect(float_lanes(op), false),

            O::I32x4TruncSatF32x4S => self.vunary(F32X4, |b, x| b.ins().fcvt_to_sint_sat(I32X4, x)),
            O::I32x4TruncSatF32x4U => self.vunary(F32X4, |b, x| b.ins().fcvt_to_uint_sat(I32X4, x)),
            O::I32x4TruncSatF64x2SZero => self.trunc_sat_zero(true),
            O::I32x4TruncSatF64x2UZero => self.trunc_sat_zero(false),
            O::F32x4ConvertI32x4S => self.vunary(I32X4, |b, x| b.ins().fcvt_from_sint(F32X4, x)),
            O::F32x4ConvertI32x4U => self.vunary(I32X4, |b, x| b.ins().fcvt_from_uint(F32X4, x)),
            O::F64x2ConvertLowI32x4S => self.vunary(I32X4, |b, x| {
                let wide = b.ins().swiden_low(x);
                b.ins().fcvt_from_sint(F64X2, wide)
            }),
            O::F64x2ConvertLowI32x4U => self.vunary(I32X4, |b, x| {
                let wide = b.ins().uwiden_low(x);
                b.ins().fcvt_from_uint(F64X2, wide)
            }),
            O::F32x4DemoteF64x2Zero => self.vunary(F64X2, |b, x| b.ins().fvdemote(x)),
            O::F64x2PromoteLowF32x4 => self.vunary(F32X4, |b, x| b.ins().fvpromote_low(x)),
            _ => return self.relaxed_op(op),
        }
        true
    }

    /// `v128.bitselect`: lanes of the first operand where the third's bits are set, of the
    /// second elsewhere.
    fn bitselect(&mut self) {
        let c = self.vpop(I8X16);
        let y = self.vpop(I8X16);
        let x = self.vpop(I8X16);
        let v = self.b.ins().bitselect(c, x, y);
        self.push(v);
    }

    /// `i32x4.trunc_sat_f64x2_s_zero` (with `signed`) or `_u_zero`: saturating conversion to
    /// 64-bit lanes, narrowed with a zero vector.
    fn trunc_sat_zero(&mut self, signed: bool) {
        let x = self.vpop(F64X2);
        let zero = self.vconst(I64X2, &[0; 16]);
        let v = if signed {
            let wide = self.b.ins().fcvt_to_sint_sat(I64X2, x);
            self.b.ins().snarrow(wide, zero)
        } else {
            let wide = self.b.ins().fcvt_to_uint_sat(I64X2, x);
            self.b.ins().uunarrow(wide, zero)
        };
        self.push(v);
    }

    fn vicmp(&mut self, op: &Operator<'_>, cc: IntCC) {
        self.vbinary(int_lanes(op), |b, x, y| b.ins().icmp(cc, x, y));
    }

    fn vfcmp(&mut self, op: &Operator<'_>, cc: FloatCC) {
        self.vbinary(float_lanes(op), |b, x, y| b.ins().fcmp(cc, x, y));
    }
}
