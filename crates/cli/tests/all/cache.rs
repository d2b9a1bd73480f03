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

/// `ephem compile MODULE -o ARTIFACT EXTRA…`, sealed with the cache's key unless `EXTRA`
/// names another.
fn compile(cache: &Path, module: &Path, artifact: &Path, extra: &[&str]) {
    let (module, artifact) = (module.to_str().unwrap(), artifact.to_str().unwrap());
    let args = [&["compile", module, "-o", artifact][..], extra].concat();
    ok(ephem(cache, &args).output().unwrap());
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
        .filter(|name| name != "key")
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

/// `--no-bounds-checks` reaches the compiler: the artifact differs from the default one (its
/// code and its key's fingerprint), and runs.
#[test]
fn compile_without_bounds_checks_writes_other_code_that_runs() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let module = big_module(&dir);
    let (checked, plain) = (dir.join("checked.ephem"), dir.join("plain.ephem"));
    compile(&cache, &module, &checked, &[]);
    compile(&cache, &module, &plain, &["--no-bounds-checks"]);
    assert_ne!(
        std::fs::read(&plain).unwrap(),
        std::fs::read(&checked).unwrap()
    );
    let run = |artifact: &Path| {
        ok(ephem(
            &cache,
            &["run", artifact.to_str().unwrap(), "--invoke", "main"],
        )
        .output()
        .unwrap())
    };
    assert_eq!(run(&plain), "441\n");
}

#[test]
fn compile_writes_an_artifact_that_run_accepts() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let module = big_module(&dir);
    let artifact = dir.join("big.ephem");
    compile(&cache, &module, &artifact, &[]);
    let out = ok(ephem(
        &cache,
        &["run", artifact.to_str().unwrap(), "--invoke", "main"],
    )
    .output()
    .unwrap());
    assert_eq!(out, "441\n");
    let names: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["key"], "running an artifact adds no cache entry");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&artifact).unwrap().permissions(),
    );
    assert_eq!(mode & 0o222, 0, "artifacts are written read-only: {mode:o}");

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

/// The issue's reproduction: B's artifact copied over A's cache entry used to run B's code.
#[test]
fn an_entry_copied_from_another_module_runs_the_right_module() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let (a, b) = (dir.join("a.wat"), dir.join("b.wat"));
    std::fs::write(
        &a,
        r#"(module (func (export "f") (result i32) i32.const 1))"#,
    )
    .unwrap();
    std::fs::write(
        &b,
        r#"(module (func (export "f") (result i32) i32.const 2))"#,
    )
    .unwrap();
    let run = |m: &Path| {
        ephem(&cache, &["run", m.to_str().unwrap(), "--invoke", "f"])
            .output()
            .unwrap()
    };
    assert_eq!(ok(run(&a)), "1\n");
    let entry_of = |before: &[PathBuf]| -> PathBuf {
        let mut now: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        now.retain(|p| p.extension().is_some_and(|e| e == "ephem") && !before.contains(p));
        assert_eq!(now.len(), 1);
        now.pop().unwrap()
    };
    let entry_a = entry_of(&[]);
    assert_eq!(ok(run(&b)), "2\n");
    let entry_b = entry_of(std::slice::from_ref(&entry_a));
    std::fs::remove_file(&entry_a).unwrap();
    std::fs::copy(&entry_b, &entry_a).unwrap();
    let out = run(&a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(ok(out), "1\n", "A's code runs, not B's");
    assert!(
        err.contains("another module") && err.contains(&*entry_a.to_string_lossy()),
        "{err}"
    );
    // The entry was replaced: the next run is a quiet hit.
    let out = run(&a);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(out), "1\n");
}

#[test]
fn artifacts_run_only_under_the_key_that_sealed_them() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let module = big_module(&dir);
    let artifact = dir.join("big.ephem");
    let (key1, key2) = (dir.join("key1"), dir.join("key2"));
    for (path, digit) in [(&key1, "1"), (&key2, "2")] {
        std::fs::write(path, digit.repeat(64) + "\n").unwrap();
    }
    let cache = dir.join("cache");
    compile(
        &cache,
        &module,
        &artifact,
        &["--artifact-key", key1.to_str().unwrap()],
    );
    let run = |extra: &[&str]| {
        let args = [
            &["run", artifact.to_str().unwrap()][..],
            extra,
            &["--invoke", "main"],
        ]
        .concat();
        ephem(&cache, &args).output().unwrap()
    };
    assert_eq!(
        ok(run(&["--artifact-key", key1.to_str().unwrap()])),
        "441\n"
    );
    for refused in [run(&["--artifact-key", key2.to_str().unwrap()]), run(&[])] {
        assert!(!refused.status.success());
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            err.contains("not sealed with this deployment's key"),
            "{err}"
        );
    }
    // The explicit opt-in runs it anyway.
    assert_eq!(ok(run(&["--trust-artifact"])), "441\n");
    // A key file that others may write is refused.
    std::fs::set_permissions(&key1, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let out = run(&["--artifact-key", key1.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another user could change"));
}

#[test]
fn an_artifact_with_a_damaged_magic_is_reported_as_damaged() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("cache");
    let module = big_module(&dir);
    let artifact = dir.join("big.ephem");
    compile(&cache, &module, &artifact, &[]);
    let bytes = std::fs::read(&artifact).unwrap();
    for at in [0, 3, 7] {
        let mut b = bytes.clone();
        b[at] = b'?';
        let damaged = dir.join(format!("magic{at}.ephem"));
        std::fs::write(&damaged, &b).unwrap();
        let out = ephem(&cache, &["run", damaged.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("damaged") && err.contains("magic"), "{err}");
    }
}
