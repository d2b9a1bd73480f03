//! What ephem knows about a compiled module: its WebAssembly-level description ([`ModuleInfo`]),
//! its machine code and where things are in it ([`CompiledModule`]), and the layout of the
//! per-instance context that the code reads ([`VmOffsets`]).
//!
//! This crate is shared by the compiler, which produces a [`CompiledModule`], and the runtime,
//! which loads one; it depends on neither, so a runtime-only build needs no compiler.
//!
//! # The calling convention
//! Every wasm function takes the callee's instance context (`vmctx`) first, then its wasm
//! parameters, and returns its wasm results (system calling convention of the host). The text
//! also holds, per function type, an *entry trampoline* `fn(vmctx, callee, values: *mut ValRaw)`
//! that the host calls (arguments in, results out through `values`), and a *host adapter* with
//! the wasm signature that wasm calls to reach a host function (see [`HostFuncHeader`]).
//!
//! Metered code ([`ModuleInfo::metered`]) also passes the store's remaining fuel in the
//! target's pinned register (x86_64: `r15`), which it never uses otherwise: set before every
//! call and return, read at entry and after every call. The runtime loads it from the store
//! when it enters wasm, writes it back when wasm returns or traps, and around host functions.
//! Unmetered code keeps that register as callee-saved, so the two kinds cannot call each other
//! (a store runs only one).
//!
//! The runtime enters wasm through an entry stub that calls the entry trampoline, with the
//! address of the `Raise` builtin at [`ENTRY_FRAME_RAISE`] from the stub's frame pointer. A
//! failed bounds check (x86-64) reaches it by following frame pointers up to the frame the
//! trampoline's call made, without the vmctx, which the function may no longer hold.

mod check;
mod funcrefs;
mod vmctx;

use rkyv::{Archive, Deserialize, Serialize};

pub use funcrefs::{FuncrefLayout, LazyTable};
pub use vmctx::*;

/// A WebAssembly value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum ValType {
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// Reference to a function, or null.
    FuncRef,
    /// Reference to a host value, or null.
    ExternRef,
    /// 128-bit vector (fixed-width SIMD).
    V128,
}

impl ValType {
    /// Every value type, in declaration order.
    pub const ALL: [ValType; 7] = [
        ValType::I32,
        ValType::I64,
        ValType::F32,
        ValType::F64,
        ValType::FuncRef,
        ValType::ExternRef,
        ValType::V128,
    ];

    pub fn is_ref(self) -> bool {
        matches!(self, ValType::FuncRef | ValType::ExternRef)
    }
}

/// The native value of an archived one (see [`ArchivedModuleInfo`]).
///
/// For the plain data in module metadata this cannot fail: the archive was validated when the
/// artifact was opened, and these types own no resources.
pub fn native<T, A>(archived: &A) -> T
where
    A: Deserialize<T, rkyv::rancor::Strategy<rkyv::de::Pool, rkyv::rancor::Error>>,
{
    rkyv::deserialize::<T, rkyv::rancor::Error>(archived)
        .expect("validated plain data always deserializes")
}

impl ArchivedValType {
    pub fn native(&self) -> ValType {
        match self {
            ArchivedValType::I32 => ValType::I32,
            ArchivedValType::I64 => ValType::I64,
            ArchivedValType::F32 => ValType::F32,
            ArchivedValType::F64 => ValType::F64,
            ArchivedValType::FuncRef => ValType::FuncRef,
            ArchivedValType::ExternRef => ValType::ExternRef,
            ArchivedValType::V128 => ValType::V128,
        }
    }
}

impl ArchivedConstExpr {
    /// The native expression (a plain match: element items are read one by one at
    /// instantiation, where the general [`native`] costs more than the copy).
    pub fn native(&self) -> ConstExpr {
        match self {
            ArchivedConstExpr::I32(v) => ConstExpr::I32(v.to_native()),
            ArchivedConstExpr::I64(v) => ConstExpr::I64(v.to_native()),
            ArchivedConstExpr::F32(v) => ConstExpr::F32(v.to_native()),
            ArchivedConstExpr::F64(v) => ConstExpr::F64(v.to_native()),
            ArchivedConstExpr::V128(v) => ConstExpr::V128(v.to_native()),
            ArchivedConstExpr::GlobalGet(g) => ConstExpr::GlobalGet(g.to_native()),
            ArchivedConstExpr::RefNull => ConstExpr::RefNull,
            ArchivedConstExpr::RefFunc(f) => ConstExpr::RefFunc(f.to_native()),
            ArchivedConstExpr::Extended(i) => ConstExpr::Extended(i.to_native()),
        }
    }
}

