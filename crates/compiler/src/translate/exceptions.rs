//! Exception handling: `try_table`, `throw` and `throw_ref`.
//!
//! Inside a `try_table`, every call that can throw (a wasm or host function, the `Throw` and
//! `ThrowRef` builtins) is a Cranelift `try_call` whose exception table lists the `catch`
//! clauses of every enclosing `try_table`, innermost first, after the function's vmctx as the
//! table's context. Cranelift records each such call's return address, frame size and
//! handlers (`lib.rs` keeps them as `ephem_module::CallSite`s); it does not interpret the
//! tags. The runtime's unwinder walks the frame pointers from the throw, finds the first call
//! site with a clause that matches (a tag matches by identity, through the vmctx the call
//! site saved: see `ephem_module::VmTag`), and enters the clause's landing block with the
//! stack pointer the call had and the exception's record in the first payload register.
//!
//! A landing block takes what the clause delivers to its label: the tag's values, read from
//! the record (`VmOffsets::EXN_VALUES`), and with `_ref` the exception itself as an `exnref`
//! (the record's address). It runs after frames were abandoned, so it reads the fuel from
//! the pinned register (where the unwinder puts the store's) and the memories' lengths
//! again. The clause's tag is written into Cranelift's table as an [`ExceptionTag`] number
//! (see [`clause_tag`]), which the linker decodes back into an `ephem_module::Catch`.

use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    self, BlockArg, ExceptionTableData, ExceptionTableItem, ExceptionTag, InstBuilder,
    StackSlotData, StackSlotKind,
};
use ephem_module::Builtin;
use wasmparser::{BlockType, Catch};

use super::control::Kind;
use super::{Translator, ir_type, trusted};
use crate::CompileError;
use crate::traps::code;

/// One `catch` clause in effect: its [`clause_tag`] number and its landing block (which takes
/// the exception's record).
pub(super) struct Clause {
    tag: u32,
    landing: ir::Block,
}

/// The number a clause is known by in Cranelift's exception table: `2 × (tag + 1)` for a
/// clause that catches `tag`, 0 for one that catches everything, plus 1 where the handler
/// keeps the exception as an `exnref`.
pub fn clause_tag(tag: Option<u32>, by_ref: bool) -> u32 {
    2 * tag.map_or(0, |t| t + 1) + by_ref as u32
}

/// The clause a [`clause_tag`] number stands for: its tag (`None`: every exception) and
/// whether it keeps the exception.
pub fn decode_clause_tag(n: u32) -> (Option<u32>, bool) {
    ((n / 2).checked_sub(1), n % 2 == 1)
}

impl Translator<'_, '_> {
    /// The exception table of a `try_call` with signature `sig` inside the current
    /// `try_table`s, and the block the call returns to (which takes its results).
    pub(super) fn exception_table(&mut self, sig: ir::SigRef) -> (ir::ExceptionTable, ir::Block) {
        let returns: Vec<ir::Type> = (self.b.func.dfg.signatures[sig].returns.iter())
            .map(|p| p.value_type)
            .collect();
        let cont = self.b.create_block();
        for &t in &returns {
            self.b.append_block_param(cont, t);
        }
        let rets: Vec<BlockArg> = (0..returns.len() as u32)
            .map(BlockArg::TryCallRet)
            .collect();
        let normal = self.b.func.dfg.block_call(cont, &rets);
        let mut items = vec![ExceptionTableItem::Context(self.vmctx)];
        for scope in self.catches.iter().rev() {
            for clause in scope {
                let call = (self.b.func.dfg).block_call(clause.landing, &[BlockArg::TryCallExn(0)]);
                items.push(ExceptionTableItem::Tag(
                    ExceptionTag::from_u32(clause.tag),
                    call,
                ));
            }
        }
        let data = ExceptionTableData::new(sig, normal, items);
        let table = self.b.func.dfg.exception_tables.push(data);
        (table, cont)
    }

