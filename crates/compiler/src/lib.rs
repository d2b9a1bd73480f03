//! ephem's compiler: WebAssembly 2.0 (SIMD included) and the 3.0 features in [`Proposals`] to native code
//! through Cranelift.
//!
//! [`compile`] validates and parses a module (`wasmparser`), translates every function body to
//! Cranelift IR (our own translator, `translate`), compiles the functions in parallel, and
//! links them into one position-independent text with per-type entry trampolines and host
//! adapters, laid out by calls (see `layout_order`). Intra-module calls are resolved here;
//! everything that differs per instance is reached through the instance context. The only
//! relocations left for load time are absolute addresses of the runtime's float library calls,
//! which code for CPUs without SSE4.1 or FMA needs (the loader patches them; such a text is
//! always copied, never mapped from its file).
//! The result is an [`ephem_module::CompiledModule`], which the runtime loads without this crate.
//!
//! Fuel metering ([`Compiler::with_fuel`]) is compiled in only when asked for; bounds checks
//! and write marks are compiled in unless turned off ([`Compiler::without_bounds_checks`],
//! [`Compiler::without_write_marks`]). All three are part of the fingerprint, so the compile
//! cache keeps their artifacts apart. Deadlines need nothing in the code: the runtime stops a
//! call past its deadline with a signal.
//!
//! The files: `parse.rs` (validation, and the module's description), `translate.rs` and
//! `translate/` (wasm to Cranelift IR, one file per concern), `trampolines.rs` (the per-type
//! glue between host and wasm), `traps.rs` (trap codes and their kinds) and `arch/` (all the
//! machine code this crate reads or writes itself, per architecture); linking is here.

#![forbid(unsafe_code)]

mod arch;
mod growth;
mod parse;
mod trampolines;
mod translate;
mod traps;

use std::sync::Mutex;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::ExternalName;
use cranelift_codegen::ir::LibCall as ClifLibCall;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, FinalizedRelocTarget, binemit::Reloc};
use cranelift_frontend::FunctionBuilderContext;
use ephem_module::{
    CompiledModule, FuncLoc, LibCall, MemoryType, Reloc as ModuleReloc, Target, TrapKind, VmOffsets,
};

use crate::arch::Arch;

pub use parse::features;
/// The operators a [`FuelCosts`] table prices.
pub use wasmparser::Operator;

