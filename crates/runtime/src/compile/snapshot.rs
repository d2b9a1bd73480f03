//! Start functions run once, when the module is compiled, instead of at every instantiation.
//!
//! A start function that computes (AssemblyScript's runtime set-up allocates and zeroes its
//! heap there) costs every fresh instance the same work. When the start function can only
//! have had one outcome, the compiler runs it once and writes what it left (memories, mutable
//! globals) as the module's initial state: the memory images and global initialisers of the
//! artifact. Instantiation then skips it ([`ephem_module::ModuleInfo::snapshot`]).
//!
//! One outcome means the run read nothing from outside and left nothing the snapshot cannot
//! hold:
//! - the module imports no memory, table or global (the start could read or write them), and
//!   has no tags (whether two imported tags are one, and the engine's bound on exceptions,
//!   are known only at run time);
//! - the run calls no imported function (every import is a trap during the run; a run that
//!   traps, for this or any reason, is not snapshotted, and instantiation runs it as before);
//! - no code of the module can change a table, drop a segment or initialise from a passive
//!   one (`table.set/grow/fill/copy/init`, `elem.drop`, `data.drop`, `memory.init`), and no
//!   defined mutable global holds a reference: the snapshot holds memories and numbers;
//! - it ends within [`RUN_LIMIT`] (interrupted by a deadline otherwise) and within
//!   [`RUN_STACK`] of stack, less than any engine gives wasm, so that it cannot have
//!   overflowed where a real instantiation would not;
//! - its memories stay within [`MAX_MEMORY`] together: a `memory.grow` past that is refused
//!   during the run, and a run that saw a refusal is not snapshotted, so that no growth failed
//!   in the run that could succeed in an engine (and so that an artifact cannot be made huge
//!   from a small module).
//!
//! Metered modules stay exact: the run's fuel cost is recorded, with the least fuel the run
//! completes with (found by search: fuel is checked only at function entries and loop
//! headers, so a run may end in debt), and instantiation charges the one or traps
//! `OutOfFuel` below the other, as running the start function would.
//!
//! What differs from running it each time: a memory the start function grew is created at its
//! grown size, so a store's limiter is asked once for that size rather than for the declared
//! one and then the growth; and the module's memory type reports the grown size as its
//! minimum, as the instance's memory would after the start function.

use std::sync::mpsc;
use std::time::Duration;

use crate::{DefinedState, Engine, EngineConfig, Linker, Module, ResourceLimiter, Store, TrapKind};
use ephem_module::{
    CompiledModule, ConstExpr, DataSegment, GlobalType, SegmentMode, StartSnapshot, ValType,
};
use wasmparser::{Operator, Parser, Payload};

/// The longest a start function may run at compile time to be snapshotted.
const RUN_LIMIT: Duration = Duration::from_millis(500);

/// The stack a start function may use at compile time to be snapshotted.
const RUN_STACK: usize = 64 << 10;

/// The most memory a snapshotted start function may leave.
const MAX_MEMORY: usize = 64 << 20;

/// Zero runs at least this long split the snapshot's data segments.
const ZERO_GAP: usize = 64;

/// `compiled` with its start function's effects as its initial state, if they can be known at
/// compile time (see the module documentation); otherwise `compiled` as it was. `wasm` is the
/// binary it was compiled from.
pub(crate) fn apply(compiled: CompiledModule, wasm: &[u8]) -> CompiledModule {
    let info = &compiled.info;
    if info.start.is_none()
        || info.snapshot.is_some()
        || info.imported_memories + info.imported_tables + info.imported_globals > 0
        // What exceptions do depends on which tags the imports are (one tag imported twice
        // catches as one) and on the engine's bound on exceptions: known only at run time.
        || !info.tags.is_empty()
        || holds_references(&info.globals[info.imported_globals as usize..])
        // GC objects live in the store's heap, which no snapshot keeps.
        || info.types.iter().any(|t| t.as_func().is_none())
        || !only_pure_operators(wasm)
    {
        return compiled;
    }
    match run(&compiled) {
        Some((state, snapshot)) => with_state(compiled, state, snapshot),
        None => compiled,
    }
}

