//! The reference side of the differential tests: wasmtime, configured as ephem is (the same
//! proposals, relaxed SIMD deterministic, the same wasm stack), a fresh store per case, imports
//! stubbed as ephem stubs them, fuel if asked.
//! Shared by the tests and the `fuzz` example (wasmtime is a dev-dependency of this crate only).

// Each target that includes this file uses part of it (the fuzzer no fuel, `agree` no plain
// engine).
#![allow(dead_code)]

use ephem_differential::{Call, CallResult, MAX_WASM_STACK, Side, State, Trap, Value};
use wasmtime::{Config, Engine, Extern, ExternType, Instance, Linker, Module, Store, Val};

pub struct Wasmtime {
    engine: Engine,
    fuel: Option<u64>,
}

/// What a stubbed import returns when called: `HostError`, as ephem's stubs.
#[derive(Debug)]
struct Unprovided;

impl std::fmt::Display for Unprovided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an unprovided import was called")
    }
}

impl std::error::Error for Unprovided {}

impl Wasmtime {
    pub fn new() -> anyhow::Result<Wasmtime> {
        Wasmtime::with_fuel(None)
    }

    /// Cases run with `fuel` for instantiation and for each call.
    pub fn metered(fuel: u64) -> anyhow::Result<Wasmtime> {
        Wasmtime::with_fuel(Some(fuel))
    }

    fn with_fuel(fuel: Option<u64>) -> anyhow::Result<Wasmtime> {
        let mut config = Config::new();
        config
            .wasm_simd(true)
            .wasm_relaxed_simd(true)
            .relaxed_simd_deterministic(true)
            .wasm_tail_call(true)
            .wasm_multi_memory(true)
            .wasm_extended_const(true)
            .wasm_wide_arithmetic(true)
            .wasm_exceptions(true)
            .wasm_custom_page_sizes(true)
            .wasm_memory64(true)
            .wasm_threads(true)
            .shared_memory(true)
            .max_wasm_stack(MAX_WASM_STACK)
            .consume_fuel(fuel.is_some());
        Ok(Wasmtime {
            engine: Engine::new(&config)?,
            fuel,
        })
    }

    /// `module`'s imports, stubbed as ephem's `define_unknown_imports_as_traps` does.
    fn stubs(&self, store: &mut Store<()>, module: &Module) -> anyhow::Result<Linker<()>> {
        let mut linker = Linker::new(&self.engine);
        // A module may import one name twice (Go's do); one stub serves both.
        linker.allow_shadowing(true);
        for import in module.imports() {
            let stub: Extern = match import.ty() {
                ExternType::Func(ty) => {
                    wasmtime::Func::new(&mut *store, ty, |_, _, _| Err(Unprovided.into())).into()
                }
                ExternType::Memory(ty) => wasmtime::Memory::new(&mut *store, ty)?.into(),
                ExternType::Table(ty) => {
                    let null = Val::null_ref(ty.element().heap_type());
                    wasmtime::Table::new(&mut *store, ty, null.ref_().unwrap())?.into()
                }
                ExternType::Global(ty) => {
                    let zero = Val::default_for_ty(ty.content())
                        .ok_or_else(|| anyhow::anyhow!("no default for {ty:?}"))?;
                    wasmtime::Global::new(&mut *store, ty, zero)?.into()
                }
                ExternType::Tag(ty) => wasmtime::Tag::new(&mut *store, &ty)?.into(),
            };
            linker.define(&mut *store, import.module(), import.name(), stub)?;
        }
        Ok(linker)
    }
}

fn trap(e: &wasmtime::Error) -> Trap {
    use ephem::TrapKind as K;
    use wasmtime::Trap as T;
    if e.downcast_ref::<Unprovided>().is_some() {
        return Trap::Wasm(K::HostError);
    }
    if e.downcast_ref::<wasmtime::ThrownException>().is_some() {
        return Trap::Exception;
    }
    let kind = match e.downcast_ref::<T>() {
        Some(T::UnreachableCodeReached) => K::Unreachable,
        Some(T::MemoryOutOfBounds) => K::MemoryOutOfBounds,
        Some(T::TableOutOfBounds) => K::TableOutOfBounds,
        Some(T::IndirectCallToNull) => K::IndirectCallToNull,
        Some(T::BadSignature) => K::BadSignature,
        Some(T::IntegerOverflow) => K::IntegerOverflow,
        Some(T::IntegerDivisionByZero) => K::IntegerDivisionByZero,
        Some(T::BadConversionToInteger) => K::BadConversionToInteger,
        Some(T::StackOverflow) => K::StackOverflow,
        Some(T::OutOfFuel) => K::OutOfFuel,
        Some(T::NullReference) => K::NullReference,
        Some(T::HeapMisaligned) => K::UnalignedAtomic,
        Some(T::AtomicWaitNonSharedMemory) => K::WaitOnUnsharedMemory,
        Some(T::CastFailure) => K::CastFailure,
        Some(T::ArrayOutOfBounds) => K::ArrayOutOfBounds,
        Some(T::AllocationTooLarge) => K::GcHeapExhausted,
        // (A full GC heap is an error of its own in wasmtime, not a trap.)
        _ if format!("{e:#}").contains("GC heap out of memory") => K::GcHeapExhausted,
        _ => return Trap::Other(format!("{e:#}")),
    };
    Trap::Wasm(kind)
}

