//! Running a plan in a store, and calling what it exports.
//!
//! Instantiating takes the plan's steps in order: a core instantiation gets its imports from
//! instances made before it and from lowered functions; a lowered function is a core host
//! function that lifts its arguments out of the caller's memory, calls its callee (the host's
//! function, or a function lifted from another part of the component) and lowers the result
//! back. A lowering's options name items of instances that exist by then (the validator sees to
//! it), so they are resolved once, when the function is made.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use ephem_runtime::{AsContextMut, Extern, HostError, StoreContextMut, Val as Core};

use crate::abi::{self, FlatReader};
use crate::linker::HostFn;
use crate::plan::{self, Callee, CoreDef, Export, Plan, ResourceFuncKind, Step};
use crate::resources::{self, Dtor, Handles, Res, ResourceType};
use crate::typed::ComponentNamedList;
use crate::types::{FuncType, Type};
use crate::values::Val;
use crate::{Component, Error};

/// An instance of a component in a store.
#[derive(Clone)]
pub struct Instance {
    component: Component,
    core: Arc<[ephem_runtime::Instance]>,
    lowered: Arc<[ephem_runtime::Func]>,
    resource_funcs: Arc<[ephem_runtime::Func]>,
    handles: Option<Arc<Mutex<Handles>>>,
}

/// An export of an instance found by [`Instance::get_export_index`]: a path through the
/// component's exported instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentExportIndex(Vec<usize>);

/// A function the component exports, ready to call.
#[derive(Clone)]
pub struct Func {
    lifted: Arc<Lifted>,
}

/// A lifted function resolved to its instance's items.
struct Lifted {
    func: ephem_runtime::Func,
    /// The core function's result types: what the call's result slots are made of.
    core_results: Vec<ephem_runtime::ValType>,
    ty: Arc<FuncType>,
    options: abi::Options,
    post_return: Option<ephem_runtime::Func>,
    /// The callee's handle table, and the tables (none when the plan has no resources).
    table: usize,
    handles: Option<Arc<Mutex<Handles>>>,
}

impl Lifted {
    fn res(&self) -> Res<'_> {
        Res::new(self.handles.as_deref(), self.table)
    }
}

/// Core items as a plan's steps have made them so far.
struct Made<'a, I, F> {
    plan: &'a Plan,
    core: I,
    lowered: F,
    resource_funcs: F,
    handles: Option<Arc<Mutex<Handles>>>,
}

impl<I: AsRef<[ephem_runtime::Instance]>, F: AsRef<[ephem_runtime::Func]>> Made<'_, I, F> {
    fn resolve(&self, mut store: impl AsContextMut, def: &CoreDef) -> Result<Extern, Error> {
        match def {
            // (Every item exists by the time it is used, in a plan `inline` made or `artifact`
            // checked; one that does not is an error, not a panic.)
            CoreDef::Export { instance, name } => (self.core.as_ref().get(*instance))
                .and_then(|i| i.get_export(&mut store, name))
                .ok_or_else(|| Error::Link(format!("no core export `{name}` made yet"))),
            CoreDef::Lowered(n) => (self.lowered.as_ref().get(*n).copied())
                .map(Extern::Func)
                .ok_or_else(|| Error::Link("a lowered function used before it is made".into())),
            CoreDef::Resource(n) => (self.resource_funcs.as_ref().get(*n).copied())
                .map(Extern::Func)
                .ok_or_else(|| Error::Link("a resource built-in used before it is made".into())),
        }
    }

    fn options(
        &self,
        mut store: impl AsContextMut,
        options: &plan::Options,
    ) -> Result<abi::Options, Error> {
        let memory = match &options.memory {
            Some(def) => self.resolve(&mut store, def)?.into_memory(),
            None => None,
        };
        let realloc = match &options.realloc {
            Some(def) => self.resolve(&mut store, def)?.into_func(),
            None => None,
        };
        Ok(abi::Options {
            memory,
            realloc,
            encoding: options.encoding,
        })
    }

    fn lifted(&self, mut store: impl AsContextMut, index: usize) -> Result<Lifted, Error> {
        let lift = &self.plan.lifts[index];
        let func = self.resolve(&mut store, &lift.func)?.into_func();
        let post_return = match &lift.post_return {
            Some(def) => self.resolve(&mut store, def)?.into_func(),
            None => None,
        };
        let func = func.ok_or_else(|| Error::Link("a lifted item is not a function".into()))?;
        Ok(Lifted {
            func,
            core_results: lift.core_results.clone(),
            ty: lift.ty.clone(),
            options: self.options(&mut store, &lift.options)?,
            post_return,
            table: lift.table,
            handles: self.handles.clone(),
        })
    }
}

