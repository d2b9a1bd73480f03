//! Entering wasm, and turning faults in wasm code into traps.
//!
//! The host enters wasm through `ephem_enter_wasm`, a small assembly stub (in `arch`, one per
//! architecture, with the register accesses the handler needs) that saves the callee-saved
//! registers and its stack pointer in the thread's [`CallState`], then calls the entry
//! trampoline. When generated code traps (an explicit trap's faulting instruction, a `hlt` on
//! x86-64, see the compiler's `arch`; or a fault in a memory's guard region), the
//! signal handler checks that the faulting instruction lies in
//! published code ([`registry::lookup`]); if so it records where, and resumes the thread at
//! `ephem_trap_landing`, which restores the saved registers and returns 1 from the stub. Any
//! other fault is passed to the handler installed before ours (or the default action), so a
//! crash in host code still crashes. The handler also records the pinned register, where
//! metered code keeps its fuel, for the caller to write back to the store.
//!
//! `unreachable`, the trap guests raise on purpose (a Rust panic, a Go or AssemblyScript
//! abort), takes no signal: generated code calls the `Raise` builtin, which records the site
//! and unwinds to the landing directly ([`raise_trap`]), as a failed host function does. So
//! does a failed bounds check on x86-64, through code the compiler appends to the text, which
//! finds `Raise` in the entry stub's frame (`ephem_module::ENTRY_FRAME_RAISE`): a trap by
//! signal costs a trapping invocation more, and every thread trapping at once takes the
//! process's signal lock in turn (BENCHMARKS.md).
//!
//! A deadline stops wasm the same way: `interrupt` sends [`INTERRUPT`] to a thread whose call
//! is due, and the handler ends the call only where a fault would (the thread is in published
//! code) and only if the call's store's deadline has passed; elsewhere the signal does nothing.
//!
//! Stack overflow in wasm is caught before it happens: every function's prologue compares the
//! stack pointer with the limit the vmctx points at: a cell of the store, which every entry
//! here sets to this thread's limit (a store may move between threads between calls).

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::Once;
use std::sync::atomic::AtomicU64;

use ephem_code_memory::registry;
use ephem_module::ValRaw;

use crate::arch;
use crate::interrupt::{self, INTERRUPT};

/// Stack kept free for the host (signal handling, host functions) when the thread has little.
const HOST_RESERVE: usize = 64 << 10;

/// Most caller frames a trap records.
pub const MAX_FRAMES: usize = 32;

/// A code address in published code: the code's start and registry tag.
#[derive(Clone, Copy, Debug, Default)]
pub struct CodeSite {
    pub pc: usize,
    pub code_start: usize,
    pub tag: usize,
}

/// Where a trap happened, as the signal handler saw it: the faulting instruction and the
/// return addresses of the wasm frames below it, innermost first. Generated code keeps frame
/// pointers, so the handler follows them from the fault up to the entry stub's frame, reading
/// only this thread's stack between the two.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrapSite {
    pub at: CodeSite,
    /// The signal that stopped wasm, or 0 when a host function failed (see [`raise_from_host`]).
    pub signal: i32,
    pub callers: [CodeSite; MAX_FRAMES],
    pub depth: usize,
    /// The pinned register when a signal stopped wasm: metered code's fuel (see
    /// `ephem_module`), which the caller writes back to the store. `None` after a host
    /// function or a raised trap, which left the store's fuel current.
    pub pinned: Option<i64>,
    /// The kind of a trap generated code raised without a signal (see [`raise_trap`]).
    pub raised: Option<ephem_module::TrapKind>,
    /// Set when no trap but an uncaught exception ended the call (see [`raise_thrown`]).
    pub thrown: bool,
}

/// One host-to-wasm call in progress on this thread.
struct CallState {
    saved_sp: usize,
    trap: TrapSite,
    /// The store the call runs in, for host functions it calls.
    store: *mut u8,
    /// This thread's stack limit for wasm, fixed by the outermost call.
    limit: usize,
    /// The call's deadline, as [`call`] was given it.
    deadline: Deadline,
    /// The call this one is inside of on this thread (null for the outermost).
    outer: *mut CallState,
    /// The frame pointer of the latest host call out of this call's wasm (see
    /// [`enter_host`]): where its wasm frames start while a call nested in that host call
    /// runs.
    exit_fp: usize,
}

/// What a call into wasm is interrupted by: its engine's epoch reaching its store's deadline.
#[derive(Clone, Copy)]
pub struct Deadline {
    pub epoch: *const AtomicU64,
    pub deadline: *const AtomicU64,
}

