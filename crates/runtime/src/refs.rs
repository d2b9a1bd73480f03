//! The host's handles on references other than functions and exceptions: [`ExternRef`] (a
//! host reference), [`AnyRef`] (a GC value: a struct, an array, an `i31`, or a host reference
//! made into an `anyref`), [`EqRef`], [`StructRef`] and [`ArrayRef`] (which the host makes, of
//! the types of `gc::types`, and whose fields and elements it reads and writes) and [`I31`]. How
//! their bits look to generated code is `ephem_module::gc`'s. An allocation of the host
//! collects the heap as one of generated code does when the object does not fit (the wasm
//! frames of the store's calls are then all behind host calls).
//!
//! # Handles that outlive collections
//! wasmtime hands out `Rooted<AnyRef>`s in scopes, so that its collector knows what the host
//! holds. ephem's stores live for one call as a rule, so a simpler handle serves: an
//! [`AnyRef`] that names an object names an entry of its store's root table, which a
//! collection updates when it moves the object (see `gc`), and every handle stays valid for
//! as long as its store does. The table keeps one entry per object the host has been handed,
//! so that two handles on one object are equal (`==` is identity, as `ref.eq`); its entries
//! are roots until the store goes. A long-lived store that hands the host millions of
//! distinct objects keeps them all: such an embedder drops the store, as ephem's workload
//! does after every call. Every use checks that a handle is given to its own store.

use ephem_module::gc::{self, HOST_TAG, I31_TAG};
use ephem_module::{HeapType, StorageType, TypeDef, ValRaw};

use crate::context::{AsContext, AsContextMut, raw_store};
use crate::gc::Shape;
use crate::gc::types::{ArrayRefPre, ArrayType, StructRefPre, StructType};
use crate::limits::Growing;
use crate::store::{StoreId, StoreOpaque};
use crate::{Error, Val};

/// An `externref`: a number the embedder chose, which wasm can only pass around, or a GC value
/// that wasm made into an `externref` (`extern.convert_any`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExternRef(ExternData);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ExternData {
    Host(u32),
    Any(AnyRef),
}

impl ExternRef {
    /// A host reference carrying `data`.
    pub const fn new(data: u32) -> ExternRef {
        ExternRef(ExternData::Host(data))
    }

    /// The number the embedder chose; `None` for a GC value made into an `externref`.
    pub fn data(&self) -> Option<u32> {
        match self.0 {
            ExternData::Host(n) => Some(n),
            ExternData::Any(_) => None,
        }
    }

    /// `any` as an `externref`, as `extern.convert_any` makes it.
    pub fn convert_any(any: AnyRef) -> ExternRef {
        match gc::host_number(any.handle) {
            Some(n) => ExternRef::new(n),
            None => ExternRef(ExternData::Any(any)),
        }
    }

    /// The reference as generated code holds it; an error for a GC value of another store.
    pub(crate) fn to_raw(self, store: &StoreOpaque) -> Result<ValRaw, Error> {
        Ok(match self.0 {
            ExternData::Host(n) => ValRaw::from(gc::host(n)),
            ExternData::Any(a) => ValRaw::from(a.raw_in(store)?),
        })
    }

    /// The reference in a value slot of `store`: its low 8 bytes (wasm code writes only those,
    /// so the rest may hold what the slot held before, such as a `v128` argument), 0 for null.
    pub(crate) fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Option<ExternRef> {
        let any = AnyRef::from_raw(store, raw)?;
        Some(ExternRef::convert_any(any))
    }
}

/// A GC value: a struct, an array, an `i31`, or a host reference made into an `anyref`
/// (`any.convert_extern`). A handle of the store that made it (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnyRef {
    store: StoreId,
    /// The reference's word (see `ephem_module::gc`), except for an object's: one plus its
    /// index in the store's root table, shifted left by two (see the module documentation).
    handle: u64,
}

/// A struct (wasmtime's name): a handle as an [`AnyRef`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StructRef(AnyRef);

