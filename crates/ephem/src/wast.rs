//! Runs WebAssembly script (`.wast`) files: every directive of the spec test suite, against the
//! standard `spectest` host module, counting assertions as passed, failed or skipped.

use std::collections::HashMap;

use anyhow::{Context, anyhow, bail};
use ephem_compiler::Compiler;
use ephem_runtime::{
    AnyRef, Engine, Error, Extern, ExternRef, FuncType, Global, GlobalType, Instance, Linker,
    Memory, MemoryType, Module, Store, Table, TableType, TrapKind, Val, ValType,
};
use wast::core::{AbstractHeapType, HeapType, NanPattern, V128Pattern, WastArgCore, WastRetCore};
use wast::parser::{self, ParseBuffer};
use wast::{QuoteWat, WastArg, WastDirective, WastExecute, WastInvoke, WastRet};

/// Counts of assertions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Assertions that held.
    pub passed: usize,
    /// Assertions that did not, and directives that failed.
    pub failed: usize,
    /// Assertions outside what ephem supports.
    pub skipped: usize,
    /// One line per failure (and per skip, prefixed `skipped:`), with its line number.
    pub notes: Vec<String>,
}

impl Outcome {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Outcome) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

/// How modules are loaded while running a script.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Loading {
    /// Compiled in memory, loaded as the pool gives slots.
    #[default]
    Normal,
    /// Before every module, another module is loaded and dropped, so that the module goes
    /// into a slot that just held other code: stale state in reused slots would show.
    AfterOther,
    /// Every module is compiled, written to an artifact file, and opened from that file.
    ThroughFiles,
}

/// Runs the script `text` (named `name` in messages), compiling its modules with `compiler`.
pub fn run(
    compiler: &Compiler,
    engine: &Engine,
    name: &str,
    text: &str,
    reuse: Loading,
) -> Outcome {
    let mut runner = Runner::new(compiler, engine, reuse);
    let mut outcome = Outcome::default();
    // The spec tests deliberately use bidirectional and other "confusing" characters in names.
    let mut lexer = wast::lexer::Lexer::new(text);
    lexer.allow_confusing_unicode(true);
    let buf = match ParseBuffer::new_with_lexer(lexer) {
        Ok(b) => b,
        Err(e) => {
            outcome.failed += 1;
            outcome.notes.push(format!("{name}: cannot lex: {e}"));
            return outcome;
        }
    };
    let wast = match parser::parse::<wast::Wast<'_>>(&buf) {
        Ok(w) => w,
        Err(e) => {
            outcome.failed += 1;
            outcome.notes.push(format!("{name}: cannot parse: {e}"));
            return outcome;
        }
    };
    for directive in wast.directives {
        let (line, _) = directive.span().linecol_in(text);
        match runner.directive(directive) {
            Ok(Step::Passed) => outcome.passed += 1,
            Ok(Step::Done) => {}
            Ok(Step::Skipped(why)) => {
                outcome.skipped += 1;
                outcome
                    .notes
                    .push(format!("skipped: {name}:{}: {why}", line + 1));
            }
            Err(e) => {
                outcome.failed += 1;
                outcome.notes.push(format!("{name}:{}: {e:#}", line + 1));
            }
        }
    }
    outcome
}

enum Step {
    /// An assertion held.
    Passed,
    /// A directive that asserts nothing ran.
    Done,
    Skipped(&'static str),
}

struct Runner<'c> {
    compiler: &'c Compiler,
    engine: Engine,
    /// Everything the script instantiates lives here until the script ends (registered
    /// instances' tables and funcrefs are shared, as the spec's linking tests require).
    store: Store<()>,
    linker: Linker<()>,
    named: HashMap<String, Instance>,
    definitions: HashMap<String, Module>,
    current: Option<Instance>,
    reuse: Loading,
    filler: Option<Module>,
}

fn func_type(params: &[ValType], results: &[ValType]) -> FuncType {
    FuncType {
        params: params.to_vec(),
        results: results.to_vec(),
    }
}