impl Deadline {
    /// Whether the deadline has passed.
    ///
    /// # Safety
    /// Both cells must be alive (they are, for the call's store and engine, while it runs).
    pub unsafe fn due(&self) -> bool {
        // SAFETY: per the contract.
        unsafe { interrupt::due(&*self.epoch, &*self.deadline) }
    }

    /// The deadline, an epoch.
    ///
    /// # Safety
    /// As for [`Deadline::due`].
    pub unsafe fn get(&self) -> u64 {
        // SAFETY: per the contract.
        unsafe { (*self.deadline).load(std::sync::atomic::Ordering::SeqCst) }
    }
}

thread_local! {
    static CURRENT: Cell<*mut CallState> = const { Cell::new(std::ptr::null_mut()) };
    static STACK_LOW: Cell<usize> = const { Cell::new(0) };
}

/// The store of the innermost call into wasm on this thread (null outside of one).
pub fn current_store() -> *mut u8 {
    let state = CURRENT.with(Cell::get);
    if state.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `state` is the CallState of a `call` frame still running on this thread.
    unsafe { (*state).store }
}

/// The store of the innermost call into wasm on this thread, from which its wasm calls a host
/// function through the stub whose frame is at `fp` (see `func::host_call`): kept, so that a
/// collection in a call nested in the host function finds this call's wasm frames.
pub fn enter_host(fp: usize) -> *mut u8 {
    let state = CURRENT.with(Cell::get);
    // SAFETY: a host call comes from wasm, inside a call whose CallState is alive on this
    // thread's stack; only this thread touches it.
    unsafe {
        (*state).exit_fp = fp;
        (*state).store
    }
}

/// Calls `f` with each stretch of `store`'s wasm frames on this thread, innermost first: the
/// frame pointer to follow from (for the innermost call `fp`, a stub's that its wasm called,
/// or with `None` the host call it is in, as for the others) and the entry's stack pointer,
/// above which none lies.
pub(crate) fn wasm_stretches(store: *mut u8, fp: Option<usize>, mut f: impl FnMut(usize, usize)) {
    let mut state = CURRENT.with(Cell::get);
    let mut from = fp.unwrap_or_else(|| match state.is_null() {
        true => 0,
        // SAFETY: the innermost call's CallState, alive on this thread's stack.
        false => unsafe { (*state).exit_fp },
    });
    while !state.is_null() {
        // SAFETY: the CallStates of the calls in progress on this thread, each alive on its
        // stack below the next outer one; only this thread touches them.
        let s = unsafe { &*state };
        if s.store == store && from != 0 {
            f(from, s.saved_sp);
        }
        state = s.outer;
        if !state.is_null() {
            // SAFETY: as above. The outer call's wasm is in the host call it made last.
            from = unsafe { (*state).exit_fp };
        }
    }
}

/// Whether the innermost call into wasm on this thread is past its deadline (false outside
/// of one).
pub fn interrupt_due() -> bool {
    let state = CURRENT.with(Cell::get);
    // SAFETY: `state` is the CallState of a `call` frame still running on this thread, whose
    // deadline cells outlive it.
    !state.is_null() && unsafe { (*state).deadline.due() }
}

/// Calls `callee` (code with the wasm signature) through `trampoline` with `values` as
/// arguments and results, in `store`, whose `limit_cell` every vmctx it made points at; wasm may
/// use `max_stack` bytes of stack below this call if it is the thread's outermost one (a nested
/// call keeps the outer limit). `deadline` stops it (see `interrupt`); the caller has published
/// it and checked it is not yet due. Returns where it trapped, if it did.
///
/// # Safety
/// `trampoline` must be the entry trampoline of `callee`'s type, `vmctx` a context `callee`
/// accepts, `values` large enough for the type's parameters and results, `limit_cell`
/// the store's stack-limit cell, `fuel` its fuel cell (metered code runs with it in the pinned
/// register, written back when the call returns) and `deadline`'s cells the store's and its
/// engine's, all valid for the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn call(
    store: *mut u8,
    limit_cell: *mut usize,
    fuel: *mut i64,
    max_stack: usize,
    deadline: Deadline,
    trampoline: *const u8,
    vmctx: *mut u8,
    callee: *const u8,
    values: *mut ValRaw,
) -> Result<(), Box<TrapSite>> {
    install_handlers();
    let outer = CURRENT.with(Cell::get);
    let limit = if outer.is_null() {
        let sp = approximate_sp();
        let low = stack_low() + HOST_RESERVE;
        sp.saturating_sub(max_stack).max(low)
    } else {
        // SAFETY: the outer call's state, on this thread's stack below us.
        unsafe { (*outer).limit }
    };
    // SAFETY: per the contract; generated code only reads the cell.
    unsafe { *limit_cell = limit };
    let mut state = CallState {
        saved_sp: 0,
        trap: TrapSite::default(),
        store,
        limit,
        deadline,
        outer,
        exit_fp: 0,
    };
    CURRENT.with(|c| c.set(&mut state));
    // SAFETY: per the contract; the stub restores every callee-saved register on both exits.
    let trapped = unsafe {
        arch::ephem_enter_wasm(&mut state.saved_sp, trampoline, vmctx, callee, values, fuel)
    };
    CURRENT.with(|c| c.set(outer));
    if trapped == 0 {
        Ok(())
    } else {
        Err(Box::new(state.trap))
    }
}

