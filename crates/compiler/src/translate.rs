//! Translation of one wasm function body to Cranelift IR.
//!
//! The classic design: an operand stack of SSA values and a stack of control frames. A frame's
//! branch target takes the branch's values as block parameters (the end of a `block`/`if`, or
//! the header of a `loop`). Values live before an `if` dominate both arms, so its arms need no
//! parameters. Code after an unconditional branch is skipped (only nesting is tracked) until
//! the end of the enclosing frame.
//!
//! Linear memory is reached as `base + zext(address) + offset` with no bounds check: the runtime
//! reserves 8 GiB of inaccessible address space behind every memory base, so any access a
//! 32-bit address and offset can form faults and becomes a trap. Everything per instance is
//! loaded from the `vmctx` (see [`VmOffsets`]).
//!
//! Every function takes its callee's vmctx and then its caller's (null from the host), so that
//! a host function knows which instance called it.
//!
//! Fuel metering, when the compiler asks for it: each operator's cost is added up at compile
//! time over a straight-line stretch and subtracted from a variable where control flow leaves
//! the stretch; the variable is written back to the store before calls and returns and read
//! after calls; at every function entry and loop header, below zero traps `OutOfFuel`. The
//! charge depends only on the path taken, so it is the same on every run. Deadlines need no
//! code here: the runtime interrupts a call past its deadline with a signal; only the
//! bulk-memory builtins, which run in the host, report one (their trap flag 3).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::{F32, F64, I8, I8X16, I16, I32, I64};
use cranelift_codegen::ir::{
    self, AbiParam, ArgumentPurpose, BlockArg, InstBuilder, MemFlagsData, Signature, TrapCode,
    Type, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use ephem_module::{
    Builtin, BuiltinType, MARK_SHIFT, MARK_WINDOW, MARKS_BEFORE, ModuleInfo, TrapKind, ValType,
    VmOffsets,
};
use wasmparser::{BlockType, FunctionBody, Operator};

use crate::CompileError;
use crate::traps::code;

mod simd;

/// Cranelift type of a wasm value type (references are pointers).
pub fn ir_type(ty: ValType) -> Type {
    match ty {
        ValType::I32 => I32,
        ValType::I64 => I64,
        ValType::F32 => F32,
        ValType::F64 => F64,
        ValType::FuncRef | ValType::ExternRef => I64,
        ValType::V128 => I8X16,
    }
}

/// The signature of a wasm function of type `ty`: the callee's `vmctx` first, then the caller's
/// (null when the host calls), then the wasm parameters. Host functions use the caller's context
/// to tell which instance called them.
///
/// Wasm functions use Cranelift's `tail` convention, which `return_call` needs on both sides;
/// the host reaches them only through entry trampolines, which have the native convention.
pub fn wasm_signature(ty: &ephem_module::FuncType) -> Signature {
    let mut sig = Signature::new(CallConv::Tail);
    sig.params
        .push(AbiParam::special(I64, ArgumentPurpose::VMContext));
    sig.params.push(AbiParam::new(I64));
    sig.params
        .extend(ty.params.iter().map(|&t| AbiParam::new(ir_type(t))));
    sig.returns
        .extend(ty.results.iter().map(|&t| AbiParam::new(ir_type(t))));
    sig
}

pub struct Env<'a> {
    pub info: &'a ModuleInfo,
    pub offsets: &'a VmOffsets,
    /// Where funcrefs live, and which tables are lazy.
    pub layout: &'a ephem_module::FuncrefLayout,
    pub call_conv: CallConv,
    pub frontend: cranelift_codegen::isa::TargetFrontendConfig,
    /// Operator costs, for metered code.
    pub fuel_costs: Option<crate::FuelCosts>,
    /// Whether failed bounds checks may raise their trap without a signal (see [`Raised`]):
    /// the compiler writes the code that does it, for x86-64 only.
    pub raise_checks: bool,
}

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A field of the vmctx (or a table it points at) that never changes while the instance lives:
/// memory bases (a memory's reservation never moves), pointers to tables, globals and the
/// epoch, type ids. `can_move` lets Cranelift hoist such loads out of loops.
fn readonly() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

#[derive(Debug)]
enum Kind {
    Block,
    Loop(ir::Block),
    If {
        else_block: ir::Block,
        params: Vec<Value>,
        has_else: bool,
    },
}

#[derive(Debug)]
struct Frame {
    kind: Kind,
    next: ir::Block,
    params: usize,
    results: usize,
    /// Operand stack height below the frame's parameters.
    height: usize,
}

impl Frame {
    fn target(&self) -> (ir::Block, usize) {
        match self.kind {
            Kind::Loop(header) => (header, self.params),
            _ => (self.next, self.results),
        }
    }
}

/// A memory access: see [`Translator::access`].
struct Access {
    /// The native address accessed.
    addr: Value,
    /// The memory's base.
    base: Value,
    memory: u32,
    /// The wasm address operand, and the same zero-extended to 64 bits.
    index: Value,
    wide: Value,
    offset: u64,
}

