//! Differential fuzzing: random modules from `wasm-smith`, run in ephem and in a reference
//! engine (wasmtime, in this crate's tests and its `fuzz` example, where it is a
//! dev-dependency), and everything observable compared.
//!
//! A case is one seed. The seed makes a module ([`generate`]: ephem's feature set, SIMD on,
//! every loop and call bounded by a fuel global that `wasm-smith` threads through the code, NaNs
//! canonicalised), and a [`Plan`] of calls: every exported function on a few argument vectors
//! (zeros, then values drawn from the seed, edge values among them). Each engine gives an
//! [`Observation`]: whether instantiation trapped, each call's results or trap kind, and at the
//! end every exported global's value, memory's bytes and table's size. [`compare`] reports the
//! first difference. Floats are compared by class where both are NaN (the specification leaves
//! NaN bits open); everything else exactly.
//!
//! Real modules (built by toolchains for a host of their own) run the same way: what they
//! import is stubbed alike in both engines (functions trap with `HostError` when called;
//! memories, tables and globals are fresh zeroed ones of the declared types), and both engines
//! meter fuel ([`Ephem::metered`]), since nothing bounds their loops. Fuel costs differ
//! between engines, so a call that runs out of fuel in either ends what can be compared:
//! the calls before it are compared, the final state is not ([`Verdict::Agree`]'s
//! `unfinished`).
//!
//! [`Ephem::check_mutants`] feeds damaged copies of a module (truncated, bytes changed, bytes
//! inserted) to ephem's compiler and checks that its verdict is wasmparser's for the same
//! features and that nothing panics; the mutants that are valid also run, metered, so that
//! nothing they do crashes the host.

#![forbid(unsafe_code)]

use std::fmt;

use arbitrary::Unstructured;

/// A value as both engines can report it. References are only null or not (the engines'
/// pointers differ); floats are their bits.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    I32(u32),
    I64(u64),
    F32(u32),
    F64(u64),
    V128(u128),
    /// A null reference of either kind.
    Null,
    /// A non-null function reference.
    Func,
    /// A non-null host reference (never made by the plans, which pass only nulls).
    Extern,
    /// A non-null exception reference.
    Exn,
    /// A non-null GC value (a struct, an array, an `i31`, a host reference made an `anyref`).
    Any,
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        let nan32 = |b: u32| f32::from_bits(b).is_nan();
        let nan64 = |b: u64| f64::from_bits(b).is_nan();
        match (*self, *other) {
            (I32(a), I32(b)) => a == b,
            (I64(a), I64(b)) => a == b,
            (F32(a), F32(b)) => a == b || nan32(a) && nan32(b),
            (F64(a), F64(b)) => a == b || nan64(a) && nan64(b),
            (V128(a), V128(b)) => a == b,
            (Null, Null) | (Func, Func) | (Extern, Extern) | (Exn, Exn) | (Any, Any) => true,
            _ => false,
        }
    }
}

/// The value type of a parameter, as the plan needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    I32,
    I64,
    F32,
    F64,
    V128,
    FuncRef,
    ExternRef,
    /// Any other nullable reference (exceptions', GC's): the plans pass null.
    OtherRef,
}

/// Why execution stopped: ephem's trap kinds, which the reference's traps are mapped to (ephem's
/// `UndefinedElement`, a `call_indirect` past the table's end, counts as `TableOutOfBounds`, as
/// wasmtime reports it), or anything else with its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trap {
    Wasm(ephem::TrapKind),
    /// An exception no handler caught.
    Exception,
    /// An instantiation error that is not a trap, say.
    Other(String),
}

/// Whether a call or instantiation ended for want of a resource whose amount the engines
/// decide for themselves (fuel, whose costs differ; GC heap, whose bounds do): what follows is
/// not comparable.
pub fn exhausted<T>(r: Option<&Result<T, Trap>>) -> bool {
    use ephem::TrapKind::{GcHeapExhausted, OutOfFuel};
    matches!(r, Some(Err(Trap::Wasm(OutOfFuel | GcHeapExhausted))))
}

/// One call of the plan: an exported function and its arguments.
#[derive(Clone, Debug)]
pub struct Call {
    pub export: String,
    pub args: Vec<Value>,
}

