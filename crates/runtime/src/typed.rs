//! Typed calls and typed host functions.
//!
//! [`Func::typed`] checks a signature once against Rust types, then [`TypedFunc::call`] calls
//! without building [`crate::Val`]s. [`IntoFunc`] turns a plain Rust closure of wasm-typed
//! arguments (optionally taking a [`Caller`] first) into a host function: the argument and
//! result types are the function's wasm type.

use std::marker::PhantomData;

use ephem_module::{FuncType, ValRaw, ValType};

use crate::context::{AsContextMut, StoreContextMut};
use crate::func::{HostError, HostFunc};
use crate::store::{StoreInner, StoreOpaque};
use crate::{AnyRef, Caller, Engine, Error, ExternRef, Func};

/// A Rust type that is a WebAssembly value type: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`,
/// `Option<Func>` (funcref), `Option<ExternRef>` (externref), `Option<AnyRef>` (anyref) and
/// `Option<ExnRef>` (exnref).
pub trait WasmTy: Sized + Send + 'static {
    /// The wasm type.
    const TY: ValType;
    #[doc(hidden)]
    fn into_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error>;
    #[doc(hidden)]
    fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Self;
}

macro_rules! wasm_ty {
    ($t:ty, $vt:expr, |$x:ident| $to:expr, |$r:ident| $from:expr) => {
        impl WasmTy for $t {
            const TY: ValType = $vt;
            fn into_raw(self, _: &StoreOpaque) -> Result<ValRaw, Error> {
                let $x = self;
                Ok($to)
            }
            fn from_raw(_: &StoreOpaque, $r: ValRaw) -> Self {
                $from
            }
        }
    };
}

wasm_ty!(i32, ValType::I32, |x| x as u32 as ValRaw, |r| r as u32
    as i32);
wasm_ty!(u32, ValType::I32, |x| x as ValRaw, |r| r as u32);
wasm_ty!(i64, ValType::I64, |x| x as u64 as ValRaw, |r| r as u64
    as i64);
wasm_ty!(u64, ValType::I64, |x| x as ValRaw, |r| r as u64);
// A `v128` as its bits, lane 0 in the low bits (as `Val::V128`).
wasm_ty!(u128, ValType::V128, |x| x, |r| r);
wasm_ty!(f32, ValType::F32, |x| x.to_bits() as ValRaw, |r| {
    f32::from_bits(r as u32)
});
wasm_ty!(f64, ValType::F64, |x| x.to_bits() as ValRaw, |r| {
    f64::from_bits(r as u64)
});
impl WasmTy for Option<ExternRef> {
    const TY: ValType = ValType::EXTERNREF;
    fn into_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        self.map_or(Ok(0), |r| r.to_raw(store))
    }
    fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Self {
        ExternRef::from_raw(store, raw)
    }
}

impl WasmTy for Option<AnyRef> {
    const TY: ValType = ValType::ANYREF;
    fn into_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        Ok(self.map_or(Ok(0), |r| r.raw_in(store))?.into())
    }
    fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Self {
        AnyRef::from_raw(store, raw)
    }
}

impl WasmTy for Option<Func> {
    const TY: ValType = ValType::FUNCREF;
    fn into_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        Ok(self.map_or(Ok(0), |f| f.to_raw(store))? as ValRaw)
    }
    fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Self {
        Func::from_raw(store, raw as usize)
    }
}

impl WasmTy for Option<crate::ExnRef> {
    const TY: ValType = ValType::EXNREF;
    fn into_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        match self {
            Some(e) if e.0.store != store.id => Err(Error::Usage(
                "an exception of another store was passed to wasm".into(),
            )),
            Some(e) => Ok(e.to_raw(store)),
            None => Ok(0),
        }
    }
    fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Self {
        crate::ExnRef::from_raw(store, raw)
    }
}

/// Parameters: a tuple of [`WasmTy`] (or `()`).
pub trait WasmParams: Send {
    #[doc(hidden)]
    const COUNT: usize;
    #[doc(hidden)]
    fn types() -> Vec<ValType>;
    #[doc(hidden)]
    fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error>;
}

/// Results: a [`WasmTy`], a tuple of them, or `()`.
pub trait WasmResults: Sized + Send {
    #[doc(hidden)]
    const COUNT: usize;
    #[doc(hidden)]
    fn types() -> Vec<ValType>;
    #[doc(hidden)]
    fn load(store: &StoreOpaque, values: &[ValRaw]) -> Self;
    #[doc(hidden)]
    fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error>;
}

impl<A: WasmTy> WasmParams for A {
    const COUNT: usize = 1;
    fn types() -> Vec<ValType> {
        vec![A::TY]
    }
    fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error> {
        values[0] = self.into_raw(store)?;
        Ok(())
    }
}

impl<A: WasmTy> WasmResults for A {
    const COUNT: usize = 1;
    fn types() -> Vec<ValType> {
        vec![A::TY]
    }
    fn load(store: &StoreOpaque, values: &[ValRaw]) -> Self {
        A::from_raw(store, values[0])
    }
    fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error> {
        values[0] = self.into_raw(store)?;
        Ok(())
    }
}

/// What a host closure may return: results (see [`WasmResults`]), or a `Result` of them whose
/// error becomes a trap that carries it.
pub trait HostReturn: Send {
    #[doc(hidden)]
    type Ok: WasmResults;
    #[doc(hidden)]
    fn into_result(self) -> Result<Self::Ok, HostError>;
}

impl<R: WasmResults> HostReturn for R {
    type Ok = R;
    fn into_result(self) -> Result<R, HostError> {
        Ok(self)
    }
}

