//! Write marks, in code compiled with them (the default; `Compiler::without_write_marks`
//! leaves them out).
//!
//! Each store sets a byte per 4 KiB page of linear memory it writes, in the marks before the
//! memory's base (`ephem_module::MARK_SHIFT` says which page a store marks and why that covers
//! every byte it writes), so that the runtime resets a memory slot by visiting only the marked
//! pages, without a system call. A mark is set after its store, and once per block (and the
//! blocks it dominates) for one memory, index and window of offsets
//! ([`Translator::mark_written`]); a loop's stores whose range the loop's shape proves are
//! marked once before the loop instead ([`hoist_from_loops`]).

use std::collections::{HashMap, HashSet};

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::{CondCode, IntCC};
use cranelift_codegen::ir::types::{I8, I32, I64};
use cranelift_codegen::ir::{self, InstBuilder, Opcode, Value, ValueDef};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::loop_analysis::{Loop, LoopAnalysis};
use ephem_module::{Builtin, MARK_SHIFT, MARK_WINDOW, MemoryType, VmOffsets};

use super::memory::Access;
use super::{Translator, trusted};

impl Translator<'_, '_> {
    /// Sets the write mark of a store (of at most 16 bytes) through `a` (see
    /// `ephem_module::MARK_SHIFT` for what it covers), unless a store earlier in this block,
    /// or in a block that dominates it, set the same one: marks stay set while the instance
    /// runs, and such a store has run whenever this one does.
    pub(super) fn mark_written(&mut self, a: &Access) {
        // A shared memory is never reset for another instance (and other threads write it).
        if !self.env.info.marks_writes || self.env.info.memories[a.memory as usize].shared {
            return;
        }
        let window = a.offset - a.offset % MARK_WINDOW;
        self.this_block();
        let key = (a.memory, a.index, window);
        if self.facts.marked.contains(&key) {
            return;
        }
        self.facts.marked.push(key);
        let at = if window == 0 {
            a.wide
        } else {
            self.b.ins().iadd_imm_u(a.wide, window as i64)
        };
        let page = self.b.ins().ushr_imm_u(at, i64::from(MARK_SHIFT));
        let mark = self.b.ins().iadd(a.base, page);
        let one = self.b.ins().iconst(I8, 1);
        let marks = trusted().with_alias_region(self.regions.map(|r| r.marks));
        let before = self.env.info.memories[a.memory as usize].marks_before();
        let store = self.b.ins().store(marks, one, mark, -(before as i32));
        self.mark_sites.push(Site {
            store,
            memory: a.memory,
            index: a.index,
            window,
        });
    }
}

/// A store's write mark as [`Translator::mark_written`] made it, which [`hoist_from_loops`]
/// may set before its loop instead.
pub(super) struct Site {
    /// The store of the mark.
    pub(super) store: ir::Inst,
    pub(super) memory: u32,
    /// The wasm address operand (`i32` or `i64`).
    pub(super) index: Value,
    pub(super) window: u64,
}

/// What [`hoist_from_loops`] needs of the function besides its IR.
pub(super) struct Hoisting<'a> {
    pub(super) vmctx: Value,
    pub(super) offsets: &'a VmOffsets,
    pub(super) memories: &'a [MemoryType],
    pub(super) call_conv: CallConv,
    pub(super) marks: Option<ir::AliasRegion>,
}

