//! The embedder's handles to memories, tables and globals: small `Copy` values, valid with the
//! store they were made in (see [`crate::Store`]). What they refer to lives in the store.

use ephem_module::{GlobalType, MemoryType, TableType, ValType};

use crate::instance::{admit_memory, admit_table, raw_store};
use crate::memory::{HostBytes, LinearMemory, PAGE};
use crate::store::{AsContext, AsContextMut, Stored};
use crate::table::{GlobalData, TableData};
use crate::{Error, Func, Val};

/// Something an instance imports or exports.
#[derive(Clone, Copy, Debug)]
pub enum Extern {
    /// A function.
    Func(Func),
    /// A linear memory.
    Memory(Memory),
    /// A table.
    Table(Table),
    /// A global.
    Global(Global),
}

impl Extern {
    /// The function, if this is one.
    pub fn into_func(self) -> Option<Func> {
        match self {
            Extern::Func(f) => Some(f),
            _ => None,
        }
    }
    /// The memory, if this is one.
    pub fn into_memory(self) -> Option<Memory> {
        match self {
            Extern::Memory(m) => Some(m),
            _ => None,
        }
    }
    /// The table, if this is one.
    pub fn into_table(self) -> Option<Table> {
        match self {
            Extern::Table(t) => Some(t),
            _ => None,
        }
    }
    /// The global, if this is one.
    pub fn into_global(self) -> Option<Global> {
        match self {
            Extern::Global(g) => Some(g),
            _ => None,
        }
    }
}

impl From<Func> for Extern {
    fn from(f: Func) -> Extern {
        Extern::Func(f)
    }
}
impl From<Memory> for Extern {
    fn from(m: Memory) -> Extern {
        Extern::Memory(m)
    }
}
impl From<Table> for Extern {
    fn from(t: Table) -> Extern {
        Extern::Table(t)
    }
}
impl From<Global> for Extern {
    fn from(g: Global) -> Extern {
        Extern::Global(g)
    }
}

/// A linear memory (see `memory` for how it is reserved, pooled and initialised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory(pub(crate) Stored);

