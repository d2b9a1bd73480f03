//! The WebAssembly-level description of a module ([`ModuleInfo`]): its imports, exports,
//! segments and index spaces, native (what the compiler makes) and archived (what the runtime
//! reads in place from an artifact).
//!
//! Index spaces put imports first. An info read back from a file is checked before use
//! ([`ModuleInfo::check`], in `check.rs`); what the compiler makes comes from validated wasm.

use rkyv::{Archive, Deserialize, Serialize};

use crate::{
    ArchivedFuncType, ConstExpr, ConstOp, FuncType, GlobalType, MemoryType, TableType, ValType,
};

/// What an import is.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ImportKind {
    /// A function of the module's type at this index.
    Func(u32),
    /// A table of this type.
    Table(TableType),
    /// A memory of this type.
    Memory(MemoryType),
    /// A global of this type.
    Global(GlobalType),
    /// An exception tag whose parameters are those of the module's function type at this
    /// index (its results are empty).
    Tag(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Import {
    pub module: String,
    pub name: String,
    pub kind: ImportKind,
}

/// Something a module exports or imports, by its index in the module's index space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum EntityIndex {
    Func(u32),
    Table(u32),
    Memory(u32),
    Global(u32),
    Tag(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Export {
    pub name: String,
    pub index: EntityIndex,
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum SegmentMode {
    Active { index: u32, offset: ConstExpr },
    Passive,
    Declared,
}

/// Where an active segment goes, when that is known before instantiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Not an active segment of the memory or table asked about.
    Elsewhere,
    /// Units `[start, end)`, within the limit asked about: applying it cannot trap.
    Static(std::ops::Range<u64>),
    /// An offset read from a global, or past the limit: known only at instantiation.
    Dynamic,
}

impl SegmentMode {
    /// Where this segment, of `len` units, goes if it is an active one of memory or table
    /// `index` whose minimum size is `limit` units and whose offsets are `i64` if `wide` (a
    /// 64-bit memory or table), else `i32`.
    pub fn placement(&self, index: u32, len: u64, limit: u64, wide: bool) -> Placement {
        match self {
            SegmentMode::Active { index: i, offset } if *i == index => {
                let at = match *offset {
                    ConstExpr::I32(at) if !wide => u64::from(at as u32),
                    ConstExpr::I64(at) if wide => at as u64,
                    _ => return Placement::Dynamic,
                };
                match at.checked_add(len) {
                    Some(end) if end <= limit => Placement::Static(at..end),
                    _ => Placement::Dynamic,
                }
            }
            _ => Placement::Elsewhere,
        }
    }
}

/// A data segment; its bytes are `data[range]` of
/// [`CompiledModule::data`](crate::CompiledModule::data).
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct DataSegment {
    pub mode: SegmentMode,
    pub range: std::ops::Range<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ElemSegment {
    pub mode: SegmentMode,
    pub ty: ValType,
    pub items: Vec<ConstExpr>,
}

/// The WebAssembly-level description of a module. Index spaces put imports first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// The type section; every function and tag names a function type (`ModuleInfo::check`).
    pub types: Vec<crate::TypeDef>,
    /// The recursion groups of more than one type, in order (see [`crate::RecGroup`]); empty
    /// for most modules.
    pub rec_groups: Vec<crate::RecGroup>,
    /// What each type declares of subtyping, by index; empty when every type is final and
    /// names no supertype (WebAssembly 2.0's types, and most modules'). See [`ModuleInfo::sub`].
    pub subs: Vec<crate::Sub>,
    pub imports: Vec<Import>,
    /// Type index of every function, imported ones first.
    pub funcs: Vec<u32>,
    pub tables: Vec<TableType>,
    /// What every element of each defined table (after the imported ones) starts as:
    /// `RefNull`, or the table's initialiser (WebAssembly 3.0's typed tables).
    pub table_inits: Vec<ConstExpr>,
    pub memories: Vec<MemoryType>,
    pub globals: Vec<GlobalType>,
    /// Type index of every exception tag, imported ones first: a function type whose
    /// parameters are what an exception of the tag carries.
    pub tags: Vec<u32>,
    /// Initialisers of the defined globals (after the imported ones).
    pub global_inits: Vec<ConstExpr>,
    pub exports: Vec<Export>,
    pub start: Option<u32>,
    pub elems: Vec<ElemSegment>,
    pub datas: Vec<DataSegment>,
    /// Extended constant expressions that read globals, by [`ConstExpr::Extended`] index.
    pub extended: Vec<Vec<ConstOp>>,
    pub imported_funcs: u32,
    pub imported_tables: u32,
    pub imported_memories: u32,
    pub imported_globals: u32,
    pub imported_tags: u32,
    /// Function names from the name section, by ascending function index (for backtraces).
    pub names: Vec<FuncName>,
    /// Whether the code charges fuel (see `VmOffsets::FUEL`).
    pub metered: bool,
    /// Whether the code sets write marks (see [`MARK_SHIFT`](crate::MARK_SHIFT)); without them,
    /// the reset of a memory it writes does not trust the marks (see the runtime's `memory`
    /// module).
    pub marks_writes: bool,
    /// Whether the code compares every memory access with the memory's current length
    /// (`VmMemory::length`) instead of relying on the inaccessible pages past it alone; a memory
    /// that only such code reaches may keep pages past its length accessible (see the
    /// runtime's `memory` module).
    pub checks_bounds: bool,
    /// Per memory, whether code that checks bounds ([`ModuleInfo::checks_bounds`]) still
    /// leaves this memory's accesses unchecked, a fault past its length being their check: a
    /// memory of 32-bit addresses and 64 KiB pages (where a fault stops every access past the
    /// end: see `MemoryType::needs_bounds_checks`) that is shared (always tight), or that this
    /// module defines and never grows itself. The runtime keeps such a memory *tight*; one
    /// that no code grows keeps the size its slot has, and needs no system call for that.
    pub faults_bound: Vec<bool>,
    /// Set when the start function ran at compile time: the memories, data segments and
    /// global initialisers describe the state it left, and instantiation does not run it.
    pub snapshot: Option<StartSnapshot>,
}

/// What running a module's start function at compile time recorded (see
/// [`ModuleInfo::snapshot`]), so that a metered instantiation pays exactly what the run would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct StartSnapshot {
    /// The fuel the run consumed.
    pub fuel_cost: u64,
    /// The least fuel with which the run completes (it checks fuel only at function entries
    /// and loop headers, so this may be less than the cost); with less it traps `OutOfFuel`.
    pub fuel_needed: u64,
}

/// A function's name from the module's name section.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct FuncName {
    pub func: u32,
    pub name: String,
}

