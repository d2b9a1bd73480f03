//! Resolving imports by module and name.

use std::collections::HashMap;

use std::rc::Rc;

use ephem_module::ImportKind;

use crate::{Error, Extern, Func, Global, ImportRef, Instance, Memory, Module, Table};

/// Named externs that instantiation draws imports from.
#[derive(Clone, Default)]
pub struct Linker {
    /// By module name, then name (looked up by `&str` without allocating). Seeded foldhash, as
    /// in the engine's type registry: names come from untrusted modules.
    defs: HashMap<String, HashMap<String, Extern, Hasher>, Hasher>,
}

type Hasher = foldhash::fast::RandomState;

impl Linker {
    pub fn new() -> Linker {
        Linker::default()
    }

    /// Defines `module`.`name`.
    pub fn define(&mut self, module: &str, name: &str, ext: Extern) -> &mut Self {
        self.defs
            .entry(module.to_owned())
            .or_default()
            .insert(name.to_owned(), ext);
        self
    }

    /// Defines every export of `instance` under the module name `module`.
    pub fn instance(&mut self, module: &str, instance: &Instance) -> &mut Self {
        for (name, ext) in instance.exports() {
            self.define(module, &name, ext);
        }
        self
    }

    /// Defines every import of `module` that is not yet defined: functions as stubs that trap
    /// with a message naming the import, and fresh memories, tables and globals (zero) of the
    /// declared types. Lets a module with foreign imports be instantiated and benchmarked.
    pub fn define_unknown_imports_as_traps(&mut self, module: &Module) -> Result<&mut Self, Error> {
        self.define_unknown_funcs_as_traps(module);
        for import in module.imports() {
            if self.get(import.module, import.name).is_none() {
                let ext = fresh_extern(module, &import)?.expect("functions are defined");
                self.define(import.module, import.name, ext);
            }
        }
        Ok(self)
    }

    /// Defines every function `module` imports that is not yet defined as a stub that traps
    /// with a message naming the import.
    pub fn define_unknown_funcs_as_traps(&mut self, module: &Module) -> &mut Self {
        for import in module.imports() {
            let ImportKind::Func(t) = import.kind else {
                continue;
            };
            if self.get(import.module, import.name).is_none() {
                let ty = module.artifact().info().types[t as usize].native();
                let what = format!("`{}`.`{}`", import.module, import.name);
                let stub = Func::new(module.engine(), ty, move |_| {
                    Err(format!("unprovided import {what} was called").into())
                });
                self.define(import.module, import.name, Extern::Func(stub));
            }
        }
        self
    }

    /// The externs `module` imports: functions from this linker, and fresh memories, tables and
    /// globals (zero) of the declared types for those it does not define. What an embedder that
    /// gives every instance its own memory does on each instantiation. A fresh memory comes
    /// from a pool slot that may already hold the module's image for it (see [`Memory`]).
    pub fn resolve_with_fresh_state(&self, module: &Module) -> Result<Vec<Extern>, Error> {
        module
            .imports()
            .map(|i| match self.get(i.module, i.name) {
                Some(ext) => Ok(ext.clone()),
                None => fresh_extern(module, &i)?.ok_or_else(|| {
                    Error::Link(format!("unknown import `{}`.`{}`", i.module, i.name))
                }),
            })
            .collect()
    }

    pub fn get(&self, module: &str, name: &str) -> Option<&Extern> {
        self.defs.get(module)?.get(name)
    }

    /// Instantiates `module` with its imports taken from this linker.
    pub fn instantiate(&self, module: &Module) -> Result<Instance, Error> {
        Instance::new(module, &self.resolve(module)?)
    }

    /// The externs `module` imports, in its import order.
    pub fn resolve(&self, module: &Module) -> Result<Vec<Extern>, Error> {
        module
            .imports()
            .map(|i| {
                self.get(i.module, i.name).cloned().ok_or_else(|| {
                    let what = match &i.kind {
                        ImportKind::Func(t) => {
                            format!(
                                "func {:?}",
                                module.artifact().info().types[*t as usize].native()
                            )
                        }
                        other => format!("{other:?}"),
                    };
                    Error::Link(format!(
                        "unknown import `{}`.`{}` ({what})",
                        i.module, i.name
                    ))
                })
            })
            .collect()
    }
}

/// A fresh memory (from the engine's pool, preferably a slot that has the module's image for
/// it), table or global (zero) of an import's type; `None` for a function.
fn fresh_extern(module: &Module, import: &ImportRef<'_>) -> Result<Option<Extern>, Error> {
    Ok(Some(match &import.kind {
        ImportKind::Func(_) => return Ok(None),
        ImportKind::Memory(ty) => {
            let artifact = module.artifact();
            let image = artifact.image(import.index).map(|i| (artifact, i));
            let pool = module.engine().memory_pool();
            Extern::Memory(Rc::new(Memory::pooled(pool, *ty, image)?))
        }
        ImportKind::Table(ty) => Extern::Table(Rc::new(Table::new(*ty, 0)?)),
        ImportKind::Global(ty) => Extern::Global(Rc::new(Global::new(*ty, 0))),
    }))
}
