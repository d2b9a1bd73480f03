//! Calls of wasm functions: direct, through an import's funcref, `call_indirect` and
//! `call_ref`, each also as a tail call (`return_call*`).
//!
//! A call passes the callee's vmctx and then this instance's, as the caller (see
//! [`wasm_signature`]). A defined function is called directly, by a relocation the linker
//! resolves; an imported one through its funcref in the vmctx; `call_indirect` through a
//! table element, after checking that it is not null and has the expected type id; `call_ref`
//! through the reference, after checking that it is not null (validation proves its type), or
//! directly where `ref.func` made it. Metered code puts its fuel in the pinned register before
//! the call; after it, the fuel is read again, and the memories' lengths too where the callee
//! may have grown one (`crate::growth`).

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{self, InstBuilder, MemFlagsData, Value};
use ephem_module::VmOffsets;
use wasmparser::Operator;

use super::{Translator, trusted, wasm_signature};
use crate::traps::code;

/// The signatures (by type index, and by builtin) and direct callees (by function index) a
/// function has declared.
#[derive(Default)]
pub(super) struct Declared {
    types: HashMap<u32, ir::SigRef>,
    builtins: HashMap<ephem_module::Builtin, ir::SigRef>,
    funcs: HashMap<u32, ir::FuncRef>,
}

/// What a call calls: a function of the text, or code at an address.
#[derive(Clone, Copy)]
pub(super) enum Callee {
    Direct(ir::FuncRef),
    Indirect(ir::SigRef, Value),
}

impl Translator<'_, '_> {
    /// A call of function `func`; with `tail`, a `return_call` (the frame is replaced).
    fn call(&mut self, func: u32, tail: bool) {
        self.spill_fuel();
        let type_index = self.env.info.funcs[func as usize];
        let sig = self.signature(type_index);
        let args = self.take(self.env.info.sig(type_index).params.len());
        if func < self.env.info.imported_funcs {
            let fr = self.env.offsets.funcref(func);
            let code = self.load_ptr(self.vmctx, fr + VmOffsets::FUNCREF_CODE);
            let callee_vmctx = self.load_ptr(self.vmctx, fr + VmOffsets::FUNCREF_VMCTX);
            self.call_code(sig, code, callee_vmctx, args, tail);
        } else {
            let callee = *self.declared.funcs.entry(func).or_insert_with(|| {
                let name = (self.b.func).declare_imported_user_function(ir::UserExternalName {
                    namespace: 0,
                    index: func,
                });
                self.b.import_function(ir::ExtFuncData {
                    name: ir::ExternalName::User(name),
                    signature: sig,
                    colocated: true,
                    patchable: false,
                })
            });
            let mut all = vec![self.vmctx, self.vmctx];
            all.extend(args);
            if tail {
                self.b.ins().return_call(callee, &all);
                self.unreachable_now();
            } else {
                let results = self.call_inst(Callee::Direct(callee), &all);
                let may_grow = self.env.growth.may_grow(func);
                self.returned(results, may_grow);
            }
        }
    }

    /// Calls the code at `code` with `callee_vmctx`, this instance as the caller and `args`;
    /// with `tail`, as a `return_call_indirect`.
    fn call_code(
        &mut self,
        sig: ir::SigRef,
        code: Value,
        callee_vmctx: Value,
        args: Vec<Value>,
        tail: bool,
    ) {
        let mut all = vec![callee_vmctx, self.vmctx];
        all.extend(args);
        if tail {
            self.b.ins().return_call_indirect(sig, code, &all);
            self.unreachable_now();
        } else {
            let results = self.call_inst(Callee::Indirect(sig, code), &all);
            self.returned(results, true);
        }
    }

    /// Emits a call of `callee` with `args` and returns its results: a plain call, or inside a
    /// `try_table` a `try_call` whose exception table lists the enclosing handlers (see
    /// `exceptions.rs`), after which translation continues in the block the call returns to.
    pub(super) fn call_inst(&mut self, callee: Callee, args: &[Value]) -> Vec<Value> {
        if self.catches.is_empty() {
            let call = match callee {
                Callee::Direct(f) => self.b.ins().call(f, args),
                Callee::Indirect(sig, code) => self.b.ins().call_indirect(sig, code, args),
            };
            return self.b.inst_results(call).to_vec();
        }
        let sig = match callee {
            Callee::Direct(f) => self.b.func.dfg.ext_funcs[f].signature,
            Callee::Indirect(sig, _) => sig,
        };
        let (table, cont) = self.exception_table(sig);
        match callee {
            Callee::Direct(f) => self.b.ins().try_call(f, args, table),
            Callee::Indirect(_, code) => self.b.ins().try_call_indirect(code, args, table),
        };
        self.b.switch_to_block(cont);
        self.b.block_params(cont).to_vec()
    }

