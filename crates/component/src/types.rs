//! Component value types as the canonical ABI sees them, and what the ABI derives from a type:
//! its size and alignment in linear memory and its flattening into core values.
//!
//! A type is made once, at compile time, from the validator's type information (`translate`);
//! after that nothing consults wasmparser. Types are trees of `Arc`s, cheap to clone into every
//! function that uses them. Resource handles (`own`, `borrow`), `map`, fixed-length lists,
//! futures, streams and error contexts are refused when a component is compiled.

use std::sync::Arc;

/// How deep a type may nest: what bounds the recursion of every walk over a type (wasmtime
/// has the same bound).
pub(crate) const MAX_DEPTH: usize = 100;

/// A component value type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    /// A WIT `bool`.
    Bool,
    /// A WIT `s8`.
    S8,
    /// A WIT `u8`.
    U8,
    /// A WIT `s16`.
    S16,
    /// A WIT `u16`.
    U16,
    /// A WIT `s32`.
    S32,
    /// A WIT `u32`.
    U32,
    /// A WIT `s64`.
    S64,
    /// A WIT `u64`.
    U64,
    /// A WIT `f32`.
    Float32,
    /// A WIT `f64`.
    Float64,
    /// A WIT `char`.
    Char,
    /// A WIT `string`.
    String,
    /// A WIT `list<T>`.
    List(Arc<Type>),
    /// A WIT `record`.
    Record(Arc<[Field]>),
    /// A WIT `tuple<…>`.
    Tuple(Arc<[Type]>),
    /// A WIT `variant`.
    Variant(Arc<[Case]>),
    /// A WIT `enum`.
    Enum(Arc<[String]>),
    /// A WIT `option<T>`.
    Option(Arc<Type>),
    /// A WIT `result<T, E>`.
    Result {
        /// The `ok` case's payload, if it has one.
        ok: Option<Arc<Type>>,
        /// The `error` case's payload, if it has one.
        err: Option<Arc<Type>>,
    },
    /// A WIT `flags`.
    Flags(Arc<[String]>),
    /// A WIT `own<R>`: a handle that passes the resource on.
    Own(ResourceIndex),
    /// A WIT `borrow<R>`: a handle lent for the length of a call.
    Borrow(ResourceIndex),
}

/// Which resource type a handle is of: one of the resources a component's plan knows (the
/// host's, by the import they come through). Before flattening (`inline`), the number is the
/// validator's resource, numbered as `translate` meets them; after, the plan's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceIndex(pub(crate) u32);

/// A record's field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name.
    pub name: String,
    /// The field's type.
    pub ty: Type,
}

/// A variant's case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The case's name.
    pub name: String,
    /// The case's payload type, if it has one.
    pub ty: Option<Type>,
}

/// A component function's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncType {
    /// The parameters, by name, in order.
    pub params: Vec<(String, Type)>,
    /// The result, if the function has one.
    pub result: Option<Type>,
    /// Whether the parameters pass as core parameters (else through memory), and the result
    /// as a core result: worked out once, as every call asks.
    pub(crate) params_fit: bool,
    pub(crate) results_fit: bool,
    /// Its types' size written out in full, when `translate` made it (0 otherwise): what
    /// rebuilding it costs.
    pub(crate) size: u64,
}

/// A core value type of a flattened component value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flat {
    I32,
    I64,
    F32,
    F64,
}

impl Flat {
    /// The type one slot of a variant takes when its cases put `self` and `other` there.
    fn join(self, other: Flat) -> Flat {
        match (self, other) {
            (a, b) if a == b => a,
            (Flat::I32, Flat::F32) | (Flat::F32, Flat::I32) => Flat::I32,
            _ => Flat::I64,
        }
    }

    pub(crate) fn core(self) -> ephem_runtime::ValType {
        match self {
            Flat::I32 => ephem_runtime::ValType::I32,
            Flat::I64 => ephem_runtime::ValType::I64,
            Flat::F32 => ephem_runtime::ValType::F32,
            Flat::F64 => ephem_runtime::ValType::F64,
        }
    }
}

