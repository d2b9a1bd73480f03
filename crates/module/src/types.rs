//! WebAssembly's types and constant expressions, as the compiler writes them and the runtime
//! reads them (native and archived, see [`crate::native`]), and the small ids that let an
//! engine use a short signature as its canonical type id without registering it.
//!
//! Invariant: [`small_id`] and [`from_small_id`] are inverse on every signature of at most
//! [`SMALL_SIGNATURE`] types, and no two signatures share an id; [`FuncType::key`] and
//! [`ArchivedFuncType::key`] write equal bytes for equal signatures.

use rkyv::{Archive, Deserialize, Serialize};

/// A WebAssembly value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum ValType {
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 128-bit vector (fixed-width SIMD).
    V128,
    /// A reference.
    Ref(RefType),
}

/// A reference type: what it refers to, and whether it may be null.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct RefType {
    /// Whether null is a value of this type.
    pub nullable: bool,
    /// What a non-null value refers to.
    pub heap: HeapType,
}

/// What a reference refers to. Function references form one hierarchy (`nofunc` below every
/// concrete function type, each below `func`), host references another (`noextern` below
/// `extern`), exceptions a third (`noexn` below `exn`), and GC's references a fourth (`none`
/// below every concrete struct and array type, those below `struct` and `array`, which with
/// `i31` are below `eq`, below `any`).
///
/// A concrete type is named by index: in a module's own description, the index of one of its
/// types; in a type an engine hands out (`Engine::func_type`, an export's type), the engine's
/// canonical type id. Its variant says which kind of type it names, so that which hierarchy a
/// reference belongs to needs no type list. (How a reference's bits look: [`crate::gc`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum HeapType {
    /// Any function.
    Func,
    /// Any host value.
    Extern,
    /// No function (only null is a value).
    NoFunc,
    /// No host value (only null is a value).
    NoExtern,
    /// A function of one type.
    ConcreteFunc(u32),
    /// Any exception (`exnref`).
    Exn,
    /// No exception (only null is a value).
    NoExn,
    /// Any GC value: a struct, an array or an `i31`.
    Any,
    /// A value that `ref.eq` compares: a struct, an array or an `i31`.
    Eq,
    /// A 31-bit integer as a reference.
    I31,
    /// Any struct.
    Struct,
    /// Any array.
    Array,
    /// No GC value (only null is a value).
    None,
    /// A struct of one type.
    ConcreteStruct(u32),
    /// An array of one type.
    ConcreteArray(u32),
}

impl HeapType {
    /// Whether values of this heap type are functions (the function hierarchy).
    pub fn is_func(self) -> bool {
        matches!(
            self,
            HeapType::Func | HeapType::NoFunc | HeapType::ConcreteFunc(_)
        )
    }

    /// Whether values of this heap type are exceptions (the exception hierarchy).
    pub fn is_exn(self) -> bool {
        matches!(self, HeapType::Exn | HeapType::NoExn)
    }

    /// Whether values of this heap type may name GC objects, which a collector must find
    /// (see `gc`): those of the `any` and `extern` hierarchies but the ones that hold no
    /// object (`i31`, `none`, `noextern`).
    pub fn holds_objects(self) -> bool {
        matches!(
            self,
            HeapType::Any
                | HeapType::Eq
                | HeapType::Struct
                | HeapType::Array
                | HeapType::ConcreteStruct(_)
                | HeapType::ConcreteArray(_)
                | HeapType::Extern
        )
    }

    /// Whether values of this heap type are host values (the extern hierarchy).
    pub fn is_extern(self) -> bool {
        matches!(self, HeapType::Extern | HeapType::NoExtern)
    }

    /// Whether values of this heap type are GC values (the `any` hierarchy).
    pub fn is_any(self) -> bool {
        !self.is_func() && !self.is_exn() && !self.is_extern()
    }

    /// Whether `self` is a subtype of `other`, where concrete indices of both are in one
    /// index space and equal types have equal indices (canonical ids, or one module's types),
    /// and no concrete type declares a supertype (see [`HeapType::matches_with`]).
    pub fn matches(self, other: HeapType) -> bool {
        self.matches_with(other, &|_, _| false)
    }

    /// As [`HeapType::matches`], where `below(a, b)` says whether concrete type `a` is a
    /// declared subtype (directly or not) of `b`, another type of its kind.
    pub fn matches_with(self, other: HeapType, below: &dyn Fn(u32, u32) -> bool) -> bool {
        use HeapType::*;
        match (self, other) {
            (a, b) if a == b => true,
            (ConcreteFunc(a), ConcreteFunc(b))
            | (ConcreteStruct(a), ConcreteStruct(b))
            | (ConcreteArray(a), ConcreteArray(b)) => below(a, b),
            (NoFunc, ConcreteFunc(_) | Func) | (ConcreteFunc(_), Func) => true,
            (NoExtern, Extern) | (NoExn, Exn) => true,
            (None, b) => b.is_any(),
            (ConcreteStruct(_), Struct) | (ConcreteArray(_), Array) => true,
            (ConcreteStruct(_) | ConcreteArray(_) | Struct | Array | I31, Eq) => true,
            (a, Any) => a.is_any(),
            _ => false,
        }
    }

    /// The concrete type index this heap type names, if it names one.
    pub fn concrete(self) -> Option<u32> {
        match self {
            HeapType::ConcreteFunc(i)
            | HeapType::ConcreteStruct(i)
            | HeapType::ConcreteArray(i) => Some(i),
            _ => Option::None,
        }
    }

    /// This heap type with a concrete index mapped by `f`.
    pub fn map(self, f: impl FnOnce(u32) -> u32) -> HeapType {
        match self {
            HeapType::ConcreteFunc(i) => HeapType::ConcreteFunc(f(i)),
            HeapType::ConcreteStruct(i) => HeapType::ConcreteStruct(f(i)),
            HeapType::ConcreteArray(i) => HeapType::ConcreteArray(f(i)),
            other => other,
        }
    }

    /// The byte that identifies this heap type in a key, but for a concrete index.
    fn key_byte(self) -> u8 {
        match self {
            HeapType::Func => 0,
            HeapType::Extern => 1,
            HeapType::NoFunc => 2,
            HeapType::NoExtern => 3,
            HeapType::ConcreteFunc(_) => 4,
            HeapType::Exn => 5,
            HeapType::NoExn => 6,
            HeapType::Any => 7,
            HeapType::Eq => 8,
            HeapType::I31 => 9,
            HeapType::Struct => 10,
            HeapType::Array => 11,
            HeapType::None => 12,
            HeapType::ConcreteStruct(_) => 13,
            HeapType::ConcreteArray(_) => 14,
        }
    }
}

