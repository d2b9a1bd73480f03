//! What a loaded module is: an open [`Artifact`] bound to an engine, with its vmctx layout and
//! canonical type ids, and what it imports and exports.
//!
//! A [`Module`] is made from a file, or in memory from a freshly compiled module (the same
//! format in a memory file), so there is one loading path: `load` loads its code, `instantiate`
//! makes an instance of it.

use std::sync::Arc;

use ephem_artifact::{Artifact, ArtifactKey};
use ephem_module::{
    CompiledModule, EntityIndex, ImportKind, MemoryType, VmFuncRef, VmOffsets, native,
};

use crate::{Engine, Error, FuncType, GlobalType, TableType, ValType};

/// A compiled module ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Module {
    pub(crate) inner: Arc<ModuleInner>,
}

pub(crate) struct ModuleInner {
    pub(crate) engine: Engine,
    pub(crate) artifact: Artifact,
    pub(crate) offsets: VmOffsets,
    pub(crate) type_ids: Arc<[u32]>,
    /// What making an object of each struct or array type takes, worked out on first use
    /// (see `gc`).
    gc_shapes: std::sync::OnceLock<Box<[Option<crate::gc::Shape>]>>,
    /// What traps' backtraces call the module (see [`Module::set_name`]).
    pub(crate) name: std::sync::OnceLock<Arc<str>>,
}

impl ModuleInner {
    /// What making an object of type `ty` takes, if it is a struct or array type.
    pub(crate) fn gc_shape(&self, ty: u32) -> Option<crate::gc::Shape> {
        let shapes = self.gc_shapes.get_or_init(|| {
            let info = self.artifact.info();
            (0..info.types.len() as u32)
                .map(|t| crate::gc::Shape::of(info, t, self.type_ids[t as usize]))
                .collect()
        });
        *shapes.get(ty as usize)?
    }

    /// The vmctx funcref slot of function `func`, which is imported or eager: the only
    /// functions the host takes a funcref of (the metadata checks hold every export, kept
    /// element item, global initialiser and start function to that).
    pub(crate) fn funcref_slot(&self, func: u32) -> u32 {
        let imported = self.artifact.info().imported_funcs.to_native();
        let eager = self.artifact.eager();
        VmOffsets::eager_slot(imported, eager, func).expect("an eager function")
    }

    /// The funcref of this module's function whose code starts at text offset `code` and has
    /// type `ty`, for the instance whose text is at `text` and vmctx at `vm`.
    pub(crate) fn funcref(&self, text: *const u8, vm: *mut u8, code: u32, ty: u32) -> VmFuncRef {
        let trampoline = self.artifact.trampolines()[ty as usize].to_native();
        VmFuncRef {
            code: text.wrapping_add(code as usize),
            vmctx: vm,
            trampoline: text.wrapping_add(trampoline as usize),
            type_id: self.type_ids[ty as usize],
        }
    }

    /// `ty` as the engine and the host see it: a concrete type as its canonical id, not this
    /// module's index.
    pub(crate) fn canonical(&self, ty: ValType) -> ValType {
        ty.map_concrete(|i| self.type_ids[i as usize])
    }

    /// A table type of this module as the engine sees it (see [`ModuleInner::canonical`]).
    pub(crate) fn canonical_table(&self, ty: TableType) -> TableType {
        TableType {
            elem: self.canonical(ty.elem),
            ..ty
        }
    }

    /// A global type of this module as the engine sees it (see [`ModuleInner::canonical`]).
    pub(crate) fn canonical_global(&self, ty: GlobalType) -> GlobalType {
        GlobalType {
            ty: self.canonical(ty.ty),
            ..ty
        }
    }

    /// Function type `t` of this module as the engine sees it (see
    /// [`ModuleInner::canonical`]).
    pub(crate) fn canonical_func(&self, t: u32) -> FuncType {
        (self.engine.shared_func_type(self.type_ids[t as usize])).into_owned()
    }
}

impl Module {
    /// Prepares a freshly compiled module for instantiation with `engine` (through an artifact
    /// in a memory file: see the module documentation).
    pub fn from_compiled(engine: &Engine, compiled: &CompiledModule) -> Result<Module, Error> {
        Ok(Module::from_artifact(
            engine,
            Artifact::from_compiled(compiled)?,
        ))
    }