/// The calls to make, in order, on one instance (or each in a fresh one: `fresh`).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub calls: Vec<Call>,
    /// Each call in a fresh instance, as ephem runs invocations; what state a call leaves is
    /// then observed after it (as a digest), and one call's running out of fuel does not end
    /// the comparison of the others.
    pub fresh: bool,
}

/// Everything one engine reports of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// `Err` when instantiation failed (the start function trapped, or a segment did not fit).
    pub instantiated: Result<(), Trap>,
    /// Per call of the plan (none when instantiation failed).
    pub calls: Vec<Result<Vec<Value>, Trap>>,
    /// On one instance: its exported state after the calls.
    pub state: State,
    /// With a fresh instance per call: a digest of the exported state each call left (none
    /// for a call whose instantiation failed).
    pub states: Vec<Option<[u8; 32]>>,
}

/// An instance's exported state: globals' values, memories' bytes, tables' sizes, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    pub globals: Vec<(String, Value)>,
    pub memories: Vec<(String, Vec<u8>)>,
    pub tables: Vec<(String, u32)>,
}

impl State {
    fn digest(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        for (name, v) in &self.globals {
            h.update(format!("{name}={v:?};").as_bytes());
        }
        for (name, bytes) in &self.memories {
            h.update(format!("{name}:{};", bytes.len()).as_bytes());
            h.update(bytes);
        }
        for (name, size) in &self.tables {
            h.update(format!("{name}#{size};").as_bytes());
        }
        *h.finalize().as_bytes()
    }
}

impl Observation {
    /// An observation of an instantiation that failed with `trap`.
    pub fn failed(trap: Trap) -> Observation {
        Observation {
            instantiated: Err(trap),
            ..Observation::made(Vec::new())
        }
    }

    /// An observation of an instance that was made, with the results of its `calls`; the
    /// exports are filled in after.
    pub fn made(calls: Vec<Result<Vec<Value>, Trap>>) -> Observation {
        Observation {
            instantiated: Ok(()),
            calls,
            state: State::default(),
            states: Vec::new(),
        }
    }

    /// How many calls returned or trapped.
    pub fn calls_made(&self) -> usize {
        self.calls.len()
    }
}

/// An engine under comparison. `Err` means it refused the module (with its message).
pub trait Observer {
    fn observe(&self, wasm: &[u8], plan: &Plan) -> Result<Observation, String>;
}

/// What an engine does for a case; [`Observer`] follows from it, the same for every engine.
pub trait Side {
    type Module;
    /// An instance with its store.
    type Instance;
    /// The module, or why the engine refused it.
    fn compile(&self, wasm: &[u8]) -> Result<Self::Module, String>;
    /// A fresh store and instance (imports stubbed, fuel given if metered).
    fn instantiate(&self, module: &Self::Module) -> Result<Self::Instance, Trap>;
    /// One call (refuelled first if metered); `Err` if the plan does not fit the module.
    fn call(&self, instance: &mut Self::Instance, call: &Call) -> Result<CallResult, String>;
    fn state(&self, instance: &mut Self::Instance) -> State;
}

/// What a call returned, or why it trapped.
pub type CallResult = Result<Vec<Value>, Trap>;

impl<S: Side> Observer for S {
    fn observe(&self, wasm: &[u8], plan: &Plan) -> Result<Observation, String> {
        let module = self.compile(wasm)?;
        if plan.fresh {
            let mut observation = Observation::made(Vec::new());
            for call in &plan.calls {
                let (result, state) = match self.instantiate(&module) {
                    Ok(mut instance) => {
                        let result = self.call(&mut instance, call)?;
                        (result, Some(self.state(&mut instance).digest()))
                    }
                    Err(trap) => (Err(trap), None),
                };
                observation.calls.push(result);
                observation.states.push(state);
            }
            return Ok(observation);
        }
        let mut instance = match self.instantiate(&module) {
            Ok(i) => i,
            Err(trap) => return Ok(Observation::failed(trap)),
        };
        let calls = (plan.calls.iter())
            .map(|call| self.call(&mut instance, call))
            .collect::<Result<_, _>>()?;
        Ok(Observation {
            state: self.state(&mut instance),
            ..Observation::made(calls)
        })
    }
}

