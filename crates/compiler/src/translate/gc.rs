//! GC's instructions: structs, arrays, `i31`, `ref.eq`, casts, and the conversions between
//! `anyref` and `externref` (the layout and the reference encoding are `ephem_module::gc`'s).
//!
//! Objects are bumped into the store's GC heap inline while they fit (`Translator::alloc`), and
//! made by a builtin otherwise (which makes the heap on the first allocation and grows it);
//! bulk array operations are builtins, but for short copies. Fields and elements are read and
//! written inline at the heap's base plus the reference. A reference of a concrete type is trusted to be an object of that type (the
//! validator proved it, and the runtime checks every reference the host passes in), so a
//! field access checks only for null and an array access its index against the length. Each
//! address is the base plus a 32-bit offset plus at most a struct's size, which cannot leave
//! the heap's slot (see `ephem_module::gc`), whatever the reference holds.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I16, I32, I64, I64X2};
use cranelift_codegen::ir::{self, InstBuilder, MemFlagsData, TrapCode, Value};
use ephem_module::gc::{self, HOST_TAG, I31_TAG};
use ephem_module::{
    Builtin, HeapType, RefType, StorageType, TypeDef, ValType, VmGcHeap, VmOffsets,
};
use wasmparser::Operator;

use super::{Translator, ir_type, readonly, trusted};
use crate::CompileError;
use crate::traps::code;

/// How a packed field is read: sign- or zero-extended (a field of a value type ignores it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extend {
    Signed,
    Unsigned,
}

/// Flags of an access to an object's field or element: never a fault (see the module
/// documentation), and a `v128` one at any alignment.
fn field_flags(storage: StorageType) -> MemFlagsData {
    match storage {
        StorageType::Val(ValType::V128) => MemFlagsData::new()
            .with_notrap()
            .with_endianness(ir::Endianness::Little),
        _ => trusted(),
    }
}

