//! Exception handling: `try_table`, `throw` and `throw_ref`, and the legacy `try`, `catch`,
//! `catch_all`, `rethrow` and `delegate`.
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
//!
//! The legacy form names its `catch` clauses after the body they guard, and lets a `catch`
//! body throw again what it caught (`rethrow`) or a body hand its exceptions to the handlers
//! at an outer label (`delegate`). So a legacy `try` is one scope of one clause that catches
//! everything (keeping the exception) into a dispatch block, written when the try ends: it
//! compares the exception's tag with each `catch` clause's in order (tags by identity, as the
//! unwinder does), enters the first body that matches with the tag's values (the body keeps
//! the exception for `rethrow`), and else throws it again among the handlers around the try.
//! A `delegate`'s dispatch throws it again among the handlers in effect at its label (each
//! frame's `scopes`). Both forms nest in each other.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    self, BlockArg, ExceptionTableData, ExceptionTableItem, ExceptionTag, InstBuilder,
    StackSlotData, StackSlotKind,
};
use ephem_module::{Builtin, ValType};
use wasmparser::{BlockType, Catch};

use super::control::Kind;
use super::{Translator, ir_type, trusted};
use crate::CompileError;
use crate::traps::code;

/// The body of a `try_table` or `try`, jumped to but not yet entered (see
/// [`Translator::try_body`]).
struct TryBody {
    block: ir::Block,
    params: usize,
    results: Vec<ValType>,
    height: usize,
}

