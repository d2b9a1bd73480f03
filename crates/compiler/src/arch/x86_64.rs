//! x86-64 machine code: the filler and call displacements of a text, `hlt` for trap
//! instructions, and the branches of failed bounds checks with the stub they call.
//!
//! Everything here reads or writes encodings that Cranelift's x64 backend emits or that the
//! runtime's entry stub (the runtime's `arch::x86_64`) expects; the interface is [`Arch`].

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::{Final, MachBufferFinalized};
use ephem_module::TrapKind;

use super::{Arch, RaiseCall, Raised, StubLayout};
use crate::CompileError;

/// x86-64, as Cranelift's `x64` backend emits it.
pub struct X86_64;

impl Arch for X86_64 {
    /// `int3`.
    fn filler(&self) -> u8 {
        0xCC
    }

    fn links(&self, kind: Reloc) -> bool {
        matches!(kind, Reloc::X86CallPCRel4 | Reloc::X86PCRel4)
    }

    /// A 32-bit displacement, relative to `site` plus the addend.
    fn link(
        &self,
        text: &mut [u8],
        site: u32,
        target: u32,
        addend: i64,
    ) -> Result<(), CompileError> {
        let rel = i32::try_from(i64::from(target) + addend - i64::from(site))
            .map_err(|_| CompileError::Unsupported("text larger than 2 GiB".into()))?;
        text[site as usize..site as usize + 4].copy_from_slice(&rel.to_le_bytes());
        Ok(())
    }

    /// Each `ud2` becomes two `hlt`s. `ud2` raises an invalid-opcode exception, which KVM
    /// intercepts on every guest (to emulate the hypercall instructions), so each trap would
    /// cost a VM exit (BENCHMARKS.md). `hlt` in user mode raises a general-protection fault, a
    /// privilege check that comes before any VM exit, reported at the instruction as SIGSEGV,
    /// the signal of guard-page faults. The second `hlt` is never reached. A site that is not
    /// a `ud2` (a load whose fault is its trap) is left as it is.
    fn rewrite_traps(&self, code: &mut [u8], traps: &[(u32, TrapKind)]) {
        const UD2: [u8; 2] = [0x0f, 0x0b];
        const HLT_HLT: [u8; 2] = [0xf4, 0xf4];
        for &(site, _) in traps {
            let at = site as usize;
            if let Some(bytes) = code.get_mut(at..at + 2)
                && *bytes == UD2
            {
                bytes.copy_from_slice(&HLT_HLT);
            }
        }
    }

    fn raises_failed_checks(&self) -> bool {
        true
    }

    fn raise_failed_checks(
        &self,
        code: &mut Vec<u8>,
        emitted: &MachBufferFinalized<Final>,
        traps: &[(u32, TrapKind)],
        raised: &Raised,
    ) -> Option<RaiseCall> {
        raise_failed_checks(code, emitted, traps, raised)
    }

    fn raise_stub(&self, layout: &StubLayout) -> Vec<u8> {
        raise_stub(layout)
    }
}

/// Sends each failed check to a `call rel32` appended to the function, followed by two `hlt`s
/// (the [`RaiseCall`]'s trap). The stub raises the trap with no signal, because a signal's
/// delivery takes the process's signal lock twice, which threads trapping at once take in
/// turn; where it cannot, it returns to the `hlt`.
///
/// A check's branch is found by its source location: the code that carries it must start
/// with one compare and a `jcc rel32` (see [`branch_after_compare`]) whose target is the trap
/// instruction that carries the same location. A check whose code does not look exactly like
/// that keeps its trap instruction, which still traps by signal, as every other trap does.
fn raise_failed_checks(
    code: &mut Vec<u8>,
    emitted: &MachBufferFinalized<Final>,
    traps: &[(u32, TrapKind)],
    raised: &Raised,
) -> Option<RaiseCall> {
    // For each check: its trap instruction, and the code that branches there.
    let checks = raised.checks as usize;
    let mut trap_at = vec![None; checks];
    let mut branch_at = vec![None; checks];
    let trap_sites: std::collections::HashSet<u32> = (traps.iter())
        .filter(|&&(_, kind)| kind == TrapKind::MemoryOutOfBounds)
        .map(|&(at, _)| at)
        .collect();
    for range in emitted.get_srclocs_sorted() {
        let n = range.loc.bits() as usize;
        if range.loc.is_default() || n >= checks {
            continue;
        }
        if trap_sites.contains(&range.start) && range.end - range.start == 2 {
            trap_at[n] = Some(range.start);
        } else {
            branch_at[n] = Some(range.start as usize..range.end as usize);
        }
    }
    let call = code.len();
    let mut sent = 0;
    for (trap, range) in trap_at.into_iter().zip(branch_at) {
        let (Some(trap), Some(range)) = (trap, range) else {
            continue;
        };
        let Some(end) = branch_after_compare(&code[range.clone()]).map(|e| range.start + e) else {
            continue;
        };
        let rel = i32::from_le_bytes(code[end - 4..end].try_into().expect("4 bytes"));
        if end as i64 + i64::from(rel) != i64::from(trap) {
            continue;
        }
        let rel = (call - end) as i32;
        code[end - 4..end].copy_from_slice(&rel.to_le_bytes());
        sent += 1;
    }
    if sent == 0 {
        return None;
    }
    // call raise_stub (linked later); hlt, hlt
    code.extend_from_slice(&[0xe8, 0, 0, 0, 0, 0xf4, 0xf4]);
    Some(RaiseCall {
        site: call as u32 + 1,
        // The displacement counts from the end of the call, 4 bytes past it.
        addend: -4,
        trap: call as u32 + 5,
    })
}