/// What a linker resolved for a component: the host function of each lowering of a host
/// import (by lowering), and each host resource type's type and destructor (by resource;
/// `None` for the types the component defines).
pub(crate) struct Imports<T> {
    pub hosts: Vec<Option<Arc<HostFn<T>>>>,
    pub resources: Vec<Option<(ResourceType, Arc<Dtor<T>>)>>,
}

/// Instantiates `component` in `store` with `imports`, which a linker resolved for it.
pub(crate) fn instantiate<T: 'static>(
    mut store: StoreContextMut<'_, T>,
    component: &Component,
    imports: &Imports<T>,
) -> Result<Instance, Error> {
    let plan = &component.inner.plan;
    // The types this instance's components define are new ones, its own.
    let types = (imports.resources.iter())
        .map(|host| {
            host.as_ref()
                .map_or_else(ResourceType::fresh, |(ty, _)| *ty)
        })
        .collect();
    let owners = (plan.resources.iter())
        .map(|r| match r {
            plan::ResourceDef::Guest { table, .. } => Some(*table),
            plan::ResourceDef::Host(_) => None,
        })
        .collect();
    let handles = (!plan.resources.is_empty())
        .then(|| Arc::new(Mutex::new(Handles::new(plan.tables, types, owners))));
    let mut made = Made {
        plan,
        core: Vec::with_capacity(plan.instances),
        lowered: Vec::with_capacity(plan.lowerings.len()),
        resource_funcs: Vec::with_capacity(plan.resource_funcs.len()),
        handles,
    };
    for step in &plan.steps {
        match step {
            Step::Instantiate { module, args } => {
                let imports = (args.iter())
                    .map(|def| made.resolve(&mut store, def))
                    .collect::<Result<Vec<_>, _>>()?;
                let module = &component.inner.modules[*module];
                let instance = ephem_runtime::Instance::new(&mut store, module, &imports)?;
                made.core.push(instance);
            }
            Step::Lower(n) => {
                let lowering = &plan.lowerings[*n];
                let options = made.options(&mut store, &lowering.options)?;
                let ty = lowering.ty.clone();
                let callee: Callee2<T> = match &lowering.callee {
                    Callee::Host(_) => {
                        Callee2::Host(imports.hosts[*n].clone().expect("resolved by the linker"))
                    }
                    Callee::Lifted(l) => Callee2::Lifted(made.lifted(&mut store, *l)?),
                };
                let core_ty = lowering.core.clone();
                let (handles, table) = (made.handles.clone(), lowering.table);
                let func = ephem_runtime::Func::new(
                    &mut store,
                    core_ty,
                    move |mut caller, args, results| {
                        let res = Res::new(handles.as_deref(), table);
                        let store = caller.as_context_mut();
                        // A host function's own error passes through as it is (WASI's exit
                        // status is found by its type), any other is the component's.
                        lowered_call(store, &ty, &options, &res, &callee, args, results).map_err(
                            |e| match e {
                                Error::Host(own) => own,
                                other => Box::new(other) as HostError,
                            },
                        )
                    },
                );
                made.lowered.push(func);
            }
            Step::Resource(n) => {
                let func = resource_func(&mut store, &made, imports, plan.resource_funcs[*n])?;
                made.resource_funcs.push(func);
            }
        }
    }
    Ok(Instance {
        component: component.clone(),
        core: made.core.into(),
        lowered: made.lowered.into(),
        resource_funcs: made.resource_funcs.into(),
        handles: made.handles,
    })
}

/// What a lowered function calls, resolved.
enum Callee2<T> {
    Host(Arc<HostFn<T>>),
    Lifted(Lifted),
}