    /// After a call returned: its `results` on the stack, the fuel anew, and the memories'
    /// lengths if the callee `may_grow` one (see `crate::growth`).
    pub(super) fn returned(&mut self, results: Vec<Value>, may_grow: bool) {
        self.stack.extend(results);
        self.reload_fuel();
        if may_grow {
            self.reload_lengths();
        }
    }

    /// A `call_indirect` (with `tail`, a `return_call_indirect`) of type `type_index` through
    /// `table`.
    fn call_indirect(&mut self, type_index: u32, table: u32, tail: bool) {
        self.spill_fuel();
        let index = self.pop();
        let index = self.table_index(index);
        let slot = self.table_slot(table, index, code::UNDEFINED_ELEMENT);
        let funcref = self.funcref_element(table, index, slot);
        self.b.ins().trapz(funcref, code::NULL_CALL);
        let actual = self
            .b
            .ins()
            .load(I32, trusted(), funcref, VmOffsets::FUNCREF_TYPE_ID as i32);
        // Read where it is compared, not hoisted: a loop of indirect calls keeps its own values
        // in the registers that survive the calls, and an L1 load costs less than a spill.
        let expected = self.b.ins().load(
            I32,
            MemFlagsData::trusted().with_readonly(),
            self.vmctx,
            self.env.offsets.type_id(type_index) as i32,
        );
        if self.env.info.sub(type_index).is_final {
            let mismatch = self.b.ins().icmp(IntCC::NotEqual, actual, expected);
            self.b.ins().trapnz(mismatch, code::BAD_SIGNATURE);
        } else {
            let fits = self.same_or_below(actual, expected, type_index, None);
            self.b.ins().trapz(fits, code::BAD_SIGNATURE);
        }
        self.call_funcref(funcref, type_index, tail);
    }

    /// Calls the function `funcref` (not null, of type `type_index`) with the arguments on the
    /// stack; with `tail`, as a tail call.
    fn call_funcref(&mut self, funcref: Value, type_index: u32, tail: bool) {
        let code_ptr = self
            .b
            .ins()
            .load(I64, trusted(), funcref, VmOffsets::FUNCREF_CODE as i32);
        let callee_vmctx =
            self.b
                .ins()
                .load(I64, trusted(), funcref, VmOffsets::FUNCREF_VMCTX as i32);
        let sig = self.signature(type_index);
        let args = self.take(self.env.info.sig(type_index).params.len());
        self.call_code(sig, code_ptr, callee_vmctx, args, tail);
    }

    /// The signature of function type `type_index`, declared once per function.
    fn signature(&mut self, type_index: u32) -> ir::SigRef {
        let info = self.env.info;
        *self.declared.types.entry(type_index).or_insert_with(|| {
            self.b
                .import_signature(wasm_signature(info.sig(type_index)))
        })
    }

    /// The signature of builtin `which`, made by `make` the first time this function calls it.
    pub(super) fn builtin_signature(
        &mut self,
        which: ephem_module::Builtin,
        make: impl FnOnce() -> ir::Signature,
    ) -> ir::SigRef {
        *self
            .declared
            .builtins
            .entry(which)
            .or_insert_with(|| self.b.import_signature(make()))
    }

    /// A `call_ref` (with `tail`, a `return_call_ref`) of type `type_index`: the reference on
    /// the stack is a function of that type (validation proves it), or null, which traps; a
    /// direct call where the reference is known.
    fn call_ref(&mut self, type_index: u32, tail: bool) {
        let funcref = self.pop();
        // A reference `ref.func` made (an SSA value is the same wherever it is used): the
        // function is known, and not null.
        if let Some(&(_, func)) = self.known_funcs.iter().find(|(v, _)| *v == funcref) {
            return self.call(func, tail);
        }
        self.spill_fuel();
        self.b.ins().trapz(funcref, code::NULL_REFERENCE);
        self.call_funcref(funcref, type_index, tail);
    }

    /// Translates `op` if it is a call; `false` if it is not.
    pub(super) fn call_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match *op {
            O::Call { function_index } => self.call(function_index, false),
            O::ReturnCall { function_index } => self.call(function_index, true),
            O::CallIndirect {
                type_index,
                table_index,
            } => self.call_indirect(type_index, table_index, false),
            O::ReturnCallIndirect {
                type_index,
                table_index,
            } => self.call_indirect(type_index, table_index, true),
            O::CallRef { type_index } => self.call_ref(type_index, false),
            O::ReturnCallRef { type_index } => self.call_ref(type_index, true),
            _ => return false,
        }
        true
    }
}
