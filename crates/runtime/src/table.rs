//! Tables of references. Elements are raw pointers as generated code sees them: a funcref is a
//! `*const VmFuncRef`, an externref an opaque non-zero handle, and null is 0.

use std::cell::UnsafeCell;

use ephem_module::{TableType, VmTable};

use crate::limits::Growing;

/// Most elements a table may grow to (a resource limit).
pub const MAX_ELEMENTS: u32 = 10_000_000;

pub struct TableData {
    def: Box<UnsafeCell<VmTable>>,
    elements: UnsafeCell<Vec<usize>>,
    ty: TableType,
}

impl TableData {
    pub fn new(ty: TableType, init: usize) -> Result<TableData, crate::Error> {
        if ty.min > MAX_ELEMENTS {
            return Err(crate::Error::Limit(format!(
                "table of {} elements exceeds the limit",
                ty.min
            )));
        }
        let table = TableData {
            def: Box::new(UnsafeCell::new(VmTable {
                elements: std::ptr::null_mut(),
                length: 0,
            })),
            elements: UnsafeCell::new(vec![init; ty.min as usize]),
            ty,
        };
        table.sync();
        Ok(table)
    }

    fn sync(&self) {
        // SAFETY: single-threaded owners; generated code reads the definition only while not
        // growing (growing happens in a builtin called from that same code).
        unsafe {
            let elements = &mut *self.elements.get();
            *self.def.get() = VmTable {
                elements: elements.as_mut_ptr(),
                length: elements.len() as u32,
            };
        }
    }

    pub fn ty(&self) -> TableType {
        TableType {
            min: self.len(),
            ..self.ty
        }
    }

    pub fn vm(&self) -> *mut VmTable {
        self.def.get()
    }

    pub fn len(&self) -> u32 {
        // SAFETY: plain read.
        unsafe { (*self.def.get()).length }
    }

    pub fn get(&self, i: u32) -> Option<usize> {
        // SAFETY: plain read, single-threaded.
        unsafe { (&*self.elements.get()).get(i as usize).copied() }
    }

    pub fn set(&self, i: u32, v: usize) -> Option<()> {
        // SAFETY: plain write, single-threaded.
        unsafe { *(&mut *self.elements.get()).get_mut(i as usize)? = v };
        Some(())
    }

    /// Whether the store's limiter lets this table grow by `delta` elements.
    ///
    /// # Safety
    /// As for [`crate::store::StoreOpaque::ask`].
    pub(crate) unsafe fn may_grow(
        &self,
        store: &crate::store::StoreOpaque,
        raw: *mut crate::store::StoreOpaque,
        delta: u32,
    ) -> bool {
        let current = self.len() as usize;
        let max = self.ty.max.map(|m| m as usize);
        let desired = current + delta as usize;
        // SAFETY: per the contract.
        delta == 0 || unsafe { store.may_grow(raw, Growing::Table, current, desired, max) }
    }

    /// Grows by `delta` elements set to `init`; returns the old length, or `None`.
    pub fn grow(&self, delta: u32, init: usize) -> Option<u32> {
        let old = self.len();
        let new = old.checked_add(delta)?;
        if new > self.ty.max.unwrap_or(u32::MAX).min(MAX_ELEMENTS) {
            return None;
        }
        // SAFETY: single-threaded; `sync` republishes the (possibly moved) elements.
        unsafe { (&mut *self.elements.get()).resize(new as usize, init) };
        self.sync();
        Some(old)
    }

    /// Elements `[start, start + len)`, if in bounds.
    pub fn range(&self, start: u32, len: u32) -> Option<std::ops::Range<usize>> {
        let end = start.checked_add(len)?;
        (end <= self.len()).then_some(start as usize..end as usize)
    }

    /// # Safety
    /// No other reference to the elements may be alive.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the documented caller contract.
    pub unsafe fn elements(&self) -> &mut [usize] {
        // SAFETY: per the contract.
        unsafe { &mut *self.elements.get() }
    }
}

/// A global variable's storage (16 bytes, as generated code reads it).
pub struct GlobalData {
    value: Box<UnsafeCell<ephem_module::ValRaw>>,
    pub ty: ephem_module::GlobalType,
}

impl GlobalData {
    pub fn new(ty: ephem_module::GlobalType, value: ephem_module::ValRaw) -> GlobalData {
        GlobalData {
            value: Box::new(UnsafeCell::new(value)),
            ty,
        }
    }
    pub fn vm(&self) -> *mut ephem_module::ValRaw {
        self.value.get()
    }
    pub fn get(&self) -> ephem_module::ValRaw {
        // SAFETY: plain read.
        unsafe { *self.value.get() }
    }
    pub fn set(&self, v: ephem_module::ValRaw) {
        // SAFETY: plain write, single-threaded.
        unsafe { *self.value.get() = v }
    }
}
