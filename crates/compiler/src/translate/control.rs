//! Structured control flow: frames, branches, and code after an unconditional branch.
//!
//! Each `block`, `loop` and `if` pushes a [`Frame`] whose branch target takes the branch's
//! values as block parameters: the frame's end for `block` and `if`, its header for `loop`.
//! Values live before an `if` dominate both arms, so the arms need no parameters; an `if`
//! without `else` sends its parameters through as its results. After `br`, `br_table`,
//! `return`, `unreachable` or a tail call the rest of the frame is unreachable: it is not
//! translated, only its nesting is followed ([`Translator::dead_op`]), so that the frame's
//! `else` or `end` is found. A loop header is where metered code checks its fuel.

use cranelift_codegen::ir::{self, BlockArg, InstBuilder, Value};
use ephem_module::{Builtin, TrapKind, ValType};
use wasmparser::{BlockType, Operator};

use super::{Translator, ir_type};
use crate::CompileError;
use crate::traps::code;

/// What opened a frame.
#[derive(Debug)]
pub(super) enum Kind {
    Block,
    /// A `try_table`: a block whose calls its clauses catch (see `exceptions.rs`).
    TryTable,
    /// A legacy `try` (see `exceptions.rs`): its dispatch block, which takes the exception, its
    /// `catch` bodies so far (tag, or `None` for `catch_all`, and the body's first block), and
    /// in a `catch` body the exception it caught.
    LegacyTry {
        dispatch: ir::Block,
        catches: Vec<(Option<u32>, ir::Block)>,
        exn: Option<Value>,
        /// The exception tables that list its clause, once its body has ended.
        tables: Vec<ir::ExceptionTable>,
        /// Whether a `rethrow` names it (its exceptions must stay nameable).
        rethrown: bool,
    },
    Loop(ir::Block),
    If {
        else_block: ir::Block,
        params: Vec<Value>,
        has_else: bool,
    },
}

/// A `block`, `loop` or `if` being translated, or the function body.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) kind: Kind,
    /// The block after the frame's end, which takes its results.
    pub(super) next: ir::Block,
    params: usize,
    pub(super) results: usize,
    /// Operand stack height below the frame's parameters.
    pub(super) height: usize,
    /// How many scopes of handlers are in effect inside the frame (see `exceptions.rs`): the
    /// handlers an exception delegated to its label meets.
    pub(super) scopes: usize,
}

impl Frame {
    /// The function body's frame: its end is the function's return block `ret`.
    pub(super) fn function(ret: ir::Block, results: usize) -> Frame {
        Frame {
            kind: Kind::Block,
            next: ret,
            params: 0,
            results,
            height: 0,
            scopes: 0,
        }
    }

    /// Where a branch to this frame goes, and how many values it takes.
    pub(super) fn target(&self) -> (ir::Block, usize) {
        match self.kind {
            Kind::Loop(header) => (header, self.params),
            _ => (self.next, self.results),
        }
    }
}

pub(super) fn args(values: &[Value]) -> Vec<BlockArg> {
    values.iter().map(|&v| BlockArg::Value(v)).collect()
}

impl Translator<'_, '_> {
    pub(super) fn block_arity(
        &self,
        bt: BlockType,
    ) -> Result<(Vec<ValType>, Vec<ValType>), CompileError> {
        Ok(match bt {
            BlockType::Empty => (vec![], vec![]),
            BlockType::Type(t) => (
                vec![],
                vec![crate::parse::val_type(t, &self.env.info.types)?],
            ),
            BlockType::FuncType(i) => {
                let ty = self.env.info.sig(i);
                (ty.params.clone(), ty.results.clone())
            }
        })
    }

    /// Opens a frame of `kind` whose end is `next`.
    pub(super) fn push_frame(
        &mut self,
        kind: Kind,
        next: ir::Block,
        params: usize,
        results: usize,
        height: usize,
    ) {
        let scopes = self.catches.len();
        self.frames.push(Frame {
            kind,
            next,
            params,
            results,
            height,
            scopes,
        });
    }

    /// Where a branch to label `depth` goes, and how many values it takes.
    pub(super) fn label_target(&self, depth: u32) -> (ir::Block, usize) {
        self.frames[self.frames.len() - 1 - depth as usize].target()
    }

    pub(super) fn new_block(&mut self, types: &[ValType]) -> ir::Block {
        let block = self.b.create_block();
        for &t in types {
            self.b.append_block_param(block, ir_type(t));
        }
        block
    }