/// Sets the marks of a loop's stores once before the loop, for the whole range its index
/// goes through, instead of at every store: a byte-store loop otherwise spends nearly half its
/// instructions on marks. Over-marking is safe (a reset visits a page it need not), missing a
/// mark is not, so a store's mark moves only when its loop's shape proves the range:
///
/// - the loop calls nothing (no memory grows in it, and nothing else runs);
/// - the store's address is a loop header's parameter `j`, or `j` plus a constant, and every
///   back edge steps `j` by the same loop-invariant amount;
/// - `j` is compared with a loop-invariant bound (`<` or `<=`, unsigned or signed) by the
///   branch whose other arm is the loop's only exit: a branch inside the loop that dominates
///   the store (a `for` loop), or the back edge's, comparing the stepped `j` (a loop the
///   compiler rotated, whose first iteration runs with the start);
/// - so `j` goes from its start up to the bound without wrapping, which the code checks before
///   the loop: start, bound and step below 2^31 for a 32-bit `j` (2^30 signed, and a start
///   not negative), 2^40 for a 64-bit one.
///
/// Before the loop, a range of one or two pages within the memory is marked inline; a larger
/// one goes to the `MarkLoop` builtin, which marks it within the memory (page by page, or at
/// each step when a step is longer than a page), or, when a condition checked there fails,
/// has the memory reset without trusting its marks. The in-loop marks go. Stores in blocks
/// the store dominates that shared its mark (see [`Translator::mark_written`]) are covered:
/// their address is the same value, which the comparison bounds as well.
pub(super) fn hoist_from_loops(func: &mut ir::Function, sites: &[Site], h: &Hoisting<'_>) {
    if sites.is_empty() {
        return;
    }
    let cfg = ControlFlowGraph::with_function(func);
    let domtree = DominatorTree::with_function(func, &cfg);
    let mut loops = LoopAnalysis::new();
    loops.compute(func, &cfg, &domtree);
    // Loops nested deeper than this leave the function as it is: the work below walks each
    // block's loops, which bounds it by the blocks times this.
    if func
        .layout
        .blocks()
        .any(|b| loops.loop_level(b).level() > MOST_NESTING)
    {
        return;
    }
    let exits = exits(func, &cfg, &loops);
    let mut plans: Vec<Plan> = Vec::new();
    let mut planned = HashSet::new();
    let mut moved = Vec::new();
    for site in sites {
        let Some(block) = func.layout.inst_block(site.store) else {
            continue;
        };
        let Some(lp) = loops.innermost_loop(block) else {
            continue;
        };
        let Some(&exit) = exits.get(&lp) else {
            continue;
        };
        // (A window past any memory: such a store always traps, and its arithmetic below
        // could overflow.)
        if site.window >= 1 << 40 {
            continue;
        }
        let Some(plan) = plan(func, &cfg, &domtree, &loops, (lp, exit), block, site) else {
            continue;
        };
        moved.push(site.store);
        if planned.insert(plan.key()) {
            plans.push(plan);
        }
    }
    for inst in moved {
        func.layout.remove_inst(inst);
    }
    // Where each loop's entry edge leaves from, as preheaders are split.
    let mut tails: HashMap<Loop, ir::Block> = HashMap::new();
    for plan in &plans {
        let tail = *tails.get(&plan.lp).unwrap_or(&plan.preheader);
        let next = emit(func, plan, tail, h);
        tails.insert(plan.lp, next);
    }
}

/// How to mark one store's range before its loop: see [`hoist_from_loops`].
struct Plan {
    lp: Loop,
    preheader: ir::Block,
    memory: u32,
    /// The header's parameter `j`, and the constant the store adds to it.
    index: Value,
    offset: i64,
    window: u64,
    /// `j`'s value on entry, and its bound.
    start: Value,
    bound: Value,
    /// The comparison that holds for every `j` but the first in a rotated loop: `j cc bound`,
    /// `cc` one of `<`, `<=` (unsigned or signed).
    cc: IntCC,
    /// Whether the first iteration runs before any comparison (a rotated loop).
    rotated: bool,
    /// The step: a constant or a loop-invariant value.
    step: Value,
}

impl Plan {
    /// What tells two plans apart: those of one key mark the same range.
    fn key(&self) -> (Loop, u32, Value, i64, u64) {
        (self.lp, self.memory, self.index, self.offset, self.window)
    }
}

/// `v` with aliases resolved and zero-extensions looked through.
fn source(dfg: &ir::DataFlowGraph, v: Value) -> Value {
    let v = dfg.resolve_aliases(v);
    match dfg.value_def(v) {
        ValueDef::Result(inst, 0) if dfg.insts[inst].opcode() == Opcode::Uextend => {
            source(dfg, dfg.inst_args(inst)[0])
        }
        _ => v,
    }
}

/// The block that defines `v`.
fn def_block(func: &ir::Function, v: Value) -> Option<ir::Block> {
    match func.dfg.value_def(func.dfg.resolve_aliases(v)) {
        ValueDef::Result(inst, _) => func.layout.inst_block(inst),
        ValueDef::Param(block, _) => Some(block),
        _ => None,
    }
}

