//! Bounds checks, in code compiled with them (the default; `Compiler::without_bounds_checks`
//! leaves them out).
//!
//! Each access is compared with its memory's current length, so that a memory only such code
//! reaches can grow into, and be reset over, pages that stay open: growing and tearing down
//! then need no system call and no TLB flush. The length lives in a variable per memory,
//! loaded at entry and after every call that may grow a memory (only calls do; which ones may
//! is `crate::growth`'s), so that a loop calling nothing that grows keeps it in a register;
//! loads of it that nothing reads are removed ([`drop_unread_lengths`]). Linear memory and the
//! write marks are separate alias regions ([`Regions`]), since checked accesses stay within
//! the memory.
//!
//! A check is a conditional trap (`trapnz`), the cheapest form in compute: a branch to a block
//! that raises the trap, or a conditional move of the address to one that faults, costs more
//! (BENCHMARKS.md). Where the target's `Arch` can, each check also carries its number as its
//! source location (see [`Raised`](crate::arch::Raised), which says why that is all the IR
//! changes), and the compiler later sends the check's branch to code that raises the trap
//! through the `Raise` builtin without a signal; otherwise the trap instruction traps by
//! signal.
//!
//! Within a block, checks are shared: see [`Translator::check_bounds`]; a check also holds in
//! the blocks its block dominates (`BlockFacts`), where it is no longer widened.

use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{self, InstBuilder, TrapCode, Value};
use ephem_module::VmOffsets;

use super::{Translator, trusted};

/// A bounds check made earlier in the current block or one that dominates it (see
/// [`super::BlockFacts`]).
#[derive(Clone)]
pub(super) struct Check {
    memory: u32,
    index: Value,
    end: u64,
    /// The `iconst` of `end - 1`, from which the check's limit is worked out.
    constant: ir::Inst,
    /// Whether nothing observable happened since the check, in its own block: it may still be
    /// widened.
    widenable: bool,
}

impl Check {
    /// This check as another block sees it: true there too, but no longer to be widened.
    pub(super) fn settled(&self) -> Check {
        Check {
            widenable: false,
            ..self.clone()
        }
    }
}

/// Whether moving a trap from after `inst` to before it would be observable: `inst` writes (a
/// store or a call) or can trap otherwise than out of bounds.
fn disturbs(dfg: &ir::DataFlowGraph, inst: ir::Inst) -> bool {
    let data = &dfg.insts[inst];
    let op = data.opcode();
    if op.is_call() || op.can_store() || op.other_side_effects() {
        return true;
    }
    let out_of_bounds = Some(TrapCode::HEAP_OUT_OF_BOUNDS);
    if op.can_load() {
        let code = data.memflags_trap_code(dfg);
        return code.is_some() && code != out_of_bounds;
    }
    op.can_trap() && data.trap_code() != out_of_bounds
}

/// Alias regions of code that checks bounds: its accesses stay within the memory's length, so
/// linear memory and the write marks before it are disjoint, and a store to one is no fence to
/// alias analysis for loads from the other.
#[derive(Clone, Copy)]
pub(super) struct Regions {
    pub(super) heap: ir::AliasRegion,
    pub(super) marks: ir::AliasRegion,
}

