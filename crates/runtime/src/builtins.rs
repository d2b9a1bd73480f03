//! The builtins: runtime functions that generated code calls through the table every vmctx
//! points at ([`BUILTINS`], at `VmOffsets::BUILTINS`), for what it does not do inline: growing,
//! bulk memory and table operations, dropping segments, making lazy table elements and
//! funcrefs, and raising a trap without a signal.
//!
//! # Calling convention
//! The one list is `ephem_module::for_each_builtin`: each builtin is an `extern "C"` function
//! that takes the calling instance's vmctx first, then wasm `i32`s as `u32` and `i64`s as
//! `u64`, and returns what the list says. A *trap flag* is 0 when the operation succeeded, 1
//! when it was out of bounds (generated code then traps with the kind its operation names), 2
//! when metered code's store cannot pay the operation's fuel, and 3 when the call is past its
//! deadline (a signal cannot stop host code: see `interrupt`). The table below is built from
//! the same list, so a function whose signature disagrees with its entry does not compile.
//! `Raise` is `arch::ephem_raise`, which never returns (see `signals::raise_trap`); nor do
//! `Throw` and `ThrowRef`, `arch::ephem_throw` and `arch::ephem_throw_ref` (see `exceptions`).
//!
//! # Contract
//! Generated code calls a builtin only through the table of its own vmctx, passing that vmctx,
//! while the store that owns the instance runs the call. The instance and its store are then
//! alive for the whole builtin, and the embedder's borrow of the store is suspended while wasm
//! runs, so a builtin may hold shared references to both. [`builtin!`] turns the vmctx into
//! them once, with that argument as its one `SAFETY` comment; what a builtin changes, it
//! changes through cells (dropped segments, fuel, memories' and tables' own interior
//! mutability), never through those references.
//!
//! No builtin makes a system call in steady state: growing within a loose memory's slot
//! changes its length (see `memory`), and only growth past the slot's accessible pages, or a
//! table's past its buffer, reaches the kernel or the allocator.

use ephem_module::{Builtin, StorageType};

use crate::gc::Shape;
use crate::instance::{InstanceData, end_within};
use crate::limits::Growing;
use crate::store::StoreOpaque;

/// The builtin table every vmctx points at, in `Builtin` order.
pub(crate) struct Builtins(pub(crate) [*const (); Builtin::COUNT]);
// SAFETY: the table holds function addresses only, never written after it is built.
unsafe impl Sync for Builtins {}

/// `i32` parameters and results of builtins are `u32` here, `i64` ones `u64`.
macro_rules! builtin_rust_type {
    (i32) => {
        u32
    };
    (i64) => {
        u64
    };
}

