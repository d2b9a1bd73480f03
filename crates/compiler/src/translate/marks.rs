//! Write marks, in code compiled with them (the default; `Compiler::without_write_marks`
//! leaves them out).
//!
//! Each store sets a byte per 4 KiB page of linear memory it writes, in the marks before the
//! memory's base (`ephem_module::MARK_SHIFT` says which page a store marks and why that covers
//! every byte it writes), so that the runtime resets a memory slot by visiting only the marked
//! pages, without a system call. A mark is set after its store, and once per block (and the
//! blocks it dominates) for one memory, index and window of offsets
//! ([`Translator::mark_written`]).

use cranelift_codegen::ir::InstBuilder;
use cranelift_codegen::ir::types::I8;
use ephem_module::{MARK_SHIFT, MARK_WINDOW};

use super::memory::Access;
use super::{Translator, trusted};

impl Translator<'_, '_> {
    /// Sets the write mark of a store (of at most 16 bytes) through `a` (see
    /// `ephem_module::MARK_SHIFT` for what it covers), unless a store earlier in this block,
    /// or in a block that dominates it, set the same one: marks stay set while the instance
    /// runs, and such a store has run whenever this one does.
    pub(super) fn mark_written(&mut self, a: &Access) {
        // A shared memory is never reset for another instance (and other threads write it).
        if !self.env.info.marks_writes || self.env.info.memories[a.memory as usize].shared {
            return;
        }
        let window = a.offset - a.offset % MARK_WINDOW;
        self.this_block();
        let key = (a.memory, a.index, window);
        if self.facts.marked.contains(&key) {
            return;
        }
        self.facts.marked.push(key);
        let at = if window == 0 {
            a.wide
        } else {
            self.b.ins().iadd_imm_u(a.wide, window as i64)
        };
        let page = self.b.ins().ushr_imm_u(at, i64::from(MARK_SHIFT));
        let mark = self.b.ins().iadd(a.base, page);
        let one = self.b.ins().iconst(I8, 1);
        let marks = trusted().with_alias_region(self.regions.map(|r| r.marks));
        let before = self.env.info.memories[a.memory as usize].marks_before();
        self.b.ins().store(marks, one, mark, -(before as i32));
    }
}
