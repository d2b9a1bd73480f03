//! `ephem run` of WASI programs, with wasmtime's flags: arguments and environment, preopened
//! directories, preloaded modules, the guest's exit status, and the Sightglass programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ephem(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args(["run", "--no-cache"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn guest(name: &str) -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../wasi/tests/guests/{name}.wasm"));
    path.to_str().unwrap().to_owned()
}

fn stdout(out: &Output) -> &str {
    std::str::from_utf8(&out.stdout).unwrap()
}

#[test]
fn arguments_after_the_module_and_env_flags_reach_the_guest() {
    let dir = ephem_test_support::temp_dir();
    let basics = guest("basics");
    let out = ephem(
        dir.path(),
        &[
            "--env",
            "FOO=bar",
            "--env",
            "EMPTY=",
            &basics,
            "args",
            "--not-a-flag",
            "x y",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = format!(
        "arg 0: {basics}\narg 1: args\narg 2: --not-a-flag\narg 3: x y\nenv: FOO=bar\nenv: EMPTY=\n"
    );
    assert_eq!(stdout(&out), expected);
}

#[test]
fn the_guests_exit_status_is_the_commands() {
    let dir = ephem_test_support::temp_dir();
    for status in [0, 3, 255] {
        let out = ephem(dir.path(), &[&guest("basics"), "exit", &status.to_string()]);
        assert_eq!(out.status.code(), Some(status));
        assert_eq!(out.stderr, b"", "an exit is not an error");
    }
}

#[test]
fn dir_flags_preopen_read_write_and_read_only_directories() {
    let root = ephem_test_support::temp_dir();
    let (sandbox, ro) = (root.path().join("sandbox"), root.path().join("ro"));
    std::fs::create_dir_all(sandbox.join("sub")).unwrap();
    std::fs::create_dir_all(root.path().join("outside")).unwrap();
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(ro.join("r.txt"), "read only\n").unwrap();
    std::os::unix::fs::symlink("../outside", sandbox.join("out")).unwrap();
    let dir_spec = format!("{}::.", sandbox.display());
    let ro_spec = format!("{}::ro", ro.display());
    let out = ephem(
        root.path(),
        &["--dir", &dir_spec, "--dir-ro", &ro_spec, &guest("fs")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    for line in [
        "mkdir d: OK",
        "rmdir d: OK",
        "open out/secret: ENOTCAPABLE",
        "ro: read: read only",
        "ro: create: ENOTCAPABLE",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "`{line}` missing from:\n{text}"
        );
    }
    // Without `--dir`, the guest has no directory at all.
    let out = ephem(root.path(), &[&guest("fs")]);
    assert!(
        stdout(&out).starts_with("mkdir d: ENOTCAPABLE\n"),
        "{}",
        stdout(&out)
    );
    assert!(!root.path().join("d").exists());
}

#[test]
fn preload_links_another_modules_exports_under_a_name() {
    let dir = ephem_test_support::temp_dir();
    std::fs::write(
        dir.path().join("helper.wat"),
        r#"(module (func (export "answer") (result i32) (i32.const 41)))"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("main.wat"),
        r#"(module (import "helper" "answer" (func $a (result i32)))
             (func (export "run") (result i32) (i32.add (call $a) (i32.const 1))))"#,
    )
    .unwrap();
    let out = ephem(
        dir.path(),
        &[
            "--preload",
            "helper=helper.wat",
            "--invoke",
            "run",
            "main.wat",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out), "42\n");
    let out = ephem(dir.path(), &["--preload", "helper", "main.wat"]);
    assert_eq!(out.status.code(), Some(2), "NAME=FILE is a usage error");
}

#[test]
fn a_reactor_is_initialised_before_its_export_is_invoked() {
    let dir = ephem_test_support::temp_dir();
    std::fs::write(
        dir.path().join("reactor.wat"),
        r#"(module (global $ready (mut i32) (i32.const 0))
             (func (export "_initialize") (global.set $ready (i32.const 1)))
             (func (export "ready") (result i32) (global.get $ready)))"#,
    )
    .unwrap();
    let out = ephem(dir.path(), &["--invoke", "ready", "reactor.wat"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out), "1\n");
}

/// A C program built with `-msimd128` (intrinsics, and loops clang vectorised) checks each SIMD
/// result against the same computation in scalar code, and says how many checks passed.
#[test]
fn a_simd_guest_agrees_with_its_scalar_code() {
    let dir = ephem_test_support::temp_dir();
    let out = ephem(dir.path(), &[&guest("simd")]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out), "simd: 6 checks passed\n");
}

