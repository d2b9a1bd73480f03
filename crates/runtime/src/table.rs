//! Tables of references. Elements are raw values as generated code sees them: an externref an
//! opaque non-zero handle (null is 0); a funcref a `*const VmFuncRef` (null is 0), stored
//! tagged (`ephem_module::vmctx`): 0 is an element never written, anything else the pointer
//! with [`VmOffsets::FUNCREF_WRITTEN`] set. A never-written element of a lazy table is made
//! from the table's initial contents ([`LazyInit`]) when first read, of any other table it is
//! null. The methods here take and return untagged values.
//!
//! Element buffers are kept per thread for the next table ([`spare`]), so that a fresh
//! instance's table of thousands of elements costs neither an allocation nor clearing all of
//! them: a table remembers which of 64 chunks of its elements the runtime wrote to
//! ([`Written`]), and generated code's `table.set` (the only other writer) marks
//! [`VmTable::code_wrote`]; a buffer given back is cleared over those chunks, or whole when
//! code wrote to it.
//!
//! Invariants: a kept buffer is all zeros, so nothing of one instance's table is visible to
//! the next table that takes the buffer; the definition generated code reads (elements,
//! length) is republished whenever the buffer moves ([`TableData::grow`]); and in steady state
//! (a buffer kept on this thread, large enough) making a table allocates only its definition.

use std::cell::{Cell, UnsafeCell};
use std::ops::Range;

use ephem_module::{TableType, VmOffsets, VmTable};

/// Most elements a table may grow to (a resource limit).
pub const MAX_ELEMENTS: u32 = ephem_module::MAX_TABLE_ELEMENTS;

pub struct TableData {
    def: Box<UnsafeCell<VmTable>>,
    /// The table's elements, then zeros up to the vector's length, which may be more than the
    /// table's (see [`spare`]).
    elements: UnsafeCell<Vec<usize>>,
    ty: TableType,
    lazy: Cell<Option<LazyInit>>,
    written: Cell<Written>,
}

/// Which elements the runtime wrote to, as 64 chunks of `1 << shift` elements (the last chunk
/// runs to the end): a few scattered writes to a large table, such as lazy elements made on
/// `call_indirect`, then clear a few chunks rather than one range covering them all.
#[derive(Clone, Copy)]
struct Written {
    chunks: u64,
    shift: u32,
}

impl Written {
    /// For a table of `len` elements: chunks as small as make 64 cover it.
    fn new(len: u32) -> Written {
        Written {
            chunks: 0,
            shift: len.div_ceil(64).next_power_of_two().trailing_zeros(),
        }
    }

    fn note(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        let chunk = |i: usize| (i >> self.shift).min(63) as u32;
        let (first, last) = (chunk(range.start), chunk(range.end - 1));
        self.chunks |= (u64::MAX >> (63 - last)) & (u64::MAX << first);
    }

