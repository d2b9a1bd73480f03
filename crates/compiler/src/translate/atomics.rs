//! Atomic memory operations (the threads proposal): atomic loads, stores, read-modify-writes
//! and compare-exchanges, `atomic.fence`, and `memory.atomic.wait32`/`wait64`/`notify`.
//!
//! Every atomic access first traps `UnalignedAtomic` unless its effective address is a
//! multiple of its size, then goes through [`Translator::access`] as a plain access does: the
//! same bounds check, the same write mark for a memory that is not shared. For a wait or a
//! notify, an effective address past what the memory's index type counts is out of bounds
//! before it is misaligned. That is wasmtime's order in both; the spec's tests have no access
//! both out of bounds and misaligned. Cranelift's atomic instructions are sequentially
//! consistent, which is what WebAssembly's atomics are. Waiting and notifying are builtins
//! (`AtomicWait32`, `AtomicWait64`, `AtomicNotify`): the runtime keeps the waiters, and a wait
//! on a memory that is not shared traps there, since nothing could ever wake it (a notify
//! there wakes nobody).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I16, I32, I64};
use cranelift_codegen::ir::{AtomicRmwOp, InstBuilder, TrapCode, Type, Value};
use ephem_module::Builtin;
use wasmparser::{MemArg, Operator};

use super::Translator;
use super::memory::{Access, memory_index};
use crate::traps::code;

impl Translator<'_, '_> {
    /// The access of an atomic operation of `size` bytes through the address on top of the
    /// stack (popped): alignment checked, then bounds. With `wrap_out`, an effective address
    /// past what the memory's index type counts is out of bounds before it is misaligned
    /// (see the module documentation).
    fn atomic_access(&mut self, m: &MemArg, size: u32, wrap_out: bool) -> Access {
        let memory = memory_index(m);
        if size > 1 {
            let index = *self.stack.last().expect("validated: an address");
            let memory64 = self.env.info.memories[memory as usize].memory64;
            let wide = self.widen(memory, index);
            let mask = i64::from(size - 1);
            let (ea, over) = match (wrap_out, memory64) {
                (false, _) => (self.b.ins().iadd_imm_u(wide, m.offset as i64), None),
                (true, true) => {
                    let offset = self.b.ins().iconst(I64, m.offset as i64);
                    let (ea, over) = self.b.ins().uadd_overflow(wide, offset);
                    (ea, Some(over))
                }
                (true, false) => {
                    let ea = self.b.ins().iadd_imm_u(wide, m.offset as i64);
                    let over =
                        self.b
                            .ins()
                            .icmp_imm_u(IntCC::UnsignedGreaterThan, ea, u32::MAX as i64);
                    (ea, Some(over))
                }
            };
            let low = self.b.ins().band_imm_u(ea, mask);
            let misaligned = match over {
                None => low,
                Some(over) => {
                    let low = self.b.ins().icmp_imm_u(IntCC::NotEqual, low, 0);
                    self.b.ins().band_not(low, over)
                }
            };
            self.b.ins().trapnz(misaligned, code::UNALIGNED_ATOMIC);
        }
        self.access(memory, m.offset, size)
    }

    /// `v` narrowed to `width`, if wider.
    fn narrowed(&mut self, v: Value, width: Type) -> Value {
        match self.b.func.dfg.value_type(v) == width {
            true => v,
            false => self.b.ins().ireduce(width, v),
        }
    }

    /// `v` zero-extended to `ty`, if narrower.
    fn widened(&mut self, v: Value, ty: Type) -> Value {
        match self.b.func.dfg.value_type(v) == ty {
            true => v,
            false => self.b.ins().uextend(ty, v),
        }
    }

    fn atomic_load(&mut self, m: &MemArg, ty: Type, width: Type) {
        let a = self.atomic_access(m, width.bytes(), false);
        let flags = self.heap();
        let v = self.b.ins().atomic_load(width, flags, a.addr);
        let v = self.widened(v, ty);
        self.push(v);
    }

    fn atomic_store(&mut self, m: &MemArg, width: Type) {
        let value = self.pop();
        let a = self.atomic_access(m, width.bytes(), false);
        let value = self.narrowed(value, width);
        let flags = self.heap();
        self.b.ins().atomic_store(flags, value, a.addr);
        self.mark_written(&a);
    }

    fn atomic_rmw(&mut self, m: &MemArg, ty: Type, width: Type, op: AtomicRmwOp) {
        let value = self.pop();
        let a = self.atomic_access(m, width.bytes(), false);
        let value = self.narrowed(value, width);
        let flags = self.heap();
        let old = self.b.ins().atomic_rmw(width, flags, op, a.addr, value);
        self.mark_written(&a);
        let old = self.widened(old, ty);
        self.push(old);
    }