/// The stack both engines get, so that a deep recursion overflows in both or in neither (the
/// fuel global bounds recursion far below it).
pub const MAX_WASM_STACK: usize = 1 << 20;

/// The fuel `wasm-smith` gives each module: every loop iteration and call takes one, and once
/// it is gone every function traps with `unreachable` (so the modules always terminate).
const MODULE_FUEL: u32 = 1000;

/// ephem's feature set for `wasm-smith`: WebAssembly 2.0 with SIMD, and the 3.0 proposals
/// ephem implements; memories and tables with a maximum, so that growing them is bounded by the
/// module in both engines alike.
pub fn config() -> wasm_smith::Config {
    wasm_smith::Config {
        simd_enabled: true,
        relaxed_simd_enabled: true,
        tail_call_enabled: true,
        extended_const_enabled: true,
        max_memories: 2,
        bulk_memory_enabled: true,
        reference_types_enabled: true,
        multi_value_enabled: true,
        saturating_float_to_int_enabled: true,
        sign_extension_ops_enabled: true,
        gc_enabled: true,
        exceptions_enabled: true,
        memory64_enabled: true,
        threads_enabled: true,
        custom_page_sizes_enabled: true,
        wide_arithmetic_enabled: true,
        max_imports: 0,
        export_everything: true,
        canonicalize_nans: true,
        memory_max_size_required: true,
        table_max_size_required: true,
        max_memory32_bytes: 4 << 16,
        max_memory64_bytes: 4 << 16,
        max_table_elements: 1000,
        min_types: 1,
        min_funcs: 3,
        max_funcs: 40,
        max_instructions: 400,
        max_data_segments: 20,
        max_element_segments: 20,
        ..wasm_smith::Config::default()
    }
}

/// A deterministic byte stream from `seed` (SplitMix64), as `wasm-smith` and the plans take
/// their choices from bytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The module of case `seed`.
pub fn generate(seed: u64) -> anyhow::Result<Vec<u8>> {
    let data = bytes(seed, 64 << 10);
    let mut u = Unstructured::new(&data);
    let mut module = wasm_smith::Module::new(config(), &mut u)?;
    module.ensure_termination(MODULE_FUEL)?;
    bound_waits(&module.to_bytes())
}

/// `wasm` with every `memory.atomic.wait32`/`wait64`'s timeout taken modulo 1024 ns: a wait
/// on a shared memory whose value matches returns only when it times out (nothing else runs
/// to notify it), and `wasm-smith`'s timeouts run to years. Both engines run the same bounded
/// module, and such a wait then times out in both.
pub fn bound_waits(wasm: &[u8]) -> anyhow::Result<Vec<u8>> {
    use wasm_encoder::reencode::{Error, Reencode, RoundtripReencoder};

    struct Bound;
    impl Reencode for Bound {
        type Error = std::convert::Infallible;
        fn parse_function_body(
            &mut self,
            code: &mut wasm_encoder::CodeSection,
            func: wasmparser::FunctionBody<'_>,
        ) -> Result<(), Error<Self::Error>> {
            let mut f = self.new_function_with_parsed_locals(&func)?;
            let mut reader = func.get_operators_reader()?;
            while !reader.eof() {
                let op = reader.read()?;
                if matches!(
                    op,
                    wasmparser::Operator::MemoryAtomicWait32 { .. }
                        | wasmparser::Operator::MemoryAtomicWait64 { .. }
                ) {
                    f.instruction(&wasm_encoder::Instruction::I64Const(1024));
                    f.instruction(&wasm_encoder::Instruction::I64RemU);
                }
                f.instruction(&RoundtripReencoder.instruction(op)?);
            }
            code.function(&f);
            Ok(())
        }
    }
    let mut module = wasm_encoder::Module::new();
    Bound
        .parse_core_module(&mut module, wasmparser::Parser::new(0), wasm)
        .map_err(|e| anyhow::anyhow!("bounding waits: {e:?}"))?;
    Ok(module.finish())
}

