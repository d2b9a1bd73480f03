//! A component flattened (see `inline`): the core instantiations, lowered functions and
//! resource built-ins to make, in order, and the lifted functions it exports. What instantiating runs (`instance`) and what
//! a component artifact holds (`artifact`); made only by `inline`, at compile time.

use std::sync::Arc;

use crate::abi::Encoding;
use crate::types::{FuncType, ResourceIndex};

/// The most steps and component instances together a plan may have (see `inline`).
pub(crate) const MAX_STEPS: usize = 10_000;

/// What an import of the outer component brings in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImportKind {
    Func,
    Instance,
    /// Types, values, modules and components: nothing this runtime instantiates through.
    Other,
}

/// A core item: an export of a core instance the plan makes, a lowered function, or a
/// resource built-in (`resource.new`, `.rep`, `.drop`).
#[derive(Clone, Debug)]
pub(crate) enum CoreDef {
    Export { instance: usize, name: String },
    Lowered(usize),
    Resource(usize),
}

/// A path to an item the host provides: the outer component's import, then export names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path {
    pub import: usize,
    pub names: Vec<String>,
}

/// Canonical options resolved to core items.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub memory: Option<CoreDef>,
    pub realloc: Option<CoreDef>,
    pub encoding: Encoding,
}

/// A lifted function: a core function with the options it was lifted with.
#[derive(Debug)]
pub(crate) struct Lift {
    pub func: CoreDef,
    pub ty: Arc<FuncType>,
    /// The core function's result types (`ty.core(false)`'s).
    pub core_results: Vec<ephem_runtime::ValType>,
    pub options: Options,
    pub post_return: Option<CoreDef>,
    /// The handle table (the component instance) its values come from and go to.
    pub table: usize,
}

/// What a lowered function calls.
#[derive(Clone, Debug)]
pub(crate) enum Callee {
    /// A host function, by its path.
    Host(Path),
    /// A lifted function of the same component (an adapter between two of its parts).
    Lifted(usize),
}

#[derive(Debug)]
pub(crate) struct Lowering {
    pub callee: Callee,
    pub ty: Arc<FuncType>,
    /// The core function the lowering makes (`ty.core(true)`).
    pub core: ephem_runtime::FuncType,
    pub options: Options,
    /// The handle table (the component instance) of the caller.
    pub table: usize,
}

/// Which resource built-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResourceFuncKind {
    /// `resource.new`: an own handle for a rep (resources the component defines).
    New,
    /// `resource.rep`: the rep behind a handle (resources the component defines).
    Rep,
    /// `resource.drop`: the handle goes; an own one's resource is destroyed.
    Drop,
}

/// A resource built-in on a resource in a component instance's handle table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResourceFunc {
    pub kind: ResourceFuncKind,
    pub resource: ResourceIndex,
    pub table: usize,
}

/// Where a resource type comes from.
#[derive(Clone, Debug)]
pub(crate) enum ResourceDef {
    /// The host's, by the path it is imported through.
    Host(Path),
    /// Defined by the component instance whose handle table is `table`: a new type for each
    /// instantiation, destroyed by `dtor` (a core function of that instance), if it has one.
    Guest { dtor: Option<CoreDef>, table: usize },
}

/// One step of instantiating a plan.
#[derive(Debug)]
pub(crate) enum Step {
    /// Instantiates core module `module` with one item per import, in import order.
    Instantiate { module: usize, args: Vec<CoreDef> },
    /// Makes lowered function `n`.
    Lower(usize),
    /// Makes resource built-in `n`.
    Resource(usize),
}

/// What the outer component exports.
#[derive(Clone, Debug)]
pub(crate) enum Export {
    Func(usize),
    Instance(Vec<(String, Export)>),
}

/// A component, flattened.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    pub lowerings: Vec<Lowering>,
    pub lifts: Vec<Lift>,
    pub imports: Vec<(String, ImportKind)>,
    pub exports: Vec<(String, Export)>,
    pub instances: usize,
    /// The resource types.
    pub resources: Vec<ResourceDef>,
    pub resource_funcs: Vec<ResourceFunc>,
    /// Component instances in the plan, each with its handle table.
    pub tables: usize,
}