/// The constant `v` is, if it is one, as a signed number of its type.
fn constant(dfg: &ir::DataFlowGraph, v: Value) -> Option<i64> {
    let v = dfg.resolve_aliases(v);
    let ValueDef::Result(inst, 0) = dfg.value_def(v) else {
        return None;
    };
    match dfg.insts[inst] {
        ir::InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            imm,
        } => Some(match dfg.value_type(v) {
            I32 => imm.bits() as i32 as i64,
            _ => imm.bits(),
        }),
        _ => None,
    }
}

/// The two operands of `v` if it is an `iadd`.
fn added(dfg: &ir::DataFlowGraph, v: Value) -> Option<(Value, Value)> {
    let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(v)) else {
        return None;
    };
    let args = dfg.inst_args(inst);
    (dfg.insts[inst].opcode() == Opcode::Iadd)
        .then(|| (dfg.resolve_aliases(args[0]), dfg.resolve_aliases(args[1])))
}

/// The condition and the two targets of `block`'s branch, if it ends in a `brif`.
fn brif(func: &ir::Function, block: ir::Block) -> Option<(Value, ir::Block, ir::Block)> {
    let dfg = &func.dfg;
    match dfg.insts[func.layout.last_inst(block)?] {
        ir::InstructionData::Brif {
            arg,
            blocks: [yes, no],
            ..
        } => Some((arg, yes.block(&dfg.value_lists), no.block(&dfg.value_lists))),
        _ => None,
    }
}

/// The value `branch` passes to `block`'s parameter `k`.
fn arg_to(func: &ir::Function, branch: ir::Inst, block: ir::Block, k: usize) -> Option<Value> {
    let dfg = &func.dfg;
    let dests = dfg.insts[branch].branch_destination(&dfg.jump_tables, &dfg.exception_tables);
    let mut found = None;
    for call in dests.iter().filter(|c| c.block(&dfg.value_lists) == block) {
        let v = call.args(&dfg.value_lists).nth(k)?.as_value()?;
        let v = dfg.resolve_aliases(v);
        if found.is_some_and(|f| f != v) {
            return None;
        }
        found = Some(v);
    }
    found
}

/// The largest start, bound and step a loop's index may have for its range to be trusted (see
/// [`hoist_from_loops`]), and the largest constant a store may add to it.
fn limit(memory64: bool, signed: bool) -> i64 {
    match (memory64, signed) {
        (true, _) => 1 << 40,
        (false, false) => 1 << 31,
        (false, true) => 1 << 30,
    }
}

/// A loop's exit edge: the block it leaves from, and where to.
type Exit = (ir::Block, ir::Block);

/// Each loop's exit edge, for the loops that have one alone and call nothing: one walk over
/// the blocks, each counted for every loop it is in.
fn exits(func: &ir::Function, cfg: &ControlFlowGraph, loops: &LoopAnalysis) -> HashMap<Loop, Exit> {
    // (No exit yet, one, or disqualified.)
    let mut found: HashMap<Loop, Option<Option<Exit>>> = HashMap::new();
    for b in func.layout.blocks() {
        let calls = func
            .layout
            .block_insts(b)
            .any(|i| func.dfg.insts[i].opcode().is_call());
        let mut lp = loops.innermost_loop(b);
        while let Some(l) = lp {
            let entry = found.entry(l).or_insert(Some(None));
            if calls {
                *entry = None;
            }
            for s in cfg.succ_iter(b).filter(|&s| !loops.is_in_loop(s, l)) {
                *entry = match *entry {
                    Some(None) => Some(Some((b, s))),
                    _ => None,
                };
            }
            lp = loops.loop_parent(l);
        }
    }
    (found.into_iter())
        .filter_map(|(l, e)| Some((l, e??)))
        .collect()
}

/// The most pages a loop's range may span for code before the loop to mark them itself
/// (more go to the `MarkLoop` builtin). Two: a short loop entered often pays for every
/// instruction before it, and marking more pages inline costs such loops more than the builtin
/// calls it saves (BENCHMARKS.md).
const INLINE_PAGES: u64 = 2;

