//! Typed calls: `func.typed::<(i32, i64), f64>()` checks the signature once, then calls
//! without building `Val`s.

use std::marker::PhantomData;

use ephem_module::{ValRaw, ValType};

use crate::{Engine, Error, Func, Val};

/// A Rust type that is a WebAssembly value type.
pub trait WasmTy: Sized {
    const TY: ValType;
    fn into_raw(self) -> ValRaw;
    fn from_raw(raw: ValRaw) -> Self;
}

macro_rules! wasm_ty {
    ($t:ty, $vt:expr, |$x:ident| $to:expr, |$r:ident| $from:expr) => {
        impl WasmTy for $t {
            const TY: ValType = $vt;
            fn into_raw(self) -> ValRaw {
                let $x = self;
                $to
            }
            fn from_raw($r: ValRaw) -> Self {
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
wasm_ty!(f32, ValType::F32, |x| x.to_bits() as ValRaw, |r| {
    f32::from_bits(r as u32)
});
wasm_ty!(f64, ValType::F64, |x| x.to_bits() as ValRaw, |r| {
    f64::from_bits(r as u64)
});

/// Parameters (a tuple of [`WasmTy`], or `()`).
pub trait WasmParams {
    fn types() -> Vec<ValType>;
    fn store(self, values: &mut [ValRaw]);
}

/// Results (a [`WasmTy`], a tuple of them, or `()`).
pub trait WasmResults: Sized {
    fn types() -> Vec<ValType>;
    fn load(values: &[ValRaw]) -> Self;
}

macro_rules! tuples {
    ($($n:tt $t:ident),*) => {
        impl<$($t: WasmTy),*> WasmParams for ($($t,)*) {
            fn types() -> Vec<ValType> { vec![$($t::TY),*] }
            #[allow(unused_variables)]
            fn store(self, values: &mut [ValRaw]) { $(values[$n] = self.$n.into_raw();)* }
        }
        impl<$($t: WasmTy),*> WasmResults for ($($t,)*) {
            fn types() -> Vec<ValType> { vec![$($t::TY),*] }
            #[allow(unused_variables)]
            #[allow(clippy::unused_unit)]
            fn load(values: &[ValRaw]) -> Self { ($($t::from_raw(values[$n]),)*) }
        }
    };
}

tuples!();
tuples!(0 A);
tuples!(0 A, 1 B);
tuples!(0 A, 1 B, 2 C);
tuples!(0 A, 1 B, 2 C, 3 D);
tuples!(0 A, 1 B, 2 C, 3 D, 4 E);
tuples!(0 A, 1 B, 2 C, 3 D, 4 E, 5 F);

macro_rules! single_result {
    ($($t:ty),*) => {$(
        impl WasmResults for $t {
            fn types() -> Vec<ValType> { vec![<$t as WasmTy>::TY] }
            fn load(values: &[ValRaw]) -> Self { <$t as WasmTy>::from_raw(values[0]) }
        }
    )*};
}
single_result!(i32, u32, i64, u64, f32, f64);

/// A function whose signature was checked against `P` and `R`.
pub struct TypedFunc<P, R> {
    func: Func,
    _types: PhantomData<fn(P) -> R>,
}

impl Func {
    /// This function as a [`TypedFunc`], if its signature is `P -> R`.
    pub fn typed<P: WasmParams, R: WasmResults>(&self) -> Result<TypedFunc<P, R>, Error> {
        let (params, results) = (P::types(), R::types());
        if params != self.ty().params || results != self.ty().results {
            return Err(Error::Type(format!(
                "function is {:?}, not {params:?} -> {results:?}",
                self.ty()
            )));
        }
        Ok(TypedFunc {
            func: self.clone(),
            _types: PhantomData,
        })
    }
}

impl<P: WasmParams, R: WasmResults> TypedFunc<P, R> {
    pub fn call(&self, engine: &Engine, params: P) -> Result<R, Error> {
        let ty = self.func.ty();
        let mut values = [0 as ValRaw; 16];
        let n = ty.params.len().max(ty.results.len());
        if n > values.len() {
            // Rare: wide signatures go through the dynamic path.
            let mut raw = vec![0 as ValRaw; n];
            params.store(&mut raw);
            let args: Vec<Val> = ty
                .params
                .iter()
                .zip(&raw)
                .map(|(&t, &r)| Val::from_raw(engine, t, r))
                .collect();
            let out: Vec<ValRaw> = self
                .func
                .call(engine, &args)?
                .iter()
                .map(Val::to_raw)
                .collect();
            return Ok(R::load(&out));
        }
        params.store(&mut values);
        self.func.call_raw(&mut values[..n.max(1)])?;
        Ok(R::load(&values))
    }
}