/// The body of a lowered function: lift the arguments, call, lower the result (handles come
/// out of and go into the caller's table, `res`).
fn lowered_call<T>(
    mut store: StoreContextMut<'_, T>,
    ty: &FuncType,
    options: &abi::Options,
    res: &Res<'_>,
    callee: &Callee2<T>,
    args: &[Core],
    results: &mut [Core],
) -> Result<(), Error> {
    // Whatever happens, the borrows lifted out of the caller for this call end with it.
    struct Release<'a, 'b>(&'a Res<'b>);
    impl Drop for Release<'_, '_> {
        fn drop(&mut self) {
            self.0.release();
        }
    }
    let _release = Release(res);
    let params_flat = ty.params_fit;
    let params = {
        let bytes = options.bytes(&store);
        if params_flat {
            let mut flat = FlatReader::new(args);
            (ty.params.iter())
                .map(|(_, t)| abi::lift_flat(bytes, options.encoding, res, t, &mut flat))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            let ptr = args[0].i32().unwrap_or(0) as u32;
            match abi::load_val(bytes, options.encoding, res, &ty.params_tuple(), ptr)? {
                Val::Tuple(values) => values,
                _ => unreachable!("a tuple's value"),
            }
        }
    };
    let mut out = vec![Val::Bool(false); ty.result.is_some() as usize];
    match callee {
        Callee2::Host(f) => {
            f(store.as_context_mut(), ty, &params, &mut out).map_err(Error::Host)?
        }
        Callee2::Lifted(l) => call_lifted(&mut store, l, &params, &mut out)?,
    }
    let Some(result_ty) = &ty.result else {
        return Ok(());
    };
    if !out[0].has_type(result_ty) {
        return Err(Error::Usage(format!(
            "a host function returned {:?}, not a value of type {result_ty:?}",
            out[0]
        )));
    }
    let results_flat = ty.results_fit;
    if results_flat {
        let mut flat = Vec::with_capacity(1);
        abi::lower_flat(&mut store, options, res, result_ty, &out[0], &mut flat)?;
        results.copy_from_slice(&flat);
    } else {
        let retptr = args[args.len() - 1].i32().unwrap_or(0) as u32;
        if !retptr.is_multiple_of(result_ty.align()) {
            return Err(Error::Abi(format!("return pointer {retptr} is misaligned")));
        }
        // The whole result's room first, so that no offset within it can pass the memory.
        let room = options.bytes(&store).len() as u64;
        if retptr as u64 + result_ty.size() as u64 > room {
            return Err(Error::Abi(format!(
                "return pointer {retptr} leaves no room for the result"
            )));
        }
        abi::store_val(&mut store, options, res, result_ty, &out[0], retptr)?;
    }
    Ok(())
}

/// Calls a lifted function with `params` (checked here against its type): lower them into the
/// callee, call, lift the result, then the callee's `post-return`.
fn call_lifted<T>(
    store: &mut StoreContextMut<'_, T>,
    lifted: &Lifted,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), Error> {
    let ty = &lifted.ty;
    if params.len() != ty.params.len()
        || !(params.iter().zip(&ty.params)).all(|(v, (_, t))| v.has_type(t))
    {
        return Err(Error::Usage(format!(
            "arguments {params:?} do not match parameters {:?}",
            ty.params
        )));
    }
    if results.len() != ty.result.is_some() as usize {
        return Err(Error::Usage(format!(
            "room for {} results given, the function has {}",
            results.len(),
            ty.result.is_some() as usize
        )));
    }
    let options = &lifted.options;
    let res = lifted.res();
    let called = (|| {
        let mut args = Vec::new();
        if ty.params_fit {
            for (v, (_, t)) in params.iter().zip(&ty.params) {
                abi::lower_flat(&mut *store, options, &res, t, v, &mut args)?;
            }
        } else {
            let tuple = ty.params_tuple();
            let ptr = options.realloc_for(&mut *store, &tuple)?;
            let all = Val::Tuple(params.to_vec());
            abi::store_val(&mut *store, options, &res, &tuple, &all, ptr)?;
            args.push(Core::I32(ptr as i32));
        }
        let mut core_results: Vec<Core> = lifted
            .core_results
            .iter()
            .map(|&t| Core::default_for(t))
            .collect();
        lifted.func.call(&mut *store, &args, &mut core_results)?;
        Ok::<_, Error>(core_results)
    })();
    // The borrows lent for the call end with it however it ended (a trap, a failed lowering):
    // a handle kept past it would name whatever the host's rep names next.
    let returned = res.returned();
    let core_results = called?;
    returned?;
    if let Some(result_ty) = &ty.result {
        let bytes = options.bytes(&*store);
        let results_flat = ty.results_fit;
        results[0] = if results_flat {
            abi::lift_flat(
                bytes,
                options.encoding,
                &res,
                result_ty,
                &mut FlatReader::new(&core_results),
            )?
        } else {
            let ptr = core_results[0].i32().unwrap_or(0) as u32;
            abi::load_val(bytes, options.encoding, &res, result_ty, ptr)?
        };
    }
    if let Some(post) = lifted.post_return {
        post.call(&mut *store, &core_results, &mut [])?;
    }
    Ok(())
}

