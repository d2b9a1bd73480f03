//! Host functions by name: the outer component's imports are looked up here, an instance
//! import's functions by their path through nested [`LinkerInstance`]s. A typed function
//! (`func_wrap`) is checked against the type each lowering gives it when a component is
//! instantiated; an untyped one (`func_new`) gets [`Val`]s and must answer with a value of the
//! type, which is checked at each call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use ephem_runtime::{AsContextMut, Engine, HostError, StoreContextMut};
use foldhash::fast::RandomState;

use crate::instance::{self, Instance};
use crate::plan::ImportKind;
use crate::plan::{self, Path};
use crate::resources::{Dtor, ResourceType};
use crate::typed::ComponentNamedList;
use crate::types::{FuncType, Type};
use crate::values::Val;
use crate::{Component, Error};

/// A host function's body over [`Val`]s.
pub(crate) type HostFn<T> = dyn Fn(StoreContextMut<'_, T>, &FuncType, &[Val], &mut [Val]) -> Result<(), HostError>
    + Send
    + Sync;

/// Checks a function's type against what its Rust closure takes and gives.
type Check = fn(&FuncType) -> bool;

struct HostFunc<T> {
    call: Arc<HostFn<T>>,
    check: Option<Check>,
}

enum Definition<T> {
    Func(HostFunc<T>),
    Instance(Items<T>),
    Resource(ResourceType, Arc<Dtor<T>>),
}

struct Items<T> {
    /// (foldhash: linking a component looks a name up per function it imports.)
    map: HashMap<String, Definition<T>, RandomState>,
    /// For each name and version as [`compatible`] reduces them, the defined name of the
    /// highest such version: what an import of a compatible version finds, without a scan.
    compatible: HashMap<String, String, RandomState>,
}

impl<T> Items<T> {
    /// The definition of the outer import `name`: defined under that name, else under a name
    /// whose version is compatible (`wasi:cli/exit@0.2.12` finds `wasi:cli/exit@0.2.6`: the same
    /// major version, and for 0.x the same minor one), the highest of those, as wasmtime's linker
    /// matches them.
    fn import(&self, name: &str) -> Option<&Definition<T>> {
        self.map.get(self.import_key(name)?)
    }

    /// The name `name` is defined under, as [`Items::import`] finds it.
    fn import_key(&self, name: &str) -> Option<&String> {
        if let Some((key, _)) = self.map.get_key_value(name) {
            return Some(key);
        }
        self.compatible.get(compatible(name)?)
    }

    /// The definition under `name`, made by `make` if there is none.
    fn entry(&mut self, name: &str, make: impl FnOnce() -> Definition<T>) -> &mut Definition<T> {
        if !self.map.contains_key(name)
            && let Some(reduced) = compatible(name)
        {
            let best = (self.compatible)
                .entry(reduced.to_string())
                .or_insert_with(|| name.to_string());
            if version(name) > version(best) {
                *best = name.to_string();
            }
        }
        self.map.entry(name.to_string()).or_insert_with(make)
    }
}

/// What of `name@version` must match for another version to do: the name and the version up
/// to its first non-zero part, as a prefix of `name` (`wasi:cli/exit@0.2` of
/// `wasi:cli/exit@0.2.12`). A pre-release (`0.2.0-rc-2023-10-18`) matches only itself.
fn compatible(name: &str) -> Option<&str> {
    let at = name.find('@')?;
    let version = &name[at + 1..];
    if version.contains('-') || version.contains('+') {
        return None;
    }
    let mut end = at + 1;
    for part in version.split('.') {
        end += part.len();
        if part != "0" {
            break;
        }
        end += 1;
    }
    Some(&name[..end.min(name.len())])
}

/// A name's version as numbers, to order compatible ones.
fn version(name: &str) -> Vec<u64> {
    let version = name.split_once('@').map_or("", |(_, v)| v);
    version.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items {
            map: HashMap::default(),
            compatible: HashMap::default(),
        }
    }
}

