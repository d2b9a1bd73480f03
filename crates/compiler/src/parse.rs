//! Validation and parsing: wasm bytes to a [`ModuleInfo`] and the function bodies to compile.

use ephem_module::*;
use wasmparser::{
    DataKind, ElementItems, ElementKind, ExternalKind, FunctionBody, Operator, Parser, Payload,
    TypeRef, Validator, WasmFeatures,
};

use crate::{CompileError, Proposals};

/// What the validator accepts: WebAssembly 2.0 (SIMD included) and the `proposals`.
pub fn features(proposals: Proposals) -> WasmFeatures {
    let mut features = WasmFeatures::WASM2;
    for (on, feature) in [
        (proposals.tail_call, WasmFeatures::TAIL_CALL),
        (proposals.extended_const, WasmFeatures::EXTENDED_CONST),
        (proposals.multi_memory, WasmFeatures::MULTI_MEMORY),
        (proposals.relaxed_simd, WasmFeatures::RELAXED_SIMD),
        (
            proposals.function_references,
            WasmFeatures::FUNCTION_REFERENCES,
        ),
        (proposals.wide_arithmetic, WasmFeatures::WIDE_ARITHMETIC),
        (proposals.exceptions, WasmFeatures::EXCEPTIONS),
        (proposals.legacy_exceptions, WasmFeatures::LEGACY_EXCEPTIONS),
        (proposals.custom_page_sizes, WasmFeatures::CUSTOM_PAGE_SIZES),
        (proposals.memory64, WasmFeatures::MEMORY64),
        (proposals.threads, WasmFeatures::THREADS),
        (proposals.reference_types, WasmFeatures::REFERENCE_TYPES),
        // (GC's types build on typed function references: off with them.)
        (
            proposals.gc && proposals.function_references,
            WasmFeatures::GC,
        ),
    ] {
        features.set(feature, on);
    }
    features
}

pub struct Parsed<'a> {
    pub info: ModuleInfo,
    pub bodies: Vec<FunctionBody<'a>>,
    pub data: Vec<u8>,
    /// What the validator knew of the module, for a second look at each body's operand types
    /// where references to GC objects need stack maps (see `translate`); `None` for a module
    /// without function bodies.
    pub validated: Option<(wasmparser::ValidatorResources, WasmFeatures)>,
}

/// `ty`, where a concrete type is one of `types`.
pub fn val_type(ty: wasmparser::ValType, types: &[TypeDef]) -> Result<ValType, CompileError> {
    Ok(match ty {
        wasmparser::ValType::I32 => ValType::I32,
        wasmparser::ValType::I64 => ValType::I64,
        wasmparser::ValType::F32 => ValType::F32,
        wasmparser::ValType::F64 => ValType::F64,
        wasmparser::ValType::Ref(r) => ref_type(r, types)?,
        wasmparser::ValType::V128 => ValType::V128,
    })
}

fn ref_type(r: wasmparser::RefType, types: &[TypeDef]) -> Result<ValType, CompileError> {
    Ok(ValType::Ref(RefType {
        nullable: r.is_nullable(),
        heap: heap_type(r.heap_type(), types)?,
    }))
}

/// `h`, where a concrete type is one of `types` (its kind is what matters).
pub(crate) fn heap_type(
    h: wasmparser::HeapType,
    types: &[TypeDef],
) -> Result<HeapType, CompileError> {
    use wasmparser::{AbstractHeapType as A, HeapType as H, UnpackedIndex};
    Ok(match h {
        H::Abstract { shared: false, ty } => match ty {
            A::Func => HeapType::Func,
            A::Extern => HeapType::Extern,
            A::NoFunc => HeapType::NoFunc,
            A::NoExtern => HeapType::NoExtern,
            A::Exn => HeapType::Exn,
            A::NoExn => HeapType::NoExn,
            A::Any => HeapType::Any,
            A::Eq => HeapType::Eq,
            A::I31 => HeapType::I31,
            A::Struct => HeapType::Struct,
            A::Array => HeapType::Array,
            A::None => HeapType::None,
            A::Cont | A::NoCont => {
                return Err(CompileError::Unsupported(format!(
                    "heap type {h:?} (stack switching)"
                )));
            }
        },
        H::Concrete(UnpackedIndex::Module(i)) | H::Exact(UnpackedIndex::Module(i)) => {
            let Some(ty) = types.get(i as usize) else {
                return Err(CompileError::Unsupported(format!(
                    "heap type {h:?} of no type"
                )));
            };
            ty.heap(i)
        }
        _ => {
            return Err(CompileError::Unsupported(format!(
                "heap type {h:?} (shared-everything threads)"
            )));
        }
    })
}