/// Every Sightglass program (SIMD ones included), run as wasmtime runs them: in its directory,
/// preopened as `.`, with `bench.start`/`bench.end` preloaded. Its output must be exactly the
/// expected output.
#[test]
fn sightglass_programs_print_their_expected_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/sightglass");
    if !root.is_dir() {
        eprintln!("skipped: {} is absent", root.display());
        return;
    }
    let tmp = ephem_test_support::temp_dir();
    let bench = tmp.path().join("bench.wat");
    std::fs::write(
        &bench,
        r#"(module (func (export "start")) (func (export "end")))"#,
    )
    .unwrap();
    let preload = format!("bench={}", bench.display());
    let mut programs = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        for wasm in std::fs::read_dir(&dir).unwrap() {
            let wasm = wasm.unwrap().path();
            if wasm.extension().is_some_and(|e| e == "wasm") {
                programs.push((dir.clone(), wasm));
            }
        }
    }
    programs.sort();
    let mut ran = 0;
    for (dir, wasm) in programs {
        let stem = wasm.file_stem().unwrap().to_str().unwrap();
        let out = ephem(
            &dir,
            &["--dir", ".", "--preload", &preload, wasm.to_str().unwrap()],
        );
        // `NAME.stream.expected`, else Sightglass's `default.stream.expected`; a program that
        // prints its own timings (hashset) has neither and must only succeed.
        let expected = |stream: &str| {
            [stem, "default"]
                .iter()
                .find_map(|name| std::fs::read(dir.join(format!("{name}.{stream}.expected"))).ok())
        };
        assert!(
            out.status.success(),
            "{}: {}",
            wasm.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        match (expected("stdout"), expected("stderr")) {
            (Some(want_out), Some(want_err)) => {
                assert_eq!(stdout(&out).as_bytes(), want_out, "{}", wasm.display());
                assert_eq!(out.stderr, want_err, "{}", wasm.display());
            }
            (None, None) => eprintln!("{}: no expected output; it ran", wasm.display()),
            _ => panic!("{}: only one of its expected outputs", wasm.display()),
        }
        ran += 1;
    }
    assert!(
        ran >= 20,
        "only {ran} programs found under {}",
        root.display()
    );
}

