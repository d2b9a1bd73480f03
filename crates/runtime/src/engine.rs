//! The engine: the code pool every module loads into, and the registry of canonical function
//! type ids that `call_indirect` and import checks compare.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ephem_code_memory::{CodePool, PoolConfig};
use ephem_module::FuncType;

/// Shared by every module and instance made with it; cheap to clone and `Send + Sync`.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    pool: CodePool,
    types: Mutex<Types>,
}

#[derive(Default)]
struct Types {
    ids: HashMap<FuncType, u32>,
    list: Vec<FuncType>,
}

impl Engine {
    /// An engine whose code pool is built from `config` (the default: `dual`).
    pub fn new(config: PoolConfig) -> Result<Engine, crate::Error> {
        Ok(Engine {
            inner: Arc::new(EngineInner {
                pool: CodePool::new(config)?,
                types: Mutex::default(),
            }),
        })
    }

    pub fn code_pool(&self) -> &CodePool {
        &self.inner.pool
    }

    /// The canonical id of `ty`, the same for equal types across all modules of this engine.
    pub fn type_id(&self, ty: &FuncType) -> u32 {
        let mut types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = types.ids.get(ty) {
            return id;
        }
        let id = types.list.len() as u32;
        types.list.push(ty.clone());
        types.ids.insert(ty.clone(), id);
        id
    }

    /// The type with canonical id `id`.
    pub fn func_type(&self, id: u32) -> FuncType {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        types.list[id as usize].clone()
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(PoolConfig::default()).expect("the default code pool can be built")
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pool", &self.inner.pool)
            .finish()
    }
}