/// What a type of a module's type section declares of subtyping.
fn sub_of(sub: &wasmparser::SubType) -> Sub {
    Sub {
        // (Validated: at most one, a module index.)
        supertype: sub.supertype_idxs.first().and_then(|s| s.as_module_index()),
        is_final: sub.is_final,
    }
}

/// A type of a module's type section, naming `types`.
fn type_def(sub: &wasmparser::SubType, types: &[TypeDef]) -> Result<TypeDef, CompileError> {
    // (Proposals past WebAssembly 3.0, which the validator refuses before this.)
    let unsupported = |what: &str| Err(CompileError::Unsupported(what.into()));
    let c = &sub.composite_type;
    if c.shared || c.descriptor_idx.is_some() || c.describes_idx.is_some() {
        return unsupported("a shared type (shared-everything threads), or one with a descriptor");
    }
    let vals = |ts: &[wasmparser::ValType]| -> Result<Vec<ValType>, CompileError> {
        ts.iter().map(|&t| val_type(t, types)).collect()
    };
    let field = |f: &wasmparser::FieldType| -> Result<FieldType, CompileError> {
        Ok(FieldType {
            storage: match f.element_type {
                wasmparser::StorageType::I8 => StorageType::I8,
                wasmparser::StorageType::I16 => StorageType::I16,
                wasmparser::StorageType::Val(t) => StorageType::Val(val_type(t, types)?),
            },
            mutable: f.mutable,
        })
    };
    Ok(match &c.inner {
        wasmparser::CompositeInnerType::Func(ty) => TypeDef::Func(FuncType {
            params: vals(ty.params())?,
            results: vals(ty.results())?,
        }),
        wasmparser::CompositeInnerType::Struct(s) => {
            TypeDef::Struct(s.fields.iter().map(field).collect::<Result<_, _>>()?)
        }
        wasmparser::CompositeInnerType::Array(a) => TypeDef::Array(field(&a.0)?),
        wasmparser::CompositeInnerType::Cont(_) => {
            return unsupported("continuation types (stack switching)");
        }
    })
}

/// What type `sub` will be, as far as a reference naming it needs to know (its kind), before
/// its own fields are read: members of a recursion group name each other.
fn kind_of(sub: &wasmparser::SubType) -> TypeDef {
    match sub.composite_type.inner {
        wasmparser::CompositeInnerType::Struct(_) => TypeDef::Struct(Vec::new()),
        wasmparser::CompositeInnerType::Array(_) => TypeDef::Array(FieldType {
            storage: StorageType::I8,
            mutable: false,
        }),
        _ => TypeDef::Func(FuncType::default()),
    }
}

fn table_type(t: wasmparser::TableType, types: &[TypeDef]) -> Result<TableType, CompileError> {
    if t.shared {
        return Err(CompileError::Unsupported("a shared table".into()));
    }
    // A table has at most 2^32 - 1 elements (the runtime bounds it far below): a 64-bit one's
    // larger maximum is no bound short of that, and a larger minimum never instantiates.
    Ok(TableType {
        elem: ref_type(t.element_type, types)?,
        min: u32::try_from(t.initial).unwrap_or(u32::MAX),
        max: t.maximum.map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
        table64: t.table64,
    })
}

fn memory_type(m: wasmparser::MemoryType) -> Result<MemoryType, CompileError> {
    let ty = MemoryType {
        min: 0,
        max: None,
        page_size_log2: m.page_size_log2.unwrap_or(16) as u8,
        memory64: m.memory64,
        shared: m.shared,
    };
    // (A 64-bit memory's minimum past what a `u32` counts saturates: past what any memory
    // can have, so that the module compiles and its memory fails to be made.)
    Ok(MemoryType {
        min: u32::try_from(m.initial).unwrap_or(u32::MAX),
        // (A maximum past what a `u32` counts is no bound short of what a memory can have; kept
        // as the largest, so that a memory without one still does not match it.)
        max: m.maximum.map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
        ..ty
    })
}

