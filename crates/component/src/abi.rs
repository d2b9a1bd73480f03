//! The canonical ABI: moving component values into a core instance's values and linear memory
//! (lowering) and out of them (lifting).
//!
//! Lifting reads only: it works on the memory's bytes as one slice and calls nothing. Lowering
//! may call the instance's `realloc`, which may grow the memory, so it writes through the store
//! after each allocation. Every way a guest can break the ABI (a pointer past its memory or
//! misaligned, a bad discriminant, a char that is not a scalar value, a string that is not
//! valid in its encoding) is an [`Error::Abi`], which traps the call; none panics.

use ephem_runtime::{Func, Memory, StoreContextMut, Val as Core};

use crate::Error;
use crate::resources::Res;
use crate::types::{Flat, Type, align_to};
use crate::values::Val;

/// How a string is encoded in a core instance's memory (`string-encoding=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Utf8,
    Utf16,
    Latin1Utf16,
}

/// The high bit of a `latin1+utf16` string's length: set when the string is UTF-16.
const UTF16_TAG: u32 = 1 << 31;

/// The longest string, in bytes, the ABI carries.
const MAX_STRING_BYTES: u64 = (1 << 31) - 1;

/// A lifting or lowering's canonical options, resolved to one instance's items.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub memory: Option<Memory>,
    pub realloc: Option<Func>,
    pub encoding: Encoding,
}

fn abi(message: impl Into<String>) -> Error {
    Error::Abi(message.into())
}

impl Options {
    fn memory(&self) -> Result<Memory, Error> {
        self.memory
            .ok_or_else(|| abi("the value needs linear memory and no `memory` option was given"))
    }

    /// The memory's bytes, or none when the options name no memory (then nothing in the value
    /// lives in memory: the validator requires the option for types that do).
    pub(crate) fn bytes<'s, S: ephem_runtime::AsContext>(&self, store: &'s S) -> &'s [u8] {
        match self.memory {
            Some(m) => m.data(store),
            None => &[],
        }
    }

    /// Calls `realloc(0, 0, align, size)` and checks the block it gives.
    pub(crate) fn realloc<T>(
        &self,
        store: &mut StoreContextMut<'_, T>,
        align: u32,
        size: u32,
    ) -> Result<u32, Error> {
        let realloc = self
            .realloc
            .ok_or_else(|| abi("the value needs `realloc` and no `realloc` option was given"))?;
        let mut result = [Core::I32(0)];
        let args = [0, 0, align as i32, size as i32].map(Core::I32);
        realloc.call(&mut *store, &args, &mut result)?;
        let ptr = result[0].i32().unwrap_or(0) as u32;
        if !ptr.is_multiple_of(align) {
            return Err(abi(format!(
                "`realloc` returned {ptr}, not aligned to {align}"
            )));
        }
        let len = self.memory()?.data_size(&store) as u64;
        if ptr as u64 + size as u64 > len {
            return Err(abi(format!(
                "`realloc` returned {ptr}, with {size} bytes past the memory's end"
            )));
        }
        Ok(ptr)
    }

    /// Copies `bytes` into the memory at `at` through the runtime, which marks the pages it
    /// writes: the memory's next reset then stays the cheap one, with no system call.
    fn write<T>(
        &self,
        store: &mut StoreContextMut<'_, T>,
        at: u32,
        bytes: &[u8],
    ) -> Result<(), Error> {
        self.memory()?
            .write(&mut *store, at as usize, bytes)
            .map_err(|_| {
                abi(format!(
                    "a store of {} bytes at {at} is past the memory's end",
                    bytes.len()
                ))
            })
    }
}

/// Reads `len` bytes at `at`, aligned to `align`.
fn range(memory: &[u8], at: u32, len: u64, align: u32) -> Result<&[u8], Error> {
    if !at.is_multiple_of(align) {
        return Err(abi(format!("pointer {at} is not aligned to {align}")));
    }
    let end = at as u64 + len;
    if end > memory.len() as u64 {
        return Err(abi(format!(
            "{len} bytes at {at} reach past the memory's end"
        )));
    }
    Ok(&memory[at as usize..end as usize])
}

fn load<const N: usize>(memory: &[u8], at: u32) -> Result<[u8; N], Error> {
    let bytes = range(memory, at, N as u64, 1)?;
    Ok(bytes.try_into().expect("N bytes"))
}