/// A value that `ref.eq` compares (wasmtime's name): a struct, an array or an `i31`; a handle
/// as an [`AnyRef`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EqRef(AnyRef);

impl EqRef {
    /// `value` as a GC value of `store`.
    pub fn from_i31(store: impl AsContext, value: I31) -> EqRef {
        EqRef(AnyRef::from_i31(store, value))
    }

    /// The `i31`, if this is one.
    pub fn as_i31(&self) -> Option<I31> {
        self.0.as_i31()
    }

    /// Whether this is an `i31`.
    pub fn is_i31(&self) -> bool {
        self.0.is_i31()
    }

    /// This as a struct, if it is one.
    pub fn as_struct(&self, store: impl AsContext) -> Option<StructRef> {
        self.0.as_struct(store)
    }

    /// This as an array, if it is one.
    pub fn as_array(&self, store: impl AsContext) -> Option<ArrayRef> {
        self.0.as_array(store)
    }

    /// This as an [`AnyRef`].
    pub fn to_anyref(self) -> AnyRef {
        self.0
    }
}

/// A new object of `shape` (`len` elements for an array) in the heap of the store `raw` is,
/// collecting it first if it does not fit (the host holds the store: every call's wasm
/// frames on this thread are behind host calls); an error when the heap cannot hold it.
fn alloc_from_host(raw: *mut StoreOpaque, shape: Shape, len: u32) -> Result<AnyRef, Error> {
    // SAFETY: `raw` is derived from the caller's exclusive borrow of the store; only shared
    // references into it are alive while the limiter is asked and the heap collected.
    let store = unsafe { &*raw };
    let may_grow = |current, delta| {
        // SAFETY: as above.
        unsafe { StoreOpaque::may_grow_by(raw, Growing::Memory, current, delta, None) }
    };
    let roots = |f: &mut dyn FnMut(*mut u64)| {
        // SAFETY: the host holds the store, so no generated code of this thread runs but
        // behind host calls; the places stay valid while the collection runs.
        unsafe { crate::gc::roots(store, None, &mut [], f) }
    };
    let r = (store.gc)
        .alloc_collecting(&store.engine, shape, len, may_grow, roots)
        .ok_or_else(|| Error::Limit("the GC heap cannot hold a new object".into()))?;
    Ok(AnyRef::from_raw(store, ValRaw::from(r)).expect("an object is not null"))
}

/// Writes `value` (checked to fit) into the field or element of `storage` at `at` in `store`'s
/// heap.
fn write_value(
    store: &StoreOpaque,
    at: u64,
    storage: StorageType,
    value: Val,
) -> Result<(), Error> {
    let raw = value.to_raw(store)?;
    let size = gc::storage_size(storage) as usize;
    // SAFETY: no wasm runs on the heap while the host holds the store; no other slice of it
    // is alive.
    match unsafe { store.gc.bytes(at, size as u64) } {
        Some(out) => out.copy_from_slice(&raw.to_le_bytes()[..size]),
        None => {
            return Err(Error::Usage(format!(
                "a field or element at {at} is outside the heap"
            )));
        }
    }
    Ok(())
}

/// Whether `value` fits a field or element that stores `storage`.
fn fits(store: &StoreOpaque, value: &Val, storage: StorageType) -> bool {
    match storage {
        StorageType::Val(t) => value.fits(store, t),
        StorageType::I8 | StorageType::I16 => matches!(value, Val::I32(_)),
    }
}

