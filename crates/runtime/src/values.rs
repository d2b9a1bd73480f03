//! Values as the embedder sees them, and functions: wasm functions of an instance, or host
//! functions made from Rust closures.

use std::rc::Rc;
use std::sync::Arc;

use ephem_module::{FuncType, HostFuncHeader, ValRaw, ValType, VmFuncRef};

use crate::{Engine, Error, Instance, Trap};

/// A WebAssembly value. Floats are kept as bits so NaN payloads survive.
#[derive(Clone, Debug)]
pub enum Val {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
    FuncRef(Option<Func>),
    /// An opaque host reference (a number chosen by the embedder).
    ExternRef(Option<u32>),
}

impl Val {
    pub fn ty(&self) -> ValType {
        match self {
            Val::I32(_) => ValType::I32,
            Val::I64(_) => ValType::I64,
            Val::F32(_) => ValType::F32,
            Val::F64(_) => ValType::F64,
            Val::FuncRef(_) => ValType::FuncRef,
            Val::ExternRef(_) => ValType::ExternRef,
        }
    }

    pub(crate) fn to_raw(&self) -> ValRaw {
        match self {
            Val::I32(v) => *v as u32 as ValRaw,
            Val::I64(v) => *v as u64 as ValRaw,
            Val::F32(v) => *v as ValRaw,
            Val::F64(v) => *v as ValRaw,
            Val::FuncRef(f) => f.as_ref().map_or(0, |f| f.raw() as ValRaw),
            Val::ExternRef(r) => r.map_or(0, |r| r as ValRaw + 1),
        }
    }

    pub(crate) fn from_raw(engine: &Engine, ty: ValType, raw: ValRaw) -> Val {
        match ty {
            ValType::I32 => Val::I32(raw as u32 as i32),
            ValType::I64 => Val::I64(raw as u64 as i64),
            ValType::F32 => Val::F32(raw as u32),
            ValType::F64 => Val::F64(raw as u64),
            ValType::FuncRef => Val::FuncRef(
                (raw != 0).then(|| Func::from_raw(engine, raw as usize as *const VmFuncRef)),
            ),
            ValType::ExternRef => Val::ExternRef((raw != 0).then(|| (raw - 1) as u32)),
        }
    }
}

/// The error a host function returns.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

type HostFn = dyn Fn(&[Val]) -> Result<Vec<Val>, HostError>;

/// A host function: the context its host adapter receives. `header` must come first.
#[repr(C)]
pub(crate) struct HostFunc {
    header: HostFuncHeader,
    pub(crate) ty: Arc<FuncType>,
    pub(crate) type_id: u32,
    engine: Engine,
    f: Box<HostFn>,
}

/// A function: of a wasm instance, or of the host.
#[derive(Clone)]
pub struct Func {
    kind: FuncKind,
    ty: Arc<FuncType>,
}

#[derive(Clone)]
enum FuncKind {
    Wasm {
        funcref: *const VmFuncRef,
        _owner: Option<Instance>,
    },
    Host(Rc<HostFunc>),
}

impl std::fmt::Debug for Func {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Func({:?})", self.ty)
    }
}

thread_local! {
    static HOST_ERROR: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Takes the message of the last host function failure on this thread.
pub(crate) fn take_host_error() -> Option<String> {
    HOST_ERROR.with(|e| e.borrow_mut().take())
}

unsafe extern "C" fn host_call(ctx: *mut u8, values: *mut ValRaw) -> u32 {
    // SAFETY: host adapters only receive the `HostFunc` their funcref was made with, alive as
    // long as the importing instance (which keeps it).
    let hf = unsafe { &*ctx.cast::<HostFunc>() };
    let n = hf.ty.params.len().max(hf.ty.results.len());
    // SAFETY: the adapter passes a buffer of max(params, results) values.
    let values = unsafe { std::slice::from_raw_parts_mut(values, n) };
    let args: Vec<Val> = hf
        .ty
        .params
        .iter()
        .zip(values.iter())
        .map(|(&t, &r)| Val::from_raw(&hf.engine, t, r))
        .collect();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (hf.f)(&args)));
    let failure = match outcome {
        Ok(Ok(results)) => {
            let types: Vec<ValType> = results.iter().map(Val::ty).collect();
            if types == hf.ty.results {
                for (slot, v) in values.iter_mut().zip(&results) {
                    *slot = v.to_raw();
                }
                return 0;
            }
            format!(
                "host function returned {types:?}, expected {:?}",
                hf.ty.results
            )
        }
        Ok(Err(e)) => e.to_string(),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned());
            format!("host function panicked: {}", msg.unwrap_or_default())
        }
    };
    HOST_ERROR.with(|e| *e.borrow_mut() = Some(failure));
    1
}

