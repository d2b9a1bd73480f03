//! Scalar numeric operators: constants, comparisons, integer and float arithmetic, and
//! conversions.
//!
//! Almost each is one Cranelift instruction with the wasm semantics (Cranelift's trapping
//! division and float-to-integer conversions trap as wasm requires); comparisons produce an
//! `i32` 0 or 1, and the sign extensions narrow and widen again.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use wasmparser::Operator;

use super::Translator;

impl Translator<'_, '_> {
    /// A comparison's result as wasm's `i32` 0 or 1.
    fn bool_to_i32(&mut self, v: Value) -> Value {
        self.b.ins().uextend(I32, v)
    }

    fn icmp(&mut self, cc: IntCC) {
        let (x, y) = self.pop2();
        let c = self.b.ins().icmp(cc, x, y);
        let v = self.bool_to_i32(c);
        self.push(v);
    }

    fn fcmp(&mut self, cc: FloatCC) {
        let (x, y) = self.pop2();
        let c = self.b.ins().fcmp(cc, x, y);
        let v = self.bool_to_i32(c);
        self.push(v);
    }

    pub(super) fn eqz(&mut self) {
        let x = self.pop();
        let c = self.b.ins().icmp_imm_u(IntCC::Equal, x, 0);
        let v = self.bool_to_i32(c);
        self.push(v);
    }

    /// Pops two operands and pushes what `f` makes of them.
    fn binary(&mut self, f: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value) {
        let (x, y) = self.pop2();
        let v = f(&mut self.b, x, y);
        self.push(v);
    }

