//! One call: a fresh store, WASI context and instance, under the request's limits.
//!
//! Modules are compiled with fuel metering, and every call is bounded by fuel (the store's
//! budget) and by wall-clock time (a deadline in the engine's epoch, which one ticker thread
//! advances every [`TICK`]). A deadline is a number of ticks, so a call is interrupted
//! between its timeout and one tick past it. Every method blocks while the guest runs.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use ephem::{
    Engine, EpochTicker, Error, Instance, InstancePre, Linker, Module, Store, StoreLimits,
    StoreLimitsBuilder, Val, ValType,
};
use ephem_wasi::{BuildError, DirPerms, Input, Output, WasiCtx, WasiCtxBuilder};
use serde_json::Value;

use crate::config::{Limits, STDERR_BYTES};

/// How often the engine's epoch advances: the resolution of deadlines.
pub const TICK: Duration = Duration::from_millis(5);

/// What a store of the server holds.
pub struct Host {
    wasi: WasiCtx,
    limits: StoreLimits,
}

/// Why a call did not return results.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No such export, or not a function.
    #[error("{0}")]
    NotFound(String),
    /// Arguments that do not fit the export's parameters, or imports this server lacks.
    #[error("{0}")]
    BadRequest(String),
    /// The guest trapped (out of fuel and past the deadline included).
    #[error("{message}")]
    Trap {
        kind: ephem::TrapKind,
        message: String,
    },
    /// A wasm exception reached the call uncaught.
    #[error("{0}")]
    Exception(String),
    /// A resource limit stopped instantiation (memory, tables).
    #[error("{0}")]
    Limit(String),
    /// Something on the server's side.
    #[error("{0}")]
    Internal(String),
}

impl From<BuildError> for CallError {
    fn from(e: BuildError) -> CallError {
        match e {
            BuildError::Dir { .. } => CallError::Internal(e.to_string()),
            e => CallError::BadRequest(e.to_string()),
        }
    }
}

impl From<Error> for CallError {
    fn from(e: Error) -> CallError {
        match e {
            Error::Trap(t) => CallError::Trap {
                kind: t.kind,
                message: t.to_string(),
            },
            e @ Error::Exception(_) => CallError::Exception(e.to_string()),
            Error::Link(m) => CallError::BadRequest(format!("link error: {m}")),
            Error::Usage(m) => CallError::BadRequest(m),
            e @ (Error::Limit(_) | Error::CodeMemory(_)) => CallError::Limit(e.to_string()),
            e => CallError::Internal(e.to_string()),
        }
    }
}

/// What a call consumed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Measured {
    pub fuel_used: u64,
    pub instantiate: Duration,
    pub call: Duration,
}

/// A command's outcome.
pub struct Ran {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    /// The first [`STDERR_BYTES`] of its standard error.
    pub stderr: Vec<u8>,
    /// How many bytes of standard error followed them, dropped.
    pub stderr_dropped: u64,
}

/// A file a command finds in its directory `.`: the request's body, under a name it chose.
pub struct InputFile<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// Runs calls on one engine, with WASI linked.
pub struct Executor {
    engine: Engine,
    linker: Linker<Host>,
    trap_unknown_imports: bool,
    scratch: PathBuf,
    _ticker: EpochTicker,
}

