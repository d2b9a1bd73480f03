//! Tables and references: `table.*`, `elem.drop`, `ref.null`, `ref.is_null`, `ref.as_non_null`
//! and `ref.func`.
//!
//! A table is a `VmTable` the vmctx points at: a length and an element buffer, checked against
//! the length on every access. Funcref elements are stored tagged (see `ephem_module::vmctx`):
//! 0 is an element never written, which the first read makes from a lazy table's initial
//! contents by a cold builtin call ([`Translator::funcref_element`]); `ref.func` of a
//! function that only lazy tables name makes its funcref by a builtin too. `table.set` also
//! sets the table's `code_wrote`, since it is the one write to the elements the runtime does
//! not see when it clears a pooled element buffer.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{InstBuilder, TrapCode, Value};
use ephem_module::{Builtin, VmOffsets};
use wasmparser::Operator;

use super::{Translator, trusted};
use crate::CompileError;
use crate::traps::code;

impl Translator<'_, '_> {
    /// An index or length of a table (an `i64` for a 64-bit table) as an `i32`: one past
    /// `u32::MAX` becomes `u32::MAX`, out of bounds for every table as that one was (a table
    /// holds fewer elements).
    pub(super) fn table_index(&mut self, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) != I64 {
            return v;
        }
        let most = self.b.ins().iconst(I64, u32::MAX as i64);
        let v = self.b.ins().umin(v, most);
        self.b.ins().ireduce(I32, v)
    }

    /// A size of `table` (an `i32`) as wasm sees it: an `i64` for a 64-bit table (-1 stays
    /// -1: no size reaches 2^31).
    fn table_size(&mut self, table: u32, v: Value) -> Value {
        match self.env.info.tables[table as usize].table64 {
            true => self.b.ins().sextend(I64, v),
            false => v,
        }
    }

    /// Pointer to table `table`'s `VmTable`.
    fn table(&mut self, table: u32) -> Value {
        self.load_ptr(self.vmctx, self.env.offsets.table(table))
    }

    /// Address of element `index` of `table`, trapping with `trap` when out of bounds.
    pub(super) fn table_slot(&mut self, table: u32, index: Value, trap: TrapCode) -> Value {
        let t = self.table(table);
        let len = self
            .b
            .ins()
            .load(I32, trusted(), t, VmOffsets::TABLE_LENGTH as i32);
        let oob = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, index, len);
        self.b.ins().trapnz(oob, trap);
        let elements = self
            .b
            .ins()
            .load(I64, trusted(), t, VmOffsets::TABLE_ELEMENTS as i32);
        let index = self.b.ins().uextend(I64, index);
        let offset = self.b.ins().ishl_imm_u(index, 3);
        self.b.ins().iadd(elements, offset)
    }

    /// Whether `table` holds funcrefs (stored tagged: see `ephem_module::vmctx`).
    fn holds_funcrefs(&self, table: u32) -> bool {
        self.env.info.tables[table as usize].elem.is_func_ref()
    }

    /// The funcref in element `index` of funcref table `table`, at `slot`: untagged, and made
    /// by the runtime (a cold call) if it was never written.
    pub(super) fn funcref_element(&mut self, table: u32, index: Value, slot: Value) -> Value {
        let raw = self.b.ins().load(I64, trusted(), slot, 0);
        let make = self.b.create_block();
        let join = self.b.create_block();
        let tagged = self.b.append_block_param(join, I64);
        self.b.set_cold_block(make);
        self.b.ins().brif(raw, join, &[raw.into()], make, &[]);
        self.b.switch_to_block(make);
        let t = self.iconst32(table);
        let made = self.builtin(Builtin::TableLazy, &[t, index]).unwrap();
        self.b.ins().jump(join, &[made.into()]);
        self.b.switch_to_block(join);
        self.b
            .ins()
            .band_imm_s(tagged, !(VmOffsets::FUNCREF_WRITTEN as i64))
    }

    /// Translates `op` if it is a table or reference operator; `false` if it is not.
    pub(super) fn table_op(&mut self, op: &Operator<'_>) -> Result<bool, CompileError> {
        use Operator as O;
        match *op {
            O::TableGet { table } => {
                let index = self.pop();
                let index = self.table_index(index);
                let slot = self.table_slot(table, index, code::TABLE_OUT_OF_BOUNDS);
                let v = if self.holds_funcrefs(table) {
                    self.funcref_element(table, index, slot)
                } else {
                    self.b.ins().load(I64, trusted(), slot, 0)
                };
                self.push(v);
            }
            O::TableSet { table } => {
                let (index, value) = self.pop2();
                let index = self.table_index(index);
                let slot = self.table_slot(table, index, code::TABLE_OUT_OF_BOUNDS);
                let value = if self.holds_funcrefs(table) {
                    self.b
                        .ins()
                        .bor_imm_u(value, VmOffsets::FUNCREF_WRITTEN as i64)
                } else {
                    value
                };
                self.b.ins().store(trusted(), value, slot, 0);
                let t = self.table(table);
                let wrote = self.b.ins().iconst(I32, 1);
                self.b
                    .ins()
                    .store(trusted(), wrote, t, VmOffsets::TABLE_CODE_WROTE as i32);
            }
            O::TableSize { table } => {
                let t = self.table(table);
                let v = self
                    .b
                    .ins()
                    .load(I32, trusted(), t, VmOffsets::TABLE_LENGTH as i32);
                let v = self.table_size(table, v);
                self.push(v);
            }
            O::TableGrow { table } => {
                let (init, delta) = self.pop2();
                let delta = self.table_index(delta);
                let t = self.iconst32(table);
                let v = self.builtin(Builtin::TableGrow, &[t, delta, init]).unwrap();
                let v = self.table_size(table, v);
                self.push(v);
            }
            O::TableFill { table } => {
                let (dst, val, len) = self.pop3();
                let (dst, len) = (self.table_index(dst), self.table_index(len));
                let t = self.iconst32(table);
                self.checked_builtin(
                    Builtin::TableFill,
                    &[t, dst, val, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::TableCopy {
                dst_table,
                src_table,
            } => {
                let (dst, src, len) = self.pop3();
                let (dst, src) = (self.table_index(dst), self.table_index(src));
                let len = self.table_index(len);
                let d = self.iconst32(dst_table);
                let s = self.iconst32(src_table);
                self.checked_builtin(
                    Builtin::TableCopy,
                    &[d, s, dst, src, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::TableInit { elem_index, table } => {
                let (dst, src, len) = self.pop3();
                let dst = self.table_index(dst);
                let t = self.iconst32(table);
                let e = self.iconst32(elem_index);
                self.checked_builtin(
                    Builtin::TableInit,
                    &[t, e, dst, src, len],
                    code::TABLE_OUT_OF_BOUNDS,
                );
            }
            O::ElemDrop { elem_index } => {
                let e = self.iconst32(elem_index);
                self.builtin(Builtin::ElemDrop, &[e]);
            }
            O::RefNull { .. } => {
                let v = self.b.ins().iconst(I64, 0);
                self.push(v);
            }
            O::RefIsNull => self.eqz(),
            O::RefAsNonNull => {
                let r = *self.stack.last().expect("validated");
                self.b.ins().trapz(r, code::NULL_REFERENCE);
            }
            O::RefFunc { function_index } => {
                let imported = self.env.info.imported_funcs;
                let layout = self.env.layout;
                let slot = layout.slot(imported, function_index).ok_or_else(|| {
                    CompileError::Unsupported(format!(
                        "ref.func {function_index} of an undeclared function"
                    ))
                })?;
                let v = if layout.is_lazy(imported, slot) {
                    // Only a lazy table names it: its slot is written on first use.
                    let f = self.iconst32(function_index);
                    self.builtin(Builtin::RefFunc, &[f]).unwrap()
                } else {
                    self.b
                        .ins()
                        .iadd_imm_u(self.vmctx, self.env.offsets.funcref(slot) as i64)
                };
                self.known_funcs.push((v, function_index));
                self.push(v);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