/// The deepest nesting of loops [`hoist_from_loops`] works on.
const MOST_NESTING: usize = 8;

/// How far up the dominator tree a store looks for the comparison that bounds its index, and
/// how many edges its loop's header may have: a bound on the work per store, whatever the
/// function.
const MOST_DOMINATORS: usize = 16;

fn plan(
    func: &ir::Function,
    cfg: &ControlFlowGraph,
    domtree: &DominatorTree,
    loops: &LoopAnalysis,
    (lp, (exit_from, exit_to)): (Loop, Exit),
    block: ir::Block,
    site: &Site,
) -> Option<Plan> {
    let dfg = &func.dfg;
    let inside = |b: ir::Block| loops.is_in_loop(b, lp);
    let invariant =
        |v: Value| constant(dfg, v).is_some() || def_block(func, v).is_some_and(|b| !inside(b));
    // The address: a parameter of the header, or one plus a constant.
    let header = loops.loop_header(lp);
    let param_of_header =
        |v: Value| matches!(dfg.value_def(v), ValueDef::Param(b, _) if b == header).then_some(v);
    let address = dfg.resolve_aliases(site.index);
    let (index, offset) = match param_of_header(address) {
        Some(j) => (j, 0),
        None => {
            let (a, b) = added(dfg, address)?;
            match (param_of_header(a), param_of_header(b)) {
                (Some(j), None) => (j, constant(dfg, b)?),
                (None, Some(j)) => (j, constant(dfg, a)?),
                _ => return None,
            }
        }
    };
    let memory64 = dfg.value_type(index) == I64;
    if !(0..limit(memory64, true)).contains(&offset) {
        return None;
    }
    let ValueDef::Param(_, k) = dfg.value_def(index) else {
        return None;
    };
    // One entry edge, from outside; every back edge steps `j` by the same amount (among a
    // bounded number of edges, which bounds the work per store).
    if cfg.pred_iter(header).take(MOST_DOMINATORS + 1).count() > MOST_DOMINATORS {
        return None;
    }
    let mut entry = None;
    let mut back = None;
    for pred in cfg.pred_iter(header) {
        let passed = arg_to(func, pred.inst, header, k)?;
        if !inside(pred.block) {
            if entry.is_some() {
                return None;
            }
            entry = Some((pred.block, passed));
            continue;
        }
        let (a, b) = added(dfg, passed)?;
        let by = match (a == index, b == index) {
            (true, false) => b,
            (false, true) => a,
            _ => return None,
        };
        if back.is_some_and(|(_, s, _)| s != by) {
            return None;
        }
        back = Some((pred.block, by, passed));
    }
    let ((preheader, start), (back_from, step, stepped)) = (entry?, back?);
    if !invariant(step) || constant(dfg, step).is_some_and(|c| c < 0) {
        return None;
    }
    let plan = |cc: IntCC, bound: Value, rotated: bool| Plan {
        lp,
        preheader,
        memory: site.memory,
        index,
        offset,
        window: site.window,
        start,
        bound,
        cc,
        rotated,
        step,
    };
    // A rotated loop: its one back edge is its exit's branch, comparing the stepped `j`.
    let only_back_edge = cfg.pred_iter(header).filter(|p| inside(p.block)).count() == 1;
    if back_from == exit_from
        && only_back_edge
        && let Some((arg, yes, no)) = brif(func, exit_from)
    {
        let holds = match (yes == header, no == header) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        };
        if let Some(holds) = holds
            && let Some((cc, bound)) = compare(dfg, source(dfg, arg), holds, stepped, &invariant)
        {
            return Some(plan(cc, bound, true));
        }
    }
    // A `for` loop: a comparison of `j` that dominates the store, whose other arm exits.
    let mut at = block;
    for _ in 0..MOST_DOMINATORS {
        if at == header {
            return None;
        }
        let above = domtree.idom(at)?;
        if !inside(above) {
            return None;
        }
        if let Some((arg, yes, no)) = brif(func, above) {
            // The arm that leads to the store, entered from this branch alone.
            let only_from = |b: ir::Block| cfg.pred_iter(b).all(|p| p.block == above);
            let taken = if yes != no && only_from(yes) && domtree.block_dominates(yes, block) {
                Some((true, no))
            } else if yes != no && only_from(no) && domtree.block_dominates(no, block) {
                Some((false, yes))
            } else {
                None
            };
            // Every iteration passes the comparison before it steps `j`: otherwise a path
            // around it could step `j` past its bound and round to below its start.
            let guards_every_step = cfg
                .pred_iter(header)
                .filter(|p| inside(p.block))
                .all(|p| domtree.block_dominates(above, p.block));
            if let Some((holds, other)) = taken
                && (above, other) == (exit_from, exit_to)
                && guards_every_step
                && let Some((cc, bound)) = compare(dfg, source(dfg, arg), holds, index, &invariant)
            {
                return Some(plan(cc, bound, false));
            }
        }
        at = above;
    }
    None
}