/// Host functions and instances of them, by the names components import them by.
pub struct Linker<T> {
    engine: Engine,
    root: Items<T>,
    /// The imports resolved for the components linked last, by component (a component opened
    /// again from a kept artifact is the same one): linking it again looks nothing up. Emptied
    /// whenever a definition may change ([`Linker::root`] is the way to all of them).
    resolved: Mutex<Vec<Resolved<T>>>,
}

/// A component linked lately (held weakly) and the imports resolved for it.
type Resolved<T> = (Weak<crate::Inner>, Arc<instance::Imports<T>>);

/// How many components' resolved imports a linker remembers.
const RESOLVED: usize = 64;

/// A component with its imports resolved by a [`Linker`]: instantiating it looks nothing up
/// (wasmtime's `InstancePre`).
pub struct InstancePre<T> {
    component: Component,
    imports: Arc<instance::Imports<T>>,
}

impl<T> Clone for InstancePre<T> {
    fn clone(&self) -> Self {
        InstancePre {
            component: self.component.clone(),
            imports: self.imports.clone(),
        }
    }
}

impl<T: 'static> InstancePre<T> {
    /// Instantiates the component in `store`.
    pub fn instantiate(&self, mut store: impl AsContextMut<Data = T>) -> Result<Instance, Error> {
        instance::instantiate(store.as_context_mut(), &self.component, &self.imports)
    }

    /// The component.
    pub fn component(&self) -> &Component {
        &self.component
    }
}

/// One level of a [`Linker`]: the outer names, or an instance's.
pub struct LinkerInstance<'a, T> {
    items: &'a mut Items<T>,
}

