//! `fresh-vs-wasmtime --json`: both runtimes measured over the same module, and the ratio.

use std::process::Command;

#[test]
fn both_runtimes_are_measured_and_compared() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path();
    let module = dir.join("m.wat");
    std::fs::write(
        &module,
        r#"(module (import "env" "f" (func)) (memory (import "env" "mem") 1)
                   (data (i32.const 0) "x") (func (export "run") (result i32) i32.const 7))"#,
    )
    .unwrap();
    let lines = ephem_test_support::json_lines(
        Command::new(env!("CARGO_BIN_EXE_fresh-vs-wasmtime"))
            .args(["--json", "--invoke", "run", "--invocations", "10", "--dir"])
            .arg(dir.join("work"))
            .arg(&module),
    );
    let of = |runtime: &str| {
        lines
            .iter()
            .find(|l| l["runtime"] == runtime)
            .unwrap_or_else(|| panic!("no {runtime} line in {lines:?}"))
    };
    for runtime in ["ephem", "wasmtime"] {
        let line = of(runtime);
        assert_eq!(line["module"], "m.wat");
        assert!(line["median_ns"].as_u64().unwrap() > 0);
        assert!(line["p90_ns"].as_u64().unwrap() >= line["median_ns"].as_u64().unwrap());
    }
    let ratio = lines
        .iter()
        .find_map(|l| l["wasmtime_over_ephem"].as_f64())
        .unwrap();
    let expected =
        of("wasmtime")["median_ns"].as_f64().unwrap() / of("ephem")["median_ns"].as_f64().unwrap();
    assert!(
        (ratio - expected).abs() < 1e-9 * expected.max(1.0),
        "{ratio} vs {expected}"
    );
}

/// The shape of wasm-bindgen's output with reference types: an `externref` table beside a
/// funcref table of more than 20 000 elements (wasmtime's pooling defaults refuse both, and
/// `externref` needs its `gc` feature). Both runtimes must run it.
#[test]
fn a_module_with_an_externref_table_and_a_large_funcref_table_is_compared() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path();
    let module = dir.join("bindgen.wat");
    std::fs::write(
        &module,
        r#"(module (table 21752 funcref) (table $refs 4 externref) (memory 1)
                   (func (export "run") (result i32) (table.size $refs)))"#,
    )
    .unwrap();
    let lines = ephem_test_support::json_lines(
        Command::new(env!("CARGO_BIN_EXE_fresh-vs-wasmtime"))
            .args(["--json", "--invoke", "run", "--invocations", "5", "--dir"])
            .arg(dir.join("work"))
            .arg(&module),
    );
    for runtime in ["ephem", "wasmtime"] {
        assert!(
            lines
                .iter()
                .any(|l| l["runtime"] == runtime && l["module"] == "bindgen.wat"),
            "no {runtime} line in {lines:?}"
        );
    }
}