    /// Opens the artifact at `path`, which must be sealed with `key` (see [`Artifact::open`]
    /// for what is checked).
    pub fn from_artifact_file(
        engine: &Engine,
        path: &std::path::Path,
        key: &ArtifactKey,
    ) -> Result<Module, Error> {
        Ok(Module::from_artifact(engine, Artifact::open(path, key)?))
    }

    /// The module as a sealed artifact file's bytes (sealed with the engine's key, see
    /// [`crate::Config::artifact_key`]), for [`Module::deserialize_file`] or `ephem run`.
    pub fn serialize(&self) -> Result<Vec<u8>, Error> {
        let mut bytes = self.inner.artifact.to_bytes()?;
        ephem_artifact::format::reseal(&mut bytes, self.inner.engine.artifact_key(true)?);
        Ok(bytes)
    }

    /// Opens an artifact file that [`Module::serialize`] (or `ephem compile`) wrote, verifying
    /// its seal with the engine's key and checking its metadata (see [`Artifact::open`]).
    ///
    /// # Safety
    /// `unsafe` as wasmtime's: an artifact is native code. ephem checks the seal, so the
    /// caller's part is that the key is the deployment's own, known to no one who should not
    /// run code here.
    pub unsafe fn deserialize_file(
        engine: &Engine,
        path: impl AsRef<std::path::Path>,
    ) -> Result<Module, Error> {
        Module::from_artifact_file(engine, path.as_ref(), engine.artifact_key(false)?)
    }

    /// As [`Module::deserialize_file`], for the bytes themselves.
    ///
    /// # Safety
    /// As for [`Module::deserialize_file`].
    pub unsafe fn deserialize(engine: &Engine, bytes: impl AsRef<[u8]>) -> Result<Module, Error> {
        let key = engine.artifact_key(false)?;
        Ok(Module::from_artifact(
            engine,
            Artifact::from_bytes(bytes.as_ref(), key)?,
        ))
    }

    /// Opens the artifact at `path` without checking its seal (its metadata is checked).
    ///
    /// # Safety
    /// As [`Artifact::open_unverified`]: the caller vouches for the file's machine code.
    pub unsafe fn from_file_unverified(
        engine: &Engine,
        path: &std::path::Path,
    ) -> Result<Module, Error> {
        // SAFETY: per the contract.
        Ok(Module::from_artifact(engine, unsafe {
            Artifact::open_unverified(path)?
        }))
    }

