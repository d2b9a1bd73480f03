//! The bounded, seeded slice of the differential fuzzing (`cargo run --release -p
//! ephem-differential --example fuzz -- --seconds N` is the long run): `wasm-smith` modules
//! with SIMD, run in ephem and in wasmtime, must agree on everything observable; their damaged
//! copies must get wasmparser's verdict from ephem's compiler without crashing anything; real
//! modules (the corpus, SIMD programs) agree with wasmtime, their imports stubbed.

mod wasmtime_observer;

use ephem_differential::{Ephem, Plan, Verdict, generate, plan, run_case};

/// Seeds of the slice: fixed, so that a failure reproduces (`--seed` of the example).
const SEEDS: std::ops::Range<u64> = 0..500;

#[test]
fn ephem_agrees_with_wasmtime_on_generated_modules() {
    let ephem = Ephem::new().unwrap();
    let wasmtime = wasmtime_observer::Wasmtime::new().unwrap();
    let (mut calls, mut modules, mut wide, mut exceptions) = (0, 0, 0, 0);
    let (mut small_pages, mut memory64, mut table64) = (0, 0, 0);
    let (mut shared, mut atomics, mut gc) = (0, 0, 0);
    let mut differences = Vec::new();
    for seed in SEEDS {
        let wasm = generate(seed).unwrap();
        wide += count(&wasm, |op| {
            use wasmparser::Operator as O;
            matches!(
                op,
                O::I64Add128 | O::I64Sub128 | O::I64MulWideS | O::I64MulWideU
            )
        });
        small_pages += memories(&wasm, |m| m.page_size_log2 == Some(0));
        memory64 += memories(&wasm, |m| m.memory64);
        table64 += tables(&wasm);
        shared += memories(&wasm, |m| m.shared);
        atomics += count(&wasm, |op| format!("{op:?}").contains("Atomic"));
        gc += count(&wasm, |op| {
            let name = format!("{op:?}");
            [
                "Struct", "Array", "I31", "RefCast", "RefTest", "BrOnCast", "Convert", "RefEq",
            ]
            .iter()
            .any(|p| name.starts_with(p))
        });
        exceptions += count(&wasm, |op| {
            use wasmparser::Operator as O;
            matches!(op, O::TryTable { .. } | O::Throw { .. } | O::ThrowRef)
        });
        let plan = plan(&wasm, seed);
        match run_case(&wasm, &plan, &ephem, &wasmtime) {
            Verdict::Agree { calls: n, .. } => {
                calls += n;
                modules += 1;
            }
            Verdict::BothRefused => panic!("seed {seed}: both engines refused a generated module"),
            Verdict::Differ(d) => differences.push(format!("seed {seed}: {d}")),
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    println!(
        "{modules} modules, {calls} calls compared; {wide} wide-arithmetic and {exceptions} \
         exception operators, {small_pages} memories of one-byte pages, {memory64} 64-bit ones, {table64} 64-bit tables, \
         {shared} shared memories, {atomics} atomic operators, {gc} GC operators, {} GC \
         collections",
        ephem.collections()
    );
    // Guards against a slice that stopped calling anything, or lost a proposal.
    assert!(calls > 4_000, "only {calls} calls compared");
    assert!(wide > 50, "only {wide} wide-arithmetic operators generated");
    assert!(
        exceptions > 50,
        "only {exceptions} exception operators generated"
    );
    assert!(
        small_pages > 20,
        "only {small_pages} memories of one-byte pages"
    );
    assert!(memory64 > 20, "only {memory64} 64-bit memories");
    assert!(table64 > 20, "only {table64} 64-bit tables");
    assert!(shared > 20, "only {shared} shared memories");
    assert!(atomics > 200, "only {atomics} atomic operators");
    assert!(gc > 200, "only {gc} GC operators generated");
    assert!(
        ephem.collections() > 500,
        "only {} GC collections",
        ephem.collections()
    );
}

/// A wait on a shared memory whose value matches returns only when its timeout passes:
/// [`ephem_differential::bound_waits`] bounds every timeout, so that a generated module that
/// waits (which `wasm-smith` makes rarely) cannot hold the fuzzer for years, and leaves the
/// rest of the module as it was.
#[test]
fn waits_of_generated_modules_are_bounded() {
    let wasm = wat::parse_str(
        r#"(module (memory 1 1 shared)
          (func (export "wait") (result i32)
            (memory.atomic.wait32 (i32.const 0) (i32.const 0) (i64.const -1)))
          (func (export "add") (param i32) (result i32) (i32.add (local.get 0) (i32.const 1))))"#,
    )
    .unwrap();
    let bounded = ephem_differential::bound_waits(&wasm).unwrap();
    assert_ne!(bounded, wasm);
    let engine = ephem::Engine::default();
    let module = ephem::Module::new(&engine, &bounded).unwrap();
    let mut store = ephem::Store::new(&engine, ());
    let instance = ephem::Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let wait = instance
        .get_typed_func::<(), i32>(&mut store, "wait")
        .unwrap();
    assert_eq!(wait.call(&mut store, ()).unwrap(), 2, "timed out");
    let add = instance
        .get_typed_func::<i32, i32>(&mut store, "add")
        .unwrap();
    assert_eq!(add.call(&mut store, 41).unwrap(), 42);
}

/// How many 64-bit tables `wasm` defines.
fn tables(wasm: &[u8]) -> usize {
    use wasmparser::{Parser, Payload};
    let mut n = 0;
    for payload in Parser::new(0).parse_all(wasm).flatten() {
        if let Payload::TableSection(tables) = payload {
            n += (tables.into_iter().flatten())
                .filter(|t| t.ty.table64)
                .count();
        }
    }
    n
}

/// How many memories of `wasm` are `which`.
fn memories(wasm: &[u8], which: impl Fn(&wasmparser::MemoryType) -> bool) -> usize {
    use wasmparser::{Parser, Payload};
    let mut n = 0;
    for payload in Parser::new(0).parse_all(wasm).flatten() {
        if let Payload::MemorySection(memories) = payload {
            n += (memories.into_iter().flatten()).filter(&which).count();
        }
    }
    n
}

/// How many operators of `wasm` are `which`.
fn count(wasm: &[u8], which: impl Fn(&wasmparser::Operator<'_>) -> bool) -> usize {
    use wasmparser::{Parser, Payload};
    let mut n = 0;
    for payload in Parser::new(0).parse_all(wasm).flatten() {
        if let Payload::CodeSectionEntry(body) = payload {
            let mut ops = body.get_operators_reader().unwrap();
            while !ops.eof() {
                n += which(&ops.read().unwrap()) as usize;
            }
        }
    }
    n
}

/// What generated modules write (every store kind `wasm-smith` emits, bulk memory, start
/// functions) is gone for the next instance in the same memory slots: the write marks cover
/// every path by which wasm writes memory (see `ephem_module::MARK_SHIFT`).
#[test]
fn generated_modules_leave_nothing_for_the_next_instance() {
    let ephem = Ephem::new().unwrap();
    let (mut modules, mut leaks) = (0, Vec::new());
    for seed in SEEDS {
        let wasm = generate(seed).unwrap();
        let plan = plan(&wasm, seed);
        match ephem_differential::leftovers(&ephem, &wasm, &plan) {
            Ok(None) => modules += 1,
            Ok(Some(leak)) => leaks.push(format!("seed {seed}: {leak}")),
            Err(e) => leaks.push(format!("seed {seed}: {e}")),
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
    assert!(modules > 400, "only {modules} modules ran");
}

#[test]
fn damaged_modules_get_wasmparsers_verdict_and_crash_nothing() {
    let ephem = Ephem::new().unwrap();
    let (mut checked, mut valid) = (0, 0);
    for seed in 0..40 {
        let wasm = generate(seed).unwrap();
        let stats = ephem
            .check_mutants(&wasm, seed, 25)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        checked += stats.checked;
        valid += stats.valid;
    }
    println!("{checked} mutants, {valid} valid");
    assert!(checked >= 900, "only {checked} mutants checked");
    assert!(valid > 0, "no valid mutant was run");
}

/// Real modules built for other hosts (the corpus's JavaScript glue, WASI programs with SIMD):
/// imports stubbed alike, every export called in a fresh instance, both engines metered. The long form is the
/// `agree` example, over any modules.
#[test]
fn real_modules_agree_with_wasmtime() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The material beside the checkout (`../shared`) is used where it is present.
    let files = [
        "crates/wasi/tests/guests/simd.wasm",
        "../shared/corpus/quickjs.wasm",
        "../shared/corpus/zstd.wasm",
        "../shared/corpus/png.wasm",
        "../shared/sightglass/blake3-simd/benchmark.wasm",
    ];
    let ephem = Ephem::metered(10_000_000).unwrap();
    let wasmtime = wasmtime_observer::Wasmtime::metered(10_000_000).unwrap();
    let (mut compared, mut corpus) = (0, false);
    for file in files {
        let path = root.join(file);
        if file.starts_with("../shared/") && !path.is_file() {
            eprintln!("skipped: {} is absent", path.display());
            continue;
        }
        corpus |= file.contains("/corpus/");
        let wasm = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let plan = Plan {
            fresh: true,
            ..plan(&wasm, 0)
        };
        match run_case(&wasm, &plan, &ephem, &wasmtime) {
            Verdict::Agree { calls, .. } => compared += calls,
            other => panic!("{file}: {other:?}"),
        }
    }
    println!("{compared} calls compared");
    // Guards against a comparison that stopped calling anything.
    let expected = if corpus { 300 } else { 3 };
    assert!(compared >= expected, "only {compared} calls compared");
}
