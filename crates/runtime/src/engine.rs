//! The engine: the code pool small texts load into (larger ones are mapped from their file into
//! code-memory's process-wide arena), the pool of linear-memory slots, and the
//! registry of canonical function type ids that `call_indirect` and import checks compare.

use crate::shared::Shared;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use ephem_artifact::{Artifact, ArtifactKey};
use ephem_code_memory::{CodePool, PoolConfig};
use ephem_module::{ArchivedTypeDef, FuncType, RecGroup, Sub, TypeDef};

use crate::memory::{MemoryConfig, MemoryPool};

/// How an engine loads code and makes memories (part of a [`crate::Config`]). The defaults come
/// from the benchmarks in BENCHMARKS.md.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The code pool (strategy, slot sizes).
    pub code: PoolConfig,
    /// Texts of at least this many bytes are mapped read+execute straight from the artifact
    /// file instead of copied into a code slot (0: always map; `usize::MAX`: always copy).
    /// Texts with relocations are always copied.
    pub map_text_at: Option<usize>,
    /// Whether a load takes back code memory that still holds its module's text (a code slot or
    /// an arena region: no copy, no mapping, its pages present). Off, every load copies or maps
    /// its text as if it were new to the process: what a workload whose modules never repeat
    /// pays. Default: on.
    pub reuse_texts: bool,
    /// How linear memories are pooled and initialised.
    pub memory: MemoryConfig,
    /// How much stack wasm may use below the point where the host called it (default:
    /// [`DEFAULT_MAX_WASM_STACK`]); deeper recursion traps with `StackOverflow`. On a thread
    /// with less stack, what the thread has, less a reserve for the host.
    pub max_wasm_stack: Option<usize>,
    /// How many bytes of exceptions a store may hold at once (default:
    /// [`DEFAULT_MAX_EXCEPTION_BYTES`]): a `throw` past it traps with `TooManyExceptions`. An
    /// exception lives until its store is dropped unless nothing can name it any more (see the
    /// runtime's `exceptions`), so a guest that keeps throwing would otherwise take memory
    /// without bound.
    pub max_exception_bytes: Option<usize>,
    /// How many bytes a store's GC heap may grow to (default: [`DEFAULT_MAX_GC_HEAP_BYTES`];
    /// at most 4 GiB less 64 KiB): an allocation past it traps with `GcHeapExhausted`. The
    /// store's limiter is asked too, as for a memory.
    pub max_gc_heap_bytes: Option<usize>,
    /// How many bytes a store's GC heap has when its first allocation makes it (default
    /// [`DEFAULT_FIRST_GC_HEAP_BYTES`], rounded up to 8): the first collection comes when
    /// they are used. A call that allocates less never collects; a small value makes
    /// collections frequent (the differential fuzzer's use, to reach the collector often).
    pub first_gc_heap_bytes: Option<usize>,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            code: PoolConfig::default(),
            map_text_at: None,
            reuse_texts: true,
            memory: MemoryConfig::default(),
            max_wasm_stack: None,
            max_exception_bytes: None,
            max_gc_heap_bytes: None,
            first_gc_heap_bytes: None,
        }
    }
}

/// Default for [`EngineConfig::max_exception_bytes`]: a million exceptions of one value each.
pub const DEFAULT_MAX_EXCEPTION_BYTES: usize = 32 << 20;

/// Default for [`EngineConfig::max_gc_heap_bytes`].
pub const DEFAULT_MAX_GC_HEAP_BYTES: usize = 1 << 30;

/// Default for [`EngineConfig::first_gc_heap_bytes`].
pub const DEFAULT_FIRST_GC_HEAP_BYTES: usize = 64 << 10;

/// Default for [`EngineConfig::max_wasm_stack`].
pub const DEFAULT_MAX_WASM_STACK: usize = 512 << 10;