/// A C program built with clang for `wasm32-wasip1-threads` with `-pthread`
/// (`guests/threads.c`, built by `guests/build-threads.sh`): four threads spawned through
/// `wasi-threads`, a mutex, an atomic counter, a condition variable, joins. It prints what
/// wasmtime (36.0.9, `-W threads=y -S threads=y`) printed; a thread's `exit(3)` ends the
/// program with 3, and a thread's trap with 134, as there. `--preload` is refused with it.
#[test]
fn a_pthread_program_runs_its_threads_as_wasmtime_does() {
    let dir = ephem_test_support::temp_dir();
    let threads = guest("threads");
    let expected = std::fs::read_to_string(threads.replace(".wasm", ".stdout.expected")).unwrap();
    for _ in 0..3 {
        let out = ephem(dir.path(), &[&threads]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(stdout(&out), expected);
    }
    for (how, code) in [("exit", 3), ("trap", 134)] {
        let out = ephem(dir.path(), &[&threads, how]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{how}: {stderr}");
        assert_eq!(stdout(&out), "ending from a thread\n", "{how}");
        if how == "trap" {
            assert!(
                stderr.contains("thread 1") && stderr.contains("unreachable"),
                "{stderr}"
            );
        }
    }
    // A preloaded instance would live in the main thread's store alone: refused, saying so.
    let preload = dir.path().join("p.wat");
    std::fs::write(&preload, "(module)").unwrap();
    let spec = format!("p={}", preload.display());
    let out = ephem(dir.path(), &["--preload", &spec, &threads]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`--preload` does not combine"), "{stderr}");
}

/// The whole program ends when its main thread does, whatever its other threads are doing:
/// `_start` returning (0) or calling `proc_exit` (its status) while another thread waits
/// without end or spins.
#[test]
fn a_wasi_threads_program_ends_with_its_main_thread() {
    let dir = ephem_test_support::temp_dir();
    let program = |thread: &str, end: &str| {
        format!(
            r#"(module
              (import "env" "memory" (memory 1 1 shared))
              (import "wasi" "thread-spawn" (func $spawn (param i32) (result i32)))
              (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
              (func (export "wasi_thread_start") (param i32 i32) {thread})
              (func (export "_start")
                (if (i32.le_s (call $spawn (i32.const 0)) (i32.const 0)) (then unreachable))
                ;; Long enough for the thread to be waiting or spinning.
                (drop (memory.atomic.wait32 (i32.const 64) (i32.const 0) (i64.const 50000000)))
                {end}))"#
        )
    };
    let wait = "(drop (memory.atomic.wait32 (i32.const 0) (i32.const 0) (i64.const -1)))";
    let spin = "(loop $l (br $l))";
    for (thread, end, code) in [
        (wait, "", 0),
        (spin, "", 0),
        (wait, "(call $exit (i32.const 7))", 7),
        (spin, "(call $exit (i32.const 7))", 7),
    ] {
        let path = dir.path().join("main.wat");
        std::fs::write(&path, program(thread, end)).unwrap();
        let out = ephem(dir.path(), &[path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{thread} {end}: {stderr}");
    }
}

/// Real WasmGC programs: Kotlin/Wasm's WASI target (`guests/kotlin/*.kt`, built by
/// `guests/build-kotlin.sh` with JetBrains' compiler from npm, once as it comes and once
/// through Binaryen's production flags). Classes, data classes, lists, strings, maps,
/// virtual calls, failed casts caught as exceptions: each prints what wasmtime 49 printed
/// (`kotlin-hello.stdout.expected`), and each export returns what it returned; binary trees of
/// depth 18 and a list of 200 000 longs make the collector work.
#[test]
fn kotlin_wasm_programs_print_and_return_what_wasmtime_does() {
    let dir = ephem_test_support::temp_dir();
    let expected =
        std::fs::read_to_string(guest("kotlin-hello").replace(".wasm", ".stdout.expected"))
            .unwrap();
    for name in ["kotlin-hello", "kotlin-hello.opt"] {
        let out = ephem(dir.path(), &[&guest(name)]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout(&out), expected, "{name}");
    }
    // What wasmtime 49 returned (`wasmtime run -W gc=y,function-references=y,exceptions=y
    // --invoke NAME kotlin-compute.opt.wasm N`).
    let compute = guest("kotlin-compute.opt");
    for (export, arg, result) in [
        ("binaryTrees", "18", "2097148"),
        ("fib", "50", "12586269025"),
        ("sieveCount", "100000", "9592"),
        ("listSum", "200000", "1777764444511111"),
        ("zoo", "100000", "1766656"),
        ("stringHash", "100000", "-695628870"),
        ("mapCount", "1000", "97055"),
    ] {
        let out = ephem(dir.path(), &["--invoke", export, &compute, arg]);
        assert!(
            out.status.success(),
            "{export}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout(&out).trim(), result, "{export}({arg})");
    }
}

/// `ephem run` of WASI 0.2 commands (C programs wrapped as components with the preview 1
/// adapter, `guests/build-components.sh`): output and exit status as `wasmtime run` (49.0.3)
/// gave them for the same arguments, environment and input.
#[test]
fn wasi_0_2_commands_run_as_wasmtime_runs_them() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = ephem_test_support::temp_dir();
    let run = |args: &[&str], input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args(["run", "--no-cache"])
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    let hello = guest("hello.component");
    let out = run(&[&hello], b"");
    assert_eq!(stdout(&out), "Hello, world!\n");
    assert!(out.status.success());
    // Files and directories through `wasi:filesystem`, beneath the `--dir` given (the test's
    // directory, empty, as wasmtime's was).
    let files = guest("files.component");
    let out = run(&["--dir", ".", &files], b"");
    assert_eq!(
        stdout(&out),
        "read 23: first line\nsecond line\nstat notes.txt: OK\nsize 23, regular 1\n\
         pread: 6 line\ns\nmkdir sub: OK\nmkdir sub again: File exists\nstat sub: OK\n\
         directory 1\nentry notes.txt\nentry sub\n\
         rmdir sub (not empty): Directory not empty\nunlink sub/inner.txt: OK\nrmdir sub: OK\n\
         open missing: No such file or directory\nopen ../escape: Operation not permitted\n\
         open /etc/passwd: No such file or directory\nunlink notes.txt: OK\n\
         stat notes.txt: No such file or directory\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    // Without a directory, the program has none to write to.
    let out = run(&[&files], b"");
    assert_eq!(stdout(&out), "");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("fopen: "));
    assert_eq!(out.status.code(), Some(1));

    let basics = guest("basics.component");
    let out = run(&["--env", "A=b", &basics, "args", "x"], b"");
    let want = format!("arg 0: {basics}\narg 1: args\narg 2: x\nenv: A=b\n");
    assert_eq!(stdout(&out), want);
    let out = run(&[&basics, "cat"], b"abc\n");
    assert_eq!(stdout(&out), "poll stdin: OK\nABC\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "4 bytes\n");
    let out = run(&[&basics, "random"], b"");
    assert_eq!(stdout(&out), "getentropy: OK\ngetentropy: OK\ndiffer: 1\n");
    // The adapter passes a failure status as `exit(err)`: 1, as wasmtime reports it.
    let out = run(&[&basics, "exit", "3"], b"");
    assert_eq!(out.status.code(), Some(1));

    let wc = guest("wc.component");
    let out = run(&[&wc], b"one two\nthree\n");
    assert_eq!(stdout(&out), "2 14\n");

    // A deadline stops a command asleep on a clock (`nanosleep` through `wasi:io/poll`).
    let out = run(&["--timeout", "5ms", &basics, "clocks"], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(134), "{stderr}");
}

/// A Python command built by componentize-py (CPython inside, 18 MB): it prints what
/// `wasmtime run` printed for it. Where componentize-py is not installed (CI), says so and
/// passes; `guests/python/build.sh` is how it is built.
#[test]
fn a_componentize_py_command_prints_what_wasmtime_prints() {
    let available = Command::new("componentize-py")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        println!("skipped: componentize-py is not installed (pip install componentize-py)");
        return;
    }
    let dir = ephem_test_support::temp_dir();
    let app = dir.path().join("app.wasm");
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wasi/tests/guests/python/build.sh");
    let built = Command::new(script).arg(&app).output().unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = ephem(
        dir.path(),
        &["--env", "GREETING=hi", app.to_str().unwrap(), "a", "b"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout(&out),
        "hello from python ['a', 'b'] hi\nsum of squares 332833500\n"
    );
}