fn value(v: &Val) -> Value {
    match *v {
        Val::I32(x) => Value::I32(x as u32),
        Val::I64(x) => Value::I64(x as u64),
        Val::F32(x) => Value::F32(x),
        Val::F64(x) => Value::F64(x),
        Val::V128(x) => Value::V128(x.as_u128()),
        Val::FuncRef(f) => f.map_or(Value::Null, |_| Value::Func),
        Val::ExternRef(r) => r.map_or(Value::Null, |_| Value::Extern),
        Val::ExnRef(e) => e.map_or(Value::Null, |_| Value::Exn),
        Val::AnyRef(r) => r.map_or(Value::Null, |_| Value::Any),
        _ => Value::Null,
    }
}

impl Side for Wasmtime {
    type Module = Module;
    type Instance = (Store<()>, Instance);

    fn compile(&self, wasm: &[u8]) -> Result<Module, String> {
        Module::new(&self.engine, wasm).map_err(|e| format!("{e:#}"))
    }

    fn instantiate(&self, module: &Module) -> Result<Self::Instance, Trap> {
        let mut store = Store::new(&self.engine, ());
        if let Some(fuel) = self.fuel {
            store.set_fuel(fuel).map_err(|e| trap(&e))?;
        }
        let linker = (self.stubs(&mut store, module)).map_err(|e| Trap::Other(format!("{e:#}")))?;
        match linker.instantiate(&mut store, module) {
            Ok(instance) => Ok((store, instance)),
            Err(e) => Err(trap(&e)),
        }
    }

    fn call(
        &self,
        (store, instance): &mut Self::Instance,
        call: &Call,
    ) -> Result<CallResult, String> {
        let func = instance
            .get_func(&mut *store, &call.export)
            .ok_or_else(|| format!("no function {}", call.export))?;
        let ty = func.ty(&*store);
        let args: Vec<Val> = call
            .args
            .iter()
            .zip(ty.params())
            .map(|(a, t)| match *a {
                Value::I32(x) => Val::I32(x as i32),
                Value::I64(x) => Val::I64(x as i64),
                Value::F32(x) => Val::F32(x),
                Value::F64(x) => Val::F64(x),
                Value::V128(x) => Val::V128(x.into()),
                _ => Val::null_ref(
                    t.as_ref()
                        .expect("the plan passes null only for references")
                        .heap_type(),
                ),
            })
            .collect();
        let mut results: Vec<Val> = ty.results().map(|_| Val::I32(0)).collect();
        if let Some(fuel) = self.fuel {
            store.set_fuel(fuel).map_err(|e| format!("{e:#}"))?;
        }
        Ok(match func.call(&mut *store, &args, &mut results) {
            Ok(()) => Ok(results.iter().map(value).collect()),
            Err(e) => Err(trap(&e)),
        })
    }

    fn state(&self, (store, instance): &mut Self::Instance) -> State {
        let mut state = State::default();
        let exports: Vec<(String, Extern)> = instance
            .exports(&mut *store)
            .map(|e| (e.name().to_owned(), e.into_extern()))
            .collect();
        for (name, export) in exports {
            match export {
                Extern::Global(g) => state.globals.push((name, value(&g.get(&mut *store)))),
                Extern::Memory(m) => state.memories.push((name, m.data(&*store).to_vec())),
                // SAFETY (of the reads): no thread but this one runs the module.
                Extern::SharedMemory(m) => state
                    .memories
                    .push((name, m.data().iter().map(|b| unsafe { *b.get() }).collect())),
                Extern::Table(t) => state.tables.push((name, t.size(&*store) as u32)),
                _ => {}
            }
        }
        state
    }
}