fn char_from(code: u32) -> Result<char, Error> {
    char::from_u32(code).ok_or_else(|| abi(format!("{code:#x} is not a Unicode scalar value")))
}

fn case_of(ty: &Type, discriminant: u32) -> Result<Option<&Type>, Error> {
    let cases = ty.cases().expect("a variant");
    match cases.get(discriminant as usize) {
        Some(payload) => Ok(*payload),
        None => Err(abi(format!(
            "discriminant {discriminant} of a type with {} cases",
            cases.len()
        ))),
    }
}

/// Makes the value of case `discriminant` of variant-like `ty` with `payload`.
fn variant_val(ty: &Type, discriminant: u32, payload: Option<Val>) -> Val {
    let payload = payload.map(Box::new);
    match ty {
        Type::Variant(cases) => Val::Variant(cases[discriminant as usize].name.clone(), payload),
        Type::Enum(names) => Val::Enum(names[discriminant as usize].clone()),
        Type::Option(_) => Val::Option(payload),
        Type::Result { .. } if discriminant == 0 => Val::Result(Ok(payload)),
        Type::Result { .. } => Val::Result(Err(payload)),
        _ => unreachable!("variant_val of a non-variant"),
    }
}

/// The case index and payload of a variant-like value, already checked against `ty`.
fn variant_parts<'v>(ty: &Type, val: &'v Val) -> (u32, Option<&'v Val>) {
    let (index, payload) = match (val, ty) {
        (Val::Variant(name, p), Type::Variant(cases)) => {
            (cases.iter().position(|c| c.name == *name), p.as_deref())
        }
        (Val::Enum(name), Type::Enum(names)) => (names.iter().position(|n| n == name), None),
        (Val::Option(p), _) => (Some(p.is_some() as usize), p.as_deref()),
        (Val::Result(Ok(p)), _) => (Some(0), p.as_deref()),
        (Val::Result(Err(p)), _) => (Some(1), p.as_deref()),
        _ => (None, None),
    };
    (index.expect("a checked value") as u32, payload)
}

fn flags_val(names: &[String], bits: &[u32]) -> Val {
    let set = (names.iter().enumerate())
        .filter(|(i, _)| bits[i / 32] & (1 << (i % 32)) != 0)
        .map(|(_, n)| n.clone())
        .collect();
    Val::Flags(set)
}

fn flags_bits(names: &[String], set: &[String]) -> Vec<u32> {
    let mut bits = vec![0u32; Type::flag_words(names.len())];
    for (i, n) in names.iter().enumerate() {
        if set.contains(n) {
            bits[i / 32] |= 1 << (i % 32);
        }
    }
    bits
}

// ---- Lifting ----

