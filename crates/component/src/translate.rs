//! Reading a component: validation with wasmparser and, per component (the outer one and each
//! nested one), the list of its definitions in order, with every type it names already turned
//! into ephem's own (`types`). Core modules are kept as byte ranges to compile; nothing here
//! decides what instantiating means (that is `inline`).

use std::ops::Range;
use std::sync::Arc;

use wasmparser::{
    CanonicalFunction, CanonicalOption, ComponentAlias, ComponentExternalKind, ComponentInstance,
    ComponentOuterAliasKind, ComponentTypeRef, ExternalKind, Instance, Parser, Payload, Validator,
    WasmFeatures,
};

use crate::Error;
use crate::abi::Encoding;
use crate::plan::{ImportKind, ResourceFuncKind};
use std::collections::HashMap;
use wasmparser::PrimitiveValType;

use wasmparser::component_types::{
    ComponentAnyTypeId, ComponentDefinedType, ComponentDefinedTypeId, ComponentEntityType,
    ComponentFuncTypeId, ComponentValType,
};
use wasmparser::types::TypesRef;

use crate::types::{Case, Field, FuncType, MAX_DEPTH, ResourceIndex, Type};

/// One component's definitions, in the order its sections give them.
#[derive(Default)]
pub(crate) struct Translation {
    pub inits: Vec<Init>,
    /// The component's types so far: the next type's index, while it is read.
    types: u32,
    /// The component's core modules so far, each the index among all modules of one it
    /// defines (`None`: one it aliases): what its name section's core module names name.
    core_modules: Vec<Option<usize>>,
}

/// A canonical function's options, as indices into its component's core index spaces.
#[derive(Clone, Debug)]
pub(crate) struct RawOptions {
    pub memory: Option<u32>,
    pub realloc: Option<u32>,
    pub post_return: Option<u32>,
    pub encoding: Encoding,
}

/// One definition of a component.
pub(crate) enum Init {
    Import {
        name: String,
        kind: ImportKind,
        /// The resource types the import brings in, each by its path of export names within
        /// the import (none: the import is the type) and its number (see `Statics`).
        resources: Vec<(Vec<String>, u32)>,
    },
    /// A core module, by its index among all of the component's modules.
    Module(usize),
    /// A nested component, by its translation's index.
    Component(usize),
    CoreInstantiate {
        module: u32,
        args: Vec<(String, u32)>,
    },
    CoreExports(Vec<(String, ExternalKind, u32)>),
    Instantiate {
        component: u32,
        args: Vec<Item>,
    },
    Exports(Vec<Item>),
    AliasCoreExport {
        instance: u32,
        kind: ExternalKind,
        name: String,
    },
    AliasExport {
        instance: u32,
        kind: ComponentExternalKind,
        name: String,
        /// The number of the resource type aliased, if it is one.
        resource: Option<u32>,
    },
    AliasOuter {
        kind: ComponentOuterAliasKind,
        count: u32,
        index: u32,
    },
    Lift {
        core_func: u32,
        ty: Arc<FuncType>,
        options: RawOptions,
    },
    Lower {
        func: u32,
        ty: Arc<FuncType>,
        options: RawOptions,
    },
    Export(Item),
    /// A resource built-in on the resource numbered so.
    ResourceFunc(ResourceFuncKind, u32),
    /// A resource type the component defines, numbered so, with its destructor (an index of
    /// its core functions), if it has one.
    DefineResource {
        number: u32,
        dtor: Option<u32>,
    },
}

/// An item a component names by kind and index: an instantiation's argument, an export.
pub(crate) struct Item {
    pub name: String,
    pub kind: ComponentExternalKind,
    pub index: u32,
    /// For a type that is a resource, its number.
    pub resource: Option<u32>,
}

/// The validator's resource types, numbered as they are met: what a [`ResourceIndex`] holds
/// before flattening.
///
/// It also keeps each type converted, with its size written out in full (nodes and name
/// bytes): a type used twice is converted once and shared, and one whose full size passes
/// [`MAX_TYPE_SIZE`] is refused, since every walk over a type (flattening, lifting, the
/// artifact) goes through it all.
#[derive(Default)]
struct Statics {
    resources: HashMap<wasmparser::component_types::ResourceId, u32>,
    types: HashMap<ComponentDefinedTypeId, (Type, u64)>,
    funcs: HashMap<ComponentFuncTypeId, Arc<FuncType>>,
}

