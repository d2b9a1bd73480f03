//! GC objects and GC references as generated code and the runtime both see them: the layout of
//! structs and arrays in a store's GC heap, and how a reference's 64 bits say what it is.
//!
//! # The heap
//! A store's GC heap is one region (a linear-memory slot of the engine's pool, see the
//! runtime's `gc`), reached through the [`VmGcHeap`] the vmctx points at. An object is named by
//! its byte offset in the heap, a multiple of [`ALIGN`] and never 0 (the heap's first
//! [`ALIGN`] bytes hold none), so that an offset is a reference as it is.
//!
//! # References of the `any` and `extern` hierarchies
//! Both hierarchies share one encoding, so that every such word says by itself whether it
//! names an object (which a collector must find and may move), and `any.convert_extern` and
//! `extern.convert_any` change nothing, as the specification's round trips require:
//! - `0`: null;
//! - low bit set: an `i31`, its 31 bits in bits 1 to 31 (bits 32 and up clear), so that two
//!   equal `i31`s are equal words and `ref.eq` compares words;
//! - low bits `10`: a host reference (an `ExternRef`), its number plus one shifted left by
//!   two ([`HOST_TAG`], [`host`]);
//! - low bits `00` and not zero: an object, at that offset ([`is_object`]).
//!
//! # Objects
//! Each starts with an 8-byte header: the engine-wide canonical id of its type, with
//! [`ARRAY_BIT`] set for an array, then the number of elements (an array's) or its type's
//! depth, how many supertypes are above it (a struct's: a cast to a struct type of depth `d`
//! needs to ask about supertypes only for a struct deeper than `d`). Struct fields follow
//! in order, each aligned to its size (at most 8); array elements follow packed. A reference
//! field takes 8 bytes. Every address generated code makes from a reference is the heap's base
//! plus a 32-bit offset plus at most a struct's size, so it lies within the heap's slot
//! whatever the reference holds: the slot reserves 8 GiB of addresses past its base.

use crate::{FieldType, StorageType, TypeDef, ValType};

/// What the vmctx's [`VmOffsets::GC_HEAP`](crate::VmOffsets::GC_HEAP) points at: the store's GC
/// heap, into which generated code bumps objects itself while they fit.
///
/// # Invariant
/// `base` is null until the store's first allocation makes the heap; a collection changes it
/// (and every reference), but only inside a call, after which generated code loads it again
/// (it never keeps it across a call). `[base, base + end)` is the
/// heap's accessible memory, and `[next, end)` of it is zero; `next` is a multiple of
/// [`ALIGN`], at least [`ALIGN`]. Generated code may take `[next, next + n)` for an object
/// where `next + n <= end`, by setting `next` past it; anything else asks the runtime.
#[repr(C)]
#[derive(Debug)]
pub struct VmGcHeap {
    pub base: *mut u8,
    pub next: u64,
    pub end: u64,
}

impl VmGcHeap {
    pub const BASE: u32 = 0;
    pub const NEXT: u32 = 8;
    pub const END: u32 = 16;
}

const _: () = assert!(std::mem::offset_of!(VmGcHeap, base) == VmGcHeap::BASE as usize);
const _: () = assert!(std::mem::offset_of!(VmGcHeap, next) == VmGcHeap::NEXT as usize);
const _: () = assert!(std::mem::offset_of!(VmGcHeap, end) == VmGcHeap::END as usize);

/// An object's alignment, and the bytes at the heap's start that hold none.
pub const ALIGN: u32 = 8;
/// Bytes before the first field or element.
pub const HEADER: u32 = 8;
/// Where the header holds the type id (a `u32`, [`ARRAY_BIT`] set for arrays).
pub const TYPE_ID: u32 = 0;
/// Where an array's header holds its length, and a struct's its type's depth (a `u32`).
pub const LENGTH: u32 = 4;
/// Set in an array's type id word. Canonical ids stay below it (see the runtime's engine).
pub const ARRAY_BIT: u32 = 1 << 31;
/// The tag of an `i31` (its low bit).
pub const I31_TAG: u64 = 1;
/// The low two bits of an `anyref` that holds a host reference.
pub const HOST_TAG: u64 = 2;
/// The largest object, in bytes: a larger array cannot be made (its allocation fails as the
/// heap being full does).
pub const MAX_OBJECT: u64 = 1 << 30;

/// The reference `ref.i31` makes of `value` (its low 31 bits).
pub fn i31(value: u32) -> u64 {
    u64::from(value << 1) | I31_TAG
}

