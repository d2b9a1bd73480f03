//! `ephem bench fresh --json` and `ephem bench thresholds --json`: the output contract.

use std::process::Command;

use ephem_test_support::{json_lines, temp_dir};

#[test]
fn bench_fresh_prints_one_json_object_per_module() {
    let tmp = temp_dir();
    let dir = tmp.path();
    let a = dir.join("a.wat");
    let b = dir.join("b.wat");
    std::fs::write(&a, r#"(module (memory 1) (data (i32.const 0) "a") (func (export "run") (result i32) i32.const 1))"#).unwrap();
    std::fs::write(&b, r#"(module (func (export "run") unreachable))"#).unwrap();
    let lines = json_lines(
        Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args([
                "bench",
                "fresh",
                "--json",
                "--invoke",
                "run",
                "--invocations",
                "20",
                // Zero sizes are accepted where they mean something: no page kept resident.
                "--keep-resident",
                "0",
                "--resident-dirty-bytes",
                "0",
            ])
            .arg("--dir")
            .arg(dir.join("work"))
            .args([&a, &b]),
    );
    assert_eq!(lines.len(), 2);
    for (line, name) in lines.iter().zip(["a.wat", "b.wat"]) {
        assert_eq!(line["module"], name);
        let median = line["median_ns"].as_u64().unwrap();
        let p90 = line["p90_ns"].as_u64().unwrap();
        assert!(median > 0 && p90 >= median, "{line}");
        assert!(line["invocations"].as_u64().unwrap() > 0);
        assert!(line["parts"]["open"]["median_ns"].as_u64().is_some());
    }
}

/// `--metering`: each module under each metering, its code compiled for it and its stores
/// given fuel and a deadline: a module that loops a bounded while runs to its end in every
/// mode (without fuel in its store, metered code traps at once).
#[test]
fn bench_fresh_measures_each_metering() {
    let tmp = temp_dir();
    let lines = run_each_way(
        tmp.path(),
        r#"(module (func (export "run") (result i32) (local i32)
             (loop (br_if 0 (i32.ne (local.tee 0 (i32.add (local.get 0) (i32.const 1)))
                                    (i32.const 1000))))
             (local.get 0)))"#,
        &["--metering", "off,deadline,fuel,both"],
    );
    let modes: Vec<&str> = lines
        .iter()
        .map(|l| l["metering"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["off", "deadline", "fuel", "both"]);
    // Two artifacts: with fuel and without (a deadline compiles nothing in).
    assert_eq!(artifacts_in(&tmp.path().join("work/ephem")), 2);
}

/// `--write-marks on,off`: each module compiled both ways (two artifacts: the code differs),
/// and each runs and returns on every invocation.
#[test]
fn bench_fresh_measures_with_and_without_write_marks() {
    let tmp = temp_dir();
    let lines = run_each_way(
        tmp.path(),
        r#"(module (memory 1) (func (export "run") (result i32)
             (i32.store (i32.const 4096) (i32.const 7)) (i32.load (i32.const 4096))))"#,
        &["--write-marks", "on,off"],
    );
    let marks: Vec<bool> = lines
        .iter()
        .map(|l| l["write_marks"].as_bool().unwrap())
        .collect();
    assert_eq!(marks, [true, false]);
    assert_eq!(artifacts_in(&tmp.path().join("work/ephem")), 2);
}

/// `--bounds-checks on,off`: each module compiled both ways, each running a call that grows
/// its memory on every invocation (the case the checks are for).
#[test]
fn bench_fresh_measures_with_and_without_bounds_checks() {
    let tmp = temp_dir();
    let lines = run_each_way(
        tmp.path(),
        r#"(module (memory 1 2) (func (export "run") (result i32)
             (drop (memory.grow (i32.const 1)))
             (i32.store (i32.const 65536) (i32.const 7)) (i32.load (i32.const 65536))))"#,
        &["--bounds-checks", "on,off"],
    );
    let checks: Vec<bool> = lines
        .iter()
        .map(|l| l["bounds_checks"].as_bool().unwrap())
        .collect();
    assert_eq!(checks, [true, false]);
    assert_eq!(artifacts_in(&tmp.path().join("work/ephem")), 2);
}

