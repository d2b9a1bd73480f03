//! Translation of one wasm function body to Cranelift IR.
//!
//! The classic design: an operand stack of SSA values and a stack of control frames. A frame's
//! branch target takes the branch's values as block parameters (the end of a `block`/`if`, or
//! the header of a `loop`). Values live before an `if` dominate both arms, so its arms need no
//! parameters. Code after an unconditional branch is skipped (only nesting is tracked) until
//! the end of the enclosing frame.
//!
//! Blocks are sealed as soon as their predecessors are all known (a frame's end and a loop's
//! header at the frame's `end`, an arm or a fall-through right after its branch), so that
//! SSA construction looks a local up once its definitions are in place instead of giving every
//! block a parameter for it; what is left (blocks of exception handling, lazy tables) is
//! sealed at the end.
//!
//! Everything per instance is loaded from the `vmctx` (see [`VmOffsets`]). Every function
//! takes its callee's vmctx and then its caller's (null from the host), so that a host
//! function knows which instance called it.
//!
//! Linear memory is reached as `base + zext(address) + offset` (a 64-bit address as it is). By
//! default every access is first compared with the memory's current length (`bounds.rs`); code
//! compiled without bounds checks (`Compiler::without_bounds_checks`) relies on the runtime's
//! reservation of 8 GiB of inaccessible address space behind every memory base instead, in
//! which any access a 32-bit address and offset can form faults, and the fault is the trap. A
//! module with a 64-bit memory or one of one-byte pages is always compiled with checks
//! (`MemoryType::needs_bounds_checks`). Stores set write marks
//! unless those are turned off (`marks.rs`). Fuel is charged only in metered code
//! (`fuel.rs`). Deadlines need no code here: the runtime interrupts a call past its deadline
//! with a signal; only the bulk-memory builtins, which run in the host, report one (their trap
//! flag 3). GC objects are reached as the GC heap's base plus a reference (`gc.rs`).
//!
//! This file holds the translator's state, the function's entry and exit, the operand stack,
//! locals and globals; each other concern is a file under `translate/`: `control.rs` (frames,
//! branches, unreachable code), `calls.rs`, `builtins.rs` (calls into the runtime),
//! `memory.rs` (loads, stores, bulk memory), `bounds.rs`, `marks.rs`, `tables.rs`,
//! `numeric.rs` (scalar arithmetic), `fuel.rs` and `simd.rs`.