/// The condition `cond` says of `value` where it is `holds`: `value cc bound` with `cc` a
/// `<` or `<=` and the bound invariant, if it says one.
fn compare(
    dfg: &ir::DataFlowGraph,
    cond: Value,
    holds: bool,
    value: Value,
    invariant: &impl Fn(Value) -> bool,
) -> Option<(IntCC, Value)> {
    let ValueDef::Result(inst, 0) = dfg.value_def(cond) else {
        return None;
    };
    let ir::InstructionData::IntCompare {
        opcode: Opcode::Icmp,
        cond: cc,
        args,
    } = dfg.insts[inst]
    else {
        return None;
    };
    let cc = if holds { cc } else { cc.complement() };
    let (x, y) = (dfg.resolve_aliases(args[0]), dfg.resolve_aliases(args[1]));
    let (cc, bound) = match (x == value, y == value) {
        (true, false) => (cc, y),
        (false, true) => (cc.swap_args(), x),
        _ => return None,
    };
    use IntCC::*;
    matches!(
        cc,
        UnsignedLessThan | UnsignedLessThanOrEqual | SignedLessThan | SignedLessThanOrEqual
    )
    .then_some(())?;
    invariant(bound).then_some((cc, bound))
}

/// Writes `plan`'s marking at the end of `tail`, before its branch into the loop; returns the
/// block that branch is in now.
fn emit(func: &mut ir::Function, plan: &Plan, tail: ir::Block, h: &Hoisting<'_>) -> ir::Block {
    use IntCC::*;
    let ty = func.dfg.value_type(plan.index);
    let memory64 = ty == I64;
    let signed = matches!(plan.cc, SignedLessThan | SignedLessThanOrEqual);
    let strict = i64::from(matches!(plan.cc, SignedLessThan | UnsignedLessThan));
    let term = func
        .layout
        .last_inst(tail)
        .expect("a block ends in a branch");
    let join = func.dfg.blocks.add();
    func.layout.split_block(join, term);
    let work = func.dfg.blocks.add();
    let inline = func.dfg.blocks.add();
    let call = func.dfg.blocks.add();
    func.layout.insert_block_after(work, tail);
    func.layout.insert_block_after(inline, work);
    func.layout.insert_block_after(call, inline);

    let mut c = FuncCursor::new(func).at_bottom(tail);
    // A constant may be defined in the loop: made again here.
    let outside = |c: &mut FuncCursor<'_>, v: Value| match constant(&c.func.dfg, v) {
        Some(k) => c.ins().iconst(ty, k),
        None => v,
    };
    let start = plan.start;
    let bound = outside(&mut c, plan.bound);
    let step = outside(&mut c, plan.step);
    // Whether the loop stores at all (a rotated one does), and whether `j` cannot wrap.
    let runs = match plan.rotated {
        true => c.ins().iconst(I8, 1),
        false => c.ins().icmp(plan.cc, start, bound),
    };
    let most = limit(memory64, signed);
    let mut ok = c.ins().icmp_imm_u(UnsignedLessThanOrEqual, step, most);
    // Start and bound below the limit, the step at most it: `j + step` stays below twice the
    // limit, which does not wrap.
    for v in [start, bound] {
        let below = match signed {
            true => c.ins().icmp_imm_s(SignedLessThan, v, most),
            false => c.ins().icmp_imm_u(UnsignedLessThan, v, most),
        };
        ok = c.ins().band(ok, below);
    }
    if signed {
        let from_zero = c.ins().icmp_imm_s(SignedGreaterThanOrEqual, start, 0);
        ok = c.ins().band(ok, from_zero);
    }
    // Work to do when the loop stores, or when its range cannot be trusted.
    let wrong = c.ins().bxor_imm_u(ok, 1);
    let anything = c.ins().bor(runs, wrong);
    c.ins().brif(anything, work, &[], join, &[]);

    // The addresses marked: from the start's to the last `j`'s, plus the constant and the
    // window. The last `j` is the bound (less one, for `<`), or the start if that is larger
    // (a rotated loop's first iteration). Only read when `ok`: nothing here wraps then.
    c.goto_bottom(work);
    let wide = |c: &mut FuncCursor<'_>, v: Value| match (memory64, signed) {
        (true, _) => v,
        (false, false) => c.ins().uextend(I64, v),
        (false, true) => c.ins().sextend(I64, v),
    };
    let start_wide = wide(&mut c, start);
    let bound_wide = wide(&mut c, bound);
    let added = plan.offset + plan.window as i64;
    let first = c.ins().iadd_imm_s(start_wide, added);
    let last = match plan.rotated {
        true => {
            let past = c.ins().iadd_imm_s(start_wide, strict);
            let larger = match signed {
                true => c.ins().smax(past, bound_wide),
                false => c.ins().umax(past, bound_wide),
            };
            c.ins().iadd_imm_s(larger, added - strict)
        }
        false => c.ins().iadd_imm_s(bound_wide, added - strict),
    };
    let def = c.ins().load(
        I64,
        trusted().with_readonly().with_can_move(),
        h.vmctx,
        h.offsets.memory_def(plan.memory) as i32,
    );
    let length = c
        .ins()
        .load(I64, trusted(), def, VmOffsets::MEMORY_LENGTH as i32);
    let first_page = c.ins().ushr_imm_u(first, i64::from(MARK_SHIFT));
    let last_page = c.ins().ushr_imm_u(last, i64::from(MARK_SHIFT));
    let pages = c.ins().isub(last_page, first_page);
    let near = c
        .ins()
        .icmp_imm_u(UnsignedLessThanOrEqual, pages, INLINE_PAGES as i64 - 1);
    let within = c.ins().icmp(UnsignedLessThan, last, length);
    let fast = c.ins().band(near, within);
    let fast = c.ins().band(fast, ok);
    c.ins().brif(fast, inline, &[], call, &[]);

    // One or two pages, within the memory: their marks, as the store's would have been set.
    c.goto_bottom(inline);
    let base = c.ins().load(
        I64,
        trusted().with_readonly().with_can_move(),
        h.vmctx,
        h.offsets.memory_base(plan.memory) as i32,
    );
    let before = -(h.memories[plan.memory as usize].marks_before() as i32);
    let flags = trusted().with_alias_region(h.marks);
    let one = c.ins().iconst(I8, 1);
    for page in [first_page, last_page] {
        let mark = c.ins().iadd(base, page);
        c.ins().store(flags, one, mark, before);
    }
    c.ins().jump(join, &[]);

    // Anything else: the builtin.
    c.goto_bottom(call);
    let sig = super::builtins::signature(Builtin::MarkLoop, h.call_conv);
    let sig = c.func.import_signature(sig);
    let readonly = trusted().with_readonly();
    let table = c
        .ins()
        .load(I64, readonly, h.vmctx, VmOffsets::BUILTINS as i32);
    let fnptr = c
        .ins()
        .load(I64, readonly, table, Builtin::MarkLoop as i32 * 8);
    let memory = c.ins().iconst(I32, i64::from(plan.memory));
    let step_wide = match memory64 {
        true => step,
        false => c.ins().uextend(I64, step),
    };
    let ok32 = c.ins().uextend(I32, ok);
    c.ins()
        .call_indirect(sig, fnptr, &[h.vmctx, memory, first, last, step_wide, ok32]);
    c.ins().jump(join, &[]);
    join
}