/// Default for [`EngineConfig::map_text_at`]: where mapping starts to beat reading into a code
/// slot (`ephem bench thresholds`; BENCHMARKS.md, Copy or map).
///
/// Opening an artifact never reads its text: a code slot usually still holds it, and one that
/// does not reads it straight from the file into its write view, so that no invocation copies
/// a text it does not load (docs/bench-log/fresh-path-06-*.md).
pub const DEFAULT_MAP_TEXT_AT: usize = 160 << 10;

/// Shared by every module and instance made with it; cheap to clone and `Send + Sync`.
#[derive(Clone)]
pub struct Engine {
    // A clone is an owner, counted in one count; every module, store and memory holds a
    // borrow, counted in its thread's shard (see `shared`).
    inner: Shared<EngineInner>,
}

struct EngineInner {
    /// Different for every engine of the process, and never 0 (see [`Engine::id`]).
    id: u64,
    max_wasm_stack: usize,
    max_exception_bytes: usize,
    max_gc_heap_bytes: usize,
    first_gc_heap_bytes: usize,
    /// The epoch, which stores' deadlines count (see `interrupt`).
    epoch: AtomicU64,
    pool: CodePool,
    memories: Arc<MemoryPool>,
    map_text_at: usize,
    reuse_texts: bool,
    /// Written only when a type is new to the engine; read by casts' and links' subtype
    /// checks, which take it shared.
    types: RwLock<Types>,
    /// See [`crate::Config::artifact_key`].
    artifact_key: OnceLock<ArtifactKey>,
    #[cfg(feature = "cranelift")]
    compiler: crate::compile::EngineCompiler,
}

/// Canonical type ids. A small signature (nearly all of them) is its own id
/// ([`ephem_module::small_id`], below [`REGISTERED`]): computed without a lock or a lookup.
/// Others are registered here, keyed by the bytes that identify a signature (`FuncType::key`),
/// so that a module's archived types are looked up without building owned ones, and numbered
/// from [`REGISTERED`].
///
/// Hashed with foldhash's seeded hasher: every module load hashes its signatures, so the hasher
/// is on the fresh path (SipHash showed in its profile), and the random per-process seed keeps
/// crafted signatures from colliding on purpose.
#[derive(Default)]
struct Types {
    ids: HashMap<Box<[u8]>, u32, foldhash::fast::RandomState>,
    /// By id minus [`REGISTERED`]. Shared with every [`crate::Func`] of the type: cloning a
    /// function allocates nothing.
    list: Vec<Registered>,
    /// What each registered type declares of subtyping (its supertype as a canonical id), by
    /// id minus [`REGISTERED`]. A small id's type is final and declares no supertype.
    subs: Vec<Sub>,
}

/// A registered type: a signature shared with functions, or a struct or an array type (an
/// object's header holds its id; the host reads fields through it), its concrete types
/// canonical ids.
enum Registered {
    Func(Arc<FuncType>),
    Gc(Arc<TypeDef>),
}

impl From<TypeDef> for Registered {
    fn from(ty: TypeDef) -> Registered {
        match ty {
            TypeDef::Func(f) => Registered::Func(Arc::new(f)),
            gc => Registered::Gc(Arc::new(gc)),
        }
    }
}

/// A function's type as [`Engine::shared_func_type`] gives it.
pub(crate) enum TypeRef {
    /// Decoded from its small id: no lock, and nothing written that another thread reads
    /// (two threads calling exports took turns at the registry's lock on every call).
    Small(FuncType),
    /// The registry's (or a host function's) shared copy.
    Shared(Arc<FuncType>),
}

impl TypeRef {
    pub(crate) fn into_owned(self) -> FuncType {
        match self {
            TypeRef::Small(ty) => ty,
            TypeRef::Shared(ty) => (*ty).clone(),
        }
    }
}

impl std::fmt::Debug for TypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        FuncType::fmt(self, f)
    }
}

impl std::ops::Deref for TypeRef {
    type Target = FuncType;

    fn deref(&self) -> &FuncType {
        match self {
            TypeRef::Small(ty) => ty,
            TypeRef::Shared(ty) => ty,
        }
    }
}

