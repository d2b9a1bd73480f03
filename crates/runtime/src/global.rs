//! Globals: a global's storage is 16 bytes, as generated code reads them through the vmctx
//! (`ephem_module::vmctx`).
//!
//! A global an instance defines lives in a cell after its instance's vmctx (one allocation for
//! all of an instance's globals; see `instance`); one the host makes has a box of its own.
//! Either way its storage lives as long as the store that holds the global, so the pointers
//! vmctxs hold to it never dangle. A fresh instance's globals are its own cells, written from
//! its initialisers: nothing of one instance's globals is visible to the next.

/// A global variable's storage (16 bytes, as generated code reads it): a box of its own for a
/// global the host makes, or a cell of the vmctx of the instance that defines it (one
/// allocation for all of an instance's globals; the instance lives as long as the store that
/// holds both).
pub struct GlobalData {
    value: *mut ephem_module::ValRaw,
    /// Whether `value` is a box this global owns.
    owned: bool,
    pub ty: ephem_module::GlobalType,
}

impl GlobalData {
    pub fn new(ty: ephem_module::GlobalType, value: ephem_module::ValRaw) -> GlobalData {
        GlobalData {
            value: Box::into_raw(Box::new(value)),
            owned: true,
            ty,
        }
    }

    /// A global stored in `cell`, set to `value`.
    ///
    /// # Safety
    /// `cell` is valid for reads and writes, 16-aligned, and outlives every use of the global
    /// (a vmctx cell of an instance of the store the global is added to).
    pub unsafe fn in_vmctx(
        ty: ephem_module::GlobalType,
        cell: *mut ephem_module::ValRaw,
        value: ephem_module::ValRaw,
    ) -> GlobalData {
        // SAFETY: per the contract.
        unsafe { cell.write(value) };
        GlobalData {
            value: cell,
            owned: false,
            ty,
        }
    }

    pub fn vm(&self) -> *mut ephem_module::ValRaw {
        self.value
    }
    pub fn get(&self) -> ephem_module::ValRaw {
        // SAFETY: plain read of the live storage (see the type).
        unsafe { *self.value }
    }
    pub fn set(&self, v: ephem_module::ValRaw) {
        // SAFETY: plain write of the live storage, single-threaded.
        unsafe { *self.value = v }
    }
}

impl Drop for GlobalData {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: made by `Box::into_raw` in `new`, and freed only here.
            drop(unsafe { Box::from_raw(self.value) });
        }
    }
}