/// The stub follows the frame pointers up from the function that called it while the return
/// address in each frame lies in this text's functions, and takes `Raise`'s address from the
/// entry stub's frame (`ephem_module::ENTRY_FRAME_RAISE`) once one lies in an entry
/// trampoline: the frame that one called was made by the entry stub's call into wasm. It
/// jumps there with the function's return address still on the stack, so `Raise` sees a call
/// from the function that failed. A frame pointer is only followed once a return address
/// shows that this text's code saved it; anywhere else (a function of another text called
/// this one) the stub returns, to the `hlt` after its call: a signal.
fn raise_stub(layout: &StubLayout) -> Vec<u8> {
    let mut c = Vec::new();
    // `lea rdx, [rip + target]`, with target an offset in the text.
    let lea_rdx = |c: &mut Vec<u8>, target: u32| {
        c.extend_from_slice(&[0x48, 0x8d, 0x15]);
        let next = layout.stub as i64 + c.len() as i64 + 4;
        c.extend_from_slice(&((i64::from(target) - next) as i32).to_le_bytes());
    };
    // A `jcc rel32` to a label in this code, patched once the label is placed.
    let jcc = |c: &mut Vec<u8>, cc: u8| {
        c.extend_from_slice(&[0x0f, cc, 0, 0, 0, 0]);
        c.len()
    };
    let bind = |c: &mut Vec<u8>, jumps: &[usize]| {
        for &end in jumps {
            let rel = (c.len() - end) as i32;
            c[end - 4..end].copy_from_slice(&rel.to_le_bytes());
        }
    };
    const JB: u8 = 0x82;
    const JAE: u8 = 0x83;
    let cmp_rcx_rdx = [0x48, 0x39, 0xd1];
    c.extend_from_slice(&[0x48, 0x89, 0xe8]); // mov rax, rbp
    let walk = c.len();
    c.extend_from_slice(&[0x48, 0x8b, 0x48, 0x08]); // mov rcx, [rax + 8]: the return address
    lea_rdx(&mut c, layout.trampolines.start);
    c.extend_from_slice(&cmp_rcx_rdx);
    let below_trampolines = jcc(&mut c, JB);
    lea_rdx(&mut c, layout.trampolines.end);
    c.extend_from_slice(&cmp_rcx_rdx);
    let in_trampoline = jcc(&mut c, JB);
    lea_rdx(&mut c, layout.functions_start);
    c.extend_from_slice(&cmp_rcx_rdx);
    let below_functions = jcc(&mut c, JB);
    lea_rdx(&mut c, layout.stub);
    c.extend_from_slice(&cmp_rcx_rdx);
    let past_functions = jcc(&mut c, JAE);
    c.extend_from_slice(&[0x48, 0x8b, 0x00]); // mov rax, [rax]: the caller's frame
    c.push(0xe9); // jmp walk
    let rel = walk as i64 - (c.len() as i64 + 4);
    c.extend_from_slice(&(rel as i32).to_le_bytes());
    bind(&mut c, &[in_trampoline]);
    c.extend_from_slice(&[0x48, 0x8b, 0x00]); // mov rax, [rax]: the trampoline's frame
    c.extend_from_slice(&[0x48, 0x8b, 0x00]); // mov rax, [rax]: the entry stub's frame
    // mov rax, [rax + ENTRY_FRAME_RAISE]
    c.extend_from_slice(&[0x48, 0x8b, 0x80]);
    c.extend_from_slice(&ephem_module::ENTRY_FRAME_RAISE.to_le_bytes());
    c.push(0xbe); // mov esi, kind
    c.extend_from_slice(&TrapKind::MemoryOutOfBounds.code().to_le_bytes());
    c.extend_from_slice(&[0xff, 0xe0]); // jmp rax
    bind(
        &mut c,
        &[below_trampolines, below_functions, past_functions],
    );
    c.push(0xc3); // ret
    c
}