/// Writes the bytes that identify a signature (equal for equal signatures, native or archived):
/// the parameter count, then one byte per parameter and result type.
fn signature_key(
    params: impl ExactSizeIterator<Item = ValType>,
    results: impl Iterator<Item = ValType>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&(params.len() as u32).to_le_bytes());
    out.extend(params.chain(results).map(|t| t as u8));
}

/// Signatures with at most this many parameters and results together have a [`small_id`].
pub const SMALL_SIGNATURE: usize = 9;

/// Where the runtime's entry stub keeps the address of the `Raise` builtin: this many bytes
/// from its frame pointer (the frame pointer an entry trampoline saves). See the calling
/// convention above.
pub const ENTRY_FRAME_RAISE: i32 = -48;

/// A signature's own number, when it is small (see [`SMALL_SIGNATURE`]): one base-8 digit per
/// type (1 to 7), least significant first, with a 0 digit between parameters and results (left
/// out with no results, where it would be a leading zero). A separator is the only 0 digit, so
/// different signatures get different numbers, all below 2^30: an engine uses them as
/// canonical type ids without registering anything.
pub fn small_id(
    params: impl ExactSizeIterator<Item = ValType>,
    results: impl ExactSizeIterator<Item = ValType>,
) -> Option<u32> {
    if params.len() + results.len() > SMALL_SIGNATURE {
        return None;
    }
    let digit = |t: ValType| t as u32 + 1;
    let mut id = 0;
    let mut shift = 0;
    for d in params.map(digit).chain([0]).chain(results.map(digit)) {
        id |= d << shift;
        shift += 3;
    }
    Some(id)
}

/// The signature with [`small_id`] `id`, if `id` is one.
pub fn from_small_id(mut id: u32) -> Option<FuncType> {
    let mut ty = FuncType::default();
    let mut in_results = false;
    while id != 0 {
        match id & 7 {
            0 if !in_results => in_results = true,
            0 => return None,
            d if in_results => ty.results.push(ValType::ALL[d as usize - 1]),
            d => ty.params.push(ValType::ALL[d as usize - 1]),
        }
        id >>= 3;
    }
    Some(ty)
}

impl FuncType {
    /// See [`small_id`].
    pub fn small_id(&self) -> Option<u32> {
        small_id(self.params.iter().copied(), self.results.iter().copied())
    }

    /// See [`ArchivedFuncType::key`].
    pub fn key(&self, out: &mut Vec<u8>) {
        signature_key(
            self.params.iter().copied(),
            self.results.iter().copied(),
            out,
        )
    }
}

impl ArchivedFuncType {
    /// See [`small_id`].
    pub fn small_id(&self) -> Option<u32> {
        small_id(
            self.params.iter().map(ArchivedValType::native),
            self.results.iter().map(ArchivedValType::native),
        )
    }

    /// Bytes that identify this signature, equal to [`FuncType::key`] of the native one.
    pub fn key(&self, out: &mut Vec<u8>) {
        signature_key(
            self.params.iter().map(ArchivedValType::native),
            self.results.iter().map(ArchivedValType::native),
            out,
        )
    }

    pub fn native(&self) -> FuncType {
        FuncType {
            params: self.params.iter().map(ArchivedValType::native).collect(),
            results: self.results.iter().map(ArchivedValType::native).collect(),
        }
    }
}

/// A function signature.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Archive, Serialize, Deserialize)]
pub struct FuncType {
    /// Parameter types, in order.
    pub params: Vec<ValType>,
    /// Result types, in order.
    pub results: Vec<ValType>,
}