use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::{F32, F64, I8X16, I32, I64};
use cranelift_codegen::ir::{
    self, AbiParam, ArgumentPurpose, InstBuilder, MemFlagsData, Signature, Type, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use ephem_module::{ModuleInfo, ValType, VmOffsets};
use wasmparser::{FunctionBody, Operator};

use crate::CompileError;
use crate::arch::Raised;

mod atomics;
mod bounds;
mod builtins;
mod calls;
mod control;
mod exceptions;
mod fuel;
mod gc;
mod marks;
mod memory;
mod numeric;
mod simd;
mod tables;

use bounds::{Check, Regions};
use control::Frame;
pub use exceptions::decode_clause_tag;

/// Cranelift type of a wasm value type (references are pointers).
pub fn ir_type(ty: ValType) -> Type {
    match ty {
        ValType::I32 => I32,
        ValType::I64 => I64,
        ValType::F32 => F32,
        ValType::F64 => F64,
        ValType::Ref(_) => I64,
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

/// What translating a function needs of the module and the compiler; shared by all functions.
pub struct Env<'a> {
    pub info: &'a ModuleInfo,
    pub offsets: &'a VmOffsets,
    /// Where funcrefs live, and which tables are lazy.
    pub layout: &'a ephem_module::FuncrefLayout,
    pub call_conv: CallConv,
    pub frontend: cranelift_codegen::isa::TargetFrontendConfig,
    /// Operator costs, for metered code.
    pub fuel_costs: Option<crate::FuelCosts>,
    /// Whether to mark bounds checks so that failed ones may raise their trap without a signal
    /// (see [`Raised`]): where the target's `Arch` writes the code that does it.
    pub raise_checks: bool,
    /// Which calls may grow a memory, after which lengths are read again.
    pub growth: &'a crate::growth::Growth,
    /// Per type open to subtypes, the module's own types below it (a few): what a cast to it
    /// compares inline before it asks the runtime (see `gc.rs`).
    pub subtypes: &'a std::collections::HashMap<u32, Vec<u32>>,
    /// Per type, where a struct type's fields are (worked out once: every `struct.*` reads it).
    pub layouts: &'a [Option<ephem_module::gc::StructLayout>],
    /// What the validator knew of the module, where its code keeps stack maps (a module whose
    /// values may name GC objects, `ModuleInfo::holds_objects`): each body is validated again
    /// beside its translation for the types of its operands (see [`Operands`]).
    pub validated: Option<&'a (wasmparser::ValidatorResources, wasmparser::WasmFeatures)>,
}

/// The layout of each of the module's struct types ([`Env::layouts`]).
pub fn struct_layouts(info: &ModuleInfo) -> Vec<Option<ephem_module::gc::StructLayout>> {
    (info.types.iter())
        .map(|t| match t {
            ephem_module::TypeDef::Struct(fields) => Some(ephem_module::gc::struct_layout(fields)),
            _ => None,
        })
        .collect()
}

/// The module's types below each type that has some, at most [`INLINE_SUBTYPES`] per type (the
/// nearest first: a type is listed under each of its ancestors, in index order).
pub fn subtypes_of(info: &ModuleInfo) -> std::collections::HashMap<u32, Vec<u32>> {
    let mut below: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for t in 0..info.subs.len() as u32 {
        for s in info.supertypes(t) {
            let list = below.entry(s).or_default();
            if list.len() < INLINE_SUBTYPES {
                list.push(t);
            }
        }
    }
    below
}

/// See [`subtypes_of`].
const INLINE_SUBTYPES: usize = 8;

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A field of the vmctx (or a table it points at) that never changes while the instance lives:
/// memory bases (a memory's reservation never moves), pointers to tables, globals and the
/// epoch, type ids. `can_move` lets Cranelift hoist such loads out of loops.
fn readonly() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

/// The state of one function's translation.
struct Translator<'a, 'b> {
    env: &'a Env<'a>,
    b: FunctionBuilder<'b>,
    vmctx: Value,
    stack: Operands,
    /// The body validated again, for its operands' types, where code keeps stack maps.
    types: Option<wasmparser::FuncValidator<wasmparser::ValidatorResources>>,
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
    /// Values that `ref.func` made, with their function: `call_ref` of one is a direct call.
    known_funcs: Vec<(Value, u32)>,
    /// Every load of a length (see [`bounds::drop_unread_lengths`]).
    length_loads: Vec<Value>,
    /// Every write mark set (see [`marks::hoist_from_loops`]).
    mark_sites: Vec<marks::Site>,
    /// The `catch` clauses of each `try_table` the translation is inside, outermost first:
    /// calls become `try_call`s while there are any (see `exceptions.rs`).
    catches: Vec<Vec<exceptions::Clause>>,
    /// Each signature and callee the function's calls have declared, so that a function
    /// with thousands of calls declares each once (see `calls.rs`).
    declared: calls::Declared,
    /// Facts that blocks not yet entered start from: those of a block that dominates them
    /// (see [`Translator::pass_facts`]).
    inherited: std::collections::HashMap<ir::Block, BlockFacts>,
}

/// What a block has done so far that later instructions of it may rely on: every instruction
/// of a block runs after the earlier ones, and a block's facts also hold in the blocks it
/// dominates (a passed check stays true, since a memory only grows; a mark stays set), where
/// they start as the dominator's were when control left it, but can no longer be widened.
#[derive(Default)]
struct BlockFacts {
    block: Option<ir::Block>,
    /// The write marks set (see [`Translator::mark_written`]): memory, index operand, the
    /// offset's window.
    marked: Vec<(u32, Value, u64)>,
    /// The bounds checks made (see [`Translator::check_bounds`]): each proves that an access
    /// through its index up to its end is within the memory's length.
    checks: Vec<Check>,
    /// The last instruction already looked at for effects (see [`bounds::disturbs`]).
    seen: Option<ir::Inst>,
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

    let mut types = env.validated.map(|(resources, features)| {
        let func = wasmparser::FuncToValidate {
            resources: resources.clone(),
            index: func,
            ty: env.info.funcs[func as usize],
            features: *features,
        };
        func.into_validator(Default::default())
    });
    let maps = types.is_some();
    let mut locals = Vec::new();
    for (i, &t) in ty.params.iter().enumerate() {
        let var = b.declare_var(ir_type(t));
        if maps && t.holds_objects() {
            b.declare_var_needs_stack_map(var);
        }
        let v = b.block_params(entry)[i + 2];
        b.def_var(var, v);
        locals.push(var);
    }
    let mut reader = body.get_locals_reader()?;
    for _ in 0..reader.get_count() {
        let offset = reader.original_position();
        let (count, t) = reader.read()?;
        if let Some(v) = &mut types {
            v.define_locals(offset, count, t)?;
        }
        let t = crate::parse::val_type(t, &env.info.types)?;
        for _ in 0..count {
            let var = b.declare_var(ir_type(t));
            if maps && t.holds_objects() {
                b.declare_var_needs_stack_map(var);
            }
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
        stack: Operands::default(),
        types,
        frames: vec![Frame::function(ret, ty.results.len())],
        dead_depth: 0,
        reachable: true,
        locals,
        fuel: None,
        fuel_pending: 0,
        facts: BlockFacts::default(),
        regions: None,
        lengths: Vec::new(),
        raised_checks: env.raise_checks.then_some(0),
        known_funcs: Vec::new(),
        length_loads: Vec::new(),
        mark_sites: Vec::new(),
        catches: Vec::new(),
        declared: calls::Declared::default(),
        inherited: std::collections::HashMap::new(),
    };
    if env.info.checks_bounds {
        t.start_bounds_checks();
    }
    if env.fuel_costs.is_some() {
        t.start_fuel();
    }
    let mut ops = body.get_operators_reader()?;
    while !ops.eof() {
        let offset = ops.original_position();
        let op = ops.read()?;
        if let Some(v) = &mut t.types {
            v.op(offset, &op)?;
        }
        t.op(op)?;
        if t.reachable {
            t.declare_objects()?;
        }
    }
    // The final `end` switched to `ret`.
    let results = t.top(t.stack.len());
    t.spill_fuel();
    t.b.ins().return_(&results);
    t.b.seal_all_blocks();
    let raised = (t.raised_checks)
        .filter(|&checks| checks > 0)
        .map(|checks| Raised { checks });
    let length_loads = std::mem::take(&mut t.length_loads);
    let mark_sites = std::mem::take(&mut t.mark_sites);
    let (vmctx, marks_region) = (t.vmctx, t.regions.map(|r| r.marks));
    t.b.finalize(env.frontend);
    bounds::drop_unread_lengths(func_ir, &length_loads);
    let hoisting = marks::Hoisting {
        vmctx,
        offsets: env.offsets,
        memories: &env.info.memories,
        call_conv: env.call_conv,
        marks: marks_region,
    };
    marks::hoist_from_loops(func_ir, &mark_sites, &hoisting);
    Ok(raised)
}

fn zero(b: &mut FunctionBuilder<'_>, t: ValType) -> Value {
    match t {
        ValType::I32 => b.ins().iconst(I32, 0),
        ValType::I64 | ValType::Ref(_) => b.ins().iconst(I64, 0),
        ValType::F32 => b.ins().f32const(Ieee32::with_bits(0)),
        ValType::F64 => b.ins().f64const(Ieee64::with_bits(0)),
        ValType::V128 => {
            let c = b.func.dfg.constants.insert(vec![0; 16].into());
            b.ins().vconst(I8X16, c)
        }
    }
}

/// The operand stack, which also knows how much of it has not changed since its values' types
/// were last looked at (see [`Translator::declare_objects`]).
#[derive(Default)]
struct Operands {
    values: Vec<Value>,
    /// The bottom values unchanged since their types were looked at.
    settled: usize,
}

impl Operands {
    fn pop(&mut self) -> Option<Value> {
        let v = self.values.pop();
        self.settled = self.settled.min(self.values.len());
        v
    }
    fn push(&mut self, v: Value) {
        self.values.push(v);
    }
    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        self.settled = self.settled.min(len);
    }
    fn extend(&mut self, values: impl IntoIterator<Item = Value>) {
        self.values.extend(values);
    }
}

impl std::ops::Deref for Operands {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.values
    }
}

/// Whether values of `ty`, as the validator of a body with `resources` gives it, may name GC
/// objects (see `ephem_module::HeapType::holds_objects`).
fn holds_objects(
    resources: &wasmparser::ValidatorResources,
    types: &[ephem_module::TypeDef],
    ty: wasmparser::ValType,
) -> bool {
    use wasmparser::{AbstractHeapType as A, HeapType as H, UnpackedIndex as U};
    use wasmparser::{CompositeInnerType, WasmModuleResources};
    let wasmparser::ValType::Ref(r) = ty else {
        return false;
    };
    match r.heap_type() {
        H::Abstract { ty, .. } => matches!(ty, A::Any | A::Eq | A::Struct | A::Array | A::Extern),
        H::Concrete(i) | H::Exact(i) => match i {
            U::Module(i) => !matches!(types.get(i as usize), Some(ephem_module::TypeDef::Func(_))),
            U::Id(id) => !matches!(
                resources.sub_type_at_id(id).composite_type.inner,
                CompositeInnerType::Func(_)
            ),
            U::RecGroup(_) => true,
        },
    }
}

impl Translator<'_, '_> {
    /// Where code keeps stack maps: makes Cranelift keep every operand the last operator left
    /// that may name a GC object in the stack maps of the calls it lives across (spilled before
    /// them, reloaded after: a collection in the call may move the object). Locals of such
    /// types are declared once, at the start; temporaries of one operator that live across a
    /// call of it, where it makes one (`gc.rs`), declare themselves.
    fn declare_objects(&mut self) -> Result<(), CompileError> {
        let Some(v) = &self.types else {
            return Ok(());
        };
        let n = self.stack.len();
        if v.operand_stack_height() as usize != n {
            return Err(CompileError::Codegen(format!(
                "operand stack of {n} values where the validator has {}",
                v.operand_stack_height()
            )));
        }
        for i in self.stack.settled..n {
            let Some(Some(ty)) = v.get_operand_type(n - 1 - i) else {
                continue;
            };
            if holds_objects(v.resources(), &self.env.info.types, ty) {
                self.b.declare_value_needs_stack_map(self.stack[i]);
            }
        }
        self.stack.settled = n;
        Ok(())
    }

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

    fn load_ptr(&mut self, base: Value, offset: u32) -> Value {
        self.b.ins().load(I64, readonly(), base, offset as i32)
    }

    fn iconst32(&mut self, v: u32) -> Value {
        self.b.ins().iconst(I32, v as i64)
    }

    /// The block being translated, with [`Translator::facts`] made its own: cleared when
    /// translation has moved to another block since they were last used.
    fn this_block(&mut self) -> ir::Block {
        let block = self.b.current_block().expect("translating into a block");
        if self.facts.block != Some(block) {
            self.facts = self.inherited.remove(&block).unwrap_or(BlockFacts {
                block: Some(block),
                ..BlockFacts::default()
            });
        }
        block
    }

    /// Lets `to`, a block the current one dominates (entered later, or never), start from the
    /// current block's facts as they are now: a structured construct's arms, end and loop
    /// header, and a conditional branch's fall-through.
    fn pass_facts(&mut self, to: ir::Block) {
        if self.regions.is_none() && !self.env.info.marks_writes {
            return;
        }
        self.this_block();
        // The latest few only: a copy per branch of all a long function has proved would grow
        // with the square of its length (a module's code is untrusted input).
        const KEPT: usize = 32;
        let latest = |n: usize| n.saturating_sub(KEPT)..;
        let facts = BlockFacts {
            block: Some(to),
            marked: self.facts.marked[latest(self.facts.marked.len())].to_vec(),
            checks: (self.facts.checks[latest(self.facts.checks.len())].iter())
                .map(bounds::Check::settled)
                .collect(),
            seen: None,
        };
        self.inherited.insert(to, facts);
    }

    /// Translates `op`, charging its fuel in metered code.
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

    /// Translates `op` in reachable code: `drop`, `select`, locals and globals here, every other
    /// operator in the file of its concern.
    fn live_op(&mut self, op: Operator<'_>) -> Result<(), CompileError> {
        use Operator as O;
        match op {
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
            ref other => {
                let translated = self.control_op(other)?
                    || self.call_op(other)
                    || self.exception_op(other)?
                    || self.memory_op(other)
                    || self.atomic_op(other)
                    || self.table_op(other)?
                    || self.numeric_op(other)
                    || self.simd_op(other)
                    || self.gc_op(other)?;
                if !translated {
                    return Err(CompileError::Unsupported(format!("operator {other:?}")));
                }
            }
        }
        Ok(())
    }

    fn global_addr(&mut self, global: u32) -> Value {
        self.load_ptr(self.vmctx, self.env.offsets.global(global))
    }
}
