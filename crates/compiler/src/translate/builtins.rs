//! Calls of the runtime's builtins (`ephem_module::Builtin`): growing memories and tables,
//! bulk memory and table operations, lazy table elements, `ref.func` of a lazily made
//! funcref, and raising a trap.
//!
//! A builtin is called through the vmctx's table of builtin addresses with the native calling
//! convention and the vmctx first. It may charge fuel per byte or element, so metered code
//! writes its fuel to the store before the call and reads it back after; `memory.grow` may grow a
//! memory, so code that checks bounds reloads the lengths after it (no other builtin does). A builtin that can trap returns a
//! flag instead of unwinding, and the code traps on it ([`Translator::checked_builtin`]).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, Signature, TrapCode, Value};
use cranelift_codegen::isa::CallConv;
use ephem_module::{Builtin, BuiltinType, VmOffsets};

use super::Translator;
use crate::traps::code;

/// The signature of a call of `which` with the calling convention `conv`: the vmctx, then its
/// parameters as `for_each_builtin` lists them.
pub(super) fn signature(which: Builtin, conv: CallConv) -> Signature {
    let ty = |t: BuiltinType| match t {
        BuiltinType::I32 => I32,
        BuiltinType::I64 => I64,
    };
    let (params, ret) = which.signature();
    let mut sig = Signature::new(conv);
    sig.params.push(AbiParam::new(I64));
    sig.params
        .extend(params.iter().map(|&t| AbiParam::new(ty(t))));
    sig.returns.extend(ret.map(|t| AbiParam::new(ty(t))));
    sig
}

impl Translator<'_, '_> {
    /// Calls a runtime builtin with `vmctx` and `args` (of the types its entry in
    /// `for_each_builtin` lists); returns its result.
    pub(super) fn builtin(&mut self, which: Builtin, args: &[Value]) -> Option<Value> {
        let result = self.call_builtin(which, args);
        self.fuel_from_store();
        if which == Builtin::MemoryGrow {
            self.reload_lengths();
        }
        result
    }

    /// The call of [`Translator::builtin`], without what follows it: the store's fuel and the
    /// memories' lengths, which a builtin that returns may have changed.
    pub(super) fn call_builtin(&mut self, which: Builtin, args: &[Value]) -> Option<Value> {
        debug_assert_eq!(which.signature().0.len(), args.len(), "{which:?}");
        let throws = matches!(which, Builtin::Throw | Builtin::ThrowRef);
        // A throw is called with the `tail` convention, whose arguments go where the native
        // one's do (x86-64): an exception reaching a `try_call` of it then leaves no register
        // for the unwinder to restore (Cranelift assumes every one clobbered, as for calls of
        // wasm functions), where the native convention would expect the callee-saved ones.
        let conv = if throws {
            CallConv::Tail
        } else {
            self.env.call_conv
        };
        let sig = self.builtin_signature(which, || signature(which, conv));
        // Read-only, but not hoisted: a builtin is mostly called from a cold block, and the
        // address hoisted out of a loop would take a register (or a stack slot) through it.
        let flags = MemFlagsData::trusted().with_readonly();
        let table = (self.b.ins()).load(I64, flags, self.vmctx, VmOffsets::BUILTINS as i32);
        let fnptr = (self.b.ins()).load(I64, flags, table, which as i32 * 8);
        let mut all = vec![self.vmctx];
        all.extend_from_slice(args);
        // Bulk operations charge fuel per byte or element from the store's count.
        self.fuel_to_store();
        if throws {
            // The one builtin call a `try_table` of this function may catch.
            self.call_inst(super::calls::Callee::Indirect(sig, fnptr), &all);
            return None;
        }
        let call = self.b.ins().call_indirect(sig, fnptr, &all);
        self.b.inst_results(call).first().copied()
    }

    /// Calls a builtin that returns a trap flag, and traps with `trap` when it is set: 1 is out
    /// of bounds, 2 (only from metered code's stores) out of fuel, 3 past the deadline.
    pub(super) fn checked_builtin(&mut self, which: Builtin, args: &[Value], trap: TrapCode) {
        let flag = self.builtin(which, args).expect("has a result");
        let late = self.b.ins().icmp_imm_u(IntCC::Equal, flag, 3);
        self.b.ins().trapnz(late, code::INTERRUPTED);
        if self.fuel.is_some() {
            let out = self.b.ins().icmp_imm_u(IntCC::Equal, flag, 2);
            self.b.ins().trapnz(out, code::OUT_OF_FUEL);
        }
        self.b.ins().trapnz(flag, trap);
    }
}
