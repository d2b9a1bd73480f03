//! `ephem compile`, `ephem run` through the cache, and `ephem cache` as users (and concurrent
//! processes) run them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ephem(cache: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ephem"));
    c.args(args).env("EPHEM_CACHE_DIR", cache);
    c
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A module with enough functions that compiling it takes a while.
fn big_module(dir: &Path) -> PathBuf {
    let mut wat = String::from("(module (memory 1) (data (i32.const 0) \"\\2a\")\n");
    for i in 0..400 {
        wat += &format!(
            "(func $f{i} (param i32) (result i32) (i32.add (i32.mul (local.get 0) (i32.const {i})) (i32.load8_u (i32.const 0))))\n"
        );
    }
    wat += "(func (export \"main\") (result i32) (call $f399 (i32.const 1))))";
    let path = dir.join("big.wat");
    std::fs::write(&path, wat).unwrap();
    path
}

#[test]
fn concurrent_processes_fill_the_cache_with_one_whole_entry() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let module = big_module(&dir);
    let module = module.to_str().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            ephem(&cache, &["run", module, "--invoke", "main"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        assert_eq!(ok(child.wait_with_output().unwrap()), "441\n");
    }
    let names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "one entry and no temporary files: {names:?}"
    );
    assert!(names[0].ends_with(".ephem"));
    let stats = ok(ephem(&cache, &["cache", "stats"]).output().unwrap());
    assert!(stats.contains("entries: 1"), "{stats}");
    // The entry is whole: the next run is a hit and prints the same.
    assert_eq!(
        ok(ephem(&cache, &["run", module, "--invoke", "main"])
            .output()
            .unwrap()),
        "441\n"
    );
    let cleared = ok(ephem(&cache, &["cache", "clear"]).output().unwrap());
    assert!(cleared.contains("removed 1"), "{cleared}");
}

#[test]
fn compile_writes_an_artifact_that_run_accepts() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let module = big_module(&dir);
    let artifact = dir.join("big.ephem");
    ok(ephem(
        &cache,
        &[
            "compile",
            module.to_str().unwrap(),
            "-o",
            artifact.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap());
    let out = ok(ephem(
        &cache,
        &["run", artifact.to_str().unwrap(), "--invoke", "main"],
    )
    .output()
    .unwrap());
    assert_eq!(out, "441\n");
    assert!(
        !cache.exists(),
        "running an artifact does not touch the cache"
    );

    // A damaged artifact is refused with a clear message, and nothing runs.
    let mut bytes = std::fs::read(&artifact).unwrap();
    bytes.truncate(bytes.len() - 1);
    std::fs::write(&artifact, &bytes).unwrap();
    let out = ephem(
        &cache,
        &["run", artifact.to_str().unwrap(), "--invoke", "main"],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("damaged"), "{err}");
}

#[test]
fn an_unusable_cache_warns_once_and_runs() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let file = dir.join("file");
    std::fs::write(&file, b"").unwrap();
    let module = big_module(&dir);
    let out = ephem(
        &file.join("cache"),
        &["run", module.to_str().unwrap(), "--invoke", "main"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(ok(out), "441\n");
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
    // --no-cache does not even try.
    let out = ephem(
        &file.join("cache"),
        &[
            "run",
            "--no-cache",
            module.to_str().unwrap(),
            "--invoke",
            "main",
        ],
    )
    .output()
    .unwrap();
    assert!(out.stderr.is_empty());
    assert_eq!(ok(out), "441\n");
}