/// A table's element type and limits (in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct TableType {
    /// `FuncRef` or `ExternRef`.
    pub elem: ValType,
    /// Initial size.
    pub min: u32,
    /// Largest size, if bounded.
    pub max: Option<u32>,
}

/// Limits in 64 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct MemoryType {
    /// Initial size.
    pub min: u32,
    /// Largest size, if bounded.
    pub max: Option<u32>,
}

/// A global's value type and mutability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GlobalType {
    /// The value type.
    pub ty: ValType,
    /// Whether `global.set` may change it.
    pub mutable: bool,
}

/// A constant expression: one instruction, or an extended one (integer arithmetic on
/// constants and globals, WebAssembly 3.0) kept in [`ModuleInfo::extended`]. An extended
/// expression that reads no global is folded into a constant by the compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ConstExpr {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
    V128(u128),
    GlobalGet(u32),
    RefNull,
    RefFunc(u32),
    /// Index of an expression in [`ModuleInfo::extended`].
    Extended(u32),
}

/// One instruction of an extended constant expression, a stack program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ConstOp {
    I32(i32),
    I64(i64),
    GlobalGet(u32),
    I32Add,
    I32Sub,
    I32Mul,
    I64Add,
    I64Sub,
    I64Mul,
}

impl ConstOp {
    /// Runs `ops` (a checked expression: see `ModuleInfo::check`) with `global` reading an
    /// integer global's value; the result's low bits are the value.
    pub fn eval(ops: impl IntoIterator<Item = ConstOp>, global: impl Fn(u32) -> u64) -> u64 {
        let mut stack: Vec<u64> = Vec::with_capacity(4);
        for op in ops {
            let v = match op {
                ConstOp::I32(v) => v as u32 as u64,
                ConstOp::I64(v) => v as u64,
                ConstOp::GlobalGet(g) => global(g),
                binary => {
                    let (y, x) = (stack.pop().unwrap_or(0), stack.pop().unwrap_or(0));
                    match binary {
                        ConstOp::I64Add => x.wrapping_add(y),
                        ConstOp::I64Sub => x.wrapping_sub(y),
                        ConstOp::I64Mul => x.wrapping_mul(y),
                        ConstOp::I32Add => (x as u32).wrapping_add(y as u32).into(),
                        ConstOp::I32Sub => (x as u32).wrapping_sub(y as u32).into(),
                        _ => (x as u32).wrapping_mul(y as u32).into(),
                    }
                }
            };
            stack.push(v);
        }
        stack.pop().unwrap_or(0)
    }
}

/// What an import is.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ImportKind {
    /// A function of the module's type at this index.
    Func(u32),
    /// A table of this type.
    Table(TableType),
    /// A memory of this type.
    Memory(MemoryType),
    /// A global of this type.
    Global(GlobalType),
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Import {
    pub module: String,
    pub name: String,
    pub kind: ImportKind,
}

