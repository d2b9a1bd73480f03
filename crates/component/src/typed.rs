//! Rust types as component types, for [`TypedFunc`](crate::TypedFunc) and
//! [`LinkerInstance::func_wrap`](crate::LinkerInstance::func_wrap).
//!
//! A typed value goes through a [`Val`] on its way in and out of the canonical ABI: one
//! mechanism for both kinds of call, at the cost of building the `Val`. The types are checked
//! once, when the typed function is made, so the conversions cannot fail on a checked type.

use crate::types::Type;
use crate::values::Val;

/// A Rust type with a component type.
pub trait ComponentType: Sized {
    /// Whether this is `()`, the absent payload of a `result` case.
    #[doc(hidden)]
    const UNIT: bool = false;
    /// Whether values of this Rust type are values of `ty`.
    fn typecheck(ty: &Type) -> bool;
    /// The value as a [`Val`].
    fn into_val(self) -> Val;
    /// The Rust value of a [`Val`] of a checked type; `None` for another type.
    fn from_val(val: Val) -> Option<Self>;
}

/// A tuple of [`ComponentType`]s: a function's parameters, or its results (`()` or `(T,)`).
pub trait ComponentNamedList: Sized {
    /// Whether the tuple's elements are values of `types`, one for one.
    fn typecheck(types: &[&Type]) -> bool;
    /// The elements as [`Val`]s.
    fn into_vals(self) -> Vec<Val>;
    /// The tuple of [`Val`]s of checked types; `None` for others.
    fn from_vals(vals: Vec<Val>) -> Option<Self>;
}

macro_rules! scalar {
    ($($rust:ty => $variant:ident),* $(,)?) => {$(
        impl ComponentType for $rust {
            fn typecheck(ty: &Type) -> bool {
                matches!(ty, Type::$variant)
            }
            fn into_val(self) -> Val {
                Val::$variant(self)
            }
            fn from_val(val: Val) -> Option<Self> {
                match val {
                    Val::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

scalar! {
    bool => Bool, i8 => S8, u8 => U8, i16 => S16, u16 => U16, i32 => S32, u32 => U32,
    i64 => S64, u64 => U64, f32 => Float32, f64 => Float64, char => Char, String => String,
}

impl<T: ComponentType> ComponentType for Vec<T> {
    fn typecheck(ty: &Type) -> bool {
        matches!(ty, Type::List(t) if T::typecheck(t))
    }
    fn into_val(self) -> Val {
        Val::List(self.into_iter().map(T::into_val).collect())
    }
    fn from_val(val: Val) -> Option<Self> {
        match val {
            Val::List(items) => items.into_iter().map(T::from_val).collect(),
            _ => None,
        }
    }
}

impl<T: ComponentType> ComponentType for Option<T> {
    fn typecheck(ty: &Type) -> bool {
        matches!(ty, Type::Option(t) if T::typecheck(t))
    }
    fn into_val(self) -> Val {
        Val::Option(self.map(|v| Box::new(v.into_val())))
    }
    fn from_val(val: Val) -> Option<Self> {
        match val {
            Val::Option(None) => Some(None),
            Val::Option(Some(v)) => T::from_val(*v).map(Some),
            _ => None,
        }
    }
}

fn payload_typecheck<T: ComponentType>(ty: Option<&Type>) -> bool {
    match ty {
        None => T::UNIT,
        Some(t) => T::typecheck(t),
    }
}

fn payload_into<T: ComponentType>(v: T) -> Option<Box<Val>> {
    if T::UNIT {
        None
    } else {
        Some(Box::new(v.into_val()))
    }
}

fn payload_from<T: ComponentType>(v: Option<Box<Val>>) -> Option<T> {
    match v {
        Some(v) => T::from_val(*v),
        None => T::from_val(Val::Tuple(Vec::new())),
    }
}

impl<T: ComponentType, E: ComponentType> ComponentType for Result<T, E> {
    fn typecheck(ty: &Type) -> bool {
        match ty {
            Type::Result { ok, err } => {
                payload_typecheck::<T>(ok.as_deref()) && payload_typecheck::<E>(err.as_deref())
            }
            _ => false,
        }
    }
    fn into_val(self) -> Val {
        Val::Result(match self {
            Ok(v) => Ok(payload_into(v)),
            Err(e) => Err(payload_into(e)),
        })
    }
    fn from_val(val: Val) -> Option<Self> {
        match val {
            Val::Result(Ok(v)) => payload_from(v).map(Ok),
            Val::Result(Err(e)) => payload_from(e).map(Err),
            _ => None,
        }
    }
}

macro_rules! tuples {
    ($(($($t:ident),*)),* $(,)?) => {$(
        #[allow(non_snake_case)]
        impl<$($t: ComponentType),*> ComponentType for ($($t,)*) {
            const UNIT: bool = 0 $(+ { let _ = stringify!($t); 1 })* == 0;
            fn typecheck(ty: &Type) -> bool {
                match ty {
                    Type::Tuple(types) => {
                        let types: Vec<&Type> = types.iter().collect();
                        <Self as ComponentNamedList>::typecheck(&types)
                    }
                    _ => false,
                }
            }
            fn into_val(self) -> Val {
                Val::Tuple(<Self as ComponentNamedList>::into_vals(self))
            }
            fn from_val(val: Val) -> Option<Self> {
                match val {
                    Val::Tuple(vals) => <Self as ComponentNamedList>::from_vals(vals),
                    _ => None,
                }
            }
        }

        #[allow(non_snake_case, unused_mut, unused_variables)]
        impl<$($t: ComponentType),*> ComponentNamedList for ($($t,)*) {
            fn typecheck(types: &[&Type]) -> bool {
                let mut types = types.iter();
                $( if !types.next().is_some_and(|t| $t::typecheck(t)) { return false; } )*
                types.next().is_none()
            }
            fn into_vals(self) -> Vec<Val> {
                let ($($t,)*) = self;
                vec![$($t.into_val()),*]
            }
            fn from_vals(vals: Vec<Val>) -> Option<Self> {
                let mut vals = vals.into_iter();
                let out = ($($t::from_val(vals.next()?)?,)*);
                vals.next().is_none().then_some(out)
            }
        }
    )*};
}

tuples! {
    (),
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H),
}
