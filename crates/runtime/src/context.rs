//! How the embedding API reaches a store: [`AsContext`] and [`AsContextMut`], implemented by
//! `Store<T>`, [`StoreContext`], [`StoreContextMut`], [`Caller`](crate::Caller) and references
//! to them, so that every accessor takes `impl AsContext` and works with each (wasmtime's
//! scheme).
//!
//! Code that runs wasm or asks the store's limiter needs more than a reference to the store's
//! opaque part: host functions cast the store pointer back to the whole `StoreInner<T>` to
//! reach the embedder's data. [`raw_store`] derives that pointer, with provenance over the
//! whole store, from an exclusive borrow of it; what takes one says so in its contract.

use crate::Engine;
use crate::store::{Store, StoreInner, StoreOpaque};

/// Read access to a store: what `&Store<T>`, a [`Caller`](crate::Caller) and the context types
/// give. Accessors take `impl AsContext` so that they work with each.
pub trait AsContext {
    /// The embedder's data type of the store.
    type Data;
    /// The store, to read.
    fn as_context(&self) -> StoreContext<'_, Self::Data>;
}

/// Write access to a store (see [`AsContext`]).
pub trait AsContextMut: AsContext {
    /// The store, to change or to run wasm in.
    fn as_context_mut(&mut self) -> StoreContextMut<'_, Self::Data>;
}

/// A borrowed store, to read.
pub struct StoreContext<'a, T>(pub(crate) &'a StoreInner<T>);

/// A borrowed store, to change or to run wasm in.
pub struct StoreContextMut<'a, T>(pub(crate) &'a mut StoreInner<T>);

impl<'a, T> StoreContext<'a, T> {
    /// The embedder's data.
    pub fn data(&self) -> &'a T {
        &self.0.data
    }
    /// The engine the store belongs to.
    pub fn engine(&self) -> &'a Engine {
        &self.0.opaque.engine
    }
}

impl<T> StoreContextMut<'_, T> {
    /// See [`Store::set_fuel`].
    pub fn set_fuel(&mut self, fuel: u64) -> Result<(), crate::Error> {
        self.0.opaque.set_fuel(fuel);
        Ok(())
    }

    /// See [`Store::get_fuel`].
    pub fn get_fuel(&self) -> Result<u64, crate::Error> {
        self.0.opaque.get_fuel()
    }

    /// Takes `fuel` from the store, for work a host function does on the guest's behalf; if
    /// there is not that much, takes all of it and fails with an `OutOfFuel` trap (which a host
    /// function returns to stop its caller).
    pub fn consume_fuel(&mut self, fuel: u64) -> Result<(), crate::Error> {
        self.0.opaque.consume_fuel(fuel)
    }

    /// See [`Store::set_epoch_deadline`].
    pub fn set_epoch_deadline(&mut self, ticks: u64) {
        self.0.opaque.set_epoch_deadline(ticks);
    }

    /// The embedder's data.
    pub fn data(&self) -> &T {
        &self.0.data
    }
    /// The embedder's data, mutably.
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.0.data
    }
    /// The engine the store belongs to.
    pub fn engine(&self) -> &Engine {
        &self.0.opaque.engine
    }
}

impl<T> AsContext for Store<T> {
    type Data = T;
    fn as_context(&self) -> StoreContext<'_, T> {
        StoreContext(&self.inner)
    }
}

impl<T> AsContextMut for Store<T> {
    fn as_context_mut(&mut self) -> StoreContextMut<'_, T> {
        StoreContextMut(&mut self.inner)
    }
}

impl<T> AsContext for StoreContext<'_, T> {
    type Data = T;
    fn as_context(&self) -> StoreContext<'_, T> {
        StoreContext(self.0)
    }
}

impl<T> AsContext for StoreContextMut<'_, T> {
    type Data = T;
    fn as_context(&self) -> StoreContext<'_, T> {
        StoreContext(self.0)
    }
}

impl<T> AsContextMut for StoreContextMut<'_, T> {
    fn as_context_mut(&mut self) -> StoreContextMut<'_, T> {
        StoreContextMut(self.0)
    }
}

impl<S: AsContext + ?Sized> AsContext for &S {
    type Data = S::Data;
    fn as_context(&self) -> StoreContext<'_, S::Data> {
        (**self).as_context()
    }
}

impl<S: AsContext + ?Sized> AsContext for &mut S {
    type Data = S::Data;
    fn as_context(&self) -> StoreContext<'_, S::Data> {
        (**self).as_context()
    }
}

impl<S: AsContextMut + ?Sized> AsContextMut for &mut S {
    fn as_context_mut(&mut self) -> StoreContextMut<'_, S::Data> {
        (**self).as_context_mut()
    }
}

impl<T> StoreContext<'_, T> {
    pub(crate) fn opaque(&self) -> &StoreOpaque {
        &self.0.opaque
    }
}

impl<T> StoreContextMut<'_, T> {
    pub(crate) fn opaque(&mut self) -> &mut StoreOpaque {
        &mut self.0.opaque
    }
}

/// The raw pointer to a store's opaque part, derived from an exclusive borrow of all of it
/// (host functions called while wasm runs cast it back to the whole `StoreInner<T>`).
pub(crate) fn raw_store<S: AsContextMut + ?Sized>(store: &mut S) -> *mut StoreOpaque {
    store.as_context_mut().0 as *mut StoreInner<S::Data> as *mut StoreOpaque
}