struct Translator<'a, 'b> {
    env: &'a Env<'a>,
    b: FunctionBuilder<'b>,
    vmctx: Value,
    stack: Vec<Value>,
    frames: Vec<Frame>,
    /// Nesting depth of frames opened in unreachable code (not translated).
    dead_depth: usize,
    reachable: bool,
    locals: Vec<Variable>,
    /// The remaining fuel, kept in a register; `None` for unmetered code. Between functions it
    /// travels in the pinned register: read at entry and after calls, set before calls and
    /// returns (see `ephem_module`'s calling convention).
    fuel: Option<Variable>,
    /// Fuel of the operators translated since the last subtraction: charged at once where
    /// control flow leaves the straight-line stretch.
    fuel_pending: u64,
    /// What the current block has done so far (see [`Translator::this_block`]).
    facts: BlockFacts,
    /// Alias regions for code that checks bounds (see [`Regions`]); `None` otherwise.
    regions: Option<Regions>,
    /// Each memory's length, for code that checks bounds: loaded at entry and after every
    /// call (only calls change a length), so that a loop without calls keeps it in a register.
    lengths: Vec<Variable>,
    /// Bounds checks marked so far for [`Raised`], numbered from 0; `None` where checks are
    /// not marked (a target the compiler has no raising code for).
    raised_checks: Option<u32>,
}

/// How a function's failed bounds checks can trap without a signal: each check's `trapnz`
/// carries the source location of its number (`0..checks`), which Cranelift also gives the
/// check's trap instruction. The compiler finds each check's branch to its trap instruction
/// by those locations and sends it to code that raises the trap
/// (`crate::traps::raise_failed_checks`). Nothing else in the function changes, so its
/// registers are allocated as before: a branch to a block that raised the trap in the IR made
/// compute 2–20 % slower (BENCHMARKS.md, nineteenth pass), and so did storing the vmctx where
/// that code could find it (twentieth pass).
pub struct Raised {
    pub checks: u32,
}

/// What a block has done so far that later instructions of it may rely on: every instruction
/// of a block runs after the earlier ones.
#[derive(Default)]
struct BlockFacts {
    block: Option<ir::Block>,
    /// The write marks set (see [`Translator::mark_written`]): memory, index operand, the
    /// offset's window.
    marked: Vec<(u32, Value, u64)>,
    /// The bounds checks made (see [`Translator::check_bounds`]): each proves that an access
    /// through its index up to its end is within the memory's length.
    checks: Vec<Check>,
    /// The last instruction already looked at for effects (see [`disturbs`]).
    seen: Option<ir::Inst>,
}

struct Check {
    memory: u32,
    index: Value,
    end: u64,
    /// The `iconst` of minus `end`, which the check adds to the length.
    constant: ir::Inst,
    /// Whether nothing observable happened since the check: it may still be widened.
    widenable: bool,
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
struct Regions {
    heap: ir::AliasRegion,
    marks: ir::AliasRegion,
}

fn args(values: &[Value]) -> Vec<BlockArg> {
    values.iter().map(|&v| BlockArg::Value(v)).collect()
}

/// Translates defined function `func` into `func_ir`; returns how its failed bounds checks can
/// raise their trap, if they are marked for it.
pub fn translate(
    env: &Env<'_>,
    func: u32,
    body: &FunctionBody<'_>,
    func_ir: &mut ir::Function,
    ctx: &mut FunctionBuilderContext,
) -> Result<Option<Raised>, CompileError> {
    let ty = env.info.func_type(func).clone();
    func_ir.signature = wasm_signature(&ty);
    let vmctx_gv = func_ir.create_global_value(ir::GlobalValueData::VMContext);
    // vmctx.stack_limit points at the running thread's limit (see the runtime's `signals`).
    let flags = func_ir
        .dfg
        .mem_flags
        .insert(trusted())
        .expect("room for flags");
    let limit_ptr = func_ir.create_global_value(ir::GlobalValueData::Load {
        base: vmctx_gv,
        offset: (VmOffsets::STACK_LIMIT as i32).into(),
        global_type: I64,
        flags,
    });
    let limit = func_ir.create_global_value(ir::GlobalValueData::Load {
        base: limit_ptr,
        offset: 0.into(),
        global_type: I64,
        flags,
    });
    func_ir.stack_limit = Some(limit);

    let mut b = FunctionBuilder::new(func_ir, ctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let vmctx = b.block_params(entry)[0];

    let mut locals = Vec::new();
    for (i, &t) in ty.params.iter().enumerate() {
        let var = b.declare_var(ir_type(t));
        let v = b.block_params(entry)[i + 2];
        b.def_var(var, v);
        locals.push(var);
    }
    let mut reader = body.get_locals_reader()?;
    for _ in 0..reader.get_count() {
        let (count, t) = reader.read()?;
        let t = crate::parse::val_type(t)?;
        for _ in 0..count {
            let var = b.declare_var(ir_type(t));
            let zero = zero(&mut b, t);
            b.def_var(var, zero);
            locals.push(var);
        }
    }

    let ret = b.create_block();
    for &t in &ty.results {
        b.append_block_param(ret, ir_type(t));
    }
    let mut t = Translator {
        env,
        b,
        vmctx,
        stack: Vec::new(),
        frames: vec![Frame {
            kind: Kind::Block,
            next: ret,
            params: 0,
            results: ty.results.len(),
            height: 0,
        }],
        dead_depth: 0,
        reachable: true,
        locals,
        fuel: None,
        fuel_pending: 0,
        facts: BlockFacts::default(),
        regions: None,
        lengths: Vec::new(),
        raised_checks: env.raise_checks.then_some(0),
    };
    if env.info.checks_bounds {
        let mut region = |user_id: u32, name: &'static str| {
            t.b.func.dfg.alias_regions.insert(ir::AliasRegionData {
                user_id,
                description: name.into(),
            })
        };
        t.regions = Some(Regions {
            heap: region(1, "linear memory"),
            marks: region(2, "write marks"),
        });
        t.lengths = (0..env.info.memories.len())
            .map(|_| t.b.declare_var(I64))
            .collect();
        t.reload_lengths();
    }
    if env.fuel_costs.is_some() {
        let var = t.b.declare_var(I64);
        t.fuel = Some(var);
        t.reload_fuel();
        t.fuel_check();
    }
    let mut ops = body.get_operators_reader()?;
    while !ops.eof() {
        let op = ops.read()?;
        t.op(op)?;
    }
    // The final `end` switched to `ret`.
    let results = t.top(t.stack.len());
    t.spill_fuel();
    t.b.ins().return_(&results);
    t.b.seal_all_blocks();
    let raised = (t.raised_checks)
        .filter(|&checks| checks > 0)
        .map(|checks| Raised { checks });
    t.b.finalize(env.frontend);
    Ok(raised)
}

fn zero(b: &mut FunctionBuilder<'_>, t: ValType) -> Value {
    match t {
        ValType::I32 => b.ins().iconst(I32, 0),
        ValType::I64 | ValType::FuncRef | ValType::ExternRef => b.ins().iconst(I64, 0),
        ValType::F32 => b.ins().f32const(Ieee32::with_bits(0)),
        ValType::F64 => b.ins().f64const(Ieee64::with_bits(0)),
        ValType::V128 => {
            let c = b.func.dfg.constants.insert(vec![0; 16].into());
            b.ins().vconst(I8X16, c)
        }
    }
}

impl Translator<'_, '_> {
    fn pop(&mut self) -> Value {
        self.stack
            .pop()
            .expect("validated: operand stack underflow")
    }
    fn pop2(&mut self) -> (Value, Value) {
        let y = self.pop();
        let x = self.pop();
        (x, y)
    }
    fn pop3(&mut self) -> (Value, Value, Value) {
        let z = self.pop();
        let (x, y) = self.pop2();
        (x, y, z)
    }
    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }
    /// The top `n` values, as they leave the operand stack for block parameters, a call or a
    /// return: vectors as `I8X16` (see the `simd` module).
    fn top(&mut self, n: usize) -> Vec<Value> {
        let values = self.stack[self.stack.len() - n..].to_vec();
        values.into_iter().map(|v| self.canonical(v)).collect()
    }