/// Something a module exports or imports, by its index in the module's index space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum EntityIndex {
    Func(u32),
    Table(u32),
    Memory(u32),
    Global(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Export {
    pub name: String,
    pub index: EntityIndex,
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum SegmentMode {
    Active { index: u32, offset: ConstExpr },
    Passive,
    Declared,
}

/// Where an active segment goes, when that is known before instantiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Not an active segment of the memory or table asked about.
    Elsewhere,
    /// Units `[start, end)`, within the limit asked about: applying it cannot trap.
    Static(std::ops::Range<u64>),
    /// An offset read from a global, or past the limit: known only at instantiation.
    Dynamic,
}

impl SegmentMode {
    /// Where this segment, of `len` units, goes if it is an active one of memory or table
    /// `index` whose minimum size is `limit` units.
    pub fn placement(&self, index: u32, len: u64, limit: u64) -> Placement {
        match self {
            SegmentMode::Active { index: i, offset } if *i == index => match *offset {
                ConstExpr::I32(at) if u64::from(at as u32) + len <= limit => {
                    let start = u64::from(at as u32);
                    Placement::Static(start..start + len)
                }
                _ => Placement::Dynamic,
            },
            _ => Placement::Elsewhere,
        }
    }
}

/// A data segment; its bytes are `data[range]` of [`CompiledModule::data`].
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct DataSegment {
    pub mode: SegmentMode,
    pub range: std::ops::Range<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ElemSegment {
    pub mode: SegmentMode,
    pub ty: ValType,
    pub items: Vec<ConstExpr>,
}

/// The WebAssembly-level description of a module. Index spaces put imports first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ModuleInfo {
    pub types: Vec<FuncType>,
    pub imports: Vec<Import>,
    /// Type index of every function, imported ones first.
    pub funcs: Vec<u32>,
    pub tables: Vec<TableType>,
    pub memories: Vec<MemoryType>,
    pub globals: Vec<GlobalType>,
    /// Initialisers of the defined globals (after the imported ones).
    pub global_inits: Vec<ConstExpr>,
    pub exports: Vec<Export>,
    pub start: Option<u32>,
    pub elems: Vec<ElemSegment>,
    pub datas: Vec<DataSegment>,
    /// Extended constant expressions that read globals, by [`ConstExpr::Extended`] index.
    pub extended: Vec<Vec<ConstOp>>,
    pub imported_funcs: u32,
    pub imported_tables: u32,
    pub imported_memories: u32,
    pub imported_globals: u32,
    /// Function names from the name section, by ascending function index (for backtraces).
    pub names: Vec<FuncName>,
    /// Whether the code charges fuel (see `VmOffsets::FUEL`).
    pub metered: bool,
    /// Whether the code sets write marks (see [`MARK_SHIFT`]); without them, a memory it
    /// writes is reset by reading it.
    pub marks_writes: bool,
    /// Whether the code compares every memory access with the memory's current length
    /// (`VmMemory::length`) instead of relying on the inaccessible pages past it alone; a memory
    /// that only such code reaches may keep pages past its length accessible (see the
    /// runtime's `memory` module).
    pub checks_bounds: bool,
    /// Set when the start function ran at compile time: the memories, data segments and
    /// global initialisers describe the state it left, and instantiation does not run it.
    pub snapshot: Option<StartSnapshot>,
}

/// What running a module's start function at compile time recorded (see
/// [`ModuleInfo::snapshot`]), so that a metered instantiation pays exactly what the run would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct StartSnapshot {
    /// The fuel the run consumed.
    pub fuel_cost: u64,
    /// The least fuel with which the run completes (it checks fuel only at function entries
    /// and loop headers, so this may be less than the cost); with less it traps `OutOfFuel`.
    pub fuel_needed: u64,
}

/// A function's name from the module's name section.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct FuncName {
    pub func: u32,
    pub name: String,
}

impl ModuleInfo {
    /// The defined functions whose funcref anything can see (module indices, sorted): those in
    /// element segments, global initialisers and exports, and the start function. WebAssembly's
    /// `ref.func` may only name functions of the first three, and direct calls never read a
    /// funcref, so only these (and the imported functions) have a funcref in the vmctx (see
    /// [`FuncrefLayout`]: the eager ones are this set, for the module without the segments a
    /// lazy table absorbed).
    pub fn escaping(&self) -> Vec<u32> {
        self.escaping_but(&[])
    }

    /// As [`ModuleInfo::escaping`], leaving out the element segments `covered` marks.
    pub fn escaping_but(&self, covered: &[bool]) -> Vec<u32> {
        let kept = |i: &usize| !covered.get(*i).copied().unwrap_or(false);
        let refs = (self.elems.iter().enumerate())
            .filter(|(i, _)| kept(i))
            .flat_map(|(_, e)| &e.items);
        let mut funcs: Vec<u32> = refs
            .chain(&self.global_inits)
            .filter_map(|e| match e {
                ConstExpr::RefFunc(f) => Some(*f),
                _ => None,
            })
            .chain(self.exports.iter().filter_map(|e| match e.index {
                EntityIndex::Func(f) => Some(f),
                _ => None,
            }))
            .chain(self.start)
            .filter(|&f| f >= self.imported_funcs)
            .collect();
        funcs.sort_unstable();
        funcs.dedup();
        funcs
    }

    pub fn func_type(&self, func: u32) -> &FuncType {
        &self.types[self.funcs[func as usize] as usize]
    }
    pub fn defined_funcs(&self) -> usize {
        self.funcs.len() - self.imported_funcs as usize
    }
}

