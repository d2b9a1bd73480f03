//! Flattening a component into a [`Plan`]: the core instantiations and lowered functions to
//! make, in order, and the lifted functions it exports.
//!
//! A component's nesting (components inside components, instantiated with each other's exports,
//! aliases in and out) decides only *which* core instance gets *which* import; it can all be
//! worked out once, at compile time, by running the component's definitions over symbolic
//! values. What is left for each instantiation is a straight list of steps, with no component
//! structure to walk: the per-invocation path then costs what its core instances cost.
//!
//! Bounds: nesting depth ([`MAX_DEPTH`]) and the number of core instances and lowerings a plan
//! may hold ([`MAX_STEPS`]), since a small component can instantiate a child many times over.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use wasmparser::{ComponentExternalKind, ComponentOuterAliasKind, ExternalKind};

use crate::Error;
use crate::plan::{
    Callee, CoreDef, Export, ImportKind, Lift, Lowering, MAX_STEPS, Options, Path, Plan,
    ResourceDef, ResourceFunc, ResourceFuncKind, Step,
};
use crate::translate::{Init, Item, RawOptions, Translation};
use crate::types::{FuncType, ResourceIndex};

pub(crate) const MAX_DEPTH: usize = 64;

impl Path {
    pub(crate) fn child(&self, name: &str) -> Path {
        let mut names = self.names.clone();
        names.push(name.to_string());
        Path {
            import: self.import,
            names,
        }
    }
}

#[derive(Clone, Debug)]
enum CoreInstanceDef {
    Made(usize),
    Exports(HashMap<String, CoreDef>),
}

#[derive(Clone, Debug)]
enum FuncDef {
    Import(Path),
    Lifted(usize),
}

#[derive(Clone, Debug)]
enum InstanceDef {
    Import(Path),
    Items(Rc<Vec<(String, ItemDef)>>),
}

#[derive(Clone, Debug)]
struct ComponentDef {
    translation: usize,
    scope: Rc<Scope>,
}

/// The modules and components a component could see where a nested one was defined: what
/// the nested one's outer aliases reach.
#[derive(Debug)]
struct Scope {
    modules: Vec<usize>,
    components: Vec<ComponentDef>,
    /// The resource types it knew, by `translate`'s number: those its outer aliases reach.
    resources: HashMap<u32, ResourceIndex>,
    parent: Option<Rc<Scope>>,
}

#[derive(Clone, Debug)]
enum ItemDef {
    Func(FuncDef),
    Instance(InstanceDef),
    Component(ComponentDef),
    Module(usize),
    /// A type: nothing to instantiate; a resource type, the plan's.
    Type(Option<ResourceIndex>),
}

/// One component being instantiated: its index spaces so far.
struct Frame<'a> {
    translation: &'a Translation,
    scope: Option<Rc<Scope>>,
    args: HashMap<String, ItemDef>,
    /// Core functions, tables, memories, globals and tags, by [`core_space`].
    core: [Vec<CoreDef>; 5],
    core_instances: Vec<CoreInstanceDef>,
    modules: Vec<usize>,
    components: Vec<ComponentDef>,
    funcs: Vec<FuncDef>,
    instances: Vec<InstanceDef>,
    exports: Vec<(String, ItemDef)>,
    /// The plan's resource type for each of `translate`'s numbers this component knows.
    resources: HashMap<u32, ResourceIndex>,
    /// Its handle table in the plan.
    table: usize,
}

fn core_space(kind: ExternalKind) -> usize {
    match kind {
        ExternalKind::Func | ExternalKind::FuncExact => 0,
        ExternalKind::Table => 1,
        ExternalKind::Memory => 2,
        ExternalKind::Global => 3,
        ExternalKind::Tag => 4,
    }
}

/// The core modules' import lists, `(module, name)` in order: how a core instantiation's named
/// instances become one item per import.
pub(crate) type ModuleImports = Vec<Vec<(String, String)>>;

struct Inliner<'a> {
    translations: &'a [Translation],
    imports: &'a ModuleImports,
    plan: Plan,
    /// The work done so far, in definitions run, names copied and type nodes rebuilt: bounded
    /// by [`MAX_WORK`], since a small component can make the flattening do much.
    work: u64,
}