    /// The top `n` values, taken off the stack as [`Translator::top`] gives them.
    fn take(&mut self, n: usize) -> Vec<Value> {
        let values = self.top(n);
        self.stack.truncate(self.stack.len() - n);
        values
    }

    fn block_arity(&self, bt: BlockType) -> Result<(Vec<ValType>, Vec<ValType>), CompileError> {
        Ok(match bt {
            BlockType::Empty => (vec![], vec![]),
            BlockType::Type(t) => (vec![], vec![crate::parse::val_type(t)?]),
            BlockType::FuncType(i) => {
                let ty = &self.env.info.types[i as usize];
                (ty.params.clone(), ty.results.clone())
            }
        })
    }

    fn new_block(&mut self, types: &[ValType]) -> ir::Block {
        let block = self.b.create_block();
        for &t in types {
            self.b.append_block_param(block, ir_type(t));
        }
        block
    }

    /// Enters `block` (which the caller already branched to) with its parameters as the stack top.
    fn enter(&mut self, block: ir::Block, height: usize) {
        self.b.switch_to_block(block);
        self.stack.truncate(height);
        let params = self.b.block_params(block).to_vec();
        self.stack.extend(params);
    }

    /// Takes the fuel from the pinned register into the fuel variable, if the code is metered
    /// (at entry and after calls, which may charge fuel or refuel).
    fn reload_fuel(&mut self) {
        let Some(var) = self.fuel else { return };
        let value = self.b.ins().get_pinned_reg(I64);
        self.b.def_var(var, value);
    }

    /// Loads each memory's length into its variable (at entry and after calls).
    fn reload_lengths(&mut self) {
        for memory in 0..self.lengths.len() {
            let def = self.load_ptr(self.vmctx, self.env.offsets.memory_def(memory as u32));
            let length = self.b.ins().load(I64, trusted(), def, 8);
            self.b.def_var(self.lengths[memory], length);
        }
    }

    /// Subtracts the fuel of the operators since the last subtraction.
    fn flush_fuel(&mut self) {
        let Some(var) = self.fuel else { return };
        if self.fuel_pending > 0 {
            let left = self.b.use_var(var);
            let left = self.b.ins().iadd_imm_s(left, -(self.fuel_pending as i64));
            self.b.def_var(var, left);
            self.fuel_pending = 0;
        }
    }

    /// Puts the remaining fuel in the pinned register (before calls, returns and traps).
    fn spill_fuel(&mut self) {
        self.flush_fuel();
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        self.b.ins().set_pinned_reg(left);
    }

    /// Writes the remaining fuel to the store, where builtins charge it, and back.
    fn fuel_to_store(&mut self) {
        self.spill_fuel();
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        let at = self.load_ptr(self.vmctx, VmOffsets::FUEL);
        self.b.ins().store(trusted(), left, at, 0);
    }

    /// Reads the store's fuel after a builtin charged it.
    fn fuel_from_store(&mut self) {
        let Some(var) = self.fuel else { return };
        let at = self.load_ptr(self.vmctx, VmOffsets::FUEL);
        let left = self.b.ins().load(I64, trusted(), at, 0);
        self.b.def_var(var, left);
        self.b.ins().set_pinned_reg(left);
    }

