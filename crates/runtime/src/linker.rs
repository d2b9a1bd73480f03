//! Resolving imports by module and name.

use std::collections::HashMap;

use crate::{Error, Extern, Instance, Module};

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
                    Error::Link(format!(
                        "unknown import `{}`.`{}` ({:?})",
                        i.module, i.name, i.kind
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Instance::new(module, &imports)
    }
}
