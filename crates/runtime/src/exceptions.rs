//! Exception handling: tags ([`Tag`]), exceptions ([`ExnRef`]), and the unwinder that carries
//! a thrown exception from `throw` to the handler that catches it.
//!
//! A tag is a [`VmTag`] its store keeps boxed: its address is its identity, which every
//! instance that defines or imports it holds in its vmctx (`VmOffsets::tag`). An exception is
//! a record in its store: a header word (the tag's address, the record's index in the store,
//! whether anything can still name it) and then the tag's values, 16 bytes each
//! (`VmOffsets::EXN_VALUES`), which is what an `exnref` points at and what a landing block
//! reads. Records live until their store is dropped, except one caught by a handler that
//! keeps no reference to it (`catch`, `catch_all`) while nothing else can name it: its record
//! is taken for the next exception, so a loop that throws and catches allocates once. What
//! the records take is bounded per store (`EngineConfig::max_exception_bytes`): a `throw` past
//! it traps with `TooManyExceptions`, so a guest that keeps exceptions cannot take the host's
//! memory. (Records are not GC objects: a collection only updates the references they hold.)
//!
//! # Unwinding
//! `throw` and `throw_ref` are builtins that never return (`arch::ephem_throw`,
//! `arch::ephem_throw_ref`, which pass their frame pointer and the pinned register). The
//! unwinder ([`unwind`]) follows the chain of frame pointers from there, as a trap's
//! backtrace does, and looks up each return address in its text's call sites (the artifact's
//! `ephem_module::CallSite`s): the first site with a clause whose tag is the exception's (by
//! identity, through the vmctx the site saved) or that catches all, is entered
//! (`arch::ephem_resume`: the stack pointer the call had, its frame pointer, the record in the
//! first return register, the fuel in the pinned register). Cranelift treats every register
//! as clobbered where a `try_call` lands, so nothing else needs restoring. An exception that
//! reaches the entry of the call into wasm ends the call: the store keeps it as its pending
//! exception and the host gets [`ThrownException`] (as in wasmtime). A host function throws by
//! returning that error with a pending exception set ([`crate::Caller::throw`]).
//!
//! A handler is entered only while the call is within its deadline: a signal that lands in
//! the unwinder does nothing, so the unwinder checks, as a host function's return does.
//!
//! Traps are not exceptions: nothing here catches them.

use std::cell::{Cell, RefCell};

use ephem_module::{FuncType, ValRaw, VmTag};

use crate::context::{AsContext, AsContextMut};
use crate::store::{StoreOpaque, Stored};
use crate::{Error, Val};

/// The type of a tag: the function type whose parameters an exception of it carries (its
/// results are empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagType {
    ty: FuncType,
}

impl TagType {
    /// The tag type of exceptions that carry `ty`'s parameters; `ty` must have no results.
    pub fn new(ty: FuncType) -> TagType {
        TagType { ty }
    }

    /// The function type: its parameters are what an exception carries.
    pub fn ty(&self) -> &FuncType {
        &self.ty
    }
}

impl std::fmt::Display for TagType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(tag {})", self.ty)
    }
}

/// An exception tag: a handle, valid with the store it was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub(crate) Stored);

impl Tag {
    /// A new tag of type `ty` in `store`, distinct from every other tag.
    pub fn new(mut store: impl AsContextMut, ty: &TagType) -> Result<Tag, Error> {
        if !ty.ty.results.is_empty() {
            return Err(Error::Usage(format!(
                "a tag's type has no results: {}",
                ty.ty
            )));
        }
        let mut ctx = store.as_context_mut();
        let type_id = ctx.engine().type_id(&ty.ty);
        Ok(Tag(ctx.opaque().push_tag(type_id)))
    }

    /// The tag's type.
    pub fn ty(&self, store: impl AsContext) -> TagType {
        let ctx = store.as_context();
        let store = ctx.opaque();
        TagType {
            ty: self.func_type(store),
        }
    }

    pub(crate) fn func_type(self, store: &StoreOpaque) -> FuncType {
        (store.engine.shared_func_type(self.vm(store).type_id)).into_owned()
    }