/// Why a module could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("invalid module: {0}")]
    Invalid(#[from] wasmparser::BinaryReaderError),
    #[error("invalid text format: {0}")]
    Text(#[from] wat::Error),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("code generation failed: {0}")]
    Codegen(String),
    #[error("writing {0}: {1}")]
    Write(std::path::PathBuf, std::io::Error),
}

/// A compiler for the host CPU (a clone shares its targets).
#[derive(Clone)]
pub struct Compiler {
    isa: OwnedTargetIsa,
    /// The same target with the pinned register reserved: metered code keeps the fuel there
    /// across calls (see the translator's fuel).
    metered_isa: OwnedTargetIsa,
    /// The fuel cost of each operator, and the name that identifies the table in the
    /// fingerprint; `None`: no metering.
    fuel: Option<(&'static str, FuelCosts)>,
    /// See [`Compiler::with_max_image_bytes`].
    max_image_bytes: u64,
    /// See [`Compiler::with_proposals`].
    proposals: Proposals,
    /// See [`Compiler::without_write_marks`].
    write_marks: bool,
    /// See [`Compiler::without_bounds_checks`].
    bounds_checks: bool,
    /// See [`Compiler::assuming_exports_grow`].
    exports_grow: bool,
    /// See [`Compiler::with_clif_dir`].
    clif_dir: Option<std::path::PathBuf>,
}

/// The WebAssembly 3.0 features a compiler accepts beyond WebAssembly 2.0 (which includes
/// fixed-width SIMD). All of them by default, as current toolchains emit them; none for a
/// strict 2.0 engine (the 2.0 spec suite expects some such modules to be refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposals {
    /// `return_call` and `return_call_indirect`.
    pub tail_call: bool,
    /// Integer arithmetic in constant expressions.
    pub extended_const: bool,
    /// More than one memory per module.
    pub multi_memory: bool,
    /// Relaxed SIMD, in its deterministic profile (see the translator's `simd::relaxed`).
    pub relaxed_simd: bool,
    /// Typed function references: `call_ref`, `return_call_ref`, non-nullable references,
    /// `br_on_null`, tables with initialisers.
    pub function_references: bool,
    /// 128-bit addition and subtraction of `i64` pairs, and 64 × 64 → 128-bit products.
    pub wide_arithmetic: bool,
    /// Exception handling: tags, `throw`, `throw_ref`, `try_table`, `exnref`.
    pub exceptions: bool,
    /// Exception handling in its legacy form: `try`, `catch`, `catch_all`, `delegate`,
    /// `rethrow` (what clang emits by default, and Emscripten's older builds; wasmtime does
    /// not run it).
    pub legacy_exceptions: bool,
    /// Garbage collection: recursion groups (types that name each other, identified by their
    /// group, iso-recursively, in every module), struct and array types with subtyping, the
    /// references of the `any` hierarchy (`anyref`, `eqref`, `i31ref`, `structref`,
    /// `arrayref`, `nullref`, concrete struct and array types), and the instructions that make
    /// and read GC objects, cast and convert them. Builds on typed function references.
    pub gc: bool,
    /// Memories of one-byte pages (`(pagesize 1)`), besides WebAssembly's 64 KiB ones. Code
    /// that reaches such a memory always checks bounds: a fault can only stop an access a
    /// whole host page past the end.
    pub custom_page_sizes: bool,
    /// Memories addressed by `i64`, up to 64 GiB less a page. Code that reaches one always checks bounds:
    /// a 64-bit address can reach past any reservation.
    pub memory64: bool,
    /// Shared memories and atomic operations (on any memory): `memory.atomic.wait32`/`64`,
    /// `memory.atomic.notify`, `atomic.fence`. A shared memory is never reset for another
    /// instance, so code stores no write marks into it, and a bounds check reads its length
    /// anew (another thread may have grown it).
    pub threads: bool,
    /// WebAssembly 2.0's reference types (with them, more than one table): on in
    /// [`Proposals::NONE`] too, since 2.0 has them; off only to check suites written before
    /// them (the threads proposal's expects a second table to be invalid).
    pub reference_types: bool,
}

impl Proposals {
    /// Every proposal ephem implements.
    pub const ALL: Proposals = Proposals {
        tail_call: true,
        extended_const: true,
        multi_memory: true,
        relaxed_simd: true,
        function_references: true,
        wide_arithmetic: true,
        exceptions: true,
        legacy_exceptions: true,
        gc: true,
        custom_page_sizes: true,
        memory64: true,
        threads: true,
        reference_types: true,
    };
    /// None: exactly WebAssembly 2.0.
    pub const NONE: Proposals = Proposals {
        tail_call: false,
        extended_const: false,
        multi_memory: false,
        relaxed_simd: false,
        function_references: false,
        wide_arithmetic: false,
        exceptions: false,
        legacy_exceptions: false,
        gc: false,
        custom_page_sizes: false,
        memory64: false,
        threads: false,
        reference_types: true,
    };
}

/// The fuel an operator costs (see [`Compiler::with_fuel`]).
pub type FuelCosts = fn(&Operator<'_>) -> u32;

/// The default fuel costs: 1 per operator, 0 for those that only structure control flow or do
/// nothing (`nop`, `drop`, `block`, `loop`, `try_table`, `try`, `catch`, `catch_all`,
/// `delegate`, `else`, `end`, `unreachable`, `return`). Bulk
/// memory and table operations also cost 1 per byte or element they touch, charged when they run.
pub fn default_fuel_cost(op: &Operator<'_>) -> u32 {
    use wasmparser::Operator as O;
    match op {
        O::Nop | O::Drop | O::Block { .. } | O::Loop { .. } | O::Else | O::End => 0,
        O::TryTable { .. } | O::Try { .. } | O::Catch { .. } | O::CatchAll => 0,
        O::Delegate { .. } => 0,
        O::Unreachable | O::Return => 0,
        _ => 1,
    }
}

impl Compiler {
    /// A compiler for the CPU this process runs on.
    pub fn new() -> Result<Compiler, CompileError> {
        Compiler::with_isa_settings(&[])
    }

    /// A compiler for this CPU with some of its features overridden (Cranelift's ISA setting
    /// names, e.g. `("has_sse41", "false")`), for testing code paths other CPUs take.
    pub fn with_isa_settings(isa_settings: &[(&str, &str)]) -> Result<Compiler, CompileError> {
        Compiler::with_settings(&[], isa_settings)
    }

    /// A compiler for this CPU with some of Cranelift's shared settings (e.g. `("opt_level",
    /// "none")`) and ISA settings overridden.
    pub fn with_settings(
        shared: &[(&str, &str)],
        isa_settings: &[(&str, &str)],
    ) -> Result<Compiler, CompileError> {
        let mut flags = settings::builder();
        let set = |f: &mut settings::Builder, k: &str, v: &str| {
            f.set(k, v)
                .map_err(|e| CompileError::Codegen(format!("setting {k}: {e}")))
        };
        set(&mut flags, "opt_level", "speed")?;
        for (k, v) in shared {
            set(&mut flags, k, v)?;
        }
        set(
            &mut flags,
            "enable_verifier",
            if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            },
        )?;
        set(&mut flags, "enable_multi_ret_implicit_sret", "true")?;
        set(&mut flags, "unwind_info", "false")?;
        // Every frame links to its caller's, so that a trap can report its wasm backtrace.
        set(&mut flags, "preserve_frame_pointers", "true")?;
        let build = |flags: settings::Builder| {
            let mut isa_builder =
                cranelift_native::builder().map_err(|e| CompileError::Codegen(e.to_string()))?;
            for (k, v) in isa_settings {
                isa_builder
                    .set(k, v)
                    .map_err(|e| CompileError::Codegen(format!("setting {k}: {e}")))?;
            }
            isa_builder
                .finish(settings::Flags::new(flags))
                .map_err(|e| CompileError::Codegen(e.to_string()))
        };
        let isa = build(flags.clone())?;
        set(&mut flags, "enable_pinned_reg", "true")?;
        let metered_isa = build(flags)?;
        Ok(Compiler {
            isa,
            metered_isa,
            fuel: None,
            max_image_bytes: ephem_module::DEFAULT_MAX_IMAGE_BYTES,
            proposals: Proposals::ALL,
            write_marks: true,
            bounds_checks: true,
            exports_grow: false,
            clif_dir: None,
        })
    }

    /// This compiler, generating stores that set no write marks (`ephem_module::MARK_SHIFT`).
    /// Marks cost compute time (most in loops that store through a new address every
    /// iteration; see BENCHMARKS.md) and save a reset that reads the memory or asks the
    /// kernel: without them, long-running compute is faster and each instance's teardown
    /// slower.
    pub fn without_write_marks(mut self) -> Compiler {
        self.write_marks = false;
        self
    }

    /// This compiler, for modules whose exported memories other code grows: a component's
    /// core modules (the preview 1 adapter and `realloc` grow the main module's memory). Such
    /// a memory gets bounds checks even where the module never grows it, so that it is loose
    /// and growing it makes no system call, instead of being kept tight and opened page by
    /// page with `mprotect` (and closed again at every reset).
    pub fn assuming_exports_grow(mut self) -> Compiler {
        self.exports_grow = true;
        self
    }

    /// This compiler, generating memory accesses without bounds checks: an access past a
    /// memory's length traps by the fault of an inaccessible page instead.
    ///
    /// By default every access is compared with the memory's current length (one comparison
    /// covers a run of accesses through one pointer). That lets a memory that only such code
    /// reaches grow and be torn down without a system call: its slot keeps the pages it grew
    /// into, as the next memory finds them (zeroed), instead of closing them again, which makes
    /// the kernel flush every core's TLB. Most Rust and Go modules grow their memory in every
    /// fresh instance (their allocator grows it on its first allocation), so without checks
    /// they run much slower and do not scale across threads. The checks cost some compute
    /// (most in loops that store a byte per iteration; see BENCHMARKS.md), so long-running
    /// compute that does not grow its memory in every call may leave them out.
    pub fn without_bounds_checks(mut self) -> Compiler {
        self.bounds_checks = false;
        self
    }

    /// This compiler, also writing the Cranelift IR of each defined function, as translated
    /// and before Cranelift optimises it, to `dir/wasm-function[N].clif` (`N` its index,
    /// imports included): what to read beside another engine's IR for the same function
    /// (`wasmtime compile --emit-clif`). The code is the same with or without it.
    pub fn with_clif_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Compiler {
        self.clif_dir = Some(dir.into());
        self
    }

    /// This compiler, accepting only `proposals` beyond WebAssembly 2.0 (default: all).
    pub fn with_proposals(mut self, proposals: Proposals) -> Compiler {
        self.proposals = proposals;
        self
    }

    /// This compiler, with fuel metering at the default costs ([`default_fuel_cost`]): code
    /// subtracts what it runs from its store's fuel (`Store::set_fuel`), per straight-line
    /// stretch, and traps with `OutOfFuel` at a function entry or loop header once the fuel is
    /// below zero. The charge is deterministic: the same module, input and fuel consume the
    /// same amount on every machine and run. The fuel travels between functions in a register
    /// reserved for it (see `ephem_module`'s calling convention), so a store runs metered or
    /// unmetered modules, not both, and a store with fuel refuses unmetered ones.
    pub fn with_fuel(self) -> Compiler {
        self.with_fuel_costs("default", default_fuel_cost)
    }

    /// As [`Compiler::with_fuel`], with the embedder's costs; `name` identifies the table in
    /// the compile cache's key (give a new name when the costs change).
    pub fn with_fuel_costs(mut self, name: &'static str, costs: FuelCosts) -> Compiler {
        self.fuel = Some((name, costs));
        self
    }

    /// This compiler, bounding each memory image in its artifacts to `bytes` (default
    /// [`ephem_module::DEFAULT_MAX_IMAGE_BYTES`]; 0: no images). A memory whose initialised
    /// span is larger has its data segments copied at instantiation instead, so an untrusted
    /// module cannot make a large artifact from little data.
    pub fn with_max_image_bytes(mut self, bytes: u64) -> Compiler {
        self.max_image_bytes = bytes;
        self
    }

    /// The target code is generated for: with the pinned register reserved when metering.
    fn isa(&self) -> &dyn cranelift_codegen::isa::TargetIsa {
        match self.fuel {
            Some(_) => &*self.metered_isa,
            None => &*self.isa,
        }
    }

    /// A description of everything that changes the generated code and the artifact (target
    /// and settings).
    pub fn fingerprint(&self) -> String {
        format!(
            "{} {} {} fuel={} max_image={} proposals={:?} write_marks={} bounds_checks={} \
             exports_grow={}",
            self.isa().triple(),
            self.isa().flags(),
            self.isa()
                .isa_flags()
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(","),
            self.fuel.map_or("off", |(name, _)| name),
            self.max_image_bytes,
            self.proposals,
            self.write_marks,
            self.bounds_checks,
            self.exports_grow
        )
    }

    /// What code from this compiler assumes about the machine: the architecture, the CPU
    /// features it may use (enabled `has_*` settings) and the fingerprint.
    pub fn target(&self) -> Target {
        Target {
            arch: self.isa().triple().architecture.to_string(),
            cpu_features: self
                .isa()
                .isa_flags()
                .iter()
                .filter(|f| f.name.starts_with("has_") && f.as_bool() == Some(true))
                .map(|f| f.name.to_owned())
                .collect(),
            fingerprint: self.fingerprint(),
        }
    }

    /// Compiles wasm (binary, or text accepted by the `wat` crate).
    pub fn compile(&self, bytes: &[u8]) -> Result<CompiledModule, CompileError> {
        let arch = arch::for_isa(self.isa()).ok_or_else(|| {
            CompileError::Unsupported(format!(
                "code for {} (see the compiler's `arch`)",
                self.isa().triple().architecture
            ))
        })?;
        let bytes = wat::parse_bytes(bytes)?;
        let mut parsed = parse::parse(&bytes, self.proposals)?;
        parsed.info.metered = self.fuel.is_some();
        parsed.info.marks_writes = self.write_marks;
        let bounds_checks = self.bounds_checks
            || parsed
                .info
                .memories
                .iter()
                .any(MemoryType::needs_bounds_checks);
        parsed.info.checks_bounds = bounds_checks;
        let layout = ephem_module::FuncrefLayout::of(&parsed.info);
        let offsets = VmOffsets::new(&parsed.info, layout.slots(parsed.info.imported_funcs));
        let growth = match bounds_checks {
            true => growth::Growth::of(&parsed.info, &parsed.bodies)?,
            false => growth::Growth::any(),
        };
        // A memory this module defines and never grows keeps its size unless the host (or a
        // module it is exported to) grows it, which a tight memory does with `mprotect`: its
        // pages past the end can stay inaccessible at no cost in steady state, and faults
        // check its accesses. An imported one may be grown by its exporter's code, and an
        // exported one by its importers' where the compiler is told they do.
        let info = &parsed.info;
        parsed.info.faults_bound = (info.memories.iter().enumerate())
            .map(|(m, ty)| {
                let defined = m >= info.imported_memories as usize;
                let exported = (info.exports.iter())
                    .any(|e| e.index == ephem_module::EntityIndex::Memory(m as u32));
                let fixed = defined && !growth.grows(m as u32) && !(self.exports_grow && exported);
                bounds_checks && !ty.needs_bounds_checks() && (ty.shared || fixed)
            })
            .collect();
        let subtypes = translate::subtypes_of(&parsed.info);
        let layouts = translate::struct_layouts(&parsed.info);
        let env = translate::Env {
            info: &parsed.info,
            offsets: &offsets,
            layout: &layout,
            call_conv: self.isa().default_call_conv(),
            frontend: self.isa().frontend_config(),
            fuel_costs: self.fuel.map(|(_, costs)| costs),
            raise_checks: arch.raises_failed_checks(),
            growth: &growth,
            subtypes: &subtypes,
            layouts: &layouts,
            validated: (parsed.validated.as_ref()).filter(|_| parsed.info.holds_objects()),
        };

        // Units: defined functions, then an entry trampoline and a host adapter per type.
        let defined = parsed.bodies.len();
        let types = parsed.info.types.len();
        let units = defined + 2 * types;
        let results: Vec<Mutex<Option<Result<Compiled, CompileError>>>> =
            (0..units).map(|_| Mutex::new(None)).collect();
        // Largest bodies first: a long function taken last would leave the other threads idle
        // while it compiles.
        let mut order: Vec<usize> = (0..units).collect();
        order.sort_by_key(|&u| {
            std::cmp::Reverse(parsed.bodies.get(u).map_or(0, |b| b.as_bytes().len()))
        });
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(units.div_ceil(8))
            .max(1);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut ctx = Context::new();
                    let mut fctx = FunctionBuilderContext::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&unit) = order.get(i) else {
                            break;
                        };
                        ctx.clear();
                        let r = self.compile_unit(arch, &env, &parsed, unit, &mut ctx, &mut fctx);
                        if r.is_err() {
                            // A translation that stopped early leaves its builder state behind.
                            fctx = FunctionBuilderContext::new();
                        }
                        *results[unit].lock().unwrap() = Some(r);
                    }
                });
            }
        });
        let compiled: Vec<Compiled> = results
            .into_iter()
            .map(|m| m.into_inner().unwrap().expect("every unit compiled"))
            .collect::<Result<_, _>>()?;
        let mut module = link(arch, parsed.info, compiled, defined, types, parsed.data)?;
        module.target = self.target();
        module.max_image_bytes = self.max_image_bytes;
        Ok(module)
    }

    fn compile_unit(
        &self,
        arch: &dyn Arch,
        env: &translate::Env<'_>,
        parsed: &parse::Parsed<'_>,
        unit: usize,
        ctx: &mut Context,
        fctx: &mut FunctionBuilderContext,
    ) -> Result<Compiled, CompileError> {
        let defined = parsed.bodies.len();
        let types = &parsed.info.types;
        // A struct or an array type is never called: its units are those of a signature of
        // nothing, so that every type keeps its place among the units.
        let nothing = ephem_module::FuncType::default();
        let sig = |i: usize| types[i].as_func().unwrap_or(&nothing);
        let mut raised = None;
        if unit < defined {
            let func = parsed.info.imported_funcs + unit as u32;
            raised = translate::translate(env, func, &parsed.bodies[unit], &mut ctx.func, fctx)?;
        } else if unit < defined + types.len() {
            trampolines::entry(env, sig(unit - defined), &mut ctx.func, fctx);
        } else {
            trampolines::host_adapter(env, sig(unit - defined - types.len()), &mut ctx.func, fctx);
        }
        if let (Some(dir), true) = (&self.clif_dir, unit < defined) {
            let func = parsed.info.imported_funcs as usize + unit;
            let path = dir.join(format!("wasm-function[{func}].clif"));
            std::fs::write(&path, ctx.func.display().to_string())
                .map_err(|e| CompileError::Write(path, e))?;
        }
        let names = ctx.func.params.user_named_funcs().clone();
        let code = ctx
            .compile(self.isa(), &mut ControlPlane::default())
            .map_err(|e| CompileError::Codegen(format!("{:?}", e.inner)))?;
        let mut calls = Vec::new();
        let mut libcalls = Vec::new();
        for r in code.buffer.relocs() {
            match (&r.target, r.kind) {
                (FinalizedRelocTarget::ExternalName(ExternalName::User(name)), kind)
                    if arch.links(kind) =>
                {
                    calls.push((r.offset, names[*name].index, r.addend));
                }
                (FinalizedRelocTarget::ExternalName(ExternalName::LibCall(lc)), Reloc::Abs8) => {
                    let target = libcall(*lc).ok_or_else(|| {
                        CompileError::Unsupported(format!("runtime function {lc:?}"))
                    })?;
                    libcalls.push(ModuleReloc {
                        offset: r.offset,
                        target,
                        addend: r.addend,
                    });
                }
                (target, kind) => {
                    return Err(CompileError::Unsupported(format!(
                        "relocation {kind:?} to {target:?}"
                    )));
                }
            }
        }
        let mut traps = Vec::new();
        for t in code.buffer.traps() {
            let kind = traps::kind(t.code).ok_or_else(|| {
                CompileError::Codegen(format!("unexpected trap code {:?}", t.code))
            })?;
            traps.push((t.offset, kind));
        }
        let call_sites = call_sites(&code.buffer)?;
        let mut bytes = code.code_buffer().to_vec();
        arch.rewrite_traps(&mut bytes, &traps);
        let raise_call = raised.and_then(|raised| {
            let call = arch.raise_failed_checks(&mut bytes, &code.buffer, &traps, &raised)?;
            traps.push((call.trap, TrapKind::MemoryOutOfBounds));
            Some((call.site, call.addend))
        });
        Ok(Compiled {
            code: bytes,
            calls,
            libcalls,
            traps,
            raise_call,
            call_sites,
        })
    }
}