impl RefType {
    /// `funcref`: any function, or null.
    pub const FUNCREF: RefType = RefType {
        nullable: true,
        heap: HeapType::Func,
    };
    /// `externref`: any host value, or null.
    pub const EXTERNREF: RefType = RefType {
        nullable: true,
        heap: HeapType::Extern,
    };
    /// `exnref`: any exception, or null.
    pub const EXNREF: RefType = RefType {
        nullable: true,
        heap: HeapType::Exn,
    };
    /// `anyref`: any GC value, or null.
    pub const ANYREF: RefType = RefType {
        nullable: true,
        heap: HeapType::Any,
    };

    /// See [`HeapType::matches`]; a nullable type is never below a non-nullable one.
    pub fn matches(self, other: RefType) -> bool {
        self.matches_with(other, &|_, _| false)
    }

    /// See [`HeapType::matches_with`].
    pub fn matches_with(self, other: RefType, below: &dyn Fn(u32, u32) -> bool) -> bool {
        (!self.nullable || other.nullable) && self.heap.matches_with(other.heap, below)
    }
}

impl ValType {
    /// Whether values of this type may name GC objects (see [`HeapType::holds_objects`]).
    pub fn holds_objects(self) -> bool {
        matches!(self, ValType::Ref(r) if r.heap.holds_objects())
    }

    /// `funcref`.
    pub const FUNCREF: ValType = ValType::Ref(RefType::FUNCREF);
    /// `externref`.
    pub const EXTERNREF: ValType = ValType::Ref(RefType::EXTERNREF);
    /// `exnref`.
    pub const EXNREF: ValType = ValType::Ref(RefType::EXNREF);
    /// `anyref`.
    pub const ANYREF: ValType = ValType::Ref(RefType::ANYREF);

    /// The value types of WebAssembly 2.0, in the order of their [`small_id`] digits.
    pub const SMALL: [ValType; 7] = [
        ValType::I32,
        ValType::I64,
        ValType::F32,
        ValType::F64,
        ValType::FUNCREF,
        ValType::EXTERNREF,
        ValType::V128,
    ];

    pub fn is_ref(self) -> bool {
        matches!(self, ValType::Ref(_))
    }

    /// The reference type, if this is one.
    pub fn as_ref(self) -> Option<RefType> {
        match self {
            ValType::Ref(r) => Some(r),
            _ => None,
        }
    }

    /// Whether this is a reference to a function (of any function type), possibly null:
    /// represented as a pointer to a `VmFuncRef`, 0 for null.
    pub fn is_func_ref(self) -> bool {
        matches!(self, ValType::Ref(r) if r.heap.is_func())
    }

    /// Whether this is a reference to a host value, possibly null.
    pub fn is_extern_ref(self) -> bool {
        matches!(self, ValType::Ref(r) if r.heap.is_extern())
    }

    /// Whether this is a reference of GC's `any` hierarchy, possibly null (see [`crate::gc`]
    /// for its bits).
    pub fn is_any_ref(self) -> bool {
        matches!(self, ValType::Ref(r) if r.heap.is_any())
    }

    /// Whether this is a reference to an exception, possibly null: represented as a pointer
    /// to its store's record of it (see [`crate::VmOffsets::EXN_VALUES`]), 0 for null.
    pub fn is_exn_ref(self) -> bool {
        matches!(self, ValType::Ref(r) if r.heap.is_exn())
    }

    /// Whether a value of this type is a zero-initialised default (a non-nullable reference
    /// has none).
    pub fn defaultable(self) -> bool {
        !matches!(self, ValType::Ref(r) if !r.nullable)
    }

    /// Whether `self` is a subtype of `other` (see [`HeapType::matches`] for the indices).
    pub fn matches(self, other: ValType) -> bool {
        self.matches_with(other, &|_, _| false)
    }

    /// See [`HeapType::matches_with`].
    pub fn matches_with(self, other: ValType, below: &dyn Fn(u32, u32) -> bool) -> bool {
        match (self, other) {
            (ValType::Ref(a), ValType::Ref(b)) => a.matches_with(b, below),
            (a, b) => a == b,
        }
    }

    /// This type with a concrete index mapped by `f`.
    pub fn map_concrete(self, f: impl FnOnce(u32) -> u32) -> ValType {
        match self {
            ValType::Ref(r) => ValType::Ref(RefType {
                nullable: r.nullable,
                heap: r.heap.map(f),
            }),
            other => other,
        }
    }

    /// The concrete type index this type names, if it names one.
    pub fn concrete(self) -> Option<u32> {
        self.as_ref()?.heap.concrete()
    }

    /// The digit of this type in a [`small_id`], if it has one.
    fn small_digit(self) -> Option<u32> {
        Some(match self {
            ValType::I32 => 1,
            ValType::I64 => 2,
            ValType::F32 => 3,
            ValType::F64 => 4,
            ValType::FUNCREF => 5,
            ValType::EXTERNREF => 6,
            ValType::V128 => 7,
            ValType::Ref(_) => return None,
        })
    }

    /// Appends the bytes that identify this type within a signature key, with `concrete`
    /// writing what identifies a concrete type index.
    pub fn key(self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        if let Some(d) = self.small_digit() {
            out.push(d as u8);
            return;
        }
        let ValType::Ref(r) = self else {
            unreachable!("every type but references has a digit")
        };
        out.push(8 + r.nullable as u8);
        out.push(r.heap.key_byte());
        if let Some(i) = r.heap.concrete() {
            concrete(i, out);
        }
    }
}

impl ArchivedValType {
    pub fn native(&self) -> ValType {
        match self {
            ArchivedValType::I32 => ValType::I32,
            ArchivedValType::I64 => ValType::I64,
            ArchivedValType::F32 => ValType::F32,
            ArchivedValType::F64 => ValType::F64,
            ArchivedValType::V128 => ValType::V128,
            ArchivedValType::Ref(r) => ValType::Ref(r.native()),
        }
    }
}