/// The table, from the one list (`ephem_module::for_each_builtin`): each entry is the function
/// of the same name below, cast to the signature the list gives, so a function that disagrees
/// with its entry does not compile.
macro_rules! builtin_table {
    ($( $(#[$doc:meta])* $variant:ident $name:ident ( $($arg:ident : $ty:ident),* ) $(-> $ret:ident)? ; )*) => {
        pub(crate) static BUILTINS: Builtins = Builtins([
            $( $name as unsafe extern "C" fn(*mut u8 $(, builtin_rust_type!($ty))*) $(-> builtin_rust_type!($ret))? as *const (), )*
        ]);
    };
}

use crate::arch::ephem_raise as raise;
use crate::arch::ephem_throw as throw;
use crate::arch::ephem_throw_ref as throw_ref;
use crate::arch::{
    ephem_array_new as array_new, ephem_array_new_data as array_new_data,
    ephem_array_new_elem as array_new_elem, ephem_gc_alloc as gc_alloc,
};

ephem_module::for_each_builtin!(builtin_table);

/// The store of the call into wasm running on this thread: the one whose code calls a builtin.
/// Taken from the call (see `signals::current_store`), not from the pointer the instance
/// saved when it was made, so that references made from it come from the embedder's borrow of
/// this call.
fn running_store() -> *mut StoreOpaque {
    crate::signals::current_store().cast()
}

/// Defines a builtin: `unsafe extern "C" fn $name(vmctx: *mut u8, $args) -> $ret`, whose body
/// runs with `$i`, the calling instance, and `$store`, its store (see "Contract" in the module
/// documentation).
macro_rules! builtin {
    ($(#[$doc:meta])* fn $name:ident[$i:ident, $store:pat]($($arg:ident : $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        pub(crate) unsafe extern "C" fn $name(vmctx: *mut u8 $(, $arg: $ty)*) $(-> $ret)? {
            // SAFETY: generated code calls builtins only through its own vmctx's table, with
            // that vmctx, while the instance's store runs the call: the instance is alive for
            // this call, and the store is the running call's, whose pointer `invoke` derived
            // from the embedder's exclusive borrow, suspended while wasm runs (see "Contract"
            // in the module documentation).
            let ($i, $store): (&InstanceData, &StoreOpaque) = unsafe {
                let i = InstanceData::from_vmctx(vmctx);
                (i, &*running_store())
            };
            $body
        }
    };
}

builtin! {
    /// `memory.grow`: the old size in pages, or -1 when the memory's maximum or the store's
    /// limiter refuses.
    fn memory_grow[i, store](mem: u32, delta: u64) -> u64 {
        let memory = i.memory(store, mem);
        // (No memory grows by 2^32 pages: the most it can hold is 64 GiB.)
        let Ok(delta) = u32::try_from(delta) else {
            return u64::MAX;
        };
        let (current, bytes) = (memory.len(), delta as usize * memory.page_size());
        // SAFETY: the running call's store pointer was derived as `raw_store` derives it, and
        // while wasm runs nothing but shared references to the store's opaque part is alive.
        let allowed = unsafe {
            let store = running_store();
            StoreOpaque::may_grow_by(store, Growing::Memory, current, bytes, memory.max_bytes())
        };
        if !allowed {
            return u64::MAX;
        }
        memory.grow(delta).map_or(u64::MAX, u64::from)
    }
}

/// The native address of an atomic access of `size` bytes at `addr` of `memory`, if within
/// it (generated code checked bounds and alignment already, unless it was forged).
fn atomic_at(memory: &crate::memory::LinearMemory, addr: u64, size: u64) -> Option<usize> {
    let end = end_within(addr, size, memory.len())?;
    let at = memory.base() as usize + end - size as usize;
    at.is_multiple_of(size as usize).then_some(at)
}

/// `memory.atomic.wait32`/`wait64`: see `Builtin::AtomicWait32` for the results.
fn atomic_wait(
    i: &InstanceData,
    store: &StoreOpaque,
    mem: u32,
    addr: u64,
    expected: crate::memory::wait::Expected,
    timeout: u64,
) -> u32 {
    use crate::memory::wait::{Woke, wait};
    let memory = i.memory(store, mem);
    let Some(at) = atomic_at(memory, addr, expected.size()) else {
        return 5;
    };
    if memory.shared().is_none() {
        // Nothing could ever wake it (wasmtime traps so too, whatever the value).
        return 4;
    }
    if crate::signals::interrupt_due() {
        return 3;
    }
    // A negative timeout waits without end.
    let timeout = i64::try_from(timeout)
        .ok()
        .map(|ns| std::time::Duration::from_nanos(ns as u64));
    let due = crate::signals::interrupt_due;
    let stop: Option<&dyn Fn() -> bool> = store.has_deadline().then_some(&due);
    match wait(at, expected, timeout, stop) {
        Woke::Notified => 0,
        Woke::NotEqual => 1,
        Woke::TimedOut => 2,
        Woke::Stopped => 3,
    }
}

builtin! {
    /// `memory.atomic.wait32`.
    fn atomic_wait32[i, store](mem: u32, addr: u64, expected: u32, timeout: u64) -> u32 {
        let expected = crate::memory::wait::Expected::U32(expected);
        atomic_wait(i, store, mem, addr, expected, timeout)
    }
}

builtin! {
    /// `memory.atomic.wait64`.
    fn atomic_wait64[i, store](mem: u32, addr: u64, expected: u64, timeout: u64) -> u32 {
        let expected = crate::memory::wait::Expected::U64(expected);
        atomic_wait(i, store, mem, addr, expected, timeout)
    }
}

builtin! {
    /// `memory.atomic.notify`: the waiters woken, or -1 out of bounds.
    fn atomic_notify[i, store](mem: u32, addr: u64, count: u32) -> u64 {
        let memory = i.memory(store, mem);
        let Some(at) = atomic_at(memory, addr, 4) else {
            return u64::MAX;
        };
        // Nobody waits on a memory that is not shared.
        match memory.shared() {
            Some(_) => u64::from(crate::memory::wait::notify(at, count)),
            None => 0,
        }
    }
}

builtin! {
    /// `memory.fill`: a trap flag.
    fn memory_fill[i, store](mem: u32, dst: u64, val: u32, len: u64) -> u32 {
        if let Some(stop) = i.begin_bulk(store, len) {
            return stop;
        }
        let memory = i.memory(store, mem);
        match end_within(dst, len, memory.len()) {
            Some(end) => {
                // SAFETY: the range was checked against the memory's length; the wasm code
                // that runs on the memory is suspended in this call.
                unsafe {
                    memory
                        .to_write(dst as usize, end - dst as usize)
                        .fill(val as u8)
                };
                0
            }
            None => 1,
        }
    }
}

builtin! {
    /// `memory.copy`: a trap flag.
    fn memory_copy[i, store](dst_mem: u32, src_mem: u32, dst: u64, src: u64, len: u64) -> u32 {
        if let Some(stop) = i.begin_bulk(store, len) {
            return stop;
        }
        let (d, s) = (i.memory(store, dst_mem), i.memory(store, src_mem));
        if end_within(dst, len, d.len()).is_none() || end_within(src, len, s.len()).is_none() {
            return 1;
        }
        d.mark(dst as usize, len as usize);
        // SAFETY: both ranges were checked against their memories' lengths, and `copy` allows
        // them to overlap (one memory); the wasm code is suspended in this call.
        unsafe {
            std::ptr::copy(
                s.base().add(src as usize),
                d.base().add(dst as usize),
                len as usize,
            )
        };
        0
    }
}

builtin! {
    /// `memory.init`: a trap flag.
    fn memory_init[i, store](mem: u32, data: u32, dst: u64, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        u32::from(!i.memory_init(store, mem, data, dst, src, len))
    }
}

builtin! {
    /// The write marks of a loop's stores, set before the loop runs (see `MarkLoop`).
    fn mark_loop[i, store](mem: u32, first: u64, last: u64, step: u64, ok: u32) {
        let memory = i.memory(store, mem);
        if ok == 0 {
            memory.writes_unmarked();
            return;
        }
        // Past its length the loop's stores trap (nothing in the loop grows the memory).
        let end = last.saturating_add(1).min(memory.len() as u64);
        if step <= 4096 {
            if first < end {
                memory.mark(first as usize, (end - first) as usize);
            }
            return;
        }
        // A step longer than a page: the pages of each address the stores reach, no more.
        let mut at = first;
        while at < end {
            memory.mark(at as usize, 1);
            at = at.saturating_add(step);
        }
    }
}

builtin! {
    /// `data.drop`.
    fn data_drop[i, _](data: u32) {
        // A segment the artifact does not keep was applied by its image and is dropped already.
        if let Some(k) = i.module.inner.artifact.data_slot(data) {
            i.dropped_datas.borrow_mut()[k] = true;
        }
    }
}

builtin! {
    /// `table.grow`: the old size, or -1 when the table's maximum or the store's limiter
    /// refuses.
    fn table_grow[i, store](table: u32, delta: u32, init: u64) -> u32 {
        let t = i.table(store, table);
        let current = t.len() as usize;
        // SAFETY: the running call's store pointer was derived as `raw_store` derives it, and
        // while wasm runs nothing but shared references to the store's opaque part is alive.
        let allowed = unsafe {
            let store = running_store();
            StoreOpaque::may_grow_by(store, Growing::Table, current, delta as usize, t.max_len())
        };
        if !allowed {
            return u32::MAX;
        }
        t.grow(delta, init as usize).unwrap_or(u32::MAX)
    }
}

builtin! {
    /// `table.fill`: a trap flag.
    fn table_fill[i, store](table: u32, dst: u32, val: u64, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        let t = i.table(store, table);
        match t.range(dst, len) {
            Some(r) => {
                // SAFETY: no other reference to the table's elements is alive during a builtin
                // (generated code is suspended in it).
                unsafe { t.write(r).fill(t.tag(val as usize)) };
                0
            }
            None => 1,
        }
    }
}

builtin! {
    /// `table.copy`: a trap flag.
    fn table_copy[i, store](dst_t: u32, src_t: u32, dst: u32, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        let (d, s) = (i.table(store, dst_t), i.table(store, src_t));
        let (Some(dr), Some(sr)) = (d.range(dst, len), s.range(src, len)) else {
            return 1;
        };
        // Elements never written are made first: copied as they are stored, they would be made
        // from the destination's initial contents instead.
        s.make_all(sr.clone());
        if std::ptr::eq(d, s) {
            let lo = sr.start.min(dr.start);
            let hi = sr.end.max(dr.end);
            // SAFETY: one table, written through this one slice only; generated code is
            // suspended in this call.
            unsafe {
                d.write(lo..hi)
                    .copy_within(sr.start - lo..sr.end - lo, dr.start - lo)
            };
        } else {
            // SAFETY: the source's elements are read and copied out before anything writes a
            // table; generated code is suspended in this call.
            let src_items = unsafe { s.read(sr).to_vec() };
            // SAFETY: the only reference to the destination's elements (the copy above is
            // owned); generated code is suspended in this call.
            unsafe { d.write(dr).copy_from_slice(&src_items) };
        }
        0
    }
}

builtin! {
    /// `table.init`: a trap flag.
    fn table_init[i, store](table: u32, elem: u32, dst: u32, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        u32::from(!i.table_init(store, table, elem, dst, src, len))
    }
}

builtin! {
    /// `elem.drop`.
    fn elem_drop[i, _](elem: u32) {
        i.dropped_elems.borrow_mut()[elem as usize] = true;
    }
}

builtin! {
    /// A lazy table's element that was never written, made from the table's initial contents
    /// (generated code checked the index against the table's length).
    fn table_lazy[i, store](table: u32, index: u32) -> u64 {
        let raw = i.table(store, table).raw(index);
        raw.expect("generated code checked the bounds") as u64
    }
}

builtin! {
    /// `ref.func` of a lazy function: its funcref, written into its slot first.
    fn ref_func[i, _](func: u32) -> u64 {
        // The compiler asks only for lazy functions; anything else gets null, never a stray slot.
        match i.lazy_slots().binary_search_by_key(&func, |e| e[0]) {
            Ok(k) => i.slot_funcref(i.module.inner.artifact.first_lazy_slot() + k as u32) as u64,
            Err(_) => 0,
        }
    }
}

/// The shape of the calling module's struct or array type `ty`.
fn shape(i: &InstanceData, ty: u32) -> Option<Shape> {
    i.module.inner.gc_shape(ty)
}

/// A new object of the calling module's type `ty` (`len` elements for an array) in the
/// running store's heap: its reference, or GC flag 4. The heap is collected first if the
/// object does not fit (see `gc`): `fp` is the frame pointer of the stub through which
/// generated code called the builtin (`arch::ephem_gc_alloc` and its siblings), and `extra`
/// the references the builtin holds, updated if their objects move.
fn alloc(
    i: &InstanceData,
    store: &StoreOpaque,
    ty: u32,
    len: u32,
    fp: usize,
    extra: &mut [u64],
) -> u64 {
    let Some(shape) = shape(i, ty) else {
        return 4;
    };
    let may_grow = |current, delta| {
        // SAFETY: the running call's store pointer was derived as `raw_store` derives it, and
        // while wasm runs nothing but shared references to the store's opaque part is alive.
        unsafe { StoreOpaque::may_grow_by(running_store(), Growing::Memory, current, delta, None) }
    };
    let roots = |f: &mut dyn FnMut(*mut u64)| {
        // SAFETY: `fp` is the stub's (the contract of the builtins that pass it), and the
        // places stay valid while the collection runs: wasm is suspended here.
        unsafe { crate::gc::roots(store, Some(fp), extra, f) }
    };
    let before = store.gc.collections();
    let Some(r) = (store.gc).alloc_collecting(&store.engine, shape, len, may_grow, roots) else {
        return 4;
    };
    // A collection costs a unit of fuel per word it copied and per place it looked at, and
    // ends a call past its deadline (a signal does nothing while it runs).
    if store.gc.collections() != before
        && let Some(stop) = i.begin_bulk(store, store.gc.last_work())
    {
        return u64::from(stop);
    }
    u64::from(r)
}

/// Bytes of an element of array type `ty`.
fn elem_size(i: &InstanceData, ty: u32) -> u32 {
    match shape(i, ty) {
        Some(Shape::Array { elem, .. }) => ephem_module::gc::storage_size(elem),
        _ => 1,
    }
}

builtin! {
    /// `struct.new`, `struct.new_default`, `array.new_default`, `array.new_fixed`: the new
    /// object, zero past its header, or GC flag 4. Called through `arch::ephem_gc_alloc`,
    /// which passes its frame pointer (as do the other builtins that allocate).
    fn gc_alloc_from[i, store](ty: u32, len: u32, _c: u64, _d: u64, fp: usize) -> u64 {
        alloc(i, store, ty, len, fp, &mut [])
    }
}

builtin! {
    /// The slow path of a cast to, or an indirect call of, a type that is not final.
    fn is_subtype[_i, store](actual: u32, expected: u32) -> u32 {
        u32::from(store.engine.is_subtype(actual, expected))
    }
}

builtin! {
    /// `array.new`: a new array of `len` elements of one value, or a GC flag.
    fn array_new_from[i, store](ty: u32, len: u32, lo: u64, hi: u64, fp: usize) -> u64 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return u64::from(stop);
        }
        // The value, when it is a reference, moves with its object.
        let mut lo = [lo];
        let held = match shape(i, ty) {
            Some(Shape::Array { elem: StorageType::Val(t), .. }) if t.holds_objects() => &mut lo[..],
            _ => &mut [],
        };
        let r = alloc(i, store, ty, len, fp, held);
        let lo = lo[0];
        if r < u64::from(ephem_module::gc::ALIGN) {
            return r;
        }
        let size = elem_size(i, ty);
        if let Some((at, bytes)) = store.gc.elements(r, 0, len, size) {
            // SAFETY: the one slice of the heap alive; generated code is suspended here.
            if let Some(out) = unsafe { store.gc.bytes(at, bytes) } {
                crate::gc::fill(out, size, lo, hi);
            }
        }
        r
    }
}