fn approximate_sp() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// The lowest usable address of this thread's stack (above its guard), cached per thread.
/// Computing it is the thread's first call into wasm, which also makes sure of its alternate
/// signal stack (see [`AltStack`]).
fn stack_low() -> usize {
    let cached = STACK_LOW.with(Cell::get);
    if cached != 0 {
        return cached;
    }
    let _ = ALT_STACK.try_with(|_| {});
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread; we destroy it after use.
    let low = unsafe {
        let mut attr = MaybeUninit::<libc::pthread_attr_t>::uninit();
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return 0;
        }
        let mut addr = std::ptr::null_mut();
        let mut size = 0;
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        if ok {
            addr as usize + libc::sysconf(libc::_SC_PAGESIZE) as usize
        } else {
            0
        }
    };
    STACK_LOW.with(|c| c.set(low));
    low
}

/// Bytes of alternate signal stack that a thread running wasm has at least. A fault handler's
/// frame and an interrupt's nested in it (see [`install_handlers`]) each hold the CPU's
/// register state, up to 11 KiB with AMX, where Rust gives its threads 8 KiB (`SIGSTKSZ`).
const ALT_STACK_BYTES: usize = 64 << 10;

thread_local! {
    static ALT_STACK: Option<AltStack> = AltStack::install();
}

/// An alternate signal stack of [`ALT_STACK_BYTES`] above a guard page, installed for this
/// thread because the one it had was smaller, and unmapped when the thread exits. (Rust's
/// thread teardown disables whatever alternate stack is installed and unmaps its own; this
/// one disables itself if it is still installed, so whichever runs first, no thread is left
/// with an alternate stack that is unmapped.)
struct AltStack {
    map: *mut std::ffi::c_void,
    len: usize,
    stack: *mut std::ffi::c_void,
}

impl AltStack {
    /// Installs one unless this thread's own is large enough. `None` too when that fails
    /// (memory or the kernel refused): the handlers still run, on the thread's own stack,
    /// which an interrupt nested in a fault handler may overflow on CPUs with large register
    /// state (with a 4 KiB stack, the `nested_signals` test spins instead of ending).
    fn install() -> Option<AltStack> {
        let mut old = MaybeUninit::<libc::stack_t>::uninit();
        // SAFETY: reads this thread's alternate stack into `old`.
        if unsafe { libc::sigaltstack(std::ptr::null(), old.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: sigaltstack succeeded and filled it.
        let old = unsafe { old.assume_init() };
        if old.ss_flags & libc::SS_DISABLE == 0 && old.ss_size >= ALT_STACK_BYTES {
            return None;
        }
        let guard = rustix::param::page_size();
        let len = guard + ALT_STACK_BYTES;
        // SAFETY: a new private mapping, which nothing else refers to.
        let map = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::empty(),
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .ok()?;
        let stack = map.wrapping_byte_add(guard);
        let installed = AltStack { map, len, stack };
        // SAFETY: the part above the guard page lies within the new mapping.
        unsafe {
            rustix::mm::mprotect(
                stack,
                ALT_STACK_BYTES,
                rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE,
            )
        }
        .ok()?;
        let new = libc::stack_t {
            ss_sp: stack,
            ss_flags: 0,
            ss_size: ALT_STACK_BYTES,
        };
        // SAFETY: `new` describes readable, writable memory this value keeps mapped while it
        // is installed; this thread is not on its alternate stack (it is not in a handler).
        if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
            return None;
        }
        Some(installed)
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        let mut current = MaybeUninit::<libc::stack_t>::uninit();
        // SAFETY: reads, then possibly disables, this thread's alternate stack; the thread is
        // exiting and runs no handler. The mapping is ours alone and no longer installed.
        unsafe {
            if libc::sigaltstack(std::ptr::null(), current.as_mut_ptr()) == 0
                && current.assume_init().ss_sp == self.stack
            {
                let disable = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&disable, std::ptr::null_mut());
            }
            let _ = rustix::mm::munmap(self.map, self.len);
        }
    }
}

const SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    INTERRUPT,
];

struct Previous(UnsafeCell<[MaybeUninit<libc::sigaction>; SIGNALS.len()]>);
// SAFETY: written once inside `Once::call_once` before any handler of ours can run, then only read.
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new([MaybeUninit::uninit(); SIGNALS.len()]));
static INSTALL: Once = Once::new();

/// Installs the handlers (once per process). Called before any call can publish a deadline.
pub fn install_handlers() {
    INSTALL.call_once(|| {
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: a zeroed sigaction is valid; we fill the handler, flags and mask, and
            // store the previous action in PREVIOUS before anything can read it.
            // SA_RESTART: an interrupt that lands in a host system call restarts it.
            // The fault handlers change no signal mask (SA_NODEFER, an empty mask): the kernel
            // then skips two of the four times a trap takes the process's signal lock (to
            // block signals for the handler, and to unblock them on its return), which threads
            // trapping at once take in turn (BENCHMARKS.md). So an interrupt may nest in a
            // fault handler, on the alternate stack, which `AltStack` makes large enough for
            // both. An interrupt's handler keeps further interrupts back, as by default.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
                if sig != INTERRUPT {
                    action.sa_flags |= libc::SA_NODEFER;
                }
                libc::sigemptyset(&mut action.sa_mask);
                let prev = (*PREVIOUS.0.get())[i].as_mut_ptr();
                if libc::sigaction(sig, &action, prev) != 0 {
                    panic!("cannot install the signal handler for signal {sig}");
                }
            }
        }
    });
}

/// Follows the frame-pointer chain from `fp` while it stays within `[sp, top)` (this thread's
/// stack between the fault and the entry stub) and its return addresses lie in published code.
fn record_callers(site: &mut TrapSite, sp: usize, mut fp: usize, top: usize) {
    while site.depth < MAX_FRAMES && fp >= sp && fp.is_multiple_of(8) && fp + 16 <= top {
        // SAFETY: `[fp, fp + 16)` lies in this thread's stack between the faulting frame and
        // the entry stub's, which is mapped and holds the saved frame pointer and return
        // address of a frame of generated code.
        let (next, ret) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        let Some((code_start, tag)) = registry::lookup(ret) else {
            break;
        };
        site.callers[site.depth] = CodeSite {
            pc: ret,
            code_start,
            tag,
        };
        site.depth += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
}

/// A frame of generated code stopped at a call that has a call site
/// (`ephem_module::CallSite`: handlers, or references that live across it), as
/// [`for_each_site_frame`] finds it.
pub(crate) struct SiteFrame<'a> {
    /// The module whose code the frame runs, and where that code's text starts.
    pub(crate) module: &'a crate::module::ModuleInner,
    pub(crate) code_start: usize,
    pub(crate) site: &'a ephem_module::ArchivedCallSite,
    /// The frame's stack pointer at the call, and its frame pointer.
    pub(crate) sp: usize,
    pub(crate) fp: usize,
}