/// The calls of case `seed` on `wasm`: each exported function (in export order) with zeros,
/// then with two argument vectors drawn from the seed. Derived from the module itself, so that
/// a shrunk module gets the plan of its own exports.
pub fn plan(wasm: &[u8], seed: u64) -> Plan {
    let data = bytes(seed ^ 0x5eed, 16 << 10);
    let mut u = Unstructured::new(&data);
    let mut plan = Plan::default();
    for (export, params) in exported_functions(wasm) {
        for round in 0..3 {
            let args = params
                .iter()
                .map(|&t| if round == 0 { zero(t) } else { draw(&mut u, t) })
                .collect();
            plan.calls.push(Call {
                export: export.clone(),
                args,
            });
        }
    }
    plan
}

fn zero(t: Type) -> Value {
    match t {
        Type::I32 => Value::I32(0),
        Type::I64 => Value::I64(0),
        Type::F32 => Value::F32(0),
        Type::F64 => Value::F64(0),
        Type::V128 => Value::V128(0),
        Type::FuncRef | Type::ExternRef | Type::OtherRef => Value::Null,
    }
}

/// A value of `t`, often an edge value (0, ±1, extremes, infinities, NaN, -0).
fn draw(u: &mut Unstructured<'_>, t: Type) -> Value {
    let edge = u.ratio(1, 3).unwrap_or(false);
    let pick = |u: &mut Unstructured<'_>, edges: &[u64]| -> u64 {
        let i = u.choose_index(edges.len()).unwrap_or(0);
        edges[i]
    };
    match t {
        Type::I32 if edge => {
            Value::I32(pick(u, &[0, 1, u32::MAX as u64, 1 << 31, 0x7fff_ffff]) as u32)
        }
        Type::I32 => Value::I32(u.arbitrary().unwrap_or(7)),
        Type::I64 if edge => Value::I64(pick(u, &[0, 1, u64::MAX, 1 << 63, i64::MAX as u64])),
        Type::I64 => Value::I64(u.arbitrary().unwrap_or(7)),
        Type::F32 if edge => Value::F32(pick(
            u,
            &[
                0x8000_0000,
                0x7f80_0000,
                0xff80_0000,
                0x7fc0_0000,
                0x3f80_0000,
                0x4f00_0000,
            ],
        ) as u32),
        Type::F32 => Value::F32(u.arbitrary().unwrap_or(0)),
        Type::F64 if edge => Value::F64(pick(
            u,
            &[
                1 << 63,
                0x7ff0_0000_0000_0000,
                0xfff0_0000_0000_0000,
                0x7ff8_0000_0000_0000,
                0x3ff0_0000_0000_0000,
                0x43e0_0000_0000_0000,
            ],
        )),
        Type::F64 => Value::F64(u.arbitrary().unwrap_or(0)),
        Type::V128 => Value::V128(u.arbitrary().unwrap_or(0)),
        Type::FuncRef | Type::ExternRef | Type::OtherRef => Value::Null,
    }
}

/// The exported functions of `wasm` with their parameter types, in export order (none if the
/// module cannot be read).
fn exported_functions(wasm: &[u8]) -> Vec<(String, Vec<Type>)> {
    use wasmparser::{ExternalKind, Payload, TypeRef};
    let mut types = Vec::new();
    let mut funcs = Vec::new();
    let mut exports = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else {
            return Vec::new();
        };
        match payload {
            Payload::TypeSection(r) => {
                for group in r.into_iter().flatten() {
                    for sub in group.types() {
                        // (A struct or array type is no function's: no parameters to plan.)
                        let params = match &sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => f.params(),
                            _ => &[],
                        };
                        types.push(params.iter().map(|&t| val_type(t)).collect::<Vec<_>>());
                    }
                }
            }
            Payload::ImportSection(r) => {
                for import in r.into_imports().flatten() {
                    if let TypeRef::Func(t) = import.ty {
                        funcs.push(t);
                    }
                }
            }
            Payload::FunctionSection(r) => funcs.extend(r.into_iter().flatten()),
            Payload::ExportSection(r) => {
                for e in r.into_iter().flatten() {
                    if e.kind == ExternalKind::Func {
                        exports.push((e.name.to_owned(), e.index));
                    }
                }
            }
            _ => {}
        }
    }
    exports
        .into_iter()
        .filter_map(|(name, f)| {
            let ty = types.get(*funcs.get(f as usize)? as usize)?;
            Some((name, ty.iter().copied().collect::<Option<Vec<_>>>()?))
        })
        .collect()
}