impl Memory {
    /// A new zeroed memory of type `ty` in `store`, from the engine's memory pool.
    /// Fails with an error of kind `Limit` when the store's limiter refuses it.
    pub fn new(mut store: impl AsContextMut, ty: MemoryType) -> Result<Memory, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: derived from the exclusive borrow above, for this call only; nothing borrows
        // the store's data while the limiter is asked.
        let store = unsafe { &mut *raw };
        // SAFETY: as above: `raw` is this store's, and its data is not borrowed.
        unsafe { admit_memory(store, raw, ty)? };
        let no_image: Option<&crate::instance::ArtifactImage<'_>> = None;
        let memory = LinearMemory::pooled(store.engine(), ty, no_image, false)?;
        Ok(Memory(store.push_memory(memory)))
    }

    fn get<'a, S: AsContext + ?Sized>(&self, store: &'a S) -> &'a LinearMemory {
        // Lifetime: the memory lives in the store, which `store` borrows.
        let ctx = store.as_context();
        let memory: *const LinearMemory = ctx.opaque().memory(self.0);
        // SAFETY: the memory lives as long as the store `store` borrows, and the borrow of
        // `store` outlives the returned reference.
        unsafe { &*memory }
    }

    /// The memory's type, with its current size as minimum.
    pub fn ty(&self, store: impl AsContext) -> MemoryType {
        self.get(&store).ty()
    }

    /// The size in 64 KiB pages.
    pub fn size(&self, store: impl AsContext) -> u64 {
        self.get(&store).pages() as u64
    }

    /// The size in bytes.
    pub fn data_size(&self, store: impl AsContext) -> usize {
        self.get(&store).len()
    }

    /// The memory's bytes.
    pub fn data<'a, S: AsContext + ?Sized>(&self, store: &'a S) -> &'a [u8] {
        // SAFETY: no wasm can run while `store` is borrowed.
        unsafe { self.get(store).bytes_to_read() }
    }

    /// The memory's bytes, to change.
    pub fn data_mut<'a, S: AsContextMut + ?Sized>(&self, store: &'a mut S) -> &'a mut [u8] {
        // SAFETY: as above; the borrow is exclusive.
        unsafe { self.get(&*store).bytes() }
    }

    /// The memory's bytes and the store's data at once: what a host function needs to read its
    /// arguments out of the guest's memory while it updates its own state.
    pub fn data_and_store_mut<'a, S: AsContextMut + ?Sized>(
        &self,
        store: &'a mut S,
    ) -> (&'a mut [u8], &'a mut S::Data) {
        // SAFETY: as `data_mut`; the bytes are the memory's own mapping, apart from the store's
        // data, so the two exclusive borrows do not overlap.
        let bytes: *mut [u8] = unsafe { self.get(&*store).bytes() };
        let data = &mut store.as_context_mut().0.data;
        // SAFETY: `data` lives in the store's inner state, which outlives the borrow `'a`; the
        // context is a reborrow of `store` for `'a`.
        let data: *mut S::Data = data;
        unsafe { (&mut *bytes, &mut *data) }
    }

    /// As [`Memory::data_and_store_mut`], with the bytes as [`HostBytes`]: what the host
    /// writes through them is marked, so the memory's reset stays the cheap one (see
    /// [`HostBytes`]). What WASI functions use.
    pub fn host_bytes_and_store_mut<'a, S: AsContextMut + ?Sized>(
        &self,
        store: &'a mut S,
    ) -> (HostBytes<'a>, &'a mut S::Data) {
        // SAFETY: as in `data_and_store_mut`: no wasm runs while `store` is borrowed, and the
        // bytes are the memory's own mapping, apart from the store's data.
        let bytes: HostBytes<'_> = unsafe { self.get(&*store).host_bytes() };
        // SAFETY: as in `data_and_store_mut`; the bytes' lifetime is the store borrow's.
        let bytes: HostBytes<'a> = unsafe { std::mem::transmute(bytes) };
        let data = &mut store.as_context_mut().0.data;
        (bytes, data)
    }

    /// The first byte (for embedders that hand the memory to other code).
    pub fn data_ptr(&self, store: impl AsContext) -> *mut u8 {
        self.get(&store).host_base()
    }

    /// Copies `buf.len()` bytes at `offset` out of the memory.
    pub fn read(&self, store: impl AsContext, offset: usize, buf: &mut [u8]) -> Result<(), Error> {
        self.get(&store).read(offset, buf)
    }

    /// Copies `data` into the memory at `offset`.
    pub fn write(&self, store: impl AsContextMut, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.get(&store).write(offset, data)
    }

    /// Grows by `delta` pages; returns the old size in pages. Fails past the memory's maximum
    /// or when the store's limiter refuses.
    pub fn grow(&self, mut store: impl AsContextMut, delta: u64) -> Result<u64, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: as in `Memory::new`.
        let store = unsafe { &*raw };
        let memory = store.memory(self.0);
        u32::try_from(delta)
            .ok()
            // SAFETY: as above.
            .filter(|&d| unsafe { memory.may_grow(store, raw, d) })
            .and_then(|d| memory.grow(d))
            .map(u64::from)
            .ok_or_else(|| {
                Error::Limit(format!(
                    "cannot grow a memory of {} pages by {delta} pages",
                    memory.len() as u64 / PAGE
                ))
            })
    }
}

/// A table of references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Table(pub(crate) Stored);

