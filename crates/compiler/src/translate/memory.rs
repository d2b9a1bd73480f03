//! Linear memory: loads, stores, and the memory operators (`memory.size`, `memory.grow`,
//! bulk memory and `data.drop`).
//!
//! An access's native address is `base + zext(index) + offset` (a 64-bit memory's index is not
//! extended: addresses, sizes and lengths are `i64` there, and the builtins take every memory's
//! as `i64`), with the base loaded from the
//! vmctx (it never moves while the instance lives, so the load is hoisted out of loops).
//! [`Translator::access`] makes it, with the bounds check where the code has them
//! (`bounds.rs`); stores then set their write mark (`marks.rs`). An access that faults is a
//! `MemoryOutOfBounds` trap. The operators that grow, fill, copy or initialise memory are
//! builtins (`builtins.rs`), which report out-of-bounds and other traps by a flag.

use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, TrapCode, Type, Value};
use ephem_module::Builtin;
use wasmparser::Operator;

use super::Translator;

/// A memory access: see [`Translator::access`].
pub(super) struct Access {
    /// The native address accessed.
    pub(super) addr: Value,
    /// The memory's base.
    pub(super) base: Value,
    pub(super) memory: u32,
    /// The wasm address operand, and the same zero-extended to 64 bits.
    pub(super) index: Value,
    pub(super) wide: Value,
    pub(super) offset: u64,
}

/// The memory a load or store accesses.
pub(super) fn memory_index(m: &wasmparser::MemArg) -> u32 {
    match m.target {
        wasmparser::MemArgTarget::Memory(i) => i,
        wasmparser::MemArgTarget::Array(_) => unreachable!("validated: no GC"),
    }
}

/// How a load widens what it reads to its type.
#[derive(Clone, Copy)]
enum LoadKind {
    Plain,
    S8,
    U8,
    S16,
    U16,
    S32,
    U32,
}

impl Translator<'_, '_> {
    /// An address or size of `memory` as the builtins take it: `i64` (a 32-bit memory's
    /// zero-extended).
    pub(super) fn widen(&mut self, memory: u32, v: Value) -> Value {
        match self.env.info.memories[memory as usize].memory64 {
            true => v,
            false => self.b.ins().uextend(I64, v),
        }
    }

    /// `v` as `i64`, zero-extended if it is an `i32`.
    fn uextend_to_i64(&mut self, v: Value) -> Value {
        match self.b.func.dfg.value_type(v) {
            I64 => v,
            _ => self.b.ins().uextend(I64, v),
        }
    }

    /// A size of `memory` (an `i64`) as wasm sees it: `i32` for a 32-bit memory (-1 stays -1).
    fn narrow(&mut self, memory: u32, v: Value) -> Value {
        match self.env.info.memories[memory as usize].memory64 {
            true => v,
            false => self.b.ins().ireduce(I32, v),
        }
    }

    /// Effective native address of a memory access.
    pub(super) fn address(&mut self, memory: u32, offset: u64, size: u32) -> Value {
        self.access(memory, offset, size).addr
    }

    /// A memory access of `size` bytes: its native address, and what
    /// [`Translator::mark_written`] needs. Code that checks bounds traps here when the access
    /// would end past the memory's current length (see [`Translator::check_bounds`]).
    pub(super) fn access(&mut self, memory: u32, offset: u64, size: u32) -> Access {
        let index = self.pop();
        let base = self.load_ptr(self.vmctx, self.env.offsets.memory_base(memory));
        let wide = self.widen(memory, index);
        // A memory bounded by faults is tight: a fault past its end is its check (a shared
        // one's sees another thread's growth as soon as the pages are open).
        if self.env.info.checks_memory(memory) {
            // (A 64-bit memory's offset may be anything: one past 64 GiB never fits.)
            let end = offset.saturating_add(u64::from(size)).min(1 << 40);
            self.check_bounds(memory, index, wide, end);
        }
        let addr = self.b.ins().iadd(base, wide);
        let addr = if offset == 0 {
            addr
        } else {
            self.b.ins().iadd_imm_u(addr, offset as i64)
        };
        Access {
            addr,
            base,
            memory,
            index,
            wide,
            offset,
        }
    }

    /// Flags of a linear-memory access.
    pub(super) fn heap(&self) -> MemFlagsData {
        MemFlagsData::new()
            .with_trap_code(Some(TrapCode::HEAP_OUT_OF_BOUNDS))
            .with_alias_region(self.regions.map(|r| r.heap))
    }

