//! The instance context (`vmctx`): the block of memory that generated code reaches through its
//! first argument. Its layout depends only on the module's counts, so compiler and runtime
//! compute the same offsets from [`ModuleInfo`](crate::ModuleInfo).
//!
//! ```text
//! header      stack_limit: *const usize (the thread's limit), builtins: *const fn table, instance: *mut (runtime's),
//!             fuel: *mut i64 (the store's remaining fuel), gc_heap: *mut VmGcHeap (the store's)
//! memories    base: *mut u8                  (constant: a memory never moves)
//! memory defs *const VmMemory               (current length in bytes)
//! tables      *mut VmTable                  (elements pointer and length; may move on grow)
//! globals     *mut ValRaw                   (16 bytes each, owned by the global)
//! type ids    u32 per type, engine-wide canonical ids for signature checks
//! tags        *const VmTag per tag            (its identity: the store's record of the tag)
//! funcrefs    VmFuncRef per imported function, then per eager defined one, then per lazy one
//!             (see [`FuncrefLayout`](crate::FuncrefLayout)); a lazy slot holds garbage until
//!             it is first needed, and is then written (always with the same value)
//! ```
//!
//! Funcref table elements (not externref ones) are stored *tagged*: 0 is an element never
//! written, which a lazy table makes from its initial contents when it is first read (null
//! for any other table); anything else is the funcref pointer (null included) with bit 0 set.

use crate::ModuleInfo;

/// A value as it crosses between host and wasm: 16 bytes, little-endian, low bytes used.
pub type ValRaw = u128;

/// What `ref.func` and funcref table elements point at.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VmFuncRef {
    /// Native code with the wasm signature (`vmctx` first).
    pub code: *const u8,
    /// The context `code` expects: an instance's vmctx, or a host function's header.
    pub vmctx: *mut u8,
    /// Entry trampoline of the function's type, for calls from the host.
    pub trampoline: *const u8,
    /// Engine-wide canonical type id.
    pub type_id: u32,
}

/// Write marks: a byte per host page of linear memory, in the [`MARKS_BEFORE`] bytes that
/// precede the memory's base, which generated code sets (to non-zero) when it stores into the
/// page, so that a reset can find what an instance wrote without reading the whole memory or
/// asking the kernel.
///
/// # Invariant
/// A store of at most 16 bytes at memory address `index + offset` (index and offset both
/// below 2^32) sets the mark of page `(index + offset - offset % MARK_WINDOW) >> MARK_SHIFT`.
/// Every byte it writes then lies in that page or in the first [`MARK_HEAD`] bytes of the
/// next (it begins less than `MARK_WINDOW` bytes past the window's start). The runtime marks
/// every page it writes. Marks are never cleared while any instance can run on the memory.
///
/// Rounding the offset down lets every store through one index and offsets of one window
/// (fields of one struct) share one mark, and the shift with it.
pub const MARK_SHIFT: u32 = 12;
/// See [`MARK_SHIFT`].
pub const MARK_WINDOW: u64 = 64;
/// The bytes at the start of the page after a marked one that a store marked there may reach:
/// `MARK_WINDOW` plus the widest store, in whole cache lines.
pub const MARK_HEAD: usize = 128;
/// Bytes of marks before a memory's base: enough for every page the invariant above can name
/// (`(2^32 - 1 + 2^32 - 1) >> 12`), so a mark is never out of bounds whatever the store.
pub const MARKS_BEFORE: usize = 1 << (33 - MARK_SHIFT);
/// Bytes of marks before the base of a 64-bit memory, which lives in a large slot (see
/// `MemoryType::large`): enough for every page of the largest one (whose every access is
/// checked against its length), 64 GiB.
pub const MARKS_BEFORE_LARGE: usize = 1 << (36 - MARK_SHIFT);

/// An exception tag, as its store keeps it: its address is its identity (two instances of a
/// module define distinct tags; an imported tag is the exporter's).
#[repr(C)]
#[derive(Debug)]
pub struct VmTag {
    /// Engine-wide canonical id of the tag's function type.
    pub type_id: u32,
    /// The tag's index among its store's tags.
    pub index: u32,
}

/// A linear memory's current size, shared by every instance that imports the memory.
#[repr(C)]
#[derive(Debug)]
pub struct VmMemory {
    pub base: *mut u8,
    pub length: u64,
}

/// Most elements a table may have (a resource limit the runtime keeps).
pub const MAX_TABLE_ELEMENTS: u32 = 10_000_000;