/// The calls of a function that have exception handlers or stack maps, as the runtime's
/// unwinder and collector read them (offsets within the function, sorted; see
/// `translate/exceptions.rs` and `translate.rs`).
fn call_sites(
    buffer: &cranelift_codegen::MachBufferFinalized<cranelift_codegen::Final>,
) -> Result<Vec<ephem_module::CallSite>, CompileError> {
    use cranelift_codegen::{ExceptionContextLoc, FinalizedMachExceptionHandler as H};
    let mut sites = Vec::new();
    for site in buffer.call_sites() {
        let [H::Context(context), handlers @ ..] = site.exception_handlers else {
            // Only `try_call`s have handlers, and each of their tables starts with the vmctx.
            if site.exception_handlers.is_empty() {
                continue;
            }
            return Err(CompileError::Codegen(
                "an exception table without context".into(),
            ));
        };
        let (ExceptionContextLoc::SPOffset(vmctx_at), Some(frame_offset)) =
            (*context, site.frame_offset)
        else {
            return Err(CompileError::Codegen(format!(
                "a call site without a frame offset or with its context in {context:?}"
            )));
        };
        let catches = handlers
            .iter()
            .map(|h| match *h {
                H::Tag(tag, target) => {
                    let (tag, by_ref) = translate::decode_clause_tag(tag.as_u32());
                    Ok(ephem_module::Catch {
                        tag,
                        by_ref,
                        target,
                    })
                }
                ref other => Err(CompileError::Codegen(format!(
                    "an exception handler {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?;
        sites.push(ephem_module::CallSite {
            ret: site.ret_addr,
            frame_offset,
            vmctx_at,
            catches,
            refs: Vec::new(),
        });
    }
    // Stack maps: the calls across which references to GC objects live (see `translate`).
    for (ret, span, map) in buffer.user_stack_maps() {
        let refs: Vec<u32> = map.entries().map(|(_, offset)| offset).collect();
        if refs.is_empty() {
            continue;
        }
        match sites.binary_search_by_key(ret, |s| s.ret) {
            Ok(i) if sites[i].frame_offset == *span => sites[i].refs = refs,
            Ok(_) => {
                return Err(CompileError::Codegen(format!(
                    "a call at {ret} with two frame sizes"
                )));
            }
            Err(i) => sites.insert(
                i,
                ephem_module::CallSite {
                    ret: *ret,
                    frame_offset: *span,
                    vmctx_at: 0,
                    catches: Vec::new(),
                    refs,
                },
            ),
        }
    }
    Ok(sites)
}

struct Compiled {
    code: Vec<u8>,
    /// (offset in this code, callee function index, addend) of PC-relative calls.
    calls: Vec<(u32, u32, i64)>,
    libcalls: Vec<ModuleReloc>,
    traps: Vec<(u32, TrapKind)>,
    /// The reference of the call that failed checks make (offset in this code, addend; see
    /// [`Arch::raise_failed_checks`]), to point at the text's [`Arch::raise_stub`].
    raise_call: Option<(u32, i64)>,
    /// The calls with exception handlers (offsets in this code).
    call_sites: Vec<ephem_module::CallSite>,
}

/// Lays the units out in one text and resolves the calls between functions.
fn link(
    arch: &dyn Arch,
    info: ephem_module::ModuleInfo,
    units: Vec<Compiled>,
    defined: usize,
    types: usize,
    data: Vec<u8>,
) -> Result<CompiledModule, CompileError> {
    let mut text = Vec::new();
    let mut offsets = vec![0; units.len()];
    for u in layout_order(&info, &units, defined) {
        text.resize(text.len().next_multiple_of(16), arch.filler());
        offsets[u] = text.len() as u32;
        text.extend_from_slice(&units[u].code);
    }
    let mut traps = Vec::new();
    let mut relocs = Vec::new();
    let mut call_sites = Vec::new();
    for (unit, &start) in units.iter().zip(&offsets) {
        relocs.extend(unit.libcalls.iter().map(|r| ModuleReloc {
            offset: start + r.offset,
            ..*r
        }));
        for &(at, callee, addend) in &unit.calls {
            let defined_index = callee - info.imported_funcs;
            arch.link(
                &mut text,
                start + at,
                offsets[defined_index as usize],
                addend,
            )?;
        }
        traps.extend(unit.traps.iter().map(|&(at, kind)| (start + at, kind)));
        call_sites.extend(unit.call_sites.iter().map(|site| {
            ephem_module::CallSite {
                ret: start + site.ret,
                catches: (site.catches.iter())
                    .map(|c| ephem_module::Catch {
                        target: start + c.target,
                        ..*c
                    })
                    .collect(),
                ..site.clone()
            }
        }));
    }
    let raise_calls: Vec<(u32, i64)> = (units.iter().zip(&offsets))
        .filter_map(|(unit, &start)| {
            let (at, addend) = unit.raise_call?;
            Some((start + at, addend))
        })
        .collect();
    if !raise_calls.is_empty() {
        // After the functions: trampolines, host adapters, functions (see `layout_order`).
        let last_trampoline = defined + types - 1;
        let stub = text.len().next_multiple_of(16);
        let layout = arch::StubLayout {
            trampolines: offsets[defined]
                ..offsets[last_trampoline] + units[last_trampoline].code.len() as u32,
            functions_start: offsets[..defined].iter().copied().min().unwrap_or(0),
            stub: stub as u32,
        };
        text.resize(stub, arch.filler());
        text.extend_from_slice(&arch.raise_stub(&layout));
        for (at, addend) in raise_calls {
            arch.link(&mut text, at, stub as u32, addend)?;
        }
    }
    traps.sort_by_key(|t| t.0);
    call_sites.sort_by_key(|s: &ephem_module::CallSite| s.ret);
    let funcs = (0..defined)
        .map(|i| FuncLoc {
            offset: offsets[i],
            len: units[i].code.len() as u32,
        })
        .collect();
    Ok(CompiledModule {
        info,
        target: Target::default(),
        text,
        relocs,
        funcs,
        trampolines: offsets[defined..defined + types].to_vec(),
        host_adapters: offsets[defined + types..].to_vec(),
        traps,
        call_sites,
        data,
        max_image_bytes: 0,
    })
}

/// The order the units go in the text (unit indices: defined functions, then the trampolines
/// and host adapters), chosen for the first call of a text that is new to the process: each
/// page it touches is a fault, and the kernel maps the 64 KiB around a faulting page with it.
/// So what every call reaches goes first and together: the trampolines and host adapters, then
/// the exported functions and the start function, then the functions these call directly,
/// depth first (a caller's callees near it); the rest (reached only through tables, or not at
/// all) follow in index order.
fn layout_order(info: &ephem_module::ModuleInfo, units: &[Compiled], defined: usize) -> Vec<usize> {
    let imported = info.imported_funcs;
    let unit_of = |f: u32| f.checked_sub(imported).map(|i| i as usize);
    let mut order: Vec<usize> = (defined..units.len()).collect();
    let mut placed = vec![false; defined];
    let roots: Vec<usize> = (info.exports.iter())
        .filter_map(|e| match e.index {
            ephem_module::EntityIndex::Func(f) => unit_of(f),
            _ => None,
        })
        .chain(info.start.and_then(unit_of))
        .filter(|&u| u < defined)
        .collect();
    for &u in &roots {
        if !std::mem::replace(&mut placed[u], true) {
            order.push(u);
        }
    }
    // Depth first from each root; the stack holds callees in reverse, so the first call site's
    // callee comes next.
    let mut expanded = vec![false; defined];
    let mut stack = Vec::new();
    for &root in &roots {
        stack.push(root);
        while let Some(u) = stack.pop() {
            if std::mem::replace(&mut expanded[u], true) {
                continue;
            }
            if !std::mem::replace(&mut placed[u], true) {
                order.push(u);
            }
            let callees = units[u].calls.iter().rev().filter_map(|c| unit_of(c.1));
            stack.extend(callees.filter(|&c| c < defined && !expanded[c]));
        }
    }
    order.extend((0..defined).filter(|&u| !placed[u]));
    order
}

fn libcall(lc: ClifLibCall) -> Option<LibCall> {
    Some(match lc {
        ClifLibCall::CeilF32 => LibCall::CeilF32,
        ClifLibCall::CeilF64 => LibCall::CeilF64,
        ClifLibCall::FloorF32 => LibCall::FloorF32,
        ClifLibCall::FloorF64 => LibCall::FloorF64,
        ClifLibCall::TruncF32 => LibCall::TruncF32,
        ClifLibCall::TruncF64 => LibCall::TruncF64,
        ClifLibCall::NearestF32 => LibCall::NearestF32,
        ClifLibCall::NearestF64 => LibCall::NearestF64,
        ClifLibCall::FmaF32 => LibCall::FmaF32,
        ClifLibCall::FmaF64 => LibCall::FmaF64,
        _ => return None,
    })
}

/// Compiles with a compiler for the host CPU.
pub fn compile(bytes: &[u8]) -> Result<CompiledModule, CompileError> {
    Compiler::new()?.compile(bytes)
}