    /// The tag's record, which instances point at.
    pub(crate) fn vm(self, store: &StoreOpaque) -> &VmTag {
        store.check(self.0.store);
        &store.exceptions().tags[self.0.index as usize]
    }

    /// The tag of `store` whose record is at `tag`.
    fn of(store: &StoreOpaque, tag: *const VmTag) -> Tag {
        // SAFETY: `tag` comes from a record of this store, whose tags live as long as it.
        let index = unsafe { (*tag).index };
        Tag(Stored {
            store: store.id,
            index,
        })
    }
}

/// An exception: a handle, valid with the store it was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExnRef(pub(crate) Stored);

impl ExnRef {
    /// A new exception of `tag` carrying `fields` (the tag's parameters, in order), for a host
    /// function to throw ([`crate::Caller::throw`]) or to hand to wasm.
    pub fn new(mut store: impl AsContextMut, tag: &Tag, fields: &[Val]) -> Result<ExnRef, Error> {
        let mut ctx = store.as_context_mut();
        let store = ctx.opaque();
        let ty = tag.func_type(store);
        let fits = fields.len() == ty.params.len()
            && (fields.iter().zip(&ty.params)).all(|(v, &t)| v.fits(store, t));
        if !fits {
            return Err(Error::Usage(format!(
                "the fields do not fit the tag's type {ty}"
            )));
        }
        let raw = (fields.iter())
            .map(|v| v.to_raw(store))
            .collect::<Result<Vec<_>, _>>()?;
        let limit = store.engine.max_exception_bytes();
        let record = (store.exceptions().alloc(tag.vm(store), &raw, limit)).ok_or_else(|| {
            Error::Limit(format!(
                "the store holds {limit} bytes of exceptions (EngineConfig::max_exception_bytes)"
            ))
        })?;
        store.exceptions().expose(record);
        Ok(ExnRef::of(store, record))
    }

    /// The exception's tag.
    pub fn tag(&self, store: impl AsContext) -> Tag {
        let ctx = store.as_context();
        let store = ctx.opaque();
        Tag::of(store, header(self.record(store)).tag)
    }

    /// The values the exception carries, as its tag's parameters type them.
    pub fn fields(&self, store: impl AsContext) -> Vec<Val> {
        let ctx = store.as_context();
        let store = ctx.opaque();
        let record = self.record(store);
        let tag = Tag::of(store, header(record).tag);
        let ty = tag.func_type(store);
        (ty.params.iter().enumerate())
            // SAFETY: a record of this store holds at least its tag's values after its header.
            .map(|(i, &t)| Val::from_raw(store, t, unsafe { *record.add(1 + i) }))
            .collect()
    }

    /// The record in `store`.
    fn record(self, store: &StoreOpaque) -> *mut ValRaw {
        store.check(self.0.store);
        store.exceptions().records.borrow_mut()[self.0.index as usize].as_mut_ptr()
    }

    /// The exception whose record (as generated code holds it) is `record`.
    pub(crate) fn of(store: &StoreOpaque, record: *mut ValRaw) -> ExnRef {
        ExnRef(Stored {
            store: store.id,
            index: header(record).index,
        })
    }

    /// The record as generated code holds it.
    pub(crate) fn to_raw(self, store: &StoreOpaque) -> ValRaw {
        let record = self.record(store);
        store.exceptions().expose(record);
        record as usize as ValRaw
    }

    /// The exception a raw `exnref` names, or `None` for null.
    pub(crate) fn from_raw(store: &StoreOpaque, raw: ValRaw) -> Option<ExnRef> {
        let record = raw as u64 as usize as *mut ValRaw;
        (!record.is_null()).then(|| ExnRef::of(store, record))
    }
}

/// The error a call into wasm ends with when an exception reached it uncaught; the store holds
/// the exception ([`crate::Store::take_pending_exception`]). A host function returns it (see
/// [`crate::Caller::throw`]) to throw the store's pending exception into its caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThrownException;

