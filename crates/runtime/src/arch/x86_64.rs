//! x86_64 Linux: the entry stub and trap landing, and the registers the signal handler reads
//! and rewrites.
//!
//! `ephem_enter_wasm(saved_sp, trampoline, vmctx, callee, values, fuel)` saves the
//! callee-saved registers, stores its stack pointer at `saved_sp`, loads `*fuel` into the
//! pinned register `r15` (metered code's fuel, see `ephem_module`), and calls
//! `trampoline(vmctx, callee, values)`; it writes `r15` back to `*fuel` and returns 0.
//! `ephem_trap_landing`, entered by the signal handler with the stack pointer set back to the
//! saved one, restores the registers and returns 1 from the stub instead (the handler took
//! `r15` from the signal's context).
//!
//! Host functions unwind the same way without a signal: adapters call them through
//! `ephem_host_call`, which gives `func::host_call` its own frame pointer (the start of the
//! chain of wasm frames above it) so that a failed host call can record where it was and
//! `ephem_unwind` to the landing directly. It also passes `r15` and sets it to what
//! `host_call` returns: the fuel after the host function, or `r15` unchanged. Generated code
//! raises the traps it can name without a signal the same way, through `ephem_raise`, which
//! also passes `r15` (metered code's fuel). `ephem_enter_wasm` keeps `ephem_raise`'s address
//! at `ephem_module::ENTRY_FRAME_RAISE` from its frame pointer, where a failed bounds check
//! finds it by following frame pointers (see `raise_failed_checks` in the compiler's `arch`).
//!
//! Exceptions are thrown through `ephem_throw` and `ephem_throw_ref` the same way (they pass
//! their frame pointer and `r15` to the unwinder, `exceptions::unwind`), and enter a handler
//! through `ephem_resume`, which sets the stack and frame pointers, `rax` (the exception) and
//! `r15` (metered code's fuel) and jumps.
//!
//! Every stub keeps the System V calling convention towards Rust and generated code alike,
//! and keeps a frame pointer, so that the handler and the unwinding stubs can follow the chain
//! of wasm frames; none allocates or makes a system call.

use ephem_module::ValRaw;

// Five saved registers and the slot below them.
const _: () = assert!(ephem_module::ENTRY_FRAME_RAISE == -48);

std::arch::global_asm!(
    ".text",
    ".globl ephem_enter_wasm",
    ".type ephem_enter_wasm,@function",
    "ephem_enter_wasm:",
    "push rbp",
    "mov rbp, rsp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "sub rsp, 8",
    // At ENTRY_FRAME_RAISE (rbp - 48): what failed checks call.
    "lea rax, [rip + ephem_raise]",
    "mov [rsp], rax",
    "mov [rdi], rsp",
    "mov rbx, r9",
    "mov r15, [rbx]",
    "mov rax, rsi",
    "mov rdi, rdx",
    "mov rsi, rcx",
    "mov rdx, r8",
    "call rax",
    "mov [rbx], r15",
    "xor eax, eax",
    "2:",
    "add rsp, 8",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    ".globl ephem_trap_landing",
    "ephem_trap_landing:",
    "mov eax, 1",
    "jmp 2b",
    ".globl ephem_unwind",
    "ephem_unwind:",
    "mov rsp, rdi",
    "jmp ephem_trap_landing",
    ".globl ephem_host_call",
    ".type ephem_host_call,@function",
    "ephem_host_call:",
    "push rbp",
    "mov rbp, rsp",
    "mov rcx, rbp",
    "mov r8, r15",
    "call {host_call}",
    "mov r15, rax",
    "pop rbp",
    "ret",
    ".globl ephem_raise",
    ".type ephem_raise,@function",
    "ephem_raise:",
    "push rbp",
    "mov rbp, rsp",
    "mov rdx, rbp",
    "mov rcx, r15",
    "call {raise_trap}",
    "ud2",
    ".globl ephem_throw",
    ".type ephem_throw,@function",
    "ephem_throw:",
    "push rbp",
    "mov rbp, rsp",
    "mov rcx, rbp",
    "mov r8, r15",
    "call {throw_new}",
    "ud2",
    ".globl ephem_throw_ref",
    ".type ephem_throw_ref,@function",
    "ephem_throw_ref:",
    "push rbp",
    "mov rbp, rsp",
    "mov rdx, rbp",
    "mov rcx, r15",
    "call {throw_ref}",
    "ud2",
    ".globl ephem_resume",
    ".type ephem_resume,@function",
    "ephem_resume:",
    "mov rsp, rdi",
    "mov rbp, rsi",
    "mov rax, rcx",
    "mov r15, r8",
    "jmp rdx",
    // The builtins that allocate GC objects, which may collect: each passes its frame pointer
    // as the sixth argument (they take at most five).
    ".globl ephem_gc_alloc",
    ".type ephem_gc_alloc,@function",
    "ephem_gc_alloc:",
    "push rbp",
    "mov rbp, rsp",
    "mov r9, rbp",
    "call {gc_alloc}",
    "pop rbp",
    "ret",
    ".globl ephem_array_new",
    ".type ephem_array_new,@function",
    "ephem_array_new:",
    "push rbp",
    "mov rbp, rsp",
    "mov r9, rbp",
    "call {array_new}",
    "pop rbp",
    "ret",
    ".globl ephem_array_new_data",
    ".type ephem_array_new_data,@function",
    "ephem_array_new_data:",
    "push rbp",
    "mov rbp, rsp",
    "mov r9, rbp",
    "call {array_new_data}",
    "pop rbp",
    "ret",
    ".globl ephem_array_new_elem",
    ".type ephem_array_new_elem,@function",
    "ephem_array_new_elem:",
    "push rbp",
    "mov rbp, rsp",
    "mov r9, rbp",
    "call {array_new_elem}",
    "pop rbp",
    "ret",
    host_call = sym crate::func::host_call,
    gc_alloc = sym crate::builtins::gc_alloc_from,
    array_new = sym crate::builtins::array_new_from,
    array_new_data = sym crate::builtins::array_new_data_from,
    array_new_elem = sym crate::builtins::array_new_elem_from,
    raise_trap = sym crate::signals::raise_trap,
    throw_new = sym crate::exceptions::throw_new,
    throw_ref = sym crate::exceptions::throw_ref,
);