impl ModuleInfo {
    /// Whether any value of this module's code may name a GC object: what makes its code
    /// keep stack maps (see `gc`). A module that mentions no such type anywhere (in its
    /// types, globals, tables or element segments) can make or receive none, only hold null
    /// or `i31`s in locals of such types.
    pub fn holds_objects(&self) -> bool {
        let val = |t: &ValType| t.holds_objects();
        self.types.iter().any(|t| match t {
            crate::TypeDef::Func(f) => f.params.iter().chain(&f.results).any(val),
            crate::TypeDef::Struct(_) | crate::TypeDef::Array(_) => true,
        }) || self.globals.iter().any(|g| val(&g.ty))
            || self.tables.iter().any(|t| val(&t.elem))
            || self.elems.iter().any(|e| val(&e.ty))
    }

    /// The defined functions whose funcref anything can see (module indices, sorted): those in
    /// element segments, global initialisers and exports, and the start function. WebAssembly's
    /// `ref.func` may only name functions of the first three, and direct calls never read a
    /// funcref, so only these (and the imported functions) have a funcref in the vmctx (see
    /// [`FuncrefLayout`](crate::FuncrefLayout): the eager ones are this set, for the module
    /// without the segments a lazy table absorbed).
    pub fn escaping(&self) -> Vec<u32> {
        self.escaping_but(&[])
    }

    /// As [`ModuleInfo::escaping`], leaving out the element segments `covered` marks.
    pub fn escaping_but(&self, covered: &[bool]) -> Vec<u32> {
        let kept = |i: &usize| !covered.get(*i).copied().unwrap_or(false);
        let refs = (self.elems.iter().enumerate())
            .filter(|(i, _)| kept(i))
            .flat_map(|(_, e)| &e.items);
        let mut funcs: Vec<u32> = refs
            .chain(&self.global_inits)
            .chain(&self.table_inits)
            .filter_map(|e| match e {
                ConstExpr::RefFunc(f) => Some(*f),
                _ => None,
            })
            .chain(self.extended.iter().flatten().filter_map(|op| match op {
                ConstOp::RefFunc(f) => Some(*f),
                _ => None,
            }))
            .chain(self.exports.iter().filter_map(|e| match e.index {
                EntityIndex::Func(f) => Some(f),
                _ => None,
            }))
            .chain(self.start)
            .filter(|&f| f >= self.imported_funcs)
            .collect();
        funcs.sort_unstable();
        funcs.dedup();
        funcs
    }