impl std::fmt::Display for ThrownException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("thrown wasm exception")
    }
}

impl std::error::Error for ThrownException {}

/// A store's tags and exceptions. Empty (and allocating nothing) in a store that uses none.
#[derive(Default)]
pub(crate) struct Exceptions {
    /// Boxed: an instance's vmctx points at its tags.
    #[allow(clippy::vec_box)]
    tags: Vec<Box<VmTag>>,
    /// Each exception's record (see the module documentation). Written while wasm runs (a
    /// throw), through the shared store builtins hold.
    records: RefCell<Vec<Box<[ValRaw]>>>,
    /// A record that nothing can name any more, to take for the next exception.
    spare: Cell<Option<u32>>,
    /// The exception that ended the last call into wasm, for the host to take.
    pub(crate) pending: Cell<Option<u32>>,
    /// The bytes the records take (see `EngineConfig::max_exception_bytes`).
    bytes: Cell<usize>,
}

/// What a record's header word holds.
struct Header {
    tag: *const VmTag,
    index: u32,
    exposed: bool,
}

const EXPOSED: ValRaw = 1 << 96;

/// The header of `record`.
fn header(record: *const ValRaw) -> Header {
    // SAFETY: every record starts with its header word.
    let word = unsafe { *record };
    Header {
        tag: word as u64 as usize as *const VmTag,
        index: (word >> 64) as u32,
        exposed: word & EXPOSED != 0,
    }
}

impl Exceptions {
    /// A new tag of type `type_id`, at index `index` of the store's tags.
    pub(crate) fn push_tag(&mut self, type_id: u32) -> (u32, *const VmTag) {
        let index = self.tags.len() as u32;
        self.tags.push(Box::new(VmTag { type_id, index }));
        (index, &*self.tags[index as usize])
    }

    /// A record for a new exception of `tag` with `values`: the spare one if it is large
    /// enough, else a new one; `None` when a new one would take the records past `limit`
    /// bytes.
    pub(crate) fn alloc(
        &self,
        tag: *const VmTag,
        values: &[ValRaw],
        limit: usize,
    ) -> Option<*mut ValRaw> {
        let mut records = self.records.borrow_mut();
        // (Still nameless: it may have been thrown on since, and kept by reference.)
        let reuse = (self.spare.take()).filter(|&i| {
            let record = &records[i as usize];
            record.len() > values.len() && record[0] & EXPOSED == 0
        });
        let index = match reuse {
            Some(index) => index,
            None => {
                let bytes = size_of::<ValRaw>() * (values.len() + 1);
                let total = self.bytes.get() + bytes;
                if total > limit {
                    return None;
                }
                self.bytes.set(total);
                records.push(vec![0; values.len() + 1].into_boxed_slice());
                records.len() as u32 - 1
            }
        };
        let record = &mut records[index as usize];
        record[0] = tag as usize as ValRaw | (index as ValRaw) << 64;
        record[1..=values.len()].copy_from_slice(values);
        Some(record.as_mut_ptr())
    }

    /// Calls `f` with where each value of an exception that may name a GC object is (see
    /// `gc`): its tag's parameter types say which.
    pub(crate) fn objects(&self, engine: &crate::Engine, f: &mut dyn FnMut(*mut u64)) {
        let mut records = self.records.borrow_mut();
        for record in records.iter_mut() {
            let tag = header(record.as_ptr()).tag;
            if tag.is_null() {
                continue;
            }
            // SAFETY: a record's tag is one of this store's, boxed and alive with it.
            let type_id = unsafe { (*tag).type_id };
            let Some(ty) = engine.func_type(type_id) else {
                continue;
            };
            for (k, t) in ty.params.iter().enumerate() {
                if let (true, Some(value)) = (t.holds_objects(), record.get_mut(k + 1)) {
                    f((value as *mut ValRaw).cast());
                }
            }
        }
    }

    /// Marks `record` as one that something can name (an `exnref`, the host), so that it is
    /// never reused.
    pub(crate) fn expose(&self, record: *mut ValRaw) {
        // SAFETY: every record starts with its header word, which only this thread writes.
        unsafe { *record |= EXPOSED };
    }