/// The first id of a registered (not small) signature.
const REGISTERED: u32 = 1 << 30;

impl Types {
    /// The id of the type with `key`, registering it as `ty(id)` makes it if it is new.
    fn id(&mut self, key: &[u8], ty: impl FnOnce(u32) -> (TypeDef, Sub)) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = REGISTERED + self.list.len() as u32;
        let (ty, sub) = ty(id);
        self.list.push(ty.into());
        self.subs.push(sub);
        self.ids.insert(key.into(), id);
        id
    }

    /// The ids of a recursion group whose members have `keys`: consecutive, the first the
    /// group's; a group not seen before gets new ones, and `types(first)` its members.
    fn group(&mut self, keys: &[Vec<u8>], types: impl FnOnce(u32) -> Vec<(TypeDef, Sub)>) -> u32 {
        if let Some(&first) = self.ids.get(keys[0].as_slice()) {
            return first;
        }
        let first = REGISTERED + self.list.len() as u32;
        for (k, (key, (ty, sub))) in keys.iter().zip(types(first)).enumerate() {
            self.list.push(ty.into());
            self.subs.push(sub);
            self.ids.insert(key.as_slice().into(), first + k as u32);
        }
        first
    }

    /// Whether the type with id `a` is the one with id `b` or declares it a supertype, directly
    /// or not. Supertypes are registered before their subtypes, so the walk ends.
    fn is_subtype(&self, mut a: u32, b: u32) -> bool {
        loop {
            if a == b {
                return true;
            }
            let Some(sub) = a
                .checked_sub(REGISTERED)
                .and_then(|i| self.subs.get(i as usize))
            else {
                return false;
            };
            match sub.supertype {
                Some(s) if s < a => a = s,
                _ => return false,
            }
        }
    }
}

impl Engine {
    /// An engine built as `config` says (wasmtime's constructor).
    pub fn new(config: &crate::Config) -> Result<Engine, crate::Error> {
        Engine::build(config.clone())
    }

    /// An engine configured by `config`, with the default compiler settings and artifact key.
    pub fn with_config(config: EngineConfig) -> Result<Engine, crate::Error> {
        let mut c = crate::Config::new();
        c.engine_config(config);
        Engine::build(c)
    }

    fn build(config: crate::Config) -> Result<Engine, crate::Error> {
        let crate::Config {
            engine: config,
            unsupported,
            artifact_key,
            #[cfg(feature = "cranelift")]
            compiler,
        } = config;
        if !unsupported.is_empty() {
            return Err(crate::Error::Usage(format!(
                "this ephem does not support {}",
                unsupported.join(", ")
            )));
        }
        Ok(Engine {
            inner: Shared::new(EngineInner {
                id: {
                    static NEXT: AtomicU64 = AtomicU64::new(1);
                    NEXT.fetch_add(1, Ordering::Relaxed)
                },
                max_wasm_stack: config.max_wasm_stack.unwrap_or(DEFAULT_MAX_WASM_STACK),
                max_exception_bytes: (config.max_exception_bytes)
                    .unwrap_or(DEFAULT_MAX_EXCEPTION_BYTES),
                max_gc_heap_bytes: (config.max_gc_heap_bytes).unwrap_or(DEFAULT_MAX_GC_HEAP_BYTES),
                first_gc_heap_bytes: (config.first_gc_heap_bytes)
                    .unwrap_or(DEFAULT_FIRST_GC_HEAP_BYTES)
                    .next_multiple_of(ephem_module::gc::ALIGN as usize),
                epoch: AtomicU64::new(0),
                pool: CodePool::new(config.code)?,
                memories: Arc::new(MemoryPool::new(config.memory)),
                map_text_at: config.map_text_at.unwrap_or(DEFAULT_MAP_TEXT_AT),
                reuse_texts: config.reuse_texts,
                types: RwLock::default(),
                artifact_key: artifact_key.map(OnceLock::from).unwrap_or_default(),
                #[cfg(feature = "cranelift")]
                compiler: crate::compile::EngineCompiler::new(compiler),
            }),
        })
    }

