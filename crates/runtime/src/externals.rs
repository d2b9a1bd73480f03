//! The embedder's handles to memories, tables and globals: small `Copy` values, valid with the
//! store they were made in (see [`crate::Store`]). What they refer to lives in the store.

use ephem_module::{GlobalType, MemoryType, TableType, ValType};

use crate::context::{AsContext, AsContextMut, raw_store};
use crate::global::GlobalData;
use crate::limits::Growing;
use crate::memory::{HostBytes, LinearMemory};
use crate::store::{StoreOpaque, Stored};
use crate::table::TableData;
use crate::{Error, Func, Val};

/// Something an instance imports or exports.
#[derive(Clone, Debug)]
pub enum Extern {
    /// A function.
    Func(Func),
    /// A linear memory of a store (shared or not).
    Memory(Memory),
    /// A shared memory, of no one store: a linker that defines one gives each store it
    /// instantiates in a [`Memory`] of it (see [`Memory::from_shared`]). Instances export
    /// their memories, shared ones too, as [`Extern::Memory`].
    SharedMemory(crate::SharedMemory),
    /// A table.
    Table(Table),
    /// A global.
    Global(Global),
    /// An exception tag.
    Tag(crate::Tag),
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
    /// The shared memory, if this is one.
    pub fn into_shared_memory(self) -> Option<crate::SharedMemory> {
        match self {
            Extern::SharedMemory(m) => Some(m),
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
    /// The tag, if this is one.
    pub fn into_tag(self) -> Option<crate::Tag> {
        match self {
            Extern::Tag(t) => Some(t),
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
impl From<crate::SharedMemory> for Extern {
    fn from(m: crate::SharedMemory) -> Extern {
        Extern::SharedMemory(m)
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
impl From<crate::Tag> for Extern {
    fn from(t: crate::Tag) -> Extern {
        Extern::Tag(t)
    }
}

/// A linear memory (see `memory` for how it is reserved, pooled and initialised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory(pub(crate) Stored);

impl Memory {
    /// A new zeroed memory of type `ty` in `store`, from the engine's memory pool (a shared
    /// type makes a new [`SharedMemory`](crate::SharedMemory), which
    /// [`Memory::shared`] gives to other stores).
    /// Fails with an error of kind `Limit` when the store's limiter refuses it.
    pub fn new(mut store: impl AsContextMut, ty: MemoryType) -> Result<Memory, Error> {
        if !ty.is_valid() {
            return Err(Error::Usage(format!(
                "a memory of {} pages of 2^{} bytes, at most {:?}, cannot be made",
                ty.min, ty.page_size_log2, ty.max
            )));
        }
        let raw = raw_store(&mut store);
        // SAFETY: derived from the exclusive borrow above, for this call only, and nothing
        // borrows the store while the limiter is asked.
        unsafe { StoreOpaque::admit_memory(raw, ty)? };
        // SAFETY: `raw` is derived from the exclusive borrow above; the only reference to the
        // store from here on.
        let store = unsafe { &mut *raw };
        let no_image: Option<&crate::load::ArtifactImage<'_>> = None;
        let memory = LinearMemory::pooled(store.engine(), ty, no_image, false)?;
        Ok(Memory(store.push_memory(memory)))
    }

    /// `shared` as a memory of `store` (of `shared`'s engine), to import into its instances.
    /// A linker that defines the shared memory itself ([`Extern::SharedMemory`], as in
    /// wasmtime) does this for each store it instantiates in. A store's memories are all
    /// [`Memory`], shared or not (instances export them so); [`Memory::shared`] gives the
    /// shared memory back.
    pub fn from_shared(
        mut store: impl AsContextMut,
        shared: &crate::SharedMemory,
    ) -> Result<Memory, Error> {
        let raw = raw_store(&mut store);
        // SAFETY: derived from the exclusive borrow above, for this call only.
        unsafe { Memory::of_shared_in(raw, shared) }
    }

    /// [`Memory::from_shared`] in the store at `raw`.
    ///
    /// # Safety
    /// `raw` is derived as [`raw_store`] derives it, and no reference into the store is alive.
    pub(crate) unsafe fn of_shared_in(
        raw: *mut StoreOpaque,
        shared: &crate::SharedMemory,
    ) -> Result<Memory, Error> {
        // SAFETY: per the contract; nothing borrows the store while the limiter is asked.
        unsafe { StoreOpaque::admit_memory(raw, shared.ty())? };
        // SAFETY: per the contract; the only reference to the store from here on.
        let store = unsafe { &mut *raw };
        if !store.engine().same(shared.engine()) {
            return Err(Error::Usage(
                "a shared memory of another engine cannot be imported".into(),
            ));
        }
        let memory = LinearMemory::of_shared(shared.clone(), store.engine());
        Ok(Memory(store.push_memory(memory)))
    }

    /// The shared memory this is, if its type is shared: a handle other stores and threads
    /// can hold ([`Memory::from_shared`]).
    pub fn shared(&self, store: impl AsContext) -> Option<crate::SharedMemory> {
        self.get(&store).shared().cloned()
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

    /// The size in pages (of its type's page size: 64 KiB unless it says one byte).
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
        // SAFETY: no wasm can run while `store` is borrowed, and the borrow is exclusive for
        // as long as the slice lives.
        unsafe { self.get(&*store).bytes() }
    }

    /// The memory's bytes and the store's data at once: what a host function needs to read its
    /// arguments out of the guest's memory while it updates its own state.
    pub fn data_and_store_mut<'a, S: AsContextMut + ?Sized>(
        &self,
        store: &'a mut S,
    ) -> (&'a mut [u8], &'a mut S::Data) {
        // SAFETY: no wasm can run while `store` is borrowed exclusively; the bytes are the
        // memory's own mapping, apart from the store's data.
        let bytes: *mut [u8] = unsafe { self.get(&*store).bytes() };
        let data: *mut S::Data = &mut store.as_context_mut().0.data;
        // SAFETY: both live as long as the store, which `store` borrows exclusively for `'a`,
        // and they do not overlap (the mapping is not the store's data), so two exclusive
        // borrows of them for `'a` are sound.
        unsafe { (&mut *bytes, &mut *data) }
    }

    /// As [`Memory::data_and_store_mut`], with the bytes as [`HostBytes`]: what the host
    /// writes through them is marked, so the memory's reset stays the cheap one (see
    /// [`HostBytes`]). What WASI functions use.
    pub fn host_bytes_and_store_mut<'a, S: AsContextMut + ?Sized>(
        &self,
        store: &'a mut S,
    ) -> (HostBytes<'a>, &'a mut S::Data) {
        // SAFETY: no wasm runs while `store` is borrowed exclusively, and the bytes are the
        // memory's own mapping, apart from the store's data.
        let bytes: HostBytes<'_> = unsafe { self.get(&*store).host_bytes() };
        // SAFETY: only the lifetime changes, to the store borrow's `'a`, which the memory
        // outlives; the bytes do not overlap the store's data borrowed below.
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
        // SAFETY: derived from the exclusive borrow above, for this call only; a shared
        // reference, which may be alive while the limiter is asked.
        let memory = unsafe { &*raw }.memory(self.0);
        let may_grow = |delta: u32| {
            let bytes = delta as usize * memory.page_size();
            // SAFETY: `raw` is derived from the exclusive borrow above, and only shared
            // references into the store are alive.
            unsafe {
                StoreOpaque::may_grow_by(
                    raw,
                    Growing::Memory,
                    memory.len(),
                    bytes,
                    memory.max_bytes(),
                )
            }
        };
        u32::try_from(delta)
            .ok()
            .filter(|&d| may_grow(d))
            .and_then(|d| memory.grow(d))
            .map(u64::from)
            .ok_or_else(|| {
                Error::Limit(format!(
                    "cannot grow a memory of {} pages by {delta} pages",
                    memory.pages()
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
        // SAFETY: derived from the exclusive borrow above, for this call only; a shared
        // reference, which ends before the limiter is asked.
        let init = element(unsafe { &*raw }, ty.elem, init)?;
        // SAFETY: `raw` is derived from the exclusive borrow above, and nothing borrows the
        // store while the limiter is asked.
        unsafe { StoreOpaque::admit_table(raw, ty)? };
        let table = TableData::new(ty, init)?;
        // SAFETY: `raw` is derived from the exclusive borrow above; the only reference to the
        // store from here on.
        Ok(Table(unsafe { &mut *raw }.push_table(table)))
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
        // SAFETY: derived from the exclusive borrow above, for this call only; a shared
        // reference, which may be alive while the limiter is asked.
        let store = unsafe { &*raw };
        let table = store.table(self.0);
        let init = element(store, table.ty().elem, init)?;
        let current = table.len() as usize;
        // SAFETY: `raw` is derived from the exclusive borrow above, and only shared references
        // into the store are alive.
        let allowed = unsafe {
            StoreOpaque::may_grow_by(
                raw,
                Growing::Table,
                current,
                delta as usize,
                table.max_len(),
            )
        };
        allowed
            .then(|| table.grow(delta, init))
            .flatten()
            .ok_or_else(|| {
                Error::Limit(format!("cannot grow a table of {} by {delta}", table.len()))
            })
    }
}

/// A table element's raw form, checked against the element type and the store.
fn element(store: &StoreOpaque, elem: ValType, value: Val) -> Result<usize, Error> {
    if !value.fits(store, elem) {
        return Err(Error::Usage(format!(
            "a {:?} cannot go into a table of {elem}",
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
        if !value.fits(ctx.opaque(), ty.ty) {
            return Err(Error::Usage(format!(
                "a {:?} cannot initialise a global of {}",
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
        if !value.fits(ctx.opaque(), ty.ty) {
            return Err(Error::Usage(format!(
                "a {:?} cannot go into a global of {}",
                value.ty(),
                ty.ty
            )));
        }
        let raw = value.to_raw(ctx.opaque())?;
        ctx.opaque().global(self.0).set(raw);
        Ok(())
    }
}
