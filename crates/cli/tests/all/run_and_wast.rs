//! `ephem run` and `ephem wast` as a user runs them.

use std::process::Command;

fn ephem(args: &[&str]) -> std::process::Output {
    // One cache for all runs of this file's tests (a test's own directory would go with the test).
    let cache = std::env::temp_dir().join(format!("ephem-cli-cache-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args(args)
        .env("EPHEM_CACHE_DIR", cache)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

/// Writes `wat` to `name` in `dir`; returns the path as a string for the command line.
fn module_file(dir: &ephem_test_support::TempDir, name: &str, wat: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, wat).unwrap();
    path.to_str().unwrap().to_owned()
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
fn run_says_what_an_uncaught_exception_carried_and_exits_1() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "throws.wat",
        r#"(module (tag $e (param i32 f64))
             (func (export "f") (throw $e (i32.const 5) (f64.const 1.5))))"#,
    );
    let out = ephem(&["run", file, "--invoke", "f"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("uncaught wasm exception carrying (5, 1.5)"),
        "{stderr}"
    );
}

#[test]
fn run_reports_traps_and_bad_arguments() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "t.wat",
        r#"(module (func (export "two") (result i32 i64) (i32.const 1) (i64.const -2)) (func (export "boom") unreachable))"#,
    );
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
}

/// Exit codes: 0 success, 1 error, 2 usage, 134 trap (see the CLI's `exit` module).
#[test]
fn run_exits_with_distinct_codes_and_refuses_unknown_imports_by_default() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "imports.wat",
        r#"(module (import "env" "log" (func (param i32))) (import "env" "mem" (memory 1))
             (func (export "quiet") (result i32) (i32.const 7))
             (func (export "loud") (call 0 (i32.const 1))))"#,
    );
    let code = |out: &std::process::Output| out.status.code().unwrap();
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // Unknown imports are refused, each named with its type, and the flag that stubs them.
    let out = ephem(&["run", file, "--invoke", "quiet"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let msg = stderr(&out);
    assert!(msg.contains("`env`.`log` (func (param i32))"), "{msg}");
    assert!(msg.contains("`env`.`mem` (memory 1)"), "{msg}");
    assert!(msg.contains("--trap-unknown-imports"), "{msg}");

    // With the flag: a run that never calls a stub succeeds; one that does traps (134).
    let out = ephem(&["run", file, "--invoke", "quiet", "--trap-unknown-imports"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "7\n");
    let out = ephem(&["run", file, "--invoke", "loud", "--trap-unknown-imports"]);
    assert_eq!(code(&out), 134, "{}", stderr(&out));
    assert!(stderr(&out).contains("`env`.`log`"), "{}", stderr(&out));

    // Usage errors (2): arguments out of range are refused, not wrapped; unknown flags.
    let out = ephem(&["run", "examples/fib.wat", "--invoke", "fib", "4294967296"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("not an i32"), "{}", stderr(&out));
    let out = ephem(&["run", "examples/fib.wat", "--invoke", "fib", "4294967295"]);
    assert_eq!(
        code(&out),
        0,
        "unsigned i32 arguments are taken: {}",
        stderr(&out)
    );
    assert_eq!(code(&ephem(&["run", "--no-such-flag", file])), 2);

    // A compile error says its cause once; a missing file is an error (1), not a trap.
    let bad = &module_file(
        &tmp,
        "bad.wat",
        "(module (func (result i32) (i64.const 1)))",
    );
    let out = ephem(&["run", "--no-cache", bad]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out).matches("type mismatch").count(),
        1,
        "{}",
        stderr(&out)
    );
    assert_eq!(code(&ephem(&["run", "/nonexistent.wasm"])), 1);
}

#[test]
fn max_memory_bounds_growth_and_initial_size() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "grow.wat",
        r#"(module (memory 1) (func (export "grow") (result i32) (memory.grow (i32.const 1))))"#,
    );
    let stdout = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(stdout(ephem(&["run", file, "--invoke", "grow"])), "1\n");
    let limited = ephem(&["run", file, "--invoke", "grow", "--max-memory", "64k"]);
    assert_eq!(stdout(limited), "-1\n");
    let out = ephem(&["run", file, "--invoke", "grow", "--max-memory", "1k"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("limit"));
}

#[test]
fn timeout_interrupts_an_endless_guest_with_the_trap_code() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "spin.wat",
        r#"(module (func (export "spin") (loop $l (br $l))))"#,
    );
    let started = std::time::Instant::now();
    let out = ephem(&["run", file, "--invoke", "spin", "--timeout", "200ms"]);
    assert_eq!(
        out.status.code(),
        Some(134),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn max_stack_bounds_recursion() {
    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "down.wat",
        r#"(module (func $down (export "down") (param i32) (result i32)
             (if (result i32) (i32.eqz (local.get 0)) (then (i32.const 0))
               (else (i32.add (call $down (i32.sub (local.get 0) (i32.const 1))) (i32.const 1))))))"#,
    );
    let out = ephem(&["run", file, "--invoke", "down", "20000"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "20000\n");
    // Flags go before the arguments: from the first argument on, everything is the guest's.
    let out = ephem(&[
        "run",
        file,
        "--max-stack",
        "64k",
        "--invoke",
        "down",
        "20000",
    ]);
    assert_eq!(out.status.code(), Some(134));
    assert!(String::from_utf8_lossy(&out.stderr).contains("call stack exhausted"));
}