    /// The key this engine seals and verifies serialised modules with: the configured one, else
    /// the default compile cache's (made on first use).
    ///
    /// Sealing (`create`) makes the default cache's key if there is none yet, as the cache
    /// itself does; verifying never does, since a key made then could verify nothing, and a
    /// missing key says more than a seal that does not match. (Public for what serialises
    /// beside modules: components.)
    pub fn artifact_key(&self, create: bool) -> Result<&ArtifactKey, crate::Error> {
        if let Some(key) = self.inner.artifact_key.get() {
            return Ok(key);
        }
        let no_key = |why: &str| {
            crate::Error::Usage(format!(
                "no artifact key: none was configured (Config::artifact_key) and {why}"
            ))
        };
        let dir = ephem_artifact::Cache::default_dir().ok_or_else(|| {
            no_key("there is no default compile cache ($EPHEM_CACHE_DIR, $XDG_CACHE_HOME, $HOME)")
        })?;
        let path = dir.join("key");
        let key = if create {
            ArtifactKey::load_or_create(&path)?
        } else if path.exists() {
            ArtifactKey::from_file(&path)?
        } else {
            return Err(no_key(&format!("{} does not exist", path.display())));
        };
        Ok(self.inner.artifact_key.get_or_init(|| key))
    }

    /// The compiler `Module::new` uses, built on first use from the engine's [`crate::Config`].
    #[cfg(feature = "cranelift")]
    pub fn compiler(&self) -> Result<&ephem_compiler::Compiler, crate::Error> {
        self.inner.compiler.get()
    }

    /// How much stack wasm may use (see [`EngineConfig::max_wasm_stack`]).
    pub fn max_wasm_stack(&self) -> usize {
        self.inner.max_wasm_stack
    }

    /// How many bytes of exceptions a store may hold (see
    /// [`EngineConfig::max_exception_bytes`]).
    pub fn max_exception_bytes(&self) -> usize {
        self.inner.max_exception_bytes
    }

    /// How many bytes a store's GC heap may grow to (see [`EngineConfig::max_gc_heap_bytes`]).
    pub fn max_gc_heap_bytes(&self) -> usize {
        self.inner.max_gc_heap_bytes
    }

    /// How many bytes a store's GC heap starts with (see
    /// [`EngineConfig::first_gc_heap_bytes`]).
    pub fn first_gc_heap_bytes(&self) -> usize {
        self.inner.first_gc_heap_bytes
    }

    /// Advances the epoch by one tick: every running guest whose store's deadline this reaches
    /// traps with `Interrupted` (see `interrupt`: its thread is signalled). Any thread may call
    /// it (see also [`Engine::start_epoch_ticker`]).
    pub fn increment_epoch(&self) {
        let epoch = self.inner.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        crate::interrupt::signal_due(self.id(), epoch);
    }