impl Func {
    /// A host function of type `ty` that runs `f`.
    pub fn new(
        engine: &Engine,
        ty: FuncType,
        f: impl Fn(&[Val]) -> Result<Vec<Val>, HostError> + 'static,
    ) -> Func {
        let type_id = engine.type_id(&ty);
        let ty = Arc::new(ty);
        let host = HostFunc {
            header: HostFuncHeader { call: host_call },
            ty: ty.clone(),
            type_id,
            engine: engine.clone(),
            f: Box::new(f),
        };
        Func {
            kind: FuncKind::Host(Rc::new(host)),
            ty,
        }
    }

    /// A function of `owner`, whose vmctx holds `funcref`.
    pub(crate) fn wasm(engine: &Engine, funcref: *const VmFuncRef, owner: Instance) -> Func {
        // SAFETY: the owner's vmctx holds a filled-in funcref there.
        let ty = engine.shared_func_type(unsafe { (*funcref).type_id });
        Func {
            kind: FuncKind::Wasm {
                funcref,
                _owner: Some(owner),
            },
            ty,
        }
    }

    fn from_raw(engine: &Engine, funcref: *const VmFuncRef) -> Func {
        // SAFETY: non-null funcrefs produced by generated code point at live VmFuncRefs.
        let ty = engine.shared_func_type(unsafe { (*funcref).type_id });
        Func {
            kind: FuncKind::Wasm {
                funcref,
                _owner: None,
            },
            ty,
        }
    }

    pub fn ty(&self) -> &FuncType {
        &self.ty
    }

    /// The funcref as generated code sees it (null for host functions not imported anywhere).
    pub(crate) fn raw(&self) -> usize {
        match &self.kind {
            FuncKind::Wasm { funcref, .. } => *funcref as usize,
            FuncKind::Host(_) => 0,
        }
    }

    pub(crate) fn host(&self) -> Option<&Rc<HostFunc>> {
        match &self.kind {
            FuncKind::Host(h) => Some(h),
            FuncKind::Wasm { .. } => None,
        }
    }

    pub(crate) fn funcref(&self) -> Option<VmFuncRef> {
        match &self.kind {
            // SAFETY: the owner (or the table that produced it) keeps the funcref alive.
            FuncKind::Wasm { funcref, .. } => Some(unsafe { **funcref }),
            FuncKind::Host(_) => None,
        }
    }

    pub(crate) fn type_id(&self) -> u32 {
        match &self.kind {
            // SAFETY: as above.
            FuncKind::Wasm { funcref, .. } => unsafe { (**funcref).type_id },
            FuncKind::Host(h) => h.type_id,
        }
    }

    /// Calls the function with `args`; returns its results, or the trap that ended it.
    pub fn call(&self, engine: &Engine, args: &[Val]) -> Result<Vec<Val>, Error> {
        let types: Vec<ValType> = args.iter().map(Val::ty).collect();
        if types != self.ty.params {
            return Err(Error::Type(format!(
                "arguments {types:?} do not match parameters {:?}",
                self.ty.params
            )));
        }
        let mut values = vec![0 as ValRaw; self.ty.params.len().max(self.ty.results.len()).max(1)];
        for (slot, a) in values.iter_mut().zip(args) {
            *slot = a.to_raw();
        }
        self.call_raw(&mut values)?;
        Ok(self
            .ty
            .results
            .iter()
            .zip(values)
            .map(|(&t, r)| Val::from_raw(engine, t, r))
            .collect())
    }

    /// Calls with arguments and results as raw values, already checked against the type;
    /// `values` holds max(params, results) values.
    pub(crate) fn call_raw(&self, values: &mut [ValRaw]) -> Result<(), Error> {
        debug_assert!(values.len() >= self.ty.params.len().max(self.ty.results.len()));
        let fr = match &self.kind {
            FuncKind::Host(h) => {
                let args: Vec<Val> = self
                    .ty
                    .params
                    .iter()
                    .zip(values.iter())
                    .map(|(&t, &r)| Val::from_raw(&h.engine, t, r))
                    .collect();
                let results = (h.f)(&args).map_err(|e| Error::Trap(Trap::host(e.to_string())))?;
                let types: Vec<ValType> = results.iter().map(Val::ty).collect();
                if types != self.ty.results {
                    let msg = format!(
                        "host function returned {types:?}, expected {:?}",
                        self.ty.results
                    );
                    return Err(Error::Trap(Trap::host(msg)));
                }
                for (slot, v) in values.iter_mut().zip(&results) {
                    *slot = v.to_raw();
                }
                return Ok(());
            }
            // SAFETY: as above.
            FuncKind::Wasm { funcref, .. } => unsafe { **funcref },
        };
        // SAFETY: the funcref's trampoline matches its type, its vmctx is its instance's (kept
        // alive by the owner), and `values` holds max(params, results) values.
        let outcome =
            unsafe { crate::signals::call(fr.trampoline, fr.vmctx, fr.code, values.as_mut_ptr()) };
        outcome.map_err(|site| Error::Trap(Trap::from_site(site)))
    }
}