impl StructRef {
    /// A new struct of `pre`'s type in `store` with `fields` (wasmtime's signature); an error
    /// where they do not fit its fields, or the heap cannot hold it (after a collection).
    pub fn new(
        mut store: impl AsContextMut,
        pre: &StructRefPre,
        fields: &[Val],
    ) -> Result<StructRef, Error> {
        let raw = raw_store(&mut store);
        let ty = &pre.0;
        {
            // SAFETY: derived from the exclusive borrow above; a shared reference for checks.
            let opaque = unsafe { &*raw };
            if !opaque.engine.same(ty.engine()) {
                return Err(Error::Usage("a struct type of another engine".into()));
            }
            let fit = fields.len() == ty.fields().len()
                && (fields.iter().zip(ty.fields())).all(|(v, f)| fits(opaque, v, f.storage));
            if !fit {
                return Err(Error::Usage(format!(
                    "{} values do not fit the fields of {ty:?}",
                    fields.len()
                )));
            }
        }
        let all: Vec<ephem_module::FieldType> = ty.fields().collect();
        let layout = gc::struct_layout(&all);
        let shape = Shape::Struct {
            word: ty.id(),
            size: layout.size,
            depth: 0,
        };
        let object = alloc_from_host(raw, shape, 0)?;
        // SAFETY: as above; the values are written after the allocation, which may have moved
        // the objects they name.
        let opaque = unsafe { &*raw };
        let word = object.word(opaque);
        for ((v, f), at) in fields.iter().zip(&all).zip(&layout.offsets) {
            write_value(opaque, word + u64::from(*at), f.storage, *v)?;
        }
        Ok(StructRef(object))
    }

    /// Its type.
    pub fn ty(&self, store: impl AsContext) -> Result<StructType, Error> {
        let ctx = store.as_context();
        let store = ctx.opaque();
        (self.0.header(store))
            .and_then(|(word, _)| StructType::of(&store.engine, word))
            .ok_or_else(|| Error::Usage(format!("{self:?} is not a struct of this store")))
    }

    /// This as an [`EqRef`].
    pub fn to_eqref(self) -> EqRef {
        EqRef(self.0)
    }

    /// Field `index` (a packed one zero-extended to an `i32`); an error where there is none.
    pub fn field(&self, store: impl AsContext, index: usize) -> Result<Val, Error> {
        self.0.get(store, Place::Field(index))
    }

    /// Writes `value` into field `index` (a packed one takes an `i32`'s low bits); an error
    /// where there is no such mutable field or `value` is not of its type.
    pub fn set_field(
        &self,
        mut store: impl AsContextMut,
        index: usize,
        value: Val,
    ) -> Result<(), Error> {
        let mut ctx = store.as_context_mut();
        self.0.write(ctx.opaque(), Place::Field(index), value)
    }

    /// This as an [`AnyRef`].
    pub fn to_anyref(self) -> AnyRef {
        self.0
    }
}

/// An array (wasmtime's name): a handle as an [`AnyRef`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrayRef(AnyRef);

impl ArrayRef {
    /// A new array of `pre`'s type in `store`: `len` elements of `elem` (wasmtime's
    /// signature); an error where `elem` does not fit, or the heap cannot hold it (after a
    /// collection).
    pub fn new(
        mut store: impl AsContextMut,
        pre: &ArrayRefPre,
        elem: &Val,
        len: u32,
    ) -> Result<ArrayRef, Error> {
        let raw = raw_store(&mut store);
        let array = ArrayRef::alloc(raw, pre, std::slice::from_ref(elem), len)?;
        // SAFETY: derived from the exclusive borrow above, after the allocation.
        let opaque = unsafe { &*raw };
        let storage = pre.0.field_type().storage;
        let size = gc::storage_size(storage);
        let value = (*elem).to_raw(opaque)?;
        let word = array.0.word(opaque);
        if let Some((at, n)) = opaque.gc.elements(word, 0, len, size) {
            // SAFETY: no wasm runs on the heap while the host holds the store; the one slice.
            if let Some(out) = unsafe { opaque.gc.bytes(at, n) } {
                crate::gc::fill(out, size, value as u64, (value >> 64) as u64);
            }
        }
        Ok(array)
    }