impl Translator<'_, '_> {
    /// Makes the alias regions and the length variables, and loads the lengths (at entry).
    pub(super) fn start_bounds_checks(&mut self) {
        let mut region = |user_id: u32, name: &'static str| {
            self.b.func.dfg.alias_regions.insert(ir::AliasRegionData {
                user_id,
                description: name.into(),
            })
        };
        self.regions = Some(Regions {
            heap: region(1, "linear memory"),
            marks: region(2, "write marks"),
        });
        self.lengths = (0..self.env.info.memories.len())
            .map(|_| self.b.declare_var(I64))
            .collect();
        self.reload_lengths();
    }

    /// Loads each memory's length into its variable (at entry, and after calls that may grow
    /// a memory: see `crate::growth`). A shared memory has none: its checks read its length
    /// anew ([`Translator::current_length`]).
    pub(super) fn reload_lengths(&mut self) {
        for memory in 0..self.lengths.len() {
            let shared = self.env.info.memories[memory].shared;
            if shared || !self.env.info.checks_memory(memory as u32) {
                continue;
            }
            let length = self.current_length(memory as u32);
            self.length_loads.push(length);
            self.b.def_var(self.lengths[memory], length);
        }
    }

    /// `memory`'s length as it is now. Another thread may grow a shared memory at any time:
    /// its length is read as an atomic, which no earlier load can stand in for.
    pub(super) fn current_length(&mut self, memory: u32) -> Value {
        let def = self.load_ptr(self.vmctx, self.env.offsets.memory_def(memory));
        let offset = VmOffsets::MEMORY_LENGTH;
        match self.env.info.memories[memory as usize].shared {
            true => {
                let at = self.b.ins().iadd_imm_u(def, i64::from(offset));
                self.b.ins().atomic_load(I64, trusted(), at)
            }
            false => self.b.ins().load(I64, trusted(), def, offset as i32),
        }
    }

    /// Traps unless `index` plus `end` is within `memory`'s current length, unless an earlier
    /// check of this block proves it. A memory's length only grows, so a check that passed
    /// holds for the rest of the block; and a check with nothing observable since (only loads,
    /// arithmetic and other bounds checks: see [`disturbs`]) is widened to cover this access
    /// too, since trapping there instead of here changes nothing but the trap's position. So a
    /// run of loads from one pointer at several offsets costs one check.
    pub(super) fn check_bounds(&mut self, memory: u32, index: Value, wide: Value, end: u64) {
        let block = self.this_block();
        let facts = &mut self.facts;
        let layout = &self.b.func.layout;
        let mut next = match facts.seen {
            Some(seen) => layout.next_inst(seen),
            None => layout.first_inst(block),
        };
        while let Some(inst) = next {
            if disturbs(&self.b.func.dfg, inst) {
                facts.checks.iter_mut().for_each(|c| c.widenable = false);
            }
            facts.seen = Some(inst);
            next = layout.next_inst(inst);
        }
        let earlier = facts
            .checks
            .iter()
            .position(|c| c.memory == memory && c.index == index);
        if let Some(i) = earlier {
            let check = &mut self.facts.checks[i];
            if check.end >= end {
                return;
            }
            if check.widenable {
                check.end = end;
                match &mut self.b.func.dfg.insts[check.constant] {
                    ir::InstructionData::UnaryImm { imm, .. } => *imm = (end as i64 - 1).into(),
                    other => unreachable!("a check's end is an iconst, not {other:?}"),
                }
                return;
            }
            self.facts.checks.swap_remove(i);
        }
        // The access ends past the length when `index + end > length`, that is when `index >=
        // length - (end - 1)`, a limit a loop without calls works out once. A 32-bit index
        // (below 2^32) compares as signed, since the limit is below zero when the access is
        // longer than the memory (the end is at most 2^40, so nothing wraps). A 64-bit index may
        // be anything, so it compares as unsigned with `max(length, end - 1) - (end - 1)`, zero
        // when the access is longer than the memory.
        let length = match self.env.info.memories[memory as usize].shared {
            true => self.current_length(memory),
            false => self.b.use_var(self.lengths[memory as usize]),
        };
        let constant = self.b.ins().iconst(I64, end as i64 - 1);
        let (length, at_least) = match self.env.info.memories[memory as usize].memory64 {
            true => {
                let length = self.b.ins().umax(length, constant);
                (length, IntCC::UnsignedGreaterThanOrEqual)
            }
            false => (length, IntCC::SignedGreaterThanOrEqual),
        };
        let limit = self.b.ins().isub(length, constant);
        let constant = self.b.func.dfg.value_def(constant).unwrap_inst();
        let past = self.b.ins().icmp(at_least, wide, limit);
        if let Some(n) = &mut self.raised_checks {
            self.b.set_srcloc(ir::SourceLoc::new(*n));
            *n += 1;
        }
        self.b.ins().trapnz(past, TrapCode::HEAP_OUT_OF_BOUNDS);
        self.b.set_srcloc(ir::SourceLoc::default());
        self.facts.checks.push(Check {
            memory,
            index,
            end,
            constant,
            widenable: true,
        });
    }
}

/// Removes the loads of lengths in `loads` that nothing reads (a function without memory
/// accesses, a reload after a call that no check follows): Cranelift keeps a load that is not
/// read-only, read or not. Run on the finished function, whose values are all in place.
pub(super) fn drop_unread_lengths(func: &mut ir::Function, loads: &[Value]) {
    if loads.is_empty() {
        return;
    }
    // One flag per value of the function, set for the loads, cleared when something reads one.
    let mut unread = vec![false; func.dfg.num_values()];
    for &v in loads {
        unread[v.index()] = true;
    }
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                unread[func.dfg.resolve_aliases(v).index()] = false;
            }
        }
    }
    for &length in loads {
        if unread[length.index()] {
            let inst = func.dfg.value_def(length).unwrap_inst();
            func.layout.remove_inst(inst);
        }
    }
}