/// One `catch` clause in effect: its [`clause_tag`] number and its landing block (which takes
/// the exception's record).
pub(super) struct Clause {
    tag: u32,
    landing: ir::Block,
    /// The exception tables that list it (see [`Translator::forget_exceptions`]).
    tables: Vec<ir::ExceptionTable>,
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
        for clause in self.catches.iter_mut().flatten() {
            clause.tables.push(table);
        }
        (table, cont)
    }

    /// Makes the clause into `landing` (a legacy `try`'s dispatch) one that does not keep the
    /// exception, in each of `tables`: where no `rethrow` names the try, nothing can name the
    /// exception once a `catch` body has its values (the dispatch throws it on at once where
    /// none matches), so the runtime may take its record for the next one.
    fn forget_exceptions(&mut self, tables: &[ir::ExceptionTable], landing: ir::Block) {
        let (kept, forgotten) = (clause_tag(None, true), clause_tag(None, false));
        let dfg = &mut self.b.func.dfg;
        for &t in tables {
            let data = &dfg.exception_tables[t];
            let items: Vec<ExceptionTableItem> = (data.items())
                .map(|item| match item {
                    ExceptionTableItem::Tag(tag, call)
                        if tag.as_u32() == kept && call.block(&dfg.value_lists) == landing =>
                    {
                        ExceptionTableItem::Tag(ExceptionTag::from_u32(forgotten), call)
                    }
                    other => other,
                })
                .collect();
            let rebuilt = ExceptionTableData::new(data.signature(), *data.normal_return(), items);
            dfg.exception_tables[t] = rebuilt;
        }
    }

    /// `try_table`: a block whose calls are caught by `catches` (labels relative to the
    /// block's outside). The landing blocks are written first, then the body goes on in a
    /// block of its own.
    fn try_table(&mut self, blockty: BlockType, catches: &[Catch]) -> Result<(), CompileError> {
        let body = self.try_body(blockty)?;
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
                tables: Vec::new(),
            });
        }
        self.catches.push(clauses);
        self.enter_try_body(body, Kind::TryTable);
        Ok(())
    }

    /// Ends the current block with a jump to the body of a `try_table` or `try` of type
    /// `blockty`, a new block taking its parameters, which [`Translator::enter_try_body`] enters
    /// once the try's handlers are in place (their landing blocks are written first).
    fn try_body(&mut self, blockty: BlockType) -> Result<TryBody, CompileError> {
        let (params, results) = self.block_arity(blockty)?;
        let block = self.new_block(&params);
        let height = self.stack.len() - params.len();
        let values = self.top(params.len());
        self.b.ins().jump(block, &super::control::args(&values));
        Ok(TryBody {
            block,
            params: params.len(),
            results,
            height,
        })
    }

    /// Goes on in the body a [`Translator::try_body`] made, in a frame of `kind`.
    fn enter_try_body(&mut self, body: TryBody, kind: Kind) {
        let next = self.new_block(&body.results);
        self.enter(body.block, body.height);
        let results = body.results.len();
        self.push_frame(kind, next, body.params, results, body.height);
    }

    /// The landing block of a clause: takes the exception's record, and branches to `label`
    /// with the tag's values (for a clause with a tag) and the exception (with `by_ref`).
    fn landing(&mut self, tag: Option<u32>, by_ref: bool, label: u32) -> ir::Block {
        let landing = self.b.create_block();
        let exn = self.b.append_block_param(landing, I64);
        self.b.set_cold_block(landing);
        self.b.switch_to_block(landing);
        self.landed();
        let mut values = match tag {
            Some(tag) => self.payload(tag, exn),
            None => Vec::new(),
        };
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
        self.throw_again(exn);
        self.unreachable_now();
    }

    /// The first instructions of a block that an exception enters: frames were abandoned, so
    /// the fuel is the store's (in the pinned register) and the lengths what they are now.
    fn landed(&mut self) {
        self.reload_fuel();
        if self.env.info.checks_bounds {
            self.reload_lengths();
        }
    }

    /// Runs `f` with only the outermost `scopes` scopes of handlers in effect.
    fn with_scopes(&mut self, scopes: usize, f: impl FnOnce(&mut Self)) {
        let inner = self.catches.split_off(scopes.min(self.catches.len()));
        f(self);
        self.catches.extend(inner);
    }

    /// Throws `exn` again (the `ThrowRef` builtin), with the handlers in effect.
    fn throw_again(&mut self, exn: ir::Value) {
        self.call_builtin(Builtin::ThrowRef, &[exn]);
        self.b.ins().trap(code::UNREACHABLE);
    }

    /// Legacy `try`: a block whose calls are caught by one clause that takes every exception to
    /// the try's dispatch block, written at its end, when its `catch` clauses are known
    /// ([`Translator::end_legacy_try`]), or at its `delegate`.
    fn legacy_try(&mut self, blockty: BlockType) -> Result<(), CompileError> {
        let body = self.try_body(blockty)?;
        let dispatch = self.b.create_block();
        self.b.append_block_param(dispatch, I64);
        self.b.set_cold_block(dispatch);
        // Kept, unless no `rethrow` names the try (see `forget_exceptions`).
        self.catches.push(vec![Clause {
            tag: clause_tag(None, true),
            landing: dispatch,
            tables: Vec::new(),
        }]);
        let kind = Kind::LegacyTry {
            dispatch,
            catches: Vec::new(),
            exn: None,
            tables: Vec::new(),
            rethrown: false,
        };
        self.enter_try_body(body, kind);
        Ok(())
    }

    /// Legacy `catch` (`tag`) or `catch_all` (`None`): ends the try's body or its previous
    /// `catch` body, and begins this one, which takes the tag's values and keeps the exception
    /// for `rethrow`.
    pub(super) fn legacy_catch(&mut self, tag: Option<u32>) {
        let frame = self.frames.last().expect("validated");
        let (next, height, results) = (frame.next, frame.height, frame.results);
        let in_body = matches!(frame.kind, Kind::LegacyTry { exn: None, .. });
        if in_body {
            // The try's own clause covers its body only.
            let scope = self.catches.pop().expect("the try's scope");
            let frame = self.frames.last_mut().expect("validated");
            frame.scopes -= 1;
            if let Kind::LegacyTry { tables, .. } = &mut frame.kind {
                *tables = scope.into_iter().flat_map(|c| c.tables).collect();
            }
        }
        if self.reachable {
            let values = self.top(results);
            self.b.ins().jump(next, &super::control::args(&values));
        }
        let params = tag.map_or(Vec::new(), |t| self.env.info.tag_type(t).params.clone());
        let body = self.new_block(&params);
        let exn = self.b.append_block_param(body, I64);
        let frame = self.frames.last_mut().expect("validated");
        let Kind::LegacyTry {
            catches, exn: kept, ..
        } = &mut frame.kind
        else {
            unreachable!("validated: catch outside try")
        };
        catches.push((tag, body));
        *kept = Some(exn);
        self.b.switch_to_block(body);
        self.stack.truncate(height);
        let values = self.b.block_params(body)[..params.len()].to_vec();
        self.stack.extend(values);
        self.reachable = true;
    }

    /// The end of a legacy `try` (its frame, of kind `LegacyTry`, already popped; its last
    /// body ended): writes its dispatch block, which compares the exception's tag with each
    /// `catch` clause's in order and enters the first body that matches, or throws the
    /// exception on to the handlers outside the try.
    pub(super) fn end_legacy_try(&mut self, kind: Kind) {
        let Kind::LegacyTry {
            dispatch,
            catches,
            exn,
            mut tables,
            rethrown,
        } = kind
        else {
            unreachable!("a legacy try's frame")
        };
        if exn.is_none() {
            // No catch body: its clause is still in effect.
            let scope = self.catches.pop().expect("the try's scope");
            tables = scope.into_iter().flat_map(|c| c.tables).collect();
        }
        if !rethrown {
            self.forget_exceptions(&tables, dispatch);
        }
        self.b.switch_to_block(dispatch);
        self.landed();
        let exn = self.b.block_params(dispatch)[0];
        let tag = self
            .b
            .ins()
            .load(I64, trusted(), exn, ephem_module::VmOffsets::EXN_TAG as i32);
        for (catch, body) in catches {
            let Some(t) = catch else {
                self.b.ins().jump(body, &[BlockArg::Value(exn)]);
                return;
            };
            let want = self.load_ptr(self.vmctx, self.env.offsets.tag(t));
            let matched = self.b.create_block();
            let other = self.b.create_block();
            let hit = self.b.ins().icmp(IntCC::Equal, tag, want);
            self.b.ins().brif(hit, matched, &[], other, &[]);
            self.b.switch_to_block(matched);
            let mut values = self.payload(t, exn);
            values.push(exn);
            self.b.ins().jump(body, &super::control::args(&values));
            self.b.switch_to_block(other);
        }
        self.throw_again(exn);
    }

    /// Legacy `delegate`: ends the try, whose exceptions go on to the handlers in effect at
    /// label `depth` (counted outside the try).
    pub(super) fn delegate(&mut self, depth: u32) {
        let frame = self.frames.pop().expect("validated");
        let Kind::LegacyTry { dispatch, .. } = frame.kind else {
            unreachable!("validated: delegate outside try")
        };
        // The dispatch throws it on at once: nothing keeps it.
        let scope = self.catches.pop().expect("the try's scope");
        let tables: Vec<_> = scope.into_iter().flat_map(|c| c.tables).collect();
        self.forget_exceptions(&tables, dispatch);
        if self.reachable {
            let values = self.top(frame.results);
            self.b
                .ins()
                .jump(frame.next, &super::control::args(&values));
        }
        let scopes = (self.frames.len().checked_sub(1 + depth as usize))
            .map_or(0, |i| self.frames[i].scopes);
        self.b.switch_to_block(dispatch);
        self.landed();
        let exn = self.b.block_params(dispatch)[0];
        self.with_scopes(scopes, |t| t.throw_again(exn));
        self.enter(frame.next, frame.height);
        self.reachable = true;
    }

    /// Legacy `rethrow`: throws again the exception the `catch` body at label `depth` caught.
    fn rethrow(&mut self, depth: u32) {
        let at = self.frames.len() - 1 - depth as usize;
        let Kind::LegacyTry {
            exn: Some(exn),
            rethrown,
            ..
        } = &mut self.frames[at].kind
        else {
            unreachable!("validated: rethrow outside catch")
        };
        *rethrown = true;
        let exn = *exn;
        self.throw_again(exn);
        self.unreachable_now();
    }

    /// The values of tag `tag` that the exception at `exn` carries.
    fn payload(&mut self, tag: u32, exn: ir::Value) -> Vec<ir::Value> {
        let ty = self.env.info.tag_type(tag).clone();
        (ty.params.iter().enumerate())
            .map(|(i, &t)| {
                let at = ephem_module::VmOffsets::EXN_VALUES + 16 * i as u32;
                self.b.ins().load(ir_type(t), trusted(), exn, at as i32)
            })
            .collect()
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
            O::Try { blockty } => self.legacy_try(*blockty)?,
            O::Catch { tag_index } => self.legacy_catch(Some(*tag_index)),
            O::CatchAll => self.legacy_catch(None),
            O::Delegate { relative_depth } => self.delegate(*relative_depth),
            O::Rethrow { relative_depth } => self.rethrow(*relative_depth),
            _ => return Ok(false),
        }
        Ok(true)
    }
}