fn val_type(t: wasmparser::ValType) -> Option<Type> {
    Some(match t {
        wasmparser::ValType::I32 => Type::I32,
        wasmparser::ValType::I64 => Type::I64,
        wasmparser::ValType::F32 => Type::F32,
        wasmparser::ValType::F64 => Type::F64,
        wasmparser::ValType::V128 => Type::V128,
        wasmparser::ValType::Ref(r) if r.is_func_ref() => Type::FuncRef,
        wasmparser::ValType::Ref(r) if r.is_extern_ref() => Type::ExternRef,
        wasmparser::ValType::Ref(r) if r.is_nullable() => Type::OtherRef,
        wasmparser::ValType::Ref(_) => return None,
    })
}

/// A difference between two observations of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference(pub String);

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The calls of the plan both observations can be compared on: those that ran out of fuel or
/// GC heap in neither engine (see [`exhausted`]) and, on one instance, only those before the
/// first that did (what followed it is not comparable).
pub fn comparable(plan: &Plan, ephem: &Observation, reference: &Observation) -> Vec<usize> {
    let fed = |i: &usize| !exhausted(ephem.calls.get(*i)) && !exhausted(reference.calls.get(*i));
    let n = ephem.calls.len().min(reference.calls.len());
    if plan.fresh {
        (0..n).filter(fed).collect()
    } else {
        (0..n).take_while(fed).collect()
    }
}

/// The first difference between ephem's observation and the reference's, if any.
pub fn compare(plan: &Plan, ephem: &Observation, reference: &Observation) -> Option<Difference> {
    let diff = |what: String| Some(Difference(what));
    if exhausted(Some(&ephem.instantiated)) || exhausted(Some(&reference.instantiated)) {
        return None;
    }
    if ephem.instantiated != reference.instantiated {
        return diff(format!(
            "instantiation: ephem {:?}, reference {:?}",
            ephem.instantiated, reference.instantiated
        ));
    }
    let compared = comparable(plan, ephem, reference);
    for &i in &compared {
        let (a, b) = (&ephem.calls[i], &reference.calls[i]);
        let call = &plan.calls[i];
        if a != b {
            return diff(format!(
                "call {i} ({} {:?}): ephem {a:?}, reference {b:?}",
                call.export, call.args
            ));
        }
        if ephem.states.get(i) != reference.states.get(i) {
            return diff(format!(
                "call {i} ({} {:?}): the state it left differs",
                call.export, call.args
            ));
        }
    }
    if !plan.fresh && compared.len() < ephem.calls.len().max(reference.calls.len()) {
        return None;
    }
    if ephem.calls.len() != reference.calls.len() {
        return diff(format!(
            "ephem made {} calls, the reference {}",
            ephem.calls.len(),
            reference.calls.len()
        ));
    }
    let (ours, theirs) = (&ephem.state, &reference.state);
    if ours.globals != theirs.globals {
        return diff(format!(
            "globals: ephem {:?}, reference {:?}",
            ours.globals, theirs.globals
        ));
    }
    if ours.tables != theirs.tables {
        return diff(format!(
            "tables: ephem {:?}, reference {:?}",
            ours.tables, theirs.tables
        ));
    }
    for ((name, a), (_, b)) in ours.memories.iter().zip(&theirs.memories) {
        if a != b {
            let at = a.iter().zip(b).position(|(x, y)| x != y);
            return diff(format!(
                "memory {name:?}: ephem {} bytes, reference {}; first difference at {at:?}",
                a.len(),
                b.len()
            ));
        }
    }
    if ours.memories.len() != theirs.memories.len() {
        return diff("a different number of exported memories".into());
    }
    None
}