    fn load(&mut self, m: wasmparser::MemArg, ty: Type, kind: LoadKind) {
        let size = match kind {
            LoadKind::Plain => ty.bytes(),
            LoadKind::S8 | LoadKind::U8 => 1,
            LoadKind::S16 | LoadKind::U16 => 2,
            LoadKind::S32 | LoadKind::U32 => 4,
        };
        let addr = self.address(memory_index(&m), m.offset, size);
        let flags = self.heap();
        let ins = self.b.ins();
        let v = match kind {
            LoadKind::Plain => ins.load(ty, flags, addr, 0),
            LoadKind::S8 => ins.sload8(ty, flags, addr, 0),
            LoadKind::U8 => ins.uload8(ty, flags, addr, 0),
            LoadKind::S16 => ins.sload16(ty, flags, addr, 0),
            LoadKind::U16 => ins.uload16(ty, flags, addr, 0),
            LoadKind::S32 => ins.sload32(flags, addr, 0),
            LoadKind::U32 => ins.uload32(flags, addr, 0),
        };
        self.push(v);
    }

    fn store(&mut self, m: wasmparser::MemArg, width: Option<Type>) {
        let value = self.pop();
        let size = width.unwrap_or(self.b.func.dfg.value_type(value)).bytes();
        let a = self.access(memory_index(&m), m.offset, size);
        let value = match width {
            Some(w) => self.b.ins().ireduce(w, value),
            None => value,
        };
        let flags = self.heap();
        self.b.ins().store(flags, value, a.addr, 0);
        self.mark_written(&a);
    }

    /// Translates `op` if it is a load, a store or a memory operator; `false` if it is not.
    pub(super) fn memory_op(&mut self, op: &Operator<'_>) -> bool {
        use Operator as O;
        match *op {
            O::I32Load { memarg }
            | O::F32Load { memarg }
            | O::I64Load { memarg }
            | O::F64Load { memarg } => {
                let ty = match *op {
                    O::I32Load { .. } => I32,
                    O::I64Load { .. } => I64,
                    O::F32Load { .. } => F32,
                    _ => F64,
                };
                self.load(memarg, ty, LoadKind::Plain)
            }
            O::I32Load8S { memarg } => self.load(memarg, I32, LoadKind::S8),
            O::I32Load8U { memarg } => self.load(memarg, I32, LoadKind::U8),
            O::I32Load16S { memarg } => self.load(memarg, I32, LoadKind::S16),
            O::I32Load16U { memarg } => self.load(memarg, I32, LoadKind::U16),
            O::I64Load8S { memarg } => self.load(memarg, I64, LoadKind::S8),
            O::I64Load8U { memarg } => self.load(memarg, I64, LoadKind::U8),
            O::I64Load16S { memarg } => self.load(memarg, I64, LoadKind::S16),
            O::I64Load16U { memarg } => self.load(memarg, I64, LoadKind::U16),
            O::I64Load32S { memarg } => self.load(memarg, I64, LoadKind::S32),
            O::I64Load32U { memarg } => self.load(memarg, I64, LoadKind::U32),
            O::I32Store { memarg }
            | O::I64Store { memarg }
            | O::F32Store { memarg }
            | O::F64Store { memarg } => self.store(memarg, None),
            O::I32Store8 { memarg } | O::I64Store8 { memarg } => self.store(memarg, Some(I8)),
            O::I32Store16 { memarg } | O::I64Store16 { memarg } => self.store(memarg, Some(I16)),
            O::I64Store32 { memarg } => self.store(memarg, Some(I32)),
            O::MemorySize { mem } => {
                let len = self.current_length(mem);
                let log2 = self.env.info.memories[mem as usize].page_size_log2;
                let pages = self.b.ins().ushr_imm_u(len, i64::from(log2));
                let v = self.narrow(mem, pages);
                self.push(v);
            }
            O::MemoryGrow { mem } => {
                let delta = self.pop();
                let delta = self.widen(mem, delta);
                let m = self.iconst32(mem);
                let v = self.builtin(Builtin::MemoryGrow, &[m, delta]).unwrap();
                let v = self.narrow(mem, v);
                self.push(v);
            }
            O::MemoryFill { mem } => {
                let (dst, val, len) = self.pop3();
                let (dst, len) = (self.widen(mem, dst), self.widen(mem, len));
                let mem = self.iconst32(mem);
                self.checked_builtin(
                    Builtin::MemoryFill,
                    &[mem, dst, val, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::MemoryCopy { dst_mem, src_mem } => {
                let (dst, src, len) = self.pop3();
                let (dst, src) = (self.widen(dst_mem, dst), self.widen(src_mem, src));
                // The length is `i64` only between two 64-bit memories.
                let len = self.uextend_to_i64(len);
                let d = self.iconst32(dst_mem);
                let s = self.iconst32(src_mem);
                self.checked_builtin(
                    Builtin::MemoryCopy,
                    &[d, s, dst, src, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::MemoryInit { data_index, mem } => {
                let (dst, src, len) = self.pop3();
                let dst = self.widen(mem, dst);
                let m = self.iconst32(mem);
                let d = self.iconst32(data_index);
                self.checked_builtin(
                    Builtin::MemoryInit,
                    &[m, d, dst, src, len],
                    TrapCode::HEAP_OUT_OF_BOUNDS,
                );
            }
            O::DataDrop { data_index } => {
                let d = self.iconst32(data_index);
                self.builtin(Builtin::DataDrop, &[d]);
            }
            _ => return false,
        }
        true
    }
}
