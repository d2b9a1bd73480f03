//! Resolving imports by module and name.

use std::collections::HashMap;

use std::rc::Rc;

use ephem_module::ImportKind;

use crate::{Error, Extern, Func, Global, Instance, Memory, Module, Table};

/// Named externs that instantiation draws imports from.
#[derive(Clone, Default)]
pub struct Linker {
    defs: HashMap<(String, String), Extern>,
}

impl Linker {
    pub fn new() -> Linker {
        Linker::default()
    }

    /// Defines `module`.`name`.
    pub fn define(&mut self, module: &str, name: &str, ext: Extern) -> &mut Self {
        self.defs.insert((module.to_owned(), name.to_owned()), ext);
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
        for import in module.imports() {
            if self.get(&import.module, &import.name).is_some() {
                continue;
            }
            let ext = match &import.kind {
                ImportKind::Func(t) => {
                    let ty = module.artifact().info().types[*t as usize].clone();
                    let what = format!("`{}`.`{}`", import.module, import.name);
                    Extern::Func(Func::new(module.engine(), ty, move |_| {
                        Err(format!("unprovided import {what} was called").into())
                    }))
                }
                ImportKind::Memory(ty) => Extern::Memory(Rc::new(Memory::new(*ty)?)),
                ImportKind::Table(ty) => Extern::Table(Rc::new(Table::new(*ty, 0)?)),
                ImportKind::Global(ty) => Extern::Global(Rc::new(Global::new(*ty, 0))),
            };
            self.define(&import.module, &import.name, ext);
        }
        Ok(self)
    }

    pub fn get(&self, module: &str, name: &str) -> Option<&Extern> {
        self.defs.get(&(module.to_owned(), name.to_owned()))
    }

    /// Instantiates `module` with its imports taken from this linker.
    pub fn instantiate(&self, module: &Module) -> Result<Instance, Error> {
        let imports = module
            .imports()
            .iter()
            .map(|i| {
                self.get(&i.module, &i.name).cloned().ok_or_else(|| {
                    let what = match &i.kind {
                        ImportKind::Func(t) => {
                            format!("func {:?}", module.artifact().info().types[*t as usize])
                        }
                        other => format!("{other:?}"),
                    };
                    Error::Link(format!(
                        "unknown import `{}`.`{}` ({what})",
                        i.module, i.name
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Instance::new(module, &imports)
    }
}
