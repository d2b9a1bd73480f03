//! [`Config`]: wasmtime's way to configure an [`Engine`](crate::Engine), so that a host written
//! for wasmtime ports by changing its `use` lines.
//!
//! It carries what ephem has under wasmtime's names (fuel, epoch interruption, the wasm stack,
//! Cranelift's optimisation level, the proposals) and ephem's own settings beside them (bounds
//! checks, write marks, the artifact key, the pools). What changes generated code takes effect
//! only where the engine compiles (`Module::new`, the `cranelift` feature); an artifact
//! compiled elsewhere runs as it was compiled.

use ephem_artifact::ArtifactKey;

use crate::EngineConfig;

/// How an engine is built ([`Engine::new`](crate::Engine::new)). Setters take and return
/// `&mut Self`, as wasmtime's do.
#[derive(Clone, Default)]
pub struct Config {
    pub(crate) engine: EngineConfig,
    /// What was asked that this ephem cannot give (see [`Config::wasm_gc`] and friends):
    /// [`Engine::new`](crate::Engine::new) refuses the configuration, naming them.
    pub(crate) unsupported: Vec<&'static str>,
    pub(crate) artifact_key: Option<ArtifactKey>,
    #[cfg(feature = "cranelift")]
    pub(crate) compiler: CompilerConfig,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("engine", &self.engine);
        d.field("unsupported", &self.unsupported);
        // The key is a secret: say only whether there is one.
        d.field("artifact_key", &self.artifact_key.as_ref().map(|_| "set"));
        #[cfg(feature = "cranelift")]
        d.field("compiler", &self.compiler);
        d.finish()
    }
}

/// What the engine's compiler is built with.
#[cfg(feature = "cranelift")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CompilerConfig {
    pub(crate) fuel: bool,
    pub(crate) bounds_checks: bool,
    pub(crate) write_marks: bool,
    pub(crate) opt_level: OptLevel,
    pub(crate) proposals: ephem_compiler::Proposals,
}

#[cfg(feature = "cranelift")]
impl Default for CompilerConfig {
    fn default() -> CompilerConfig {
        CompilerConfig {
            fuel: false,
            bounds_checks: true,
            write_marks: true,
            opt_level: OptLevel::Speed,
            proposals: ephem_compiler::Proposals::ALL,
        }
    }
}

/// Cranelift's optimisation level (wasmtime's `OptLevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OptLevel {
    /// No optimisation: fastest compile.
    None,
    /// Optimise for speed (the default).
    #[default]
    Speed,
    /// Optimise for speed and size.
    SpeedAndSize,
}

impl Config {
    /// The default configuration: what [`Engine::default`](crate::Engine::default) uses.
    pub fn new() -> Config {
        Config::default()
    }

    /// Whether compiled code meters fuel ([`Store::set_fuel`](crate::Store::set_fuel)); off
    /// by default. Metered and unmetered modules do not mix in one store. Unlike wasmtime's, a
    /// store's fuel is unlimited until `set_fuel`: a host that meters must give each store its
    /// fuel.
    #[cfg(feature = "cranelift")]
    pub fn consume_fuel(&mut self, on: bool) -> &mut Config {
        self.compiler.fuel = on;
        self
    }

    /// Accepted for wasmtime's hosts, and changes nothing: ephem stops any guest at its store's
    /// epoch deadline ([`Store::set_epoch_deadline`](crate::Store::set_epoch_deadline)) by a
    /// signal to its thread, with no check compiled into the code, so deadlines work with
    /// either value.
    pub fn epoch_interruption(&mut self, _on: bool) -> &mut Config {
        self
    }

    /// How much stack wasm may use below the point where the host called it (see
    /// [`EngineConfig::max_wasm_stack`]).
    pub fn max_wasm_stack(&mut self, bytes: usize) -> &mut Config {
        self.engine.max_wasm_stack = Some(bytes);
        self
    }