impl<T: 'static> Linker<T> {
    /// An empty linker for components of `engine`.
    pub fn new(engine: &Engine) -> Linker<T> {
        Linker {
            engine: engine.clone(),
            root: Items::default(),
            resolved: Mutex::new(Vec::new()),
        }
    }

    /// The engine the linker belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The outer names: what a component imports functions under directly.
    pub fn root(&mut self) -> LinkerInstance<'_, T> {
        (self.resolved.get_mut().unwrap_or_else(|e| e.into_inner())).clear();
        LinkerInstance {
            items: &mut self.root,
        }
    }

    /// The instance `name` (`wasi:cli/stdout@0.2.0`), made if not yet defined.
    pub fn instance(&mut self, name: &str) -> Result<LinkerInstance<'_, T>, Error> {
        self.root().into_instance(name)
    }

    /// Defines every function and resource type `component` imports that this linker does not
    /// yet define, and whose path `which` accepts: functions that trap when called, naming
    /// themselves, and resource types of which the host makes no objects (wasmtime's method,
    /// with a filter: `ephem run` stubs what it does not provide of WASI this way).
    pub fn define_unknown_imports_as_traps(
        &mut self,
        component: &Component,
        which: impl Fn(&str) -> bool,
    ) -> Result<(), Error> {
        /// The stand-in type of resources nobody provides.
        struct Unprovided;
        let plan = &component.inner.plan;
        let funcs = (plan.lowerings.iter()).filter_map(|l| match &l.callee {
            plan::Callee::Host(path) => Some((path, true)),
            plan::Callee::Lifted(_) => None,
        });
        let resources = (plan.resources.iter()).filter_map(|r| match r {
            plan::ResourceDef::Host(path) => Some((path, false)),
            plan::ResourceDef::Guest { .. } => None,
        });
        for (path, func) in funcs.chain(resources).collect::<Vec<_>>() {
            let shown = shown(plan, path);
            if Linker::find(&self.roots(plan), path).is_some() || !which(&shown) {
                continue;
            }
            // Where the stub goes: under the name the component imports, made as needed.
            let (last, parents) = match path.names.split_last() {
                Some((last, parents)) => (last.clone(), parents.to_vec()),
                None => (plan.imports[path.import].0.clone(), Vec::new()),
            };
            // (An instance defined under a compatible version is the one to add to: the one
            // the import finds.)
            let import = &plan.imports[path.import].0;
            let key = (self.root.import_key(import).cloned()).unwrap_or_else(|| import.clone());
            let mut at = self.root();
            if !path.names.is_empty() {
                at = at.into_instance(&key)?;
            }
            for name in &parents {
                at = at.into_instance(name)?;
            }
            if func {
                at.func_new(&last, move |_, _, _, _| {
                    Err(format!("{shown}, which this host does not provide, was called").into())
                })?;
            } else {
                at.resource(&last, ResourceType::host::<Unprovided>(), |_, _| Ok(()))?;
            }
        }
        Ok(())
    }

    /// Instantiates `component` in `store` with its imports from this linker.
    pub fn instantiate(
        &self,
        store: impl AsContextMut<Data = T>,
        component: &Component,
    ) -> Result<Instance, Error> {
        self.instantiate_pre(component)?.instantiate(store)
    }

    /// Resolves and type-checks `component`'s imports once, for many instantiations (an
    /// instantiation then looks nothing up).
    pub fn instantiate_pre(&self, component: &Component) -> Result<InstancePre<T>, Error> {
        if !component.engine().same(&self.engine) {
            return Err(Error::Usage(
                "the component belongs to another engine than the linker".into(),
            ));
        }
        let remembered = {
            let resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
            (resolved.iter())
                .find(|(c, _)| std::ptr::eq(c.as_ptr(), Arc::as_ptr(&component.inner)))
                .map(|(_, imports)| imports.clone())
        };
        if let Some(imports) = remembered {
            return Ok(InstancePre {
                component: component.clone(),
                imports,
            });
        }
        let plan = &component.inner.plan;
        let roots = self.roots(plan);
        for ((name, kind), &found) in plan.imports.iter().zip(&roots) {
            let fits = matches!(
                (kind, found),
                (ImportKind::Other, _)
                    | (ImportKind::Func, Some(Definition::Func(_)))
                    | (ImportKind::Instance, Some(Definition::Instance(_)))
            );
            if !fits {
                return Err(Error::Link(format!(
                    "the component imports `{name}`, which the linker does not define as a {}",
                    if *kind == ImportKind::Func {
                        "function"
                    } else {
                        "instance"
                    }
                )));
            }
        }
        let hosts = (plan.lowerings.iter())
            .map(|l| match &l.callee {
                plan::Callee::Host(path) => Linker::host(&roots, plan, path, &l.ty).map(Some),
                plan::Callee::Lifted(_) => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let resources = (plan.resources.iter())
            .map(|r| match r {
                plan::ResourceDef::Guest { .. } => Ok(None),
                plan::ResourceDef::Host(path) => match Linker::find(&roots, path) {
                    Some(Definition::Resource(ty, dtor)) => Ok(Some((*ty, dtor.clone()))),
                    _ => Err(Error::Link(format!(
                        "the component imports the resource type {}, which the linker does \
                         not define as one",
                        shown(plan, path)
                    ))),
                },
            })
            .collect::<Result<_, _>>()?;
        let imports = Arc::new(instance::Imports { hosts, resources });
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        // (The entries of components dropped since go: each holds its component's memory.)
        resolved.retain(|(c, _)| c.strong_count() > 0);
        if resolved.len() >= RESOLVED {
            resolved.remove(0);
        }
        resolved.push((Arc::downgrade(&component.inner), imports.clone()));
        Ok(InstancePre {
            component: component.clone(),
            imports,
        })
    }

    /// The definition at `path`, if any, given what each of the plan's imports finds
    /// (`roots`, see [`Linker::roots`]).
    fn find<'l>(roots: &[Option<&'l Definition<T>>], path: &Path) -> Option<&'l Definition<T>> {
        let mut def = *roots.get(path.import)?;
        for name in &path.names {
            match def {
                Some(Definition::Instance(inner)) => def = inner.map.get(name),
                _ => return None,
            }
        }
        def
    }

    /// What each of the plan's imports finds here: looked up once per component, not once per
    /// function imported through it.
    fn roots(&self, plan: &plan::Plan) -> Vec<Option<&Definition<T>>> {
        (plan.imports.iter())
            .map(|(name, _)| self.root.import(name))
            .collect()
    }

    fn host(
        roots: &[Option<&Definition<T>>],
        plan: &plan::Plan,
        path: &Path,
        ty: &FuncType,
    ) -> Result<Arc<HostFn<T>>, Error> {
        match Linker::find(roots, path) {
            Some(Definition::Func(f)) => {
                if let Some(check) = f.check
                    && !check(ty)
                {
                    return Err(Error::Link(format!(
                        "{} is imported as {ty:?}, and the host function has other types",
                        shown(plan, path)
                    )));
                }
                Ok(f.call.clone())
            }
            _ => Err(Error::Link(format!(
                "the component imports {}, which the linker does not define as a function",
                shown(plan, path)
            ))),
        }
    }
}

