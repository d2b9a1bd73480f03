//! A module compiled to machine code ([`CompiledModule`]): the text and where things are in
//! it (functions, trampolines, host adapters, trapping instructions, relocations), and what the
//! code assumes of the machine ([`Target`]).
//!
//! Invariant: a [`TrapKind`]'s [`TrapKind::code`] stays the same across builds (artifact files
//! record it); new kinds go at the end of [`TrapKind::ALL`].

use rkyv::{Archive, Deserialize, Serialize};

use crate::ModuleInfo;

/// Why generated code trapped. Each trapping instruction in the text is listed with its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapKind {
    /// `unreachable` ran.
    Unreachable,
    /// A memory access or bulk memory operation out of bounds.
    MemoryOutOfBounds,
    /// `table.get`/`set` and bulk table operations out of bounds.
    TableOutOfBounds,
    /// `call_indirect` past the end of the table.
    UndefinedElement,
    /// `call_indirect` of a null element.
    IndirectCallToNull,
    /// `call_indirect` of a function of another type.
    BadSignature,
    /// Signed division overflow, or a float-to-integer conversion out of range.
    IntegerOverflow,
    /// Integer division or remainder by zero.
    IntegerDivisionByZero,
    /// Float-to-integer conversion of NaN.
    BadConversionToInteger,
    /// Wasm used more stack than it may.
    StackOverflow,
    /// A host function returned an error or panicked; the runtime holds the details.
    HostError,
    /// The store's epoch deadline passed (see the runtime's `interrupt`).
    Interrupted,
    /// The store's fuel ran out (see `VmOffsets::FUEL`).
    OutOfFuel,
    /// `call_ref`, `return_call_ref` or `ref.as_non_null` of null.
    NullReference,
    /// A `throw` past the bound on the exceptions a store holds (see the runtime's
    /// `EngineConfig::max_exception_bytes`).
    TooManyExceptions,
    /// An atomic access at an address that is not a multiple of its size.
    UnalignedAtomic,
    /// `memory.atomic.wait32`/`wait64` on a memory that is not shared (no other thread could
    /// ever notify it).
    WaitOnUnsharedMemory,
    /// `ref.cast` of a value not of the type.
    CastFailure,
    /// An array access or bulk array operation out of bounds.
    ArrayOutOfBounds,
    /// An allocation the store's GC heap could not hold (its limit, or the object's size).
    GcHeapExhausted,
}

impl TrapKind {
    /// Every kind, in the order of their stable codes ([`TrapKind::code`]).
    pub const ALL: [TrapKind; 20] = [
        TrapKind::Unreachable,
        TrapKind::MemoryOutOfBounds,
        TrapKind::TableOutOfBounds,
        TrapKind::UndefinedElement,
        TrapKind::IndirectCallToNull,
        TrapKind::BadSignature,
        TrapKind::IntegerOverflow,
        TrapKind::IntegerDivisionByZero,
        TrapKind::BadConversionToInteger,
        TrapKind::StackOverflow,
        TrapKind::HostError,
        TrapKind::Interrupted,
        TrapKind::OutOfFuel,
        TrapKind::NullReference,
        TrapKind::TooManyExceptions,
        TrapKind::UnalignedAtomic,
        TrapKind::WaitOnUnsharedMemory,
        TrapKind::CastFailure,
        TrapKind::ArrayOutOfBounds,
        TrapKind::GcHeapExhausted,
    ];

    /// A number for this kind that stays the same across builds (used in artifact files).
    pub fn code(self) -> u32 {
        Self::ALL.iter().position(|&k| k == self).expect("listed") as u32
    }

    pub fn from_code(code: u32) -> Option<TrapKind> {
        Self::ALL.get(code as usize).copied()
    }

    /// The message the WebAssembly specification's tests expect.
    pub fn message(self) -> &'static str {
        match self {
            TrapKind::Unreachable => "unreachable",
            TrapKind::MemoryOutOfBounds => "out of bounds memory access",
            TrapKind::TableOutOfBounds => "out of bounds table access",
            TrapKind::UndefinedElement => "undefined element",
            TrapKind::IndirectCallToNull => "uninitialized element",
            TrapKind::BadSignature => "indirect call type mismatch",
            TrapKind::IntegerOverflow => "integer overflow",
            TrapKind::IntegerDivisionByZero => "integer divide by zero",
            TrapKind::BadConversionToInteger => "invalid conversion to integer",
            TrapKind::StackOverflow => "call stack exhausted",
            TrapKind::HostError => "host function error",
            TrapKind::Interrupted => "interrupted: the deadline passed",
            TrapKind::OutOfFuel => "all fuel consumed",
            TrapKind::NullReference => "null reference",
            TrapKind::TooManyExceptions => "too many exceptions held at once",
            TrapKind::UnalignedAtomic => "unaligned atomic",
            TrapKind::WaitOnUnsharedMemory => "expected shared memory",
            TrapKind::CastFailure => "cast failure",
            TrapKind::ArrayOutOfBounds => "out of bounds array access",
            TrapKind::GcHeapExhausted => "GC heap out of memory",
        }
    }
}