impl ArchivedRefType {
    pub fn native(&self) -> RefType {
        RefType {
            nullable: self.nullable,
            heap: match self.heap {
                ArchivedHeapType::Func => HeapType::Func,
                ArchivedHeapType::Extern => HeapType::Extern,
                ArchivedHeapType::NoFunc => HeapType::NoFunc,
                ArchivedHeapType::NoExtern => HeapType::NoExtern,
                ArchivedHeapType::ConcreteFunc(i) => HeapType::ConcreteFunc(i.to_native()),
                ArchivedHeapType::Exn => HeapType::Exn,
                ArchivedHeapType::NoExn => HeapType::NoExn,
                ArchivedHeapType::Any => HeapType::Any,
                ArchivedHeapType::Eq => HeapType::Eq,
                ArchivedHeapType::I31 => HeapType::I31,
                ArchivedHeapType::Struct => HeapType::Struct,
                ArchivedHeapType::Array => HeapType::Array,
                ArchivedHeapType::None => HeapType::None,
                ArchivedHeapType::ConcreteStruct(i) => HeapType::ConcreteStruct(i.to_native()),
                ArchivedHeapType::ConcreteArray(i) => HeapType::ConcreteArray(i.to_native()),
            },
        }
    }
}

/// A recursion group of more than one type (WebAssembly 3.0): types `[start, start + len)` of
/// a module, which may name each other whatever their order. A type of such a group is
/// identified by the whole group and its place in it, never by its own structure alone: two
/// structurally equal types of one group are different types, and neither is the lone type of
/// the same structure. A type outside every group is a group of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RecGroup {
    pub start: u32,
    pub len: u32,
}

impl ArchivedRecGroup {
    pub fn native(&self) -> RecGroup {
        RecGroup {
            start: self.start.to_native(),
            len: self.len.to_native(),
        }
    }
}

/// A function type as keys are made of it: native or archived.
pub trait KeyedType {
    /// See [`FuncType::key`].
    fn key_into(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>));
}

impl KeyedType for FuncType {
    fn key_into(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        self.key(out, concrete)
    }
}

impl KeyedType for ArchivedFuncType {
    fn key_into(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        self.key(out, concrete)
    }
}

impl KeyedType for TypeDef {
    fn key_into(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        self.key(out, concrete)
    }
}

/// Keyed as the native type is (the archived form is rare enough to be made native first).
impl KeyedType for ArchivedTypeDef {
    fn key_into(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        match self.as_func() {
            Some(f) => f.key(out, concrete),
            None => self.native().key(out, concrete),
        }
    }
}

/// The group of type `i` among `groups` (sorted, disjoint), or `None` when it is alone.
pub fn group_of(groups: &[RecGroup], i: u32) -> Option<RecGroup> {
    let k = groups.partition_point(|g| g.start <= i).checked_sub(1)?;
    let g = groups[k];
    (i - g.start < g.len).then_some(g)
}

/// Writes to `out` (clearing it) the bytes that identify type `i` of `types` in every module:
/// for a type alone, its [`FuncType::key`], with `outside` writing what identifies an earlier
/// type it names and a mark for itself (see [`concrete_by_id`]); for a type of a group of
/// `groups`, the group's size, the type's place in it and every member's key, where a member
/// named is written by its place and a type before the group by `outside`. Types name only
/// earlier types or members of their own group (`ModuleInfo::check`).
pub fn type_key<T: KeyedType>(
    types: &[T],
    sub: &dyn Fn(u32) -> Sub,
    groups: &[RecGroup],
    i: u32,
    out: &mut Vec<u8>,
    outside: &mut dyn FnMut(u32, &mut Vec<u8>),
) {
    // (A group past the types, which only forged metadata has, keys what is there: the
    // metadata check refuses it; writing such metadata must not fail first.)
    let Some(g) = group_of(groups, i) else {
        let Some(ty) = types.get(i as usize) else {
            return out.clear();
        };
        let mut concrete = |c: u32, o: &mut Vec<u8>| match c < i {
            true => outside(c, o),
            false => o.push(1),
        };
        ty.key_into(out, &mut concrete);
        return sub(i).prefix_key(out, &mut concrete);
    };
    out.clear();
    // A lone type's key starts with its parameter count, never `u32::MAX`.
    out.extend_from_slice(&u32::MAX.to_le_bytes());
    out.extend_from_slice(&g.len.to_le_bytes());
    out.extend_from_slice(&(i - g.start).to_le_bytes());
    let mut member = Vec::new();
    for (m, ty) in (g.start..).zip(types.iter().skip(g.start as usize).take(g.len as usize)) {
        let mut concrete = |c: u32, o: &mut Vec<u8>| match c.checked_sub(g.start) {
            Some(at) if at < g.len => {
                o.push(2);
                o.extend_from_slice(&at.to_le_bytes());
            }
            _ => outside(c, o),
        };
        ty.key_into(&mut member, &mut concrete);
        sub(m).prefix_key(&mut member, &mut concrete);
        out.extend_from_slice(&(member.len() as u32).to_le_bytes());
        out.extend_from_slice(&member);
    }
}

/// For [`FuncType::key`]: a concrete type named by the id in `ids` of the type it names, or by
/// a mark when it names the type being keyed (which `ids` does not hold yet). A type names
/// only earlier ones or itself, so `ids` holds every other one it can name. The engine keys its
/// canonical types so, with canonical ids; `ModuleInfo::check` a module's, with indices.
pub fn concrete_by_id(ids: &[u32]) -> impl FnMut(u32, &mut Vec<u8>) + '_ {
    |c, out| match ids.get(c as usize) {
        Some(&id) => id_key(id, out),
        None => out.push(1),
    }
}

/// Writes what identifies a concrete type known by `id` (see [`concrete_by_id`]).
pub fn id_key(id: u32, out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&id.to_le_bytes());
}

/// Writes the bytes that identify a signature (equal for equal signatures, native or archived):
/// the parameter count, then each parameter and result type, a concrete type index as
/// `concrete` writes it.
fn signature_key(
    params: impl ExactSizeIterator<Item = ValType>,
    results: impl Iterator<Item = ValType>,
    out: &mut Vec<u8>,
    concrete: &mut dyn FnMut(u32, &mut Vec<u8>),
) {
    out.clear();
    out.extend_from_slice(&(params.len() as u32).to_le_bytes());
    for t in params.chain(results) {
        t.key(out, concrete);
    }
}

/// Signatures with at most this many parameters and results together have a [`small_id`].
pub const SMALL_SIGNATURE: usize = 9;