    fn atomic_cmpxchg(&mut self, m: &MemArg, ty: Type, width: Type) {
        let (expected, replacement) = self.pop2();
        let a = self.atomic_access(m, width.bytes(), false);
        let expected = self.narrowed(expected, width);
        let replacement = self.narrowed(replacement, width);
        let flags = self.heap();
        let old = self
            .b
            .ins()
            .atomic_cas(flags, a.addr, expected, replacement);
        self.mark_written(&a);
        let old = self.widened(old, ty);
        self.push(old);
    }

    /// The effective address of `a` as the wait and notify builtins take it (`i64`; a 64-bit
    /// memory's sum may wrap, which the builtin finds out of bounds).
    fn effective(&mut self, a: &Access) -> Value {
        self.b.ins().iadd_imm_u(a.wide, a.offset as i64)
    }

    fn atomic_wait(&mut self, m: &MemArg, width: Type) {
        let (expected, timeout) = self.pop2();
        let a = self.atomic_access(m, width.bytes(), true);
        let addr = self.effective(&a);
        let mem = self.iconst32(a.memory);
        let which = match width {
            I32 => Builtin::AtomicWait32,
            _ => Builtin::AtomicWait64,
        };
        let v = self
            .builtin(which, &[mem, addr, expected, timeout])
            .expect("has a result");
        for (flag, trap) in [
            (3, code::INTERRUPTED),
            (4, code::WAIT_ON_UNSHARED),
            (5, TrapCode::HEAP_OUT_OF_BOUNDS),
        ] {
            let hit = self.b.ins().icmp_imm_u(IntCC::Equal, v, flag);
            self.b.ins().trapnz(hit, trap);
        }
        self.push(v);
    }

    fn atomic_notify(&mut self, m: &MemArg) {
        let count = self.pop();
        let a = self.atomic_access(m, 4, true);
        let addr = self.effective(&a);
        let mem = self.iconst32(a.memory);
        let woken = self
            .builtin(Builtin::AtomicNotify, &[mem, addr, count])
            .expect("has a result");
        let out = self.b.ins().icmp_imm_u(IntCC::SignedLessThan, woken, 0);
        self.b.ins().trapnz(out, TrapCode::HEAP_OUT_OF_BOUNDS);
        let woken = self.b.ins().ireduce(I32, woken);
        self.push(woken);
    }

    /// Translates `op` if it is an atomic operation; `false` if it is not.
    pub(super) fn atomic_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match op {
            O::AtomicFence { .. } => {
                self.b.ins().fence();
            }
            O::MemoryAtomicNotify { memarg } => self.atomic_notify(memarg),
            O::MemoryAtomicWait32 { memarg } => self.atomic_wait(memarg, I32),
            O::MemoryAtomicWait64 { memarg } => self.atomic_wait(memarg, I64),
            O::I32AtomicLoad { memarg } => self.atomic_load(memarg, I32, I32),
            O::I64AtomicLoad { memarg } => self.atomic_load(memarg, I64, I64),
            O::I32AtomicLoad8U { memarg } => self.atomic_load(memarg, I32, I8),
            O::I32AtomicLoad16U { memarg } => self.atomic_load(memarg, I32, I16),
            O::I64AtomicLoad8U { memarg } => self.atomic_load(memarg, I64, I8),
            O::I64AtomicLoad16U { memarg } => self.atomic_load(memarg, I64, I16),
            O::I64AtomicLoad32U { memarg } => self.atomic_load(memarg, I64, I32),
            O::I32AtomicStore { memarg } => self.atomic_store(memarg, I32),
            O::I64AtomicStore { memarg } => self.atomic_store(memarg, I64),
            O::I32AtomicStore8 { memarg } | O::I64AtomicStore8 { memarg } => {
                self.atomic_store(memarg, I8)
            }
            O::I32AtomicStore16 { memarg } | O::I64AtomicStore16 { memarg } => {
                self.atomic_store(memarg, I16)
            }
            O::I64AtomicStore32 { memarg } => self.atomic_store(memarg, I32),
            O::I32AtomicRmwCmpxchg { memarg } => self.atomic_cmpxchg(memarg, I32, I32),
            O::I64AtomicRmwCmpxchg { memarg } => self.atomic_cmpxchg(memarg, I64, I64),
            O::I32AtomicRmw8CmpxchgU { memarg } => self.atomic_cmpxchg(memarg, I32, I8),
            O::I32AtomicRmw16CmpxchgU { memarg } => self.atomic_cmpxchg(memarg, I32, I16),
            O::I64AtomicRmw8CmpxchgU { memarg } => self.atomic_cmpxchg(memarg, I64, I8),
            O::I64AtomicRmw16CmpxchgU { memarg } => self.atomic_cmpxchg(memarg, I64, I16),
            O::I64AtomicRmw32CmpxchgU { memarg } => self.atomic_cmpxchg(memarg, I64, I32),
            _ => {
                let Some((memarg, ty, width, rmw)) = rmw_op(op) else {
                    return false;
                };
                self.atomic_rmw(memarg, ty, width, rmw)
            }
        }
        true
    }
}