/// Lifts a value of type `ty` stored at `at` in `memory`.
pub(crate) fn load_val(
    memory: &[u8],
    encoding: Encoding,
    res: &Res<'_>,
    ty: &Type,
    at: u32,
) -> Result<Val, Error> {
    range(memory, at, ty.size() as u64, ty.align())?;
    res.charge(std::mem::size_of::<Val>() as u64)?;
    Ok(match ty {
        Type::Bool => Val::Bool(load::<1>(memory, at)?[0] != 0),
        Type::S8 => Val::S8(load::<1>(memory, at)?[0] as i8),
        Type::U8 => Val::U8(load::<1>(memory, at)?[0]),
        Type::S16 => Val::S16(i16::from_le_bytes(load(memory, at)?)),
        Type::U16 => Val::U16(u16::from_le_bytes(load(memory, at)?)),
        Type::S32 => Val::S32(i32::from_le_bytes(load(memory, at)?)),
        Type::U32 => Val::U32(u32::from_le_bytes(load(memory, at)?)),
        Type::S64 => Val::S64(i64::from_le_bytes(load(memory, at)?)),
        Type::U64 => Val::U64(u64::from_le_bytes(load(memory, at)?)),
        Type::Float32 => Val::Float32(f32::from_le_bytes(load(memory, at)?)),
        Type::Float64 => Val::Float64(f64::from_le_bytes(load(memory, at)?)),
        Type::Char => Val::Char(char_from(u32::from_le_bytes(load(memory, at)?))?),
        Type::Own(_) | Type::Borrow(_) => res.lift(ty, u32::from_le_bytes(load(memory, at)?))?,
        Type::String | Type::List(_) => {
            let ptr = u32::from_le_bytes(load(memory, at)?);
            let len = u32::from_le_bytes(load(memory, at + 4)?);
            lift_pointer_pair(memory, encoding, res, ty, ptr, len)?
        }
        Type::Record(fields) => {
            let mut offset = at;
            let mut values = Vec::with_capacity(fields.len());
            for f in fields.iter() {
                offset = align_to(offset, f.ty.align());
                values.push((
                    f.name.clone(),
                    load_val(memory, encoding, res, &f.ty, offset)?,
                ));
                offset = offset.saturating_add(f.ty.size());
            }
            Val::Record(values)
        }
        Type::Tuple(types) => {
            let mut offset = at;
            let mut values = Vec::with_capacity(types.len());
            for t in types.iter() {
                offset = align_to(offset, t.align());
                values.push(load_val(memory, encoding, res, t, offset)?);
                offset = offset.saturating_add(t.size());
            }
            Val::Tuple(values)
        }
        Type::Flags(names) => {
            let bits = match ty.size() {
                0 => vec![],
                1 => vec![load::<1>(memory, at)?[0] as u32],
                2 => vec![u16::from_le_bytes(load(memory, at)?) as u32],
                _ => (0..Type::flag_words(names.len()) as u32)
                    .map(|i| Ok(u32::from_le_bytes(load(memory, at + 4 * i)?)))
                    .collect::<Result<_, Error>>()?,
            };
            flags_val(names, &bits)
        }
        _ => {
            let cases = ty.cases().expect("a variant").len();
            let discriminant = match Type::discriminant_size(cases) {
                1 => load::<1>(memory, at)?[0] as u32,
                2 => u16::from_le_bytes(load(memory, at)?) as u32,
                _ => u32::from_le_bytes(load(memory, at)?),
            };
            let payload = match case_of(ty, discriminant)? {
                Some(t) => Some(load_val(
                    memory,
                    encoding,
                    res,
                    t,
                    at + ty.payload_offset(),
                )?),
                None => None,
            };
            variant_val(ty, discriminant, payload)
        }
    })
}

/// Lifts a string or a list from its pointer and length.
fn lift_pointer_pair(
    memory: &[u8],
    encoding: Encoding,
    res: &Res<'_>,
    ty: &Type,
    ptr: u32,
    len: u32,
) -> Result<Val, Error> {
    match ty {
        Type::String => {
            let s = lift_string(memory, encoding, ptr, len)?;
            res.charge(s.len() as u64)?;
            Ok(Val::String(s))
        }
        Type::List(element) => {
            let size = element.size();
            range(memory, ptr, len as u64 * size as u64, element.align())?;
            // (Each element is charged as it is lifted; reserving them all first would not be.)
            let items = (0..len)
                .map(|i| load_val(memory, encoding, res, element, ptr + i * size))
                .collect::<Result<_, Error>>()?;
            Ok(Val::List(items))
        }
        _ => unreachable!("a pointer pair of a scalar type"),
    }
}

fn lift_string(memory: &[u8], encoding: Encoding, ptr: u32, len: u32) -> Result<String, Error> {
    let (utf16, units) = match encoding {
        Encoding::Utf8 => (false, len),
        Encoding::Utf16 => (true, len),
        Encoding::Latin1Utf16 => (len & UTF16_TAG != 0, len & !UTF16_TAG),
    };
    if utf16 {
        let bytes = range(memory, ptr, 2 * units as u64, 2)?;
        let units = bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]));
        char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|_| abi("a string that is not valid UTF-16"))
    } else if encoding == Encoding::Latin1Utf16 {
        // A latin1+utf16 string is aligned to 2 in either form.
        let bytes = range(memory, ptr, units as u64, 2)?;
        Ok(bytes.iter().map(|&b| b as char).collect())
    } else {
        let bytes = range(memory, ptr, units as u64, 1)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| abi("a string that is not valid UTF-8"))
    }
}

/// Core values read one at a time, each checked to be of the type the ABI expects.
pub(crate) struct FlatReader<'a> {
    values: std::slice::Iter<'a, Core>,
}