    /// The ranges of `len` elements to clear.
    fn ranges(self, len: usize) -> impl Iterator<Item = Range<usize>> {
        (0..64)
            .filter(move |k| self.chunks & (1 << k) != 0)
            .map(move |k| {
                let end = if k == 63 { len } else { (k + 1) << self.shift };
                (k << self.shift).min(len)..end.min(len)
            })
    }
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
                code_wrote: 0,
            })),
            elements: UnsafeCell::new(spare::take(ty.min as usize)),
            ty,
            lazy: Cell::new(None),
            written: Cell::new(Written::new(ty.min)),
        };
        table.sync(ty.min);
        table.fill_all(init);
        Ok(table)
    }

    /// Sets every element to `init` (a table's initialiser, before anything reads it).
    pub(crate) fn fill_all(&self, init: usize) {
        // Null stays "never written" (0), so that a lazy table's initial contents show through.
        if init != 0 {
            let init = self.tag(init);
            // SAFETY: single-threaded; no other reference to the elements is alive.
            unsafe { self.write(0..self.len() as usize) }.fill(init);
        }
    }

    /// Publishes the (possibly moved) elements and the table's length, `len`.
    fn sync(&self, len: u32) {
        // SAFETY: single-threaded owners; generated code reads the definition only while not
        // growing (growing happens in a builtin called from that same code).
        unsafe {
            let elements = &mut *self.elements.get();
            let def = &mut *self.def.get();
            def.elements = elements.as_mut_ptr();
            def.length = len;
        }
    }

    /// Notes that the runtime wrote the elements in `range` (in bounds).
    fn wrote(&self, range: Range<usize>) {
        let mut w = self.written.get();
        w.note(range);
        self.written.set(w);
    }

    /// The elements in `range` (in bounds), to write: the range is noted (see the module
    /// documentation).
    ///
    /// # Safety
    /// No other reference to the elements may be alive while the slice is.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the documented caller contract.
    pub(crate) unsafe fn write(&self, range: Range<usize>) -> &mut [usize] {
        self.wrote(range.clone());
        // SAFETY: per the contract.
        unsafe { &mut (&mut *self.elements.get())[range] }
    }

    /// The elements in `range` (in bounds), as stored.
    ///
    /// # Safety
    /// No reference to the elements for writing may be alive while the slice is.
    pub(crate) unsafe fn read(&self, range: Range<usize>) -> &[usize] {
        // SAFETY: per the contract.
        unsafe { &(&*self.elements.get())[range] }
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
        let at = self.range(i, 1)?;
        // SAFETY: plain read, single-threaded.
        let raw = unsafe { self.read(at)[0] };
        if raw != 0 || !self.holds_funcrefs() {
            return Some(raw);
        }
        let made = match self.lazy.get() {
            // SAFETY: the owner lives as long as the table (see `LazyInit`).
            Some(lazy) => unsafe { (*lazy.owner).lazy_element(lazy.table, i) },
            None => 0,
        };
        let raw = made | WRITTEN;
        // SAFETY: single-threaded; no reference to the elements is alive (making the element
        // touched only the owner's vmctx).
        unsafe { self.write(i as usize..i as usize + 1)[0] = raw };
        Some(raw)
    }

    /// Sets element `i` to `v`, if in bounds.
    pub fn set(&self, i: u32, v: usize) -> Option<()> {
        let range = self.range(i, 1)?;
        let v = self.tag(v);
        // SAFETY: single-threaded; no other reference to the elements is alive.
        unsafe { self.write(range)[0] = v };
        Some(())
    }

    /// Calls `f` with where each element that names a GC object is (see `gc`), in a table of
    /// a type that may hold them; returns how many elements it looked at.
    pub(crate) fn objects(&self, f: &mut dyn FnMut(*mut u64)) -> u64 {
        if !self.ty.elem.holds_objects() {
            return 0;
        }
        let len = self.len() as usize;
        for i in 0..len {
            // SAFETY: single-threaded; no other reference to the elements is alive, and this
            // one ends before the next is made.
            if ephem_module::gc::is_object(unsafe { self.read(i..i + 1)[0] } as u64) {
                // SAFETY: as above; the element stays where it is while the collector runs.
                f(unsafe { self.write(i..i + 1).as_mut_ptr() }.cast());
            }
        }
        len as u64
    }

    /// Makes the never-written elements come from `lazy` (once, before anything reads them).
    pub(crate) fn set_lazy(&self, lazy: LazyInit) {
        self.lazy.set(Some(lazy));
    }

    fn holds_funcrefs(&self) -> bool {
        self.ty.elem.is_func_ref()
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

    /// The most elements its type allows, if it says.
    pub(crate) fn max_len(&self) -> Option<usize> {
        self.ty.max.map(|m| m as usize)
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
        let elements = unsafe { &mut *self.elements.get() };
        if elements.len() < new as usize {
            elements.resize(new as usize, 0);
        }
        if init != 0 {
            // SAFETY: the reference to the elements above is not used again before `sync`;
            // this is the only one alive.
            unsafe { self.write(old as usize..new as usize) }.fill(init);
        }
        self.sync(new);
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
}

impl Drop for TableData {
    fn drop(&mut self) {
        let elements = std::mem::take(self.elements.get_mut());
        let def = self.def.get_mut();
        let mut written = self.written.get();
        if def.code_wrote != 0 {
            written.chunks = u64::MAX;
        }
        let len = def.length as usize;
        spare::give(elements, |elements| {
            for range in written.ranges(len) {
                elements[range].fill(0);
            }
        });
    }
}

/// Element buffers kept per thread for the next tables (see the module documentation).
///
/// A kept buffer is all zeros up to its length. Taking one for `n` elements keeps that length
/// when it is more (the table's length is its own), so that a buffer taken in turn by a large
/// and a small table is cleared over the large one's length only once.
mod spare {
    use std::cell::RefCell;

    /// Buffers kept per thread: a store holds a few tables at most.
    const KEPT: usize = 4;
    /// Larger buffers are freed rather than kept (1 MiB).
    const MAX_KEPT_ELEMENTS: usize = 1 << 17;

    thread_local! {
        static KEPT_BUFFERS: RefCell<Vec<Vec<usize>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of at least `n` zero elements.
    pub(super) fn take(n: usize) -> Vec<usize> {
        let kept = KEPT_BUFFERS
            .try_with(|kept| {
                let mut kept = kept.borrow_mut();
                // The shortest that needs no clearing, else the one that needs the least.
                let best = (kept.iter().enumerate())
                    .min_by_key(|(_, b)| (n.saturating_sub(b.len()), b.len()))
                    .map(|(i, _)| i)?;
                Some(kept.swap_remove(best))
            })
            .ok()
            .flatten();
        let mut buffer = kept.unwrap_or_default();
        if buffer.len() < n {
            buffer.resize(n, 0);
        }
        buffer
    }

    /// Keeps `buffer` for a later [`take`] once `clear` has zeroed whatever in it may not be.
    pub(super) fn give(mut buffer: Vec<usize>, clear: impl FnOnce(&mut [usize])) {
        if buffer.len() > MAX_KEPT_ELEMENTS || buffer.is_empty() {
            return;
        }
        // During thread exit it is simply freed.
        let _ = KEPT_BUFFERS.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            if kept.len() < KEPT {
                clear(&mut buffer);
                kept.push(buffer);
            } else if let Some(shorter) = kept.iter_mut().find(|b| b.len() < buffer.len()) {
                clear(&mut buffer);
                *shorter = buffer;
            }
        });
    }
}
