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
    /// Reference to a function, or null.
    FuncRef,
    /// Reference to a host value, or null.
    ExternRef,
    /// 128-bit vector (fixed-width SIMD).
    V128,
}

impl ValType {
    /// Every value type, in declaration order.
    pub const ALL: [ValType; 7] = [
        ValType::I32,
        ValType::I64,
        ValType::F32,
        ValType::F64,
        ValType::FuncRef,
        ValType::ExternRef,
        ValType::V128,
    ];

    pub fn is_ref(self) -> bool {
        matches!(self, ValType::FuncRef | ValType::ExternRef)
    }
}

impl ArchivedValType {
    pub fn native(&self) -> ValType {
        match self {
            ArchivedValType::I32 => ValType::I32,
            ArchivedValType::I64 => ValType::I64,
            ArchivedValType::F32 => ValType::F32,
            ArchivedValType::F64 => ValType::F64,
            ArchivedValType::FuncRef => ValType::FuncRef,
            ArchivedValType::ExternRef => ValType::ExternRef,
            ArchivedValType::V128 => ValType::V128,
        }
    }
}

/// Writes the bytes that identify a signature (equal for equal signatures, native or archived):
/// the parameter count, then one byte per parameter and result type.
fn signature_key(
    params: impl ExactSizeIterator<Item = ValType>,
    results: impl Iterator<Item = ValType>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&(params.len() as u32).to_le_bytes());
    out.extend(params.chain(results).map(|t| t as u8));
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
    let digit = |t: ValType| t as u32 + 1;
    let mut id = 0;
    let mut shift = 0;
    for d in params.map(digit).chain([0]).chain(results.map(digit)) {
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
            d if in_results => ty.results.push(ValType::ALL[d as usize - 1]),
            d => ty.params.push(ValType::ALL[d as usize - 1]),
        }
        id >>= 3;
    }
    Some(ty)
}

impl FuncType {
    /// See [`small_id`].
    pub fn small_id(&self) -> Option<u32> {
        small_id(self.params.iter().copied(), self.results.iter().copied())
    }

    /// See [`ArchivedFuncType::key`].
    pub fn key(&self, out: &mut Vec<u8>) {
        signature_key(
            self.params.iter().copied(),
            self.results.iter().copied(),
            out,
        )
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

    /// Bytes that identify this signature, equal to [`FuncType::key`] of the native one.
    pub fn key(&self, out: &mut Vec<u8>) {
        signature_key(
            self.params.iter().map(ArchivedValType::native),
            self.results.iter().map(ArchivedValType::native),
            out,
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

/// A table's element type and limits (in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct TableType {
    /// `FuncRef` or `ExternRef`.
    pub elem: ValType,
    /// Initial size.
    pub min: u32,
    /// Largest size, if bounded.
    pub max: Option<u32>,
}

/// Limits in 64 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct MemoryType {
    /// Initial size.
    pub min: u32,
    /// Largest size, if bounded.
    pub max: Option<u32>,
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

/// One instruction of an extended constant expression, a stack program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ConstOp {
    I32(i32),
    I64(i64),
    GlobalGet(u32),
    I32Add,
    I32Sub,
    I32Mul,
    I64Add,
    I64Sub,
    I64Mul,
}

impl ConstOp {
    /// Runs `ops` (a checked expression: see `ModuleInfo::check`) with `global` reading an
    /// integer global's value; the result's low bits are the value.
    pub fn eval(ops: impl IntoIterator<Item = ConstOp>, global: impl Fn(u32) -> u64) -> u64 {
        let mut stack: Vec<u64> = Vec::with_capacity(4);
        for op in ops {
            let v = match op {
                ConstOp::I32(v) => v as u32 as u64,
                ConstOp::I64(v) => v as u64,
                ConstOp::GlobalGet(g) => global(g),
                binary => {
                    let (y, x) = (stack.pop().unwrap_or(0), stack.pop().unwrap_or(0));
                    match binary {
                        ConstOp::I64Add => x.wrapping_add(y),
                        ConstOp::I64Sub => x.wrapping_sub(y),
                        ConstOp::I64Mul => x.wrapping_mul(y),
                        ConstOp::I32Add => (x as u32).wrapping_add(y as u32).into(),
                        ConstOp::I32Sub => (x as u32).wrapping_sub(y as u32).into(),
                        _ => (x as u32).wrapping_mul(y as u32).into(),
                    }
                }
            };
            stack.push(v);
        }
        stack.pop().unwrap_or(0)
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
            ValType::FuncRef => "funcref",
            ValType::ExternRef => "externref",
        })
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
        let all = ValType::ALL;
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
        // Two separators: not an id.
        assert!(from_small_id(1 | 1 << 6 | 1 << 12).is_none());
    }
}