builtin! {
    /// `array.new_data`: a new array of `len` elements read from data segment `data` at byte
    /// `src`, or a GC flag.
    fn array_new_data_from[i, store](ty: u32, data: u32, src: u32, len: u32, fp: usize) -> u64 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return u64::from(stop);
        }
        let size = elem_size(i, ty);
        let bytes = i.data_bytes(data);
        let Some(end) = end_within(src.into(), u64::from(len) * u64::from(size), bytes.len())
        else {
            return 5;
        };
        let r = alloc(i, store, ty, len, fp, &mut []);
        if r < u64::from(ephem_module::gc::ALIGN) {
            return r;
        }
        if let Some((at, n)) = store.gc.elements(r, 0, len, size) {
            // SAFETY: the one slice of the heap alive; generated code is suspended here.
            if let Some(out) = unsafe { store.gc.bytes(at, n) } {
                out.copy_from_slice(&bytes[src as usize..end]);
            }
        }
        r
    }
}

builtin! {
    /// `array.new_elem`: a new array of element segment `elem`'s items `src..src + len`, or a
    /// GC flag.
    fn array_new_elem_from[i, store](ty: u32, elem: u32, src: u32, len: u32, fp: usize) -> u64 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return u64::from(stop);
        }
        if i.elem_values(store, elem, src, len).is_none() {
            return 5;
        }
        // (The items are read after the allocation, which may move the objects they name.)
        let r = alloc(i, store, ty, len, fp, &mut []);
        if r < u64::from(ephem_module::gc::ALIGN) {
            return r;
        }
        write_elems(i, store, elem, src, len, r, 0);
        r
    }
}