/// `path` as errors show it: the import's name, then each name within it.
fn shown(plan: &plan::Plan, path: &Path) -> String {
    let mut shown = format!("`{}`", plan.imports[path.import].0);
    for name in &path.names {
        shown = format!("{shown}.`{name}`");
    }
    shown
}

impl<'a, T: 'static> LinkerInstance<'a, T> {
    fn insert(&mut self, name: &str, def: Definition<T>) -> Result<(), Error> {
        if self.items.map.contains_key(name) {
            return Err(Error::Usage(format!("`{name}` is already defined")));
        }
        self.items.entry(name, || def);
        Ok(())
    }

    /// Defines `name` as a host function over [`Val`]s, told the type it is called at;
    /// `results` comes with room for the result, which must be set to a value of that type.
    pub fn func_new(
        &mut self,
        name: &str,
        f: impl Fn(StoreContextMut<'_, T>, &FuncType, &[Val], &mut [Val]) -> Result<(), HostError>
        + Send
        + Sync
        + 'static,
    ) -> Result<(), Error> {
        self.insert(
            name,
            Definition::Func(HostFunc {
                call: Arc::new(f),
                check: None,
            }),
        )
    }

    /// Defines `name` as a host function with Rust types: parameters `P` and results `R`,
    /// each a tuple (`(u32, String)`, `(Option<u8>,)`, `()`).
    pub fn func_wrap<P: ComponentNamedList, R: ComponentNamedList>(
        &mut self,
        name: &str,
        f: impl Fn(StoreContextMut<'_, T>, P) -> Result<R, HostError> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let call = move |store: StoreContextMut<'_, T>,
                         _: &FuncType,
                         params: &[Val],
                         results: &mut [Val]|
              -> Result<(), HostError> {
            let params = P::from_vals(params.to_vec()).ok_or("arguments of another type")?;
            let out = f(store, params)?.into_vals();
            for (slot, v) in results.iter_mut().zip(out) {
                *slot = v;
            }
            Ok(())
        };
        let check: Check = |ty| {
            let params: Vec<&Type> = ty.params.iter().map(|(_, t)| t).collect();
            let results: Vec<&Type> = ty.result.iter().collect();
            P::typecheck(&params) && R::typecheck(&results)
        };
        self.insert(
            name,
            Definition::Func(HostFunc {
                call: Arc::new(call),
                check: Some(check),
            }),
        )
    }

    /// Defines `name` as a host resource type `ty` (`ResourceType::host::<T>()`); `dtor` runs
    /// with the rep of each own handle a component drops.
    pub fn resource(
        &mut self,
        name: &str,
        ty: ResourceType,
        dtor: impl Fn(StoreContextMut<'_, T>, u32) -> Result<(), HostError> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        self.insert(name, Definition::Resource(ty, Arc::new(dtor)))
    }

    /// The nested instance `name`, made if not yet defined.
    pub fn instance(&mut self, name: &str) -> Result<LinkerInstance<'_, T>, Error> {
        LinkerInstance {
            items: &mut *self.items,
        }
        .into_instance(name)
    }

    fn into_instance(self, name: &str) -> Result<LinkerInstance<'a, T>, Error> {
        let def = (self.items).entry(name, || Definition::Instance(Items::default()));
        match def {
            Definition::Instance(items) => Ok(LinkerInstance { items }),
            _ => Err(Error::Usage(format!(
                "`{name}` is already defined, not as an instance"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ephem_runtime::Engine;

    use super::{Definition, Items, Linker, compatible, version};
    use crate::Component;

    /// Linking a component again (a clone, as a kept artifact gives) takes the imports resolved
    /// before; another component, or any change to the linker, resolves them again.
    #[test]
    fn a_component_linked_again_takes_its_resolved_imports_until_the_linker_changes() {
        let engine = Engine::default();
        let text = r#"(component
            (import "f" (func $f (result u32)))
            (core func $g (canon lower (func $f)))
            (core module $m (import "h" "g" (func (result i32))))
            (core instance (instantiate $m (with "h" (instance (export "g" (func $g)))))))"#;
        let (c, other) = (
            Component::new(&engine, text).unwrap(),
            Component::new(&engine, text).unwrap(),
        );
        let mut linker = Linker::<()>::new(&engine);
        linker
            .root()
            .func_wrap("f", |_, (): ()| Ok((1u32,)))
            .unwrap();
        let first = linker.instantiate_pre(&c).unwrap();
        let again = linker.instantiate_pre(&c.clone()).unwrap();
        assert!(Arc::ptr_eq(&first.imports, &again.imports));
        let theirs = linker.instantiate_pre(&other).unwrap();
        assert!(!Arc::ptr_eq(&first.imports, &theirs.imports));
        linker
            .root()
            .func_wrap("g", |_, (): ()| Ok((2u32,)))
            .unwrap();
        let changed = linker.instantiate_pre(&c).unwrap();
        assert!(!Arc::ptr_eq(&first.imports, &changed.imports));
    }

    /// An import finds its own name, else the highest compatible version defined, whatever
    /// the order of definition; an incompatible one finds nothing.
    #[test]
    fn an_import_finds_the_highest_compatible_definition() {
        let mut items = Items::<()>::default();
        for name in [
            "wasi:io/poll@0.2.9",
            "wasi:io/poll@0.2.12",
            "wasi:io/poll@0.2.0",
        ] {
            items.entry(name, || Definition::Instance(Items::default()));
        }
        let key = |name: &str| items.import_key(name).map(String::as_str);
        assert_eq!(key("wasi:io/poll@0.2.3"), Some("wasi:io/poll@0.2.12"));
        assert_eq!(key("wasi:io/poll@0.2.9"), Some("wasi:io/poll@0.2.9"));
        assert_eq!(key("wasi:io/poll@0.3.0"), None);
        assert_eq!(key("wasi:io/streams@0.2.0"), None);
    }

    #[test]
    fn compatible_versions_are_those_semver_allows_and_the_highest_is_found() {
        let c = compatible;
        assert_eq!(c("wasi:cli/exit@0.2.12"), c("wasi:cli/exit@0.2.0"));
        assert_ne!(c("wasi:cli/exit@0.2.12"), c("wasi:cli/exit@0.3.0"));
        assert_ne!(c("wasi:cli/exit@0.2.0"), c("wasi:io/exit@0.2.0"));
        assert_eq!(c("a:b/c@1.2.3"), c("a:b/c@1.0.0"));
        assert_ne!(c("a:b/c@1.2.3"), c("a:b/c@2.0.0"));
        assert_ne!(c("a:b/c@0.0.1"), c("a:b/c@0.0.2"));
        assert_eq!(c("wasi:cli/exit@0.2.0-rc-2023-10-18"), None);
        assert_eq!(c("no-version"), None);
        assert_eq!(c("wasi:cli/exit@0.2.12"), Some("wasi:cli/exit@0.2"));
        assert_eq!(c("a:b/c@10.1.0"), Some("a:b/c@10"));
        assert_eq!(c("a:b/c@0.0.0"), Some("a:b/c@0.0.0"));
        assert!(version("x@0.2.12") > version("x@0.2.9"));
    }
}