impl Executor {
    /// An executor whose commands' input directories are made under `scratch` (emptied now:
    /// what is there was left by a server that was killed). With `trap_unknown_imports`, what
    /// a module imports beyond the server's functions is stubbed (see `Config`).
    pub fn new(
        engine: &Engine,
        scratch: PathBuf,
        trap_unknown_imports: bool,
    ) -> anyhow::Result<Executor> {
        let mut linker = Linker::new(engine);
        ephem_wasi::add_to_linker(&mut linker, |h: &mut Host| &mut h.wasi)?;
        // Sightglass's timing hooks, so its benchmark programs run unchanged. The server
        // measures calls itself; the marks are accepted and ignored.
        linker.func_wrap("bench", "start", || {})?;
        linker.func_wrap("bench", "end", || {})?;
        match std::fs::remove_dir_all(&scratch) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e)?,
            _ => std::fs::create_dir_all(&scratch)?,
        }
        Ok(Executor {
            engine: engine.clone(),
            linker,
            trap_unknown_imports,
            scratch,
            _ticker: engine.start_epoch_ticker(TICK),
        })
    }

    /// `module` linked to the server's functions (and, if so configured, stubs for the rest),
    /// ready to instantiate: an error names an import this server does not provide.
    pub fn prepare(&self, module: &Module) -> Result<InstancePre<Host>, CallError> {
        let linked = if self.trap_unknown_imports {
            // Stubs are the module's own: another module may import the same name with another
            // type. A clone shares the host functions; it copies the table of names.
            let mut linker = self.linker.clone();
            (linker.define_unknown_imports_as_traps(module)).and_then(|l| l.instantiate_pre(module))
        } else {
            self.linker.instantiate_pre(module)
        };
        linked.map_err(|e| {
            CallError::BadRequest(format!(
                "{e} (this server provides WASI preview 1 and `bench.start`/`bench.end` only)"
            ))
        })
    }

    /// Calls `export` of a fresh instance of `pre`'s module with `args` (JSON, converted by the
    /// export's parameter types); a reactor's `_initialize` runs first.
    pub fn invoke(
        &self,
        pre: &InstancePre<Host>,
        export: &str,
        args: &[Value],
        limits: &Limits,
    ) -> Result<(Vec<Value>, Measured), (CallError, Measured)> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(Output::Discard).stderr(Output::Discard);
        self.fresh(pre, wasi.build(), limits, |store, instance, measured| {
            let t = Instant::now();
            if let Some(init) = instance.get_func(&mut *store, "_initialize") {
                init.call(&mut *store, &[], &mut [])?;
            }
            measured.instantiate += t.elapsed();
            let func = instance.get_func(&mut *store, export).ok_or_else(|| {
                CallError::NotFound(format!("the module exports no function `{export}`"))
            })?;
            let ty = func.ty(&*store);
            if ty.params.len() != args.len() {
                return Err(CallError::BadRequest(format!(
                    "`{export}` takes {} arguments ({:?}), {} given",
                    ty.params.len(),
                    ty.params,
                    args.len()
                )));
            }
            let vals = (ty.params.iter().zip(args))
                .map(|(&t, v)| from_json(t, v))
                .collect::<Result<Vec<_>, _>>()?;
            let mut results: Vec<Val> = ty.results.iter().map(|&t| Val::default_for(t)).collect();
            let t = Instant::now();
            let called = func.call(&mut *store, &vals, &mut results);
            measured.call = t.elapsed();
            called?;
            Ok(results.iter().map(to_json).collect())
        })
    }

    /// Runs `pre`'s module as a WASI command (`_start`): `args` after its name, `env`, and `input`
    /// as its standard input, or, given a [`InputFile`], as that file in a read-only directory
    /// preopened as `.` (stdin then empty); no other directories. The guest's exit status is
    /// the outcome, not an error.
    pub fn run(
        &self,
        pre: &InstancePre<Host>,
        input: Result<InputFile<'_>, &[u8]>,
        args: &[String],
        env: &[(String, String)],
        limits: &Limits,
    ) -> Result<(Ran, Measured), (CallError, Measured)> {
        // Removed when the call is over, whatever its outcome.
        let mut dir = None;
        let wasi = (|| {
            let mut b = WasiCtxBuilder::new();
            b.arg("module")?.args(args)?;
            for (k, v) in env {
                b.env(k, v)?;
            }
            match input {
                Ok(file) => {
                    let d = self.input_dir(file)?;
                    b.preopened_dir(d.path(), ".", DirPerms::ReadOnly)?;
                    dir = Some(d);
                }
                Err(stdin) => {
                    b.stdin(Input::Bytes(stdin.into()));
                }
            }
            b.stdout(Output::Capture(limits.max_output))
                .stderr(Output::Head(STDERR_BYTES));
            Ok::<_, CallError>(b.build())
        })()
        .map_err(|e| (e, Measured::default()))?;
        self.fresh(pre, wasi, limits, |store, instance, measured| {
            let start = instance.get_func(&mut *store, "_start").ok_or_else(|| {
                CallError::NotFound("the module is not a WASI command: no `_start`".into())
            })?;
            let t = Instant::now();
            let ran = start.call(&mut *store, &[], &mut []);
            measured.call = t.elapsed();
            let exit_code = match ran {
                Ok(()) => 0,
                Err(e) => ephem_wasi::exit_code(&e).ok_or_else(|| CallError::from(e))?,
            };
            let wasi = &mut store.data_mut().wasi;
            Ok(Ran {
                exit_code,
                stdout: wasi.take_stdout(),
                stderr: wasi.take_stderr(),
                stderr_dropped: wasi.stderr_dropped(),
            })
        })
    }

    /// A fresh directory holding `file` alone.
    fn input_dir(&self, file: InputFile<'_>) -> Result<tempfile::TempDir, CallError> {
        let mut parts = Path::new(file.name).components();
        if !matches!(
            (parts.next(), parts.next()),
            (Some(Component::Normal(_)), None)
        ) {
            return Err(CallError::BadRequest(format!(
                "`input={}`: expected a plain file name",
                file.name
            )));
        }
        let internal = |e: std::io::Error| CallError::Internal(format!("input directory: {e}"));
        let dir = tempfile::tempdir_in(&self.scratch).map_err(internal)?;
        std::fs::write(dir.path().join(file.name), file.bytes).map_err(internal)?;
        Ok(dir)
    }

    /// Instantiates `pre` in a fresh store bounded by `limits`, runs `body` on it, and
    /// measures: instantiation time, and the fuel consumed, also when `body` fails.
    fn fresh<R>(
        &self,
        pre: &InstancePre<Host>,
        wasi: WasiCtx,
        limits: &Limits,
        body: impl FnOnce(&mut Store<Host>, Instance, &mut Measured) -> Result<R, CallError>,
    ) -> Result<(R, Measured), (CallError, Measured)> {
        let mut store = self.store(wasi, limits);
        let mut measured = Measured::default();
        let result = (|| {
            let t = Instant::now();
            let instance = pre.instantiate(&mut store)?;
            measured.instantiate = t.elapsed();
            body(&mut store, instance, &mut measured)
        })();
        measured.fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        match result {
            Ok(r) => Ok((r, measured)),
            Err(e) => Err((e, measured)),
        }
    }

    /// A store bounded by `limits`.
    fn store(&self, wasi: WasiCtx, limits: &Limits) -> Store<Host> {
        let memory = usize::try_from(limits.max_memory).unwrap_or(usize::MAX);
        let host = Host {
            wasi,
            limits: StoreLimitsBuilder::new().memory_size(memory).build(),
        };
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        store.set_fuel(limits.fuel).unwrap();
        let tick = TICK.as_millis() as u64;
        store.set_epoch_deadline(limits.timeout_ms.div_ceil(tick) + 1);
        store
    }
}