/// The core function of resource built-in `f`.
fn resource_func<T: 'static>(
    mut store: &mut StoreContextMut<'_, T>,
    made: &Made<'_, Vec<ephem_runtime::Instance>, Vec<ephem_runtime::Func>>,
    imports: &Imports<T>,
    f: plan::ResourceFunc,
) -> Result<ephem_runtime::Func, Error> {
    use ephem_runtime::{FuncType as CoreType, ValType};
    type CoreVal = Core;
    let handles = (made.handles.clone()).expect("a plan with resource built-ins has resources");
    let (table, resource) = (f.table, f.resource);
    let i32_arg = |args: &[CoreVal]| args[0].i32().unwrap_or(0) as u32;
    let trap = |e: Error| Box::new(e) as HostError;
    Ok(match f.kind {
        ResourceFuncKind::New => {
            let ty = CoreType::new([ValType::I32], [ValType::I32]);
            ephem_runtime::Func::new(&mut store, ty, move |_, args, results| {
                let index = resources::new_handle(&handles, table, resource, i32_arg(args));
                results[0] = CoreVal::I32(index.map_err(trap)? as i32);
                Ok(())
            })
        }
        ResourceFuncKind::Rep => {
            let ty = CoreType::new([ValType::I32], [ValType::I32]);
            ephem_runtime::Func::new(&mut store, ty, move |_, args, results| {
                let rep = resources::rep_of(&handles, table, resource, i32_arg(args));
                results[0] = CoreVal::I32(rep.map_err(trap)? as i32);
                Ok(())
            })
        }
        ResourceFuncKind::Drop => {
            // What destroys the resource: the host's destructor, or the defining instance's
            // (made by then: a type's destructor is defined before the type, the type before
            // its built-ins).
            enum Destroy<T: 'static> {
                Host(Arc<Dtor<T>>),
                Guest(Option<ephem_runtime::Func>),
            }
            let destroy = match (
                &made.plan.resources[resource.0 as usize],
                &imports.resources[resource.0 as usize],
            ) {
                (plan::ResourceDef::Guest { dtor, .. }, _) => Destroy::Guest(match dtor {
                    Some(def) => {
                        Some(made.resolve(&mut store, def)?.into_func().ok_or_else(|| {
                            Error::Link("a resource's destructor is not a function".into())
                        })?)
                    }
                    None => None,
                }),
                (plan::ResourceDef::Host(_), Some((_, dtor))) => Destroy::Host(dtor.clone()),
                (plan::ResourceDef::Host(_), None) => unreachable!("resolved by the linker"),
            };
            let ty = CoreType::new([ValType::I32], []);
            ephem_runtime::Func::new(&mut store, ty, move |mut caller, args, _| {
                let dropped = resources::drop_handle(&handles, table, resource, i32_arg(args))
                    .map_err(trap)?;
                match (dropped, &destroy) {
                    (None, _) | (Some(_), Destroy::Guest(None)) => Ok(()),
                    (Some(rep), Destroy::Host(dtor)) => dtor(caller.as_context_mut(), rep),
                    (Some(rep), Destroy::Guest(Some(dtor))) => {
                        let rep = [CoreVal::I32(rep as i32)];
                        dtor.call(caller.as_context_mut(), &rep, &mut [])
                            .map_err(|e| Box::new(Error::Runtime(e)) as HostError)
                    }
                }
            })
        }
    })
}

impl Instance {
    /// Finds export `name`, in the instance `parent` names if given (an exported instance)
    /// or among the component's own exports.
    pub fn get_export_index(
        &self,
        _store: impl AsContextMut,
        parent: Option<&ComponentExportIndex>,
        name: &str,
    ) -> Option<ComponentExportIndex> {
        let mut exports = &self.component.inner.plan.exports;
        let mut path = Vec::new();
        for &i in parent.map(|p| p.0.as_slice()).unwrap_or_default() {
            path.push(i);
            // (An index from another component's instance may point anywhere.)
            match &exports.get(i)?.1 {
                Export::Instance(items) => exports = items,
                Export::Func(_) => return None,
            }
        }
        let i = exports.iter().position(|(n, _)| n == name)?;
        path.push(i);
        Some(ComponentExportIndex(path))
    }

    fn export_at(&self, index: &ComponentExportIndex) -> Option<&Export> {
        let mut exports = &self.component.inner.plan.exports;
        let (last, parents) = index.0.split_last()?;
        for &i in parents {
            match &exports.get(i)?.1 {
                Export::Instance(items) => exports = items,
                Export::Func(_) => return None,
            }
        }
        Some(&exports.get(*last)?.1)
    }