#[test]
fn fuel_bounds_a_guest_and_is_printed() {
    // fib.wat's `fib 30` takes a fixed amount of fuel; an endless loop takes all there is.
    let fib30 = [
        "run",
        "examples/fib.wat",
        "--fuel",
        "1000000",
        "--print-fuel",
        "--invoke",
        "fib",
        "30",
    ];
    let out = ephem(&fib30);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "832040\n");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let used: u64 = stderr
        .trim()
        .strip_prefix("fuel consumed: ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(used > 30 && used < 1_000_000, "{used}");
    let again = ephem(&fib30);
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        stderr,
        "deterministic"
    );

    let tmp = ephem_test_support::temp_dir();
    let file = &module_file(
        &tmp,
        "spin.wat",
        r#"(module (func (export "spin") (loop $l (br $l))))"#,
    );
    let out = ephem(&[
        "run",
        file,
        "--invoke",
        "spin",
        "--fuel",
        "5000",
        "--print-fuel",
    ]);
    assert_eq!(out.status.code(), Some(134));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fuel consumed: 5000") && stderr.contains("all fuel consumed"),
        "{stderr}"
    );
}

#[test]
fn wast_prints_a_line_per_file_and_the_totals() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path();
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
    // The failure says where and why, without `-v`.
    assert!(
        lines[2].starts_with("  ") && lines[2].contains("b.wast:1"),
        "{stdout}"
    );
    assert_eq!(lines[3], "spec: 3 passed, 1 failed, 0 skipped");
    assert!(
        !out.status.success(),
        "a failing assertion fails the command"
    );
}

/// What a new user tried from a fresh clone, each fixed.
mod first_steps {
    use super::*;