/// A table's elements: pointers (`*const VmFuncRef` or an externref handle), null = 0.
#[repr(C)]
#[derive(Debug)]
pub struct VmTable {
    pub elements: *mut usize,
    pub length: u32,
    /// Set (non-zero) by generated code's `table.set`, the one write to the elements the
    /// runtime does not see: a table whose elements go back to a pool for the next table is
    /// cleared over the chunks the runtime wrote, or whole once this is set.
    pub code_wrote: u32,
}

const _: () =
    assert!(std::mem::offset_of!(VmTable, elements) == VmOffsets::TABLE_ELEMENTS as usize);
const _: () = assert!(std::mem::offset_of!(VmTable, length) == VmOffsets::TABLE_LENGTH as usize);
const _: () =
    assert!(std::mem::offset_of!(VmTable, code_wrote) == VmOffsets::TABLE_CODE_WROTE as usize);

/// The first field of the context a host adapter receives: the function it calls with the
/// context, the caller's vmctx (null when the host called) and a pointer to the arguments
/// (results are written back there). It returns only when the host function succeeded; a
/// failure ends the call into wasm in the runtime, without returning here.
pub type HostCall = unsafe extern "C" fn(ctx: *mut u8, caller_vmctx: *mut u8, values: *mut ValRaw);

/// Layout every host function context starts with.
#[repr(C)]
#[derive(Debug)]
pub struct HostFuncHeader {
    pub call: HostCall,
}

/// The one list of builtins: the runtime functions generated code calls through the table at
/// [`VmOffsets::BUILTINS`] (index = position here). Each takes the caller's `vmctx` first, then
/// the parameters listed (wasm `i32`s and `i64`s, passed as `u32` and `u64`), and returns what
/// is listed: a "trap flag" is 1 when the operation is out of bounds, 2 when metered code's
/// store cannot pay its fuel (bulk operations cost one unit per byte or element).
///
/// Every place that depends on the list expands it: [`Builtin`] here, the call signatures in
/// the compiler, and the function table in the runtime (which names each function after its
/// entry and checks its Rust signature against it), so the three cannot drift apart.
#[macro_export]
macro_rules! for_each_builtin {
    ($m:ident) => {
        $m! {
            /// (mem, delta_pages) -> old pages or -1 (addresses and sizes are `i64` for every
            /// memory here: a 32-bit memory's are zero-extended)
            MemoryGrow memory_grow(mem: i32, delta: i64) -> i64;
            /// (mem, dst, val, len) -> trap flag
            MemoryFill memory_fill(mem: i32, dst: i64, val: i32, len: i64) -> i32;
            /// (dst_mem, src_mem, dst, src, len) -> trap flag
            MemoryCopy memory_copy(dst_mem: i32, src_mem: i32, dst: i64, src: i64, len: i64) -> i32;
            /// (mem, data, dst, src, len) -> trap flag
            MemoryInit memory_init(mem: i32, data: i32, dst: i64, src: i32, len: i32) -> i32;
            /// (data)
            DataDrop data_drop(data: i32);
            /// (table, delta, init) -> old size or -1
            TableGrow table_grow(table: i32, delta: i32, init: i64) -> i32;
            /// (table, dst, val, len) -> trap flag
            TableFill table_fill(table: i32, dst: i32, val: i64, len: i32) -> i32;
            /// (dst_table, src_table, dst, src, len) -> trap flag
            TableCopy table_copy(dst_table: i32, src_table: i32, dst: i32, src: i32, len: i32) -> i32;
            /// (table, elem, dst, src, len) -> trap flag
            TableInit table_init(table: i32, elem: i32, dst: i32, src: i32, len: i32) -> i32;
            /// (elem)
            ElemDrop elem_drop(elem: i32);
            /// (table, index) -> the element, tagged, made from the table's initial contents
            /// (the element was 0, never written; the index is in bounds)
            TableLazy table_lazy(table: i32, index: i32) -> i64;
            /// (func) -> its funcref, written into its lazy slot
            RefFunc ref_func(func: i32) -> i64;
            /// (kind): never returns; ends the call into wasm with a trap of that kind
            /// (`TrapKind::code`) without a signal
            Raise raise(kind: i32);
            /// (tag, values): never returns; throws a new exception of the tag with the tag's
            /// parameters, each in a 16-byte slot at `values`
            Throw throw(tag: i32, values: i64);
            /// (exn): never returns; throws the exception again, or traps `NullReference`
            ThrowRef throw_ref(exn: i64);
            /// (mem, addr, expected, timeout_ns) -> 0 woken, 1 not equal, 2 timed out, 3 past
            /// the deadline, 4 the memory is not shared, 5 out of bounds (`addr` is the
            /// effective address; a negative timeout waits without end)
            AtomicWait32 atomic_wait32(mem: i32, addr: i64, expected: i32, timeout: i64) -> i32;
            /// As `AtomicWait32`, comparing 8 bytes.
            AtomicWait64 atomic_wait64(mem: i32, addr: i64, expected: i64, timeout: i64) -> i32;
            /// (mem, addr, count) -> waiters woken, or -1 out of bounds
            AtomicNotify atomic_notify(mem: i32, addr: i64, count: i32) -> i64;
            /// (type, len) -> a new object of the module's struct or array type `type` (of
            /// `len` elements; a struct ignores it), zero past its header; or a GC flag.
            /// GC builtins that make an object return it (an offset, at least `gc::ALIGN`) or a
            /// *GC flag* below `gc::ALIGN`: the trap flags, 4 when the GC heap cannot hold the
            /// object, 5 when a data or element segment's range is out of bounds. Their arrays
            /// are non-null (generated code checks), and an array index out of bounds is flag 1.
            GcAlloc gc_alloc(ty: i32, len: i32) -> i64;
            /// (actual, expected) -> 1 when the type with canonical id `actual` is a declared
            /// subtype (directly or not) of the one with id `expected`, else 0
            IsSubtype is_subtype(actual: i32, expected: i32) -> i32;
            /// (type, len, lo, hi) -> a new array of `len` elements, each the value whose
            /// low 8 bytes are `lo` and high 8 `hi`; or a GC flag
            ArrayNew array_new(ty: i32, len: i32, lo: i64, hi: i64) -> i64;
            /// (type, data, src, len) -> a new array of `len` elements read from data segment
            /// `data` at byte `src`; or a GC flag
            ArrayNewData array_new_data(ty: i32, data: i32, src: i32, len: i32) -> i64;
            /// (type, elem, src, len) -> a new array of elements `src..src + len` of element
            /// segment `elem`; or a GC flag
            ArrayNewElem array_new_elem(ty: i32, elem: i32, src: i32, len: i32) -> i64;
            /// (type, array, dst, lo, hi, len) -> GC flag (0 done)
            ArrayFill array_fill(ty: i32, array: i64, dst: i32, lo: i64, hi: i64, len: i32) -> i32;
            /// (type, dst_array, dst, src_array, src, len) -> GC flag (0 done); `type` is the
            /// destination's
            ArrayCopy array_copy(ty: i32, dst_array: i64, dst: i32, src_array: i64, src: i32, len: i32) -> i32;
            /// (type, array, dst, data, src, len) -> GC flag (0 done)
            ArrayInitData array_init_data(ty: i32, array: i64, dst: i32, data: i32, src: i32, len: i32) -> i32;
            /// (type, array, dst, elem, src, len) -> GC flag (0 done)
            ArrayInitElem array_init_elem(ty: i32, array: i64, dst: i32, elem: i32, src: i32, len: i32) -> i32;
            /// (mem, first, last, step, ok): sets the write marks of the addresses a loop's
            /// stores may write, `first`, `first + step`, ... up to `last`, that the memory has
            /// (the compiler's `marks::hoist_from_loops`); with `ok` 0 the loop's range is
            /// unknown, and the memory's next reset reads it instead of trusting its marks
            MarkLoop mark_loop(mem: i32, first: i64, last: i64, step: i64, ok: i32);
        }
    };
}

