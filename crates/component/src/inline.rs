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

use wasmparser::{ComponentExternalKind, ComponentOuterAliasKind, ExternalKind};

use crate::Error;
use crate::plan::{Callee, CoreDef, Export, ImportKind, Lift, Lowering, Options, Path, Plan, Step};
use crate::translate::{Init, RawOptions, Translation};

pub(crate) const MAX_DEPTH: usize = 64;
pub(crate) const MAX_STEPS: usize = 10_000;

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
    parent: Option<Rc<Scope>>,
}

#[derive(Clone, Debug)]
enum ItemDef {
    Func(FuncDef),
    Instance(InstanceDef),
    Component(ComponentDef),
    Module(usize),
    /// A type: nothing to instantiate.
    Type,
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
}

fn unsupported(what: &str) -> Error {
    Error::Unsupported(what.to_string())
}

/// Flattens the component whose outer translation is the last of `translations`.
pub(crate) fn inline(translations: &[Translation], imports: &ModuleImports) -> Result<Plan, Error> {
    let mut inliner = Inliner {
        translations,
        imports,
        plan: Plan::default(),
    };
    let root = translations
        .last()
        .expect("a component has its own translation");
    let exports = inliner.run(Frame::new(root, None, HashMap::new()), 0)?;
    let mut plan_exports = Vec::new();
    for (name, item) in exports {
        if let Some(export) = inliner.export(&item)? {
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
    ) -> Frame<'a> {
        Frame {
            translation,
            scope,
            args,
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

    fn item(&self, kind: ComponentExternalKind, index: u32) -> ItemDef {
        let i = index as usize;
        match kind {
            ComponentExternalKind::Func => ItemDef::Func(self.funcs[i].clone()),
            ComponentExternalKind::Instance => ItemDef::Instance(self.instances[i].clone()),
            ComponentExternalKind::Component => ItemDef::Component(self.components[i].clone()),
            ComponentExternalKind::Module => ItemDef::Module(self.modules[i]),
            ComponentExternalKind::Type | ComponentExternalKind::Value => ItemDef::Type,
        }
    }

    /// Adds `item` to the index space of its kind.
    fn push(&mut self, item: ItemDef) {
        match item {
            ItemDef::Func(f) => self.funcs.push(f),
            ItemDef::Instance(i) => self.instances.push(i),
            ItemDef::Component(c) => self.components.push(c),
            ItemDef::Module(m) => self.modules.push(m),
            ItemDef::Type => {}
        }
    }

    fn scope(&self) -> Rc<Scope> {
        Rc::new(Scope {
            modules: self.modules.clone(),
            components: self.components.clone(),
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
            match init {
                Init::Import { name, kind } => {
                    let item = if depth == 0 {
                        self.plan.imports.push((name.clone(), *kind));
                        let path = Path {
                            import: self.plan.imports.len() - 1,
                            names: Vec::new(),
                        };
                        match kind {
                            ImportKind::Func => ItemDef::Func(FuncDef::Import(path)),
                            ImportKind::Instance => ItemDef::Instance(InstanceDef::Import(path)),
                            ImportKind::Other => ItemDef::Type,
                        }
                    } else {
                        match frame.args.get(name) {
                            Some(item) => item.clone(),
                            // Validated: only type imports may go without an argument.
                            None => ItemDef::Type,
                        }
                    };
                    frame.push(item);
                }
                Init::Module(m) => frame.modules.push(*m),
                Init::Component(t) => {
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
                        .map(|(name, kind, i)| (name.clone(), frame.item(*kind, *i)))
                        .collect();
                    let child = Frame::new(
                        &self.translations[def.translation],
                        Some(def.scope.clone()),
                        args,
                    );
                    let exports = self.run(child, depth + 1)?;
                    frame.instances.push(InstanceDef::Items(Rc::new(exports)));
                }
                Init::Exports(exports) => {
                    let items = (exports.iter())
                        .map(|(name, kind, i)| (name.clone(), frame.item(*kind, *i)))
                        .collect();
                    frame.instances.push(InstanceDef::Items(Rc::new(items)));
                }
                Init::AliasExport {
                    instance,
                    kind,
                    name,
                } => {
                    let item = match &frame.instances[*instance as usize] {
                        InstanceDef::Items(items) => (items.iter())
                            .find(|(n, _)| n == name)
                            .map(|(_, item)| item.clone())
                            .unwrap_or(ItemDef::Type),
                        InstanceDef::Import(path) => match kind {
                            ComponentExternalKind::Func => {
                                ItemDef::Func(FuncDef::Import(path.child(name)))
                            }
                            ComponentExternalKind::Instance => {
                                ItemDef::Instance(InstanceDef::Import(path.child(name)))
                            }
                            ComponentExternalKind::Type => ItemDef::Type,
                            _ => return Err(unsupported("imported modules and components")),
                        },
                    };
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
                    let lift = Lift {
                        func: frame.core_item(ExternalKind::Func, *core_func),
                        ty: ty.clone(),
                        core_results: ty.core(false).results,
                        options: frame.options(options),
                        post_return: (options.post_return)
                            .map(|f| frame.core_item(ExternalKind::Func, f)),
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
                    self.plan.lowerings.push(Lowering {
                        callee,
                        ty: ty.clone(),
                        core: ty.core(true),
                        options: frame.options(options),
                    });
                    let n = self.plan.lowerings.len() - 1;
                    self.plan.steps.push(Step::Lower(n));
                    frame.core[0].push(CoreDef::Lowered(n));
                }
                Init::Export { name, kind, index } => {
                    let item = frame.item(*kind, *index);
                    frame.exports.push((name.clone(), item.clone()));
                    frame.push(item);
                }
            }
        }
        Ok(frame.exports)
    }

    fn count(&self) -> Result<(), Error> {
        if self.plan.steps.len() >= MAX_STEPS {
            return Err(Error::Unsupported(format!(
                "a component that makes more than {MAX_STEPS} core instances and functions"
            )));
        }
        Ok(())
    }

    /// What the outer component exports of `item`: functions and instances of them (types,
    /// modules and components exported are for other components' use and are left out).
    fn export(&self, item: &ItemDef) -> Result<Option<Export>, Error> {
        Ok(match item {
            ItemDef::Func(FuncDef::Lifted(l)) => Some(Export::Func(*l)),
            ItemDef::Func(FuncDef::Import(_)) | ItemDef::Instance(InstanceDef::Import(_)) => {
                return Err(unsupported("exporting an imported function or instance"));
            }
            ItemDef::Instance(InstanceDef::Items(items)) => {
                let mut out = Vec::new();
                for (name, item) in items.iter() {
                    if let Some(e) = self.export(item)? {
                        out.push((name.clone(), e));
                    }
                }
                Some(Export::Instance(out))
            }
            ItemDef::Component(_) | ItemDef::Module(_) | ItemDef::Type => None,
        })
    }
}