impl<'a> FlatReader<'a> {
    pub(crate) fn new(values: &'a [Core]) -> FlatReader<'a> {
        FlatReader {
            values: values.iter(),
        }
    }

    fn next(&mut self, want: Flat) -> Result<Core, Error> {
        let v = *self
            .values
            .next()
            .ok_or_else(|| abi("fewer core values than the type flattens to"))?;
        let fits = matches!(
            (want, v),
            (Flat::I32, Core::I32(_))
                | (Flat::I64, Core::I64(_))
                | (Flat::F32, Core::F32(_))
                | (Flat::F64, Core::F64(_))
        );
        if fits {
            Ok(v)
        } else {
            Err(abi(
                "a core value of another type than the type flattens to",
            ))
        }
    }

    fn i32(&mut self) -> Result<u32, Error> {
        Ok(self.next(Flat::I32)?.i32().expect("an i32") as u32)
    }
}

/// Lifts a value of type `ty` from flat core values.
pub(crate) fn lift_flat(
    memory: &[u8],
    encoding: Encoding,
    res: &Res<'_>,
    ty: &Type,
    flat: &mut FlatReader<'_>,
) -> Result<Val, Error> {
    res.charge(std::mem::size_of::<Val>() as u64)?;
    Ok(match ty {
        Type::Bool => Val::Bool(flat.i32()? != 0),
        Type::S8 => Val::S8(flat.i32()? as i8),
        Type::U8 => Val::U8(flat.i32()? as u8),
        Type::S16 => Val::S16(flat.i32()? as i16),
        Type::U16 => Val::U16(flat.i32()? as u16),
        Type::S32 => Val::S32(flat.i32()? as i32),
        Type::U32 => Val::U32(flat.i32()?),
        Type::S64 => Val::S64(flat.next(Flat::I64)?.i64().expect("an i64")),
        Type::U64 => Val::U64(flat.next(Flat::I64)?.i64().expect("an i64") as u64),
        Type::Float32 => match flat.next(Flat::F32)? {
            Core::F32(bits) => Val::Float32(f32::from_bits(bits)),
            _ => unreachable!(),
        },
        Type::Float64 => match flat.next(Flat::F64)? {
            Core::F64(bits) => Val::Float64(f64::from_bits(bits)),
            _ => unreachable!(),
        },
        Type::Char => Val::Char(char_from(flat.i32()?)?),
        Type::Own(_) | Type::Borrow(_) => res.lift(ty, flat.i32()?)?,
        Type::String | Type::List(_) => {
            let ptr = flat.i32()?;
            let len = flat.i32()?;
            lift_pointer_pair(memory, encoding, res, ty, ptr, len)?
        }
        Type::Record(fields) => Val::Record(
            (fields.iter())
                .map(|f| {
                    Ok((
                        f.name.clone(),
                        lift_flat(memory, encoding, res, &f.ty, flat)?,
                    ))
                })
                .collect::<Result<_, Error>>()?,
        ),
        Type::Tuple(types) => Val::Tuple(
            (types.iter())
                .map(|t| lift_flat(memory, encoding, res, t, flat))
                .collect::<Result<_, Error>>()?,
        ),
        Type::Flags(names) => {
            let bits = (0..Type::flag_words(names.len()))
                .map(|_| flat.i32())
                .collect::<Result<Vec<_>, _>>()?;
            flags_val(names, &bits)
        }
        _ => {
            let discriminant = flat.i32()?;
            let joined = ty.flat();
            let slots = &joined[1..];
            // The case's own flattening is read back from the joined slots; the slots past it
            // are read and ignored.
            let mut raw = Vec::with_capacity(slots.len());
            for &slot in slots {
                raw.push(flat.next(slot)?);
            }
            let payload = match case_of(ty, discriminant)? {
                Some(t) => {
                    let own: Vec<Core> = (t.flat().iter().zip(&raw))
                        .map(|(&want, &have)| unjoin(want, have))
                        .collect();
                    Some(lift_flat(
                        memory,
                        encoding,
                        res,
                        t,
                        &mut FlatReader::new(&own),
                    )?)
                }
                None => None,
            };
            variant_val(ty, discriminant, payload)
        }
    })
}

/// A case's value of core type `want` out of a joined slot holding `have`.
fn unjoin(want: Flat, have: Core) -> Core {
    match (want, have) {
        (Flat::I32, Core::I64(v)) => Core::I32(v as i32),
        (Flat::F32, Core::I32(v)) => Core::F32(v as u32),
        (Flat::F32, Core::I64(v)) => Core::F32(v as u32),
        (Flat::F64, Core::I64(v)) => Core::F64(v as u64),
        _ => have,
    }
}

/// A case's value `v` put in a slot of joined type `slot`.
fn join(v: Core, slot: Flat) -> Core {
    match (v, slot) {
        (Core::I32(x), Flat::I64) => Core::I64(x as u32 as i64),
        (Core::F32(x), Flat::I32) => Core::I32(x as i32),
        (Core::F32(x), Flat::I64) => Core::I64(x as i64),
        (Core::F64(x), Flat::I64) => Core::I64(x as i64),
        _ => v,
    }
}

// ---- Lowering ----

/// Lowers `val` (already checked to be of type `ty`) into flat core values.
pub(crate) fn lower_flat<T>(
    store: &mut StoreContextMut<'_, T>,
    opts: &Options,
    res: &Res<'_>,
    ty: &Type,
    val: &Val,
    out: &mut Vec<Core>,
) -> Result<(), Error> {
    match (ty, val) {
        (_, Val::Bool(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::S8(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::U8(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::S16(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::U16(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::S32(v)) => out.push(Core::I32(*v)),
        (_, Val::U32(v)) => out.push(Core::I32(*v as i32)),
        (_, Val::S64(v)) => out.push(Core::I64(*v)),
        (_, Val::U64(v)) => out.push(Core::I64(*v as i64)),
        (_, Val::Float32(v)) => out.push(Core::F32(v.to_bits())),
        (_, Val::Float64(v)) => out.push(Core::F64(v.to_bits())),
        (_, Val::Char(c)) => out.push(Core::I32(*c as i32)),
        (_, Val::Resource(r)) => out.push(Core::I32(res.lower(ty, r)? as i32)),
        (_, Val::String(_) | Val::List(_)) => {
            let (ptr, len) = lower_pointer_pair(store, opts, res, ty, val)?;
            out.extend([Core::I32(ptr as i32), Core::I32(len as i32)]);
        }
        (Type::Record(fields), Val::Record(values)) => {
            for (f, (_, v)) in fields.iter().zip(values) {
                lower_flat(&mut *store, opts, res, &f.ty, v, out)?;
            }
        }
        (Type::Tuple(types), Val::Tuple(values)) => {
            for (t, v) in types.iter().zip(values) {
                lower_flat(&mut *store, opts, res, t, v, out)?;
            }
        }
        (Type::Flags(names), Val::Flags(set)) => {
            out.extend(
                flags_bits(names, set)
                    .into_iter()
                    .map(|b| Core::I32(b as i32)),
            );
        }
        _ => {
            let (discriminant, payload) = variant_parts(ty, val);
            let joined = ty.flat();
            out.push(Core::I32(discriminant as i32));
            let mut own = Vec::new();
            if let (Some(t), Some(v)) = (case_of(ty, discriminant)?, payload) {
                lower_flat(&mut *store, opts, res, t, v, &mut own)?;
            }
            for (i, &slot) in joined[1..].iter().enumerate() {
                out.push(match own.get(i) {
                    Some(&v) => join(v, slot),
                    None => Core::default_for(slot.core()),
                });
            }
        }
    }
    Ok(())
}

/// Stores `val` (already checked to be of type `ty`) at `at`.
pub(crate) fn store_val<T>(
    store: &mut StoreContextMut<'_, T>,
    opts: &Options,
    res: &Res<'_>,
    ty: &Type,
    val: &Val,
    at: u32,
) -> Result<(), Error> {
    if let Some(bytes) = scalar_bytes(val) {
        return opts.write(store, at, &bytes);
    }
    if let Val::Resource(r) = val {
        let handle = res.lower(ty, r)?;
        return opts.write(store, at, &handle.to_le_bytes());
    }
    match (ty, val) {
        (_, Val::String(_) | Val::List(_)) => {
            let (ptr, len) = lower_pointer_pair(&mut *store, opts, res, ty, val)?;
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&ptr.to_le_bytes());
            bytes[4..].copy_from_slice(&len.to_le_bytes());
            opts.write(store, at, &bytes)
        }
        (Type::Record(fields), Val::Record(values)) => {
            let mut offset = at;
            for (f, (_, v)) in fields.iter().zip(values) {
                offset = align_to(offset, f.ty.align());
                store_val(&mut *store, opts, res, &f.ty, v, offset)?;
                offset = offset.saturating_add(f.ty.size());
            }
            Ok(())
        }
        (Type::Tuple(types), Val::Tuple(values)) => {
            let mut offset = at;
            for (t, v) in types.iter().zip(values) {
                offset = align_to(offset, t.align());
                store_val(&mut *store, opts, res, t, v, offset)?;
                offset = offset.saturating_add(t.size());
            }
            Ok(())
        }
        (Type::Flags(names), Val::Flags(set)) => {
            let bits = flags_bits(names, set);
            let bytes: Vec<u8> = match ty.size() {
                0 => vec![],
                1 => vec![bits[0] as u8],
                2 => (bits[0] as u16).to_le_bytes().to_vec(),
                _ => bits.iter().flat_map(|b| b.to_le_bytes()).collect(),
            };
            opts.write(store, at, &bytes)
        }
        _ => {
            let (discriminant, payload) = variant_parts(ty, val);
            let cases = ty.cases().expect("a variant").len();
            let size = Type::discriminant_size(cases) as usize;
            opts.write(&mut *store, at, &discriminant.to_le_bytes()[..size])?;
            if let (Some(t), Some(v)) = (case_of(ty, discriminant)?, payload) {
                store_val(&mut *store, opts, res, t, v, at + ty.payload_offset())?;
            }
            Ok(())
        }
    }
}

/// A scalar's bytes in memory; `None` for the other values.
fn scalar_bytes(val: &Val) -> Option<Vec<u8>> {
    Some(match val {
        Val::Bool(v) => vec![*v as u8],
        Val::S8(v) => v.to_le_bytes().to_vec(),
        Val::U8(v) => v.to_le_bytes().to_vec(),
        Val::S16(v) => v.to_le_bytes().to_vec(),
        Val::U16(v) => v.to_le_bytes().to_vec(),
        Val::S32(v) => v.to_le_bytes().to_vec(),
        Val::U32(v) => v.to_le_bytes().to_vec(),
        Val::S64(v) => v.to_le_bytes().to_vec(),
        Val::U64(v) => v.to_le_bytes().to_vec(),
        Val::Float32(v) => v.to_le_bytes().to_vec(),
        Val::Float64(v) => v.to_le_bytes().to_vec(),
        Val::Char(c) => (*c as u32).to_le_bytes().to_vec(),
        _ => return None,
    })
}

/// Lowers a string or list into memory the instance's `realloc` gives: its pointer and length.
fn lower_pointer_pair<T>(
    store: &mut StoreContextMut<'_, T>,
    opts: &Options,
    res: &Res<'_>,
    ty: &Type,
    val: &Val,
) -> Result<(u32, u32), Error> {
    match (ty, val) {
        (_, Val::String(s)) => lower_string(store, opts, s),
        (Type::List(element), Val::List(items)) => {
            let size = element.size() as u64 * items.len() as u64;
            if size > u32::MAX as u64 {
                return Err(abi("a list longer than a 32-bit memory holds"));
            }
            let ptr = opts.realloc(&mut *store, element.align(), size as u32)?;
            for (i, v) in items.iter().enumerate() {
                store_val(
                    &mut *store,
                    opts,
                    res,
                    element,
                    v,
                    ptr + i as u32 * element.size(),
                )?;
            }
            Ok((ptr, items.len() as u32))
        }
        _ => unreachable!("a pointer pair of a scalar"),
    }
}

fn lower_string<T>(
    store: &mut StoreContextMut<'_, T>,
    opts: &Options,
    s: &str,
) -> Result<(u32, u32), Error> {
    let latin1 = opts.encoding == Encoding::Latin1Utf16 && s.chars().all(|c| (c as u32) < 0x100);
    let (bytes, align, len): (Vec<u8>, u32, u32) = if opts.encoding == Encoding::Utf8 {
        (s.as_bytes().to_vec(), 1, s.len() as u32)
    } else if latin1 {
        let bytes: Vec<u8> = s.chars().map(|c| c as u8).collect();
        let len = bytes.len() as u32;
        (bytes, 2, len)
    } else {
        let units: Vec<u16> = s.encode_utf16().collect();
        let tag = if opts.encoding == Encoding::Latin1Utf16 {
            UTF16_TAG
        } else {
            0
        };
        let len = units.len() as u32 | tag;
        (units.iter().flat_map(|u| u.to_le_bytes()).collect(), 2, len)
    };
    if bytes.len() as u64 > MAX_STRING_BYTES {
        return Err(abi("a string longer than the canonical ABI carries"));
    }
    let ptr = opts.realloc(&mut *store, align, bytes.len() as u32)?;
    opts.write(store, ptr, &bytes)?;
    Ok((ptr, len))
}