impl Table {
    /// A new table of type `ty` in `store`, every element `init`. Fails with an error of
    /// kind `Limit` when the store's limiter refuses it.
    pub fn new(mut store: impl AsContextMut, ty: TableType, init: Val) -> Result<Table, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: as in `Memory::new`.
        let store = unsafe { &mut *raw };
        let init = element(store, ty.elem, init)?;
        // SAFETY: as above.
        unsafe { admit_table(store, raw, ty)? };
        let table = TableData::new(ty, init)?;
        Ok(Table(store.push_table(table)))
    }

    /// The table's type, with its current size as minimum.
    pub fn ty(&self, store: impl AsContext) -> TableType {
        store.as_context().opaque().table(self.0).ty()
    }

    /// The number of elements.
    pub fn size(&self, store: impl AsContext) -> u32 {
        store.as_context().opaque().table(self.0).len()
    }

    /// Element `index`, if in bounds.
    pub fn get(&self, store: impl AsContext, index: u32) -> Option<Val> {
        let ctx = store.as_context();
        let table = ctx.opaque().table(self.0);
        let raw = table.get(index)?;
        Some(Val::from_raw(ctx.opaque(), table.ty().elem, raw as _))
    }

    /// Sets element `index` to `value` (a reference of the table's type, of this store).
    pub fn set(&self, mut store: impl AsContextMut, index: u32, value: Val) -> Result<(), Error> {
        let mut ctx = store.as_context_mut();
        let elem = ctx.opaque().table(self.0).ty().elem;
        let raw = element(ctx.opaque(), elem, value)?;
        ctx.opaque()
            .table(self.0)
            .set(index, raw)
            .ok_or_else(|| Error::Usage(format!("table index {index} is out of bounds")))
    }

    /// Grows by `delta` elements set to `init`; returns the old size. Fails past the table's
    /// maximum or when the store's limiter refuses.
    pub fn grow(&self, mut store: impl AsContextMut, delta: u32, init: Val) -> Result<u32, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: as in `Memory::new`.
        let store = unsafe { &*raw };
        let table = store.table(self.0);
        let init = element(store, table.ty().elem, init)?;
        // SAFETY: as above.
        let allowed = unsafe { table.may_grow(store, raw, delta) };
        allowed
            .then(|| table.grow(delta, init))
            .flatten()
            .ok_or_else(|| {
                Error::Limit(format!("cannot grow a table of {} by {delta}", table.len()))
            })
    }
}

/// A table element's raw form, checked against the element type and the store.
fn element(store: &crate::store::StoreOpaque, elem: ValType, value: Val) -> Result<usize, Error> {
    if value.ty() != elem {
        return Err(Error::Usage(format!(
            "a {:?} cannot go into a table of {elem:?}",
            value.ty()
        )));
    }
    Ok(value.to_raw(store)? as usize)
}

/// A global variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Global(pub(crate) Stored);

impl Global {
    /// A new global of type `ty` in `store`, holding `value`.
    pub fn new(mut store: impl AsContextMut, ty: GlobalType, value: Val) -> Result<Global, Error> {
        let mut ctx = store.as_context_mut();
        if value.ty() != ty.ty {
            return Err(Error::Usage(format!(
                "a {:?} cannot initialise a global of {:?}",
                value.ty(),
                ty.ty
            )));
        }
        let raw = value.to_raw(ctx.opaque())?;
        Ok(Global(ctx.opaque().push_global(GlobalData::new(ty, raw))))
    }

    /// The global's type.
    pub fn ty(&self, store: impl AsContext) -> GlobalType {
        store.as_context().opaque().global(self.0).ty
    }

    /// The current value.
    pub fn get(&self, store: impl AsContext) -> Val {
        let ctx = store.as_context();
        let g = ctx.opaque().global(self.0);
        Val::from_raw(ctx.opaque(), g.ty.ty, g.get())
    }

    /// Sets the value of a mutable global.
    pub fn set(&self, mut store: impl AsContextMut, value: Val) -> Result<(), Error> {
        let mut ctx = store.as_context_mut();
        let ty = ctx.opaque().global(self.0).ty;
        if !ty.mutable {
            return Err(Error::Usage("the global is immutable".into()));
        }
        if value.ty() != ty.ty {
            return Err(Error::Usage(format!(
                "a {:?} cannot go into a global of {:?}",
                value.ty(),
                ty.ty
            )));
        }
        let raw = value.to_raw(ctx.opaque())?;
        ctx.opaque().global(self.0).set(raw);
        Ok(())
    }
}
