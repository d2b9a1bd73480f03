//! Validation and parsing: wasm bytes to a [`ModuleInfo`] and the function bodies to compile.

use ephem_module::*;
use wasmparser::{
    DataKind, ElementItems, ElementKind, ExternalKind, FunctionBody, Operator, Parser, Payload,
    TypeRef, Validator, WasmFeatures,
};

use crate::CompileError;

/// WebAssembly 2.0 without SIMD, which ephem does not support yet.
pub fn features() -> WasmFeatures {
    WasmFeatures::WASM2 - WasmFeatures::SIMD
}

pub struct Parsed<'a> {
    pub info: ModuleInfo,
    pub bodies: Vec<FunctionBody<'a>>,
    pub data: Vec<u8>,
}

pub fn val_type(ty: wasmparser::ValType) -> Result<ValType, CompileError> {
    Ok(match ty {
        wasmparser::ValType::I32 => ValType::I32,
        wasmparser::ValType::I64 => ValType::I64,
        wasmparser::ValType::F32 => ValType::F32,
        wasmparser::ValType::F64 => ValType::F64,
        wasmparser::ValType::Ref(r) => ref_type(r)?,
        wasmparser::ValType::V128 => return Err(CompileError::Unsupported("SIMD (v128)".into())),
    })
}

fn ref_type(r: wasmparser::RefType) -> Result<ValType, CompileError> {
    if r.is_func_ref() {
        Ok(ValType::FuncRef)
    } else if r.is_extern_ref() {
        Ok(ValType::ExternRef)
    } else {
        Err(CompileError::Unsupported(format!("reference type {r:?}")))
    }
}

fn table_type(t: wasmparser::TableType) -> Result<TableType, CompileError> {
    Ok(TableType {
        elem: ref_type(t.element_type)?,
        min: t.initial as u32,
        max: t.maximum.map(|m| m as u32),
    })
}

fn memory_type(m: wasmparser::MemoryType) -> Result<MemoryType, CompileError> {
    if m.memory64 || m.shared {
        return Err(CompileError::Unsupported("64-bit or shared memory".into()));
    }
    Ok(MemoryType {
        min: m.initial as u32,
        max: m.maximum.map(|m| m as u32),
    })
}

fn global_type(g: wasmparser::GlobalType) -> Result<GlobalType, CompileError> {
    Ok(GlobalType {
        ty: val_type(g.content_type)?,
        mutable: g.mutable,
    })
}

fn const_expr(e: &wasmparser::ConstExpr<'_>) -> Result<ConstExpr, CompileError> {
    let mut ops = e.get_operators_reader();
    let op = ops.read()?;
    let expr = match op {
        Operator::I32Const { value } => ConstExpr::I32(value),
        Operator::I64Const { value } => ConstExpr::I64(value),
        Operator::F32Const { value } => ConstExpr::F32(value.bits()),
        Operator::F64Const { value } => ConstExpr::F64(value.bits()),
        Operator::GlobalGet { global_index } => ConstExpr::GlobalGet(global_index),
        Operator::RefNull { .. } => ConstExpr::RefNull,
        Operator::RefFunc { function_index } => ConstExpr::RefFunc(function_index),
        other => {
            return Err(CompileError::Unsupported(format!(
                "constant expression {other:?}"
            )));
        }
    };
    match ops.read()? {
        Operator::End => Ok(expr),
        _ => Err(CompileError::Unsupported(
            "extended constant expressions".into(),
        )),
    }
}

/// Validates `bytes` as a WebAssembly 2.0 module and reads what the compiler needs.
pub fn parse(bytes: &[u8]) -> Result<Parsed<'_>, CompileError> {
    Validator::new_with_features(features()).validate_all(bytes)?;
    let mut info = ModuleInfo::default();
    let mut bodies = Vec::new();
    let mut data = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::TypeSection(reader) => {
                for ty in reader.into_iter_err_on_gc_types() {
                    let ty = ty?;
                    info.types.push(FuncType {
                        params: ty
                            .params()
                            .iter()
                            .map(|&t| val_type(t))
                            .collect::<Result<_, _>>()?,
                        results: ty
                            .results()
                            .iter()
                            .map(|&t| val_type(t))
                            .collect::<Result<_, _>>()?,
                    });
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
                            let t = table_type(t)?;
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
                            let g = global_type(g)?;
                            info.globals.push(g);
                            info.imported_globals += 1;
                            ImportKind::Global(g)
                        }
                        TypeRef::Tag(_) => {
                            return Err(CompileError::Unsupported("exception tags".into()));
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
                    if !matches!(table.init, wasmparser::TableInit::RefNull) {
                        return Err(CompileError::Unsupported("table initialisers".into()));
                    }
                    info.tables.push(table_type(table.ty)?);
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
                    info.globals.push(global_type(global.ty)?);
                    info.global_inits.push(const_expr(&global.init_expr)?);
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
                        ExternalKind::Tag => {
                            return Err(CompileError::Unsupported("exception tags".into()));
                        }
                    };
                    info.exports.push(Export {
                        name: export.name.to_owned(),
                        index,
                    });
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
                            offset: const_expr(&offset_expr)?,
                        },
                    };
                    let (ty, items) = match elem.items {
                        ElementItems::Functions(funcs) => (
                            ValType::FuncRef,
                            funcs
                                .into_iter()
                                .map(|f| f.map(ConstExpr::RefFunc))
                                .collect::<Result<Vec<_>, _>>()?,
                        ),
                        ElementItems::Expressions(ty, exprs) => {
                            let mut items = Vec::new();
                            for e in exprs {
                                items.push(const_expr(&e?)?);
                            }
                            (ref_type(ty)?, items)
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
                            offset: const_expr(&offset_expr)?,
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
    Ok(Parsed { info, bodies, data })
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