/// The outcome of one case.
#[derive(Debug)]
pub enum Verdict {
    /// Both engines agree; this many calls were compared. `unfinished`: a call ran out of fuel
    /// in one of them, and what followed it was not compared.
    Agree { calls: usize, unfinished: bool },
    /// Both refused the module (never expected of `wasm-smith`'s valid modules).
    BothRefused,
    /// They disagree.
    Differ(Difference),
}

/// Runs `wasm` with `plan` on both engines and compares.
pub fn run_case(
    wasm: &[u8],
    plan: &Plan,
    ephem: &dyn Observer,
    reference: &dyn Observer,
) -> Verdict {
    match (ephem.observe(wasm, plan), reference.observe(wasm, plan)) {
        (Ok(a), Ok(b)) => match compare(plan, &a, &b) {
            None => {
                let calls = comparable(plan, &a, &b).len();
                let starved = |o: &Observation| exhausted(Some(&o.instantiated));
                let unfinished = calls < a.calls_made() || starved(&a) || starved(&b);
                Verdict::Agree { calls, unfinished }
            }
            Some(d) => Verdict::Differ(d),
        },
        (Err(_), Err(_)) => Verdict::BothRefused,
        (Err(e), Ok(_)) => Verdict::Differ(Difference(format!("only ephem refused it: {e}"))),
        (Ok(_), Err(e)) => {
            Verdict::Differ(Difference(format!("only the reference refused it: {e}")))
        }
    }
}

/// Runs `plan`'s calls on one instance of `wasm`, drops it, and instantiates the module again
/// on the same side, whose engine hands the second instance the memory slots the first
/// released: the second's exported memories must be byte for byte what the first's were before
/// its calls, whatever those calls wrote. `Ok(None)` when they are (or the module does not
/// instantiate), else the first memory and offset that differ.
pub fn leftovers<S: Side>(side: &S, wasm: &[u8], plan: &Plan) -> Result<Option<String>, String> {
    let module = side.compile(wasm)?;
    let Ok(mut first) = side.instantiate(&module) else {
        return Ok(None);
    };
    let before = side.state(&mut first).memories;
    for call in &plan.calls {
        // What it returned or how it trapped is the comparison's business, not this check's.
        let _ = side.call(&mut first, call)?;
    }
    drop(first);
    let mut second = side
        .instantiate(&module)
        .map_err(|t| format!("the second instantiation failed: {t:?}"))?;
    let after = side.state(&mut second).memories;
    Ok(before.iter().zip(&after).find_map(|((name, a), (_, b))| {
        let at = a.iter().zip(b).position(|(x, y)| x != y);
        let at = at.or_else(|| (a.len() != b.len()).then_some(a.len().min(b.len())))?;
        Some(format!("memory {name:?} differs at byte {at}"))
    }))
}

/// Shrinks `wasm` (with `wasm-shrink`) to a smaller module on which the engines still
/// disagree, with the plan of case `seed` derived anew for each candidate.
pub fn shrink(
    wasm: &[u8],
    seed: u64,
    ephem: &dyn Observer,
    reference: &dyn Observer,
) -> anyhow::Result<Vec<u8>> {
    let info =
        wasm_shrink::WasmShrink::default()
            .attempts(200)
            .run(wasm.to_vec(), |candidate| {
                let plan = plan(candidate, seed);
                Ok(matches!(
                    run_case(candidate, &plan, ephem, reference),
                    Verdict::Differ(_)
                ))
            })?;
    Ok(info.output)
}

/// The ephem side: a fresh store and instance per case, as the product runs.
pub struct Ephem {
    engine: ephem::Engine,
    compiler: ephem::Compiler,
    /// For the damaged modules, which run metered ([`Ephem::check_mutants`]).
    metered: ephem::Compiler,
    /// Fuel for instantiation and each call, if cases run metered.
    fuel: Option<u64>,
    /// GC collections the calls made (see [`Ephem::collections`]).
    collections: std::cell::Cell<u64>,
}