    #[test]
    fn a_module_without_a_command_is_run() {
        let out = ephem(&["examples/fib.wat", "--invoke", "fib", "10"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "55\n");
    }

    #[test]
    fn sizes_take_binary_units_and_a_bad_one_names_the_accepted_forms() {
        for size in ["2MiB", "2m", "2097152", "64KiB"] {
            let out = ephem(&[
                "run",
                "examples/fib.wat",
                "--max-memory",
                size,
                "--invoke",
                "fib",
                "3",
            ]);
            assert!(
                out.status.success(),
                "{size}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = ephem(&["run", "examples/fib.wat", "--max-memory", "2MB"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("MiB") && err.contains("KiB"), "{err}");
        let out = ephem(&["run", "examples/fib.wat", "--timeout", "soon"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("250ms"), "{err}");
    }

    #[test]
    fn compile_refuses_an_output_directory_that_does_not_exist() {
        let tmp = ephem_test_support::temp_dir();
        let missing = tmp.path().join("missing");
        let out_path = missing.join("x.ephem");
        let out = ephem(&[
            "compile",
            "examples/fib.wat",
            "-o",
            out_path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not exist"), "{err}");
        assert!(!missing.exists(), "no directory was made");
    }

    #[test]
    fn compile_writes_each_functions_ir_where_asked() {
        let tmp = ephem_test_support::temp_dir();
        let clif = tmp.path().join("clif");
        let out_path = tmp.path().join("fib.ephem");
        let out = ephem(&[
            "compile",
            "examples/fib.wat",
            "--emit-clif",
            clif.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let first = std::fs::read_to_string(clif.join("wasm-function[0].clif")).unwrap();
        assert!(first.starts_with("function "), "{first}");
        assert!(out_path.exists());
    }

    #[test]
    fn a_reader_that_stops_early_is_no_error() {
        let cache = ephem_test_support::temp_dir();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args(["cache", "stats"])
            .env("EPHEM_CACHE_DIR", cache.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close our end before it writes: every write finds the pipe closed.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out.status.code(), Some(0), "{err}");
    }

    #[test]
    fn a_benchmark_whose_reader_stops_ends_as_a_filter_does() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args([
                "bench",
                "fresh",
                "--instantiate-only",
                "--invocations",
                "20",
            ])
            .arg("examples/fib.wat")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{:?}: {err}",
            out.status
        );
    }

    /// `--without` turns a proposal off: a memory index written as a long LEB128 zero is then
    /// malformed, as suites that predate multi-memory expect (with it, it is memory 0).
    #[test]
    fn wast_without_a_proposal_refuses_what_it_adds() {
        let tmp = ephem_test_support::temp_dir();
        let file = module_file(
            &tmp,
            "m.wast",
            r#"(assert_malformed (module binary
                 "\00asm" "\01\00\00\00"
                 "\01\04\01\60\00\00" "\03\02\01\00" "\05\03\01\00\00"
                 "\0a\0a\01\08\00\41\00\40\80\00\1a\0b") "zero byte expected")"#,
        );
        let with = ephem(&["wast", &file]);
        assert_eq!(
            with.status.code(),
            Some(1),
            "multi-memory reads the index as 0"
        );
        let without = ephem(&["wast", "--without", "multi-memory", &file]);
        let text = String::from_utf8_lossy(&without.stdout);
        assert!(without.status.success(), "{text}");
        assert!(text.contains("1 passed, 0 failed"), "{text}");
    }

    #[test]
    fn wast_failures_say_why_without_verbose() {
        let tmp = ephem_test_support::temp_dir();
        let file = module_file(
            &tmp,
            "f.wast",
            r#"(module (func (export "one") (result i32) (i32.const 1)))
               (assert_return (invoke "one") (i32.const 2))"#,
        );
        let out = ephem(&["wast", &file]);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("1 failed"), "{text}");
        assert!(
            text.contains("f.wast:2"),
            "the failure's line and reason: {text}"
        );
    }

    #[test]
    fn zero_fuel_runs_nothing() {
        let out = ephem(&[
            "run",
            "examples/fib.wat",
            "--fuel",
            "0",
            "--print-fuel",
            "--invoke",
            "fib",
            "10",
        ]);
        assert_eq!(
            out.status.code(),
            Some(134),
            "it traps at entry, as wasmtime does"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("fuel consumed: 0"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

/// `ephem run --invoke` on a component prints what `wasmtime run --invoke` (49.0.3) printed
/// for the same file and calls, and ends a trapping or endless call the same way.
#[test]
fn run_invokes_a_component_export_and_prints_its_result_as_wasmtime_does() {
    for (call, printed) in [
        (r#"greet("wörld")"#, "\"hello, wörld\"\n"),
        ("add(4294967295, 2)", "1\n"),
        ("swap({x: 1, y: -2})", "{x: -2, y: 1}\n"),
        (
            r#"swap({x: 1, y: -2, label: some("a\"b")})"#,
            "{x: -2, y: 1, label: some(\"a\\\"b\")}\n",
        ),
    ] {
        let out = ephem(&["run", "examples/component.wat", "--invoke", call]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{call}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), printed, "{call}");
    }
    let out = ephem(&["run", "examples/component.wat", "--invoke", "boom()"]);
    assert_eq!(out.status.code(), Some(134), "a trap");
    let out = ephem(&[
        "run",
        "--timeout",
        "100ms",
        "examples/component.wat",
        "--invoke",
        "spin()",
    ]);
    assert_eq!(out.status.code(), Some(134), "the deadline");
    let out = ephem(&[
        "run",
        "--fuel",
        "500",
        "examples/component.wat",
        "--invoke",
        "spin()",
    ]);
    assert_eq!(out.status.code(), Some(134), "fuel");
    // The store's limits bound the component's core memories: its one page does not fit.
    let out = ephem(&[
        "run",
        "--max-memory",
        "32k",
        "examples/component.wat",
        "--invoke",
        "add(1, 2)",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("limit"), "{stderr}");
    for call in ["add(1)", "add(-1, 2)", "nope()", "greet(\"open"] {
        let out = ephem(&["run", "examples/component.wat", "--invoke", call]);
        assert_eq!(out.status.code(), Some(2), "{call}: a usage error");
    }
    // Without `--invoke` a component runs as a `wasi:cli/run` command: this one is none.
    let out = ephem(&["run", "examples/component.wat"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("wasi:cli/run"), "{stderr}");
}

/// `ephem compile` makes a component's artifact, which `ephem run` runs without compiling;
/// one changed after it was sealed is refused.
#[test]
fn a_compiled_component_runs_from_its_artifact_and_a_forged_one_is_refused() {
    let tmp = ephem_test_support::temp_dir();
    let out_path = tmp.path().join("component.ephem");
    let artifact = out_path.to_str().unwrap();
    let out = ephem(&["compile", "examples/component.wat", "-o", artifact]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ephem(&["run", artifact, "--invoke", "add(2, 3)"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "5\n");
    let mut bytes = std::fs::read(&out_path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    let forged = tmp.path().join("forged.ephem");
    std::fs::write(&forged, &bytes).unwrap();
    let out = ephem(&["run", forged.to_str().unwrap(), "--invoke", "add(2, 3)"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not sealed"), "{stderr}");
}