    /// Puts the fuel in the pinned register, where a trap takes it from (so that what ran
    /// before a trap is paid for), and traps with `OutOfFuel` once it is below zero.
    fn fuel_check(&mut self) {
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        self.b.ins().set_pinned_reg(left);
        let out = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, left, 0);
        self.b.ins().trapnz(out, code::OUT_OF_FUEL);
    }

    /// Whether `op` leaves the straight-line stretch (or calls out), so that the fuel of what
    /// came before must be subtracted first.
    fn ends_stretch(op: &Operator<'_>) -> bool {
        use Operator as O;
        matches!(
            op,
            O::Block { .. }
                | O::Loop { .. }
                | O::If { .. }
                | O::Else
                | O::End
                | O::Br { .. }
                | O::BrIf { .. }
                | O::BrTable { .. }
                | O::Return
        )
    }

    fn load_ptr(&mut self, base: Value, offset: u32) -> Value {
        self.b.ins().load(I64, readonly(), base, offset as i32)
    }

    fn op(&mut self, op: Operator<'_>) -> Result<(), CompileError> {
        if !self.reachable {
            return self.dead_op(op);
        }
        if let Some(cost) = self.env.fuel_costs {
            self.fuel_pending += u64::from(cost(&op));
            if Self::ends_stretch(&op) {
                self.flush_fuel();
            }
        }
        self.live_op(op)
    }

    /// Operators in unreachable code: only nesting matters, until the current frame ends.
    fn dead_op(&mut self, op: Operator<'_>) -> Result<(), CompileError> {
        match op {
            Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => {
                self.dead_depth += 1
            }
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
        if self.reachable {
            let values = self.top(frame.results);
            self.b.ins().jump(frame.next, &args(&values));
        }
        if let Kind::If {
            else_block,
            params,
            has_else: false,
        } = &frame.kind
        {
            // No else arm: the parameters fall through as the results.
            self.b.switch_to_block(*else_block);
            self.b.ins().jump(frame.next, &args(params));
        }
        self.enter(frame.next, frame.height);
        self.reachable = true;
    }

    fn branch(&mut self, depth: u32) {
        let frame = &self.frames[self.frames.len() - 1 - depth as usize];
        let (target, n) = frame.target();
        let values = self.top(n);
        self.b.ins().jump(target, &args(&values));
    }

    fn unreachable_now(&mut self) {
        self.reachable = false;
        self.dead_depth = 0;
        // What was not charged before a trap is not charged (the same on every run).
        self.fuel_pending = 0;
    }

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

    fn eqz(&mut self) {
        let x = self.pop();
        let c = self.b.ins().icmp_imm_u(IntCC::Equal, x, 0);
        let v = self.bool_to_i32(c);
        self.push(v);
    }

    fn binary(&mut self, f: impl FnOnce(&mut FunctionBuilder<'_>, Value, Value) -> Value) {
        let (x, y) = self.pop2();
        let v = f(&mut self.b, x, y);
        self.push(v);
    }

    fn unary(&mut self, f: impl FnOnce(&mut FunctionBuilder<'_>, Value) -> Value) {
        let x = self.pop();
        let v = f(&mut self.b, x);
        self.push(v);
    }

    /// Effective native address of a memory access.
    fn address(&mut self, memory: u32, offset: u64, size: u32) -> Value {
        self.access(memory, offset, size).addr
    }

    /// A memory access of `size` bytes: its native address, and what
    /// [`Translator::mark_written`] needs. Code that checks bounds traps here when the access
    /// would end past the memory's current length (see [`Translator::check_bounds`]).
    fn access(&mut self, memory: u32, offset: u64, size: u32) -> Access {
        let index = self.pop();
        let base = self.load_ptr(self.vmctx, self.env.offsets.memory_base(memory));
        let wide = self.b.ins().uextend(I64, index);
        if self.env.info.checks_bounds {
            self.check_bounds(memory, index, wide, offset + u64::from(size));
        }
        let addr = self.b.ins().iadd(base, wide);
        let addr = if offset == 0 {
            addr
        } else {
            self.b.ins().iadd_imm_u(addr, offset as i64)
        };
        Access {
            addr,
            base,
            memory,
            index,
            wide,
            offset,
        }
    }

    /// Traps unless `index` plus `end` is within `memory`'s current length, unless an earlier
    /// check of this block proves it. A memory's length only grows, so a check that passed
    /// holds for the rest of the block; and a check with nothing observable since (only loads,
    /// arithmetic and other bounds checks: see [`disturbs`]) is widened to cover this access
    /// too, since trapping there instead of here changes nothing but the trap's position. So a
    /// run of loads from one pointer at several offsets costs one check.
    ///
    /// The check is a conditional trap. Of the forms measured in Sightglass (BENCHMARKS.md,
    /// sixteenth and seventeenth passes), it costs least: 1.10× in compute loading the length
    /// at every access, 1.07–1.08× with [`Regions`], and with shared checks and the length in
    /// a variable (`lengths`) 1.06×, against 1.17–1.20× for a branch to a block that raises
    /// the trap by a builtin call and 1.24–1.31× for a conditional move of the address to one
    /// that faults. On x86-64 the compiler then sends its branch to code that raises the trap
    /// by the `Raise` builtin, without a signal (see [`Raised`]; 0.9 µs a trapping invocation
    /// against 3.0 by signal, twentieth pass); elsewhere, and where that code cannot find
    /// `Raise`, its trap is a signal (on x86-64 a `hlt`, see `traps::fault_without_vm_exit`).
    /// Changing the IR for it cost compute: a branch to one block per function that faults by
    /// a load from address 0, 1.8 % (eighteenth pass); one that raises the trap by a builtin
    /// call, 2.5 % (sieve 20 %: the block boundaries change register allocation; nineteenth
    /// pass); a store of the vmctx at entry, for raising code to read, 1.5 % (sieve 13 %).
    fn check_bounds(&mut self, memory: u32, index: Value, wide: Value, end: u64) {
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
                    ir::InstructionData::UnaryImm { imm, .. } => *imm = (-(end as i64)).into(),
                    other => unreachable!("a check's end is an iconst, not {other:?}"),
                }
                return;
            }
            self.facts.checks.swap_remove(i);
        }
        // The access ends past the length when the index exceeds the length less its end,
        // which a loop without calls computes once. Signed: that difference may be below zero
        // (the index is below 2^32 and the end at most 2^32 + 16, so nothing wraps).
        let length = self.b.use_var(self.lengths[memory as usize]);
        let constant = self.b.ins().iconst(I64, -(end as i64));
        let limit = self.b.ins().iadd(length, constant);
        let constant = self.b.func.dfg.value_def(constant).unwrap_inst();
        let past = self.b.ins().icmp(IntCC::SignedGreaterThan, wide, limit);
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

    /// The block being translated, with [`Translator::facts`] made its own: cleared when
    /// translation has moved to another block since they were last used.
    fn this_block(&mut self) -> ir::Block {
        let block = self.b.current_block().expect("translating into a block");
        if self.facts.block != Some(block) {
            self.facts = BlockFacts {
                block: Some(block),
                ..BlockFacts::default()
            };
        }
        block
    }

    /// Sets the write mark of a store (of at most 16 bytes) through `a` (see
    /// `ephem_module::MARK_SHIFT` for what it covers), unless a store earlier in this block set
    /// the same one: marks stay set while the instance runs, and an earlier instruction of the
    /// block has run whenever this one does.
    fn mark_written(&mut self, a: &Access) {
        if !self.env.info.marks_writes {
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
        self.b.ins().store(marks, one, mark, -(MARKS_BEFORE as i32));
    }

    /// Flags of a linear-memory access.
    fn heap(&self) -> MemFlagsData {
        MemFlagsData::new()
            .with_trap_code(Some(TrapCode::HEAP_OUT_OF_BOUNDS))
            .with_alias_region(self.regions.map(|r| r.heap))
    }

    fn load(&mut self, m: wasmparser::MemArg, ty: Type, kind: LoadKind) {
        let size = match kind {
            LoadKind::Plain => ty.bytes(),
            LoadKind::S8 | LoadKind::U8 => 1,
            LoadKind::S16 | LoadKind::U16 => 2,
            LoadKind::S32 | LoadKind::U32 => 4,
        };
        let addr = self.address(memory_index(&m), m.offset, size);
        let flags = self.heap();
        let ins = self.b.ins();
        let v = match kind {
            LoadKind::Plain => ins.load(ty, flags, addr, 0),
            LoadKind::S8 => ins.sload8(ty, flags, addr, 0),
            LoadKind::U8 => ins.uload8(ty, flags, addr, 0),
            LoadKind::S16 => ins.sload16(ty, flags, addr, 0),
            LoadKind::U16 => ins.uload16(ty, flags, addr, 0),
            LoadKind::S32 => ins.sload32(flags, addr, 0),
            LoadKind::U32 => ins.uload32(flags, addr, 0),
        };
        self.push(v);
    }

    fn store(&mut self, m: wasmparser::MemArg, width: Option<Type>) {
        let value = self.pop();
        let size = width.unwrap_or(self.b.func.dfg.value_type(value)).bytes();
        let a = self.access(memory_index(&m), m.offset, size);
        let value = match width {
            Some(w) => self.b.ins().ireduce(w, value),
            None => value,
        };
        let flags = self.heap();
        self.b.ins().store(flags, value, a.addr, 0);
        self.mark_written(&a);
    }

    /// Calls a runtime builtin with `vmctx` and `args` (of the types its entry in
    /// `for_each_builtin` lists); returns its result.
    fn builtin(&mut self, which: Builtin, args: &[Value]) -> Option<Value> {
        let result = self.call_builtin(which, args);
        self.fuel_from_store();
        self.reload_lengths();
        result
    }

    /// The call of [`Translator::builtin`], without what follows it: the store's fuel and the
    /// memories' lengths, which a builtin that returns may have changed.
    fn call_builtin(&mut self, which: Builtin, args: &[Value]) -> Option<Value> {
        let ty = |t: BuiltinType| match t {
            BuiltinType::I32 => I32,
            BuiltinType::I64 => I64,
        };
        let (params, ret) = which.signature();
        debug_assert_eq!(params.len(), args.len(), "{which:?}");
        let mut sig = Signature::new(self.env.call_conv);
        sig.params.push(AbiParam::new(I64));
        sig.params
            .extend(params.iter().map(|&t| AbiParam::new(ty(t))));
        sig.returns.extend(ret.map(|t| AbiParam::new(ty(t))));
        let sig = self.b.import_signature(sig);
        let table = self.load_ptr(self.vmctx, VmOffsets::BUILTINS);
        let fnptr = self.load_ptr(table, which as u32 * 8);
        let mut all = vec![self.vmctx];
        all.extend_from_slice(args);
        // Bulk operations charge fuel per byte or element from the store's count.
        self.fuel_to_store();
        let call = self.b.ins().call_indirect(sig, fnptr, &all);
        self.b.inst_results(call).first().copied()
    }

    /// Calls a builtin that returns a trap flag, and traps with `trap` when it is set: 1 is out
    /// of bounds, 2 (only from metered code's stores) out of fuel, 3 past the deadline.
    fn checked_builtin(&mut self, which: Builtin, args: &[Value], trap: TrapCode) {
        let flag = self.builtin(which, args).expect("has a result");
        let late = self.b.ins().icmp_imm_u(IntCC::Equal, flag, 3);
        self.b.ins().trapnz(late, code::INTERRUPTED);
        if self.fuel.is_some() {
            let out = self.b.ins().icmp_imm_u(IntCC::Equal, flag, 2);
            self.b.ins().trapnz(out, code::OUT_OF_FUEL);
        }
        self.b.ins().trapnz(flag, trap);
    }

    fn iconst32(&mut self, v: u32) -> Value {
        self.b.ins().iconst(I32, v as i64)
    }

    /// A call of function `func`; with `tail`, a `return_call` (the frame is replaced).
    fn call(&mut self, func: u32, tail: bool) {
        self.spill_fuel();
        let ty = self.env.info.func_type(func).clone();
        let sig = self.b.import_signature(wasm_signature(&ty));
        let args = self.take(ty.params.len());
        if func < self.env.info.imported_funcs {
            let fr = self.env.offsets.funcref(func);
            let code = self.load_ptr(self.vmctx, fr + VmOffsets::FUNCREF_CODE);
            let callee_vmctx = self.load_ptr(self.vmctx, fr + VmOffsets::FUNCREF_VMCTX);
            self.call_code(sig, code, callee_vmctx, args, tail);
        } else {
            let name = self
                .b
                .func
                .declare_imported_user_function(ir::UserExternalName {
                    namespace: 0,
                    index: func,
                });
            let callee = self.b.import_function(ir::ExtFuncData {
                name: ir::ExternalName::User(name),
                signature: sig,
                colocated: true,
                patchable: false,
            });
            let mut all = vec![self.vmctx, self.vmctx];
            all.extend(args);
            if tail {
                self.b.ins().return_call(callee, &all);
                self.unreachable_now();
            } else {
                let call = self.b.ins().call(callee, &all);
                self.returned(call);
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
            let call = self.b.ins().call_indirect(sig, code, &all);
            self.returned(call);
        }
    }

    /// After a call returned: its results on the stack, the deadline and the fuel anew.
    fn returned(&mut self, call: ir::Inst) {
        let results = self.b.inst_results(call).to_vec();
        self.stack.extend(results);
        self.reload_fuel();
        self.reload_lengths();
    }

    /// Pointer to table `table`'s `VmTable`.
    fn table(&mut self, table: u32) -> Value {
        self.load_ptr(self.vmctx, self.env.offsets.table(table))
    }

    /// Address of element `index` of `table`, trapping with `trap` when out of bounds.
    fn table_slot(&mut self, table: u32, index: Value, trap: TrapCode) -> Value {
        let t = self.table(table);
        let len = self
            .b
            .ins()
            .load(I32, trusted(), t, VmOffsets::TABLE_LENGTH as i32);
        let oob = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, index, len);
        self.b.ins().trapnz(oob, trap);
        let elements = self
            .b
            .ins()
            .load(I64, trusted(), t, VmOffsets::TABLE_ELEMENTS as i32);
        let index = self.b.ins().uextend(I64, index);
        let offset = self.b.ins().ishl_imm_u(index, 3);
        self.b.ins().iadd(elements, offset)
    }

    /// Whether `table` holds funcrefs (stored tagged: see `ephem_module::vmctx`).
    fn holds_funcrefs(&self, table: u32) -> bool {
        self.env.info.tables[table as usize].elem == ValType::FuncRef
    }

    /// The funcref in element `index` of funcref table `table`, at `slot`: untagged, and made
    /// by the runtime (a cold call) if it was never written.
    fn funcref_element(&mut self, table: u32, index: Value, slot: Value) -> Value {
        let raw = self.b.ins().load(I64, trusted(), slot, 0);
        let make = self.b.create_block();
        let join = self.b.create_block();
        let tagged = self.b.append_block_param(join, I64);
        self.b.set_cold_block(make);
        self.b.ins().brif(raw, join, &[raw.into()], make, &[]);
        self.b.switch_to_block(make);
        let t = self.iconst32(table);
        let made = self.builtin(Builtin::TableLazy, &[t, index]).unwrap();
        self.b.ins().jump(join, &[made.into()]);
        self.b.switch_to_block(join);
        self.b
            .ins()
            .band_imm_s(tagged, !(VmOffsets::FUNCREF_WRITTEN as i64))
    }

    /// A `call_indirect` (with `tail`, a `return_call_indirect`) of type `type_index` through
    /// `table`.
    fn call_indirect(&mut self, type_index: u32, table: u32, tail: bool) {
        self.spill_fuel();
        let index = self.pop();
        let slot = self.table_slot(table, index, code::UNDEFINED_ELEMENT);
        let funcref = self.funcref_element(table, index, slot);
        self.b.ins().trapz(funcref, code::NULL_CALL);
        let actual = self
            .b
            .ins()
            .load(I32, trusted(), funcref, VmOffsets::FUNCREF_TYPE_ID as i32);
        let expected = self.b.ins().load(
            I32,
            readonly(),
            self.vmctx,
            self.env.offsets.type_id(type_index) as i32,
        );
        let mismatch = self.b.ins().icmp(IntCC::NotEqual, actual, expected);
        self.b.ins().trapnz(mismatch, code::BAD_SIGNATURE);
        let code_ptr = self
            .b
            .ins()
            .load(I64, trusted(), funcref, VmOffsets::FUNCREF_CODE as i32);
        let callee_vmctx =
            self.b
                .ins()
                .load(I64, trusted(), funcref, VmOffsets::FUNCREF_VMCTX as i32);
        let ty = self.env.info.types[type_index as usize].clone();
        let sig = self.b.import_signature(wasm_signature(&ty));
        let args = self.take(ty.params.len());
        self.call_code(sig, code_ptr, callee_vmctx, args, tail);
    }

    fn global_addr(&mut self, global: u32) -> Value {
        self.load_ptr(self.vmctx, self.env.offsets.global(global))
    }

    fn live_op(&mut self, op: Operator<'_>) -> Result<(), CompileError> {
        use Operator as O;
        match op {
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
                self.frames.push(Frame {
                    kind: Kind::Block,
                    next,
                    params: params.len(),
                    results: results.len(),
                    height: self.stack.len() - params.len(),
                });
            }
            O::Loop { blockty } => {
                let (params, results) = self.block_arity(blockty)?;
                let header = self.new_block(&params);
                let next = self.new_block(&results);
                let height = self.stack.len() - params.len();
                let values = self.top(params.len());
                self.b.ins().jump(header, &args(&values));
                self.enter(header, height);
                self.fuel_check();
                self.frames.push(Frame {
                    kind: Kind::Loop(header),
                    next,
                    params: params.len(),
                    results: results.len(),
                    height,
                });
            }
            O::If { blockty } => {
                let cond = self.pop();
                let (params, results) = self.block_arity(blockty)?;
                let then_block = self.b.create_block();
                let else_block = self.b.create_block();
                let next = self.new_block(&results);
                // Before the branch, so that the else arm sees them too.
                let if_params = self.top(params.len());
                self.b.ins().brif(cond, then_block, &[], else_block, &[]);
                self.b.switch_to_block(then_block);
                self.frames.push(Frame {
                    kind: Kind::If {
                        else_block,
                        params: if_params,
                        has_else: false,
                    },
                    next,
                    params: params.len(),
                    results: results.len(),
                    height: self.stack.len() - params.len(),
                });
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
                self.b.ins().brif(cond, target, &args(&values), cont, &[]);
                self.b.switch_to_block(cont);
            }
            O::BrTable { targets } => {
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
            O::Drop => {
                self.pop();
            }
            O::Select | O::TypedSelect { .. } => {
                let (x, y, c) = self.pop3();
                let (x, y) = (self.canonical(x), self.canonical(y));
                let v = self.b.ins().select(c, x, y);
                self.push(v);
            }
            O::LocalGet { local_index } => {
                let v = self.b.use_var(self.locals[local_index as usize]);
                self.push(v);
            }
            O::LocalSet { local_index } => {
                let v = self.pop();
                let v = self.canonical(v);
                self.b.def_var(self.locals[local_index as usize], v);
            }
            O::LocalTee { local_index } => {
                let v = *self.stack.last().expect("validated");
                let v = self.canonical(v);
                self.b.def_var(self.locals[local_index as usize], v);
            }
            O::GlobalGet { global_index } => {
                let ty = ir_type(self.env.info.globals[global_index as usize].ty);
                let addr = self.global_addr(global_index);
                let v = self.b.ins().load(ty, trusted(), addr, 0);
                self.push(v);
            }
            O::GlobalSet { global_index } => {
                let v = self.pop();
                let addr = self.global_addr(global_index);
                self.b.ins().store(trusted(), v, addr, 0);
            }

            O::I32Load { memarg }
            | O::F32Load { memarg }
            | O::I64Load { memarg }
            | O::F64Load { memarg } => {
                let ty = match op {
                    O::I32Load { .. } => I32,
                    O::I64Load { .. } => I64,
                    O::F32Load { .. } => F32,
                    _ => F64,
                };
                self.load(memarg, ty, LoadKind::Plain)
            }
            O::I32Load8S { memarg } => self.load(memarg, I32, LoadKind::S8),
            O::I32Load8U { memarg } => self.load(memarg, I32, LoadKind::U8),
            O::I32Load16S { memarg } => self.load(memarg, I32, LoadKind::S16),
            O::I32Load16U { memarg } => self.load(memarg, I32, LoadKind::U16),
            O::I64Load8S { memarg } => self.load(memarg, I64, LoadKind::S8),
            O::I64Load8U { memarg } => self.load(memarg, I64, LoadKind::U8),
            O::I64Load16S { memarg } => self.load(memarg, I64, LoadKind::S16),
            O::I64Load16U { memarg } => self.load(memarg, I64, LoadKind::U16),
            O::I64Load32S { memarg } => self.load(memarg, I64, LoadKind::S32),
            O::I64Load32U { memarg } => self.load(memarg, I64, LoadKind::U32),
            O::I32Store { memarg }
            | O::I64Store { memarg }
            | O::F32Store { memarg }
            | O::F64Store { memarg } => self.store(memarg, None),
            O::I32Store8 { memarg } | O::I64Store8 { memarg } => self.store(memarg, Some(I8)),
            O::I32Store16 { memarg } | O::I64Store16 { memarg } => self.store(memarg, Some(I16)),
            O::I64Store32 { memarg } => self.store(memarg, Some(I32)),
            O::MemorySize { mem } => {
                let def = self.load_ptr(self.vmctx, self.env.offsets.memory_def(mem));
                let len = self
                    .b
                    .ins()
                    .load(I64, trusted(), def, VmOffsets::MEMORY_LENGTH as i32);
                let pages = self.b.ins().ushr_imm_u(len, 16);
                let v = self.b.ins().ireduce(I32, pages);
                self.push(v);
            }
            O::MemoryGrow { mem } => {
                let delta = self.pop();
                let mem = self.iconst32(mem);
                let v = self.builtin(Builtin::MemoryGrow, &[mem, delta]).unwrap();
                self.push(v);
            }
            O::MemoryFill { mem } => {
                let (dst, val, len) = self.pop3();
                let mem = self.iconst32(mem);
                self.checked_builtin(
                    Builtin::MemoryFill,
                    &[mem, dst, val, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::MemoryCopy { dst_mem, src_mem } => {
                let (dst, src, len) = self.pop3();
                let d = self.iconst32(dst_mem);
                let s = self.iconst32(src_mem);
                self.checked_builtin(
                    Builtin::MemoryCopy,
                    &[d, s, dst, src, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::MemoryInit { data_index, mem } => {
                let (dst, src, len) = self.pop3();
                let m = self.iconst32(mem);
                let d = self.iconst32(data_index);
                self.checked_builtin(
                    Builtin::MemoryInit,
                    &[m, d, dst, src, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::DataDrop { data_index } => {
                let d = self.iconst32(data_index);
                self.builtin(Builtin::DataDrop, &[d]);
            }

            O::TableGet { table } => {
                let index = self.pop();
                let slot = self.table_slot(table, index, code::TABLE_OUT_OF_BOUNDS);
                let v = if self.holds_funcrefs(table) {
                    self.funcref_element(table, index, slot)
                } else {
                    self.b.ins().load(I64, trusted(), slot, 0)
                };
                self.push(v);
            }
            O::TableSet { table } => {
                let (index, value) = self.pop2();
                let slot = self.table_slot(table, index, code::TABLE_OUT_OF_BOUNDS);
                let value = if self.holds_funcrefs(table) {
                    self.b
                        .ins()
                        .bor_imm_u(value, VmOffsets::FUNCREF_WRITTEN as i64)
                } else {
                    value
                };
                self.b.ins().store(trusted(), value, slot, 0);
                let t = self.table(table);
                let wrote = self.b.ins().iconst(I32, 1);
                self.b
                    .ins()
                    .store(trusted(), wrote, t, VmOffsets::TABLE_CODE_WROTE as i32);
            }
            O::TableSize { table } => {
                let t = self.table(table);
                let v = self
                    .b
                    .ins()
                    .load(I32, trusted(), t, VmOffsets::TABLE_LENGTH as i32);
                self.push(v);
            }
            O::TableGrow { table } => {
                let (init, delta) = self.pop2();
                let t = self.iconst32(table);
                let v = self.builtin(Builtin::TableGrow, &[t, delta, init]).unwrap();
                self.push(v);
            }
            O::TableFill { table } => {
                let (dst, val, len) = self.pop3();
                let t = self.iconst32(table);
                self.checked_builtin(
                    Builtin::TableFill,
                    &[t, dst, val, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::TableCopy {
                dst_table,
                src_table,
            } => {
                let (dst, src, len) = self.pop3();
                let d = self.iconst32(dst_table);
                let s = self.iconst32(src_table);
                self.checked_builtin(
                    Builtin::TableCopy,
                    &[d, s, dst, src, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::TableInit { elem_index, table } => {
                let (dst, src, len) = self.pop3();
                let t = self.iconst32(table);
                let e = self.iconst32(elem_index);
                self.checked_builtin(
                    Builtin::TableInit,
                    &[t, e, dst, src, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::ElemDrop { elem_index } => {
                let e = self.iconst32(elem_index);
                self.builtin(Builtin::ElemDrop, &[e]);
            }
            O::RefNull { .. } => {
                let v = self.b.ins().iconst(I64, 0);
                self.push(v);
            }
            O::RefIsNull => self.eqz(),
            O::RefFunc { function_index } => {
                let imported = self.env.info.imported_funcs;
                let layout = self.env.layout;
                let slot = layout.slot(imported, function_index).ok_or_else(|| {
                    CompileError::Unsupported(format!(
                        "ref.func {function_index} of an undeclared function"
                    ))
                })?;
                let v = if layout.is_lazy(imported, slot) {
                    // Only a lazy table names it: its slot is written on first use.
                    let f = self.iconst32(function_index);
                    self.builtin(Builtin::RefFunc, &[f]).unwrap()
                } else {
                    self.b
                        .ins()
                        .iadd_imm_u(self.vmctx, self.env.offsets.funcref(slot) as i64)
                };
                self.push(v);
            }

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
            O::I64ReinterpretF64 => self.unary(|b, x| b.ins().bitcast(I64, MemFlagsData::new(), x)),
            O::F32ReinterpretI32 => self.unary(|b, x| b.ins().bitcast(F32, MemFlagsData::new(), x)),
            O::F64ReinterpretI64 => self.unary(|b, x| b.ins().bitcast(F64, MemFlagsData::new(), x)),

            other => {
                if !self.simd_op(&other) {
                    return Err(CompileError::Unsupported(format!("operator {other:?}")));
                }
            }
        }
        Ok(())
    }
}

fn memory_index(m: &wasmparser::MemArg) -> u32 {
    match m.target {
        wasmparser::MemArgTarget::Memory(i) => i,
        wasmparser::MemArgTarget::Array(_) => unreachable!("validated: no GC"),
    }
}

fn sext_from(b: &mut FunctionBuilder<'_>, x: Value, narrow: Type, wide: Type) -> Value {
    let n = b.ins().ireduce(narrow, x);
    b.ins().sextend(wide, n)
}

#[derive(Clone, Copy)]
enum LoadKind {
    Plain,
    S8,
    U8,
    S16,
    U16,
    S32,
    U32,
}