/// The most core parameters a function passes flat, and results it returns flat; past these
/// they travel through linear memory.
pub(crate) const MAX_FLAT_PARAMS: usize = 16;
pub(crate) const MAX_FLAT_RESULTS: usize = 1;

impl Type {
    /// The type with every resource replaced by what `map` gives for it; `None` where `map`
    /// gives none.
    pub(crate) fn map_resources(
        &self,
        map: &mut impl FnMut(ResourceIndex) -> Option<ResourceIndex>,
    ) -> Option<Type> {
        let mut sub = |t: &Type| t.map_resources(&mut *map);
        Some(match self {
            Type::Own(r) => Type::Own(map(*r)?),
            Type::Borrow(r) => Type::Borrow(map(*r)?),
            Type::List(t) => Type::List(Arc::new(sub(t)?)),
            Type::Option(t) => Type::Option(Arc::new(sub(t)?)),
            Type::Record(fields) => Type::Record(
                (fields.iter())
                    .map(|f| {
                        Some(Field {
                            name: f.name.clone(),
                            ty: sub(&f.ty)?,
                        })
                    })
                    .collect::<Option<_>>()?,
            ),
            Type::Tuple(types) => Type::Tuple(types.iter().map(sub).collect::<Option<_>>()?),
            Type::Variant(cases) => Type::Variant(
                (cases.iter())
                    .map(|c| {
                        Some(Case {
                            name: c.name.clone(),
                            ty: match &c.ty {
                                Some(t) => Some(sub(t)?),
                                None => None,
                            },
                        })
                    })
                    .collect::<Option<_>>()?,
            ),
            Type::Result { ok, err } => Type::Result {
                ok: match ok {
                    Some(t) => Some(Arc::new(sub(t)?)),
                    None => None,
                },
                err: match err {
                    Some(t) => Some(Arc::new(sub(t)?)),
                    None => None,
                },
            },
            other => other.clone(),
        })
    }

    /// Whether a resource handle is anywhere in the type.
    #[cfg(feature = "cranelift")]
    pub(crate) fn has_resources(&self) -> bool {
        let mut found = false;
        self.map_resources(&mut |r| {
            found = true;
            Some(r)
        });
        found
    }

    /// The cases of a type that the ABI lays out as a variant (a variant, an enum, an option, a
    /// result), each with its payload; `None` for the others.
    pub(crate) fn cases(&self) -> Option<Vec<Option<&Type>>> {
        Some(match self {
            Type::Variant(cases) => cases.iter().map(|c| c.ty.as_ref()).collect(),
            Type::Enum(names) => vec![None; names.len()],
            Type::Option(t) => vec![None, Some(&**t)],
            Type::Result { ok, err } => vec![ok.as_deref(), err.as_deref()],
            _ => return None,
        })
    }

    /// The bytes of a variant's discriminant with `cases` cases.
    pub(crate) fn discriminant_size(cases: usize) -> u32 {
        match cases {
            0..=0x100 => 1,
            0x101..=0x1_0000 => 2,
            _ => 4,
        }
    }

    /// The 32-bit words a flags type with `n` flags takes.
    pub(crate) fn flag_words(n: usize) -> usize {
        n.div_ceil(32)
    }

    pub(crate) fn align(&self) -> u32 {
        self.layout().1
    }

    pub(crate) fn size(&self) -> u32 {
        self.layout().0
    }

    /// Where a variant's payload starts, past its discriminant.
    pub(crate) fn payload_offset(&self) -> u32 {
        let (cases, _, payload_align) = self.variant_layout().expect("a variant");
        align_to(Type::discriminant_size(cases), payload_align)
    }