fn global_type(g: wasmparser::GlobalType, types: &[TypeDef]) -> Result<GlobalType, CompileError> {
    Ok(GlobalType {
        ty: val_type(g.content_type, types)?,
        mutable: g.mutable,
    })
}

/// A (validated) constant expression: one instruction, or an extended one (integer arithmetic,
/// GC's objects), folded into a constant when it is integer arithmetic on constants and
/// otherwise kept in `extended`.
fn const_expr(
    e: &wasmparser::ConstExpr<'_>,
    types: &[TypeDef],
    extended: &mut Vec<Vec<ConstOp>>,
) -> Result<ConstExpr, CompileError> {
    let mut reader = e.get_operators_reader();
    let mut ops = Vec::new();
    loop {
        match reader.read()? {
            Operator::End => break,
            op => ops.push(op),
        }
    }
    if let [op] = &ops[..] {
        let single = match *op {
            Operator::I32Const { value } => Some(ConstExpr::I32(value)),
            Operator::I64Const { value } => Some(ConstExpr::I64(value)),
            Operator::F32Const { value } => Some(ConstExpr::F32(value.bits())),
            Operator::F64Const { value } => Some(ConstExpr::F64(value.bits())),
            Operator::V128Const { value } => Some(ConstExpr::V128(value.i128() as u128)),
            Operator::GlobalGet { global_index } => Some(ConstExpr::GlobalGet(global_index)),
            Operator::RefNull { .. } => Some(ConstExpr::RefNull),
            Operator::RefFunc { function_index } => Some(ConstExpr::RefFunc(function_index)),
            _ => None,
        };
        if let Some(single) = single {
            return Ok(single);
        }
    }
    let ops = ops
        .iter()
        .map(|op| {
            Ok(match *op {
                Operator::I32Const { value } => ConstOp::I32(value),
                Operator::I64Const { value } => ConstOp::I64(value),
                Operator::F32Const { value } => ConstOp::F32(value.bits()),
                Operator::F64Const { value } => ConstOp::F64(value.bits()),
                Operator::V128Const { value } => ConstOp::V128(value.i128() as u128),
                Operator::GlobalGet { global_index } => ConstOp::GlobalGet(global_index),
                Operator::I32Add => ConstOp::I32Add,
                Operator::I32Sub => ConstOp::I32Sub,
                Operator::I32Mul => ConstOp::I32Mul,
                Operator::I64Add => ConstOp::I64Add,
                Operator::I64Sub => ConstOp::I64Sub,
                Operator::I64Mul => ConstOp::I64Mul,
                Operator::RefNull { hty } => ConstOp::RefNull(heap_type(hty, types)?),
                Operator::RefFunc { function_index } => ConstOp::RefFunc(function_index),
                Operator::RefI31 => ConstOp::RefI31,
                Operator::StructNew { struct_type_index } => ConstOp::StructNew(struct_type_index),
                Operator::StructNewDefault { struct_type_index } => {
                    ConstOp::StructNewDefault(struct_type_index)
                }
                Operator::ArrayNew { array_type_index } => ConstOp::ArrayNew(array_type_index),
                Operator::ArrayNewDefault { array_type_index } => {
                    ConstOp::ArrayNewDefault(array_type_index)
                }
                Operator::ArrayNewFixed {
                    array_type_index,
                    array_size,
                } => ConstOp::ArrayNewFixed(array_type_index, array_size),
                Operator::AnyConvertExtern => ConstOp::AnyConvertExtern,
                Operator::ExternConvertAny => ConstOp::ExternConvertAny,
                ref other => {
                    return Err(CompileError::Unsupported(format!(
                        "constant expression {other:?}"
                    )));
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !ops.iter().all(|op| op.is_integer_constant()) {
        extended.push(ops);
        return Ok(ConstExpr::Extended(extended.len() as u32 - 1));
    }
    // Validated, so the last operator gives the type.
    let value = ConstOp::eval(ops.iter().copied(), &NoEnv).unwrap_or(0);
    Ok(match ops.last() {
        Some(ConstOp::I64Add | ConstOp::I64Sub | ConstOp::I64Mul | ConstOp::I64(_)) => {
            ConstExpr::I64(value as u64 as i64)
        }
        _ => ConstExpr::I32(value as u32 as i32),
    })
}

/// Validates `bytes` as a module with `features` (what `Validator::validate_all` does), keeping
/// what the validator knew of it (see [`Parsed::validated`]).
fn validate(
    bytes: &[u8],
    features: WasmFeatures,
) -> Result<Option<(wasmparser::ValidatorResources, WasmFeatures)>, CompileError> {
    let mut validator = Validator::new_with_features(features);
    let mut parser = Parser::new(0);
    parser.set_features(features);
    // Bodies after every section, as `validate_all` does, so that errors come in its order.
    let mut funcs = Vec::new();
    for payload in parser.parse_all(bytes) {
        if let wasmparser::ValidPayload::Func(func, body) = validator.payload(&payload?)? {
            funcs.push((func, body));
        }
    }
    let mut allocations = wasmparser::FuncValidatorAllocations::default();
    let mut kept = None;
    for (func, body) in funcs {
        kept.get_or_insert_with(|| (func.resources.clone(), func.features));
        let mut v = func.into_validator(allocations);
        v.validate(&body)?;
        allocations = v.into_allocations();
    }
    Ok(kept)
}

/// Validates `bytes` as a module (WebAssembly 2.0 and `proposals`) and reads what the compiler
/// needs.
pub fn parse(bytes: &[u8], proposals: Proposals) -> Result<Parsed<'_>, CompileError> {
    let validated = validate(bytes, features(proposals))?;
    let mut info = ModuleInfo::default();
    let mut bodies = Vec::new();
    let mut data = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::TypeSection(reader) => {
                for group in reader {
                    let group = group?;
                    let start = info.types.len() as u32;
                    info.types.extend(group.types().map(kind_of));
                    for (k, sub) in group.types().enumerate() {
                        let ty = type_def(sub, &info.types)?;
                        info.types[start as usize + k] = ty;
                        // (`subs` stays empty until a type declares something.)
                        let declared = sub_of(sub);
                        if declared != Sub::FINAL || !info.subs.is_empty() {
                            info.subs.resize(start as usize + k, Sub::FINAL);
                            info.subs.push(declared);
                        }
                    }
                    let len = info.types.len() as u32 - start;
                    if len > 1 {
                        info.rec_groups.push(RecGroup { start, len });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import?;
                    let kind = match import.ty {
                        TypeRef::Func(t) | TypeRef::FuncExact(t) => {
                            info.funcs.push(t);
                            info.imported_funcs += 1;
                            ImportKind::Func(t)
                        }
                        TypeRef::Table(t) => {
                            let t = table_type(t, &info.types)?;
                            info.tables.push(t);
                            info.imported_tables += 1;
                            ImportKind::Table(t)
                        }
                        TypeRef::Memory(m) => {
                            let m = memory_type(m)?;
                            info.memories.push(m);
                            info.imported_memories += 1;
                            ImportKind::Memory(m)
                        }
                        TypeRef::Global(g) => {
                            let g = global_type(g, &info.types)?;
                            info.globals.push(g);
                            info.imported_globals += 1;
                            ImportKind::Global(g)
                        }
                        TypeRef::Tag(t) => {
                            info.tags.push(t.func_type_idx);
                            info.imported_tags += 1;
                            ImportKind::Tag(t.func_type_idx)
                        }
                    };
                    info.imports.push(Import {
                        module: import.module.to_owned(),
                        name: import.name.to_owned(),
                        kind,
                    });
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    info.funcs.push(ty?);
                }
            }
            Payload::TableSection(reader) => {
                for table in reader {
                    let table = table?;
                    let init = match table.init {
                        wasmparser::TableInit::RefNull => ConstExpr::RefNull,
                        wasmparser::TableInit::Expr(e) => {
                            const_expr(&e, &info.types, &mut info.extended)?
                        }
                    };
                    info.tables.push(table_type(table.ty, &info.types)?);
                    info.table_inits.push(init);
                }
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    info.memories.push(memory_type(memory?)?);
                }
            }
            Payload::GlobalSection(reader) => {
                for global in reader {
                    let global = global?;
                    info.globals.push(global_type(global.ty, &info.types)?);
                    info.global_inits.push(const_expr(
                        &global.init_expr,
                        &info.types,
                        &mut info.extended,
                    )?);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export?;
                    let index = match export.kind {
                        ExternalKind::Func | ExternalKind::FuncExact => {
                            EntityIndex::Func(export.index)
                        }
                        ExternalKind::Table => EntityIndex::Table(export.index),
                        ExternalKind::Memory => EntityIndex::Memory(export.index),
                        ExternalKind::Global => EntityIndex::Global(export.index),
                        ExternalKind::Tag => EntityIndex::Tag(export.index),
                    };
                    info.exports.push(Export {
                        name: export.name.to_owned(),
                        index,
                    });
                }
            }
            Payload::TagSection(reader) => {
                for tag in reader {
                    info.tags.push(tag?.func_type_idx);
                }
            }
            Payload::StartSection { func, .. } => info.start = Some(func),
            Payload::ElementSection(reader) => {
                for elem in reader {
                    let elem = elem?;
                    let mode = match elem.kind {
                        ElementKind::Passive => SegmentMode::Passive,
                        ElementKind::Declared => SegmentMode::Declared,
                        ElementKind::Active {
                            table_index,
                            offset_expr,
                        } => SegmentMode::Active {
                            index: table_index.unwrap_or(0),
                            offset: const_expr(&offset_expr, &info.types, &mut info.extended)?,
                        },
                    };
                    let (ty, items) = match elem.items {
                        ElementItems::Functions(funcs) => (
                            ValType::Ref(RefType {
                                nullable: false,
                                heap: HeapType::Func,
                            }),
                            funcs
                                .into_iter()
                                .map(|f| f.map(ConstExpr::RefFunc))
                                .collect::<Result<Vec<_>, _>>()?,
                        ),
                        ElementItems::Expressions(ty, exprs) => {
                            let mut items = Vec::new();
                            for e in exprs {
                                items.push(const_expr(&e?, &info.types, &mut info.extended)?);
                            }
                            (ref_type(ty, &info.types)?, items)
                        }
                    };
                    info.elems.push(ElemSegment { mode, ty, items });
                }
            }
            Payload::DataSection(reader) => {
                for segment in reader {
                    let segment = segment?;
                    let start = data.len() as u32;
                    data.extend_from_slice(segment.data);
                    let range = start..data.len() as u32;
                    let mode = match segment.kind {
                        DataKind::Passive => SegmentMode::Passive,
                        DataKind::Active {
                            memory_index,
                            offset_expr,
                        } => SegmentMode::Active {
                            index: memory_index,
                            offset: const_expr(&offset_expr, &info.types, &mut info.extended)?,
                        },
                    };
                    info.datas.push(DataSegment { mode, range });
                }
            }
            Payload::CodeSectionEntry(body) => bodies.push(body),
            // Custom sections are not validated: a broken name section only loses names.
            Payload::CustomSection(c) => {
                if let wasmparser::KnownCustom::Name(names) = c.as_known() {
                    info.names = function_names(names);
                }
            }
            _ => {}
        }
    }
    Ok(Parsed {
        info,
        bodies,
        data,
        validated,
    })
}

/// The function names of a name section, by ascending index, as far as it can be read.
fn function_names(reader: wasmparser::NameSectionReader<'_>) -> Vec<FuncName> {
    let mut names = Vec::new();
    for subsection in reader {
        let Ok(wasmparser::Name::Function(map)) = subsection else {
            continue;
        };
        names.extend(map.into_iter().map_while(Result::ok).map(|n| FuncName {
            func: n.index,
            name: n.name.to_owned(),
        }));
    }
    names.sort_by_key(|n| n.func);
    names.dedup_by_key(|n| n.func);
    names
}