    /// Pops an operand and pushes what `f` makes of it.
    fn unary(&mut self, f: impl FnOnce(&mut FunctionBuilder<'_>, Value) -> Value) {
        let x = self.pop();
        let v = f(&mut self.b, x);
        self.push(v);
    }

    /// Translates `op` if it is a scalar numeric operator; `false` if it is not.
    pub(super) fn numeric_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match *op {
            O::I32Const { value } => {
                let v = self.iconst32(value as u32);
                self.push(v);
            }
            O::I64Const { value } => {
                let v = self.b.ins().iconst(I64, value);
                self.push(v);
            }
            O::F32Const { value } => {
                let v = self.b.ins().f32const(Ieee32::with_bits(value.bits()));
                self.push(v);
            }
            O::F64Const { value } => {
                let v = self.b.ins().f64const(Ieee64::with_bits(value.bits()));
                self.push(v);
            }

            O::I32Eqz | O::I64Eqz => self.eqz(),
            O::I32Eq | O::I64Eq => self.icmp(IntCC::Equal),
            O::I32Ne | O::I64Ne => self.icmp(IntCC::NotEqual),
            O::I32LtS | O::I64LtS => self.icmp(IntCC::SignedLessThan),
            O::I32LtU | O::I64LtU => self.icmp(IntCC::UnsignedLessThan),
            O::I32GtS | O::I64GtS => self.icmp(IntCC::SignedGreaterThan),
            O::I32GtU | O::I64GtU => self.icmp(IntCC::UnsignedGreaterThan),
            O::I32LeS | O::I64LeS => self.icmp(IntCC::SignedLessThanOrEqual),
            O::I32LeU | O::I64LeU => self.icmp(IntCC::UnsignedLessThanOrEqual),
            O::I32GeS | O::I64GeS => self.icmp(IntCC::SignedGreaterThanOrEqual),
            O::I32GeU | O::I64GeU => self.icmp(IntCC::UnsignedGreaterThanOrEqual),
            O::F32Eq | O::F64Eq => self.fcmp(FloatCC::Equal),
            O::F32Ne | O::F64Ne => self.fcmp(FloatCC::NotEqual),
            O::F32Lt | O::F64Lt => self.fcmp(FloatCC::LessThan),
            O::F32Gt | O::F64Gt => self.fcmp(FloatCC::GreaterThan),
            O::F32Le | O::F64Le => self.fcmp(FloatCC::LessThanOrEqual),
            O::F32Ge | O::F64Ge => self.fcmp(FloatCC::GreaterThanOrEqual),

            O::I32Clz | O::I64Clz => self.unary(|b, x| b.ins().clz(x)),
            O::I32Ctz | O::I64Ctz => self.unary(|b, x| b.ins().ctz(x)),
            O::I32Popcnt | O::I64Popcnt => self.unary(|b, x| b.ins().popcnt(x)),
            O::I32Add | O::I64Add => self.binary(|b, x, y| b.ins().iadd(x, y)),
            O::I32Sub | O::I64Sub => self.binary(|b, x, y| b.ins().isub(x, y)),
            O::I32Mul | O::I64Mul => self.binary(|b, x, y| b.ins().imul(x, y)),
            O::I32DivS | O::I64DivS => self.binary(|b, x, y| b.ins().sdiv(x, y)),
            O::I32DivU | O::I64DivU => self.binary(|b, x, y| b.ins().udiv(x, y)),
            O::I32RemS | O::I64RemS => self.binary(|b, x, y| b.ins().srem(x, y)),
            O::I32RemU | O::I64RemU => self.binary(|b, x, y| b.ins().urem(x, y)),
            O::I32And | O::I64And => self.binary(|b, x, y| b.ins().band(x, y)),
            O::I32Or | O::I64Or => self.binary(|b, x, y| b.ins().bor(x, y)),
            O::I32Xor | O::I64Xor => self.binary(|b, x, y| b.ins().bxor(x, y)),
            O::I32Shl | O::I64Shl => self.binary(|b, x, y| b.ins().ishl(x, y)),
            O::I32ShrS | O::I64ShrS => self.binary(|b, x, y| b.ins().sshr(x, y)),
            O::I32ShrU | O::I64ShrU => self.binary(|b, x, y| b.ins().ushr(x, y)),
            O::I32Rotl | O::I64Rotl => self.binary(|b, x, y| b.ins().rotl(x, y)),
            O::I32Rotr | O::I64Rotr => self.binary(|b, x, y| b.ins().rotr(x, y)),

            O::F32Abs | O::F64Abs => self.unary(|b, x| b.ins().fabs(x)),
            O::F32Neg | O::F64Neg => self.unary(|b, x| b.ins().fneg(x)),
            O::F32Ceil | O::F64Ceil => self.unary(|b, x| b.ins().ceil(x)),
            O::F32Floor | O::F64Floor => self.unary(|b, x| b.ins().floor(x)),
            O::F32Trunc | O::F64Trunc => self.unary(|b, x| b.ins().trunc(x)),
            O::F32Nearest | O::F64Nearest => self.unary(|b, x| b.ins().nearest(x)),
            O::F32Sqrt | O::F64Sqrt => self.unary(|b, x| b.ins().sqrt(x)),
            O::F32Add | O::F64Add => self.binary(|b, x, y| b.ins().fadd(x, y)),
            O::F32Sub | O::F64Sub => self.binary(|b, x, y| b.ins().fsub(x, y)),
            O::F32Mul | O::F64Mul => self.binary(|b, x, y| b.ins().fmul(x, y)),
            O::F32Div | O::F64Div => self.binary(|b, x, y| b.ins().fdiv(x, y)),
            O::F32Min | O::F64Min => self.binary(|b, x, y| b.ins().fmin(x, y)),
            O::F32Max | O::F64Max => self.binary(|b, x, y| b.ins().fmax(x, y)),
            O::F32Copysign | O::F64Copysign => self.binary(|b, x, y| b.ins().fcopysign(x, y)),

            O::I32WrapI64 => self.unary(|b, x| b.ins().ireduce(I32, x)),
            O::I64ExtendI32S => self.unary(|b, x| b.ins().sextend(I64, x)),
            O::I64ExtendI32U => self.unary(|b, x| b.ins().uextend(I64, x)),
            O::I32Extend8S => self.unary(|b, x| sext_from(b, x, I8, I32)),
            O::I32Extend16S => self.unary(|b, x| sext_from(b, x, I16, I32)),
            O::I64Extend8S => self.unary(|b, x| sext_from(b, x, I8, I64)),
            O::I64Extend16S => self.unary(|b, x| sext_from(b, x, I16, I64)),
            O::I64Extend32S => self.unary(|b, x| sext_from(b, x, I32, I64)),
            O::I32TruncF32S | O::I32TruncF64S => self.unary(|b, x| b.ins().fcvt_to_sint(I32, x)),
            O::I32TruncF32U | O::I32TruncF64U => self.unary(|b, x| b.ins().fcvt_to_uint(I32, x)),
            O::I64TruncF32S | O::I64TruncF64S => self.unary(|b, x| b.ins().fcvt_to_sint(I64, x)),
            O::I64TruncF32U | O::I64TruncF64U => self.unary(|b, x| b.ins().fcvt_to_uint(I64, x)),
            O::I32TruncSatF32S | O::I32TruncSatF64S => {
                self.unary(|b, x| b.ins().fcvt_to_sint_sat(I32, x))
            }
            O::I32TruncSatF32U | O::I32TruncSatF64U => {
                self.unary(|b, x| b.ins().fcvt_to_uint_sat(I32, x))
            }
            O::I64TruncSatF32S | O::I64TruncSatF64S => {
                self.unary(|b, x| b.ins().fcvt_to_sint_sat(I64, x))
            }
            O::I64TruncSatF32U | O::I64TruncSatF64U => {
                self.unary(|b, x| b.ins().fcvt_to_uint_sat(I64, x))
            }
            O::F32ConvertI32S | O::F32ConvertI64S => {
                self.unary(|b, x| b.ins().fcvt_from_sint(F32, x))
            }
            O::F32ConvertI32U | O::F32ConvertI64U => {
                self.unary(|b, x| b.ins().fcvt_from_uint(F32, x))
            }
            O::F64ConvertI32S | O::F64ConvertI64S => {
                self.unary(|b, x| b.ins().fcvt_from_sint(F64, x))
            }
            O::F64ConvertI32U | O::F64ConvertI64U => {
                self.unary(|b, x| b.ins().fcvt_from_uint(F64, x))
            }
            O::F32DemoteF64 => self.unary(|b, x| b.ins().fdemote(F32, x)),
            O::F64PromoteF32 => self.unary(|b, x| b.ins().fpromote(F64, x)),
            O::I32ReinterpretF32 => self.unary(|b, x| b.ins().bitcast(I32, MemFlagsData::new(), x)),
            // Wide arithmetic: 128-bit sums of (low, high) pairs, 64 × 64 → 128-bit products.
            O::I64Add128 | O::I64Sub128 => {
                let (lo2, hi2) = self.pop2();
                let (lo1, hi1) = self.pop2();
                let x = self.b.ins().iconcat(lo1, hi1);
                let y = self.b.ins().iconcat(lo2, hi2);
                let r = match op {
                    O::I64Add128 => self.b.ins().iadd(x, y),
                    _ => self.b.ins().isub(x, y),
                };
                let (lo, hi) = self.b.ins().isplit(r);
                self.push(lo);
                self.push(hi);
            }
            O::I64MulWideS | O::I64MulWideU => {
                let (x, y) = self.pop2();
                let lo = self.b.ins().imul(x, y);
                let hi = match op {
                    O::I64MulWideS => self.b.ins().smulhi(x, y),
                    _ => self.b.ins().umulhi(x, y),
                };
                self.push(lo);
                self.push(hi);
            }
            O::I64ReinterpretF64 => self.unary(|b, x| b.ins().bitcast(I64, MemFlagsData::new(), x)),
            O::F32ReinterpretI32 => self.unary(|b, x| b.ins().bitcast(F32, MemFlagsData::new(), x)),
            O::F64ReinterpretI64 => self.unary(|b, x| b.ins().bitcast(F64, MemFlagsData::new(), x)),

            _ => return false,
        }
        true
    }
}

/// `x` sign-extended from its low `narrow` bits to `wide`.
fn sext_from(b: &mut FunctionBuilder<'_>, x: Value, narrow: Type, wide: Type) -> Value {
    let n = b.ins().ireduce(narrow, x);
    b.ins().sextend(wide, n)
}