    /// The size and alignment together, each part's worked out once: one walk of the type,
    /// as every value the ABI moves asks for them.
    fn layout(&self) -> (u32, u32) {
        match self {
            Type::Bool | Type::S8 | Type::U8 => (1, 1),
            Type::S16 | Type::U16 => (2, 2),
            Type::S32 | Type::U32 | Type::Float32 | Type::Char => (4, 4),
            Type::Own(_) | Type::Borrow(_) => (4, 4),
            Type::S64 | Type::U64 | Type::Float64 => (8, 8),
            Type::String | Type::List(_) => (8, 4),
            Type::Record(fields) => record_layout(fields.iter().map(|f| &f.ty)),
            Type::Tuple(types) => record_layout(types.iter()),
            Type::Flags(names) => match names.len() {
                0 => (0, 1),
                1..=8 => (1, 1),
                9..=16 => (2, 2),
                n => (4 * Type::flag_words(n) as u32, 4),
            },
            _ => {
                let (cases, payload_size, payload_align) =
                    self.variant_layout().expect("a variant");
                let discriminant = Type::discriminant_size(cases);
                let align = discriminant.max(payload_align);
                let offset = align_to(discriminant, payload_align);
                (align_to(offset.saturating_add(payload_size), align), align)
            }
        }
    }

    /// A variant's (or an enum's, option's, result's) number of cases and its payloads'
    /// largest size and alignment; `None` for the other types.
    fn variant_layout(&self) -> Option<(usize, u32, u32)> {
        let max = |payloads: &mut dyn Iterator<Item = &Type>| {
            payloads.fold((0, 1), |(size, align), t| {
                let (s, a) = t.layout();
                (size.max(s), align.max(a))
            })
        };
        let (cases, (size, align)) = match self {
            Type::Variant(cases) => (cases.len(), max(&mut cases.iter().flat_map(|c| &c.ty))),
            Type::Enum(names) => (names.len(), (0, 1)),
            Type::Option(t) => (2, t.layout()),
            Type::Result { ok, err } => (2, max(&mut ok.iter().chain(err).map(|t| &**t))),
            _ => return None,
        };
        Some((cases, size, align))
    }

    /// Appends the core types this type flattens to.
    pub(crate) fn flatten(&self, out: &mut Vec<Flat>) {
        match self {
            Type::Bool
            | Type::S8
            | Type::U8
            | Type::S16
            | Type::U16
            | Type::S32
            | Type::U32
            | Type::Char
            | Type::Enum(_)
            | Type::Own(_)
            | Type::Borrow(_) => out.push(Flat::I32),
            Type::S64 | Type::U64 => out.push(Flat::I64),
            Type::Float32 => out.push(Flat::F32),
            Type::Float64 => out.push(Flat::F64),
            Type::String | Type::List(_) => out.extend([Flat::I32, Flat::I32]),
            Type::Record(fields) => fields.iter().for_each(|f| f.ty.flatten(out)),
            Type::Tuple(types) => types.iter().for_each(|t| t.flatten(out)),
            Type::Flags(names) => out.extend(std::iter::repeat_n(
                Flat::I32,
                Type::flag_words(names.len()),
            )),
            _ => {
                let mut joined: Vec<Flat> = Vec::new();
                for payload in self.cases().expect("a variant").into_iter().flatten() {
                    let mut flat = Vec::new();
                    payload.flatten(&mut flat);
                    for (i, f) in flat.into_iter().enumerate() {
                        match joined.get_mut(i) {
                            Some(j) => *j = j.join(f),
                            None => joined.push(f),
                        }
                    }
                }
                out.push(Flat::I32);
                out.extend(joined);
            }
        }
    }

    pub(crate) fn flat(&self) -> Vec<Flat> {
        let mut out = Vec::new();
        self.flatten(&mut out);
        out
    }
}

impl FuncType {
    /// The type with its resources mapped as [`Type::map_resources`] does.
    pub(crate) fn map_resources(
        &self,
        map: &mut impl FnMut(ResourceIndex) -> Option<ResourceIndex>,
    ) -> Option<FuncType> {
        let params = (self.params.iter())
            .map(|(n, t)| Some((n.clone(), t.map_resources(&mut *map)?)))
            .collect::<Option<_>>()?;
        let result = match &self.result {
            Some(t) => Some(t.map_resources(map)?),
            None => None,
        };
        Some(FuncType::new(params, result))
    }

    /// The function type with `params` and `result`.
    pub fn new(params: Vec<(String, Type)>, result: Option<Type>) -> FuncType {
        let mut func = FuncType {
            params,
            result,
            params_fit: false,
            results_fit: false,
            size: 0,
        };
        func.params_fit = func.flat_params().1;
        func.results_fit = func.flat_results().1;
        func
    }