impl Ephem {
    pub fn new() -> anyhow::Result<Ephem> {
        let engine = ephem::Engine::with_config(ephem::EngineConfig {
            max_wasm_stack: Some(MAX_WASM_STACK),
            // Collections after every kilobyte, so that generated code meets the collector.
            first_gc_heap_bytes: Some(1 << 10),
            ..ephem::EngineConfig::default()
        })?;
        Ok(Ephem {
            engine,
            compiler: ephem::Compiler::new()?,
            metered: ephem::Compiler::new()?.with_fuel(),
            fuel: None,
            collections: std::cell::Cell::new(0),
        })
    }

    /// How many GC collections the calls so far made: whether generated modules reach the
    /// collector at all.
    pub fn collections(&self) -> u64 {
        self.collections.get()
    }

    /// An ephem side whose cases run metered, with `fuel` for instantiation and for each call
    /// (for real modules, whose loops nothing else bounds).
    pub fn metered(fuel: u64) -> anyhow::Result<Ephem> {
        Ok(Ephem {
            fuel: Some(fuel),
            ..Ephem::new()?
        })
    }
}

impl Side for Ephem {
    type Module = ephem::InstancePre<()>;
    type Instance = (ephem::Store<()>, ephem::Instance);

    fn compile(&self, wasm: &[u8]) -> Result<Self::Module, String> {
        let compiler = match self.fuel {
            Some(_) => &self.metered,
            None => &self.compiler,
        };
        let module =
            ephem::compile_with(compiler, &self.engine, wasm).map_err(|e| e.to_string())?;
        let mut linker = ephem::Linker::new(&self.engine);
        (linker.define_unknown_imports_as_traps(&module)).map_err(|e| e.to_string())?;
        linker.instantiate_pre(&module).map_err(|e| e.to_string())
    }

    fn instantiate(&self, pre: &Self::Module) -> Result<Self::Instance, Trap> {
        let mut store = ephem::Store::new(&self.engine, ());
        if let Some(fuel) = self.fuel {
            store.set_fuel(fuel).unwrap();
        }
        match pre.instantiate(&mut store) {
            Ok(instance) => Ok((store, instance)),
            Err(e) => Err(ephem_trap(&e)),
        }
    }

    fn call(
        &self,
        (store, instance): &mut Self::Instance,
        call: &Call,
    ) -> Result<CallResult, String> {
        use ephem::Val;
        let func = instance
            .get_func(&mut *store, &call.export)
            .ok_or_else(|| format!("no function {}", call.export))?;
        let ty = func.ty(&*store);
        let args: Vec<Val> = (call.args.iter().zip(&ty.params))
            .map(|(a, &t)| match *a {
                Value::I32(x) => Val::I32(x as i32),
                Value::I64(x) => Val::I64(x as i64),
                Value::F32(x) => Val::F32(x),
                Value::F64(x) => Val::F64(x),
                Value::V128(x) => Val::V128(x),
                _ => Val::default_for(t),
            })
            .collect();
        let mut results: Vec<Val> = ty.results.iter().map(|&t| Val::default_for(t)).collect();
        if let Some(fuel) = self.fuel {
            store.set_fuel(fuel).unwrap();
        }
        let before = store.gc_collections();
        let outcome = func.call(&mut *store, &args, &mut results);
        (self.collections).set(self.collections.get() + store.gc_collections() - before);
        Ok(match outcome {
            Ok(()) => Ok(results.iter().map(ephem_value).collect()),
            Err(e) => Err(ephem_trap(&e)),
        })
    }

    fn state(&self, (store, instance): &mut Self::Instance) -> State {
        use ephem::Extern;
        let mut state = State::default();
        for (name, export) in instance.exports(&mut *store) {
            match export {
                Extern::Global(g) => state.globals.push((name, ephem_value(&g.get(&*store)))),
                Extern::Memory(m) => state.memories.push((name, m.data(&*store).to_vec())),
                Extern::Table(t) => state.tables.push((name, t.size(&*store))),
                // (Instances export shared memories as memories.)
                Extern::Func(_) | Extern::Tag(_) | Extern::SharedMemory(_) => {}
            }
        }
        state
    }
}