/// The end of the `jcc rel32` that `code` (a check's code, from its first instruction on)
/// starts with after one integer compare or test between registers, or between a register
/// and an immediate or memory operand: the forms Cranelift emits for a check's `trapnz`.
/// Decoding from the first instruction, not searching, is what makes the branch certain: the
/// bytes after it (moves the register allocator placed there) and the compare's immediate
/// (a wasm constant) could hold the same bytes.
fn branch_after_compare(code: &[u8]) -> Option<usize> {
    let mut at = 0;
    if code.first().is_some_and(|b| b & 0xf0 == 0x40) {
        at += 1; // REX
    }
    let opcode = *code.get(at)?;
    at += 1;
    let modrm = |at: usize| -> Option<usize> {
        let m = *code.get(at)?;
        let (mode, rm) = (m >> 6, m & 7);
        if mode == 3 {
            return Some(1);
        }
        let sib = rm == 4;
        let base_is_disp32 = sib && code.get(at + 1)? & 7 == 5 && mode == 0;
        let disp = match mode {
            0 if rm == 5 || base_is_disp32 => 4,
            0 => 0,
            1 => 1,
            _ => 4,
        };
        Some(1 + usize::from(sib) + disp)
    };
    at += match opcode {
        // cmp and test, register or memory against register
        0x38 | 0x39 | 0x3a | 0x3b | 0x84 | 0x85 => modrm(at)?,
        // cmp against an immediate (/7)
        0x80 | 0x81 | 0x83 if (code.get(at)? >> 3) & 7 == 7 => {
            modrm(at)? + if opcode == 0x81 { 4 } else { 1 }
        }
        // cmp rax, imm32
        0x3d => 4,
        _ => return None,
    };
    let jcc = code.get(at..at + 6)?;
    (jcc[0] == 0x0f && jcc[1] & 0xf0 == 0x80).then_some(at + 6)
}

#[cfg(test)]
mod tests {
    use super::branch_after_compare;

    const JG: [u8; 6] = [0x0f, 0x8f, 0x10, 0, 0, 0];

    fn with_jg(compare: &[u8], after: &[u8]) -> Vec<u8> {
        [compare, &JG, after].concat()
    }

    /// The compare is decoded, not searched for: each form's length is exact, whatever bytes
    /// its operands or the code after the branch hold.
    #[test]
    fn a_checks_branch_is_found_after_each_form_of_compare() {
        let forms: [&[u8]; 7] = [
            &[0x48, 0x3b, 0xd0],                         // cmp rdx, rax
            &[0x4d, 0x39, 0xc1],                         // cmp r9, r8
            &[0x49, 0x81, 0xf8, 0x0f, 0x8f, 0x00, 0x00], // cmp r8, 0x8f0f
            &[0x48, 0x83, 0xf9, 0x0f],                   // cmp rcx, 15
            &[0x48, 0x3b, 0x44, 0x24, 0x10],             // cmp rax, [rsp + 16]
            &[0x48, 0x3b, 0x84, 0x24, 0x0f, 0x8f, 0, 0], // cmp rax, [rsp + 0x8f0f]
            &[0x84, 0xc0],                               // test al, al
        ];
        for compare in forms {
            // A move after the branch (which the register allocator may place there).
            let code = with_jg(compare, &[0x48, 0x8b, 0x84, 0x24, 0xe0, 3, 0, 0]);
            assert_eq!(
                branch_after_compare(&code),
                Some(compare.len() + 6),
                "{compare:02x?}"
            );
        }
    }

    #[test]
    fn anything_else_before_the_branch_is_not_a_check() {
        // A move between the compare and the branch.
        let moved = [&[0x48, 0x3b, 0xd0, 0x48, 0x89, 0xc1][..], &JG].concat();
        assert_eq!(branch_after_compare(&moved), None);
        // A branch straight away, an unconditional jump, a compare whose /r is not /7 (add).
        assert_eq!(branch_after_compare(&JG), None);
        assert_eq!(
            branch_after_compare(&with_jg(&[0xe9, 0, 0, 0, 0], &[])),
            None
        );
        assert_eq!(
            branch_after_compare(&with_jg(&[0x48, 0x81, 0xc0, 1, 0, 0, 0], &[])),
            None
        );
        // Cut short.
        assert_eq!(
            branch_after_compare(&[0x48, 0x3b, 0xd0, 0x0f, 0x8f, 0]),
            None
        );
    }
}
