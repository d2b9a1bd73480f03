//! Tables of references. Elements are raw values as generated code sees them: an externref an
//! opaque non-zero handle (null is 0); a funcref a `*const VmFuncRef` (null is 0), stored
//! tagged (`ephem_module::vmctx`): 0 is an element never written, anything else the pointer
//! with [`VmOffsets::FUNCREF_WRITTEN`] set. A never-written element of a lazy table is made
//! from the table's initial contents ([`LazyInit`]) when first read, of any other table it is
//! null. The methods here take and return untagged values.

use std::cell::{Cell, UnsafeCell};

use ephem_module::{TableType, ValType, VmOffsets, VmTable};

use crate::limits::Growing;

/// Most elements a table may grow to (a resource limit).
pub const MAX_ELEMENTS: u32 = 10_000_000;

pub struct TableData {
    def: Box<UnsafeCell<VmTable>>,
    elements: UnsafeCell<Vec<usize>>,
    ty: TableType,
    lazy: Cell<Option<LazyInit>>,
}

const WRITTEN: usize = VmOffsets::FUNCREF_WRITTEN as usize;

/// Where a lazy table's never-written elements come from: the instance that defined it (see
/// [`crate::instance::InstanceData::lazy_element`]).
#[derive(Clone, Copy)]
pub(crate) struct LazyInit {
    /// Valid as long as the table: the store frees its instances and tables together.
    pub owner: *const crate::instance::InstanceData,
    pub table: u32,
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
            elements: UnsafeCell::new(Vec::new()),
            ty,
            lazy: Cell::new(None),
        };
        // Null stays "never written" (0), so that a lazy table's initial contents show through.
        let init = if init == 0 { 0 } else { table.tag(init) };
        // SAFETY: the table was just made; nothing else refers to its elements.
        unsafe { *table.elements.get() = vec![init; ty.min as usize] };
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

    /// Element `i`, if in bounds.
    pub fn get(&self, i: u32) -> Option<usize> {
        self.raw(i).map(|raw| self.untag(raw))
    }

    /// Element `i` as stored, made first if it was never written (so never 0 for a funcref
    /// table), if in bounds.
    pub fn raw(&self, i: u32) -> Option<usize> {
        // SAFETY: plain read, single-threaded.
        let raw = unsafe { *(&*self.elements.get()).get(i as usize)? };
        if raw != 0 || !self.holds_funcrefs() {
            return Some(raw);
        }
        let made = match self.lazy.get() {
            // SAFETY: the owner lives as long as the table (see `LazyInit`).
            Some(lazy) => unsafe { (*lazy.owner).lazy_element(lazy.table, i) },
            None => 0,
        };
        let raw = made | WRITTEN;
        // SAFETY: plain write, single-threaded; no reference to the elements is alive (making
        // the element touched only the owner's vmctx).
        unsafe { (&mut *self.elements.get())[i as usize] = raw };
        Some(raw)
    }

    /// Sets element `i` to `v`, if in bounds.
    pub fn set(&self, i: u32, v: usize) -> Option<()> {
        let v = self.tag(v);
        // SAFETY: plain write, single-threaded.
        unsafe { *(&mut *self.elements.get()).get_mut(i as usize)? = v };
        Some(())
    }

    /// Makes the never-written elements come from `lazy` (once, before anything reads them).
    pub(crate) fn set_lazy(&self, lazy: LazyInit) {
        self.lazy.set(Some(lazy));
    }

    fn holds_funcrefs(&self) -> bool {
        self.ty.elem == ValType::FuncRef
    }

    /// `v` as stored.
    pub(crate) fn tag(&self, v: usize) -> usize {
        if self.holds_funcrefs() {
            v | WRITTEN
        } else {
            v
        }
    }

    fn untag(&self, raw: usize) -> usize {
        if self.holds_funcrefs() {
            raw & !WRITTEN
        } else {
            raw
        }
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
        let init = self.tag(init);
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

    /// Makes every never-written element in `range` (in bounds), so that its stored values can
    /// be copied elsewhere.
    pub fn make_all(&self, range: std::ops::Range<usize>) {
        for i in range {
            self.raw(i as u32);
        }
    }

    /// The elements as stored (see the module documentation).
    ///
    /// # Safety
    /// No other reference to the elements may be alive.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the documented caller contract.
    pub unsafe fn elements(&self) -> &mut [usize] {
        // SAFETY: per the contract.
        unsafe { &mut *self.elements.get() }
    }
}

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