/// The most work flattening one component may take (see `Inliner::work`).
pub(crate) const MAX_WORK: u64 = 20_000_000;

fn unsupported(what: &str) -> Error {
    Error::Unsupported(what.to_string())
}

/// Flattens the component whose outer translation is the last of `translations`.
pub(crate) fn inline(translations: &[Translation], imports: &ModuleImports) -> Result<Plan, Error> {
    let mut inliner = Inliner {
        translations,
        imports,
        plan: Plan::default(),
        work: 0,
    };
    let root = translations
        .last()
        .expect("a component has its own translation");
    inliner.plan.tables = 1;
    let exports = inliner.run(Frame::new(root, None, HashMap::new(), 0), 0)?;
    let mut plan_exports = Vec::new();
    for (name, item) in exports {
        if let Some(export) = inliner.export(&item, 0)? {
            plan_exports.push((name, export));
        }
    }
    inliner.plan.exports = plan_exports;
    Ok(inliner.plan)
}

impl<'a> Frame<'a> {
    fn new(
        translation: &'a Translation,
        scope: Option<Rc<Scope>>,
        args: HashMap<String, ItemDef>,
        table: usize,
    ) -> Frame<'a> {
        let resources = scope
            .as_ref()
            .map(|s| s.resources.clone())
            .unwrap_or_default();
        Frame {
            translation,
            scope,
            args,
            resources,
            table,
            core: Default::default(),
            core_instances: Vec::new(),
            modules: Vec::new(),
            components: Vec::new(),
            funcs: Vec::new(),
            instances: Vec::new(),
            exports: Vec::new(),
        }
    }

    fn core_item(&self, kind: ExternalKind, index: u32) -> CoreDef {
        self.core[core_space(kind)][index as usize].clone()
    }

    fn options(&self, raw: &RawOptions) -> Options {
        Options {
            memory: raw.memory.map(|m| self.core_item(ExternalKind::Memory, m)),
            realloc: raw.realloc.map(|f| self.core_item(ExternalKind::Func, f)),
            encoding: raw.encoding,
        }
    }

    fn item(&self, item: &Item) -> ItemDef {
        let i = item.index as usize;
        match item.kind {
            ComponentExternalKind::Func => ItemDef::Func(self.funcs[i].clone()),
            ComponentExternalKind::Instance => ItemDef::Instance(self.instances[i].clone()),
            ComponentExternalKind::Component => ItemDef::Component(self.components[i].clone()),
            ComponentExternalKind::Module => ItemDef::Module(self.modules[i]),
            ComponentExternalKind::Type | ComponentExternalKind::Value => {
                ItemDef::Type(item.resource.and_then(|r| self.resources.get(&r).copied()))
            }
        }
    }

    /// `ty` with `translate`'s resource numbers replaced by the plan's.
    fn plan_type(&self, ty: &Arc<FuncType>) -> Result<Arc<FuncType>, Error> {
        if !ty.params.iter().any(|(_, t)| t.has_resources())
            && !ty.result.as_ref().is_some_and(|t| t.has_resources())
        {
            return Ok(ty.clone());
        }
        ty.map_resources(&mut |r| self.resources.get(&r.0).copied())
            .map(Arc::new)
            .ok_or_else(|| {
                unsupported(
                    "a resource type passed on in a way \
                     ephem does not follow yet",
                )
            })
    }

    /// Adds `item` to the index space of its kind.
    fn push(&mut self, item: ItemDef) {
        match item {
            ItemDef::Func(f) => self.funcs.push(f),
            ItemDef::Instance(i) => self.instances.push(i),
            ItemDef::Component(c) => self.components.push(c),
            ItemDef::Module(m) => self.modules.push(m),
            ItemDef::Type(_) => {}
        }
    }

    fn scope(&self) -> Rc<Scope> {
        Rc::new(Scope {
            modules: self.modules.clone(),
            components: self.components.clone(),
            resources: self.resources.clone(),
            parent: self.scope.clone(),
        })
    }
}