/// A signature's own number, when it is small (see [`SMALL_SIGNATURE`]): one base-8 digit per
/// type (1 to 7), least significant first, with a 0 digit between parameters and results (left
/// out with no results, where it would be a leading zero). A separator is the only 0 digit, so
/// different signatures get different numbers, all below 2^30: an engine uses them as
/// canonical type ids without registering anything.
pub fn small_id(
    params: impl ExactSizeIterator<Item = ValType>,
    results: impl ExactSizeIterator<Item = ValType>,
) -> Option<u32> {
    if params.len() + results.len() > SMALL_SIGNATURE {
        return None;
    }
    let mut id = 0;
    let mut shift = 0;
    for t in params.map(Some).chain([None]).chain(results.map(Some)) {
        let d = match t {
            Some(t) => t.small_digit()?,
            None => 0,
        };
        id |= d << shift;
        shift += 3;
    }
    Some(id)
}

/// The signature with [`small_id`] `id`, if `id` is one.
pub fn from_small_id(mut id: u32) -> Option<FuncType> {
    let mut ty = FuncType::default();
    let mut in_results = false;
    while id != 0 {
        match id & 7 {
            0 if !in_results => in_results = true,
            0 => return None,
            d if in_results => ty.results.push(ValType::SMALL[d as usize - 1]),
            d => ty.params.push(ValType::SMALL[d as usize - 1]),
        }
        id >>= 3;
    }
    Some(ty)
}

impl FuncType {
    /// The signature taking `params` and returning `results`.
    pub fn new(
        params: impl IntoIterator<Item = ValType>,
        results: impl IntoIterator<Item = ValType>,
    ) -> FuncType {
        FuncType {
            params: params.into_iter().collect(),
            results: results.into_iter().collect(),
        }
    }

    /// See [`small_id`].
    pub fn small_id(&self) -> Option<u32> {
        small_id(self.params.iter().copied(), self.results.iter().copied())
    }

    /// See [`ArchivedFuncType::key`].
    pub fn key(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        signature_key(
            self.params.iter().copied(),
            self.results.iter().copied(),
            out,
            concrete,
        )
    }

    /// This signature with every concrete type index mapped by `f`.
    pub fn map_concrete(&self, mut f: impl FnMut(u32) -> u32) -> FuncType {
        let mut map = |t: &ValType| t.map_concrete(&mut f);
        FuncType {
            params: self.params.iter().map(&mut map).collect(),
            results: self.results.iter().map(&mut map).collect(),
        }
    }
}

impl ArchivedFuncType {
    /// See [`small_id`].
    pub fn small_id(&self) -> Option<u32> {
        small_id(
            self.params.iter().map(ArchivedValType::native),
            self.results.iter().map(ArchivedValType::native),
        )
    }

    /// Bytes that identify this signature, equal to [`FuncType::key`] of the native one;
    /// `concrete` writes what identifies a concrete type index (for a key valid beyond one
    /// module, something that identifies that type in every module).
    pub fn key(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        signature_key(
            self.params.iter().map(ArchivedValType::native),
            self.results.iter().map(ArchivedValType::native),
            out,
            concrete,
        )
    }

    pub fn native(&self) -> FuncType {
        FuncType {
            params: self.params.iter().map(ArchivedValType::native).collect(),
            results: self.results.iter().map(ArchivedValType::native).collect(),
        }
    }
}

/// A function signature.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Archive, Serialize, Deserialize)]
pub struct FuncType {
    /// Parameter types, in order.
    pub params: Vec<ValType>,
    /// Result types, in order.
    pub results: Vec<ValType>,
}

/// What a type of a module's type section declares of subtyping (GC): its supertype, if any
/// (an earlier type of its kind), and whether it is final (no type may name it as its
/// supertype). WebAssembly 2.0's types are final and name none ([`Sub::FINAL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct Sub {
    pub supertype: Option<u32>,
    pub is_final: bool,
}

/// A key of a type that declares a supertype or is not final starts with this in place of a
/// signature's parameter count (see [`type_key`]).
const SUB_KEY: u32 = u32::MAX - 3;

impl Sub {
    pub const FINAL: Sub = Sub {
        supertype: None,
        is_final: true,
    };

    /// Puts what identifies this declaration before the type's own key `out` (nothing for
    /// [`Sub::FINAL`], so that such a type's key is its own), a supertype written by
    /// `concrete`.
    fn prefix_key(self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        if self == Sub::FINAL {
            return;
        }
        let mut prefix = SUB_KEY.to_le_bytes().to_vec();
        prefix.push(self.is_final as u8);
        match self.supertype {
            Some(s) => {
                prefix.push(1);
                concrete(s, &mut prefix);
            }
            None => prefix.push(0),
        }
        out.splice(0..0, prefix);
    }
}

impl Sub {
    /// This declaration with its supertype's index mapped by `f` (to a canonical id).
    pub fn canonical(self, f: impl FnOnce(u32) -> u32) -> Sub {
        Sub {
            supertype: self.supertype.map(f),
            ..self
        }
    }
}

impl ArchivedSub {
    pub fn native(&self) -> Sub {
        Sub {
            supertype: self.supertype.as_ref().map(|s| s.to_native()),
            is_final: self.is_final,
        }
    }
}

/// A type of a module's type section (WebAssembly 3.0's composite types); what it declares of
/// subtyping is beside it ([`ModuleInfo::subs`](crate::ModuleInfo::subs)).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum TypeDef {
    /// A function signature.
    Func(FuncType),
    /// A struct's fields, in order.
    Struct(Vec<FieldType>),
    /// An array's element.
    Array(FieldType),
}

/// A field of a struct, or an array's element: what it stores and whether it may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct FieldType {
    pub storage: StorageType,
    pub mutable: bool,
}

/// What a field stores: a value, or a packed integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum StorageType {
    I8,
    I16,
    Val(ValType),
}

/// A struct's or an array's key starts with one of these in place of a signature's parameter
/// count (which never comes near them).
const STRUCT_KEY: u32 = u32::MAX - 1;
const ARRAY_KEY: u32 = u32::MAX - 2;

impl FieldType {
    fn key(self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        out.push(self.mutable as u8);
        match self.storage {
            StorageType::I8 => out.push(0xF8),
            StorageType::I16 => out.push(0xF9),
            StorageType::Val(t) => t.key(out, concrete),
        }
    }