    /// Enters `block` (which the caller already branched to) with its parameters as the stack top.
    pub(super) fn enter(&mut self, block: ir::Block, height: usize) {
        self.b.switch_to_block(block);
        self.stack.truncate(height);
        let params = self.b.block_params(block).to_vec();
        self.stack.extend(params);
    }

    /// Operators in unreachable code: only nesting matters, until the current frame ends.
    pub(super) fn dead_op(&mut self, op: Operator<'_>) -> Result<(), CompileError> {
        match op {
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::TryTable { .. }
            | Operator::Try { .. } => self.dead_depth += 1,
            Operator::Catch { tag_index } if self.dead_depth == 0 => {
                self.legacy_catch(Some(tag_index))
            }
            Operator::CatchAll if self.dead_depth == 0 => self.legacy_catch(None),
            Operator::Delegate { relative_depth } if self.dead_depth == 0 => {
                self.delegate(relative_depth)
            }
            Operator::Delegate { .. } => self.dead_depth -= 1,
            Operator::Else if self.dead_depth == 0 => self.else_()?,
            Operator::End if self.dead_depth == 0 => self.end(),
            Operator::End => self.dead_depth -= 1,
            _ => {}
        }
        Ok(())
    }

    fn else_(&mut self) -> Result<(), CompileError> {
        let frame = self.frames.last_mut().expect("validated");
        let Kind::If {
            else_block,
            params,
            has_else,
        } = &mut frame.kind
        else {
            unreachable!("validated: else without if")
        };
        *has_else = true;
        let (else_block, params, next, height, results) = (
            *else_block,
            params.clone(),
            frame.next,
            frame.height,
            frame.results,
        );
        if self.reachable {
            let values = self.top(results);
            self.b.ins().jump(next, &args(&values));
        }
        self.b.switch_to_block(else_block);
        self.stack.truncate(height);
        self.stack.extend(params);
        self.reachable = true;
        Ok(())
    }

    fn end(&mut self) {
        let frame = self.frames.pop().expect("validated");
        if let Kind::TryTable = frame.kind {
            self.catches.pop();
        }
        if self.reachable {
            let values = self.top(frame.results);
            self.b.ins().jump(frame.next, &args(&values));
        }
        let header = match frame.kind {
            Kind::Loop(header) => Some(header),
            _ => None,
        };
        match frame.kind {
            kind @ Kind::LegacyTry { .. } => self.end_legacy_try(kind),
            Kind::If {
                else_block,
                params,
                has_else: false,
            } => {
                // No else arm: the parameters fall through as the results.
                self.b.switch_to_block(else_block);
                self.b.ins().jump(frame.next, &args(&params));
            }
            _ => {}
        }
        // Every branch to the frame's end, and to a loop's header, is inside the frame: both
        // have all their predecessors now (see the module documentation of `translate.rs`).
        if let Some(header) = header {
            self.b.seal_block(header);
        }
        self.b.seal_block(frame.next);
        self.enter(frame.next, frame.height);
        self.reachable = true;
    }

    fn branch(&mut self, depth: u32) {
        let frame = &self.frames[self.frames.len() - 1 - depth as usize];
        let (target, n) = frame.target();
        let values = self.top(n);
        self.b.ins().jump(target, &args(&values));
    }

    /// Marks what follows as unreachable, after an unconditional branch, return, trap or tail
    /// call, until the current frame's `else` or `end`.
    pub(super) fn unreachable_now(&mut self) {
        self.reachable = false;
        self.dead_depth = 0;
        // What was not charged before a trap is not charged (the same on every run).
        self.fuel_pending = 0;
    }