    /// `try_table`: a block whose calls are caught by `catches` (labels relative to the
    /// block's outside). The landing blocks are written first, then the body goes on in a
    /// block of its own.
    fn try_table(&mut self, blockty: BlockType, catches: &[Catch]) -> Result<(), CompileError> {
        let (params, results) = self.block_arity(blockty)?;
        let body = self.b.create_block();
        let height = self.stack.len() - params.len();
        let values = self.top(params.len());
        self.b.ins().jump(body, &super::control::args(&values));
        for &t in &params {
            self.b.append_block_param(body, ir_type(t));
        }
        let mut clauses = Vec::with_capacity(catches.len());
        for catch in catches {
            let (tag, by_ref, label) = match *catch {
                Catch::One { tag, label } => (Some(tag), false, label),
                Catch::OneRef { tag, label } => (Some(tag), true, label),
                Catch::All { label } => (None, false, label),
                Catch::AllRef { label } => (None, true, label),
            };
            let landing = self.landing(tag, by_ref, label);
            clauses.push(Clause {
                tag: clause_tag(tag, by_ref),
                landing,
            });
        }
        self.catches.push(clauses);
        let next = self.new_block(&results);
        self.enter(body, height);
        self.push_frame(Kind::TryTable, next, params.len(), results.len(), height);
        Ok(())
    }

    /// The landing block of a clause: takes the exception's record, and branches to `label`
    /// with the tag's values (for a clause with a tag) and the exception (with `by_ref`).
    fn landing(&mut self, tag: Option<u32>, by_ref: bool, label: u32) -> ir::Block {
        let landing = self.b.create_block();
        let exn = self.b.append_block_param(landing, I64);
        self.b.set_cold_block(landing);
        self.b.switch_to_block(landing);
        // Frames were abandoned: the fuel is the store's, the lengths what they are now.
        self.reload_fuel();
        if self.env.info.checks_bounds {
            self.reload_lengths();
        }
        let mut values = Vec::new();
        if let Some(tag) = tag {
            let ty = self.env.info.tag_type(tag).clone();
            for (i, &t) in ty.params.iter().enumerate() {
                let at = ephem_module::VmOffsets::EXN_VALUES + 16 * i as u32;
                values.push(self.b.ins().load(ir_type(t), trusted(), exn, at as i32));
            }
        }
        if by_ref {
            values.push(exn);
        }
        let (target, _) = self.label_target(label);
        self.b.ins().jump(target, &super::control::args(&values));
        landing
    }

    /// `throw`: the tag's values go to a stack slot, and the `Throw` builtin makes the
    /// exception and unwinds (it does not return).
    fn throw(&mut self, tag: u32) {
        let n = self.env.info.tag_type(tag).params.len();
        let values = self.take(n);
        let size = (16 * n as u32).max(16);
        let slot = (self.b).create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            size,
            4,
        ));
        for (i, v) in values.into_iter().enumerate() {
            self.b.ins().stack_store(I64, v, slot, 16 * i as i32);
        }
        let at = self.b.ins().stack_addr(I64, slot, 0);
        let tag = self.b.ins().iconst(I32, tag as i64);
        self.call_builtin(Builtin::Throw, &[tag, at]);
        self.b.ins().trap(code::UNREACHABLE);
        self.unreachable_now();
    }

    /// `throw_ref`: the `ThrowRef` builtin throws the exception again (or traps on null).
    fn throw_ref(&mut self) {
        let exn = self.pop();
        self.call_builtin(Builtin::ThrowRef, &[exn]);
        self.b.ins().trap(code::UNREACHABLE);
        self.unreachable_now();
    }

    /// Translates `op` if it is an exception-handling operator; `false` if it is not.
    pub(super) fn exception_op(
        &mut self,
        op: &wasmparser::Operator<'_>,
    ) -> Result<bool, CompileError> {
        use wasmparser::Operator as O;
        match op {
            O::TryTable { try_table } => self.try_table(try_table.ty, &try_table.catches)?,
            O::Throw { tag_index } => self.throw(*tag_index),
            O::ThrowRef => self.throw_ref(),
            _ => return Ok(false),
        }
        Ok(true)
    }
}