    fn map_concrete(self, f: impl FnMut(u32) -> u32) -> FieldType {
        FieldType {
            storage: match self.storage {
                StorageType::Val(t) => StorageType::Val(t.map_concrete(f)),
                packed => packed,
            },
            mutable: self.mutable,
        }
    }
}

impl ArchivedFieldType {
    pub fn native(&self) -> FieldType {
        FieldType {
            storage: match &self.storage {
                ArchivedStorageType::I8 => StorageType::I8,
                ArchivedStorageType::I16 => StorageType::I16,
                ArchivedStorageType::Val(t) => StorageType::Val(t.native()),
            },
            mutable: self.mutable,
        }
    }
}

impl From<FuncType> for TypeDef {
    fn from(f: FuncType) -> TypeDef {
        TypeDef::Func(f)
    }
}

impl TypeDef {
    /// The signature, if this is a function type.
    pub fn as_func(&self) -> Option<&FuncType> {
        match self {
            TypeDef::Func(f) => Some(f),
            _ => None,
        }
    }

    /// The heap type of a reference to a value of this type, known by index or id `i`.
    pub fn heap(&self, i: u32) -> HeapType {
        match self {
            TypeDef::Func(_) => HeapType::ConcreteFunc(i),
            TypeDef::Struct(_) => HeapType::ConcreteStruct(i),
            TypeDef::Array(_) => HeapType::ConcreteArray(i),
        }
    }

    /// The signature's [`small_id`]; only signatures have one.
    pub fn small_id(&self) -> Option<u32> {
        self.as_func()?.small_id()
    }

    /// Bytes that identify this type (see [`FuncType::key`]); a struct or an array starts with
    /// a mark no signature starts with.
    pub fn key(&self, out: &mut Vec<u8>, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)) {
        let fields = match self {
            TypeDef::Func(f) => return f.key(out, concrete),
            TypeDef::Struct(fields) => {
                out.clear();
                out.extend_from_slice(&STRUCT_KEY.to_le_bytes());
                out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
                &fields[..]
            }
            TypeDef::Array(elem) => {
                out.clear();
                out.extend_from_slice(&ARRAY_KEY.to_le_bytes());
                std::slice::from_ref(elem)
            }
        };
        for field in fields {
            field.key(out, concrete);
        }
    }

    /// The value types this type holds: a signature's parameters and results, the values of
    /// a struct's fields or an array's elements (packed ones are no value type).
    pub fn value_types(&self) -> impl Iterator<Item = ValType> + '_ {
        let (params, results, fields): (&[ValType], &[ValType], &[FieldType]) = match self {
            TypeDef::Func(f) => (&f.params, &f.results, &[]),
            TypeDef::Struct(fields) => (&[], &[], fields),
            TypeDef::Array(elem) => (&[], &[], std::slice::from_ref(elem)),
        };
        let fields = fields.iter().filter_map(|f| match f.storage {
            StorageType::Val(t) => Some(t),
            StorageType::I8 | StorageType::I16 => None,
        });
        params.iter().chain(results).copied().chain(fields)
    }

    /// The concrete type indices this type names.
    pub fn concrete(&self) -> impl Iterator<Item = u32> + '_ {
        self.value_types().filter_map(ValType::concrete)
    }

    /// This type with every concrete type index mapped by `f`.
    pub fn map_concrete(&self, mut f: impl FnMut(u32) -> u32) -> TypeDef {
        match self {
            TypeDef::Func(ty) => TypeDef::Func(ty.map_concrete(f)),
            TypeDef::Struct(fields) => {
                TypeDef::Struct(fields.iter().map(|x| x.map_concrete(&mut f)).collect())
            }
            TypeDef::Array(elem) => TypeDef::Array(elem.map_concrete(f)),
        }
    }
}

impl ArchivedTypeDef {
    /// The signature, if this is a function type.
    pub fn as_func(&self) -> Option<&ArchivedFuncType> {
        match self {
            ArchivedTypeDef::Func(f) => Some(f),
            _ => None,
        }
    }

    /// See [`TypeDef::small_id`].
    pub fn small_id(&self) -> Option<u32> {
        self.as_func()?.small_id()
    }

    pub fn native(&self) -> TypeDef {
        match self {
            ArchivedTypeDef::Func(f) => TypeDef::Func(f.native()),
            ArchivedTypeDef::Struct(fields) => {
                TypeDef::Struct(fields.iter().map(ArchivedFieldType::native).collect())
            }
            ArchivedTypeDef::Array(elem) => TypeDef::Array(elem.native()),
        }
    }
}

/// A table's element type and limits (in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct TableType {
    /// A reference type (`ValType::Ref`).
    pub elem: ValType,
    /// Initial size.
    pub min: u32,
    /// Largest size, if bounded.
    pub max: Option<u32>,
    /// Whether indices are `i64` (memory64's 64-bit tables), not `i32`.
    pub table64: bool,
}

impl TableType {
    /// A table of `elem` of `min` to `max` elements, indexed by `i32`.
    pub fn new(elem: ValType, min: u32, max: Option<u32>) -> TableType {
        TableType {
            elem,
            min,
            max,
            table64: false,
        }
    }

    /// The type of the table's indices, sizes and lengths: `i64` or `i32`.
    pub fn index_type(&self) -> ValType {
        if self.table64 {
            ValType::I64
        } else {
            ValType::I32
        }
    }
}

/// Limits in 64 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct MemoryType {
    /// Initial size, in pages.
    pub min: u32,
    /// Largest size in pages, if bounded.
    pub max: Option<u32>,
    /// The page size's base-2 logarithm: 16 (64 KiB, WebAssembly's page), or 0 (one byte,
    /// WebAssembly 3.0's custom page sizes).
    pub page_size_log2: u8,
    /// Whether addresses are `i64` (WebAssembly 3.0's 64-bit memories), not `i32`.
    pub memory64: bool,
    /// Whether the memory is shared between threads (the threads proposal): such a memory has
    /// a maximum, outlives any one store, and is never reset for another instance.
    pub shared: bool,
}

impl MemoryType {
    /// WebAssembly's page size, 64 KiB, as [`MemoryType::page_size_log2`].
    pub const DEFAULT_PAGE_SIZE_LOG2: u8 = 16;