/// The archived form is what the runtime reads, in place, from an artifact.
impl ArchivedModuleInfo {
    pub fn func_type(&self, func: u32) -> &ArchivedFuncType {
        &self.types[self.funcs[func as usize].to_native() as usize]
    }
    pub fn defined_funcs(&self) -> usize {
        self.funcs.len() - self.imported_funcs.to_native() as usize
    }
}

/// Why generated code trapped. Each trapping instruction in the text is listed with its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapKind {
    /// `unreachable` ran.
    Unreachable,
    /// A memory access or bulk memory operation out of bounds.
    MemoryOutOfBounds,
    /// `table.get`/`set` and bulk table operations out of bounds.
    TableOutOfBounds,
    /// `call_indirect` past the end of the table.
    UndefinedElement,
    /// `call_indirect` of a null element.
    IndirectCallToNull,
    /// `call_indirect` of a function of another type.
    BadSignature,
    /// Signed division overflow, or a float-to-integer conversion out of range.
    IntegerOverflow,
    /// Integer division or remainder by zero.
    IntegerDivisionByZero,
    /// Float-to-integer conversion of NaN.
    BadConversionToInteger,
    /// Wasm used more stack than it may.
    StackOverflow,
    /// A host function returned an error or panicked; the runtime holds the details.
    HostError,
    /// The store's epoch deadline passed (see the runtime's `interrupt`).
    Interrupted,
    /// The store's fuel ran out (see `VmOffsets::FUEL`).
    OutOfFuel,
}

impl TrapKind {
    /// Every kind, in the order of their stable codes ([`TrapKind::code`]).
    pub const ALL: [TrapKind; 13] = [
        TrapKind::Unreachable,
        TrapKind::MemoryOutOfBounds,
        TrapKind::TableOutOfBounds,
        TrapKind::UndefinedElement,
        TrapKind::IndirectCallToNull,
        TrapKind::BadSignature,
        TrapKind::IntegerOverflow,
        TrapKind::IntegerDivisionByZero,
        TrapKind::BadConversionToInteger,
        TrapKind::StackOverflow,
        TrapKind::HostError,
        TrapKind::Interrupted,
        TrapKind::OutOfFuel,
    ];

    /// A number for this kind that stays the same across builds (used in artifact files).
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&k| k == self).expect("listed") as u32
    }

    pub fn from_code(code: u32) -> Option<TrapKind> {
        Self::ALL.get(code as usize).copied()
    }

    /// The message the WebAssembly specification's tests expect.
    pub fn message(self) -> &'static str {
        match self {
            TrapKind::Unreachable => "unreachable",
            TrapKind::MemoryOutOfBounds => "out of bounds memory access",
            TrapKind::TableOutOfBounds => "out of bounds table access",
            TrapKind::UndefinedElement => "undefined element",
            TrapKind::IndirectCallToNull => "uninitialized element",
            TrapKind::BadSignature => "indirect call type mismatch",
            TrapKind::IntegerOverflow => "integer overflow",
            TrapKind::IntegerDivisionByZero => "integer divide by zero",
            TrapKind::BadConversionToInteger => "invalid conversion to integer",
            TrapKind::StackOverflow => "call stack exhausted",
            TrapKind::HostError => "host function error",
            TrapKind::Interrupted => "interrupted: the deadline passed",
            TrapKind::OutOfFuel => "all fuel consumed",
        }
    }
}

/// Where one defined function's code is in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncLoc {
    pub offset: u32,
    pub len: u32,
}

/// A runtime function that generated code calls by absolute address (Cranelift emits these
/// for float rounding when the CPU lacks SSE4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum LibCall {
    CeilF32,
    CeilF64,
    FloorF32,
    FloorF64,
    TruncF32,
    TruncF64,
    NearestF32,
    NearestF64,
    FmaF32,
    FmaF64,
}

/// A place in the text that the loader must patch: the 8-byte absolute address of `target`
/// plus `addend`, at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Reloc {
    pub offset: u32,
    pub target: LibCall,
    pub addend: i64,
}