fn holds_references(globals: &[GlobalType]) -> bool {
    globals.iter().any(|g| g.mutable && g.ty.is_ref())
}

/// Whether no function of `wasm` changes a table or a segment's state (see the module
/// documentation). Anything it cannot read counts as such a change.
fn only_pure_operators(wasm: &[u8]) -> bool {
    let scan = || -> Result<bool, wasmparser::BinaryReaderError> {
        for payload in Parser::new(0).parse_all(wasm) {
            let Payload::CodeSectionEntry(body) = payload? else {
                continue;
            };
            let mut ops = body.get_operators_reader()?;
            while !ops.eof() {
                if matches!(
                    ops.read()?,
                    Operator::TableSet { .. }
                        | Operator::TableGrow { .. }
                        | Operator::TableFill { .. }
                        | Operator::TableCopy { .. }
                        | Operator::TableInit { .. }
                        | Operator::ElemDrop { .. }
                        | Operator::DataDrop { .. }
                        | Operator::MemoryInit { .. }
                ) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    };
    scan().unwrap_or(false)
}

/// Runs the start function in an engine of its own (so that its deadline touches no one
/// else's epoch): the state it left and what it cost, or `None` if it trapped, called an
/// import, or ran out of time or stack.
fn run(compiled: &CompiledModule) -> Option<(DefinedState, StartSnapshot)> {
    let engine = Engine::with_config(EngineConfig {
        max_wasm_stack: Some(RUN_STACK),
        ..EngineConfig::default()
    })
    .ok()?;
    let module = Module::from_compiled(&engine, compiled).ok()?;
    let mut linker = Linker::new(&engine);
    linker.define_unknown_imports_as_traps(&module).ok()?;
    let pre = linker.instantiate_pre(&module).ok()?;
    // One tick of the engine's epoch is the whole time allowed.
    let (stop, stopped) = mpsc::channel::<()>();
    let timer = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(RUN_LIMIT) {
                engine.increment_epoch();
            }
        })
    };
    // A run (with `fuel`, metered): the state it left and the fuel left; or the kind of its
    // trap, `None` if the memory bound refused a growth or it failed otherwise.
    let attempt = |fuel: Option<u64>| -> Result<(DefinedState, u64), Option<TrapKind>> {
        let mut store = Store::new(&engine, Bound::default());
        store.limiter(|b| b);
        store.set_epoch_deadline(1);
        if let Some(f) = fuel {
            store.set_fuel(f).unwrap();
        }
        let instance = pre.instantiate(&mut store);
        if store.data().refused {
            return Err(None);
        }
        let instance = instance.map_err(|e| e.trap().map(|t| t.kind))?;
        let left = store.get_fuel().unwrap_or(0);
        Ok((instance.defined_state(&store), left))
    };
    let outcome = (|| {
        if !compiled.info.metered {
            let (state, _) = attempt(None).ok()?;
            let free = StartSnapshot {
                fuel_cost: 0,
                fuel_needed: 0,
            };
            return Some((state, free));
        }
        let budget = i64::MAX as u64;
        let (state, left) = attempt(Some(budget)).ok()?;
        let cost = budget - left;
        // The least fuel that completes the run lies in [0, cost]: fuel only decides whether
        // the same run stops early, so completion is monotone in it. It is usually just below
        // the cost (the run's last straight stretch after its last check): gallop down from
        // the cost to bracket it, then bisect.
        // Whether the run completes with `fuel`; `None` if it fails other than for fuel.
        let completes = |fuel| match attempt(Some(fuel)) {
            Ok(_) => Some(true),
            Err(Some(TrapKind::OutOfFuel)) => Some(false),
            Err(_) => None,
        };
        let (mut low, mut high) = (0, cost);
        let mut step = 1;
        while high > 0 {
            let probe = high.saturating_sub(step);
            if !completes(probe)? {
                low = probe + 1;
                break;
            }
            high = probe;
            step *= 2;
        }
        while low < high {
            let mid = low + (high - low) / 2;
            if completes(mid)? {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        let snapshot = StartSnapshot {
            fuel_cost: cost,
            fuel_needed: low,
        };
        Some((state, snapshot))
    })();
    drop(stop);
    let _ = timer.join();
    outcome
}

/// The pre-run's limiter: memories together within [`MAX_MEMORY`], and whether it refused.
#[derive(Default)]
struct Bound {
    memory: usize,
    refused: bool,
}

impl ResourceLimiter for Bound {
    fn memory_growing(&mut self, current: usize, desired: usize, _: Option<usize>) -> bool {
        let total = self.memory - current + desired;
        self.refused |= total > MAX_MEMORY;
        if !self.refused {
            self.memory = total;
        }
        !self.refused
    }

    fn table_growing(&mut self, _: usize, _: usize, _: Option<usize>) -> bool {
        true
    }
}

/// `compiled` with `state` as its initial memories and mutable globals.
fn with_state(
    mut compiled: CompiledModule,
    state: DefinedState,
    snapshot: StartSnapshot,
) -> CompiledModule {
    let info = &mut compiled.info;
    // Keep the passive segments (declared ones hold no bytes); the active ones are in the
    // memories now.
    let mut data = Vec::new();
    let mut datas = Vec::new();
    for seg in &info.datas {
        if matches!(seg.mode, SegmentMode::Active { .. }) {
            continue;
        }
        let bytes = &compiled.data[seg.range.start as usize..seg.range.end as usize];
        datas.push(segment(&mut data, seg.mode.clone(), bytes));
    }
    for (i, bytes) in state.memories.iter().enumerate() {
        let index = info.imported_memories + i as u32;
        let ty = info.memories[index as usize];
        info.memories[index as usize].min = (bytes.len() >> ty.page_size_log2) as u32;
        for run in nonzero_runs(bytes) {
            // (In the memory's index type: a 64-bit memory's offsets are `i64`s.)
            let offset = match ty.memory64 {
                true => ConstExpr::I64(run.start as i64),
                false => ConstExpr::I32(run.start as u32 as i32),
            };
            let mode = SegmentMode::Active { index, offset };
            datas.push(segment(&mut data, mode, &bytes[run]));
        }
    }
    info.datas = datas;
    compiled.data = data;
    let defined = &info.globals[info.imported_globals as usize..];
    for ((init, ty), &raw) in info
        .global_inits
        .iter_mut()
        .zip(defined)
        .zip(&state.globals)
    {
        if !ty.mutable {
            continue;
        }
        *init = match ty.ty {
            ValType::I32 => ConstExpr::I32(raw as u32 as i32),
            ValType::I64 => ConstExpr::I64(raw as u64 as i64),
            ValType::F32 => ConstExpr::F32(raw as u32),
            ValType::F64 => ConstExpr::F64(raw as u64),
            ValType::V128 => ConstExpr::V128(raw),
            // Refused before the run.
            ValType::Ref(_) => unreachable!("no mutable reference globals"),
        };
    }
    info.snapshot = Some(snapshot);
    compiled
}

fn segment(data: &mut Vec<u8>, mode: SegmentMode, bytes: &[u8]) -> DataSegment {
    let start = data.len() as u32;
    data.extend_from_slice(bytes);
    DataSegment {
        mode,
        range: start..data.len() as u32,
    }
}

/// The ranges of `bytes` that are not zero, split where at least [`ZERO_GAP`] zeros lie
/// between.
fn nonzero_runs(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    let mut at = 0;
    while let Some(first) = bytes[at..].iter().position(|&b| b != 0) {
        let start = at + first;
        let mut end = start;
        let mut zeros = 0;
        for (i, &b) in bytes[start..].iter().enumerate() {
            if b != 0 {
                end = start + i + 1;
                zeros = 0;
            } else {
                zeros += 1;
                if zeros >= ZERO_GAP {
                    break;
                }
            }
        }
        runs.push(start..end);
        at = end;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::nonzero_runs;

    #[test]
    fn nonzero_runs_cover_every_nonzero_byte_and_split_at_long_gaps() {
        let mut bytes = vec![0u8; 1000];
        bytes[3] = 1;
        bytes[10] = 2; // 6 zeros between: same run
        bytes[200] = 3; // a long gap: a new run
        bytes[999] = 4;
        assert_eq!(nonzero_runs(&bytes), [3..11, 200..201, 999..1000]);
        assert!(nonzero_runs(&[0; 100]).is_empty());
    }
}
