//! The host's GC types, with wasmtime's names: [`StructType`] and [`ArrayType`] (a struct's
//! fields, an array's element, and the type's canonical id in its engine), and
//! [`StructRefPre`] and [`ArrayRefPre`], what `StructRef::new` and `ArrayRef::new` take.
//!
//! A type the host makes is final and has no supertype, and is the same type as a module's
//! final struct or array type of the same fields (one canonical id), so that the objects the
//! host makes pass that module's casts. wasmtime's `*RefPre` registers the type with a store's
//! allocator; ephem's stores need nothing per type, so a `*RefPre` only checks, once, that
//! its type belongs to the store's engine.

use std::sync::Arc;

use ephem_module::{FieldType, HeapType, StorageType, TypeDef, ValType};

use crate::context::AsContextMut;
use crate::{Engine, Error};

/// A struct type: its fields, in order.
#[derive(Clone, Debug)]
pub struct StructType {
    engine: Engine,
    id: u32,
    fields: Arc<[FieldType]>,
}

/// An array type: its element.
#[derive(Clone, Debug)]
pub struct ArrayType {
    engine: Engine,
    id: u32,
    elem: FieldType,
}

/// Whether every concrete type `fields` name is one `engine` gave an id to (as the types it
/// hands out name them).
fn names_known_types(engine: &Engine, fields: &[FieldType]) -> Result<(), Error> {
    for f in fields {
        let StorageType::Val(ValType::Ref(r)) = f.storage else {
            continue;
        };
        let known = match r.heap {
            HeapType::ConcreteStruct(id) | HeapType::ConcreteArray(id) => {
                engine.gc_type(id).is_some()
            }
            HeapType::ConcreteFunc(id) => engine.func_type(id).is_some(),
            _ => true,
        };
        if !known {
            return Err(Error::Usage(format!(
                "a field of type {:?} names a type this engine does not know",
                f.storage
            )));
        }
    }
    Ok(())
}

impl StructType {
    /// The struct type of `fields` in `engine`; an error if a field names a concrete type that
    /// is not one of `engine`'s.
    pub fn new(
        engine: &Engine,
        fields: impl IntoIterator<Item = FieldType>,
    ) -> Result<StructType, Error> {
        let fields: Arc<[FieldType]> = fields.into_iter().collect();
        names_known_types(engine, &fields)?;
        let id = engine.gc_type_id(&TypeDef::Struct(fields.to_vec()));
        Ok(StructType {
            engine: engine.clone(),
            id,
            fields,
        })
    }

    /// The type of the struct with canonical id `id` in `engine`, if it is one.
    pub(crate) fn of(engine: &Engine, id: u32) -> Option<StructType> {
        match &*engine.gc_type(id)? {
            TypeDef::Struct(fields) => Some(StructType {
                engine: engine.clone(),
                id,
                fields: fields.as_slice().into(),
            }),
            _ => None,
        }
    }

    /// Its fields, in order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = FieldType> + '_ {
        self.fields.iter().copied()
    }

    /// Field `i`, if there is one.
    pub fn field(&self, i: usize) -> Option<FieldType> {
        self.fields.get(i).copied()
    }

    /// The concrete heap type of its structs, as a field, a global or a parameter names it.
    pub fn heap_type(&self) -> HeapType {
        HeapType::ConcreteStruct(self.id)
    }

    /// Whether a struct of this type is one of `other` (its subtype, or the same type).
    pub fn matches(&self, other: &StructType) -> bool {
        self.engine.same(&other.engine) && self.engine.is_subtype(self.id, other.id)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl ArrayType {
    /// The array type of elements `elem` in `engine` (wasmtime's signature, whose only error,
    /// a concrete type of another engine, panics here as it does there).
    pub fn new(engine: &Engine, elem: FieldType) -> ArrayType {
        names_known_types(engine, &[elem]).expect("an element type of this engine");
        ArrayType {
            engine: engine.clone(),
            id: engine.gc_type_id(&TypeDef::Array(elem)),
            elem,
        }
    }

    /// The type of the array with canonical id `id` in `engine`, if it is one.
    pub(crate) fn of(engine: &Engine, id: u32) -> Option<ArrayType> {
        match *engine.gc_type(id)? {
            TypeDef::Array(elem) => Some(ArrayType {
                engine: engine.clone(),
                id,
                elem,
            }),
            _ => None,
        }
    }

    /// Its element type.
    pub fn field_type(&self) -> FieldType {
        self.elem
    }

    /// The concrete heap type of its arrays, as a field, a global or a parameter names it.
    pub fn heap_type(&self) -> HeapType {
        HeapType::ConcreteArray(self.id)
    }

    /// Whether an array of this type is one of `other` (its subtype, or the same type).
    pub fn matches(&self, other: &ArrayType) -> bool {
        self.engine.same(&other.engine) && self.engine.is_subtype(self.id, other.id)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

/// What [`crate::StructRef::new`] takes: a struct type checked to be of a store's engine.
#[derive(Clone, Debug)]
pub struct StructRefPre(pub(crate) StructType);

/// What [`crate::ArrayRef::new`] takes: an array type checked to be of a store's engine.
#[derive(Clone, Debug)]
pub struct ArrayRefPre(pub(crate) ArrayType);

impl StructRefPre {
    /// `ty`, for allocations in `store`. Panics if `ty` is of another engine than the
    /// store's (as wasmtime's does).
    pub fn new(mut store: impl AsContextMut, ty: StructType) -> StructRefPre {
        let mut ctx = store.as_context_mut();
        assert!(
            ctx.opaque().engine().same(ty.engine()),
            "a struct type of another engine"
        );
        StructRefPre(ty)
    }
}

impl ArrayRefPre {
    /// `ty`, for allocations in `store`. Panics if `ty` is of another engine than the
    /// store's (as wasmtime's does).
    pub fn new(mut store: impl AsContextMut, ty: ArrayType) -> ArrayRefPre {
        let mut ctx = store.as_context_mut();
        assert!(
            ctx.opaque().engine().same(ty.engine()),
            "an array type of another engine"
        );
        ArrayRefPre(ty)
    }
}