    /// The pending exception, taken (see [`ThrownException`]).
    pub(crate) fn take_pending(&self, store: &StoreOpaque) -> Option<ExnRef> {
        let index = self.pending.take()?;
        Some(ExnRef(Stored {
            store: store.id,
            index,
        }))
    }
}

impl StoreOpaque {
    /// The store's tags and exceptions, made on first use: a store whose modules use neither
    /// carries a pointer for them, no more.
    pub(crate) fn exceptions(&self) -> &Exceptions {
        self.exceptions.get_or_init(Box::default)
    }

    fn exceptions_mut(&mut self) -> &mut Exceptions {
        self.exceptions();
        self.exceptions.get_mut().expect("made above")
    }

    /// Forgets the pending exception, if any (without making the store's exceptions).
    pub(crate) fn clear_pending_exception(&self) {
        if let Some(e) = self.exceptions.get() {
            e.pending.set(None);
        }
    }

    /// Makes `exn` the pending exception (see [`ThrownException`]).
    pub(crate) fn set_pending_exception(&self, exn: ExnRef) {
        self.check(exn.0.store);
        self.exceptions().pending.set(Some(exn.0.index));
    }

    /// The record of the exception a failed host function throws: the pending one, when the
    /// failure it left is a [`ThrownException`] (the failure is then dropped).
    pub(crate) fn thrown_by_host(&mut self) -> Option<*mut ValRaw> {
        let thrown = matches!(&self.host_failure,
            Some(crate::func::HostFailure::Error(e)) if e.is::<ThrownException>()
                || matches!(e.downcast_ref::<Error>(), Some(Error::Exception(_))));
        if !thrown {
            return None;
        }
        let index = self.exceptions.get()?.pending.take()?;
        self.host_failure = None;
        Some(self.exceptions().records.borrow_mut()[index as usize].as_mut_ptr())
    }

    pub(crate) fn push_tag(&mut self, type_id: u32) -> Stored {
        let (index, _) = self.exceptions_mut().push_tag(type_id);
        Stored {
            store: self.id,
            index,
        }
    }

    /// The record of tag `index` of this store, as vmctxs hold it.
    pub(crate) fn tag_ptr(&self, index: u32) -> *const VmTag {
        &*self.exceptions().tags[index as usize]
    }
}

/// The `Throw` builtin (through `arch::ephem_throw`): a new exception of tag `tag` of the
/// instance of `vmctx`, with the tag's values at `values`, thrown from the frame at `fp`;
/// `pinned` is metered code's fuel.
///
/// # Safety
/// Called only by `arch::ephem_throw`, from generated code inside a call into wasm on this
/// thread, with its own vmctx and a slot per value of the tag at `values`.
pub(crate) unsafe extern "C" fn throw_new(
    vmctx: *mut u8,
    tag: u32,
    values: *const ValRaw,
    fp: usize,
    pinned: i64,
) -> ! {
    // SAFETY: per the contract, the instance and the running store are alive for the call
    // (see `builtins`' contract), and the tag's values are at `values`.
    let record = unsafe {
        let store = &*crate::signals::current_store().cast::<StoreOpaque>();
        let instance = crate::instance::InstanceData::from_vmctx(vmctx);
        let m = &*instance.module.inner;
        let n = m.artifact.info().tag_type(tag).params.len();
        let tag_ptr = *vmctx
            .add(m.offsets.tag(tag) as usize)
            .cast::<*const VmTag>();
        let values = std::slice::from_raw_parts(values, n);
        let limit = store.engine.max_exception_bytes();
        store.exceptions().alloc(tag_ptr, values, limit)
    };
    let Some(record) = record else {
        let kind = ephem_module::TrapKind::TooManyExceptions.code();
        // SAFETY: per the contract, as `raise_trap`'s (a stub called by generated code).
        unsafe { crate::signals::raise_trap(vmctx, kind, fp, pinned) }
    };
    // SAFETY: per the contract.
    unsafe { unwind(record, fp, pinned) }
}