    /// Translates `op` if it is a control operator; `false` if it is not.
    pub(super) fn control_op(&mut self, op: &Operator<'_>) -> Result<bool, CompileError> {
        use Operator as O;
        match *op {
            O::Unreachable => {
                // A call that ends the call into wasm, not a trapping instruction: a signal
                // takes the process's signal lock, which every thread trapping at once takes
                // in turn (the instruction stays, never reached, for the block's end).
                self.b.ensure_inserted_block();
                let here = self.b.current_block().expect("in a block");
                if self.b.func.layout.entry_block() != Some(here) {
                    self.b.set_cold_block(here);
                }
                let kind = self.iconst32(TrapKind::Unreachable.code());
                // `Raise` does not return: nothing to read back after it.
                self.call_builtin(Builtin::Raise, &[kind]);
                self.b.ins().trap(code::UNREACHABLE);
                self.unreachable_now();
            }
            O::Nop => {}
            O::Block { blockty } => {
                let (params, results) = self.block_arity(blockty)?;
                let next = self.new_block(&results);
                self.pass_facts(next);
                let height = self.stack.len() - params.len();
                self.push_frame(Kind::Block, next, params.len(), results.len(), height);
            }
            O::Loop { blockty } => {
                let (params, results) = self.block_arity(blockty)?;
                let header = self.new_block(&params);
                let next = self.new_block(&results);
                self.pass_facts(header);
                self.pass_facts(next);
                let height = self.stack.len() - params.len();
                let values = self.top(params.len());
                self.b.ins().jump(header, &args(&values));
                self.enter(header, height);
                self.fuel_check();
                self.push_frame(
                    Kind::Loop(header),
                    next,
                    params.len(),
                    results.len(),
                    height,
                );
            }
            O::If { blockty } => {
                let cond = self.pop();
                let (params, results) = self.block_arity(blockty)?;
                let then_block = self.b.create_block();
                let else_block = self.b.create_block();
                let next = self.new_block(&results);
                // Before the branch, so that the else arm sees them too.
                let if_params = self.top(params.len());
                self.pass_facts(then_block);
                self.pass_facts(else_block);
                self.pass_facts(next);
                self.b.ins().brif(cond, then_block, &[], else_block, &[]);
                self.b.seal_block(then_block);
                self.b.seal_block(else_block);
                self.b.switch_to_block(then_block);
                let height = self.stack.len() - params.len();
                let kind = Kind::If {
                    else_block,
                    params: if_params,
                    has_else: false,
                };
                self.push_frame(kind, next, params.len(), results.len(), height);
            }
            O::Else => self.else_()?,
            O::End => self.end(),
            O::Br { relative_depth } => {
                self.branch(relative_depth);
                self.unreachable_now();
            }
            O::BrIf { relative_depth } => {
                let cond = self.pop();
                let frame = &self.frames[self.frames.len() - 1 - relative_depth as usize];
                let (target, n) = frame.target();
                let values = self.top(n);
                let cont = self.b.create_block();
                self.pass_facts(cont);
                self.b.ins().brif(cond, target, &args(&values), cont, &[]);
                self.b.seal_block(cont);
                self.b.switch_to_block(cont);
            }
            // A reference: null branches and drops it, anything else stays and falls through.
            O::BrOnNull { relative_depth } => {
                let r = self.pop();
                let frame = &self.frames[self.frames.len() - 1 - relative_depth as usize];
                let (target, n) = frame.target();
                let values = self.top(n);
                let cont = self.b.create_block();
                self.b.ins().brif(r, cont, &[], target, &args(&values));
                self.b.seal_block(cont);
                self.b.switch_to_block(cont);
                self.push(r);
            }
            // A reference: anything but null branches with it, null is dropped.
            O::BrOnNonNull { relative_depth } => {
                let frame = &self.frames[self.frames.len() - 1 - relative_depth as usize];
                let (target, n) = frame.target();
                let values = self.top(n);
                let r = *values
                    .last()
                    .expect("validated: the reference is a branch value");
                let cont = self.b.create_block();
                self.b.ins().brif(r, target, &args(&values), cont, &[]);
                self.b.seal_block(cont);
                self.b.switch_to_block(cont);
                self.pop();
            }
            O::BrTable { ref targets } => {
                let index = self.pop();
                let default = targets.default();
                let depths: Vec<u32> = targets.targets().collect::<Result<_, _>>()?;
                let frame_target =
                    |t: &Self, depth: u32| t.frames[t.frames.len() - 1 - depth as usize].target();
                let n = frame_target(self, default).1;
                let values = args(&self.top(n));
                let mut calls = Vec::with_capacity(depths.len());
                for depth in depths {
                    let block = frame_target(self, depth).0;
                    calls.push(self.b.func.dfg.block_call(block, &values));
                }
                let block = frame_target(self, default).0;
                let default_call = self.b.func.dfg.block_call(block, &values);
                let table = self
                    .b
                    .create_jump_table(ir::JumpTableData::new(default_call, &calls));
                self.b.ins().br_table(index, table);
                self.unreachable_now();
            }
            O::Return => {
                let n = self.frames[0].results;
                let values = self.top(n);
                self.spill_fuel();
                self.b.ins().return_(&values);
                self.unreachable_now();
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