/// `ephem bench fresh --json` of the module `wat` (its export `run`, 10 invocations) with
/// `flags`, its cache in `dir/work`: the lines, each checked to have run every invocation to
/// its end.
fn run_each_way(dir: &std::path::Path, wat: &str, flags: &[&str]) -> Vec<serde_json::Value> {
    let file = dir.join("module.wat");
    std::fs::write(&file, wat).unwrap();
    let lines = json_lines(
        Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args(["bench", "fresh", "--json", "--invoke", "run"])
            .args(["--invocations", "10"])
            .args(flags)
            .arg("--dir")
            .arg(dir.join("work"))
            .arg(&file),
    );
    for line in &lines {
        assert!(line["median_ns"].as_u64().unwrap() > 0, "{line}");
        assert_eq!(line["trapped"], 0, "{line}");
    }
    lines
}

/// How many artifacts (`*.ephem`) the cache directory `dir` holds.
fn artifacts_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("ephem".as_ref()))
        .count()
}

#[test]
fn bench_thresholds_measures_both_ways_at_each_size() {
    let lines = json_lines(Command::new(env!("CARGO_BIN_EXE_ephem")).args([
        "bench",
        "thresholds",
        "--json",
        "--sizes",
        "4k,64k",
        "--repeat",
        "3",
    ]));
    assert_eq!(lines.len(), 4, "text and image, two sizes each");
    for line in &lines {
        let values: Vec<u64> = line
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.contains(','))
            .map(|(_, v)| v.as_u64().unwrap())
            .collect();
        assert_eq!(values.len(), 4, "{line}");
        assert!(values.iter().all(|&ns| ns > 0), "{line}");
    }
}

/// Without `--invoke`, every invocation calls `_start`, else the module's first exported
/// function that takes no arguments; a module without one is only instantiated, and
/// `--instantiate-only` calls nothing anywhere.
#[test]
fn bench_fresh_calls_each_modules_own_export_by_default() {
    let tmp = temp_dir();
    let dir = tmp.path();
    let modules = [
        (
            "start.wat",
            r#"(module (func (export "a") (result i32) i32.const 1) (func (export "_start")))"#,
            Some("_start"),
        ),
        (
            "first.wat",
            r#"(module (func (export "p") (param i32)) (func (export "q") (result i32) i32.const 2) (func (export "r")))"#,
            Some("q"),
        ),
        (
            "none.wat",
            r#"(module (memory (export "m") 1) (func (export "p") (param i64)))"#,
            None,
        ),
    ];
    for (name, wat, _) in &modules {
        std::fs::write(dir.join(name), wat).unwrap();
    }
    for instantiate_only in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ephem"));
        cmd.args(["bench", "fresh", "--json", "--invocations", "5"])
            .arg("--dir")
            .arg(dir.join(format!("work{instantiate_only}")));
        if instantiate_only {
            cmd.arg("--instantiate-only");
        }
        cmd.args(modules.iter().map(|(name, _, _)| dir.join(name)));
        let lines = json_lines(&mut cmd);
        assert_eq!(lines.len(), 3);
        for (line, (name, _, export)) in lines.iter().zip(&modules) {
            assert_eq!(line["module"], *name);
            let expected = if instantiate_only { None } else { *export };
            assert_eq!(line["export"].as_str(), expected, "{line}");
        }
    }
}

/// `--threads 2` runs the invocations on two threads over one engine and cache as well, and
/// reports throughput on one thread and on two.
#[test]
fn bench_fresh_reports_throughput_on_several_threads() {
    let tmp = temp_dir();
    let dir = tmp.path();
    let a = dir.join("a.wat");
    std::fs::write(&a, r#"(module (memory 1) (data (i32.const 0) "a") (func (export "run") (result i32) (i32.load8_u (i32.const 0))))"#).unwrap();
    let lines = json_lines(
        Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args([
                "bench",
                "fresh",
                "--json",
                "--invocations",
                "50",
                "--threads",
                "2",
            ])
            .arg("--dir")
            .arg(dir.join("work"))
            .arg(&a),
    );
    assert_eq!(lines.len(), 2, "the module, then throughput");
    let t = &lines[1];
    assert_eq!(t["runtime"], "ephem");
    assert_eq!(t["threads"], 2);
    for key in ["single_per_s", "multi_per_s", "scaling"] {
        assert!(t[key].as_f64().is_some_and(|v| v > 0.0), "{t}");
    }
}
