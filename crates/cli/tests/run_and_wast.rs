//! `ephem run` and `ephem wast` as a user runs them.

use std::process::Command;

fn ephem(args: &[&str]) -> std::process::Output {
    let cache = std::env::temp_dir().join(format!("ephem-cli-cache-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args(args)
        .env("EPHEM_CACHE_DIR", cache)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

#[test]
fn run_prints_results_one_per_line() {
    let out = ephem(&["run", "examples/fib.wat", "--invoke", "fib", "30"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "832040\n");
}

#[test]
fn run_reports_traps_and_bad_arguments() {
    let dir = std::env::temp_dir().join(format!("ephem-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.wat");
    std::fs::write(&file, r#"(module (func (export "two") (result i32 i64) (i32.const 1) (i64.const -2)) (func (export "boom") unreachable))"#).unwrap();
    let file = file.to_str().unwrap();
    let out = ephem(&["run", file, "--invoke", "two"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "1\n-2\n");
    let out = ephem(&["run", file, "--invoke", "boom"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("wasm trap: unreachable"));
    let out = ephem(&["run", file, "--invoke", "two", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("takes 0 arguments"));
    let out = ephem(&["run", "/nonexistent.wasm"]);
    assert!(!out.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wast_prints_a_line_per_file_and_the_totals() {
    let dir = std::env::temp_dir().join(format!("ephem-wast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.wast"),
        r#"(module (func (export "f") (param i32) (result i32) (i32.mul (local.get 0) (i32.const 2))))
           (assert_return (invoke "f" (i32.const 4)) (i32.const 8))
           (assert_trap (module (func $s unreachable) (start $s)) "unreachable")
           (assert_invalid (module (func (result i32))) "type mismatch")"#,
    )
    .unwrap();
    std::fs::write(dir.join("b.wast"), r#"(module (func (export "f") (result i32) (i32.const 1))) (assert_return (invoke "f") (i32.const 2))"#).unwrap();
    let out = ephem(&["wast", dir.to_str().unwrap()]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].ends_with("a.wast: 3 passed, 0 failed, 0 skipped"),
        "{stdout}"
    );
    assert!(
        lines[1].ends_with("b.wast: 0 passed, 1 failed, 0 skipped"),
        "{stdout}"
    );
    assert_eq!(lines[2], "spec: 3 passed, 1 failed, 0 skipped");
    assert!(
        !out.status.success(),
        "a failing assertion fails the command"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
