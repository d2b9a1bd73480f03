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

/// `wasi-vs-wasmtime` runs every program it is given: one that traps, one whose output is not
/// the expected one, and one that runs are all reported, and the command fails at the end.
#[test]
fn every_program_is_reported_and_a_failing_one_stops_nothing() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path();
    let program = |body: &str| {
        format!(
            r#"(module
              (import "bench" "start" (func $start))
              (import "bench" "end" (func $end))
              (import "wasi_snapshot_preview1" "fd_write"
                (func $write (param i32 i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (data (i32.const 16) "ok\n")
              (func (export "_start")
                (i32.store (i32.const 0) (i32.const 16))
                (i32.store (i32.const 4) (i32.const 3))
                (call $start) {body} (call $end)
                (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#
        )
    };
    std::fs::write(dir.join("a-traps.wat"), program("(unreachable)")).unwrap();
    std::fs::write(dir.join("b-runs.wat"), program("")).unwrap();
    std::fs::write(dir.join("b-runs.stdout.expected"), "ok\n").unwrap();
    std::fs::write(dir.join("c-says-else.wat"), program("")).unwrap();
    std::fs::write(dir.join("c-says-else.stdout.expected"), "no\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wasi-vs-wasmtime"))
        .args(["--json", "--runs", "1"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "two programs failed");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |name: &str| {
        lines
            .iter()
            .find(|l| l["program"] == name)
            .unwrap_or_else(|| panic!("no line for {name} in {lines:?}"))
    };
    assert!(of("a-traps")["error"].as_str().unwrap().contains("ephem"));
    assert!(of("b-runs")["ephem_exec_ns"].as_u64().is_some());
    let wrong = of("c-says-else")["error"].as_str().unwrap().to_owned();
    assert!(wrong.contains("expected output"), "{wrong}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a-traps") && stderr.contains("c-says-else"),
        "{stderr}"
    );
}