    /// A memory of `min` to `max` pages of 64 KiB.
    pub fn new(min: u32, max: Option<u32>) -> MemoryType {
        MemoryType {
            min,
            max,
            page_size_log2: MemoryType::DEFAULT_PAGE_SIZE_LOG2,
            memory64: false,
            shared: false,
        }
    }

    /// A memory of `min` to `max` pages of 64 KiB, shared between threads.
    pub fn shared(min: u32, max: u32) -> MemoryType {
        MemoryType {
            shared: true,
            ..MemoryType::new(min, Some(max))
        }
    }

    /// A 64-bit memory (addressed by `i64`) of `min` to `max` pages of 64 KiB.
    pub fn new64(min: u32, max: Option<u32>) -> MemoryType {
        MemoryType {
            memory64: true,
            ..MemoryType::new(min, max)
        }
    }

    /// The type of the memory's addresses, sizes and lengths: `i64` or `i32`.
    pub fn index_type(&self) -> ValType {
        if self.memory64 {
            ValType::I64
        } else {
            ValType::I32
        }
    }

    /// This type with pages of `2^log2` bytes (0 or 16).
    pub fn with_page_size_log2(self, log2: u8) -> MemoryType {
        MemoryType {
            page_size_log2: log2,
            ..self
        }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> u64 {
        1u64.checked_shl(u32::from(self.page_size_log2))
            .unwrap_or(0)
    }

    /// The bytes `pages` pages of this type hold (`pages` at most `u32::MAX`, so that this does
    /// not overflow).
    pub fn bytes(&self, pages: u32) -> u64 {
        u64::from(pages) << self.page_size_log2
    }

    /// Whether a module may declare a memory of this type: pages of one byte or 64 KiB, a
    /// minimum within what [`MemoryType::max_pages`] allows, a maximum not below it, and a
    /// shared memory has a maximum. A 64-bit memory's limits may be past what it can have (its
    /// minimum saturated at `u32::MAX`, which is always past [`MemoryType::max_pages`]): such a
    /// module compiles, and its memory fails to be made.
    pub fn is_valid(&self) -> bool {
        let sized = |pages: u32| u64::from(pages) <= self.max_pages();
        let max_ok = |max: u32| max >= self.min && (self.memory64 || sized(max));
        let bounded = !self.shared || self.max.is_some();
        matches!(self.page_size_log2, 0 | 16)
            && (sized(self.min) || self.memory64)
            && self.max.is_none_or(max_ok)
            && bounded
    }

    /// Whether code that reaches a memory of this type must compare every access with its
    /// length: no fault stops an access past the end of a memory of one-byte pages (it may end
    /// inside a host page), nor one a 64-bit address makes (it reaches past any reservation).
    pub fn needs_bounds_checks(&self) -> bool {
        self.page_size_log2 < MemoryType::DEFAULT_PAGE_SIZE_LOG2 || self.memory64
    }

    /// The most bytes a 64-bit memory may have: 64 GiB less a page, what a large memory slot's
    /// reservation and write marks cover (code that reaches such a memory checks every access
    /// against its length, so it needs no guard pages beyond). See [`MemoryType::large`].
    pub const MAX_MEMORY64_BYTES: u64 = (64 << 30) - 65536;

    /// The most pages a memory of this type may have: its maximum, within
    /// [`MemoryType::max_pages`].
    pub fn most_pages(&self) -> u64 {
        (self.max.map_or(u64::MAX, u64::from)).min(self.max_pages())
    }

    /// Whether a memory of this type lives in a *large* slot: every 64-bit memory does. A
    /// large slot reserves eight times the address space of an ordinary one and keeps more
    /// write marks before the memory's base ([`MemoryType::marks_before`]), so that a 64-bit
    /// memory may grow to [`MemoryType::MAX_MEMORY64_BYTES`]; ordinary slots stay as small as a
    /// 32-bit memory needs, so that the address space holds as many of them. The index type
    /// alone decides, not the limits: code compiled for an imported memory finds its marks
    /// where the type it imports says, and an import's limits may differ from the memory's,
    /// never its index type.
    pub fn large(&self) -> bool {
        self.memory64
    }

    /// Bytes of write marks before the base of a memory of this type (see
    /// [`MARK_SHIFT`](crate::MARK_SHIFT)).
    pub fn marks_before(&self) -> usize {
        match self.large() {
            true => crate::MARKS_BEFORE_LARGE,
            false => crate::MARKS_BEFORE,
        }
    }

    /// The most pages a memory of this page size may have: for a 32-bit memory 4 GiB of them,
    /// and for one-byte pages one fewer (its size must fit `memory.size`'s `i32`); for a
    /// 64-bit memory [`MemoryType::MAX_MEMORY64_BYTES`] of them, and for one-byte pages two
    /// fewer than 4 GiB (a page count is a `u32`, and a minimum saturated at `u32::MAX` must
    /// be past it).
    pub fn max_pages(&self) -> u64 {
        let (bytes, most) = match self.memory64 {
            true => (MemoryType::MAX_MEMORY64_BYTES, u32::MAX - 1),
            false => (1u64 << 32, u32::MAX),
        };
        bytes
            .checked_shr(u32::from(self.page_size_log2))
            .unwrap_or(0)
            .min(u64::from(most))
    }
}

/// A global's value type and mutability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GlobalType {
    /// The value type.
    pub ty: ValType,
    /// Whether `global.set` may change it.
    pub mutable: bool,
}

/// A constant expression: one instruction, or an extended one (integer arithmetic on
/// constants and globals, WebAssembly 3.0) kept in
/// [`ModuleInfo::extended`](crate::ModuleInfo::extended). An extended expression that reads no
/// global is folded into a constant by the compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ConstExpr {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
    V128(u128),
    GlobalGet(u32),
    RefNull,
    RefFunc(u32),
    /// Index of an expression in [`ModuleInfo::extended`](crate::ModuleInfo::extended).
    Extended(u32),
}

impl ArchivedConstExpr {
    /// The native expression (a plain match: element items are read one by one at
    /// instantiation, where the general [`native`](crate::native) costs more than the copy).
    pub fn native(&self) -> ConstExpr {
        match self {
            ArchivedConstExpr::I32(v) => ConstExpr::I32(v.to_native()),
            ArchivedConstExpr::I64(v) => ConstExpr::I64(v.to_native()),
            ArchivedConstExpr::F32(v) => ConstExpr::F32(v.to_native()),
            ArchivedConstExpr::F64(v) => ConstExpr::F64(v.to_native()),
            ArchivedConstExpr::V128(v) => ConstExpr::V128(v.to_native()),
            ArchivedConstExpr::GlobalGet(g) => ConstExpr::GlobalGet(g.to_native()),
            ArchivedConstExpr::RefNull => ConstExpr::RefNull,
            ArchivedConstExpr::RefFunc(f) => ConstExpr::RefFunc(f.to_native()),
            ArchivedConstExpr::Extended(i) => ConstExpr::Extended(i.to_native()),
        }
    }
}