/// Where one defined function's code is in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncLoc {
    pub offset: u32,
    pub len: u32,
}

/// A runtime function that generated code calls by absolute address (Cranelift emits these
/// for float rounding when the CPU lacks SSE4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum LibCall {
    CeilF32,
    CeilF64,
    FloorF32,
    FloorF64,
    TruncF32,
    TruncF64,
    NearestF32,
    NearestF64,
    FmaF32,
    FmaF64,
}

/// A place in the text that the loader must patch: the 8-byte absolute address of `target`
/// plus `addend`, at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Reloc {
    pub offset: u32,
    pub target: LibCall,
    pub addend: i64,
}

/// What generated code assumes about the machine that runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Target {
    /// The architecture (`x86_64`).
    pub arch: String,
    /// CPU features the code may use, by Cranelift setting name (`has_avx2`, ...).
    pub cpu_features: Vec<String>,
    /// Everything else that changed the code: target triple and every compiler setting. Equal
    /// fingerprints mean equal code for equal input.
    pub fingerprint: String,
}

/// A module compiled to machine code: everything the runtime needs to load and instantiate it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompiledModule {
    pub info: ModuleInfo,
    /// What the code was generated for.
    pub target: Target,
    /// All code, position-independent: intra-module calls are resolved.
    pub text: Vec<u8>,
    /// Patches the loader applies (usually none).
    pub relocs: Vec<Reloc>,
    /// One per defined function, by index (the text lays them out in another order).
    pub funcs: Vec<FuncLoc>,
    /// Entry trampoline offset, one per type.
    pub trampolines: Vec<u32>,
    /// Host adapter offset, one per type.
    pub host_adapters: Vec<u32>,
    /// Trapping instructions (text offset, kind), sorted by offset.
    pub traps: Vec<(u32, TrapKind)>,
    /// The calls inside `try_table`s, sorted by return address: where an exception thrown
    /// below them may be caught.
    pub call_sites: Vec<CallSite>,
    /// Bytes of all data segments.
    pub data: Vec<u8>,
    /// The largest memory image the artifact may hold (a memory whose image would be larger
    /// gets its segments copied at instantiation); 0: no images.
    pub max_image_bytes: u64,
}

/// A call inside a `try_table` (or several), or one across which references to GC objects
/// live: what the runtime's unwinder needs to find and enter a handler when an exception
/// reaches the call's frame, and what its collector needs to find and update those
/// references (the call's stack map). Every frame keeps a frame pointer, so the frame is found
/// by its return address; a handler runs with the stack pointer the call had and the
/// exception's record in the first return register.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct CallSite {
    /// The call's return address (text offset).
    pub ret: u32,
    /// Bytes from the frame pointer down to the stack pointer at the call.
    pub frame_offset: u32,
    /// Where the calling instance's vmctx is at the call: bytes above the stack pointer. A
    /// tag's identity is the instance's (see [`crate::VmTag`]).
    pub vmctx_at: u32,
    /// The handlers, innermost first; the first that matches is taken.
    pub catches: Vec<Catch>,
    /// Where references that may name GC objects live across the call (each in 8 bytes):
    /// bytes above the stack pointer. Code reloads them after the call, so a collection
    /// during it may move their objects.
    pub refs: Vec<u32>,
}

/// One `catch` clause of a [`CallSite`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Catch {
    /// The tag it catches (module index), or `None` for every exception (`catch_all`).
    pub tag: Option<u32>,
    /// Whether the handler keeps the exception as an `exnref` (`catch_ref`, `catch_all_ref`).
    pub by_ref: bool,
    /// Where the handler's code starts (text offset).
    pub target: u32,
}

/// The default bound on one memory image in an artifact.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 64 << 20;

impl CompiledModule {
    /// The kind of trap raised by the instruction at `offset` in the text, if it is one.
    pub fn trap_at(&self, offset: u32) -> Option<TrapKind> {
        self.traps
            .binary_search_by_key(&offset, |(o, _)| *o)
            .ok()
            .map(|i| self.traps[i].1)
    }
}