/// What generated code assumes about the machine that runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Target {
    /// The architecture (`x86_64`).
    pub arch: String,
    /// CPU features the code may use, by Cranelift setting name (`has_avx2`, ...).
    pub cpu_features: Vec<String>,
    /// Everything else that changed the code: target triple and every compiler setting. Equal
    /// fingerprints mean equal code for equal input.
    pub fingerprint: String,
}

/// A module compiled to machine code: everything the runtime needs to load and instantiate it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompiledModule {
    pub info: ModuleInfo,
    /// What the code was generated for.
    pub target: Target,
    /// All code, position-independent: intra-module calls are resolved.
    pub text: Vec<u8>,
    /// Patches the loader applies (usually none).
    pub relocs: Vec<Reloc>,
    /// One per defined function, by index (the text lays them out in another order).
    pub funcs: Vec<FuncLoc>,
    /// Entry trampoline offset, one per type.
    pub trampolines: Vec<u32>,
    /// Host adapter offset, one per type.
    pub host_adapters: Vec<u32>,
    /// Trapping instructions (text offset, kind), sorted by offset.
    pub traps: Vec<(u32, TrapKind)>,
    /// Bytes of all data segments.
    pub data: Vec<u8>,
    /// The largest memory image the artifact may hold (a memory whose image would be larger
    /// gets its segments copied at instantiation); 0: no images.
    pub max_image_bytes: u64,
}

/// The default bound on one memory image in an artifact.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 64 << 20;

impl CompiledModule {
    /// The kind of trap raised by the instruction at `offset` in the text, if it is one.
    pub fn trap_at(&self, offset: u32) -> Option<TrapKind> {
        self.traps
            .binary_search_by_key(&offset, |(o, _)| *o)
            .ok()
            .map(|i| self.traps[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_static_only_for_constant_offsets_within_the_limit() {
        let at = |index, offset| SegmentMode::Active { index, offset };
        assert_eq!(
            at(0, ConstExpr::I32(6)).placement(0, 4, 10),
            Placement::Static(6..10)
        );
        assert_eq!(
            at(0, ConstExpr::I32(7)).placement(0, 4, 10),
            Placement::Dynamic
        );
        // -1 is offset 2^32 - 1, far past any limit, not a wrap to 3.
        assert_eq!(
            at(0, ConstExpr::I32(-1)).placement(0, 4, 10),
            Placement::Dynamic
        );
        assert_eq!(
            at(0, ConstExpr::GlobalGet(0)).placement(0, 0, 10),
            Placement::Dynamic
        );
        assert_eq!(
            at(1, ConstExpr::I32(0)).placement(0, 4, 10),
            Placement::Elsewhere
        );
        assert_eq!(
            SegmentMode::Passive.placement(0, 4, 10),
            Placement::Elsewhere
        );
    }

    /// Every signature of up to 4 types: its small id decodes back to it, and no two share one.
    #[test]
    fn small_ids_are_distinct_and_decode() {
        let all = ValType::ALL;
        let mut seqs: Vec<Vec<ValType>> = vec![vec![]];
        for _ in 0..4 {
            let longer: Vec<Vec<ValType>> = seqs
                .iter()
                .filter(|s| s.len() == seqs.last().unwrap().len())
                .flat_map(|s| all.iter().map(move |&t| [s.clone(), vec![t]].concat()))
                .collect();
            seqs.extend(longer);
        }
        let mut seen = std::collections::HashMap::new();
        for s in &seqs {
            for split in 0..=s.len() {
                let ty = FuncType {
                    params: s[..split].to_vec(),
                    results: s[split..].to_vec(),
                };
                let id = ty.small_id().unwrap();
                assert!(id < 1 << 30);
                assert_eq!(from_small_id(id).as_ref(), Some(&ty));
                assert_eq!(seen.insert(id, ty.clone()), None, "{ty:?}");
            }
        }
        let wide = FuncType {
            params: vec![ValType::I32; SMALL_SIGNATURE],
            results: vec![ValType::I64],
        };
        assert_eq!(wide.small_id(), None);
        // Two separators: not an id.
        assert!(from_small_id(1 | 1 << 6 | 1 << 12).is_none());
    }
}