/// A builtin's parameter or result type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinType {
    I32,
    I64,
}

macro_rules! builtin_enum {
    ($( $(#[$doc:meta])* $variant:ident $name:ident ( $($arg:ident : $ty:ident),* ) $(-> $ret:ident)? ; )*) => {
        /// A runtime function generated code calls: see [`for_each_builtin`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum Builtin {
            $( $(#[$doc])* $variant, )*
        }

        impl Builtin {
            /// Every builtin, in table order.
            pub const ALL: &[Builtin] = &[$(Builtin::$variant),*];
            pub const COUNT: usize = Builtin::ALL.len();

            /// Parameter types (after `vmctx`) and the result type, if any.
            pub fn signature(self) -> (&'static [BuiltinType], Option<BuiltinType>) {
                match self {
                    $( Builtin::$variant => (
                        &[$(builtin_type!($ty)),*],
                        None $(.or(Some(builtin_type!($ret))))?,
                    ), )*
                }
            }
        }
    };
}

macro_rules! builtin_type {
    (i32) => {
        BuiltinType::I32
    };
    (i64) => {
        BuiltinType::I64
    };
}

for_each_builtin!(builtin_enum);

/// Byte offsets of every field of a module's vmctx.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmOffsets {
    pub memories: u32,
    pub memory_defs: u32,
    pub tables: u32,
    pub globals: u32,
    pub type_ids: u32,
    pub tags: u32,
    pub funcrefs: u32,
    pub size: u32,
}

const PTR: u32 = 8;

/// What the layout depends on, in [`VmOffsets::from_counts`] order, from a module's info, owned
/// or archived (the same field names on both).
macro_rules! counts {
    ($info:expr, $funcref_slots:expr) => {{
        let i = $info;
        [
            i.memories.len(),
            i.tables.len(),
            i.globals.len(),
            i.types.len(),
            i.tags.len(),
            $funcref_slots,
        ]
        .map(|n| n as u32)
    }};
}

impl VmOffsets {
    pub const STACK_LIMIT: u32 = 0;
    pub const BUILTINS: u32 = 8;
    pub const INSTANCE: u32 = 16;
    /// Pointer to the store's remaining fuel: metered code subtracts what it runs, and traps
    /// with `OutOfFuel` at a function entry or loop header once it is below zero.
    pub const FUEL: u32 = 24;
    /// Pointer to the store's [`VmGcHeap`](crate::VmGcHeap).
    pub const GC_HEAP: u32 = 32;
    pub const FUNCREF_SIZE: u32 = std::mem::size_of::<VmFuncRef>() as u32;
    pub const FUNCREF_CODE: u32 = 0;
    pub const FUNCREF_VMCTX: u32 = 8;
    pub const FUNCREF_TYPE_ID: u32 = 24;
    pub const MEMORY_LENGTH: u32 = 8;
    pub const TABLE_ELEMENTS: u32 = 0;
    pub const TABLE_LENGTH: u32 = 8;
    pub const TABLE_CODE_WROTE: u32 = 12;
    /// The bit set in a written funcref table element (see the module documentation).
    pub const FUNCREF_WRITTEN: u64 = 1;
    /// Where an exception's record (what an `exnref` points at) keeps its tag (a
    /// `*const VmTag`) and its values (16 bytes each, in the tag's parameter order).
    pub const EXN_TAG: u32 = 0;
    pub const EXN_VALUES: u32 = 16;

    /// The layout for `info` with `slots` funcref slots ([`crate::FuncrefLayout::slots`]).
    pub fn new(info: &ModuleInfo, slots: u32) -> VmOffsets {
        VmOffsets::from_counts(counts!(info, slots as usize))
    }

    /// As [`VmOffsets::new`], for an archived module.
    pub fn for_archived(info: &crate::ArchivedModuleInfo, slots: u32) -> VmOffsets {
        VmOffsets::from_counts(counts!(info, slots as usize))
    }

    /// The layout for a module with these numbers of memories, tables, globals, types, tags
    /// and funcref slots.
    fn from_counts(
        [
            memory_count,
            table_count,
            global_count,
            type_count,
            tag_count,
            func_count,
        ]: [u32; 6],
    ) -> VmOffsets {
        let memories = 40;
        let memory_defs = memories + PTR * memory_count;
        let tables = memory_defs + PTR * memory_count;
        let globals = tables + PTR * table_count;
        let type_ids = globals + PTR * global_count;
        let tags = (type_ids + 4 * type_count).next_multiple_of(8);
        let funcrefs = (tags + PTR * tag_count).next_multiple_of(16);
        let size = funcrefs + Self::FUNCREF_SIZE * func_count;
        VmOffsets {
            memories,
            memory_defs,
            tables,
            globals,
            type_ids,
            tags,
            funcrefs,
            size,
        }
    }

    pub fn memory_base(&self, i: u32) -> u32 {
        self.memories + PTR * i
    }
    pub fn memory_def(&self, i: u32) -> u32 {
        self.memory_defs + PTR * i
    }
    pub fn table(&self, i: u32) -> u32 {
        self.tables + PTR * i
    }
    pub fn global(&self, i: u32) -> u32 {
        self.globals + PTR * i
    }
    pub fn type_id(&self, i: u32) -> u32 {
        self.type_ids + 4 * i
    }
    pub fn tag(&self, i: u32) -> u32 {
        self.tags + PTR * i
    }
    /// The funcref in `slot` (see [`crate::FuncrefLayout`]).
    pub fn funcref(&self, slot: u32) -> u32 {
        self.funcrefs + Self::FUNCREF_SIZE * slot
    }

    /// The funcref slot of eager function `func` of a module with `imported` imported
    /// functions and the sorted `eager` ones ([`crate::FuncrefLayout::eager`]): its index for
    /// an imported one, else `imported` plus its rank among the eager. `None` for any other.
    pub fn eager_slot<T: Copy + Into<u32>>(imported: u32, eager: &[T], func: u32) -> Option<u32> {
        if func < imported {
            return Some(func);
        }
        let rank = eager.binary_search_by_key(&func, |&f| f.into()).ok()?;
        Some(imported + rank as u32)
    }
}
