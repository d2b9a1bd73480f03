//! Values and functions: wasm functions of an instance, host functions made from Rust
//! closures, and how calls cross between the two.
//!
//! # Calls from the host into wasm
//! [`Func::call`] (and [`crate::TypedFunc::call`]) enter wasm through `signals::call` and the
//! entry stub in `arch`, with a pointer to the store, which host functions find again while
//! wasm runs.
//!
//! # Calls from wasm into the host
//! An imported host function's funcref points at the importing module's adapter for its type,
//! with the [`HostFunc`] as its context. The adapter spills the arguments into a buffer of
//! values and calls the function in the context's header, `arch::ephem_host_call`, with the
//! context, the caller's vmctx and the buffer; that stub calls `host_call` with its frame
//! pointer and the pinned register, and `host_call` builds the [`Caller`] (the store, and the
//! calling instance) and runs the closure. Results go back in the same buffer.
//!
//! # Errors and panics in host functions
//! An error a host function returns becomes a trap of kind [`TrapKind::HostError`] that carries
//! the error ([`Trap::host_error`]). A panic never unwinds through wasm frames: it is caught at
//! the host boundary, the wasm frames are left through the trap path, and the panic is resumed
//! in the host, from the `call` that entered wasm. The store stays usable.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use ephem_module::{FuncType, HeapType, HostFuncHeader, TrapKind, ValRaw, ValType, VmFuncRef};

use crate::context::{AsContext, AsContextMut, StoreContextMut};
use crate::engine::TypeRef;
use crate::store::{StoreId, StoreInner, StoreOpaque, Stored};
use crate::{AnyRef, Engine, Error, Extern, ExternRef, Instance, Trap};