impl<R: WasmResults, E: Into<HostError> + Send> HostReturn for Result<R, E> {
    type Ok = R;
    fn into_result(self) -> Result<R, HostError> {
        self.map_err(Into::into)
    }
}

/// A Rust closure that can be a host function of store data `T`: `Fn(A1, A2, …) -> R` or
/// `Fn(Caller<'_, T>, A1, A2, …) -> R`, with arguments of [`WasmTy`] types and `R` a
/// [`HostReturn`]. `Params` and `Results` only tell the two forms apart.
pub trait IntoFunc<T, Params, Results>: Send + Sync + 'static {
    #[doc(hidden)]
    fn into_host_func(self, engine: &Engine) -> HostFunc;
}

macro_rules! one {
    ($x:tt) => {
        1
    };
}

macro_rules! tuples {
    ($($n:tt $t:ident $a:ident),*) => {
        impl<$($t: WasmTy),*> WasmParams for ($($t,)*) {
            const COUNT: usize = 0 $(+ one!($n))*;
            fn types() -> Vec<ValType> { vec![$($t::TY),*] }
            #[allow(unused_variables)]
            fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error> {
                $(values[$n] = self.$n.into_raw(store)?;)*
                Ok(())
            }
        }

        impl<$($t: WasmTy),*> WasmResults for ($($t,)*) {
            const COUNT: usize = 0 $(+ one!($n))*;
            fn types() -> Vec<ValType> { vec![$($t::TY),*] }
            #[allow(unused_variables, clippy::unused_unit)]
            fn load(store: &StoreOpaque, values: &[ValRaw]) -> Self {
                ($($t::from_raw(store, values[$n]),)*)
            }
            #[allow(unused_variables)]
            fn store(self, store: &StoreOpaque, values: &mut [ValRaw]) -> Result<(), Error> {
                $(values[$n] = self.$n.into_raw(store)?;)*
                Ok(())
            }
        }

        impl<T: 'static, F, $($t: WasmTy,)* R: HostReturn> IntoFunc<T, (Caller<'_, T>, $($t,)*), R> for F
        where
            F: Fn(Caller<'_, T>, $($t),*) -> R + Send + Sync + 'static,
        {
            fn into_host_func(self, engine: &Engine) -> HostFunc {
                let ty = FuncType {
                    params: vec![$($t::TY),*],
                    results: <R::Ok as WasmResults>::types(),
                };
                HostFunc::new(engine, ty, move |store, caller, values| {
                    // SAFETY: per `HostFunc::new`, `store` is the opaque part of a
                    // `StoreInner<T>`: only stores of data `T` take this function.
                    let inner = unsafe { &mut *store.cast::<StoreInner<T>>() };
                    $(let $a = $t::from_raw(&inner.opaque, values[$n]);)*
                    let caller = Caller { store: StoreContextMut(&mut *inner), caller };
                    let results = self(caller, $($a),*).into_result()?;
                    results.store(&inner.opaque, values)?;
                    Ok(())
                })
            }
        }

        impl<T: 'static, F, $($t: WasmTy,)* R: HostReturn> IntoFunc<T, ($($t,)*), R> for F
        where
            F: Fn($($t),*) -> R + Send + Sync + 'static,
        {
            fn into_host_func(self, engine: &Engine) -> HostFunc {
                let with_caller = move |_: Caller<'_, T>, $($a: $t),*| self($($a),*);
                <_ as IntoFunc<T, (Caller<'_, T>, $($t,)*), R>>::into_host_func(with_caller, engine)
            }
        }
    };
}

tuples!();
tuples!(0 A a);
tuples!(0 A a, 1 B b);
tuples!(0 A a, 1 B b, 2 C c);
tuples!(0 A a, 1 B b, 2 C c, 3 D d);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e, 5 G g);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e, 5 G g, 6 H h);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e, 5 G g, 6 H h, 7 I i);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e, 5 G g, 6 H h, 7 I i, 8 J j);
tuples!(0 A a, 1 B b, 2 C c, 3 D d, 4 E e, 5 G g, 6 H h, 7 I i, 8 J j, 9 K k);

/// A function whose signature was checked against `P` and `R` ([`Func::typed`]).
pub struct TypedFunc<P, R> {
    func: Func,
    _types: PhantomData<fn(P) -> R>,
}

impl<P, R> Clone for TypedFunc<P, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P, R> Copy for TypedFunc<P, R> {}

impl<P, R> std::fmt::Debug for TypedFunc<P, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TypedFunc({:?})", self.func)
    }
}

impl<P: WasmParams, R: WasmResults> TypedFunc<P, R> {
    pub(crate) fn new(func: Func) -> Self {
        TypedFunc {
            func,
            _types: PhantomData,
        }
    }

    /// The function, untyped.
    pub fn func(&self) -> &Func {
        &self.func
    }

    /// Calls the function; fails with the trap that ended it, if one did.
    pub fn call(&self, mut store: impl AsContextMut, params: P) -> Result<R, Error> {
        let store = store.as_context_mut().0 as *mut StoreInner<_> as *mut StoreOpaque;
        let n = P::COUNT.max(R::COUNT).max(1);
        let mut small = [0 as ValRaw; 16];
        let mut large = Vec::new();
        let values = if n <= small.len() {
            &mut small[..n]
        } else {
            large.resize(n, 0);
            &mut large[..]
        };
        // SAFETY: a store pointer derived from the exclusive borrow above, for this call only.
        params.store(unsafe { &*store }, values)?;
        // SAFETY: the store pointer is derived from the exclusive borrow above, which lasts
        // for the call, and the types were checked when this was made.
        unsafe { self.func.call_raw(store, values)? };
        // SAFETY: wasm has returned; a shared reference for this conversion only.
        Ok(R::load(unsafe { &*store }, values))
    }
}