/// Writes element segment `elem`'s items `src..src + len` into array `r` from `dst` (both
/// ranges checked by the caller).
fn write_elems(
    i: &InstanceData,
    store: &StoreOpaque,
    elem: u32,
    src: u32,
    len: u32,
    r: u64,
    dst: u32,
) {
    let (Some(values), Some((at, n))) = (
        i.elem_values(store, elem, src, len),
        store.gc.elements(r, dst, len, 8),
    ) else {
        return;
    };
    // SAFETY: the one slice of the heap alive (`values` reads globals and the vmctx); generated
    // code is suspended here.
    if let Some(out) = unsafe { store.gc.bytes(at, n) } {
        for (element, v) in out.chunks_exact_mut(8).zip(values) {
            element.copy_from_slice(&(v as u64).to_le_bytes());
        }
    }
}

builtin! {
    /// `array.fill`: a GC flag.
    fn array_fill[i, store](ty: u32, array: u64, dst: u32, lo: u64, hi: u64, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        let size = elem_size(i, ty);
        let Some((at, n)) = store.gc.elements(array, dst, len, size) else {
            return 1;
        };
        // SAFETY: the one slice of the heap alive; generated code is suspended here.
        if let Some(out) = unsafe { store.gc.bytes(at, n) } {
            crate::gc::fill(out, size, lo, hi);
        }
        0
    }
}