/// The `ThrowRef` builtin (through `arch::ephem_throw_ref`): throws `exn` again from the frame
/// at `fp`, or traps `NullReference` when it is null.
///
/// # Safety
/// As for [`throw_new`]; `exn` is an `exnref` generated code held.
pub(crate) unsafe extern "C" fn throw_ref(_vmctx: *mut u8, exn: u64, fp: usize, pinned: i64) -> ! {
    if exn == 0 {
        let kind = ephem_module::TrapKind::NullReference.code();
        // SAFETY: per the contract, as `raise_trap`'s (a stub called by generated code).
        unsafe { crate::signals::raise_trap(std::ptr::null_mut(), kind, fp, pinned) }
    }
    // SAFETY: per the contract.
    unsafe { unwind(exn as usize as *mut ValRaw, fp, pinned) }
}

/// Throws the exception of `record` from the frame at `fp` (a stub's, called by generated
/// code): enters the first handler that catches it, or ends the call into wasm with it
/// pending. `fuel` is what the pinned register holds in the handler.
///
/// # Safety
/// `fp` is the frame pointer of a stub called by published code inside a call into wasm on
/// this thread, none of whose frames up to the call's entry has anything to drop; `record` is
/// a record of the running store.
pub(crate) unsafe fn unwind(record: *mut ValRaw, fp: usize, fuel: i64) -> ! {
    let store = crate::signals::current_store().cast::<StoreOpaque>();
    let top = crate::signals::entry_sp();
    let tag = header(record).tag;
    let catch = |f: &crate::signals::SiteFrame<'_>| {
        let site = f.site;
        if site.catches.is_empty() {
            return;
        }
        let Some(vmctx_at) =
            (f.sp.checked_add(site.vmctx_at.to_native() as usize)).filter(|&at| at + 8 <= f.fp)
        else {
            return;
        };
        // SAFETY: the call site's frame holds its vmctx at `vmctx_at`, inside the live frame
        // between this one and the entry (checked just above).
        let vmctx = unsafe { *(vmctx_at as *const usize) };
        for c in site.catches.iter() {
            let hit = match c.tag.as_ref() {
                None => true,
                Some(t) => {
                    let at = vmctx + f.module.offsets.tag(t.to_native()) as usize;
                    // SAFETY: the vmctx of the instance whose code made the call, with a tag
                    // field per tag of its module.
                    unsafe { *(at as *const *const VmTag) == tag }
                }
            };
            if !hit {
                continue;
            }
            // SAFETY: the running store, shared as builtins share it.
            let exceptions = unsafe { (*store).exceptions() };
            let h = header(record);
            if c.by_ref {
                exceptions.expose(record);
            } else if !h.exposed {
                exceptions.spare.set(Some(h.index));
            }
            // Back into wasm past the deadline: the call ends here, as after a host function
            // (a signal that landed in the unwinder did nothing).
            if crate::signals::interrupt_due() {
                // SAFETY: per the contract: a stub's frame, nothing to drop.
                unsafe { crate::signals::raise_from_host(fp, crate::interrupt::INTERRUPT) }
            }
            let pc = f.code_start + c.target.to_native() as usize;
            // SAFETY: the handler's stack and frame pointers are those of its function's frame
            // at the call, which is live (below the entry stub); nothing between here and
            // there has anything to drop, per the contract.
            unsafe { crate::arch::ephem_resume(f.sp, f.fp, pc, record, fuel) }
        }
    };
    // SAFETY: `fp` is a stub's frame inside this thread's call into wasm, whose entry is at
    // `top` (per the contract).
    unsafe { crate::signals::for_each_site_frame(fp, top, catch) };
    // Uncaught: the call into wasm ends, and the host finds the exception in the store.
    // SAFETY: the running store, shared as builtins share it.
    let exceptions = unsafe { (*store).exceptions() };
    exceptions.expose(record);
    exceptions.pending.set(Some(header(record).index));
    // SAFETY: per the contract.
    unsafe { crate::signals::raise_thrown(fp, fuel) }
}
