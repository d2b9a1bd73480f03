//! Host functions by name: the outer component's imports are looked up here, an instance
//! import's functions by their path through nested [`LinkerInstance`]s. A typed function
//! (`func_wrap`) is checked against the type each lowering gives it when a component is
//! instantiated; an untyped one (`func_new`) gets [`Val`]s and must answer with a value of the
//! type, which is checked at each call.

use std::collections::HashMap;
use std::sync::Arc;

use ephem_runtime::{AsContextMut, Engine, HostError, StoreContextMut};

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
    map: HashMap<String, Definition<T>>,
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
        let want = compatible(name)?;
        (self.map.keys())
            .filter(|k| compatible(k).as_ref() == Some(&want))
            .max_by_key(|k| version(k))
    }
}

/// What of `name@version` must match for another version to do: the name and the version up
/// to its first non-zero part. A pre-release (`0.2.0-rc-2023-10-18`) matches only itself.
fn compatible(name: &str) -> Option<(String, String)> {
    let (base, version) = name.split_once('@')?;
    if version.contains('-') || version.contains('+') {
        return None;
    }
    let mut kept = Vec::new();
    for part in version.split('.') {
        kept.push(part);
        if part != "0" {
            break;
        }
    }
    Some((base.to_string(), kept.join(".")))
}

/// A name's version as numbers, to order compatible ones.
fn version(name: &str) -> Vec<u64> {
    let version = name.split_once('@').map_or("", |(_, v)| v);
    version.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items {
            map: HashMap::new(),
        }
    }
}

/// Host functions and instances of them, by the names components import them by.
pub struct Linker<T> {
    engine: Engine,
    root: Items<T>,
}

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
        }
    }

    /// The engine the linker belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The outer names: what a component imports functions under directly.
    pub fn root(&mut self) -> LinkerInstance<'_, T> {
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
            let (def, shown) = self.find(plan, path);
            if def.is_some() || !which(&shown) {
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
        let plan = &component.inner.plan;
        for (name, kind) in &plan.imports {
            let found = self.root.import(name);
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
                plan::Callee::Host(path) => self.host(plan, path, &l.ty).map(Some),
                plan::Callee::Lifted(_) => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let resources = (plan.resources.iter())
            .map(|r| match r {
                plan::ResourceDef::Guest { .. } => Ok(None),
                plan::ResourceDef::Host(path) => match self.find(plan, path) {
                    (Some(Definition::Resource(ty, dtor)), _) => Ok(Some((*ty, dtor.clone()))),
                    (_, shown) => Err(Error::Link(format!(
                        "the component imports the resource type {shown}, which the linker \
                         does not define as one"
                    ))),
                },
            })
            .collect::<Result<_, _>>()?;
        Ok(InstancePre {
            component: component.clone(),
            imports: Arc::new(instance::Imports { hosts, resources }),
        })
    }

    /// The definition at `path`, if any, and the path as the errors show it.
    fn find(&self, plan: &plan::Plan, path: &Path) -> (Option<&Definition<T>>, String) {
        let import = &plan.imports[path.import].0;
        let mut items = &self.root;
        let mut def = items.import(import);
        let mut shown = format!("`{import}`");
        for name in &path.names {
            match def {
                Some(Definition::Instance(inner)) => items = inner,
                _ => {
                    def = None;
                    break;
                }
            }
            def = items.map.get(name);
            shown = format!("{shown}.`{name}`");
        }
        (def, shown)
    }

    fn host(&self, plan: &plan::Plan, path: &Path, ty: &FuncType) -> Result<Arc<HostFn<T>>, Error> {
        let (def, shown) = self.find(plan, path);
        match def {
            Some(Definition::Func(f)) => {
                if let Some(check) = f.check
                    && !check(ty)
                {
                    return Err(Error::Link(format!(
                        "{shown} is imported as {ty:?}, and the host function has other types"
                    )));
                }
                Ok(f.call.clone())
            }
            _ => Err(Error::Link(format!(
                "the component imports {shown}, which the linker does not define as a function"
            ))),
        }
    }
}

impl<'a, T: 'static> LinkerInstance<'a, T> {
    fn insert(&mut self, name: &str, def: Definition<T>) -> Result<(), Error> {
        if self.items.map.contains_key(name) {
            return Err(Error::Usage(format!("`{name}` is already defined")));
        }
        self.items.map.insert(name.to_string(), def);
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
        let def = (self.items.map)
            .entry(name.to_string())
            .or_insert_with(|| Definition::Instance(Items::default()));
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
    use super::{compatible, version};

    #[test]
    fn compatible_versions_are_those_semver_allows_and_the_highest_is_found() {
        let c = |n: &str| compatible(n);
        assert_eq!(c("wasi:cli/exit@0.2.12"), c("wasi:cli/exit@0.2.0"));
        assert_ne!(c("wasi:cli/exit@0.2.12"), c("wasi:cli/exit@0.3.0"));
        assert_ne!(c("wasi:cli/exit@0.2.0"), c("wasi:io/exit@0.2.0"));
        assert_eq!(c("a:b/c@1.2.3"), c("a:b/c@1.0.0"));
        assert_ne!(c("a:b/c@1.2.3"), c("a:b/c@2.0.0"));
        assert_ne!(c("a:b/c@0.0.1"), c("a:b/c@0.0.2"));
        assert_eq!(c("wasi:cli/exit@0.2.0-rc-2023-10-18"), None);
        assert_eq!(c("no-version"), None);
        assert!(version("x@0.2.12") > version("x@0.2.9"));
    }
}