/// The `spectest` module every script may import from, in `store`.
fn spectest(store: &mut Store<()>) -> anyhow::Result<Linker<()>> {
    use ValType::*;
    let mut linker = Linker::new(store.engine());
    linker.allow_shadowing(true);
    for (name, params) in [
        ("print", &[][..]),
        ("print_i32", &[I32]),
        ("print_i64", &[I64]),
        ("print_f32", &[F32]),
        ("print_f64", &[F64]),
        ("print_i32_f32", &[I32, F32]),
        ("print_f64_f64", &[F64, F64]),
    ] {
        linker.func_new("spectest", name, func_type(params, &[]), |_, _, _| Ok(()))?;
    }
    let mut global = |name: &str, value: Val| -> anyhow::Result<()> {
        let ty = GlobalType {
            ty: value.ty(),
            mutable: false,
        };
        let g = Global::new(&mut *store, ty, value)?;
        linker.define(&*store, "spectest", name, g)?;
        Ok(())
    };
    global("global_i32", Val::I32(666))?;
    global("global_i64", Val::I64(666))?;
    global("global_f32", Val::F32(666.6f32.to_bits()))?;
    global("global_f64", Val::F64(666.6f64.to_bits()))?;
    let table = Table::new(
        &mut *store,
        TableType::new(ValType::FUNCREF, 10, Some(20)),
        Val::FuncRef(None),
    )?;
    linker.define(&*store, "spectest", "table", table)?;
    let memory = Memory::new(&mut *store, MemoryType::new(1, Some(2)))?;
    linker.define(&*store, "spectest", "memory", memory)?;
    let shared = Memory::new(&mut *store, MemoryType::shared(1, 2))?;
    linker.define(&*store, "spectest", "shared_memory", shared)?;
    Ok(linker)
}

impl<'c> Runner<'c> {
    fn new(compiler: &'c Compiler, engine: &Engine, reuse: Loading) -> Runner<'c> {
        let mut store = Store::new(engine, ());
        let linker = spectest(&mut store).expect("spectest module");
        Runner {
            compiler,
            engine: engine.clone(),
            store,
            linker,
            named: HashMap::new(),
            definitions: HashMap::new(),
            current: None,
            reuse,
            filler: None,
        }
    }

    fn compile(&mut self, bytes: &[u8]) -> anyhow::Result<Module> {
        if self.reuse != Loading::ThroughFiles {
            return Ok(crate::compile_with(self.compiler, &self.engine, bytes)?);
        }
        let compiled = self.compiler.compile(bytes)?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ephem-wast-{}-{n}.ephem", std::process::id()));
        // A key of this run's own: the files are sealed and verified as a cache's would be.
        static KEY: std::sync::LazyLock<ephem_artifact::ArtifactKey> =
            std::sync::LazyLock::new(|| {
                ephem_artifact::ArtifactKey::generate().expect("the system's random source")
            });
        let bytes = ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY);
        ephem_artifact::write_atomic(&path, &bytes)?;
        let module = Module::from_artifact_file(&self.engine, &path, &KEY);
        // The open artifact keeps the file's pages; the name is not needed any more.
        let _ = std::fs::remove_file(&path);
        Ok(module?)
    }

    fn instantiate(&mut self, module: &Module) -> Result<Instance, Error> {
        if self.reuse == Loading::AfterOther {
            let filler = self.filler.get_or_insert_with(|| {
                let wat = br#"(module (func (export "f") (result i32) i32.const 7))"#;
                crate::compile_with(self.compiler, &self.engine, wat)
                    .expect("filler module compiles")
            });
            // In a store of its own, dropped at once: its code slot is free for the module.
            let mut scratch = Store::new(&self.engine, ());
            Instance::new(&mut scratch, filler, &[])?;
            drop(scratch);
        }
        self.linker.instantiate(&mut self.store, module)
    }

    fn wat_module(&mut self, mut wat: QuoteWat<'_>) -> anyhow::Result<(Option<String>, Module)> {
        let name = wat.name().map(|id| id.name().to_owned());
        let bytes = wat.encode().context("encoding module")?;
        Ok((name, self.compile(&bytes)?))
    }