/// One instruction of an extended constant expression, a stack program: integer arithmetic
/// on constants and globals (WebAssembly 3.0's extended constants), and GC's constant
/// instructions, which make objects at instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ConstOp {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
    V128(u128),
    GlobalGet(u32),
    I32Add,
    I32Sub,
    I32Mul,
    I64Add,
    I64Sub,
    I64Mul,
    RefNull(HeapType),
    RefFunc(u32),
    RefI31,
    StructNew(u32),
    StructNewDefault(u32),
    ArrayNew(u32),
    ArrayNewDefault(u32),
    ArrayNewFixed(u32, u32),
    AnyConvertExtern,
    ExternConvertAny,
}

/// How a constant expression's new object is filled.
#[derive(Clone, Copy, Debug)]
pub enum ObjectInit<'a> {
    /// Zeros (`struct.new_default`, `array.new_default`).
    Default,
    /// Every element this value (`array.new`).
    Fill(u128),
    /// These fields or elements, in order.
    Values(&'a [u128]),
}

/// What running a constant expression needs of the instance it initialises.
pub trait ConstEnv {
    /// Global `g`'s value.
    fn global(&self, g: u32) -> u128;
    /// Function `f`'s funcref, as generated code holds it.
    fn ref_func(&self, f: u32) -> u64;
    /// A new object of the module's type `ty` (`len` elements for an array); `None` when the
    /// GC heap cannot hold it.
    fn new_object(&self, ty: u32, len: u32, init: ObjectInit<'_>) -> Option<u64>;
    /// How many fields the module's struct type `ty` has.
    fn fields(&self, ty: u32) -> usize;
}

/// An environment for expressions that read nothing and make nothing (integer arithmetic on
/// constants), as the compiler folds them.
pub struct NoEnv;

impl ConstEnv for NoEnv {
    fn global(&self, _: u32) -> u128 {
        0
    }
    fn ref_func(&self, _: u32) -> u64 {
        0
    }
    fn new_object(&self, _: u32, _: u32, _: ObjectInit<'_>) -> Option<u64> {
        None
    }
    fn fields(&self, _: u32) -> usize {
        0
    }
}

impl ConstOp {
    /// Whether this is integer arithmetic on constants (what the compiler folds).
    pub fn is_integer_constant(self) -> bool {
        matches!(
            self,
            ConstOp::I32(_)
                | ConstOp::I64(_)
                | ConstOp::I32Add
                | ConstOp::I32Sub
                | ConstOp::I32Mul
                | ConstOp::I64Add
                | ConstOp::I64Sub
                | ConstOp::I64Mul
        )
    }

    /// Runs `ops` (a checked expression: see `ModuleInfo::check`) in `env`; the result's low
    /// bits are the value. `None` when an object it makes does not fit the GC heap.
    pub fn eval(ops: impl IntoIterator<Item = ConstOp>, env: &impl ConstEnv) -> Option<u128> {
        use crate::gc;
        let mut stack: Vec<u128> = Vec::with_capacity(4);
        let pop = |stack: &mut Vec<u128>| stack.pop().unwrap_or(0);
        for op in ops {
            let v = match op {
                ConstOp::I32(v) => v as u32 as u128,
                ConstOp::I64(v) => v as u64 as u128,
                ConstOp::F32(v) => v as u128,
                ConstOp::F64(v) => v as u128,
                ConstOp::V128(v) => v,
                ConstOp::GlobalGet(g) => env.global(g),
                ConstOp::RefNull(_) => 0,
                ConstOp::RefFunc(f) => env.ref_func(f) as u128,
                ConstOp::RefI31 => u128::from(gc::i31(pop(&mut stack) as u32)),
                // (One encoding for both hierarchies: see `gc`.)
                ConstOp::AnyConvertExtern | ConstOp::ExternConvertAny => pop(&mut stack),
                ConstOp::StructNewDefault(ty) => {
                    u128::from(env.new_object(ty, 0, ObjectInit::Default)?)
                }
                ConstOp::ArrayNewDefault(ty) => {
                    let len = pop(&mut stack) as u32;
                    u128::from(env.new_object(ty, len, ObjectInit::Default)?)
                }
                ConstOp::ArrayNew(ty) => {
                    let len = pop(&mut stack) as u32;
                    let value = pop(&mut stack);
                    u128::from(env.new_object(ty, len, ObjectInit::Fill(value))?)
                }
                ConstOp::StructNew(ty) | ConstOp::ArrayNewFixed(ty, _) => {
                    let n = match op {
                        ConstOp::ArrayNewFixed(_, n) => n as usize,
                        _ => env.fields(ty),
                    };
                    let values = stack.split_off(stack.len().saturating_sub(n));
                    let len = values.len() as u32;
                    u128::from(env.new_object(ty, len, ObjectInit::Values(&values))?)
                }
                binary => {
                    let (y, x) = (pop(&mut stack) as u64, pop(&mut stack) as u64);
                    u128::from(match binary {
                        ConstOp::I64Add => x.wrapping_add(y),
                        ConstOp::I64Sub => x.wrapping_sub(y),
                        ConstOp::I64Mul => x.wrapping_mul(y),
                        ConstOp::I32Add => (x as u32).wrapping_add(y as u32).into(),
                        ConstOp::I32Sub => (x as u32).wrapping_sub(y as u32).into(),
                        _ => (x as u32).wrapping_mul(y as u32).into(),
                    })
                }
            };
            stack.push(v);
        }
        Some(stack.pop().unwrap_or(0))
    }
}

/// As the text format writes it: `i32`, `funcref`.
impl std::fmt::Display for ValType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValType::I32 => "i32",
            ValType::I64 => "i64",
            ValType::F32 => "f32",
            ValType::F64 => "f64",
            ValType::V128 => "v128",
            ValType::Ref(r) => return write!(f, "{r}"),
        })
    }
}