    /// A new array of `pre`'s type in `store` holding `elems` (wasmtime's signature).
    pub fn new_fixed(
        mut store: impl AsContextMut,
        pre: &ArrayRefPre,
        elems: &[Val],
    ) -> Result<ArrayRef, Error> {
        let raw = raw_store(&mut store);
        let len = u32::try_from(elems.len())
            .map_err(|_| Error::Limit("an array of more than 2^32 elements".into()))?;
        let array = ArrayRef::alloc(raw, pre, elems, len)?;
        // SAFETY: derived from the exclusive borrow above, after the allocation.
        let opaque = unsafe { &*raw };
        let storage = pre.0.field_type().storage;
        let size = u64::from(gc::storage_size(storage));
        let first = array.0.word(opaque) + u64::from(gc::HEADER);
        for (i, v) in (0..u64::from(len)).zip(elems) {
            write_value(opaque, first + i * size, storage, *v)?;
        }
        Ok(array)
    }

    /// A new array of `len` elements of `pre`'s type, zero, once `values` are checked to fit.
    fn alloc(
        raw: *mut StoreOpaque,
        pre: &ArrayRefPre,
        values: &[Val],
        len: u32,
    ) -> Result<ArrayRef, Error> {
        let ty = &pre.0;
        let storage = ty.field_type().storage;
        // SAFETY: derived from the caller's exclusive borrow; a shared reference for checks.
        let opaque = unsafe { &*raw };
        if !opaque.engine.same(ty.engine()) {
            return Err(Error::Usage("an array type of another engine".into()));
        }
        if let Some(v) = values.iter().find(|v| !fits(opaque, v, storage)) {
            return Err(Error::Usage(format!(
                "{v:?} does not fit the elements of {ty:?}"
            )));
        }
        let shape = Shape::Array {
            word: ty.id() | gc::ARRAY_BIT,
            elem: storage,
        };
        Ok(ArrayRef(alloc_from_host(raw, shape, len)?))
    }

    /// Its type.
    pub fn ty(&self, store: impl AsContext) -> Result<ArrayType, Error> {
        let ctx = store.as_context();
        let store = ctx.opaque();
        (self.0.header(store))
            .and_then(|(word, _)| ArrayType::of(&store.engine, word & !gc::ARRAY_BIT))
            .ok_or_else(|| Error::Usage(format!("{self:?} is not an array of this store")))
    }

    /// This as an [`EqRef`].
    pub fn to_eqref(self) -> EqRef {
        EqRef(self.0)
    }

    /// How many elements it has.
    pub fn len(&self, store: impl AsContext) -> u32 {
        self.0
            .header(store.as_context().opaque())
            .map_or(0, |(_, len)| len)
    }

    /// Whether it has no elements.
    pub fn is_empty(&self, store: impl AsContext) -> bool {
        self.len(store) == 0
    }

    /// Element `index` (a packed one zero-extended to an `i32`); an error past the end.
    pub fn get(&self, store: impl AsContext, index: u32) -> Result<Val, Error> {
        self.0.get(store, Place::Element(index))
    }

    /// Writes `value` into element `index`; an error past the end, in an immutable array, or
    /// where `value` is not of the element type.
    pub fn set(&self, mut store: impl AsContextMut, index: u32, value: Val) -> Result<(), Error> {
        let mut ctx = store.as_context_mut();
        self.0.write(ctx.opaque(), Place::Element(index), value)
    }

    /// This as an [`AnyRef`].
    pub fn to_anyref(self) -> AnyRef {
        self.0
    }
}

/// A field of a struct or an element of an array.
#[derive(Clone, Copy, Debug)]
enum Place {
    Field(usize),
    Element(u32),
}

/// The value of `storage` at `at` in `store`'s heap (a packed one zero-extended).
fn read(store: &StoreOpaque, at: u64, storage: StorageType) -> Option<Val> {
    let size = gc::storage_size(storage) as usize;
    // SAFETY: no wasm runs on the heap while the host holds the store; no other slice of it is
    // alive.
    let bytes = unsafe { store.gc.bytes(at, size as u64)? };
    let mut raw = [0; 16];
    raw[..size].copy_from_slice(bytes);
    let raw = ValRaw::from_le_bytes(raw);
    Some(match storage {
        StorageType::I8 | StorageType::I16 => Val::I32(raw as i32),
        StorageType::Val(t) => Val::from_raw(store, t, raw),
    })
}