/// The largest a type may be written out in full: nodes and name bytes.
const MAX_TYPE_SIZE: u64 = 1_000_000;

impl Statics {
    fn number(&mut self, id: wasmparser::component_types::ResourceId) -> u32 {
        let next = self.resources.len() as u32;
        *self.resources.entry(id).or_insert(next)
    }

    /// The number of type `index` of the component `types` describes, if it is a resource.
    fn of_type(&mut self, types: &TypesRef<'_>, index: u32) -> Option<u32> {
        match types.component_any_type_at(index) {
            ComponentAnyTypeId::Resource(r) => Some(self.number(r.resource())),
            _ => None,
        }
    }

    /// Every resource type an import of type `ty` brings in, by path.
    fn in_entity(
        &mut self,
        types: &TypesRef<'_>,
        ty: &ComponentEntityType,
        path: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, u32)>,
    ) {
        match ty {
            ComponentEntityType::Type {
                created: ComponentAnyTypeId::Resource(r),
                ..
            } => out.push((path.clone(), self.number(r.resource()))),
            ComponentEntityType::Instance(id) if path.len() < MAX_DEPTH => {
                for (name, item) in types[*id].exports.iter() {
                    path.push(name.clone());
                    self.in_entity(types, &item.ty, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
}

/// A whole component read: its translations (the outer one last) and its core modules' bytes.
pub(crate) struct Read {
    pub translations: Vec<Translation>,
    pub modules: Vec<Range<usize>>,
    /// Each module's name in the name section of the component that defines it, if any
    /// (what traps' backtraces name it by).
    pub module_names: Vec<Option<String>>,
}

fn unsupported(what: &str) -> Error {
    Error::Unsupported(what.to_string())
}

/// Validates `bytes` as a component and reads its definitions.
pub(crate) fn read(bytes: &[u8]) -> Result<Read, Error> {
    let features = WasmFeatures::default() | WasmFeatures::COMPONENT_MODEL;
    let mut validator = Validator::new_with_features(features);
    let mut translations = Vec::new();
    let mut modules = Vec::new();
    let mut module_names = Vec::new();
    // What is open: `Some(translation)` for a component, `None` for a core module.
    let mut open: Vec<Option<Translation>> = Vec::new();
    let mut first = true;
    let mut statics = Statics::default();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload?;
        validator.payload(&payload)?;
        if first {
            first = false;
            match &payload {
                Payload::Version {
                    encoding: wasmparser::Encoding::Component,
                    ..
                } => open.push(Some(Translation::default())),
                _ => return Err(unsupported("a core module where a component was expected")),
            }
            continue;
        }
        if let Payload::End(_) = payload {
            match open.pop() {
                Some(Some(done)) => {
                    translations.push(done);
                    let index = translations.len() - 1;
                    match open.last_mut() {
                        Some(Some(parent)) => parent.inits.push(Init::Component(index)),
                        Some(None) => unreachable!("a component inside a core module"),
                        None => {}
                    }
                }
                Some(None) => {}
                None => unreachable!("more ends than starts"),
            }
            continue;
        }
        let Some(Some(current)) = open.last_mut() else {
            // Inside a core module: the validator has seen it; it is compiled on its own.
            continue;
        };
        let types = validator.types(0).expect("a component is open");
        match payload {
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                modules.push(unchecked_range.start as usize..unchecked_range.end as usize);
                module_names.push(None);
                current.inits.push(Init::Module(modules.len() - 1));
                current.core_modules.push(Some(modules.len() - 1));
                open.push(None);
            }
            Payload::ComponentSection { .. } => open.push(Some(Translation::default())),
            Payload::InstanceSection(section) => {
                for instance in section {
                    current.inits.push(match instance? {
                        Instance::Instantiate { module_index, args } => Init::CoreInstantiate {
                            module: module_index,
                            args: args.iter().map(|a| (a.name.to_string(), a.index)).collect(),
                        },
                        Instance::FromExports(exports) => Init::CoreExports(
                            (exports.iter())
                                .map(|e| (e.name.to_string(), e.kind, e.index))
                                .collect(),
                        ),
                    });
                }
            }
            Payload::ComponentInstanceSection(section) => {
                for instance in section {
                    current.inits.push(match instance? {
                        ComponentInstance::Instantiate {
                            component_index,
                            args,
                        } => Init::Instantiate {
                            component: component_index,
                            args: (args.iter())
                                .map(|a| item(&types, &mut statics, a.name, a.kind, a.index))
                                .collect(),
                        },
                        ComponentInstance::FromExports(exports) => Init::Exports(
                            (exports.iter())
                                .map(|e| item(&types, &mut statics, e.name.name, e.kind, e.index))
                                .collect(),
                        ),
                    });
                }
            }
            Payload::ComponentAliasSection(section) => {
                for alias in section {
                    current.inits.push(match alias? {
                        ComponentAlias::InstanceExport {
                            kind,
                            instance_index,
                            name,
                        } => {
                            let resource = match kind {
                                ComponentExternalKind::Type => {
                                    current.types += 1;
                                    statics.of_type(&types, current.types - 1)
                                }
                                _ => None,
                            };
                            Init::AliasExport {
                                instance: instance_index,
                                kind,
                                name: name.to_string(),
                                resource,
                            }
                        }
                        ComponentAlias::CoreInstanceExport {
                            kind,
                            instance_index,
                            name,
                        } => Init::AliasCoreExport {
                            instance: instance_index,
                            kind,
                            name: name.to_string(),
                        },
                        ComponentAlias::Outer { kind, count, index } => {
                            match kind {
                                ComponentOuterAliasKind::Type => current.types += 1,
                                ComponentOuterAliasKind::CoreModule => {
                                    current.core_modules.push(None)
                                }
                                _ => {}
                            }
                            Init::AliasOuter { kind, count, index }
                        }
                    });
                }
            }
            Payload::ComponentCanonicalSection(section) => {
                for canon in section {
                    current.inits.push(match canon? {
                        CanonicalFunction::Lift {
                            core_func_index,
                            type_index,
                            options,
                        } => {
                            let id = match types.component_any_type_at(type_index) {
                                wasmparser::component_types::ComponentAnyTypeId::Func(id) => id,
                                _ => unreachable!("validated: a lift names a function type"),
                            };
                            Init::Lift {
                                core_func: core_func_index,
                                ty: func_from_wasm(&types, &mut statics, id)?,
                                options: raw_options(&options)?,
                            }
                        }
                        CanonicalFunction::Lower {
                            func_index,
                            options,
                        } => {
                            let id = types.component_function_at(func_index);
                            Init::Lower {
                                func: func_index,
                                ty: func_from_wasm(&types, &mut statics, id)?,
                                options: raw_options(&options)?,
                            }
                        }
                        CanonicalFunction::ResourceNew { resource } => {
                            resource_func(&types, &mut statics, ResourceFuncKind::New, resource)
                        }
                        CanonicalFunction::ResourceRep { resource } => {
                            resource_func(&types, &mut statics, ResourceFuncKind::Rep, resource)
                        }
                        CanonicalFunction::ResourceDrop { resource } => {
                            resource_func(&types, &mut statics, ResourceFuncKind::Drop, resource)
                        }
                        _ => {
                            return Err(unsupported(
                                "canonical built-ins other than `lift` and `lower` (threads, async)",
                            ));
                        }
                    });
                }
            }
            Payload::ComponentImportSection(section) => {
                for import in section {
                    let import = import?;
                    let kind = match import.ty {
                        ComponentTypeRef::Func(_) => ImportKind::Func,
                        ComponentTypeRef::Instance(_) => ImportKind::Instance,
                        ComponentTypeRef::Type(_) => ImportKind::Other,
                        ComponentTypeRef::Module(_) | ComponentTypeRef::Component(_) => {
                            return Err(unsupported("imported modules and components"));
                        }
                        ComponentTypeRef::Value(_) => return Err(unsupported("value imports")),
                    };
                    let name = import.name.name;
                    let mut resources = Vec::new();
                    if let Some(item) = types.component_item_for_import(name) {
                        statics.in_entity(&types, &item.ty, &mut Vec::new(), &mut resources);
                    }
                    if kind == ImportKind::Other {
                        current.types += 1;
                    }
                    current.inits.push(Init::Import {
                        name: name.to_string(),
                        kind,
                        resources,
                    });
                }
            }
            Payload::ComponentExportSection(section) => {
                for export in section {
                    let export = export?;
                    if export.kind == ComponentExternalKind::Value {
                        return Err(unsupported("value exports"));
                    }
                    let export = item(
                        &types,
                        &mut statics,
                        export.name.name,
                        export.kind,
                        export.index,
                    );
                    if export.kind == ComponentExternalKind::Type {
                        current.types += 1;
                    }
                    current.inits.push(Init::Export(export));
                }
            }
            Payload::ComponentStartSection { .. } => {
                return Err(unsupported("component start functions"));
            }
            Payload::ComponentTypeSection(section) => {
                for ty in section {
                    if let wasmparser::ComponentType::Resource { dtor, .. } = ty? {
                        let number = (statics.of_type(&types, current.types))
                            .expect("validated: a resource type");
                        current.inits.push(Init::DefineResource { number, dtor });
                    }
                    current.types += 1;
                }
            }
            // The core modules' names, for backtraces; a damaged name section names nothing.
            Payload::CustomSection(section) => {
                let wasmparser::KnownCustom::ComponentName(names) = section.as_known() else {
                    continue;
                };
                for names in names.into_iter().flatten() {
                    let wasmparser::ComponentName::CoreModules(map) = names else {
                        continue;
                    };
                    for naming in map.into_iter().flatten() {
                        let defined = current.core_modules.get(naming.index as usize);
                        if let Some(Some(module)) = defined {
                            module_names[*module] = Some(naming.name.to_string());
                        }
                    }
                }
            }
            // Types are resolved where they are used; other custom sections do nothing.
            _ => {}
        }
    }
    Ok(Read {
        translations,
        modules,
        module_names,
    })
}

/// A resource built-in on resource type `index`.
fn resource_func(
    types: &TypesRef<'_>,
    statics: &mut Statics,
    kind: ResourceFuncKind,
    index: u32,
) -> Init {
    match statics.of_type(types, index) {
        Some(r) => Init::ResourceFunc(kind, r),
        None => unreachable!("validated: a resource type"),
    }
}

/// An item by kind and index, with its resource number if it is a resource type.
fn item(
    types: &TypesRef<'_>,
    statics: &mut Statics,
    name: &str,
    kind: ComponentExternalKind,
    index: u32,
) -> Item {
    let resource = match kind {
        ComponentExternalKind::Type => statics.of_type(types, index),
        _ => None,
    };
    Item {
        name: name.to_string(),
        kind,
        index,
        resource,
    }
}

fn raw_options(options: &[CanonicalOption]) -> Result<RawOptions, Error> {
    let mut raw = RawOptions {
        memory: None,
        realloc: None,
        post_return: None,
        encoding: Encoding::Utf8,
    };
    for option in options {
        match *option {
            CanonicalOption::UTF8 => raw.encoding = Encoding::Utf8,
            CanonicalOption::UTF16 => raw.encoding = Encoding::Utf16,
            CanonicalOption::CompactUTF16 => raw.encoding = Encoding::Latin1Utf16,
            CanonicalOption::Memory(m) => raw.memory = Some(m),
            CanonicalOption::Realloc(f) => raw.realloc = Some(f),
            CanonicalOption::PostReturn(f) => raw.post_return = Some(f),
            CanonicalOption::CoreType(_) => {}
            CanonicalOption::Async | CanonicalOption::Callback(_) | CanonicalOption::Gc => {
                return Err(unsupported("async and GC canonical options"));
            }
        }
    }
    Ok(raw)
}

/// Converts the validator's type, refusing what ephem does not support yet; gives it with its
/// full size.
fn convert(
    types: &TypesRef<'_>,
    statics: &mut Statics,
    ty: &ComponentValType,
    depth: usize,
) -> Result<(Type, u64), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::Unsupported("a type nested too deeply".into()));
    }
    let id = match ty {
        ComponentValType::Primitive(p) => return Ok((primitive(*p)?, 1)),
        ComponentValType::Type(id) => *id,
    };
    if let Some(done) = statics.types.get(&id) {
        return Ok(done.clone());
    }
    let mut size: u64 = 1;
    let mut sub = |t: &ComponentValType| -> Result<Type, Error> {
        let (t, n) = convert(types, statics, t, depth + 1)?;
        size = size.saturating_add(n);
        if size > MAX_TYPE_SIZE {
            return Err(Error::Unsupported(format!(
                "a type larger than {MAX_TYPE_SIZE} nodes and name bytes written out"
            )));
        }
        Ok(t)
    };
    let mut names: u64 = 0;
    let ty = match &types[id] {
        ComponentDefinedType::Primitive(p) => primitive(*p)?,
        ComponentDefinedType::Record(r) => Type::Record(
            (r.fields.iter())
                .map(|(name, t)| {
                    names += name.len() as u64;
                    Ok(Field {
                        name: name.to_string(),
                        ty: sub(t)?,
                    })
                })
                .collect::<Result<_, Error>>()?,
        ),
        ComponentDefinedType::Variant(v) => Type::Variant(
            (v.cases.iter())
                .map(|(name, c)| {
                    names += name.len() as u64;
                    Ok(Case {
                        name: name.to_string(),
                        ty: c.ty.as_ref().map(&mut sub).transpose()?,
                    })
                })
                .collect::<Result<_, Error>>()?,
        ),
        ComponentDefinedType::List { element, .. } => Type::List(Arc::new(sub(element)?)),
        ComponentDefinedType::Tuple(t) => {
            Type::Tuple(t.types.iter().map(&mut sub).collect::<Result<_, Error>>()?)
        }
        ComponentDefinedType::Flags(list) | ComponentDefinedType::Enum(list) => {
            let list: Arc<[String]> = list.iter().map(|n| n.to_string()).collect();
            names += list.iter().map(|n| n.len() as u64 + 1).sum::<u64>();
            match &types[id] {
                ComponentDefinedType::Flags(_) => Type::Flags(list),
                _ => Type::Enum(list),
            }
        }
        ComponentDefinedType::Option { ty, .. } => Type::Option(Arc::new(sub(ty)?)),
        ComponentDefinedType::Result { ok, err, .. } => Type::Result {
            ok: ok.as_ref().map(|t| sub(t).map(Arc::new)).transpose()?,
            err: err.as_ref().map(|t| sub(t).map(Arc::new)).transpose()?,
        },
        ComponentDefinedType::Own(r) => Type::Own(ResourceIndex(statics.number(r.resource()))),
        ComponentDefinedType::Borrow(r) => {
            Type::Borrow(ResourceIndex(statics.number(r.resource())))
        }
        ComponentDefinedType::Map { .. } => return Err(Error::Unsupported("`map`".into())),
        ComponentDefinedType::FixedLengthList { .. } => {
            return Err(Error::Unsupported("fixed-length lists".into()));
        }
        _ => {
            return Err(Error::Unsupported(
                "futures, streams and error contexts".into(),
            ));
        }
    };
    let size = size.saturating_add(names);
    if size > MAX_TYPE_SIZE {
        return Err(Error::Unsupported(format!(
            "a type larger than {MAX_TYPE_SIZE} nodes and name bytes written out"
        )));
    }
    statics.types.insert(id, (ty.clone(), size));
    Ok((ty, size))
}