unsafe extern "C" {
    pub fn ephem_enter_wasm(
        saved_sp: *mut usize,
        trampoline: *const u8,
        vmctx: *mut u8,
        callee: *const u8,
        values: *mut ValRaw,
        fuel: *mut i64,
    ) -> u32;
    fn ephem_trap_landing();
    /// Continues at the trap landing with stack pointer `sp` (the one `ephem_enter_wasm`
    /// saved): the call into wasm returns 1.
    pub fn ephem_unwind(sp: usize) -> !;
    /// What host adapters call: `func::host_call` with this frame's pointer as a fourth
    /// argument.
    pub fn ephem_host_call(ctx: *mut u8, caller_vmctx: *mut u8, values: *mut ValRaw);
    /// The `Raise` builtin: `signals::raise_trap` with this frame's pointer and the pinned
    /// register as third and fourth arguments. Never returns.
    pub fn ephem_raise(vmctx: *mut u8, kind: u32);
    /// The `Throw` builtin: `exceptions::throw_new` with this frame's pointer and the pinned
    /// register as fourth and fifth arguments. Generated code calls it with its `tail`
    /// convention, whose first arguments are where the native one's are. Never returns.
    pub fn ephem_throw(vmctx: *mut u8, tag: u32, values: u64);
    /// The `ThrowRef` builtin: `exceptions::throw_ref` with this frame's pointer and the
    /// pinned register as third and fourth arguments, called as `ephem_throw` is.
    pub fn ephem_throw_ref(vmctx: *mut u8, exn: u64);
    /// The `GcAlloc` builtin: `builtins::gc_alloc_from` with this frame's pointer as sixth
    /// argument, so that a collection finds the wasm frames above it. `ephem_array_new`,
    /// `ephem_array_new_data` and `ephem_array_new_elem` do the same for theirs.
    pub fn ephem_gc_alloc(vmctx: *mut u8, ty: u32, len: u32) -> u64;
    pub fn ephem_array_new(vmctx: *mut u8, ty: u32, len: u32, lo: u64, hi: u64) -> u64;
    pub fn ephem_array_new_data(vmctx: *mut u8, ty: u32, data: u32, src: u32, len: u32) -> u64;
    pub fn ephem_array_new_elem(vmctx: *mut u8, ty: u32, elem: u32, src: u32, len: u32) -> u64;
    /// Enters an exception handler at `pc` with stack pointer `sp`, frame pointer `fp`, the
    /// exception's record in the first return register and `fuel` in the pinned register:
    /// where a `try_call` lands, every other register counts as clobbered.
    pub fn ephem_resume(
        sp: usize,
        fp: usize,
        pc: usize,
        record: *mut ephem_module::ValRaw,
        fuel: i64,
    ) -> !;
}

/// The faulting instruction's address.
pub fn pc(uc: &libc::ucontext_t) -> usize {
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize
}

/// The interrupted thread's stack pointer.
pub fn sp(uc: &libc::ucontext_t) -> usize {
    uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize
}

/// The interrupted thread's pinned register: metered code's fuel as of its last call or return.
pub fn pinned(uc: &libc::ucontext_t) -> i64 {
    uc.uc_mcontext.gregs[libc::REG_R15 as usize]
}

/// The interrupted thread's frame pointer.
pub fn fp(uc: &libc::ucontext_t) -> usize {
    uc.uc_mcontext.gregs[libc::REG_RBP as usize] as usize
}

/// Makes the interrupted thread resume at the trap landing with stack pointer `sp` (the one
/// `ephem_enter_wasm` saved).
pub fn resume_at_landing(uc: &mut libc::ucontext_t, sp: usize) {
    uc.uc_mcontext.gregs[libc::REG_RSP as usize] = sp as i64;
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] = ephem_trap_landing as *const () as usize as i64;
}