impl Inliner<'_> {
    /// Runs one component's definitions; gives its exports.
    fn run(&mut self, mut frame: Frame<'_>, depth: usize) -> Result<Vec<(String, ItemDef)>, Error> {
        if depth > MAX_DEPTH {
            return Err(unsupported("components nested this deeply"));
        }
        for init in &frame.translation.inits {
            self.charge(1)?;
            match init {
                Init::Import {
                    name,
                    kind,
                    resources,
                } => {
                    let item = if depth == 0 {
                        self.plan.imports.push((name.clone(), *kind));
                        let path = Path {
                            import: self.plan.imports.len() - 1,
                            names: Vec::new(),
                        };
                        for (names, number) in resources {
                            // An interface's type that another import's already is (WIT's
                            // `use`) stays the type it is.
                            if frame.resources.contains_key(number) {
                                continue;
                            }
                            let mut at = path.clone();
                            at.names = names.clone();
                            let r = self.resource_at(at);
                            frame.resources.insert(*number, r);
                        }
                        match kind {
                            ImportKind::Func => ItemDef::Func(FuncDef::Import(path)),
                            ImportKind::Instance => ItemDef::Instance(InstanceDef::Import(path)),
                            ImportKind::Other => ItemDef::Type(
                                (resources.iter())
                                    .find(|(names, _)| names.is_empty())
                                    .map(|(_, n)| frame.resources[n]),
                            ),
                        }
                    } else {
                        // Validated: only type imports may go without an argument.
                        let item = frame.args.get(name).cloned().unwrap_or(ItemDef::Type(None));
                        for (names, number) in resources {
                            if let Some(r) = self.resource_in(&item, names) {
                                frame.resources.insert(*number, r);
                            }
                        }
                        item
                    };
                    frame.push(item);
                }
                Init::Module(m) => frame.modules.push(*m),
                Init::Component(t) => {
                    let copied = frame.modules.len() + frame.components.len();
                    self.charge((copied + frame.resources.len()) as u64)?;
                    let def = ComponentDef {
                        translation: *t,
                        scope: frame.scope(),
                    };
                    frame.components.push(def);
                }
                Init::CoreInstantiate { module, args } => {
                    let module = frame.modules[*module as usize];
                    let named: HashMap<&str, &CoreInstanceDef> = (args.iter())
                        .map(|(name, i)| (name.as_str(), &frame.core_instances[*i as usize]))
                        .collect();
                    let mut items = Vec::with_capacity(self.imports[module].len());
                    for (m, n) in &self.imports[module] {
                        let def = match named.get(m.as_str()) {
                            Some(CoreInstanceDef::Made(i)) => CoreDef::Export {
                                instance: *i,
                                name: n.clone(),
                            },
                            Some(CoreInstanceDef::Exports(map)) => map
                                .get(n.as_str())
                                .cloned()
                                .ok_or_else(|| Error::Link(format!("no `{m}`.`{n}`")))?,
                            None => return Err(Error::Link(format!("no instance `{m}`"))),
                        };
                        items.push(def);
                    }
                    self.count()?;
                    let instance = self.plan.instances;
                    self.plan.instances += 1;
                    self.plan.steps.push(Step::Instantiate {
                        module,
                        args: items,
                    });
                    frame.core_instances.push(CoreInstanceDef::Made(instance));
                }
                Init::CoreExports(exports) => {
                    let map = (exports.iter())
                        .map(|(name, kind, i)| (name.clone(), frame.core_item(*kind, *i)))
                        .collect();
                    frame.core_instances.push(CoreInstanceDef::Exports(map));
                }
                Init::AliasCoreExport {
                    instance,
                    kind,
                    name,
                } => {
                    let def = match &frame.core_instances[*instance as usize] {
                        CoreInstanceDef::Made(i) => CoreDef::Export {
                            instance: *i,
                            name: name.clone(),
                        },
                        CoreInstanceDef::Exports(map) => map[name.as_str()].clone(),
                    };
                    frame.core[core_space(*kind)].push(def);
                }
                Init::Instantiate { component, args } => {
                    let def = frame.components[*component as usize].clone();
                    let args = (args.iter())
                        .map(|a| (a.name.clone(), frame.item(a)))
                        .collect();
                    self.count()?;
                    let table = self.plan.tables;
                    self.plan.tables += 1;
                    let child = Frame::new(
                        &self.translations[def.translation],
                        Some(def.scope.clone()),
                        args,
                        table,
                    );
                    let exports = self.run(child, depth + 1)?;
                    frame.instances.push(InstanceDef::Items(Rc::new(exports)));
                }
                Init::Exports(exports) => {
                    let items = (exports.iter())
                        .map(|e| (e.name.clone(), frame.item(e)))
                        .collect();
                    frame.instances.push(InstanceDef::Items(Rc::new(items)));
                }
                Init::AliasExport {
                    instance,
                    kind,
                    name,
                    resource,
                } => {
                    let item = match &frame.instances[*instance as usize] {
                        InstanceDef::Items(items) => (items.iter())
                            .find(|(n, _)| n == name)
                            .map(|(_, item)| item.clone())
                            .unwrap_or(ItemDef::Type(None)),
                        InstanceDef::Import(path) => match kind {
                            ComponentExternalKind::Func => {
                                ItemDef::Func(FuncDef::Import(path.child(name)))
                            }
                            ComponentExternalKind::Instance => {
                                ItemDef::Instance(InstanceDef::Import(path.child(name)))
                            }
                            ComponentExternalKind::Type => {
                                ItemDef::Type(resource.map(|_| self.resource_at(path.child(name))))
                            }
                            _ => return Err(unsupported("imported modules and components")),
                        },
                    };
                    if let (Some(number), ItemDef::Type(Some(r))) = (resource, &item) {
                        frame.resources.insert(*number, *r);
                    }
                    frame.push(item);
                }
                Init::AliasOuter { kind, count, index } => {
                    let i = *index as usize;
                    match kind {
                        ComponentOuterAliasKind::CoreType | ComponentOuterAliasKind::Type => {}
                        ComponentOuterAliasKind::CoreModule
                        | ComponentOuterAliasKind::Component => {
                            let item = if *count == 0 {
                                match kind {
                                    ComponentOuterAliasKind::CoreModule => {
                                        ItemDef::Module(frame.modules[i])
                                    }
                                    _ => ItemDef::Component(frame.components[i].clone()),
                                }
                            } else {
                                let mut scope = frame.scope.clone().expect("validated: an outer");
                                for _ in 1..*count {
                                    scope = scope.parent.clone().expect("validated: an outer");
                                }
                                match kind {
                                    ComponentOuterAliasKind::CoreModule => {
                                        ItemDef::Module(scope.modules[i])
                                    }
                                    _ => ItemDef::Component(scope.components[i].clone()),
                                }
                            };
                            frame.push(item);
                        }
                    }
                }
                Init::Lift {
                    core_func,
                    ty,
                    options,
                } => {
                    self.charge(ty.size)?;
                    let ty = frame.plan_type(ty)?;
                    let lift = Lift {
                        func: frame.core_item(ExternalKind::Func, *core_func),
                        core_results: ty.core(false).results,
                        ty,
                        options: frame.options(options),
                        post_return: (options.post_return)
                            .map(|f| frame.core_item(ExternalKind::Func, f)),
                        table: frame.table,
                    };
                    self.plan.lifts.push(lift);
                    frame.funcs.push(FuncDef::Lifted(self.plan.lifts.len() - 1));
                }
                Init::Lower { func, ty, options } => {
                    let callee = match &frame.funcs[*func as usize] {
                        FuncDef::Import(path) => Callee::Host(path.clone()),
                        FuncDef::Lifted(l) => Callee::Lifted(*l),
                    };
                    self.count()?;
                    self.charge(ty.size)?;
                    let ty = frame.plan_type(ty)?;
                    self.plan.lowerings.push(Lowering {
                        callee,
                        core: ty.core(true),
                        ty,
                        options: frame.options(options),
                        table: frame.table,
                    });
                    let n = self.plan.lowerings.len() - 1;
                    self.plan.steps.push(Step::Lower(n));
                    frame.core[0].push(CoreDef::Lowered(n));
                }
                Init::Export(export) => {
                    let item = frame.item(export);
                    frame.exports.push((export.name.clone(), item.clone()));
                    frame.push(item);
                }
                Init::ResourceFunc(kind, number) => {
                    let resource = *frame.resources.get(number).ok_or_else(|| {
                        unsupported("a resource built-in on a resource type the plan cannot follow")
                    })?;
                    let defined_here = matches!(
                        self.plan.resources[resource.0 as usize],
                        ResourceDef::Guest { table, .. } if table == frame.table
                    );
                    if *kind != ResourceFuncKind::Drop && !defined_here {
                        return Err(unsupported(
                            "`resource.new` or `.rep` of a type the plan does not see defined here",
                        ));
                    }
                    self.count()?;
                    self.plan.resource_funcs.push(ResourceFunc {
                        kind: *kind,
                        resource,
                        table: frame.table,
                    });
                    let n = self.plan.resource_funcs.len() - 1;
                    self.plan.steps.push(Step::Resource(n));
                    frame.core[0].push(CoreDef::Resource(n));
                }
                Init::DefineResource { number, dtor } => {
                    // A new type for each instance of the component that defines it.
                    let dtor = match dtor {
                        Some(f) => {
                            Some(frame.core[0].get(*f as usize).cloned().ok_or_else(|| {
                                Error::Invalid("a destructor that is no core function".into())
                            })?)
                        }
                        None => None,
                    };
                    // (Counted: the plan grows by one type per instantiation.)
                    self.count()?;
                    self.plan.resources.push(ResourceDef::Guest {
                        dtor,
                        table: frame.table,
                    });
                    let r = ResourceIndex(self.plan.resources.len() as u32 - 1);
                    frame.resources.insert(*number, r);
                }
            }
        }
        Ok(frame.exports)
    }

    /// The plan's host resource type at `path`, added the first time it is asked for.
    fn resource_at(&mut self, path: Path) -> ResourceIndex {
        let resources = &mut self.plan.resources;
        let found = resources
            .iter()
            .position(|r| matches!(r, ResourceDef::Host(p) if *p == path));
        let i = match found {
            Some(i) => i,
            None => {
                resources.push(ResourceDef::Host(path));
                resources.len() - 1
            }
        };
        ResourceIndex(i as u32)
    }

    /// The resource type at `names` within `item` (an argument given for an import), if the
    /// plan can follow it there.
    fn resource_in(&mut self, item: &ItemDef, names: &[String]) -> Option<ResourceIndex> {
        match (item, names.split_first()) {
            (ItemDef::Type(r), None) => *r,
            (ItemDef::Instance(InstanceDef::Import(path)), Some(_)) => {
                let mut at = path.clone();
                at.names.extend(names.iter().cloned());
                Some(self.resource_at(at))
            }
            (ItemDef::Instance(InstanceDef::Items(items)), Some((first, rest))) => {
                let (_, inner) = items.iter().find(|(n, _)| n == first)?;
                self.resource_in(&inner.clone(), rest)
            }
            _ => None,
        }
    }

    /// Refuses a plan past [`MAX_STEPS`] steps and component instances together: a component
    /// that instantiates its child twice, which does the same, doubles the work at each level
    /// whether or not anything is made.
    fn charge(&mut self, work: u64) -> Result<(), Error> {
        self.work = self.work.saturating_add(work);
        if self.work > MAX_WORK {
            return Err(unsupported(
                "a component whose flattening takes more work than ephem allows",
            ));
        }
        Ok(())
    }

    fn count(&self) -> Result<(), Error> {
        if self.plan.steps.len() + self.plan.tables + self.plan.resources.len() >= MAX_STEPS {
            return Err(Error::Unsupported(format!(
                "a component that makes more than {MAX_STEPS} core instances, functions, \
                 component instances and resource types"
            )));
        }
        Ok(())
    }

    /// What the outer component exports of `item`: functions and instances of them (types,
    /// modules and components exported are for other components' use and are left out).
    fn export(&self, item: &ItemDef, depth: usize) -> Result<Option<Export>, Error> {
        if depth > MAX_DEPTH {
            return Err(unsupported("exported instances nested this deeply"));
        }
        Ok(match item {
            ItemDef::Func(FuncDef::Lifted(l)) => Some(Export::Func(*l)),
            ItemDef::Func(FuncDef::Import(_)) | ItemDef::Instance(InstanceDef::Import(_)) => {
                return Err(unsupported("exporting an imported function or instance"));
            }
            ItemDef::Instance(InstanceDef::Items(items)) => {
                let mut out = Vec::new();
                for (name, item) in items.iter() {
                    if let Some(e) = self.export(item, depth + 1)? {
                        out.push((name.clone(), e));
                    }
                }
                Some(Export::Instance(out))
            }
            ItemDef::Component(_) | ItemDef::Module(_) | ItemDef::Type(_) => None,
        })
    }
}