/// A wasm value from JSON: integers as numbers (or decimal strings, for 64-bit values beyond
/// what JSON readers keep exactly), floats as numbers or `"nan"`, `"inf"`, `"-inf"`, a `v128`
/// as a `0x` hexadecimal string, references as `null`.
pub fn from_json(ty: ValType, v: &Value) -> Result<Val, CallError> {
    let bad = || CallError::BadRequest(format!("`{v}` is not a value of type {ty}"));
    let int = |bits: u32| -> Result<i128, CallError> {
        let n = match v {
            Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
            Value::String(s) => s.parse::<i128>().ok(),
            _ => None,
        }
        .ok_or_else(bad)?;
        let (min, max) = (-(1i128 << (bits - 1)), (1i128 << bits) - 1);
        if (min..=max).contains(&n) {
            Ok(n)
        } else {
            Err(bad())
        }
    };
    let float = || -> Result<f64, CallError> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(bad),
            Value::String(s) => match s.as_str() {
                "nan" | "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    };
    Ok(match ty {
        ValType::I32 => Val::I32(int(32)? as i32),
        ValType::I64 => Val::I64(int(64)? as i64),
        ValType::F32 => Val::F32((float()? as f32).to_bits()),
        ValType::F64 => Val::F64(float()?.to_bits()),
        ValType::V128 => {
            let hex = v
                .as_str()
                .and_then(|s| s.strip_prefix("0x"))
                .ok_or_else(bad)?;
            Val::V128(u128::from_str_radix(hex, 16).map_err(|_| bad())?)
        }
        // Only null can be given, and only where the type admits it.
        ValType::Ref(r) if v.is_null() && r.nullable => Val::default_for(ty),
        ValType::Ref(_) => return Err(bad()),
    })
}

/// A wasm value as JSON, the inverse of [`from_json`] (a non-null reference is a string
/// naming its type).
pub fn to_json(v: &Val) -> Value {
    let float = |f: f64| {
        if f.is_nan() {
            Value::from("nan")
        } else if f.is_infinite() {
            Value::from(if f > 0.0 { "inf" } else { "-inf" })
        } else {
            Value::from(f)
        }
    };
    match *v {
        Val::I32(n) => Value::from(n),
        Val::I64(n) => Value::from(n),
        Val::F32(b) => float(f64::from(f32::from_bits(b))),
        Val::F64(b) => float(f64::from_bits(b)),
        Val::V128(n) => Value::from(format!("{n:#034x}")),
        Val::FuncRef(f) => f.map_or(Value::Null, |_| Value::from("funcref")),
        Val::ExternRef(r) => r.map_or(Value::Null, |_| Value::from("externref")),
        Val::ExnRef(e) => e.map_or(Value::Null, |_| Value::from("exnref")),
        Val::AnyRef(r) => r.map_or(Value::Null, |_| Value::from("anyref")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_convert_by_type_and_refuse_what_does_not_fit() {
        // `Val` has no `PartialEq` (references); its `Debug` shows kind and bits.
        let ok = |t, v: Value| format!("{:?}", from_json(t, &v).unwrap());
        let is = |v: Val| format!("{v:?}");
        assert_eq!(ok(ValType::I32, Value::from(-1)), is(Val::I32(-1)));
        assert_eq!(
            ok(ValType::I32, Value::from(4294967295u64)),
            is(Val::I32(-1))
        );
        assert_eq!(
            ok(ValType::I64, Value::from("18446744073709551615")),
            is(Val::I64(-1))
        );
        assert_eq!(
            ok(ValType::F64, Value::from(1.5)),
            is(Val::F64(1.5f64.to_bits()))
        );
        let nan = from_json(ValType::F32, &Value::from("nan")).unwrap();
        assert!(matches!(nan, Val::F32(b) if f32::from_bits(b).is_nan()));
        assert_eq!(ok(ValType::V128, Value::from("0x10")), is(Val::V128(16)));
        for (t, v) in [
            (ValType::I32, Value::from(4294967296u64)),
            (ValType::I32, Value::from(1.5)),
            (ValType::I64, Value::from("x")),
            (ValType::F64, Value::Bool(true)),
            (ValType::V128, Value::from(3)),
            (ValType::FUNCREF, Value::from(0)),
        ] {
            assert!(from_json(t, &v).is_err(), "{t:?} {v}");
        }
        for v in [
            Val::I32(-7),
            Val::I64(i64::MIN),
            Val::F64(2.5f64.to_bits()),
            Val::V128(u128::MAX),
        ] {
            let ty = match v {
                Val::I32(_) => ValType::I32,
                Val::I64(_) => ValType::I64,
                Val::F64(_) => ValType::F64,
                _ => ValType::V128,
            };
            assert_eq!(format!("{:?}", from_json(ty, &to_json(&v)).unwrap()), is(v));
        }
        assert_eq!(
            to_json(&Val::F64(f64::NEG_INFINITY.to_bits())),
            Value::from("-inf")
        );
    }
}