    /// Prepares an open artifact for instantiation with `engine`.
    pub fn from_artifact(engine: &Engine, artifact: Artifact) -> Module {
        let info = artifact.info();
        let type_ids = engine.type_ids(&artifact);
        let offsets = VmOffsets::for_archived(info, artifact.funcref_slots());
        Module {
            inner: Arc::new(ModuleInner {
                engine: engine.borrow(),
                artifact,
                offsets,
                type_ids,
                gc_shapes: std::sync::OnceLock::new(),
                name: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The engine the module was loaded for.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Names the module for traps' backtraces (`name!function`), as a component's name
    /// section names its core modules; a module keeps the first name it is given.
    pub fn set_name(&self, name: &str) {
        let _ = self.inner.name.set(name.into());
    }

    /// The name [`Module::set_name`] gave the module, if any.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.get().map(|n| &**n)
    }

    /// The open artifact the module runs from.
    pub fn artifact(&self) -> &Artifact {
        &self.inner.artifact
    }

    /// Whether this module's start function ran when it was compiled, so that instantiation
    /// starts from the state it left instead of running it (see `compile::snapshot`).
    pub fn start_ran_at_compile(&self) -> bool {
        self.inner.artifact.info().snapshot.is_some()
    }

    /// The module's imports, in order.
    pub fn imports(&self) -> impl Iterator<Item = ImportRef<'_>> {
        // Imports come first in each index space: count them per kind.
        let mut counts = [0u32; 5];
        self.inner.artifact.info().imports.iter().map(move |i| {
            let kind = match native(&i.kind) {
                ImportKind::Table(t) => ImportKind::Table(self.inner.canonical_table(t)),
                ImportKind::Global(g) => ImportKind::Global(self.inner.canonical_global(g)),
                other => other,
            };
            let count = &mut counts[match kind {
                ImportKind::Func(_) => 0,
                ImportKind::Memory(_) => 1,
                ImportKind::Table(_) => 2,
                ImportKind::Global(_) => 3,
                ImportKind::Tag(_) => 4,
            }];
            *count += 1;
            ImportRef {
                module: i.module.as_str(),
                name: i.name.as_str(),
                kind,
                index: *count - 1,
            }
        })
    }
}

impl Module {
    /// The module's exports, in order.
    pub fn exports(&self) -> impl Iterator<Item = ExportRef<'_>> {
        let m = &*self.inner;
        let info = m.artifact.info();
        info.exports.iter().map(move |e| ExportRef {
            name: e.name.as_str(),
            ty: match native(&e.index) {
                EntityIndex::Func(i) => {
                    ExternType::Func(m.canonical_func(info.funcs[i as usize].to_native()))
                }
                EntityIndex::Memory(i) => ExternType::Memory(native(&info.memories[i as usize])),
                EntityIndex::Table(i) => {
                    ExternType::Table(m.canonical_table(native(&info.tables[i as usize])))
                }
                EntityIndex::Global(i) => {
                    ExternType::Global(m.canonical_global(native(&info.globals[i as usize])))
                }
                EntityIndex::Tag(i) => ExternType::Tag(crate::TagType::new(
                    m.canonical_func(info.tags[i as usize].to_native()),
                )),
            },
        })
    }

    /// The type of import `import` (a function's by value, not by index).
    pub fn import_type(&self, import: &ImportRef<'_>) -> ExternType {
        match import.kind {
            ImportKind::Func(t) => ExternType::Func(self.inner.canonical_func(t)),
            ImportKind::Memory(ty) => ExternType::Memory(ty),
            ImportKind::Table(ty) => ExternType::Table(ty),
            ImportKind::Global(ty) => ExternType::Global(ty),
            ImportKind::Tag(t) => {
                ExternType::Tag(crate::TagType::new(self.inner.canonical_func(t)))
            }
        }
    }

    pub(crate) fn type_id(&self, type_index: u32) -> u32 {
        self.inner.type_ids[type_index as usize]
    }
}

/// One export of a module: its name and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportRef<'a> {
    /// The export's name.
    pub name: &'a str,
    /// What it is.
    pub ty: ExternType,
}

/// The type of an import or export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExternType {
    /// A function of this type.
    Func(FuncType),
    /// A linear memory of these limits.
    Memory(MemoryType),
    /// A table of these limits and element type.
    Table(TableType),
    /// A global of this type.
    Global(GlobalType),
    /// An exception tag of this type.
    Tag(crate::TagType),
}

/// As the text format writes types: `(func (param i32) (result i64))`, `(memory 1 2)`.
impl std::fmt::Display for ExternType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limits = |min: u32, max: Option<u32>| match max {
            Some(max) => format!("{min} {max}"),
            None => min.to_string(),
        };
        match self {
            ExternType::Func(ty) => write!(f, "{ty}"),
            ExternType::Memory(ty) => {
                let i64 = if ty.memory64 { "i64 " } else { "" };
                write!(f, "(memory {i64}{}", limits(ty.min, ty.max))?;
                if ty.shared {
                    f.write_str(" shared")?;
                }
                if ty.page_size_log2 != MemoryType::DEFAULT_PAGE_SIZE_LOG2 {
                    write!(f, " (pagesize {})", ty.page_size())?;
                }
                f.write_str(")")
            }
            ExternType::Table(ty) => {
                let i64 = if ty.table64 { "i64 " } else { "" };
                write!(f, "(table {i64}{} {})", limits(ty.min, ty.max), ty.elem)
            }
            ExternType::Global(ty) if ty.mutable => write!(f, "(global (mut {}))", ty.ty),
            ExternType::Global(ty) => write!(f, "(global {})", ty.ty),
            ExternType::Tag(ty) => write!(f, "{ty}"),
        }
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = self.inner.artifact.info();
        f.debug_struct("Module")
            .field("functions", &info.funcs.len())
            .field("imports", &info.imports.len())
            .field("exports", &info.exports.len())
            .field("text_bytes", &self.inner.artifact.text_len())
            .finish()
    }
}

/// One import of a module: what it is called and what it must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportRef<'a> {
    /// The module name the import names.
    pub module: &'a str,
    /// The name within that module.
    pub name: &'a str,
    /// What is imported (a function by its type index).
    pub kind: ImportKind,
    /// What the import is in the module's index space of its kind.
    pub index: u32,
}