fn func_from_wasm(
    types: &TypesRef<'_>,
    statics: &mut Statics,
    id: ComponentFuncTypeId,
) -> Result<Arc<FuncType>, Error> {
    if let Some(done) = statics.funcs.get(&id) {
        return Ok(done.clone());
    }
    let ty = &types[id];
    if ty.async_ {
        return Err(Error::Unsupported("async functions".into()));
    }
    // The function's types together are bounded as one type is.
    let mut size: u64 = 0;
    let mut one = |t: &ComponentValType| -> Result<Type, Error> {
        let (t, n) = convert(types, statics, t, 0)?;
        size = size.saturating_add(n);
        if size > MAX_TYPE_SIZE {
            return Err(Error::Unsupported(format!(
                "a function whose types are larger than {MAX_TYPE_SIZE} nodes written out"
            )));
        }
        Ok(t)
    };
    let params = (ty.params.iter())
        .map(|(name, t)| Ok((name.to_string(), one(t)?)))
        .collect::<Result<_, Error>>()?;
    let result = ty.result.as_ref().map(&mut one).transpose()?;
    let mut func = FuncType::new(params, result);
    func.size = size;
    let func = Arc::new(func);
    statics.funcs.insert(id, func.clone());
    Ok(func)
}

fn primitive(p: PrimitiveValType) -> Result<Type, Error> {
    Ok(match p {
        PrimitiveValType::Bool => Type::Bool,
        PrimitiveValType::S8 => Type::S8,
        PrimitiveValType::U8 => Type::U8,
        PrimitiveValType::S16 => Type::S16,
        PrimitiveValType::U16 => Type::U16,
        PrimitiveValType::S32 => Type::S32,
        PrimitiveValType::U32 => Type::U32,
        PrimitiveValType::S64 => Type::S64,
        PrimitiveValType::U64 => Type::U64,
        PrimitiveValType::F32 => Type::Float32,
        PrimitiveValType::F64 => Type::Float64,
        PrimitiveValType::Char => Type::Char,
        PrimitiveValType::String => Type::String,
        PrimitiveValType::ErrorContext => {
            return Err(Error::Unsupported("error contexts".into()));
        }
    })
}