    /// How many bytes of exceptions a store may hold at once (see
    /// [`EngineConfig::max_exception_bytes`]).
    pub fn max_exception_bytes(&mut self, bytes: usize) -> &mut Config {
        self.engine.max_exception_bytes = Some(bytes);
        self
    }

    /// How many bytes a store's GC heap may grow to (see
    /// [`EngineConfig::max_gc_heap_bytes`]).
    pub fn max_gc_heap_bytes(&mut self, bytes: usize) -> &mut Config {
        self.engine.max_gc_heap_bytes = Some(bytes);
        self
    }

    /// How many bytes a store's GC heap starts with: the first collection comes when they are
    /// used (see [`EngineConfig::first_gc_heap_bytes`]).
    pub fn first_gc_heap_bytes(&mut self, bytes: usize) -> &mut Config {
        self.engine.first_gc_heap_bytes = Some(bytes);
        self
    }

    /// Cranelift's optimisation level for modules this engine compiles.
    #[cfg(feature = "cranelift")]
    pub fn cranelift_opt_level(&mut self, level: OptLevel) -> &mut Config {
        self.compiler.opt_level = level;
        self
    }

    /// Whether compiled code compares every memory access with the memory's length (on by
    /// default; see `Compiler::without_bounds_checks` for what leaving them out costs: such
    /// memories grow and reset with system calls).
    #[cfg(feature = "cranelift")]
    pub fn bounds_checks(&mut self, on: bool) -> &mut Config {
        self.compiler.bounds_checks = on;
        self
    }

    /// Whether compiled code marks the pages it stores into, so that a memory is reset without
    /// a system call (on by default; see `Compiler::without_write_marks`).
    #[cfg(feature = "cranelift")]
    pub fn write_marks(&mut self, on: bool) -> &mut Config {
        self.compiler.write_marks = on;
        self
    }