    /// The current epoch.
    pub fn current_epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::Relaxed)
    }

    /// The epoch counter, for the signal handler (see `interrupt`).
    pub(crate) fn epoch(&self) -> *const AtomicU64 {
        &self.inner.epoch
    }

    /// This engine's identity, which no other engine of the process has: what an artifact
    /// keeps its type ids by (see [`Artifact::type_ids`]) and what deadlines name their engine
    /// by (see `interrupt`, where 0 means none), and what a component artifact kept open is
    /// kept for.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A thread that advances the epoch every `interval` until the returned ticker is dropped:
    /// deadlines in wall-clock time, to the precision of the interval.
    pub fn start_epoch_ticker(&self, interval: std::time::Duration) -> EpochTicker {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let engine = self.clone();
        let thread = std::thread::Builder::new()
            .name("ephem-epoch".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(interval)
                {
                    engine.increment_epoch();
                }
            })
            .expect("a thread for the epoch ticker");
        EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A reference for a module, store or memory to hold: counted in this thread's shard,
    /// so that making and dropping one writes no cache line another thread writes (see
    /// `shared`). What an embedder holds is an owner: a clone of the engine it made.
    pub(crate) fn borrow(&self) -> Engine {
        Engine {
            inner: self.inner.borrow(),
        }
    }

    /// Whether `other` is this engine (a clone of it).
    pub fn same(&self, other: &Engine) -> bool {
        Shared::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn memory_pool(&self) -> &Arc<MemoryPool> {
        &self.inner.memories
    }

    /// Whether loads take back code memory that still holds their text (see
    /// [`EngineConfig::reuse_texts`]).
    pub(crate) fn reuses_texts(&self) -> bool {
        self.inner.reuse_texts
    }

    /// Whether a text of `len` bytes is mapped from its file rather than copied.
    pub(crate) fn maps_text(&self, len: usize) -> bool {
        len >= self.inner.map_text_at
    }

    /// The pool every module's code is loaded into.
    pub fn code_pool(&self) -> &CodePool {
        &self.inner.pool
    }

    /// The canonical id of `ty`, the same for equal types across all modules of this engine.
    /// A concrete type in `ty` is a canonical id of this engine (as in the types it hands
    /// out).
    pub fn type_id(&self, ty: &FuncType) -> u32 {
        if let Some(id) = ty.small_id() {
            return id;
        }
        self.final_id(
            |key| ty.key(key, &mut ephem_module::id_key),
            || ty.clone().into(),
        )
    }

    /// The canonical id of struct or array type `ty` as the host makes it (final, no
    /// supertype: the id of a module's final type of the same fields).
    pub(crate) fn gc_type_id(&self, ty: &TypeDef) -> u32 {
        self.final_id(|key| ty.key(key, &mut ephem_module::id_key), || ty.clone())
    }

    /// The id of the final type without supertypes whose key `key` writes (concrete types in
    /// it named by this engine's ids), registering `ty()` if it is new.
    fn final_id(&self, key: impl FnOnce(&mut Vec<u8>), ty: impl FnOnce() -> TypeDef) -> u32 {
        let mut k = Vec::new();
        key(&mut k);
        let mut reg = self.inner.types.write().unwrap_or_else(|e| e.into_inner());
        reg.id(&k, |_| (ty(), Sub::FINAL))
    }

    /// The canonical ids of the types of `artifact`'s module: only types without a small id
    /// are looked up, under at most one lock for all of them, and only the first time this
    /// engine asks for a kept artifact (see [`Artifact::type_ids`]): two threads loading
    /// modules with such types took turns at the lock on every load.
    pub(crate) fn type_ids(&self, artifact: &Artifact) -> Arc<[u32]> {
        artifact.type_ids(self.id(), || {
            let info = artifact.info();
            let groups: Vec<RecGroup> = info.rec_groups.iter().map(|g| g.native()).collect();
            let subs: Vec<Sub> = (0..info.types.len() as u32).map(|t| info.sub(t)).collect();
            self.register(&info.types, &subs, &groups, artifact.small_ids())
        })
    }

    fn register(
        &self,
        types: &[ArchivedTypeDef],
        subs: &[Sub],
        groups: &[RecGroup],
        small: impl ExactSizeIterator<Item = Option<u32>>,
    ) -> Vec<u32> {
        let sub = |t: u32| subs[t as usize];
        let mut key = Vec::new();
        let mut reg = None;
        let mut ids: Vec<u32> = Vec::with_capacity(types.len());
        // Keyed as `type_id` keys a host's type, a type before it (or before its recursion
        // group) by its id: a type names no later one but in its group (`ModuleInfo::check`).
        let key_of = |m: u32, ids: &[u32], key: &mut Vec<u8>| {
            let outside =
                &mut |c: u32, out: &mut Vec<u8>| ephem_module::id_key(ids[c as usize], out);
            ephem_module::type_key(types, &sub, groups, m, key, outside);
        };
        for (i, small) in (0..types.len() as u32).zip(small) {
            if let Some(id) = small {
                ids.push(id);
                continue;
            }
            let reg = reg
                .get_or_insert_with(|| self.inner.types.write().unwrap_or_else(|e| e.into_inner()));
            let Some(g) = ephem_module::group_of(groups, i) else {
                key_of(i, &ids, &mut key);
                let id = reg.id(&key, |own| {
                    let canonical = |c: u32| ids.get(c as usize).copied().unwrap_or(own);
                    let ty = types[i as usize].native().map_concrete(canonical);
                    (ty, sub(i).canonical(canonical))
                });
                ids.push(id);
                continue;
            };
            if i != g.start {
                // Registered with its group's first member.
                continue;
            }
            let keys: Vec<Vec<u8>> = (g.start..g.start + g.len)
                .map(|m| {
                    key_of(m, &ids, &mut key);
                    key.clone()
                })
                .collect();
            let first = reg.group(&keys, |first| {
                (g.start..g.start + g.len)
                    .map(|m| {
                        let canonical = |c: u32| match c.checked_sub(g.start) {
                            Some(at) if at < g.len => first + at,
                            _ => ids[c as usize],
                        };
                        let ty = types[m as usize].native().map_concrete(canonical);
                        (ty, sub(m).canonical(canonical))
                    })
                    .collect()
            });
            ids.extend(first..first + g.len);
        }
        ids
    }

    /// Whether the type with canonical id `a` is the one with id `b` or one of its declared
    /// subtypes, directly or not.
    pub fn is_subtype(&self, a: u32, b: u32) -> bool {
        a == b || {
            let types = self.inner.types.read().unwrap_or_else(|e| e.into_inner());
            types.is_subtype(a, b)
        }
    }

    /// The struct or array type with canonical id `id`, its concrete types canonical ids, if
    /// this engine gave that id to one.
    pub(crate) fn gc_type(&self, id: u32) -> Option<Arc<TypeDef>> {
        let types = self.inner.types.read().unwrap_or_else(|e| e.into_inner());
        match types.list.get(id.checked_sub(REGISTERED)? as usize)? {
            Registered::Gc(ty) => Some(ty.clone()),
            Registered::Func(_) => None,
        }
    }

    /// Whether a value of `a` is one of `b`, both of this engine's canonical ids.
    pub fn matches(&self, a: ephem_module::ValType, b: ephem_module::ValType) -> bool {
        a.matches_with(b, &|x, y| self.is_subtype(x, y))
    }

    /// The type with canonical id `id` (as a concrete reference type of this engine names it),
    /// if this engine gave that id.
    pub fn func_type(&self, id: u32) -> Option<FuncType> {
        match id.checked_sub(REGISTERED) {
            Some(i) => {
                let types = self.inner.types.read().unwrap_or_else(|e| e.into_inner());
                match types.list.get(i as usize)? {
                    Registered::Func(f) => Some(FuncType::clone(f)),
                    Registered::Gc(_) => None,
                }
            }
            None => ephem_module::from_small_id(id),
        }
    }

    /// The type with canonical id `id`, shared, or decoded when it is small.
    pub(crate) fn shared_func_type(&self, id: u32) -> TypeRef {
        match id.checked_sub(REGISTERED) {
            Some(i) => {
                let types = self.inner.types.read().unwrap_or_else(|e| e.into_inner());
                match &types.list[i as usize] {
                    Registered::Func(f) => TypeRef::Shared(f.clone()),
                    Registered::Gc(_) => unreachable!("a function's type id names a signature"),
                }
            }
            None => TypeRef::Small(
                ephem_module::from_small_id(id).expect("ids below REGISTERED are small ids"),
            ),
        }
    }
}

/// Advances an engine's epoch at a fixed interval ([`Engine::start_epoch_ticker`]); dropping
/// it stops the thread.
#[derive(Debug)]
pub struct EpochTicker {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(&crate::Config::new()).expect("the default code pool can be built")
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pool", &self.inner.pool)
            .finish()
    }
}