    fn instance(&self, name: Option<wast::token::Id<'_>>) -> anyhow::Result<Instance> {
        match name {
            Some(id) => self
                .named
                .get(id.name())
                .copied()
                .ok_or_else(|| anyhow!("no module named {}", id.name())),
            None => self.current.ok_or_else(|| anyhow!("no current module")),
        }
    }

    fn invoke(&mut self, inv: &WastInvoke<'_>) -> anyhow::Result<Result<Vec<Val>, Error>> {
        let instance = self.instance(inv.module)?;
        let func = instance
            .get_func(&mut self.store, inv.name)
            .ok_or_else(|| anyhow!("no function named {}", inv.name))?;
        let args = inv
            .args
            .iter()
            .map(|a| arg(&self.store, a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let ty = func.ty(&self.store);
        let mut results: Vec<Val> = ty.results.iter().map(|&t| Val::default_for(t)).collect();
        Ok(func
            .call(&mut self.store, &args, &mut results)
            .map(|()| results))
    }

    fn execute(&mut self, exec: WastExecute<'_>) -> anyhow::Result<Result<Vec<Val>, Error>> {
        match exec {
            WastExecute::Invoke(inv) => self.invoke(&inv),
            WastExecute::Wat(wat) => {
                let (_, module) = self.wat_module(QuoteWat::Wat(wat))?;
                Ok(self.instantiate(&module).map(|_| vec![]))
            }
            WastExecute::Get { module, global, .. } => {
                let instance = self.instance(module)?;
                match instance.get_export(&mut self.store, global) {
                    Some(Extern::Global(g)) => Ok(Ok(vec![g.get(&self.store)])),
                    _ => bail!("no global named {global}"),
                }
            }
        }
    }

    fn directive(&mut self, d: WastDirective<'_>) -> anyhow::Result<Step> {
        match d {
            WastDirective::Module(wat) => {
                let (name, module) = self.wat_module(wat)?;
                let instance = self.instantiate(&module)?;
                if let Some(name) = name {
                    self.named.insert(name, instance);
                }
                self.current = Some(instance);
                Ok(Step::Done)
            }
            WastDirective::ModuleDefinition(wat) => {
                let (name, module) = self.wat_module(wat)?;
                if let Some(name) = name {
                    self.definitions.insert(name, module);
                }
                Ok(Step::Done)
            }
            WastDirective::ModuleInstance {
                instance, module, ..
            } => {
                let def = module.ok_or_else(|| anyhow!("module instance without a definition"))?;
                let module = self
                    .definitions
                    .get(def.name())
                    .cloned()
                    .ok_or_else(|| anyhow!("no definition {}", def.name()))?;
                let inst = self.instantiate(&module)?;
                if let Some(name) = instance {
                    self.named.insert(name.name().to_owned(), inst);
                }
                self.current = Some(inst);
                Ok(Step::Done)
            }
            WastDirective::Register { name, module, .. } => {
                let instance = self.instance(module)?;
                self.linker.instance(&mut self.store, name, instance)?;
                Ok(Step::Done)
            }
            WastDirective::Invoke(inv) => {
                self.invoke(&inv)??;
                Ok(Step::Done)
            }
            WastDirective::AssertReturn { exec, results, .. } => {
                let actual = self.execute(exec)??;
                if actual.len() != results.len() {
                    bail!("expected {} results, got {actual:?}", results.len());
                }
                for (a, e) in actual.iter().zip(&results) {
                    let WastRet::Core(e) = e else {
                        bail!("component values are not supported")
                    };
                    if !matches(&self.store, a, e) {
                        bail!("expected {e:?}, got {a:?}");
                    }
                }
                Ok(Step::Passed)
            }
            WastDirective::AssertTrap { exec, message, .. } => match self.execute(exec)? {
                Ok(v) => bail!("expected trap `{message}`, got {v:?}"),
                Err(Error::Trap(t)) => {
                    let ours = t.kind.message();
                    // (The suite names the null reference: "null function reference", "null
                    // structure reference", "null i31 reference"...)
                    let named_null = t.kind == TrapKind::NullReference
                        && message.starts_with("null ")
                        && message.ends_with(" reference");
                    if ours.starts_with(message) || message.starts_with(ours) || named_null {
                        Ok(Step::Passed)
                    } else {
                        bail!("expected trap `{message}`, got `{ours}`")
                    }
                }
                Err(e) => bail!("expected trap `{message}`, got error: {e}"),
            },
            WastDirective::AssertException { exec, .. } => match self.execute(exec)? {
                Ok(v) => bail!("expected an exception, got {v:?}"),
                Err(Error::Exception(_)) => {
                    // The store keeps it until taken: take it, as a host would.
                    self.store.take_pending_exception();
                    Ok(Step::Passed)
                }
                Err(e) => bail!("expected an exception, got error: {e}"),
            },
            WastDirective::AssertExhaustion { call, message, .. } => match self.invoke(&call)? {
                Err(Error::Trap(t)) if t.kind == TrapKind::StackOverflow => Ok(Step::Passed),
                other => bail!("expected `{message}`, got {other:?}"),
            },
            WastDirective::AssertInvalid {
                module, message, ..
            } => match self.wat_module(module) {
                Ok(_) => bail!("expected invalid module ({message}), but it compiled"),
                Err(_) => Ok(Step::Passed),
            },
            WastDirective::AssertMalformed {
                module, message, ..
            } => match self.wat_module(module) {
                Ok(_) => bail!("expected malformed module ({message}), but it compiled"),
                Err(_) => Ok(Step::Passed),
            },
            WastDirective::AssertUnlinkable {
                module, message, ..
            } => {
                let (_, module) = self.wat_module(QuoteWat::Wat(module))?;
                match self.instantiate(&module) {
                    Err(Error::Link(_)) => Ok(Step::Passed),
                    other => bail!(
                        "expected unlinkable ({message}), got {:?}",
                        other.map(|_| ())
                    ),
                }
            }
            WastDirective::AssertInvalidCustom { .. }
            | WastDirective::AssertMalformedCustom { .. } => Ok(Step::Skipped(
                "custom-section assertions are not part of WebAssembly 2.0",
            )),
            _ => Ok(Step::Skipped(
                "directive outside what ephem runs (threads, stack switching)",
            )),
        }
    }
}

fn heap_is_exn(h: &HeapType<'_>) -> bool {
    matches!(
        h,
        HeapType::Abstract {
            ty: AbstractHeapType::Exn | AbstractHeapType::NoExn,
            ..
        }
    )
}

fn heap_is_extern(h: &HeapType<'_>) -> bool {
    matches!(
        h,
        HeapType::Abstract {
            ty: AbstractHeapType::Extern | AbstractHeapType::NoExtern,
            ..
        }
    )
}

/// Whether `h` is a GC heap type (the `any` hierarchy) by its name.
fn heap_is_any(h: &HeapType<'_>) -> bool {
    use AbstractHeapType::*;
    matches!(
        h,
        HeapType::Abstract {
            ty: Any | Eq | I31 | Struct | Array | None,
            ..
        }
    )
}

fn arg(store: &Store<()>, a: &WastArg<'_>) -> anyhow::Result<Val> {
    let WastArg::Core(a) = a else {
        bail!("component values are not supported")
    };
    Ok(match a {
        WastArgCore::I32(v) => Val::I32(*v),
        WastArgCore::I64(v) => Val::I64(*v),
        WastArgCore::F32(v) => Val::F32(v.bits),
        WastArgCore::F64(v) => Val::F64(v.bits),
        WastArgCore::RefNull(h) if heap_is_extern(h) => Val::ExternRef(None),
        WastArgCore::RefNull(h) if heap_is_exn(h) => Val::ExnRef(None),
        WastArgCore::RefNull(h) if heap_is_any(h) => Val::AnyRef(None),
        WastArgCore::RefNull(_) => Val::FuncRef(None),
        WastArgCore::RefExtern(n) => Val::ExternRef(Some(ExternRef::new(*n))),
        WastArgCore::RefHost(n) => {
            Val::AnyRef(Some(AnyRef::convert_extern(store, ExternRef::new(*n))))
        }
        WastArgCore::V128(v) => Val::V128(u128::from_le_bytes(v.to_le_bytes())),
    })
}

fn f32_matches(bits: u32, p: &NanPattern<wast::token::F32>) -> bool {
    match p {
        NanPattern::CanonicalNan => bits & 0x7fff_ffff == 0x7fc0_0000,
        NanPattern::ArithmeticNan => bits & 0x7fc0_0000 == 0x7fc0_0000,
        NanPattern::Value(v) => bits == v.bits,
    }
}

fn f64_matches(bits: u64, p: &NanPattern<wast::token::F64>) -> bool {
    match p {
        NanPattern::CanonicalNan => bits & 0x7fff_ffff_ffff_ffff == 0x7ff8_0000_0000_0000,
        NanPattern::ArithmeticNan => bits & 0x7ff8_0000_0000_0000 == 0x7ff8_0000_0000_0000,
        NanPattern::Value(v) => bits == v.bits,
    }
}

fn matches(store: &Store<()>, actual: &Val, expected: &WastRetCore<'_>) -> bool {
    let host = |a: &AnyRef| ExternRef::convert_any(*a).data();
    match (actual, expected) {
        (Val::I32(a), WastRetCore::I32(e)) => a == e,
        (Val::I64(a), WastRetCore::I64(e)) => a == e,
        (Val::F32(a), WastRetCore::F32(p)) => f32_matches(*a, p),
        (Val::F64(a), WastRetCore::F64(p)) => f64_matches(*a, p),
        (Val::FuncRef(None), WastRetCore::RefNull(h)) => h
            .as_ref()
            .is_none_or(|h| !heap_is_extern(h) && !heap_is_exn(h) && !heap_is_any(h)),
        (Val::AnyRef(None), WastRetCore::RefNull(h)) => h
            .as_ref()
            .is_none_or(|h| heap_is_any(h) || matches!(h, HeapType::Concrete(_))),
        (Val::ExnRef(None), WastRetCore::RefNull(h)) => h.as_ref().is_none_or(heap_is_exn),
        (Val::ExternRef(None), WastRetCore::RefNull(h)) => h.as_ref().is_none_or(heap_is_extern),
        (Val::ExternRef(Some(a)), WastRetCore::RefExtern(e)) => {
            e.is_none_or(|e| Some(e) == a.data())
        }
        (Val::AnyRef(Some(a)), WastRetCore::RefHost(n)) => host(a) == Some(*n),
        (Val::AnyRef(Some(_)), WastRetCore::RefAny) => true,
        (Val::AnyRef(Some(a)), WastRetCore::RefEq) => host(a).is_none(),
        (Val::AnyRef(Some(a)), WastRetCore::RefI31) => a.is_i31(),
        (Val::AnyRef(Some(a)), WastRetCore::RefStruct) => a.is_struct(store),
        (Val::AnyRef(Some(a)), WastRetCore::RefArray) => a.is_array(store),
        (Val::FuncRef(Some(_)), WastRetCore::RefFunc(_)) => true,
        (Val::V128(a), WastRetCore::V128(p)) => v128_matches(*a, p),
        (_, WastRetCore::Either(options)) => options.iter().any(|o| matches(store, actual, o)),
        _ => false,
    }
}

/// Whether every lane of `bits` matches the pattern's lane (NaN patterns per float lane).
fn v128_matches(bits: u128, p: &V128Pattern) -> bool {
    let lane = |i: usize, width: usize| (bits >> (i * width)) as u64 & (u64::MAX >> (64 - width));
    match p {
        V128Pattern::I8x16(e) => (0..16).all(|i| lane(i, 8) == e[i] as u8 as u64),
        V128Pattern::I16x8(e) => (0..8).all(|i| lane(i, 16) == e[i] as u16 as u64),
        V128Pattern::I32x4(e) => (0..4).all(|i| lane(i, 32) == e[i] as u32 as u64),
        V128Pattern::I64x2(e) => (0..2).all(|i| lane(i, 64) == e[i] as u64),
        V128Pattern::F32x4(e) => (0..4).all(|i| f32_matches(lane(i, 32) as u32, &e[i])),
        V128Pattern::F64x2(e) => (0..2).all(|i| f64_matches(lane(i, 64), &e[i])),
    }
}