impl<'a> Translator<'a, '_> {
    /// The store's GC heap base: loaded where it is used, since the first allocation (in any
    /// call) sets it.
    fn gc_base(&mut self) -> Value {
        let heap = (self.b.ins()).load(I64, readonly(), self.vmctx, VmOffsets::GC_HEAP as i32);
        self.b.ins().load(I64, trusted(), heap, 0)
    }

    /// The address of object `r` (not null, not an `i31`) in the heap.
    fn object(&mut self, r: Value) -> Value {
        let base = self.gc_base();
        self.b.ins().iadd(base, r)
    }

    /// The canonical id of the module's type `ty`.
    fn canonical_id(&mut self, ty: u32) -> Value {
        let at = self.env.offsets.type_id(ty) as i32;
        self.b.ins().load(I32, readonly(), self.vmctx, at)
    }

    /// Struct type `ty`'s fields and where they are.
    fn struct_fields(&self, ty: u32) -> (&'a [ephem_module::FieldType], &'a gc::StructLayout) {
        let env = self.env;
        match (&env.info.types[ty as usize], &env.layouts[ty as usize]) {
            (TypeDef::Struct(fields), Some(layout)) => (fields, layout),
            _ => unreachable!("validated: a struct type"),
        }
    }

    /// Field `f` of struct type `ty`: what it stores and where.
    fn field(&self, ty: u32, f: u32) -> (StorageType, u32) {
        let (fields, layout) = self.struct_fields(ty);
        (fields[f as usize].storage, layout.offsets[f as usize])
    }

    fn array_elem(&self, ty: u32) -> StorageType {
        match &self.env.info.types[ty as usize] {
            TypeDef::Array(elem) => elem.storage,
            _ => unreachable!("validated: an array type"),
        }
    }

    /// Reads a field or element of `storage` at `addr + offset`.
    fn load_field(&mut self, storage: StorageType, ext: Extend, addr: Value, offset: u32) -> Value {
        let (flags, offset) = (field_flags(storage), offset as i32);
        match (storage, ext) {
            (StorageType::I8, Extend::Signed) => self.b.ins().sload8(I32, flags, addr, offset),
            (StorageType::I8, Extend::Unsigned) => self.b.ins().uload8(I32, flags, addr, offset),
            (StorageType::I16, Extend::Signed) => self.b.ins().sload16(I32, flags, addr, offset),
            (StorageType::I16, Extend::Unsigned) => self.b.ins().uload16(I32, flags, addr, offset),
            (StorageType::Val(t), _) => self.b.ins().load(ir_type(t), flags, addr, offset),
        }
    }

    /// Writes `v` into a field or element of `storage` at `addr + offset`.
    fn store_field(&mut self, storage: StorageType, v: Value, addr: Value, offset: u32) {
        let (flags, offset) = (field_flags(storage), offset as i32);
        match storage {
            StorageType::I8 => self.b.ins().istore8(flags, v, addr, offset),
            StorageType::I16 => self.b.ins().istore16(flags, v, addr, offset),
            StorageType::Val(_) => {
                let v = self.canonical(v);
                self.b.ins().store(flags, v, addr, offset)
            }
        };
    }

    /// `v` (a value of `storage`) as the two words array builtins take: its low 8 bytes and
    /// its high 8.
    fn as_words(&mut self, storage: StorageType, v: Value) -> [Value; 2] {
        let zero = self.b.ins().iconst(I64, 0);
        let low = match storage {
            StorageType::I8 => {
                let v = self.b.ins().ireduce(I8, v);
                self.b.ins().uextend(I64, v)
            }
            StorageType::I16 => {
                let v = self.b.ins().ireduce(I16, v);
                self.b.ins().uextend(I64, v)
            }
            StorageType::Val(ValType::I32) => self.b.ins().uextend(I64, v),
            StorageType::Val(ValType::F32) => {
                let v = self.b.ins().bitcast(I32, MemFlagsData::new(), v);
                self.b.ins().uextend(I64, v)
            }
            StorageType::Val(ValType::F64) => self.b.ins().bitcast(I64, MemFlagsData::new(), v),
            StorageType::Val(ValType::I64 | ValType::Ref(_)) => v,
            StorageType::Val(ValType::V128) => {
                let v = self.lanes(v, I64X2);
                let low = self.b.ins().extractlane(v, 0);
                let high = self.b.ins().extractlane(v, 1);
                return [low, high];
            }
        };
        [low, zero]
    }

    /// Calls a GC builtin that makes an object: the object, or a trap by its GC flag.
    fn gc_make(&mut self, which: Builtin, args: &[Value], segment: TrapCode) -> Value {
        let r = self.builtin(which, args).expect("has a result");
        let flagged = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, r, gc::ALIGN as i64);
        let make = self.b.create_block();
        let join = self.b.create_block();
        self.b.set_cold_block(make);
        self.b.ins().brif(flagged, make, &[], join, &[]);
        self.b.seal_block(make);
        self.b.switch_to_block(make);
        let flag = self.b.ins().ireduce(I32, r);
        self.gc_trap(flag, segment);
        self.b.ins().jump(join, &[]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        r
    }

    /// Calls a GC builtin that returns a GC flag, and traps by it.
    fn gc_checked(&mut self, which: Builtin, args: &[Value], segment: TrapCode) {
        let flag = self.builtin(which, args).expect("has a result");
        self.gc_trap(flag, segment);
    }

    /// Traps by GC flag `flag` (none when 0).
    fn gc_trap(&mut self, flag: Value, segment: TrapCode) {
        for (value, trap) in [
            (2, code::OUT_OF_FUEL),
            (3, code::INTERRUPTED),
            (4, code::GC_HEAP_EXHAUSTED),
            (5, segment),
        ] {
            let is = self.b.ins().icmp_imm_u(IntCC::Equal, flag, value);
            self.b.ins().trapnz(is, trap);
        }
        self.b.ins().trapnz(flag, code::ARRAY_OUT_OF_BOUNDS);
    }

    /// A new object of module type `ty` (`len` elements for an array), zero past its header:
    /// bumped into the heap inline while it fits (see `ephem_module::VmGcHeap`), made by the
    /// runtime (a cold call) when it does not, or before the heap exists.
    fn alloc(&mut self, ty: u32, len: Value) -> Value {
        let (size, word) = match &self.env.info.types[ty as usize] {
            TypeDef::Struct(_) => {
                let size = self.struct_fields(ty).1.size;
                (self.b.ins().iconst(I64, size as i64), self.canonical_id(ty))
            }
            TypeDef::Array(elem) => {
                // (At most 2^36 bytes: past the heap's end, whatever it holds.)
                let bytes = self.b.ins().uextend(I64, len);
                let bytes = (self.b.ins()).imul_imm_u(bytes, gc::storage_size(elem.storage) as i64);
                let rounded = gc::HEADER as i64 + gc::ALIGN as i64 - 1;
                let bytes = self.b.ins().iadd_imm_u(bytes, rounded);
                let size = self.b.ins().band_imm_u(bytes, -(gc::ALIGN as i64));
                let id = self.canonical_id(ty);
                (size, self.b.ins().bor_imm_u(id, gc::ARRAY_BIT as i64))
            }
            TypeDef::Func(_) => unreachable!("validated: a struct or array type"),
        };
        let heap = (self.b.ins()).load(I64, readonly(), self.vmctx, VmOffsets::GC_HEAP as i32);
        let next = (self.b.ins()).load(I64, trusted(), heap, VmGcHeap::NEXT as i32);
        let end = (self.b.ins()).load(I64, trusted(), heap, VmGcHeap::END as i32);
        let after = self.b.ins().iadd(next, size);
        let mut fits = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, after, end);
        if let TypeDef::Array(_) = self.env.info.types[ty as usize] {
            // No larger object is made (the runtime refuses it; a collector could not copy it).
            let small = (self.b.ins()).icmp_imm_u(
                IntCC::UnsignedLessThanOrEqual,
                size,
                gc::MAX_OBJECT as i64,
            );
            fits = self.b.ins().band(fits, small);
        }
        let bump = self.b.create_block();
        let ask = self.b.create_block();
        let join = self.b.create_block();
        let r = self.b.append_block_param(join, I64);
        self.b.set_cold_block(ask);
        self.b.ins().brif(fits, bump, &[], ask, &[]);
        self.b.seal_block(bump);
        self.b.seal_block(ask);
        self.b.switch_to_block(bump);
        (self.b.ins()).store(trusted(), after, heap, VmGcHeap::NEXT as i32);
        let base = (self.b.ins()).load(I64, trusted(), heap, VmGcHeap::BASE as i32);
        let obj = self.b.ins().iadd(base, next);
        (self.b.ins()).store(trusted(), word, obj, gc::TYPE_ID as i32);
        // An array's length, or a struct type's depth (see `ephem_module::gc`).
        let second = match self.env.info.types[ty as usize] {
            TypeDef::Array(_) => len,
            _ => self.iconst32(self.env.info.depth(ty)),
        };
        (self.b.ins()).store(trusted(), second, obj, gc::LENGTH as i32);
        self.b.ins().jump(join, &[next.into()]);
        self.b.switch_to_block(ask);
        let t = self.iconst32(ty);
        let made = self.gc_make(Builtin::GcAlloc, &[t, len], code::GC_HEAP_EXHAUSTED);
        self.b.ins().jump(join, &[made.into()]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        r
    }

    /// `r` (a non-null array's reference) checked for element `index`: its address, the
    /// element's offset from the heap's base computed in 32 bits (see the module
    /// documentation).
    fn element(&mut self, ty: u32, r: Value, index: Value) -> Value {
        let obj = self.object(r);
        let len = self.b.ins().load(I32, trusted(), obj, gc::LENGTH as i32);
        let out = (self.b.ins()).icmp(IntCC::UnsignedGreaterThanOrEqual, index, len);
        self.b.ins().trapnz(out, code::ARRAY_OUT_OF_BOUNDS);
        let size = gc::storage_size(self.array_elem(ty));
        let scaled = self.b.ins().imul_imm_u(index, size as i64);
        let r32 = self.b.ins().ireduce(I32, r);
        let offset = self.b.ins().iadd(r32, scaled);
        let offset = self.b.ins().uextend(I64, offset);
        let base = self.gc_base();
        self.b.ins().iadd(base, offset)
    }

    /// Whether `r`, a reference of any hierarchy, is a value of `to`: an `i32` 0 or 1.
    pub(super) fn ref_test(&mut self, r: Value, to: RefType) -> Value {
        let null = self.b.ins().icmp_imm_u(IntCC::Equal, r, 0);
        let when_null = self.b.ins().iconst(I32, to.nullable as i64);
        let yes = self.b.ins().iconst(I32, 1);
        let no = self.b.ins().iconst(I32, 0);
        // Of a non-null reference: what its bits alone say, or what its header (an object's,
        // or a funcref's type id) says.
        let non_null = match to.heap {
            HeapType::Any | HeapType::Func | HeapType::Extern | HeapType::Exn => yes,
            HeapType::None | HeapType::NoFunc | HeapType::NoExtern | HeapType::NoExn => no,
            HeapType::Eq => {
                let low = self.b.ins().band_imm_u(r, 3);
                let host = self.b.ins().icmp_imm_u(IntCC::Equal, low, HOST_TAG as i64);
                let v = self.b.ins().bxor_imm_u(host, 1);
                self.b.ins().uextend(I32, v)
            }
            HeapType::I31 => {
                let v = self.b.ins().band_imm_u(r, I31_TAG as i64);
                self.b.ins().ireduce(I32, v)
            }
            HeapType::ConcreteFunc(ty) => {
                let expected = self.canonical_id(ty);
                self.when_header(r, None, |t| {
                    let actual =
                        (t.b.ins()).load(I32, trusted(), r, VmOffsets::FUNCREF_TYPE_ID as i32);
                    t.same_or_below(actual, expected, ty, None)
                })
            }
            HeapType::Struct | HeapType::Array | HeapType::ConcreteStruct(_) => {
                self.object_test(r, to.heap)
            }
            HeapType::ConcreteArray(_) => self.object_test(r, to.heap),
        };
        self.b.ins().select(null, when_null, non_null)
    }

    /// Whether canonical id `actual` is `expected`, the id of module type `ty`, or (when `ty`
    /// is not final) one of its subtypes: compared inline with `ty` and the module's own types
    /// below it ([`super::subtypes_of`], whose canonical ids are below `ty`'s, as the engine
    /// registered them), and asked of the runtime when none is `actual`: an `i32` 0 or 1.
    /// `deeper`, where given, says whether `actual` may be below `ty` at all (a struct deeper
    /// than `ty`): the runtime is asked only then.
    pub(super) fn same_or_below(
        &mut self,
        actual: Value,
        expected: Value,
        ty: u32,
        deeper: Option<Value>,
    ) -> Value {
        let mut same = self.b.ins().icmp(IntCC::Equal, actual, expected);
        if self.env.info.sub(ty).is_final {
            return self.b.ins().uextend(I32, same);
        }
        let env = self.env;
        for &d in env.subtypes.get(&ty).into_iter().flatten() {
            let id = self.canonical_id(d);
            let is = self.b.ins().icmp(IntCC::Equal, actual, id);
            same = self.b.ins().bor(same, is);
        }
        let ask = self.b.create_block();
        let join = self.b.create_block();
        let v = self.b.append_block_param(join, I32);
        self.b.set_cold_block(ask);
        let known = self.b.ins().uextend(I32, same);
        let unknown = match deeper {
            Some(deeper) => {
                let differ = self.b.ins().bxor_imm_u(same, 1);
                self.b.ins().band(differ, deeper)
            }
            None => self.b.ins().bxor_imm_u(same, 1),
        };
        self.b.ins().brif(unknown, ask, &[], join, &[known.into()]);
        self.b.seal_block(ask);
        self.b.switch_to_block(ask);
        let below = self
            .builtin(Builtin::IsSubtype, &[actual, expected])
            .expect("a result");
        self.b.ins().jump(join, &[below.into()]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        v
    }

    /// Of a non-null `anyref` `r`: whether it is an object of `heap` (`struct`, `array` or a
    /// concrete one of them), reading its header only when it is an object.
    fn object_test(&mut self, r: Value, heap: HeapType) -> Value {
        let expected = match heap {
            HeapType::ConcreteStruct(ty) => Some((ty, self.canonical_id(ty))),
            HeapType::ConcreteArray(ty) => {
                let id = self.canonical_id(ty);
                Some((ty, self.b.ins().bor_imm_u(id, gc::ARRAY_BIT as i64)))
            }
            _ => None,
        };
        let low = self.b.ins().band_imm_u(r, 3);
        let is_object = self.b.ins().icmp_imm_u(IntCC::Equal, low, 0);
        self.when_header(r, Some(is_object), |t| {
            let obj = t.object(r);
            let word = t.b.ins().load(I32, trusted(), obj, gc::TYPE_ID as i32);
            let v = match (heap, expected) {
                // (A supertype is of its subtype's kind: the runtime compares ids alone.)
                (_, Some((ty, expected))) => {
                    let same = t.b.ins().icmp(IntCC::Equal, word, expected);
                    if t.env.info.sub(ty).is_final {
                        same
                    } else {
                        // Only a struct deeper than a struct type can be below it (see
                        // `ephem_module::gc`); an array type's objects say nothing of depth.
                        let deeper = match heap {
                            HeapType::ConcreteStruct(_) => {
                                let depth = t.b.ins().load(I32, trusted(), obj, gc::LENGTH as i32);
                                let d = t.env.info.depth(ty) as i64;
                                let deeper =
                                    t.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, depth, d);
                                let is_struct = t.b.ins().icmp_imm_u(
                                    IntCC::UnsignedLessThan,
                                    word,
                                    gc::ARRAY_BIT as i64,
                                );
                                Some(t.b.ins().band(deeper, is_struct))
                            }
                            _ => None,
                        };
                        let mask = !(gc::ARRAY_BIT as i64);
                        let (actual, expected) = (
                            t.b.ins().band_imm_u(word, mask),
                            t.b.ins().band_imm_u(expected, mask),
                        );
                        let below = t.same_or_below(actual, expected, ty, deeper);
                        t.b.ins().icmp_imm_u(IntCC::NotEqual, below, 0)
                    }
                }
                (HeapType::Array, None) => t.b.ins().icmp_imm_u(
                    IntCC::UnsignedGreaterThanOrEqual,
                    word,
                    gc::ARRAY_BIT as i64,
                ),
                _ => {
                    t.b.ins()
                        .icmp_imm_u(IntCC::UnsignedLessThan, word, gc::ARRAY_BIT as i64)
                }
            };
            t.b.ins().uextend(I32, v)
        })
    }

    /// `read()` where `r` is not null (and `when` holds, if given), else 0: the read happens in
    /// a block of its own.
    fn when_header(
        &mut self,
        r: Value,
        when: Option<Value>,
        read: impl FnOnce(&mut Self) -> Value,
    ) -> Value {
        let cond = match when {
            Some(when) => {
                let non_null = self.b.ins().icmp_imm_u(IntCC::NotEqual, r, 0);
                self.b.ins().band(non_null, when)
            }
            None => r,
        };
        let read_block = self.b.create_block();
        let join = self.b.create_block();
        let v = self.b.append_block_param(join, I32);
        let zero = self.b.ins().iconst(I32, 0);
        self.b
            .ins()
            .brif(cond, read_block, &[], join, &[zero.into()]);
        self.b.seal_block(read_block);
        self.b.switch_to_block(read_block);
        let got = read(self);
        self.b.ins().jump(join, &[got.into()]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        v
    }

    /// Translates `op` if it is one of GC's; `false` if it is not.
    pub(super) fn gc_op(&mut self, op: &Operator<'_>) -> Result<bool, CompileError> {
        use Operator as O;
        match *op {
            O::StructNew {
                struct_type_index: ty,
            } => {
                let (fields, layout) = self.struct_fields(ty);
                let values = self.take(fields.len());
                let zero = self.iconst32(0);
                let r = self.alloc(ty, zero);
                let obj = self.object(r);
                for ((f, v), &at) in fields.iter().zip(values).zip(&layout.offsets) {
                    self.store_field(f.storage, v, obj, at);
                }
                self.push(r);
            }
            O::StructNewDefault {
                struct_type_index: ty,
            } => {
                let zero = self.iconst32(0);
                let r = self.alloc(ty, zero);
                self.push(r);
            }
            O::StructGet {
                struct_type_index: ty,
                field_index: f,
            } => self.struct_get(ty, f, Extend::Unsigned),
            O::StructGetS {
                struct_type_index: ty,
                field_index: f,
            } => self.struct_get(ty, f, Extend::Signed),
            O::StructGetU {
                struct_type_index: ty,
                field_index: f,
            } => self.struct_get(ty, f, Extend::Unsigned),
            O::StructSet {
                struct_type_index: ty,
                field_index: f,
            } => {
                let (r, v) = self.pop2();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let (storage, at) = self.field(ty, f);
                let obj = self.object(r);
                self.store_field(storage, v, obj, at);
            }
            O::ArrayNew {
                array_type_index: ty,
            } => {
                let (v, len) = self.pop2();
                let [lo, hi] = self.as_words(self.array_elem(ty), v);
                let t = self.iconst32(ty);
                let r = self.gc_make(
                    Builtin::ArrayNew,
                    &[t, len, lo, hi],
                    code::GC_HEAP_EXHAUSTED,
                );
                self.push(r);
            }
            O::ArrayNewDefault {
                array_type_index: ty,
            } => {
                let len = self.pop();
                let r = self.alloc(ty, len);
                self.push(r);
            }
            O::ArrayNewFixed {
                array_type_index: ty,
                array_size: n,
            } => {
                let values = self.take(n as usize);
                let len = self.iconst32(n);
                let r = self.alloc(ty, len);
                let storage = self.array_elem(ty);
                let size = gc::storage_size(storage);
                let obj = self.object(r);
                for (i, v) in values.into_iter().enumerate() {
                    self.store_field(storage, v, obj, gc::HEADER + i as u32 * size);
                }
                self.push(r);
            }
            O::ArrayNewData {
                array_type_index: ty,
                array_data_index: seg,
            }
            | O::ArrayNewElem {
                array_type_index: ty,
                array_elem_index: seg,
            } => {
                let (which, out_of_segment) = match op {
                    O::ArrayNewData { .. } => (Builtin::ArrayNewData, TrapCode::HEAP_OUT_OF_BOUNDS),
                    _ => (Builtin::ArrayNewElem, code::TABLE_OUT_OF_BOUNDS),
                };
                let (src, len) = self.pop2();
                let (t, s) = (self.iconst32(ty), self.iconst32(seg));
                let r = self.gc_make(which, &[t, s, src, len], out_of_segment);
                self.push(r);
            }
            O::ArrayGet {
                array_type_index: ty,
            } => self.array_get(ty, Extend::Unsigned),
            O::ArrayGetS {
                array_type_index: ty,
            } => self.array_get(ty, Extend::Signed),
            O::ArrayGetU {
                array_type_index: ty,
            } => self.array_get(ty, Extend::Unsigned),
            O::ArraySet {
                array_type_index: ty,
            } => {
                let (r, index, v) = self.pop3();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let addr = self.element(ty, r, index);
                self.store_field(self.array_elem(ty), v, addr, gc::HEADER);
            }
            O::ArrayLen => {
                let r = self.pop();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let obj = self.object(r);
                let len = self.b.ins().load(I32, trusted(), obj, gc::LENGTH as i32);
                self.push(len);
            }
            O::ArrayFill {
                array_type_index: ty,
            } => {
                let len = self.pop();
                let (r, dst, v) = self.pop3();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let [lo, hi] = self.as_words(self.array_elem(ty), v);
                let t = self.iconst32(ty);
                self.gc_checked(
                    Builtin::ArrayFill,
                    &[t, r, dst, lo, hi, len],
                    code::ARRAY_OUT_OF_BOUNDS,
                );
            }
            O::ArrayCopy {
                array_type_index_dst: ty,
                ..
            } => {
                let (src, src_index, len) = self.pop3();
                let (dst, dst_index) = self.pop2();
                self.b.ins().trapz(dst, code::NULL_REFERENCE);
                self.b.ins().trapz(src, code::NULL_REFERENCE);
                self.array_copy(ty, [dst, dst_index, src, src_index, len]);
            }
            O::ArrayInitData {
                array_type_index: ty,
                array_data_index: seg,
            }
            | O::ArrayInitElem {
                array_type_index: ty,
                array_elem_index: seg,
            } => {
                let (which, out_of_segment) = match op {
                    O::ArrayInitData { .. } => {
                        (Builtin::ArrayInitData, TrapCode::HEAP_OUT_OF_BOUNDS)
                    }
                    _ => (Builtin::ArrayInitElem, code::TABLE_OUT_OF_BOUNDS),
                };
                let (src, len) = self.pop2();
                let (r, dst) = self.pop2();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let (t, s) = (self.iconst32(ty), self.iconst32(seg));
                self.gc_checked(which, &[t, r, dst, s, src, len], out_of_segment);
            }
            O::RefI31 => {
                let v = self.pop();
                let shifted = self.b.ins().ishl_imm_u(v, 1);
                let tagged = self.b.ins().bor_imm_u(shifted, I31_TAG as i64);
                let r = self.b.ins().uextend(I64, tagged);
                self.push(r);
            }
            O::I31GetS | O::I31GetU => {
                let r = self.pop();
                self.b.ins().trapz(r, code::NULL_REFERENCE);
                let v = self.b.ins().ireduce(I32, r);
                let v = match op {
                    O::I31GetS => self.b.ins().sshr_imm_u(v, 1),
                    _ => self.b.ins().ushr_imm_u(v, 1),
                };
                self.push(v);
            }
            O::RefEq => {
                let (x, y) = self.pop2();
                let same = self.b.ins().icmp(IntCC::Equal, x, y);
                let v = self.b.ins().uextend(I32, same);
                self.push(v);
            }
            // One encoding serves both hierarchies (see `ephem_module::gc`): the conversions
            // change nothing.
            O::AnyConvertExtern | O::ExternConvertAny => {}
            O::RefTestNonNull { hty } | O::RefTestNullable { hty } => {
                let to = self.cast_type(hty, matches!(op, O::RefTestNullable { .. }))?;
                let r = self.pop();
                let v = self.ref_test(r, to);
                self.push(v);
            }
            O::RefCastNonNull { hty } | O::RefCastNullable { hty } => {
                let to = self.cast_type(hty, matches!(op, O::RefCastNullable { .. }))?;
                let r = self.pop();
                let ok = self.ref_test(r, to);
                self.b.ins().trapz(ok, code::CAST_FAILURE);
                self.push(r);
            }
            O::BrOnCast {
                relative_depth,
                to_ref_type,
                ..
            }
            | O::BrOnCastFail {
                relative_depth,
                to_ref_type,
                ..
            } => {
                let to = self.cast_type(to_ref_type.heap_type(), to_ref_type.is_nullable())?;
                let r = *self.stack.last().expect("validated: a reference");
                let ok = self.ref_test(r, to);
                let frame = &self.frames[self.frames.len() - 1 - relative_depth as usize];
                let (target, n) = frame.target();
                let values = self.top(n);
                let values: Vec<ir::BlockArg> = values.iter().map(|&v| v.into()).collect();
                let cont = self.b.create_block();
                match op {
                    O::BrOnCast { .. } => self.b.ins().brif(ok, target, &values, cont, &[]),
                    _ => self.b.ins().brif(ok, cont, &[], target, &values),
                };
                self.b.seal_block(cont);
                self.b.switch_to_block(cont);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `array.copy` of non-null arrays of type `ty` (`[dst, dst_index, src, src_index, len]`):
    /// a few elements copied inline (the strings that languages' runtimes build), more by the
    /// runtime; metered code always asks the runtime, which charges per element.
    fn array_copy(&mut self, ty: u32, [dst, di, src, si, len]: [Value; 5]) {
        /// The most elements copied inline.
        const INLINE: i64 = 16;
        let size = gc::storage_size(self.array_elem(ty));
        let t = self.iconst32(ty);
        let args = [t, dst, di, src, si, len];
        if self.fuel.is_some() || size > 8 {
            return self.gc_checked(Builtin::ArrayCopy, &args, code::ARRAY_OUT_OF_BOUNDS);
        }
        let call = self.b.create_block();
        let inline = self.b.create_block();
        let done = self.b.create_block();
        let few = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThanOrEqual, len, INLINE);
        self.b.ins().brif(few, inline, &[], call, &[]);
        self.b.seal_block(call);
        self.b.seal_block(inline);
        self.b.switch_to_block(call);
        self.gc_checked(Builtin::ArrayCopy, &args, code::ARRAY_OUT_OF_BOUNDS);
        self.b.ins().jump(done, &[]);
        // Inline: both ranges checked (in 64 bits: no wrap), then element by element, backward
        // when the destination lies after the source (one array, overlapping).
        self.b.switch_to_block(inline);
        let start = |t: &mut Self, r: Value, index: Value| {
            let obj = t.object(r);
            let end = t.b.ins().uextend(I64, index);
            let n = t.b.ins().uextend(I64, len);
            let end = t.b.ins().iadd(end, n);
            let alen = t.b.ins().load(I32, trusted(), obj, gc::LENGTH as i32);
            let alen = t.b.ins().uextend(I64, alen);
            let out = t.b.ins().icmp(IntCC::UnsignedGreaterThan, end, alen);
            t.b.ins().trapnz(out, code::ARRAY_OUT_OF_BOUNDS);
            let at = t.b.ins().uextend(I64, index);
            let at = t.b.ins().imul_imm_u(at, size as i64);
            let at = t.b.ins().iadd(obj, at);
            t.b.ins().iadd_imm_u(at, gc::HEADER as i64)
        };
        let to = start(self, dst, di);
        let from = start(self, src, si);
        let ty_of = match size {
            1 => I8,
            2 => I16,
            4 => I32,
            _ => I64,
        };
        let bytes = self.b.ins().uextend(I64, len);
        let bytes = self.b.ins().imul_imm_u(bytes, size as i64);
        let backward = self.b.ins().icmp(IntCC::UnsignedGreaterThan, to, from);
        let forth = self.b.ins().iconst(I64, size as i64);
        let back = self.b.ins().ineg(forth);
        let step = self.b.ins().select(backward, back, forth);
        // The offsets of the first element copied and of the one past the last, in that order.
        let zero = self.b.ins().iconst(I64, 0);
        let last = self.b.ins().isub(bytes, forth);
        let first = self.b.ins().select(backward, last, zero);
        let stop = self.b.ins().select(backward, back, bytes);
        let head = self.b.create_block();
        let body = self.b.create_block();
        let at = self.b.append_block_param(head, I64);
        self.b.ins().jump(head, &[first.into()]);
        self.b.switch_to_block(head);
        let finished = self.b.ins().icmp(IntCC::Equal, at, stop);
        self.b.ins().brif(finished, done, &[], body, &[]);
        self.b.seal_block(body);
        self.b.switch_to_block(body);
        let s_at = self.b.ins().iadd(from, at);
        let v = self.b.ins().load(ty_of, trusted(), s_at, 0);
        let d_at = self.b.ins().iadd(to, at);
        self.b.ins().store(trusted(), v, d_at, 0);
        let next = self.b.ins().iadd(at, step);
        self.b.ins().jump(head, &[next.into()]);
        self.b.seal_block(head);
        self.b.seal_block(done);
        self.b.switch_to_block(done);
    }

    /// The type a cast names.
    fn cast_type(
        &self,
        heap: wasmparser::HeapType,
        nullable: bool,
    ) -> Result<RefType, CompileError> {
        Ok(RefType {
            nullable,
            heap: crate::parse::heap_type(heap, &self.env.info.types)?,
        })
    }

    fn struct_get(&mut self, ty: u32, f: u32, ext: Extend) {
        let r = self.pop();
        self.b.ins().trapz(r, code::NULL_REFERENCE);
        let (storage, at) = self.field(ty, f);
        let obj = self.object(r);
        let v = self.load_field(storage, ext, obj, at);
        self.push(v);
    }

    fn array_get(&mut self, ty: u32, ext: Extend) {
        let (r, index) = self.pop2();
        self.b.ins().trapz(r, code::NULL_REFERENCE);
        let addr = self.element(ty, r, index);
        let v = self.load_field(self.array_elem(ty), ext, addr, gc::HEADER);
        self.push(v);
    }
}