builtin! {
    /// `array.copy`: a GC flag. The arrays may be one (the ranges may overlap).
    fn array_copy[i, store](ty: u32, dst_array: u64, dst: u32, src_array: u64, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        let size = elem_size(i, ty);
        let (Some((to, n)), Some((from, _))) = (
            store.gc.elements(dst_array, dst, len, size),
            store.gc.elements(src_array, src, len, size),
        ) else {
            return 1;
        };
        let start = to.min(from);
        let span = to.max(from) - start + n;
        // SAFETY: the one slice of the heap alive, covering both ranges; generated code is
        // suspended here.
        if let Some(out) = unsafe { store.gc.bytes(start, span) } {
            let (to, from) = ((to - start) as usize, (from - start) as usize);
            out.copy_within(from..from + n as usize, to);
        }
        0
    }
}

builtin! {
    /// `array.init_data`: a GC flag.
    fn array_init_data[i, store](ty: u32, array: u64, dst: u32, data: u32, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        let size = elem_size(i, ty);
        let Some((at, n)) = store.gc.elements(array, dst, len, size) else {
            return 1;
        };
        let bytes = i.data_bytes(data);
        let Some(end) = end_within(src.into(), n, bytes.len()) else {
            return 5;
        };
        // SAFETY: the one slice of the heap alive; generated code is suspended here.
        if let Some(out) = unsafe { store.gc.bytes(at, n) } {
            out.copy_from_slice(&bytes[src as usize..end]);
        }
        0
    }
}

builtin! {
    /// `array.init_elem`: a GC flag.
    fn array_init_elem[i, store](_ty: u32, array: u64, dst: u32, elem: u32, src: u32, len: u32) -> u32 {
        if let Some(stop) = i.begin_bulk(store, u64::from(len)) {
            return stop;
        }
        if store.gc.elements(array, dst, len, 8).is_none() {
            return 1;
        }
        if i.elem_values(store, elem, src, len).is_none() {
            return 5;
        }
        write_elems(i, store, elem, src, len, array, dst);
        0
    }
}