/// As the text format writes it: `funcref`, `(ref null $3)`.
impl std::fmt::Display for RefType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.nullable, self.heap) {
            (true, HeapType::Func) => return f.write_str("funcref"),
            (true, HeapType::Extern) => return f.write_str("externref"),
            (true, HeapType::NoFunc) => return f.write_str("nullfuncref"),
            (true, HeapType::NoExtern) => return f.write_str("nullexternref"),
            (true, HeapType::Exn) => return f.write_str("exnref"),
            (true, HeapType::NoExn) => return f.write_str("nullexnref"),
            (true, HeapType::Any) => return f.write_str("anyref"),
            (true, HeapType::Eq) => return f.write_str("eqref"),
            (true, HeapType::I31) => return f.write_str("i31ref"),
            (true, HeapType::Struct) => return f.write_str("structref"),
            (true, HeapType::Array) => return f.write_str("arrayref"),
            (true, HeapType::None) => return f.write_str("nullref"),
            _ => {}
        }
        f.write_str(if self.nullable { "(ref null " } else { "(ref " })?;
        match self.heap {
            HeapType::Func => f.write_str("func")?,
            HeapType::Extern => f.write_str("extern")?,
            HeapType::NoFunc => f.write_str("nofunc")?,
            HeapType::NoExtern => f.write_str("noextern")?,
            HeapType::ConcreteFunc(i)
            | HeapType::ConcreteStruct(i)
            | HeapType::ConcreteArray(i) => write!(f, "${i}")?,
            HeapType::Exn => f.write_str("exn")?,
            HeapType::NoExn => f.write_str("noexn")?,
            HeapType::Any => f.write_str("any")?,
            HeapType::Eq => f.write_str("eq")?,
            HeapType::I31 => f.write_str("i31")?,
            HeapType::Struct => f.write_str("struct")?,
            HeapType::Array => f.write_str("array")?,
            HeapType::None => f.write_str("none")?,
        }
        f.write_str(")")
    }
}

/// As the text format writes it: `(func (param i32 i32) (result i64))`.
impl std::fmt::Display for FuncType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(func")?;
        for (what, list) in [("param", &self.params), ("result", &self.results)] {
            if !list.is_empty() {
                write!(f, " ({what}")?;
                for t in list.iter() {
                    write!(f, " {t}")?;
                }
                write!(f, ")")?;
            }
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every signature of up to 4 types: its small id decodes back to it, and no two share one.
    #[test]
    fn small_ids_are_distinct_and_decode() {
        let all = ValType::SMALL;
        let mut seqs: Vec<Vec<ValType>> = vec![vec![]];
        for _ in 0..4 {
            let longer: Vec<Vec<ValType>> = seqs
                .iter()
                .filter(|s| s.len() == seqs.last().unwrap().len())
                .flat_map(|s| all.iter().map(move |&t| [s.clone(), vec![t]].concat()))
                .collect();
            seqs.extend(longer);
        }
        let mut seen = std::collections::HashMap::new();
        for s in &seqs {
            for split in 0..=s.len() {
                let ty = FuncType {
                    params: s[..split].to_vec(),
                    results: s[split..].to_vec(),
                };
                let id = ty.small_id().unwrap();
                assert!(id < 1 << 30);
                assert_eq!(from_small_id(id).as_ref(), Some(&ty));
                assert_eq!(seen.insert(id, ty.clone()), None, "{ty:?}");
            }
        }
        let wide = FuncType {
            params: vec![ValType::I32; SMALL_SIGNATURE],
            results: vec![ValType::I64],
        };
        assert_eq!(wide.small_id(), None);
        for (i, t) in ValType::SMALL.iter().enumerate() {
            assert_eq!(t.small_digit(), Some(i as u32 + 1));
        }
        // Other references have none: their signatures are registered.
        let typed = FuncType {
            params: vec![ValType::Ref(RefType {
                nullable: false,
                heap: HeapType::Func,
            })],
            results: vec![],
        };
        assert_eq!(typed.small_id(), None);
        // Two separators: not an id.
        assert!(from_small_id(1 | 1 << 6 | 1 << 12).is_none());
    }

    /// GC's heap types: `none` below every type of the `any` hierarchy and nothing else;
    /// concrete struct and array types below their kind, `eq` and `any`; no hierarchy below
    /// another.
    #[test]
    fn the_any_hierarchy_is_a_hierarchy_of_its_own() {
        use HeapType::*;
        let gc = [
            Any,
            Eq,
            I31,
            Struct,
            Array,
            None,
            ConcreteStruct(3),
            ConcreteArray(4),
        ];
        for h in gc {
            assert!(None.matches(h) && h.matches(Any) && h.is_any(), "{h:?}");
            for other in [Func, NoFunc, ConcreteFunc(3), Extern, NoExtern, Exn, NoExn] {
                assert!(!h.matches(other) && !other.matches(h), "{h:?} {other:?}");
            }
        }
        assert!(ConcreteStruct(3).matches(Struct) && ConcreteStruct(3).matches(Eq));
        assert!(ConcreteArray(4).matches(Array) && !ConcreteArray(4).matches(Struct));
        assert!(!ConcreteStruct(3).matches(ConcreteStruct(4)) && !Any.matches(Eq));
        assert!(I31.matches(Eq) && !I31.matches(Struct) && !Eq.matches(I31));
    }

    /// Keys tell a struct from an array and from a signature of the same contents, and a
    /// packed field from a full one.
    #[test]
    fn struct_array_and_signature_keys_differ() {
        let field = |storage, mutable| FieldType { storage, mutable };
        let i32f = field(StorageType::Val(ValType::I32), false);
        let types = [
            TypeDef::Func(FuncType::new([ValType::I32], [])),
            TypeDef::Func(FuncType::default()),
            TypeDef::Struct(vec![i32f]),
            TypeDef::Struct(vec![]),
            TypeDef::Array(i32f),
            TypeDef::Array(field(StorageType::I8, false)),
            TypeDef::Array(field(StorageType::I16, false)),
            TypeDef::Array(field(StorageType::Val(ValType::I32), true)),
            TypeDef::Struct(vec![field(StorageType::I8, true)]),
        ];
        let keys: Vec<Vec<u8>> = types
            .iter()
            .map(|t| {
                let mut k = vec![0xAA];
                t.key(&mut k, &mut |_, _| unreachable!());
                k
            })
            .collect();
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