    /// Whether `return_call` and `return_call_indirect` are accepted (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_tail_call(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.tail_call = on;
        self
    }

    /// Whether a module may have more than one memory (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_multi_memory(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.multi_memory = on;
        self
    }

    /// Whether relaxed SIMD is accepted, in its deterministic profile (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_relaxed_simd(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.relaxed_simd = on;
        self
    }

    /// Whether typed function references are accepted: `call_ref`, non-nullable references,
    /// `br_on_null`, tables with initialisers (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_function_references(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.function_references = on;
        self
    }

    /// Whether `i64.add128`, `i64.sub128`, `i64.mul_wide_s` and `i64.mul_wide_u` are accepted
    /// (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_wide_arithmetic(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.wide_arithmetic = on;
        self
    }

    /// Whether a memory may have pages of one byte (`(pagesize 1)`) instead of 64 KiB
    /// (default: yes). Code that reaches such a memory checks bounds whatever
    /// [`Config::bounds_checks`] says (see `Proposals::custom_page_sizes`).
    #[cfg(feature = "cranelift")]
    pub fn wasm_custom_page_sizes(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.custom_page_sizes = on;
        self
    }

    /// Whether constant expressions may use integer arithmetic (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_extended_const(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.extended_const = on;
        self
    }

    /// WebAssembly 2.0's SIMD: always on; `false` is refused by `Engine::new`.
    pub fn wasm_simd(&mut self, on: bool) -> &mut Config {
        self.always_on("turning off SIMD (part of WebAssembly 2.0)", on)
    }

    /// Bulk memory operations: always on; `false` is refused by `Engine::new`.
    pub fn wasm_bulk_memory(&mut self, on: bool) -> &mut Config {
        self.always_on("turning off bulk memory (part of WebAssembly 2.0)", on)
    }

    /// Reference types: always on; `false` is refused by `Engine::new`.
    pub fn wasm_reference_types(&mut self, on: bool) -> &mut Config {
        self.always_on("turning off reference types (part of WebAssembly 2.0)", on)
    }

    /// Multiple results: always on; `false` is refused by `Engine::new`.
    pub fn wasm_multi_value(&mut self, on: bool) -> &mut Config {
        self.always_on("turning off multi-value (part of WebAssembly 2.0)", on)
    }

    /// Whether exception handling is accepted: tags, `throw`, `throw_ref`, `try_table`,
    /// `exnref` (default: yes).
    #[cfg(feature = "cranelift")]
    pub fn wasm_exceptions(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.exceptions = on;
        self
    }

    /// Whether exception handling's legacy form is accepted: `try`, `catch`, `catch_all`,
    /// `rethrow`, `delegate` (default: yes). clang emits it unless given `-mllvm
    /// -wasm-use-legacy-eh=false`, and so do older Emscripten builds; wasmtime refuses it.
    #[cfg(feature = "cranelift")]
    pub fn wasm_legacy_exceptions(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.legacy_exceptions = on;
        self
    }

    /// Whether garbage collection (`Proposals::gc`: struct and array types, subtyping, GC
    /// references and instructions) is accepted (default: yes). Objects live in a heap per
    /// store, bounded by [`EngineConfig::max_gc_heap_bytes`](crate::EngineConfig).
    pub fn wasm_gc(&mut self, on: bool) -> &mut Config {
        #[cfg(feature = "cranelift")]
        {
            self.compiler.proposals.gc = on;
        }
        let _ = on;
        self
    }

    /// Whether 64-bit memories (addressed by `i64`) are accepted, up to 64 GiB less a page
    /// (`MemoryType::MAX_MEMORY64_BYTES`; default: yes).
    /// Code that reaches one always checks bounds (see `Proposals::memory64`).
    #[cfg(feature = "cranelift")]
    pub fn wasm_memory64(&mut self, on: bool) -> &mut Config {
        self.compiler.proposals.memory64 = on;
        self
    }

    /// Whether shared memories and atomic operations are accepted (default: yes); see
    /// `Proposals::threads` and [`SharedMemory`](crate::SharedMemory). (Without the compiler,
    /// artifacts say what they use, and the runtime runs shared memories whatever this says.)
    pub fn wasm_threads(&mut self, on: bool) -> &mut Config {
        #[cfg(feature = "cranelift")]
        {
            self.compiler.proposals.threads = on;
        }
        let _ = on;
        self
    }

    /// The component model: components compile with `component::Component::new` on any
    /// engine (see the `ephem-component` crate for what they may use yet); turning it off is
    /// refused by `Engine::new`, as for the other features ephem always has.
    pub fn wasm_component_model(&mut self, on: bool) -> &mut Config {
        self.always_on("turning off the component model", on)
    }

    /// A feature ephem always has: asking to turn it off is refused (a host that needs it off
    /// would otherwise run modules it meant to refuse); asking for it again takes the refusal
    /// back.
    fn always_on(&mut self, what: &'static str, on: bool) -> &mut Config {
        self.unsupported.retain(|&w| w != what);
        if !on {
            self.unsupported.push(what);
        }
        self
    }

    /// A feature ephem does not have yet: asking for it is refused (a host that relies on it
    /// would otherwise fail later, module by module); turning it off again takes that back.
    /// The key [`Module::serialize`](crate::Module::serialize) seals artifacts with and
    /// [`Module::deserialize_file`](crate::Module::deserialize_file) verifies them by. Without
    /// one, the engine uses the default compile cache's key (`Cache::default_dir()/key`), the
    /// one `ephem run` verifies artifacts by: `serialize` makes it if it does not exist yet,
    /// `deserialize_file` without it is an error. A fleet configures its own key.
    pub fn artifact_key(&mut self, key: ArtifactKey) -> &mut Config {
        self.artifact_key = Some(key);
        self
    }

    /// ephem's own engine settings: code and memory pools, text mapping, reuse, the wasm
    /// stack (replacing what [`Config::max_wasm_stack`] set).
    pub fn engine_config(&mut self, config: EngineConfig) -> &mut Config {
        self.engine = config;
        self
    }
}