/// A WebAssembly value. Floats are kept as bits so NaN payloads survive.
#[derive(Clone, Copy, Debug)]
pub enum Val {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`, as its bits.
    F32(u32),
    /// An `f64`, as its bits.
    F64(u64),
    /// A function reference, or null.
    FuncRef(Option<Func>),
    /// A host reference, or null.
    ExternRef(Option<ExternRef>),
    /// An exception, or null.
    ExnRef(Option<crate::ExnRef>),
    /// A GC value (`anyref`, `eqref`, `i31ref`, `structref`, `arrayref`, a concrete struct or
    /// array type, `nullref`), or null.
    AnyRef(Option<AnyRef>),
    /// A `v128`, as its bits (lane 0 in the low bits).
    V128(u128),
}

impl Val {
    /// The value's type.
    pub fn ty(&self) -> ValType {
        match self {
            Val::I32(_) => ValType::I32,
            Val::I64(_) => ValType::I64,
            Val::F32(_) => ValType::F32,
            Val::F64(_) => ValType::F64,
            Val::FuncRef(_) => ValType::FUNCREF,
            Val::ExternRef(_) => ValType::EXTERNREF,
            Val::ExnRef(_) => ValType::EXNREF,
            Val::AnyRef(_) => ValType::ANYREF,
            Val::V128(_) => ValType::V128,
        }
    }

    /// The zero (or null) value of `ty` (null for a non-nullable reference, which has no
    /// default: a placeholder to overwrite).
    pub fn default_for(ty: ValType) -> Val {
        match ty {
            ValType::I32 => Val::I32(0),
            ValType::I64 => Val::I64(0),
            ValType::F32 => Val::F32(0),
            ValType::F64 => Val::F64(0),
            ValType::V128 => Val::V128(0),
            t if t.is_func_ref() => Val::FuncRef(None),
            t if t.is_exn_ref() => Val::ExnRef(None),
            t if t.is_any_ref() => Val::AnyRef(None),
            _ => Val::ExternRef(None),
        }
    }

    /// Whether this value is one of type `ty`, whose concrete types are canonical ids of the
    /// engine of `store`. A function must be of a type below a concrete one: a reference of
    /// another type would let `call_ref` call it with the wrong signature.
    pub(crate) fn fits(&self, store: &StoreOpaque, ty: ValType) -> bool {
        let ValType::Ref(r) = ty else {
            return self.ty() == ty;
        };
        match (self, r.heap) {
            (Val::FuncRef(None), h) if h.is_func() => r.nullable,
            (Val::ExternRef(None), h) if h.is_extern() => r.nullable,
            (Val::AnyRef(None), h) if h.is_any() => r.nullable,
            (Val::AnyRef(Some(a)), h) => a.fits(store, h),
            (Val::ExnRef(None), h) if h.is_exn() => r.nullable,
            (Val::ExnRef(Some(e)), HeapType::Exn) => e.0.store == store.id,
            (Val::FuncRef(Some(_)), HeapType::Func) => true,
            (Val::FuncRef(Some(f)), HeapType::ConcreteFunc(id)) => {
                store.engine.is_subtype(Func::type_id(*f, store), id)
            }
            (Val::ExternRef(Some(e)), HeapType::Extern) => e.to_raw(store).is_ok(),
            _ => false,
        }
    }

    pub(crate) fn to_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        Ok(match self {
            Val::I32(v) => v as u32 as ValRaw,
            Val::I64(v) => v as u64 as ValRaw,
            Val::F32(v) => v as ValRaw,
            Val::F64(v) => v as ValRaw,
            Val::FuncRef(f) => f.map_or(Ok(0), |f| f.to_raw(store))? as ValRaw,
            Val::ExternRef(r) => r.map_or(Ok(0), |r| r.to_raw(store))?,
            Val::ExnRef(e) => e.map_or(0, |e| e.to_raw(store)),
            Val::AnyRef(r) => r.map_or(Ok(0), |r| r.raw_in(store))?.into(),
            Val::V128(v) => v,
        })
    }

    pub(crate) fn from_raw(store: &StoreOpaque, ty: ValType, raw: ValRaw) -> Val {
        match ty {
            ValType::I32 => Val::I32(raw as u32 as i32),
            ValType::I64 => Val::I64(raw as u64 as i64),
            ValType::F32 => Val::F32(raw as u32),
            ValType::F64 => Val::F64(raw as u64),
            ValType::V128 => Val::V128(raw),
            t if t.is_func_ref() => Val::FuncRef(Func::from_raw(store, raw as usize)),
            t if t.is_exn_ref() => Val::ExnRef(crate::ExnRef::from_raw(store, raw)),
            t if t.is_any_ref() => Val::AnyRef(AnyRef::from_raw(store, raw)),
            _ => Val::ExternRef(ExternRef::from_raw(store, raw)),
        }
    }

    /// The `i32`, if this is one.
    pub fn i32(&self) -> Option<i32> {
        match *self {
            Val::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The `i64`, if this is one.
    pub fn i64(&self) -> Option<i64> {
        match *self {
            Val::I64(v) => Some(v),
            _ => None,
        }
    }
}

/// The error a host function returns; it travels in the trap it causes.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// A host function's type-erased body: reads its arguments from and writes its results to
/// the value slots, with the store (really a `StoreInner<T>` of the `T` it was made for) and
/// the calling instance, if wasm called it.
type HostCallFn = dyn Fn(*mut StoreOpaque, Option<Instance>, &mut [ValRaw]) -> Result<(), HostError>
    + Send
    + Sync;

/// A host function: the context its adapter receives. `header` must come first.
#[repr(C)]
pub struct HostFunc {
    header: HostFuncHeader,
    pub(crate) ty: Arc<FuncType>,
    pub(crate) type_id: u32,
    call: Box<HostCallFn>,
}

impl HostFunc {
    /// A host function of type `ty` whose body is `call`.
    ///
    /// # Safety contract (for callers in this crate)
    /// `call` casts the store pointer to the `StoreInner<T>` it was written for: the function
    /// must only be put into stores of that `T` (the typed constructors make sure of it).
    pub(crate) fn new(
        engine: &Engine,
        ty: FuncType,
        call: impl Fn(*mut StoreOpaque, Option<Instance>, &mut [ValRaw]) -> Result<(), HostError>
        + Send
        + Sync
        + 'static,
    ) -> HostFunc {
        HostFunc {
            header: HostFuncHeader {
                call: crate::arch::ephem_host_call,
            },
            type_id: engine.type_id(&ty),
            ty: Arc::new(ty),
            call: Box::new(call),
        }
    }

    /// A host function of dynamic type: `f` gets the arguments as [`Val`]s and fills `results`
    /// (which come set to zeros of the result types).
    pub(crate) fn dynamic<T: 'static>(
        engine: &Engine,
        ty: FuncType,
        f: impl Fn(Caller<'_, T>, &[Val], &mut [Val]) -> Result<(), HostError> + Send + Sync + 'static,
    ) -> HostFunc {
        let params = ty.params.clone();
        let result_types = ty.results.clone();
        HostFunc::new(engine, ty, move |store, caller, values| {
            // SAFETY: per `HostFunc::new`, `store` is the opaque part of a `StoreInner<T>`.
            let inner = unsafe { &mut *store.cast::<StoreInner<T>>() };
            let args: Vec<Val> = params
                .iter()
                .zip(values.iter())
                .map(|(&t, &r)| Val::from_raw(&inner.opaque, t, r))
                .collect();
            let mut results: Vec<Val> = result_types.iter().map(|&t| Val::default_for(t)).collect();
            f(
                Caller {
                    store: StoreContextMut(&mut *inner),
                    caller,
                },
                &args,
                &mut results,
            )?;
            for ((slot, v), &t) in values.iter_mut().zip(&results).zip(&result_types) {
                if !v.fits(&inner.opaque, t) {
                    return Err(format!(
                        "host function returned a value of type {} where its type says {t}",
                        v.ty()
                    )
                    .into());
                }
                *slot = v.to_raw(&inner.opaque)?;
            }
            Ok(())
        })
    }
}

/// Why a host function failed, kept in the store until the call that entered wasm reports it.
pub(crate) enum HostFailure {
    Error(HostError),
    Panic(Box<dyn Any + Send>),
}

/// What a host function's adapter calls, through `arch::ephem_host_call`, which passes `fp`,
/// its frame pointer, and `pinned`, the pinned register, and sets that register to what this
/// returns. In a store of metered code that is the fuel: written to the store for the host
/// function to see and charge, and read back after it. A failed host function does not
/// return: the failure is kept in the store and the call into wasm ends at once
/// (`signals::raise_from_host`), without a signal. So does the call when a host function
/// returns past the call's deadline (see `interrupt`).
pub(crate) unsafe extern "C" fn host_call(
    ctx: *mut u8,
    caller_vmctx: *mut u8,
    values: *mut ValRaw,
    fp: usize,
    pinned: i64,
) -> i64 {
    let store = crate::signals::enter_host(fp).cast::<StoreOpaque>();
    // SAFETY: the store running this call; no reference into it is live here, and its fuel
    // cell is only touched by this thread while the call runs.
    let fuel = unsafe { (*store).runs_metered().then(|| (*store).fuel.get()) };
    if let Some(cell) = fuel {
        // SAFETY: the store's fuel cell, which only this thread touches while the call runs;
        // no reference to it is alive.
        unsafe { *cell = pinned };
    }
    // SAFETY: per this function's contract with the adapter.
    let signal = match unsafe { run_host(ctx, caller_vmctx, values) } {
        // SAFETY: the fuel cell again, which the host function has finished with.
        true if !crate::signals::interrupt_due() => return fuel.map_or(pinned, |c| unsafe { *c }),
        true => crate::interrupt::INTERRUPT,
        false => 0,
    };
    // A host function that throws: the exception goes on from its adapter's frame.
    // SAFETY: the store running this call; no reference into it is live here.
    if let Some(record) = unsafe { (*store).thrown_by_host() } {
        // SAFETY: the fuel cell again, which the host function has finished with.
        let fuel = fuel.map_or(pinned, |c| unsafe { *c });
        // SAFETY: as for `raise_from_host` below: the stub's frame, nothing to drop.
        unsafe { crate::exceptions::unwind(record, fp, fuel) }
    }
    // SAFETY: `fp` is `ephem_host_call`'s, called by an adapter inside a call into wasm; this
    // frame holds nothing to drop (a failure is in the store), nor do the stub's and the
    // generated frames above it.
    unsafe { crate::signals::raise_from_host(fp, signal) }
}

/// Runs the host function of `ctx` on the adapter's arguments; `false` (with the failure kept
/// in the store) if it failed.
///
/// # Safety
/// As `host_call`: `ctx` is a `HostFunc` the running store keeps alive, `values` holds
/// max(params, results) values, a non-null `caller_vmctx` is a live instance's.
unsafe fn run_host(ctx: *mut u8, caller_vmctx: *mut u8, values: *mut ValRaw) -> bool {
    // SAFETY: adapters only receive the `HostFunc` their funcref was made with, which the store
    // running this call keeps alive.
    let hf = unsafe { &*ctx.cast::<HostFunc>() };
    let store = crate::signals::current_store().cast::<StoreOpaque>();
    let caller = (!caller_vmctx.is_null()).then(|| {
        // SAFETY: a non-null caller vmctx is that of the wasm function that called, whose
        // instance is alive in this store.
        unsafe { caller_of(caller_vmctx) }
    });
    let n = hf.ty.params.len().max(hf.ty.results.len());
    // SAFETY: the adapter passes a buffer of max(params, results) values.
    let values = unsafe { std::slice::from_raw_parts_mut(values, n) };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (hf.call)(store, caller, values)
    }));
    let failure = match outcome {
        Ok(Ok(())) => return true,
        Ok(Err(e)) => HostFailure::Error(e),
        Err(panic) => HostFailure::Panic(panic),
    };
    // SAFETY: the store that entered wasm on this thread; no reference into it is live here.
    unsafe { (*store).host_failure = Some(failure) };
    false
}

/// A function: of a wasm instance, or of the host. A handle, valid with the store it was made
/// in.
#[derive(Clone, Copy)]
pub struct Func {
    store: StoreId,
    kind: FuncKind,
}

#[derive(Clone, Copy)]
enum FuncKind {
    /// A funcref in the vmctx of an instance of the store (or one of its tables' targets).
    Wasm(NonNull<VmFuncRef>),
    /// A host function of the store, by index.
    Host(u32),
}

// SAFETY: the pointer is only dereferenced with the store it belongs to (checked by id), by
// whoever holds that store.
unsafe impl Send for Func {}
// SAFETY: a shared `Func` gives away only its store's id and an address: the pointer is
// dereferenced only with its store (checked by id), by whoever holds that store.
unsafe impl Sync for Func {}

impl std::fmt::Debug for Func {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            FuncKind::Wasm(p) => write!(f, "Func(wasm {p:p})"),
            FuncKind::Host(i) => write!(f, "Func(host {i})"),
        }
    }
}

impl Func {
    /// A host function of type `ty` in `store`, with arguments and results as [`Val`]s (see
    /// [`crate::Linker::func_new`]).
    pub fn new<T: 'static>(
        mut store: impl AsContextMut<Data = T>,
        ty: FuncType,
        f: impl Fn(Caller<'_, T>, &[Val], &mut [Val]) -> Result<(), HostError> + Send + Sync + 'static,
    ) -> Func {
        let mut ctx = store.as_context_mut();
        let host = HostFunc::dynamic(ctx.engine(), ty, f);
        Func::host(ctx.opaque(), Arc::new(host))
    }

    /// A host function in `store` from a Rust closure of wasm-typed arguments (see
    /// [`crate::Linker::func_wrap`]).
    pub fn wrap<T: 'static, P, R>(
        mut store: impl AsContextMut<Data = T>,
        f: impl crate::IntoFunc<T, P, R>,
    ) -> Func {
        let mut ctx = store.as_context_mut();
        let host = f.into_host_func(ctx.engine());
        Func::host(ctx.opaque(), Arc::new(host))
    }

    pub(crate) fn host(store: &mut StoreOpaque, host: Arc<HostFunc>) -> Func {
        let Stored { store, index } = store.push_host_func(host);
        Func {
            store,
            kind: FuncKind::Host(index),
        }
    }

    /// A host function of the store, by index.
    pub(crate) fn stored_host(stored: Stored) -> Func {
        Func {
            store: stored.store,
            kind: FuncKind::Host(stored.index),
        }
    }

    /// A function of an instance of `store`, whose vmctx holds `funcref`.
    pub(crate) fn wasm(store: StoreId, funcref: NonNull<VmFuncRef>) -> Func {
        Func {
            store,
            kind: FuncKind::Wasm(funcref),
        }
    }

    /// The function a raw funcref (as tables and generated code hold it) refers to.
    pub(crate) fn from_raw(store: &StoreOpaque, raw: usize) -> Option<Func> {
        NonNull::new(raw as *mut VmFuncRef).map(|p| Func::wasm(store.id, p))
    }

    /// The funcref generated code sees. A host function needs an importing module's adapter
    /// for its type, so it has one only once an instance of the store imported it.
    pub(crate) fn to_raw(self, store: &StoreOpaque) -> Result<usize, Error> {
        store.check(self.store);
        match self.kind {
            FuncKind::Wasm(p) => Ok(p.as_ptr() as usize),
            FuncKind::Host(i) => store.host_funcs[i as usize]
                .funcref
                .map(|p| p.as_ptr() as usize)
                .ok_or_else(|| {
                    Error::Usage(
                        "a host function can be passed to wasm as a reference only after an \
                         instance has imported it"
                            .into(),
                    )
                }),
        }
    }

    /// The host function behind this handle, if it is one.
    pub(crate) fn host_func(self, store: &StoreOpaque) -> Option<&HostFunc> {
        store.check(self.store);
        match self.kind {
            FuncKind::Host(i) => Some(store.host_func(i)),
            FuncKind::Wasm(_) => None,
        }
    }

    /// Records where an instance imported this host function (see [`Func::to_raw`]).
    pub(crate) fn imported_at(self, store: &mut StoreOpaque, funcref: NonNull<VmFuncRef>) {
        if let FuncKind::Host(i) = self.kind {
            store.host_funcs[i as usize].funcref.get_or_insert(funcref);
        }
    }

    /// The funcref, for a wasm function.
    pub(crate) fn vm_funcref(self, store: &StoreOpaque) -> Option<VmFuncRef> {
        store.check(self.store);
        match self.kind {
            // SAFETY: funcrefs of a store live as long as the store.
            FuncKind::Wasm(p) => Some(unsafe { *p.as_ptr() }),
            FuncKind::Host(_) => None,
        }
    }

    pub(crate) fn store_id(self) -> StoreId {
        self.store
    }

    /// The engine-wide canonical id of the function's type.
    pub(crate) fn type_id(self, store: &StoreOpaque) -> u32 {
        store.check(self.store);
        match self.kind {
            // SAFETY: the funcref lies in a vmctx of this store (checked above), which lives as
            // long as the store.
            FuncKind::Wasm(p) => unsafe { (*p.as_ptr()).type_id },
            FuncKind::Host(i) => store.host_func(i).type_id,
        }
    }

    pub(crate) fn shared_ty(self, store: &StoreOpaque) -> TypeRef {
        match self.kind {
            FuncKind::Host(i) => {
                store.check(self.store);
                TypeRef::Shared(store.host_func(i).ty.clone())
            }
            FuncKind::Wasm(_) => store.engine().shared_func_type(self.type_id(store)),
        }
    }

    /// The function's type.
    pub fn ty(&self, store: impl AsContext) -> FuncType {
        self.shared_ty(store.as_context().opaque()).into_owned()
    }

    /// Calls the function with `params`, writing its results into `results` (which must have
    /// the length of the function's results); fails with the trap that ended it, if one did.
    pub fn call(
        &self,
        mut store: impl AsContextMut,
        params: &[Val],
        results: &mut [Val],
    ) -> Result<(), Error> {
        let store = store.as_context_mut().0 as *mut StoreInner<_> as *mut StoreOpaque;
        // SAFETY: a store pointer derived from the exclusive borrow above, used only for the
        // duration of this call.
        let ty = self.shared_ty(unsafe { &*store });
        let fits = params.len() == ty.params.len()
            // SAFETY: as above; a shared reference for the check only.
            && (params.iter().zip(&ty.params)).all(|(v, &t)| v.fits(unsafe { &*store }, t));
        if !fits {
            let types: Vec<ValType> = params.iter().map(Val::ty).collect();
            let list = |l: &[ValType]| {
                let names: Vec<String> = l.iter().map(ValType::to_string).collect();
                format!("[{}]", names.join(" "))
            };
            return Err(Error::Usage(format!(
                "arguments {} do not match parameters {}",
                list(&types),
                list(&ty.params)
            )));
        }
        if results.len() != ty.results.len() {
            return Err(Error::Usage(format!(
                "room for {} results given, the function has {}",
                results.len(),
                ty.results.len()
            )));
        }
        let mut values = vec![0 as ValRaw; ty.params.len().max(ty.results.len()).max(1)];
        for (slot, a) in values.iter_mut().zip(params) {
            // SAFETY: the store pointer from the exclusive borrow above; a shared reference for
            // this conversion only.
            *slot = a.to_raw(unsafe { &*store })?;
        }
        // SAFETY: the store pointer is derived from the exclusive borrow above, which lasts
        // for the call, and the arguments were checked against the type.
        unsafe { self.call_raw(store, &mut values)? };
        for ((r, &t), raw) in results.iter_mut().zip(&ty.results).zip(values) {
            // SAFETY: wasm has returned; a shared reference for this conversion only.
            *r = Val::from_raw(unsafe { &*store }, t, raw);
        }
        Ok(())
    }

    /// Calls with arguments and results as raw values, already checked against the type.
    ///
    /// # Safety
    /// `store` must be the store this function belongs to, derived from an exclusive borrow of
    /// the whole `StoreInner` that outlives the call, and `values` must hold max(params,
    /// results) values of the function's types.
    pub(crate) unsafe fn call_raw(
        self,
        store: *mut StoreOpaque,
        values: &mut [ValRaw],
    ) -> Result<(), Error> {
        // SAFETY: per the contract; the reference ends before anything runs.
        let fr = match self.vm_funcref(unsafe { &*store }) {
            Some(fr) => fr,
            None => {
                // SAFETY: per the contract; a shared reference that ends at once.
                let host: *const HostFunc = self.host_func(unsafe { &*store }).expect("host");
                // SAFETY: the store keeps its host functions for its whole life, so the pointer
                // stays valid while the call has the store.
                let call = unsafe { &(*host).call };
                return call(store, None, values).map_err(|e| Error::Trap(Trap::host(e)));
            }
        };
        // SAFETY: per the contract.
        unsafe { invoke(store, fr, values) }
    }

    /// This function as a [`crate::TypedFunc`], if its signature is `P -> R`.
    pub fn typed<P: crate::WasmParams, R: crate::WasmResults>(
        &self,
        store: impl AsContext,
    ) -> Result<crate::TypedFunc<P, R>, Error> {
        let ty = self.shared_ty(store.as_context().opaque());
        let (params, results) = (P::types(), R::types());
        if params != ty.params || results != ty.results {
            let asked = FuncType { params, results };
            return Err(Error::Usage(format!("function is {}, not {asked}", *ty)));
        }
        Ok(crate::TypedFunc::new(*self))
    }
}

/// Enters wasm at `fr` with `values`; reports a trap, and resumes a host function's panic.
///
/// # Safety
/// As for [`Func::call_raw`]; `fr` is a funcref of the store.
pub(crate) unsafe fn invoke(
    store: *mut StoreOpaque,
    fr: VmFuncRef,
    values: &mut [ValRaw],
) -> Result<(), Error> {
    // An exception an earlier call left pending and nobody took is not this call's to rethrow
    // (a host function's `ThrownException` finds only its own inner call's).
    if crate::signals::current_store().is_null() {
        // SAFETY: per the contract, the store is alive and not borrowed mutably.
        unsafe { (*store).clear_pending_exception() };
    }
    // SAFETY: the limit cell is the store's own, at a fixed address for the store's life.
    let (limit, max_stack) =
        unsafe { ((*store).stack_limit.get(), (*store).engine.max_wasm_stack()) };
    // SAFETY: per the contract, the store is alive and not borrowed mutably; reads of its
    // engine and the address of its deadline cell.
    let (engine, deadline) = unsafe { ((*store).engine.id(), (*store).deadline()) };
    // Published before it is checked (see `interrupt`), withdrawn when the call returns.
    // SAFETY: the store's deadline cell and its engine's epoch live as long as the store.
    let _watch = crate::interrupt::watch(engine, unsafe { deadline.get() });
    // SAFETY: the same cells, alive for the call.
    if unsafe { deadline.due() } {
        return Err(Error::Trap(Trap::new(TrapKind::Interrupted)));
    }
    // Zero fuel runs nothing (as in wasmtime). Metered code checks only for a debt, at entries
    // and loop headers, so without this a call with none left would run its first stretch.
    // SAFETY: per the contract, the store is alive and not borrowed mutably; a read.
    if unsafe { (*store).out_of_fuel() } {
        return Err(Error::Trap(Trap::new(TrapKind::OutOfFuel)));
    }
    // SAFETY: the funcref's trampoline matches its type, its vmctx is its instance's (alive in
    // the store), and `values` holds max(params, results) values.
    let outcome = unsafe {
        crate::signals::call(
            store.cast(),
            limit,
            (*store).fuel.get(),
            max_stack,
            deadline,
            fr.trampoline,
            fr.vmctx,
            fr.code,
            values.as_mut_ptr(),
        )
    };
    let Err(site) = outcome else { return Ok(()) };
    if site.thrown {
        // SAFETY: wasm has returned; nothing else references the store now.
        unsafe {
            if let Some(fuel) = site.pinned
                && (*store).runs_metered()
            {
                *(*store).fuel.get() = fuel;
            }
        }
        return Err(Error::Exception(crate::ThrownException));
    }
    // SAFETY: wasm has returned; nothing else references the store now.
    let failure = unsafe {
        // A signal stopped metered code: its fuel was in the pinned register.
        if let Some(fuel) = site.pinned
            && (*store).runs_metered()
        {
            *(*store).fuel.get() = fuel;
        }
        (*store).host_failure.take()
    };
    if let Some(e) = Trap::file_fault(&site) {
        return Err(e);
    }
    let mut trap = Trap::from_site(&site);
    match failure {
        Some(HostFailure::Panic(panic)) => std::panic::resume_unwind(panic),
        Some(HostFailure::Error(e)) if trap.kind == TrapKind::HostError => {
            trap.error = Some(e.into())
        }
        _ => {}
    }
    Err(Error::Trap(trap))
}

/// What a host function gets first: the store (its data, and the means to call back into wasm)
/// and the instance whose code called it.
pub struct Caller<'a, T> {
    pub(crate) store: StoreContextMut<'a, T>,
    pub(crate) caller: Option<Instance>,
}

impl<T> Caller<'_, T> {
    /// The embedder's data of the store.
    pub fn data(&self) -> &T {
        self.store.data()
    }

    /// The embedder's data of the store, mutably.
    pub fn data_mut(&mut self) -> &mut T {
        self.store.data_mut()
    }

    /// The engine of the store.
    pub fn engine(&self) -> &Engine {
        self.store.engine()
    }

    /// See [`crate::Store::set_epoch_deadline`]: a host function may extend (or shorten) the
    /// time its caller has.
    pub fn set_epoch_deadline(&mut self, ticks: u64) {
        self.store.set_epoch_deadline(ticks);
    }

    /// See [`StoreContextMut::consume_fuel`]: charges the guest for the host's work.
    pub fn consume_fuel(&mut self, fuel: u64) -> Result<(), Error> {
        self.store.consume_fuel(fuel)
    }

    /// See [`crate::Store::get_fuel`].
    pub fn get_fuel(&self) -> Result<u64, Error> {
        self.store.get_fuel()
    }

    /// Makes `exn` the store's pending exception, and returns the error that throws it into
    /// the calling wasm when this host function returns it: `return Err(caller.throw(exn).into())`.
    pub fn throw(&mut self, exn: crate::ExnRef) -> crate::ThrownException {
        self.store.opaque().set_pending_exception(exn);
        crate::ThrownException
    }

    /// The export `name` of the calling instance (`None` when the host called, or when the
    /// instance has no such export): how a host function reaches the caller's memory.
    pub fn get_export(&mut self, name: &str) -> Option<Extern> {
        let instance = self.caller?;
        instance.get_export(&mut self.store, name)
    }
}

impl<T> AsContext for Caller<'_, T> {
    type Data = T;
    fn as_context(&self) -> crate::StoreContext<'_, T> {
        self.store.as_context()
    }
}

impl<T> AsContextMut for Caller<'_, T> {
    fn as_context_mut(&mut self) -> StoreContextMut<'_, T> {
        self.store.as_context_mut()
    }
}

/// The calling instance of a vmctx, from its instance field.
///
/// # Safety
/// `vmctx` must be the context of a live instance.
pub(crate) unsafe fn caller_of(vmctx: *mut u8) -> Instance {
    // SAFETY: per the contract; the instance lives in the store running this call, which
    // outlives the host function that asks.
    unsafe { crate::instance::InstanceData::from_vmctx(vmctx) }.handle
}