fn ephem_value(v: &ephem::Val) -> Value {
    use ephem::Val;
    match *v {
        Val::I32(x) => Value::I32(x as u32),
        Val::I64(x) => Value::I64(x as u64),
        Val::F32(x) => Value::F32(x),
        Val::F64(x) => Value::F64(x),
        Val::V128(x) => Value::V128(x),
        Val::FuncRef(f) => f.map_or(Value::Null, |_| Value::Func),
        Val::ExternRef(r) => r.map_or(Value::Null, |_| Value::Extern),
        Val::ExnRef(e) => e.map_or(Value::Null, |_| Value::Exn),
        Val::AnyRef(r) => r.map_or(Value::Null, |_| Value::Any),
    }
}

fn ephem_trap(e: &ephem::Error) -> Trap {
    if let ephem::Error::Exception(_) = e {
        return Trap::Exception;
    }
    match e.trap().map(|t| t.kind) {
        Some(ephem::TrapKind::UndefinedElement) => Trap::Wasm(ephem::TrapKind::TableOutOfBounds),
        Some(kind) => Trap::Wasm(kind),
        None => Trap::Other(e.to_string()),
    }
}

/// What [`Ephem::check_mutants`] found.
#[derive(Debug, Default)]
pub struct MutantStats {
    /// Mutants fed to the compiler.
    pub checked: usize,
    /// Of those, valid ones (compiled and run).
    pub valid: usize,
}

impl Ephem {
    /// Feeds `count` damaged copies of `wasm` (drawn from `seed`) to ephem: its compiler's verdict
    /// must be wasmparser's for ephem's features, nothing may panic, and the valid mutants run every
    /// zero-argument export metered (100 000 fuel each), so that none can hang the check. `Err`
    /// names the first mutant whose verdict differs.
    pub fn check_mutants(
        &self,
        wasm: &[u8],
        seed: u64,
        count: usize,
    ) -> Result<MutantStats, String> {
        let data = bytes(seed ^ 0x0bad, 4 << 10);
        let mut u = Unstructured::new(&data);
        let features = ephem_compiler::features(ephem::Proposals::ALL);
        let mut stats = MutantStats::default();
        for _ in 0..count {
            let mut m = wasm.to_vec();
            if m.is_empty() {
                break;
            }
            match u.int_in_range(0..=2u8).unwrap_or(0) {
                0 => m.truncate(u.choose_index(m.len()).unwrap_or(0)),
                1 => {
                    for _ in 0..u.int_in_range(1..=4).unwrap_or(1) {
                        let i = u.choose_index(m.len()).unwrap_or(0);
                        m[i] = u.arbitrary().unwrap_or(0xff);
                    }
                }
                _ => {
                    let i = u.choose_index(m.len()).unwrap_or(0);
                    let b: u8 = u.arbitrary().unwrap_or(0);
                    m.insert(i, b);
                }
            }
            let valid = wasmparser::Validator::new_with_features(features)
                .validate_all(&m)
                .is_ok();
            let compiled = ephem::compile_with(&self.metered, &self.engine, &m);
            stats.checked += 1;
            match (valid, compiled) {
                (true, Ok(module)) => {
                    stats.valid += 1;
                    run_metered(&self.engine, &module);
                }
                (false, Err(_)) => {}
                (true, Err(e)) => return Err(format!("a valid mutant was refused: {e}")),
                (false, Ok(_)) => return Err("an invalid mutant compiled".into()),
            }
        }
        Ok(stats)
    }
}

/// Instantiates `compiled` and calls each export that takes nothing, with fuel; errors and
/// traps are expected and ignored (the check is that the host survives).
fn run_metered(engine: &ephem::Engine, module: &ephem::Module) {
    let mut store = ephem::Store::new(engine, ());
    store.set_fuel(100_000).unwrap();
    let Ok(instance) = ephem::Instance::new(&mut store, module, &[]) else {
        return;
    };
    for (_, export) in instance.exports(&mut store) {
        let Some(func) = export.into_func() else {
            continue;
        };
        let ty = func.ty(&store);
        if !ty.params.is_empty() {
            continue;
        }
        let mut results: Vec<_> = ty
            .results
            .iter()
            .map(|&t| ephem::Val::default_for(t))
            .collect();
        store.set_fuel(100_000).unwrap();
        let _ = func.call(&mut store, &[], &mut results);
    }
}
