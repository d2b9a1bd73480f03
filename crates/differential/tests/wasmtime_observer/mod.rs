//! The reference side of the differential tests: wasmtime, configured as ephem is (the same
//! proposals, relaxed SIMD deterministic, the same wasm stack), a fresh store per case.
//! Shared by the tests and the `fuzz` example (wasmtime is a dev-dependency of this crate only).

use ephem_differential::{MAX_WASM_STACK, Observation, Observer, Plan, Trap, Value};
use wasmtime::{Config, Engine, Extern, Instance, Module, Store, Val};

pub struct Wasmtime {
    engine: Engine,
}

impl Wasmtime {
    pub fn new() -> anyhow::Result<Wasmtime> {
        let mut config = Config::new();
        config
            .wasm_simd(true)
            .wasm_relaxed_simd(true)
            .relaxed_simd_deterministic(true)
            .wasm_tail_call(true)
            .wasm_multi_memory(true)
            .wasm_extended_const(true)
            .max_wasm_stack(MAX_WASM_STACK);
        Ok(Wasmtime {
            engine: Engine::new(&config)?,
        })
    }
}

fn trap(e: &wasmtime::Error) -> Trap {
    use ephem::TrapKind as K;
    use wasmtime::Trap as T;
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
        _ => Value::Null,
    }
}

impl Observer for Wasmtime {
    fn observe(&self, wasm: &[u8], plan: &Plan) -> Result<Observation, String> {
        let module = Module::new(&self.engine, wasm).map_err(|e| format!("{e:#}"))?;
        let mut store = Store::new(&self.engine, ());
        let instance = match Instance::new(&mut store, &module, &[]) {
            Ok(i) => i,
            Err(e) => return Ok(Observation::failed(trap(&e))),
        };
        let mut calls = Vec::new();
        for call in &plan.calls {
            let func = instance
                .get_func(&mut store, &call.export)
                .ok_or_else(|| format!("no function {}", call.export))?;
            let ty = func.ty(&store);
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
            calls.push(match func.call(&mut store, &args, &mut results) {
                Ok(()) => Ok(results.iter().map(value).collect()),
                Err(e) => Err(trap(&e)),
            });
        }
        let mut observation = Observation::made(calls);
        let exports: Vec<(String, Extern)> = instance
            .exports(&mut store)
            .map(|e| (e.name().to_owned(), e.into_extern()))
            .collect();
        for (name, export) in exports {
            match export {
                Extern::Global(g) => observation.globals.push((name, value(&g.get(&mut store)))),
                Extern::Memory(m) => observation.memories.push((name, m.data(&store).to_vec())),
                Extern::Table(t) => observation.tables.push((name, t.size(&store) as u32)),
                _ => {}
            }
        }
        Ok(observation)
    }
}