/// A 31-bit integer as a GC value (`i31ref`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct I31(u32);

impl I31 {
    /// `value`, if it fits 31 bits unsigned.
    pub fn new_u32(value: u32) -> Option<I31> {
        (value < 1 << 31).then_some(I31(value))
    }

    /// `value`, if it fits 31 bits signed.
    pub fn new_i32(value: i32) -> Option<I31> {
        (-(1 << 30)..1 << 30)
            .contains(&value)
            .then_some(I31(value as u32 & 0x7fff_ffff))
    }

    /// `value`'s low 31 bits (what `ref.i31` keeps).
    pub fn wrapping_u32(value: u32) -> I31 {
        I31(value & 0x7fff_ffff)
    }

    /// The value, zero-extended (`i31.get_u`).
    pub fn get_u32(self) -> u32 {
        self.0
    }

    /// The value, sign-extended (`i31.get_s`).
    pub fn get_i32(self) -> i32 {
        ((self.0 << 1) as i32) >> 1
    }
}

impl AnyRef {
    /// `value` as a GC value of `store`.
    pub fn from_i31(store: impl AsContext, value: I31) -> AnyRef {
        AnyRef {
            store: store.as_context().opaque().id,
            handle: gc::i31(value.0),
        }
    }

    /// `e` as an `anyref` of `store`, as `any.convert_extern` makes it.
    pub fn convert_extern(store: impl AsContext, e: ExternRef) -> AnyRef {
        match e.0 {
            ExternData::Any(a) => a,
            ExternData::Host(n) => AnyRef {
                store: store.as_context().opaque().id,
                handle: gc::host(n),
            },
        }
    }

    /// The `i31`, if this is one.
    pub fn as_i31(&self) -> Option<I31> {
        (self.handle & I31_TAG != 0).then_some(I31((self.handle as u32) >> 1))
    }

    /// Whether this is an `i31`.
    pub fn is_i31(&self) -> bool {
        self.as_i31().is_some()
    }

    /// Whether `ref.eq` compares this: a struct, an array or an `i31`, not a host reference.
    pub fn is_eqref(&self, _store: impl AsContext) -> bool {
        self.handle & 3 != HOST_TAG
    }

    /// This as an [`EqRef`], if it is one.
    pub fn as_eqref(&self, store: impl AsContext) -> Option<EqRef> {
        self.is_eqref(store).then_some(EqRef(*self))
    }

    /// Whether this is a struct.
    pub fn is_struct(&self, store: impl AsContext) -> bool {
        self.header(store.as_context().opaque())
            .is_some_and(|(word, _)| word & gc::ARRAY_BIT == 0)
    }

    /// Whether this is an array.
    pub fn is_array(&self, store: impl AsContext) -> bool {
        self.header(store.as_context().opaque())
            .is_some_and(|(word, _)| word & gc::ARRAY_BIT != 0)
    }

    /// This as a struct, if it is one.
    pub fn as_struct(&self, store: impl AsContext) -> Option<StructRef> {
        self.is_struct(store).then_some(StructRef(*self))
    }

    /// This as an array, if it is one.
    pub fn as_array(&self, store: impl AsContext) -> Option<ArrayRef> {
        self.is_array(store).then_some(ArrayRef(*self))
    }

    /// The value at `place` (a packed one zero-extended).
    fn get(&self, store: impl AsContext, place: Place) -> Result<Val, Error> {
        let ctx = store.as_context();
        let store = ctx.opaque();
        self.place(store, place)
            .and_then(|(at, storage, _)| read(store, at, storage))
            .ok_or_else(|| {
                Error::Usage(format!("no such field or element ({place:?} of {self:?})"))
            })
    }