/// The word of host reference number `n` (an `ExternRef`'s).
pub fn host(n: u32) -> u64 {
    ((u64::from(n) + 1) << 2) | HOST_TAG
}

/// The number of host reference `word`, if it is one.
pub fn host_number(word: u64) -> Option<u32> {
    (word & 3 == HOST_TAG).then(|| ((word >> 2) - 1) as u32)
}

/// Whether reference `word` (of the `any` or `extern` hierarchy) names an object.
pub fn is_object(word: u64) -> bool {
    word != 0 && word & 3 == 0
}

/// Bytes a field or element of `storage` takes in an object.
pub fn storage_size(storage: StorageType) -> u32 {
    match storage {
        StorageType::I8 => 1,
        StorageType::I16 => 2,
        StorageType::Val(ValType::I32 | ValType::F32) => 4,
        StorageType::Val(ValType::I64 | ValType::F64 | ValType::Ref(_)) => 8,
        StorageType::Val(ValType::V128) => 16,
    }
}

/// Where a struct's fields are, and its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructLayout {
    pub offsets: Vec<u32>,
    pub size: u32,
}

/// The layout of a struct with `fields`: in order after the header, each aligned to its
/// size (at most [`ALIGN`]), the whole rounded up to [`ALIGN`].
pub fn struct_layout(fields: &[FieldType]) -> StructLayout {
    let mut at = HEADER;
    let offsets = fields
        .iter()
        .map(|f| {
            let size = storage_size(f.storage);
            let field = at.next_multiple_of(size.min(ALIGN));
            at = field + size;
            field
        })
        .collect();
    StructLayout {
        offsets,
        size: at.next_multiple_of(ALIGN),
    }
}

/// Bytes an array of `len` elements of `elem` takes (rounded up to [`ALIGN`]), if at most
/// [`MAX_OBJECT`].
pub fn array_size(elem: StorageType, len: u32) -> Option<u32> {
    let bytes = u64::from(HEADER) + u64::from(storage_size(elem)) * u64::from(len);
    (bytes <= MAX_OBJECT).then(|| bytes.next_multiple_of(u64::from(ALIGN)) as u32)
}

/// The header word of an object of type `ty` whose canonical id is `id`.
pub fn type_word(ty: &TypeDef, id: u32) -> u32 {
    match ty {
        TypeDef::Array(_) => id | ARRAY_BIT,
        _ => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(storage: StorageType) -> FieldType {
        FieldType {
            storage,
            mutable: true,
        }
    }

    #[test]
    fn fields_are_aligned_to_their_size_and_structs_to_eight_bytes() {
        let layout = struct_layout(&[
            field(StorageType::I8),
            field(StorageType::Val(ValType::I64)),
            field(StorageType::I16),
            field(StorageType::I8),
            field(StorageType::Val(ValType::V128)),
            field(StorageType::Val(ValType::F32)),
        ]);
        assert_eq!(layout.offsets, [8, 16, 24, 26, 32, 48]);
        assert_eq!(layout.size, 56);
        assert_eq!(struct_layout(&[]).size, HEADER);
    }

    #[test]
    fn each_word_says_what_it_is() {
        for n in [0, 1, 7, u32::MAX] {
            let w = host(n);
            assert_eq!(host_number(w), Some(n), "{w:#x}");
            assert!(!is_object(w) && w & I31_TAG == 0 && w != 0);
        }
        for v in [0, 1, u32::MAX] {
            let w = i31(v);
            assert!(!is_object(w) && host_number(w).is_none());
        }
        assert!(is_object(64) && host_number(64).is_none());
        assert!(!is_object(0) && host_number(0).is_none());
        assert_eq!(
            i31(u32::MAX),
            0xffff_ffff,
            "31 bits, tagged; bits 32 and up clear"
        );
    }

    #[test]
    fn arrays_past_the_largest_object_have_no_size() {
        assert_eq!(array_size(StorageType::I8, 0), Some(8));
        assert_eq!(array_size(StorageType::I8, 3), Some(16));
        let v128 = StorageType::Val(ValType::V128);
        assert_eq!(array_size(v128, 2), Some(40));
        assert_eq!(array_size(v128, u32::MAX), None);
        let most = ((MAX_OBJECT - u64::from(HEADER)) / 16) as u32;
        assert!(array_size(v128, most).is_some());
        assert_eq!(array_size(v128, most + 1), None);
    }
}