    /// The exported function `name` (a name of the component's own exports, or an index
    /// from [`Instance::get_export_index`]).
    pub fn get_func(
        &self,
        mut store: impl AsContextMut,
        name: impl InstanceExportLookup,
    ) -> Option<Func> {
        let index = name.lookup(self, &mut store)?;
        let Export::Func(l) = self.export_at(&index)? else {
            return None;
        };
        let made = Made {
            plan: &self.component.inner.plan,
            core: &*self.core,
            lowered: &*self.lowered,
            resource_funcs: &*self.resource_funcs,
            handles: self.handles.clone(),
        };
        let lifted = made.lifted(&mut store, *l).ok()?;
        Some(Func {
            lifted: Arc::new(lifted),
        })
    }

    /// As [`Instance::get_func`], with the function's types checked against `P` and `R`.
    pub fn get_typed_func<P: ComponentNamedList, R: ComponentNamedList>(
        &self,
        mut store: impl AsContextMut,
        name: impl InstanceExportLookup,
    ) -> Result<TypedFunc<P, R>, Error> {
        let func = self
            .get_func(&mut store, name)
            .ok_or_else(|| Error::Usage("no such exported function".into()))?;
        func.typed::<P, R>()
    }
}

/// A name or index that finds an export: `&str` for the component's own exports,
/// [`ComponentExportIndex`] for any.
pub trait InstanceExportLookup {
    #[doc(hidden)]
    fn lookup(&self, instance: &Instance, store: impl AsContextMut)
    -> Option<ComponentExportIndex>;
}

impl InstanceExportLookup for &str {
    fn lookup(
        &self,
        instance: &Instance,
        store: impl AsContextMut,
    ) -> Option<ComponentExportIndex> {
        instance.get_export_index(store, None, self)
    }
}

impl InstanceExportLookup for &ComponentExportIndex {
    fn lookup(&self, _: &Instance, _: impl AsContextMut) -> Option<ComponentExportIndex> {
        Some((*self).clone())
    }
}

impl InstanceExportLookup for ComponentExportIndex {
    fn lookup(&self, _: &Instance, _: impl AsContextMut) -> Option<ComponentExportIndex> {
        Some(self.clone())
    }
}

impl Func {
    /// The function's type.
    pub fn ty(&self) -> &FuncType {
        &self.lifted.ty
    }

    /// Calls the function with `params`; `results` has room for its result, if it has one.
    /// The callee's `post-return` runs before this returns.
    pub fn call(
        &self,
        mut store: impl AsContextMut,
        params: &[Val],
        results: &mut [Val],
    ) -> Result<(), Error> {
        call_lifted(&mut store.as_context_mut(), &self.lifted, params, results)
    }

    /// This function with its types checked against `P` and `R`.
    pub fn typed<P: ComponentNamedList, R: ComponentNamedList>(
        &self,
    ) -> Result<TypedFunc<P, R>, Error> {
        let ty = &self.lifted.ty;
        let params: Vec<&Type> = ty.params.iter().map(|(_, t)| t).collect();
        let results: Vec<&Type> = ty.result.iter().collect();
        if !P::typecheck(&params) || !R::typecheck(&results) {
            return Err(Error::Usage(format!(
                "the function's type is {ty:?}, not the Rust types asked for"
            )));
        }
        Ok(TypedFunc {
            func: self.clone(),
            _types: PhantomData,
        })
    }
}

/// A function the component exports, with Rust types for its parameters and result.
pub struct TypedFunc<P, R> {
    func: Func,
    _types: PhantomData<fn(P) -> R>,
}

impl<P: ComponentNamedList, R: ComponentNamedList> TypedFunc<P, R> {
    /// Calls the function.
    pub fn call(&self, store: impl AsContextMut, params: P) -> Result<R, Error> {
        let mut results = vec![Val::Bool(false); self.func.lifted.ty.result.is_some() as usize];
        self.func.call(store, &params.into_vals(), &mut results)?;
        R::from_vals(results).ok_or_else(|| Error::Usage("a result of another type".into()))
    }

    /// The untyped function.
    pub fn func(&self) -> &Func {
        &self.func
    }
}

impl abi::Options {
    /// A block from `realloc` for a value of type `ty`.
    pub(crate) fn realloc_for<T>(
        &self,
        store: &mut StoreContextMut<'_, T>,
        ty: &Type,
    ) -> Result<u32, Error> {
        self.realloc(store, ty.align(), ty.size())
    }
}