    /// Where a field or element of this object is in `store`'s heap: its offset, what it
    /// stores, whether it may change.
    fn place(&self, store: &StoreOpaque, place: Place) -> Option<(u64, StorageType, bool)> {
        let (word, len) = self.header(store)?;
        let ty = store.engine.gc_type(word & !gc::ARRAY_BIT)?;
        match (&*ty, place) {
            (TypeDef::Struct(fields), Place::Field(i)) => {
                let f = fields.get(i)?;
                let at = self.word(store) + u64::from(gc::struct_layout(fields).offsets[i]);
                Some((at, f.storage, f.mutable))
            }
            (TypeDef::Array(elem), Place::Element(i)) if i < len => {
                let size = u64::from(gc::storage_size(elem.storage));
                let at = self.word(store) + u64::from(gc::HEADER) + u64::from(i) * size;
                Some((at, elem.storage, elem.mutable))
            }
            _ => None,
        }
    }

    fn write(&self, store: &StoreOpaque, place: Place, value: Val) -> Result<(), Error> {
        let usage = |what: &str| Err(Error::Usage(format!("{what} ({place:?} of {self:?})")));
        let Some((at, storage, mutable)) = self.place(store, place) else {
            return usage("no such field or element");
        };
        if !mutable {
            return usage("an immutable field or element");
        }
        if !fits(store, &value, storage) {
            return usage("a value of another type");
        }
        write_value(store, at, storage, value)
    }

    /// The object's header words (type word, length), if this is an object of `store`.
    fn header(&self, store: &StoreOpaque) -> Option<(u32, u32)> {
        if self.store != store.id || !gc::is_object(self.handle) {
            return None;
        }
        store.gc.header(self.word(store))
    }

    /// The reference's word now (an object's may have moved); `self` is of `store`.
    fn word(&self, store: &StoreOpaque) -> u64 {
        match gc::is_object(self.handle) {
            true => store.gc.held((self.handle >> 2) - 1),
            false => self.handle,
        }
    }

    /// The reference as generated code holds it; an error for one of another store.
    pub(crate) fn raw_in(self, store: &StoreOpaque) -> Result<u64, Error> {
        if self.store != store.id {
            return Err(Error::Usage(
                "a GC value of another store was passed to wasm".into(),
            ));
        }
        Ok(self.word(store))
    }

    /// The reference in a value slot of `store` (its low 8 bytes), `None` for null.
    pub(crate) fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Option<AnyRef> {
        let raw = raw as u64;
        let handle = match gc::is_object(raw) {
            true => (store.gc.hold(raw) + 1) << 2,
            false => raw,
        };
        (raw != 0).then_some(AnyRef {
            store: store.id,
            handle,
        })
    }

    /// Whether this (a value of `store`) is a value of `heap`, a heap type of the `any`
    /// hierarchy whose concrete types are canonical ids.
    pub(crate) fn fits(&self, store: &StoreOpaque, heap: HeapType) -> bool {
        if self.store != store.id {
            return false;
        }
        let header = || self.header(store).map(|(word, _)| word);
        match heap {
            HeapType::Any => true,
            HeapType::Eq => self.handle & 3 != HOST_TAG,
            HeapType::I31 => self.is_i31(),
            HeapType::Struct => header().is_some_and(|w| w & gc::ARRAY_BIT == 0),
            HeapType::Array => header().is_some_and(|w| w & gc::ARRAY_BIT != 0),
            HeapType::ConcreteStruct(id) => {
                header().is_some_and(|w| w & gc::ARRAY_BIT == 0 && store.engine.is_subtype(w, id))
            }
            HeapType::ConcreteArray(id) => header().is_some_and(|w| {
                w & gc::ARRAY_BIT != 0 && store.engine.is_subtype(w & !gc::ARRAY_BIT, id)
            }),
            _ => false,
        }
    }
}