/// A read-modify-write operator's memory argument, value type, access width and operation.
fn rmw_op<'a>(op: &'a Operator<'_>) -> Option<(&'a MemArg, Type, Type, AtomicRmwOp)> {
    use AtomicRmwOp as R;
    use Operator as O;
    Some(match op {
        O::I32AtomicRmwAdd { memarg } => (memarg, I32, I32, R::Add),
        O::I64AtomicRmwAdd { memarg } => (memarg, I64, I64, R::Add),
        O::I32AtomicRmw8AddU { memarg } => (memarg, I32, I8, R::Add),
        O::I32AtomicRmw16AddU { memarg } => (memarg, I32, I16, R::Add),
        O::I64AtomicRmw8AddU { memarg } => (memarg, I64, I8, R::Add),
        O::I64AtomicRmw16AddU { memarg } => (memarg, I64, I16, R::Add),
        O::I64AtomicRmw32AddU { memarg } => (memarg, I64, I32, R::Add),
        O::I32AtomicRmwSub { memarg } => (memarg, I32, I32, R::Sub),
        O::I64AtomicRmwSub { memarg } => (memarg, I64, I64, R::Sub),
        O::I32AtomicRmw8SubU { memarg } => (memarg, I32, I8, R::Sub),
        O::I32AtomicRmw16SubU { memarg } => (memarg, I32, I16, R::Sub),
        O::I64AtomicRmw8SubU { memarg } => (memarg, I64, I8, R::Sub),
        O::I64AtomicRmw16SubU { memarg } => (memarg, I64, I16, R::Sub),
        O::I64AtomicRmw32SubU { memarg } => (memarg, I64, I32, R::Sub),
        O::I32AtomicRmwAnd { memarg } => (memarg, I32, I32, R::And),
        O::I64AtomicRmwAnd { memarg } => (memarg, I64, I64, R::And),
        O::I32AtomicRmw8AndU { memarg } => (memarg, I32, I8, R::And),
        O::I32AtomicRmw16AndU { memarg } => (memarg, I32, I16, R::And),
        O::I64AtomicRmw8AndU { memarg } => (memarg, I64, I8, R::And),
        O::I64AtomicRmw16AndU { memarg } => (memarg, I64, I16, R::And),
        O::I64AtomicRmw32AndU { memarg } => (memarg, I64, I32, R::And),
        O::I32AtomicRmwOr { memarg } => (memarg, I32, I32, R::Or),
        O::I64AtomicRmwOr { memarg } => (memarg, I64, I64, R::Or),
        O::I32AtomicRmw8OrU { memarg } => (memarg, I32, I8, R::Or),
        O::I32AtomicRmw16OrU { memarg } => (memarg, I32, I16, R::Or),
        O::I64AtomicRmw8OrU { memarg } => (memarg, I64, I8, R::Or),
        O::I64AtomicRmw16OrU { memarg } => (memarg, I64, I16, R::Or),
        O::I64AtomicRmw32OrU { memarg } => (memarg, I64, I32, R::Or),
        O::I32AtomicRmwXor { memarg } => (memarg, I32, I32, R::Xor),
        O::I64AtomicRmwXor { memarg } => (memarg, I64, I64, R::Xor),
        O::I32AtomicRmw8XorU { memarg } => (memarg, I32, I8, R::Xor),
        O::I32AtomicRmw16XorU { memarg } => (memarg, I32, I16, R::Xor),
        O::I64AtomicRmw8XorU { memarg } => (memarg, I64, I8, R::Xor),
        O::I64AtomicRmw16XorU { memarg } => (memarg, I64, I16, R::Xor),
        O::I64AtomicRmw32XorU { memarg } => (memarg, I64, I32, R::Xor),
        O::I32AtomicRmwXchg { memarg } => (memarg, I32, I32, R::Xchg),
        O::I64AtomicRmwXchg { memarg } => (memarg, I64, I64, R::Xchg),
        O::I32AtomicRmw8XchgU { memarg } => (memarg, I32, I8, R::Xchg),
        O::I32AtomicRmw16XchgU { memarg } => (memarg, I32, I16, R::Xchg),
        O::I64AtomicRmw8XchgU { memarg } => (memarg, I64, I8, R::Xchg),
        O::I64AtomicRmw16XchgU { memarg } => (memarg, I64, I16, R::Xchg),
        O::I64AtomicRmw32XchgU { memarg } => (memarg, I64, I32, R::Xchg),
        _ => return None,
    })
}