    /// The parameters as one tuple: how they are laid out when they travel through memory.
    pub(crate) fn params_tuple(&self) -> Type {
        Type::Tuple(self.params.iter().map(|(_, t)| t.clone()).collect())
    }

    /// The flattened parameters, and whether they fit in core parameters at all.
    pub(crate) fn flat_params(&self) -> (Vec<Flat>, bool) {
        let mut flat = Vec::new();
        for (_, t) in &self.params {
            t.flatten(&mut flat);
        }
        let fits = flat.len() <= MAX_FLAT_PARAMS;
        (flat, fits)
    }

    /// The flattened result, and whether it fits in core results.
    pub(crate) fn flat_results(&self) -> (Vec<Flat>, bool) {
        let flat = self.result.as_ref().map(Type::flat).unwrap_or_default();
        let fits = flat.len() <= MAX_FLAT_RESULTS;
        (flat, fits)
    }

    /// The core signature of this function lifted (`lower == false`: what the core function
    /// being lifted must have) or lowered (what `canon lower` gives the core module).
    pub(crate) fn core(&self, lower: bool) -> ephem_runtime::FuncType {
        let (params, params_fit) = self.flat_params();
        let (results, results_fit) = self.flat_results();
        let mut core_params: Vec<_> = if params_fit {
            params.iter().map(|f| f.core()).collect()
        } else {
            vec![ephem_runtime::ValType::I32]
        };
        let core_results = if results_fit {
            results.iter().map(|f| f.core()).collect()
        } else if lower {
            core_params.push(ephem_runtime::ValType::I32);
            Vec::new()
        } else {
            vec![ephem_runtime::ValType::I32]
        };
        ephem_runtime::FuncType::new(core_params, core_results)
    }
}

/// `offset` rounded up to `align`; at the top of the 32-bit space it stays there rather than
/// wrap (only a zero-sized field could be placed past a value ending there).
pub(crate) fn align_to(offset: u32, align: u32) -> u32 {
    let up = (offset as u64).div_ceil(align as u64) * align as u64;
    up.min(u32::MAX as u64) as u32
}

/// The size and alignment of fields laid out in order.
fn record_layout<'a>(types: impl Iterator<Item = &'a Type>) -> (u32, u32) {
    let mut size = 0;
    let mut align = 1;
    for t in types {
        let (s, a) = t.layout();
        size = align_to(size, a).saturating_add(s);
        align = align.max(a);
    }
    (align_to(size, align), align)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(types: &[Type]) -> Type {
        Type::Tuple(types.iter().cloned().collect())
    }

    // Sizes and flattenings worked out by hand from the canonical ABI's definitions.
    #[test]
    fn sizes_alignments_and_flattenings_follow_the_canonical_abi() {
        let t = tuple(&[Type::U8, Type::U32, Type::U16]);
        assert_eq!((t.size(), t.align()), (12, 4));
        let r = Type::Result {
            ok: Some(Arc::new(Type::U64)),
            err: Some(Arc::new(Type::Float32)),
        };
        assert_eq!((r.size(), r.align(), r.payload_offset()), (16, 8, 8));
        assert_eq!(r.flat(), vec![Flat::I32, Flat::I64]);
        let o = Type::Option(Arc::new(Type::Float32));
        assert_eq!((o.size(), o.flat()), (8, vec![Flat::I32, Flat::F32]));
        let v = Type::Variant(Arc::from([
            Case {
                name: "a".into(),
                ty: Some(Type::Float32),
            },
            Case {
                name: "b".into(),
                ty: Some(Type::U32),
            },
        ]));
        assert_eq!(v.flat(), vec![Flat::I32, Flat::I32]);
        let flags = |n: usize| Type::Flags((0..n).map(|i| i.to_string()).collect());
        assert_eq!(
            (flags(0).size(), flags(8).size(), flags(9).size()),
            (0, 1, 2)
        );
        assert_eq!((flags(33).size(), flags(33).flat().len()), (8, 2));
        let e = Type::Enum((0..300).map(|i| i.to_string()).collect());
        assert_eq!((e.size(), e.align()), (2, 2));
        assert_eq!(Type::String.flat(), vec![Flat::I32, Flat::I32]);
    }
}