    pub fn func_type(&self, func: u32) -> &FuncType {
        self.sig(self.funcs[func as usize])
    }
    /// The function type of tag `tag`: its parameters are what an exception carries.
    pub fn tag_type(&self, tag: u32) -> &FuncType {
        self.sig(self.tags[tag as usize])
    }
    /// Type `ty`, which the module uses as a function type (validation, or the check of
    /// metadata, has seen that it is one).
    pub fn sig(&self, ty: u32) -> &FuncType {
        self.types[ty as usize]
            .as_func()
            .expect("a function type where one is used")
    }
    pub fn defined_funcs(&self) -> usize {
        self.funcs.len() - self.imported_funcs as usize
    }
    /// What type `ty` declares of subtyping (see [`ModuleInfo::subs`]).
    pub fn sub(&self, ty: u32) -> crate::Sub {
        self.subs
            .get(ty as usize)
            .copied()
            .unwrap_or(crate::Sub::FINAL)
    }
    /// The types above type `ty` by declared supertypes, nearest first.
    pub fn supertypes(&self, ty: u32) -> impl Iterator<Item = u32> + '_ {
        supertypes(move |t| self.sub(t), ty)
    }
    /// How many supertypes are above type `ty` (see `gc`: a struct's header holds it).
    pub fn depth(&self, ty: u32) -> u32 {
        self.supertypes(ty).count() as u32
    }
    /// Whether code compares accesses to memory `m` with its length (see
    /// [`ModuleInfo::faults_bound`]); where not, the memory must be tight.
    pub fn checks_memory(&self, m: u32) -> bool {
        self.checks_bounds && !self.faults_bound.get(m as usize).is_some_and(|&f| f)
    }
}

/// The archived form is what the runtime reads, in place, from an artifact.
impl ArchivedModuleInfo {
    pub fn func_type(&self, func: u32) -> &ArchivedFuncType {
        self.sig(self.funcs[func as usize].to_native())
    }
    pub fn tag_type(&self, tag: u32) -> &ArchivedFuncType {
        self.sig(self.tags[tag as usize].to_native())
    }
    /// See [`ModuleInfo::sig`]: an artifact's metadata is checked when it is opened.
    pub fn sig(&self, ty: u32) -> &ArchivedFuncType {
        self.types[ty as usize]
            .as_func()
            .expect("a function type where one is used")
    }
    pub fn defined_funcs(&self) -> usize {
        self.funcs.len() - self.imported_funcs.to_native() as usize
    }
    /// See [`ModuleInfo::sub`].
    pub fn sub(&self, ty: u32) -> crate::Sub {
        self.subs
            .get(ty as usize)
            .map_or(crate::Sub::FINAL, |s| s.native())
    }
    /// See [`ModuleInfo::depth`].
    pub fn depth(&self, ty: u32) -> u32 {
        supertypes(|t| self.sub(t), ty).count() as u32
    }
    /// See [`ModuleInfo::checks_memory`].
    pub fn checks_memory(&self, m: u32) -> bool {
        self.checks_bounds && !self.faults_bound.get(m as usize).is_some_and(|&f| f)
    }
}

/// The types above `ty` by the supertypes `sub` says each declares, nearest first. A supertype
/// comes before its subtype (`ModuleInfo::check`), so the walk ends; one that does not ends it.
fn supertypes(sub: impl Fn(u32) -> crate::Sub, ty: u32) -> impl Iterator<Item = u32> {
    std::iter::successors(Some(ty), move |&t| sub(t).supertype.filter(|&s| s < t)).skip(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_static_only_for_constant_offsets_within_the_limit() {
        let at = |index, offset| SegmentMode::Active { index, offset };
        assert_eq!(
            at(0, ConstExpr::I32(6)).placement(0, 4, 10, false),
            Placement::Static(6..10)
        );
        assert_eq!(
            at(0, ConstExpr::I32(7)).placement(0, 4, 10, false),
            Placement::Dynamic
        );
        // -1 is offset 2^32 - 1, far past any limit, not a wrap to 3.
        assert_eq!(
            at(0, ConstExpr::I32(-1)).placement(0, 4, 10, false),
            Placement::Dynamic
        );
        assert_eq!(
            at(0, ConstExpr::GlobalGet(0)).placement(0, 0, 10, false),
            Placement::Dynamic
        );
        assert_eq!(
            at(1, ConstExpr::I32(0)).placement(0, 4, 10, false),
            Placement::Elsewhere
        );
        assert_eq!(
            SegmentMode::Passive.placement(0, 4, 10, false),
            Placement::Elsewhere
        );
    }
}
