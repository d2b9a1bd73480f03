//! Component values, for calls whose types are known only at run time (wasmtime's
//! `component::Val`, same shape).

use crate::types::Type;

/// A component value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// A WIT `bool`.
    Bool(bool),
    /// A WIT `s8`.
    S8(i8),
    /// A WIT `u8`.
    U8(u8),
    /// A WIT `s16`.
    S16(i16),
    /// A WIT `u16`.
    U16(u16),
    /// A WIT `s32`.
    S32(i32),
    /// A WIT `u32`.
    U32(u32),
    /// A WIT `s64`.
    S64(i64),
    /// A WIT `u64`.
    U64(u64),
    /// A WIT `f32`.
    Float32(f32),
    /// A WIT `f64`.
    Float64(f64),
    /// A WIT `char`.
    Char(char),
    /// A WIT `string`.
    String(String),
    /// A WIT `list<T>`.
    List(Vec<Val>),
    /// A WIT `record`.
    Record(Vec<(String, Val)>),
    /// A WIT `tuple<…>`.
    Tuple(Vec<Val>),
    /// A WIT `variant`.
    Variant(String, Option<Box<Val>>),
    /// A WIT `enum`.
    Enum(String),
    /// A WIT `option<T>`.
    Option(Option<Box<Val>>),
    /// A WIT `result<T, E>`.
    Result(Result<Option<Box<Val>>, Option<Box<Val>>>),
    /// A WIT `flags`.
    Flags(Vec<String>),
    /// A WIT `own<R>` or `borrow<R>`: a handle to a host resource.
    Resource(crate::resources::ResourceAny),
}

impl Val {
    /// Whether the value has type `ty`: what a call checks of every argument before it lowers
    /// any (records' fields in order, flags each named once).
    pub fn has_type(&self, ty: &Type) -> bool {
        match (self, ty) {
            (Val::Bool(_), Type::Bool)
            | (Val::S8(_), Type::S8)
            | (Val::U8(_), Type::U8)
            | (Val::S16(_), Type::S16)
            | (Val::U16(_), Type::U16)
            | (Val::S32(_), Type::S32)
            | (Val::U32(_), Type::U32)
            | (Val::S64(_), Type::S64)
            | (Val::U64(_), Type::U64)
            | (Val::Float32(_), Type::Float32)
            | (Val::Float64(_), Type::Float64)
            | (Val::Char(_), Type::Char)
            | (Val::String(_), Type::String) => true,
            (Val::List(items), Type::List(t)) => items.iter().all(|v| v.has_type(t)),
            (Val::Record(values), Type::Record(fields)) => {
                values.len() == fields.len()
                    && (values.iter().zip(fields.iter()))
                        .all(|((n, v), f)| *n == f.name && v.has_type(&f.ty))
            }
            (Val::Tuple(values), Type::Tuple(types)) => {
                values.len() == types.len()
                    && values.iter().zip(types.iter()).all(|(v, t)| v.has_type(t))
            }
            (Val::Variant(name, payload), Type::Variant(cases)) => {
                match cases.iter().find(|c| c.name == *name) {
                    Some(c) => fits(payload, c.ty.as_ref()),
                    None => false,
                }
            }
            (Val::Enum(name), Type::Enum(names)) => names.contains(name),
            (Val::Option(v), Type::Option(t)) => v.as_ref().is_none_or(|v| v.has_type(t)),
            (Val::Result(r), Type::Result { ok, err }) => match r {
                Ok(v) => fits(v, ok.as_deref()),
                Err(v) => fits(v, err.as_deref()),
            },
            (Val::Resource(r), Type::Own(_)) => r.owned(),
            (Val::Resource(_), Type::Borrow(_)) => true,
            (Val::Flags(set), Type::Flags(names)) => {
                set.iter().all(|f| names.contains(f))
                    && set.iter().enumerate().all(|(i, f)| !set[..i].contains(f))
            }
            _ => false,
        }
    }
}

fn fits(payload: &Option<Box<Val>>, ty: Option<&Type>) -> bool {
    match (payload, ty) {
        (None, None) => true,
        (Some(v), Some(t)) => v.has_type(t),
        _ => false,
    }
}