/// Calls `f` with each frame of generated code above the one at `fp`, up to `top`, that is
/// stopped at a call with a call site whose frame, as the site describes it, lies between the
/// frame it called and `top` (metadata that says otherwise, only a forged artifact's, is not
/// followed). Stops at the first return address outside published code: what the exception
/// unwinder and the GC's roots both walk.
///
/// # Safety
/// `[fp, top)` is this thread's stack between a frame that generated code called (a stub's)
/// and the entry of the call into wasm it runs in.
pub(crate) unsafe fn for_each_site_frame(fp: usize, top: usize, mut f: impl FnMut(&SiteFrame<'_>)) {
    let mut frame = fp;
    while frame.is_multiple_of(8) && frame + 16 <= top {
        // SAFETY: `[frame, frame + 16)` lies in this thread's stack between the stub's frame
        // and the entry (per the contract): a saved frame pointer and a return address.
        let (caller_fp, ret) =
            unsafe { (*(frame as *const usize), *((frame + 8) as *const usize)) };
        let Some((code_start, code_tag)) = registry::lookup(ret) else {
            break;
        };
        // SAFETY: a registry tag is the `ModuleInner` of the published code, alive while the
        // store that runs this call is (see `trap`).
        let module = unsafe { &*(code_tag as *const crate::module::ModuleInner) };
        if let Some(site) = module.artifact.call_site((ret - code_start) as u32)
            && let Some(sp) = caller_fp.checked_sub(site.frame_offset.to_native() as usize)
            && frame + 16 <= sp
            && sp < caller_fp
            && caller_fp <= top
        {
            f(&SiteFrame {
                module,
                code_start,
                site,
                sp,
                fp: caller_fp,
            });
        }
        if caller_fp <= frame {
            break;
        }
        frame = caller_fp;
    }
}

/// Ends the innermost call into wasm on this thread because a host function failed (`signal`
/// 0) or returned past the call's deadline ([`INTERRUPT`]), without a signal: records the host
/// adapter's frame and the wasm frames above it, as the handler would, and continues at the
/// trap landing.
///
/// # Safety
/// `fp` must be the frame pointer of `ephem_host_call` as a host adapter called it (or of a
/// throw stub, `arch::ephem_throw`, as generated code called it), inside a call into wasm on
/// this thread, and every frame between here and that call's entry stub must be free of
/// destructors still to run.
pub unsafe fn raise_from_host(fp: usize, signal: libc::c_int) -> ! {
    let site = TrapSite {
        signal,
        ..TrapSite::default()
    };
    // SAFETY: per the contract; the site is the adapter's return address (a frame without a
    // function, left out of backtraces).
    unsafe { unwind_from_stub(fp, 0, site) }
}

/// Ends the innermost call into wasm on this thread with a trap of kind `kind` (a
/// `TrapKind::code`), which generated code raised by calling the `Raise` builtin
/// (`arch::ephem_raise`, which passes `fp`, its frame pointer, and `pinned`, the pinned
/// register: metered code's fuel, as a signal's context gives it) instead of running a
/// trapping instruction: no signal, which would cost the trapping invocation more and take
/// the process's signal lock, which threads trapping at once take in turn (BENCHMARKS.md).
///
/// # Safety
/// Called only by `ephem_raise`, from generated code inside a call into wasm on this thread
/// (directly, or by a jump from the stub that failed bounds checks call, which leaves their
/// function's return address for `ephem_raise`), whose frames have nothing to drop.
pub(crate) unsafe extern "C" fn raise_trap(
    _vmctx: *mut u8,
    kind: u32,
    fp: usize,
    pinned: i64,
) -> ! {
    let kind = ephem_module::TrapKind::from_code(kind);
    let site = TrapSite {
        raised: Some(kind.unwrap_or(ephem_module::TrapKind::Unreachable)),
        pinned: Some(pinned),
        ..TrapSite::default()
    };
    // SAFETY: per the contract; the site is the call (its return address less one), in the
    // function that raised.
    unsafe { unwind_from_stub(fp, 1, site) }
}

/// The stack pointer the entry stub of the innermost call into wasm on this thread saved:
/// every wasm frame of the call lies below it.
pub(crate) fn entry_sp() -> usize {
    let state = CURRENT.with(Cell::get);
    // SAFETY: only called inside a call into wasm, whose CallState is alive on this stack.
    unsafe { (*state).saved_sp }
}

/// Ends the innermost call into wasm on this thread because an exception reached it uncaught
/// (the store holds it as pending), from the stub whose frame is at `fp`; `pinned` is metered
/// code's fuel.
///
/// # Safety
/// As for [`raise_trap`]: `fp` is a stub's frame called by published code inside a call into
/// wasm on this thread, whose frames have nothing to drop.
pub(crate) unsafe fn raise_thrown(fp: usize, pinned: i64) -> ! {
    let site = TrapSite {
        thrown: true,
        pinned: Some(pinned),
        ..TrapSite::default()
    };
    // SAFETY: per the contract.
    unsafe { unwind_from_stub(fp, 1, site) }
}

/// Ends the innermost call into wasm on this thread from a stub that generated code called,
/// whose frame is at `fp`: records `site` at the stub's return address less `back`, and the
/// wasm frames above it as the handler would, then continues at the trap landing.
///
/// # Safety
/// `fp` must be the frame pointer of a stub (`ephem_host_call`, `ephem_raise`) called by
/// published code inside a call into wasm on this thread, and every frame between here and
/// that call's entry stub must be free of destructors still to run.
unsafe fn unwind_from_stub(fp: usize, back: usize, mut site: TrapSite) -> ! {
    let state = CURRENT.with(Cell::get);
    // SAFETY: per the contract, a call into wasm is running on this thread: `state` is its
    // CallState, and `[fp, fp + 16)` holds the caller's frame pointer and return address.
    let (state, caller_fp, ret) = unsafe {
        (
            &mut *state,
            *(fp as *const usize),
            *((fp + 8) as *const usize),
        )
    };
    let (code_start, tag) = registry::lookup(ret).expect("stubs are called from published code");
    site.at = CodeSite {
        pc: ret - back,
        code_start,
        tag,
    };
    state.trap = site;
    record_callers(&mut state.trap, fp, caller_fp, state.saved_sp);
    // SAFETY: `saved_sp` is the entry stub's, below every frame being abandoned, none of which
    // has anything left to drop (per the contract).
    unsafe { arch::ephem_unwind(state.saved_sp) }
}

/// Traps in wasm that arrived as signals on this thread (for diagnostics and tests: traps
/// that generated code raises itself, and host functions' failures, are not among them).
pub fn trap_signals() -> u64 {
    TRAP_SIGNALS.try_with(Cell::get).unwrap_or(0)
}

thread_local! {
    static TRAP_SIGNALS: Cell<u64> = const { Cell::new(0) };
}

unsafe extern "C" fn on_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid ucontext for SA_SIGINFO handlers.
    let uc = unsafe { &mut *context.cast::<libc::ucontext_t>() };
    let pc = arch::pc(uc);
    let state = CURRENT.with(Cell::get);
    if !state.is_null()
        && let Some((code_start, tag)) = registry::lookup(pc)
        // SAFETY: `state` is not null: the CallState of the call running on this thread, whose
        // deadline cells outlive it.
        && (signal != INTERRUPT || unsafe { (*state).deadline.due() })
    {
        let _ = TRAP_SIGNALS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: `state` points at the CallState of the `call` frame running on this thread.
        let state = unsafe { &mut *state };
        state.trap = TrapSite {
            at: CodeSite {
                pc,
                code_start,
                tag,
            },
            signal,
            pinned: Some(arch::pinned(uc)),
            ..TrapSite::default()
        };
        record_callers(&mut state.trap, arch::sp(uc), arch::fp(uc), state.saved_sp);
        arch::resume_at_landing(uc, state.saved_sp);
        return;
    }
    // Not a trap in wasm: do what would have happened without us.
    let i = SIGNALS
        .iter()
        .position(|&s| s == signal)
        .expect("only our signals");
    // SAFETY: PREVIOUS was filled before our handler was installed.
    let prev = unsafe { (*PREVIOUS.0.get())[i].assume_init_ref() };
    let no_handler = prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN;
    if signal == INTERRUPT && no_handler {
        // An interrupt that came too late or landed in host code (which checks the deadline
        // on its way back into wasm); ignored, as SIGURG is by default.
    } else if no_handler {
        // Restore it; returning re-runs the faulting instruction under the default action.
        // SAFETY: reinstalling a previously valid action.
        unsafe { libc::sigaction(signal, prev, std::ptr::null_mut()) };
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with this three-argument signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(signal, info, context);
    } else {
        // SAFETY: the previous handler was installed with the one-argument signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_handlers_change_no_signal_mask_and_interrupts_wait_for_theirs() {
        install_handlers();
        for &sig in &SIGNALS {
            let mut action = MaybeUninit::<libc::sigaction>::uninit();
            // SAFETY: reads the installed action.
            let action = unsafe {
                assert_eq!(
                    libc::sigaction(sig, std::ptr::null(), action.as_mut_ptr()),
                    0
                );
                action.assume_init()
            };
            assert_eq!(action.sa_sigaction, on_signal as *const () as usize);
            // SAFETY: the mask was filled by sigaction.
            let masked = (1..65).any(|s| unsafe { libc::sigismember(&action.sa_mask, s) } == 1);
            assert!(!masked, "signal {sig} masks others in its handler");
            let nodefer = action.sa_flags & libc::SA_NODEFER != 0;
            assert_eq!(nodefer, sig != INTERRUPT, "signal {sig}");
        }
    }
}
