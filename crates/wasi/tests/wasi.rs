//! WASI conformance, per function family, with C guests built by wasi-libc (`guests/`, rebuilt
//! by `guests/build.sh`). Expected outputs are what POSIX (as Linux implements it) and the
//! preview 1 specification say, written here by hand.

use std::path::{Path, PathBuf};

use ephem::{Engine, Error, Linker, Module, Store};
use ephem_wasi::{DirPerms, Output, WasiCtx, WasiCtxBuilder};

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/guests/{name}.wasm"))
}

fn module(engine: &Engine, name: &str) -> Module {
    let bytes = std::fs::read(guest(name)).unwrap();
    ephem::Module::new(engine, &bytes).unwrap()
}

/// Runs `_start` of guest `name` with the context `ctx` builds; its result and the context.
fn run(
    name: &str,
    args: &[&str],
    ctx: impl FnOnce(&mut WasiCtxBuilder),
) -> (Result<(), Error>, WasiCtx) {
    let engine = Engine::default();
    let module = module(&engine, name);
    let mut b = WasiCtx::builder();
    b.arg(name).unwrap().args(args).unwrap();
    b.stdout(Output::Capture(1 << 20))
        .stderr(Output::Capture(1 << 20));
    ctx(&mut b);
    run_ctx(&engine, &module, b.build())
}

/// Runs `_start` of `module` with `ctx`; returns how it ended and the context after.
fn run_ctx(engine: &Engine, module: &Module, ctx: WasiCtx) -> (Result<(), Error>, WasiCtx) {
    let mut linker = Linker::new(engine);
    ephem_wasi::add_to_linker(&mut linker, |c: &mut WasiCtx| c).unwrap();
    let mut store = Store::new(engine, ctx);
    let instance = linker.instantiate(&mut store, module).unwrap();
    let start = instance
        .get_typed_func::<(), ()>(&mut store, "_start")
        .unwrap();
    let result = start.call(&mut store, ());
    let ctx = std::mem::replace(store.data_mut(), WasiCtx::builder().build());
    (result, ctx)
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// `expected` with one line per entry.
fn lines(expected: &[&str]) -> String {
    expected.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn arguments_and_environment_arrive_in_order() {
    let (result, ctx) = run("basics", &["args", "two words", ""], |b| {
        b.env("FOO", "bar").unwrap().env("EMPTY", "").unwrap();
    });
    result.unwrap();
    assert_eq!(
        text(ctx.stdout()),
        lines(&[
            "arg 0: basics",
            "arg 1: args",
            "arg 2: two words",
            "arg 3: ",
            "env: FOO=bar",
            "env: EMPTY=",
        ])
    );
}

#[test]
fn a_context_refuses_what_a_c_string_cannot_carry() {
    let mut b = WasiCtx::builder();
    assert!(b.arg("a\0b").is_err());
    assert!(b.env("A=B", "c").is_err());
    assert!(b.env("", "c").is_err());
    assert!(b.env("A", "c\0").is_err());
    assert!(
        b.preopened_dir("/no/such/directory", ".", DirPerms::ReadOnly)
            .is_err()
    );
}

#[test]
fn the_exit_status_is_the_guests_not_a_trap() {
    for status in [0, 7, 255] {
        let (result, _) = run("basics", &["exit", &status.to_string()], |_| {});
        let error = result.unwrap_err();
        assert_eq!(ephem_wasi::exit_code(&error), Some(status), "{error}");
    }
}

#[test]
fn clocks_tick_and_sleep() {
    let (result, ctx) = run("basics", &["clocks"], |_| {});
    result.unwrap();
    assert_eq!(
        text(ctx.stdout()),
        lines(&[
            "nanosleep: OK",
            "slept at least 20ms: 1",
            "clock_nanosleep until: 0",
            "woke after it: 1",
            "realtime after 2020: 1",
            "process cpu time: 1",
            "clock_getres: OK",
            "bad clock: EINVAL",
        ])
    );
}

#[test]
fn random_bytes_differ() {
    let (result, ctx) = run("basics", &["random"], |_| {});
    result.unwrap();
    assert_eq!(
        text(ctx.stdout()),
        lines(&["getentropy: OK", "getentropy: OK", "differ: 1"])
    );
}

/// Contexts share their template's arguments, environment and standard input: a template
/// changed after a context was built leaves that context as it was, and a context's own
/// standard input (`set_stdin`) replaces the template's for that context alone.
#[test]
fn a_context_keeps_what_its_template_had_when_it_was_built() {
    let engine = Engine::default();
    let module = module(&engine, "basics");
    let mut b = WasiCtx::builder();
    b.arg("basics").unwrap().arg("args").unwrap();
    b.stdout(Output::Capture(1 << 20));
    let first = b.build();
    b.arg("later").unwrap().env("FOO", "bar").unwrap();
    let second = b.build();
    let (result, first) = run_ctx(&engine, &module, first);
    result.unwrap();
    assert_eq!(
        text(first.stdout()),
        lines(&["arg 0: basics", "arg 1: args"])
    );
    let (result, second) = run_ctx(&engine, &module, second);
    result.unwrap();
    assert_eq!(
        text(second.stdout()),
        lines(&[
            "arg 0: basics",
            "arg 1: args",
            "arg 2: later",
            "env: FOO=bar"
        ])
    );

    let mut b = WasiCtx::builder();
    b.arg("basics").unwrap().arg("cat").unwrap();
    b.stdout(Output::Capture(1 << 20));
    b.stdin(ephem_wasi::Input::Bytes(b"template\n".as_slice().into()));
    let templated = b.build();
    let mut own = b.build();
    own.set_stdin(b"own\n".as_slice());
    for (ctx, input) in [(own, "own\n"), (templated, "template\n")] {
        let (result, ctx) = run_ctx(&engine, &module, ctx);
        result.unwrap();
        assert_eq!(
            text(ctx.stdout()),
            lines(&["poll stdin: OK"]) + &input.to_uppercase()
        );
    }
}

#[test]
fn stdin_in_memory_reaches_captured_stdout() {
    let input = "hello, wasi\n".repeat(1000);
    let (result, ctx) = run("basics", &["cat"], |b| {
        b.stdin(ephem_wasi::Input::Bytes(input.as_bytes().into()));
    });
    result.unwrap();
    assert_eq!(
        text(ctx.stdout()),
        lines(&["poll stdin: OK"]) + &input.to_uppercase()
    );
    assert_eq!(text(ctx.stderr()), "12000 bytes\n");
}

#[test]
fn a_filter_reads_its_request_and_writes_its_response() {
    let (result, ctx) = run("wc", &[], |b| {
        b.stdin(ephem_wasi::Input::Bytes(
            b"one\ntwo\nthree".as_slice().into(),
        ));
    });
    result.unwrap();
    assert_eq!(text(ctx.stdout()), "2 13\n");
}

#[test]
fn captured_output_is_bounded_and_the_guest_is_told() {
    let (result, ctx) = run("basics", &["cat"], |b| {
        b.stdin(ephem_wasi::Input::Bytes(
            b"abcdefghijklmnopqrstuvwxyz".as_slice().into(),
        ));
        b.stdout(Output::Capture(20));
    });
    assert_eq!(ephem_wasi::exit_code(&result.unwrap_err()), Some(1));
    // "poll stdin: OK\n" (15 bytes), then the 5 bytes that fit.
    assert_eq!(text(ctx.stdout()), "poll stdin: OK\nABCDE");
    assert_eq!(text(ctx.stderr()), "write: ENOSPC\n");
}

#[test]
fn a_head_keeps_the_first_bytes_and_writes_go_on_succeeding() {
    let (result, ctx) = run("basics", &["cat"], |b| {
        b.stdin(ephem_wasi::Input::Bytes(
            b"abcdefghijklmnopqrstuvwxyz".as_slice().into(),
        ));
        b.stdout(Output::Head(20));
    });
    result.unwrap();
    assert_eq!(text(ctx.stdout()), "poll stdin: OK\nABCDE");
    assert_eq!(ctx.stdout_dropped(), 21);
    assert_eq!(text(ctx.stderr()), "26 bytes\n");
    assert_eq!(ctx.stderr_dropped(), 0);
}

#[test]
fn bad_pointers_and_descriptors_are_errnos_not_crashes() {
    let dir = ephem_test_support::temp_dir();
    let (result, ctx) = run("basics", &["faults"], |b| {
        b.preopened_dir(dir.path(), ".", DirPerms::ReadWrite)
            .unwrap();
    });
    result.unwrap();
    assert_eq!(
        text(ctx.stdout()),
        lines(&[
            "fd_write, iovecs outside: EFAULT",
            "fd_write, buffer outside: EFAULT",
            "fd_write, result outside: EFAULT",
            "args_get outside: EFAULT",
            "random_get outside: EFAULT",
            "path_open, path outside: EFAULT",
            "path_open, result outside: EFAULT",
            "fd_write bad fd: EBADF",
            "fd_close bad fd: EBADF",
            "fd_seek on stdout: ESPIPE",
            "proc_raise: ENOTSUP",
            "sock_shutdown: ENOTSUP",
        ])
    );
}

/// sandbox/ (preopened as `.`): out -> ../outside, abs -> /…/outside, sub/;
/// outside/secret; ro/r.txt (preopened read-only as `ro`).
fn layout() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let root = ephem_test_support::temp_dir();
    let (sandbox, outside, ro) = (
        root.path().join("sandbox"),
        root.path().join("outside"),
        root.path().join("ro"),
    );
    for d in [&sandbox, &outside, &ro, &sandbox.join("sub")] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret"), "outside secret").unwrap();
    std::fs::write(ro.join("r.txt"), "read only\n").unwrap();
    std::os::unix::fs::symlink("../outside", sandbox.join("out")).unwrap();
    std::os::unix::fs::symlink(&outside, sandbox.join("abs")).unwrap();
    (root, sandbox, outside, ro)
}

#[test]
fn files_and_directories_work_beneath_a_preopen_and_nothing_escapes_it() {
    let (_root, sandbox, outside, ro) = layout();
    let outside_mtime = std::fs::metadata(&outside).unwrap().modified().unwrap();
    let (result, ctx) = run("fs", &[], |b| {
        b.preopened_dir(&sandbox, ".", DirPerms::ReadWrite).unwrap();
        b.preopened_dir(&ro, "ro", DirPerms::ReadOnly).unwrap();
    });
    assert_eq!(text(ctx.stderr()), "");
    result.unwrap();
    let expected = lines(&[
        "mkdir d: OK",
        "mkdir d again: EEXIST",
        "create d/f: OK",
        "write: OK",
        "close: OK",
        "close again: EBADF",
        "open d/f: OK",
        "read 5: OK",
        "read: hello",
        "seek to 6: 6",
        "read rest: OK",
        "read: world",
        "tell: 11",
        "pread 4 at 2: OK",
        "pread: [llo ]",
        "pwrite J at 0: OK",
        "fstat: OK",
        "size 11 regular 1",
        "ftruncate 5: OK",
        "fstat: OK",
        "size 5",
        "posix_fallocate 100: OK",
        "fstat: OK",
        "size 100",
        "fsync: OK",
        "fdatasync: OK",
        "set append: OK",
        "append: 1",
        "set stdout non-blocking: OK",
        "close: OK",
        "rename d/f d/g: OK",
        "open d/f: ENOENT",
        "link d/g d/h: OK",
        "stat d/h: OK",
        "nlink 2",
        "symlink g d/s: OK",
        "readlink d/s: OK",
        "readlink: g",
        "lstat d/s: OK",
        "is link 1",
        "stat d/s: OK",
        "follows to size 100",
        "utimensat d/g: OK",
        "stat d/g: OK",
        "mtime 1000000000",
        "listing: . .. g h s",
        "rmdir d (not empty): ENOTEMPTY",
        "unlink d: EISDIR",
        "unlink d/s: OK",
        "unlink d/h: OK",
        "unlink d/g: OK",
        "rmdir d: OK",
        "rmdir d again: ENOENT",
        "create m: OK",
        "create m exclusively again: EEXIST",
        "fadvise: OK",
        "fadvise bad advice: EINVAL",
        "futimens: OK",
        "fstat: OK",
        "mtime 2000000000",
        "open other: OK",
        "renumber m over other: OK",
        "renumber from closed m: EBADF",
        "write through the new number: OK",
        "fstat new number: OK",
        "size 5",
        "fdstat: OK",
        "drop the write right: OK",
        "take it back: ENOTCAPABLE",
        // wasi-libc reports ENOTCAPABLE for write() as EBADF.
        "write without the right: EBADF",
        "preopen name into 1 byte: ENAMETOOLONG",
        "sched_yield: OK",
        "close: OK",
        "unlink m: OK",
        "open ../outside/secret: ENOTCAPABLE",
        "open sub/../../outside/secret: ENOTCAPABLE",
        "open /etc/passwd: ENOTCAPABLE",
        "open out/secret: ENOTCAPABLE",
        "open abs/secret: ENOTCAPABLE",
        "open out, following: ENOTCAPABLE",
        // Linux checks O_DIRECTORY before O_NOFOLLOW on a final symlink.
        "open out, not following: ENOTDIR",
        "stat out/secret: ENOTCAPABLE",
        "stat out, following: ENOTCAPABLE",
        "stat out, not following: OK",
        "mkdir out/new: ENOTCAPABLE",
        "unlink out/secret: ENOTCAPABLE",
        "rename into out: ENOTCAPABLE",
        "link to out/secret: ENOTCAPABLE",
        "set times through abs, following: ENOTCAPABLE",
        "symlink to outside: OK",
        "open mine: ENOTCAPABLE",
        "unlink mine: OK",
        "ro: open for reading: OK",
        "ro: read: OK",
        "ro: read: read only",
        // wasi-libc reports the host's ENOTCAPABLE for write() as POSIX's EBADF.
        "ro: write: EBADF",
        "ro: open for writing: ENOTCAPABLE",
        "ro: libc open for writing: OK",
        "ro: write through it: EBADF",
        "ro: create: ENOTCAPABLE",
        "ro: mkdir: ENOTCAPABLE",
        "ro: unlink: ENOTCAPABLE",
        "ro: set times: ENOTCAPABLE",
    ]);
    let actual = text(ctx.stdout());
    for (i, (a, e)) in actual.lines().zip(expected.lines()).enumerate() {
        assert_eq!(a, e, "line {}", i + 1);
    }
    assert_eq!(actual, expected);
    // The host's view: nothing outside changed, the sandbox is as the guest left it.
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&outside), ["secret"]);
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "outside secret"
    );
    assert_eq!(
        std::fs::metadata(&outside).unwrap().modified().unwrap(),
        outside_mtime
    );
    assert_eq!(names(&sandbox), ["abs", "out", "sub"]);
    assert_eq!(names(&ro), ["r.txt"]);
    assert_eq!(
        std::fs::read_to_string(ro.join("r.txt")).unwrap(),
        "read only\n"
    );
}

#[test]
fn a_large_directory_is_listed_whole_over_several_readdir_calls() {
    let dir = ephem_test_support::temp_dir();
    for i in 0..3000 {
        std::fs::write(
            dir.path().join(format!("a-longish-file-name-number-{i}")),
            "",
        )
        .unwrap();
    }
    let (result, ctx) = run("ls", &["data"], |b| {
        b.preopened_dir(dir.path(), "data", DirPerms::ReadOnly)
            .unwrap();
    });
    result.unwrap();
    // The host's own listing, plus `.` and `..`.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let bytes: usize = names.iter().map(|e| e.file_name().len()).sum::<usize>() + 3;
    let expected = format!("{} entries, {bytes} name bytes\n", names.len() + 2);
    assert_eq!(text(ctx.stdout()), expected);
}

#[test]
fn a_symlink_swapped_during_opens_never_leads_outside() {
    let (_root, sandbox, _outside, _ro) = layout();
    std::fs::create_dir(sandbox.join("inside")).unwrap();
    std::fs::write(sandbox.join("inside/secret"), "inside").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, sandbox) = (stop.clone(), sandbox.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for target in ["inside", "../outside"] {
                    let tmp = sandbox.join("swap.tmp");
                    std::os::unix::fs::symlink(target, &tmp).unwrap();
                    std::fs::rename(&tmp, sandbox.join("swap")).unwrap();
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let rounds = 3000;
    let (result, ctx) = run("race", &[&rounds.to_string()], |b| {
        b.preopened_dir(&sandbox, ".", DirPerms::ReadOnly).unwrap();
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    result.unwrap();
    let out = text(ctx.stdout());
    let counts: Vec<u32> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [inside, outside, refused] = counts[..] else {
        panic!("{out}")
    };
    assert_eq!(outside, 0, "{out}");
    assert_eq!(inside + refused, rounds, "{out}");
    assert!(
        swaps > 10,
        "the link was swapped while the guest ran ({swaps} times)"
    );
}

/// A store with an empty WASI context, and the `_start` of `module` instantiated in it.
fn wat_start(engine: &Engine, module: &Module) -> (Store<WasiCtx>, ephem::TypedFunc<(), ()>) {
    let mut linker = Linker::new(engine);
    ephem_wasi::add_to_linker(&mut linker, |c: &mut WasiCtx| c).unwrap();
    let mut store = Store::new(engine, WasiCtx::builder().build());
    let instance = linker.instantiate(&mut store, module).unwrap();
    let start = instance
        .get_typed_func::<(), ()>(&mut store, "_start")
        .unwrap();
    (store, start)
}

#[test]
fn a_guest_without_memory_cannot_call_wasi_but_the_host_survives() {
    let engine = Engine::default();
    let module = ephem::Module::new(
        &engine,
        br#"(module
              (import "wasi_snapshot_preview1" "sched_yield" (func $y (result i32)))
              (func (export "_start") (drop (call $y))))"#,
    )
    .unwrap();
    let (mut store, start) = wat_start(&engine, &module);
    let error = start.call(&mut store, ()).unwrap_err();
    assert!(
        error
            .trap()
            .unwrap()
            .downcast_ref::<ephem_wasi::NoMemory>()
            .is_some(),
        "{error}"
    );
}

#[test]
fn every_preview1_function_is_linked_with_its_type() {
    // The whole interface, as wasi-libc's api.h declares it: a module importing all of it
    // links (a missing name or a wrong type would be a link error).
    let imports = [
        ("args_get", "i32 i32", "i32"),
        ("args_sizes_get", "i32 i32", "i32"),
        ("environ_get", "i32 i32", "i32"),
        ("environ_sizes_get", "i32 i32", "i32"),
        ("clock_res_get", "i32 i32", "i32"),
        ("clock_time_get", "i32 i64 i32", "i32"),
        ("fd_advise", "i32 i64 i64 i32", "i32"),
        ("fd_allocate", "i32 i64 i64", "i32"),
        ("fd_close", "i32", "i32"),
        ("fd_datasync", "i32", "i32"),
        ("fd_fdstat_get", "i32 i32", "i32"),
        ("fd_fdstat_set_flags", "i32 i32", "i32"),
        ("fd_fdstat_set_rights", "i32 i64 i64", "i32"),
        ("fd_filestat_get", "i32 i32", "i32"),
        ("fd_filestat_set_size", "i32 i64", "i32"),
        ("fd_filestat_set_times", "i32 i64 i64 i32", "i32"),
        ("fd_pread", "i32 i32 i32 i64 i32", "i32"),
        ("fd_prestat_get", "i32 i32", "i32"),
        ("fd_prestat_dir_name", "i32 i32 i32", "i32"),
        ("fd_pwrite", "i32 i32 i32 i64 i32", "i32"),
        ("fd_read", "i32 i32 i32 i32", "i32"),
        ("fd_readdir", "i32 i32 i32 i64 i32", "i32"),
        ("fd_renumber", "i32 i32", "i32"),
        ("fd_seek", "i32 i64 i32 i32", "i32"),
        ("fd_sync", "i32", "i32"),
        ("fd_tell", "i32 i32", "i32"),
        ("fd_write", "i32 i32 i32 i32", "i32"),
        ("path_create_directory", "i32 i32 i32", "i32"),
        ("path_filestat_get", "i32 i32 i32 i32 i32", "i32"),
        (
            "path_filestat_set_times",
            "i32 i32 i32 i32 i64 i64 i32",
            "i32",
        ),
        ("path_link", "i32 i32 i32 i32 i32 i32 i32", "i32"),
        ("path_open", "i32 i32 i32 i32 i32 i64 i64 i32 i32", "i32"),
        ("path_readlink", "i32 i32 i32 i32 i32 i32", "i32"),
        ("path_remove_directory", "i32 i32 i32", "i32"),
        ("path_rename", "i32 i32 i32 i32 i32 i32", "i32"),
        ("path_symlink", "i32 i32 i32 i32 i32", "i32"),
        ("path_unlink_file", "i32 i32 i32", "i32"),
        ("poll_oneoff", "i32 i32 i32 i32", "i32"),
        ("proc_exit", "i32", ""),
        ("proc_raise", "i32", "i32"),
        ("sched_yield", "", "i32"),
        ("random_get", "i32 i32", "i32"),
        ("sock_accept", "i32 i32 i32", "i32"),
        ("sock_recv", "i32 i32 i32 i32 i32 i32", "i32"),
        ("sock_send", "i32 i32 i32 i32 i32", "i32"),
        ("sock_shutdown", "i32 i32", "i32"),
    ];
    let wat: String = imports
        .iter()
        .map(|(name, params, results)| {
            let results = if results.is_empty() {
                String::new()
            } else {
                format!("(result {results})")
            };
            format!(
                r#"(import "wasi_snapshot_preview1" "{name}" (func (param {params}) {results}))"#
            )
        })
        .collect();
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, format!("(module {wat})").as_bytes()).unwrap();
    let mut linker = Linker::new(&engine);
    ephem_wasi::add_to_linker(&mut linker, |c: &mut WasiCtx| c).unwrap();
    let mut store = Store::new(&engine, WasiCtx::builder().build());
    linker.instantiate(&mut store, &module).unwrap();
}

/// A guest asleep in `poll_oneoff` on a clock is woken when its store's deadline passes (the
/// interrupt signal cuts the host's sleep short) and stopped as the call returns, instead of
/// holding its thread for the whole sleep.
#[test]
fn a_sleeping_guest_is_stopped_at_its_deadline() {
    let engine = Engine::default();
    // One relative clock subscription of 30 s at 0, the event at 64, the count at 128.
    let module = ephem::Module::new(
        &engine,
        br#"(module
              (import "wasi_snapshot_preview1" "poll_oneoff"
                (func $poll (param i32 i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (func (export "_start")
                (i64.store (i32.const 24) (i64.const 30000000000))
                (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))))"#,
    )
    .unwrap();
    let (mut store, start) = wat_start(&engine, &module);
    let ticker = engine.start_epoch_ticker(std::time::Duration::from_millis(10));
    store.set_epoch_deadline(5);
    let started = std::time::Instant::now();
    let error = start.call(&mut store, ()).unwrap_err();
    let took = started.elapsed();
    drop(ticker);
    assert_eq!(
        error.trap().unwrap().kind,
        ephem::TrapKind::Interrupted,
        "{error}"
    );
    assert!(took < std::time::Duration::from_secs(5), "slept {took:?}");
}

/// What a WASI function writes into the guest's memory (here `fd_read`'s bytes, across a page
/// boundary and on a page of their own) is marked as written, like the guest's own stores: the
/// next instance in the same memory slot finds only zeros, whether the slot is zeroed in place
/// or reset through the page map.
#[test]
fn what_wasi_functions_write_is_gone_for_the_next_instance() {
    const WAT: &str = r#"(module
      (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
      (memory (export "memory") 4)
      ;; Reads stdin into 64 bytes at `at` (an iovec at 0, the count at 8).
      (func (export "read") (param $at i32) (result i32)
        (i32.store (i32.const 0) (local.get $at))
        (i32.store (i32.const 4) (i32.const 64))
        (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      ;; The OR of every word of the memory.
      (func (export "or_all") (result i64) (local $at i32) (local $acc i64)
        (loop $l
          (local.set $acc (i64.or (local.get $acc) (i64.load (local.get $at))))
          (local.set $at (i32.add (local.get $at) (i32.const 8)))
          (br_if $l (i32.lt_u (local.get $at) (i32.const 262144))))
        (local.get $acc)))"#;
    for keep_resident in [0, 1 << 20] {
        let engine = Engine::with_config(ephem::EngineConfig {
            memory: ephem::MemoryConfig {
                max_idle_slots: 1,
                keep_resident,
                ..ephem::MemoryConfig::default()
            },
            ..ephem::EngineConfig::default()
        })
        .unwrap();
        let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
        let mut linker = Linker::new(&engine);
        ephem_wasi::add_to_linker(&mut linker, |c: &mut WasiCtx| c).unwrap();
        for at in [4096 - 7, 3 * 65536 + 100, 65536 - 1] {
            let mut b = WasiCtx::builder();
            b.stdin(ephem_wasi::Input::Bytes(
                b"secret bytes from stdin".as_slice().into(),
            ));
            let mut store = Store::new(&engine, b.build());
            let instance = linker.instantiate(&mut store, &module).unwrap();
            let read = instance
                .get_typed_func::<i32, i32>(&mut store, "read")
                .unwrap();
            assert_eq!(read.call(&mut store, at).unwrap(), 0, "fd_read's errno");
            let memory = instance.get_memory(&mut store, "memory").unwrap();
            let at = at as usize;
            assert_eq!(&memory.data(&store)[at..at + 6], b"secret");
            drop(store);

            let mut store = Store::new(&engine, WasiCtx::builder().build());
            let instance = linker.instantiate(&mut store, &module).unwrap();
            let or_all = instance
                .get_typed_func::<(), i64>(&mut store, "or_all")
                .unwrap();
            assert_eq!(
                or_all.call(&mut store, ()).unwrap(),
                0,
                "bytes read at {at} left behind ({keep_resident})"
            );
        }
    }
}

/// A C++ program built for WebAssembly's exception handling (`guests/exceptions.cpp`, built by
/// `guests/build-exceptions.sh`): exceptions caught one and ten frames up, destructors run
/// while unwinding, a rethrow. Its output is what the wasmtime CLI (49.0.3, `-W exceptions=y`)
/// printed for the standard form (`exceptions.wasm`); the legacy form clang emits by default
/// (`exceptions-legacy.wasm`: `try`, `catch`, `delegate`, `rethrow`), which wasmtime refuses,
/// must print the same. One that nothing catches ends the run with the exception, after what
/// it printed.
#[test]
fn a_cpp_program_throws_and_catches_as_wasmtime_runs_it_in_both_forms() {
    let expected = std::fs::read(guest("exceptions").with_extension("stdout.expected")).unwrap();
    for name in ["exceptions", "exceptions-legacy"] {
        let (result, ctx) = run(name, &[], |_| {});
        result.unwrap();
        assert_eq!(text(ctx.stdout()), text(&expected), "{name}");

        let (result, ctx) = run(name, &["uncaught"], |_| {});
        let error = result.unwrap_err();
        assert!(matches!(error, Error::Exception(_)), "{name}: {error}");
        assert_eq!(text(ctx.stdout()), text(&expected), "{name}");
    }
}

/// A guest whose memory is shared (as a `wasi-threads` program's is) reads standard input and
/// random bytes into it and writes them out of it: the host copies them in and out, never
/// borrowing bytes other threads may write.
#[test]
fn reads_and_writes_reach_a_shared_memory() {
    let engine = Engine::default();
    let module = ephem::Module::new(
        &engine,
        br#"(module
              (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
              (memory (export "memory") 1 1 shared)
              (func (export "_start")
                ;; Standard input into [100, 164), its length at 8.
                (i32.store (i32.const 0) (i32.const 100))
                (i32.store (i32.const 4) (i32.const 64))
                (if (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))
                  (then unreachable))
                ;; 32 random bytes right after what was read.
                (if (call $random (i32.add (i32.const 100) (i32.load (i32.const 8))) (i32.const 32))
                  (then unreachable))
                ;; Both out to standard output.
                (i32.store (i32.const 16) (i32.const 100))
                (i32.store (i32.const 20) (i32.add (i32.load (i32.const 8)) (i32.const 32)))
                (if (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))
                  (then unreachable))))"#,
    )
    .unwrap();
    let mut b = WasiCtx::builder();
    b.stdin(ephem_wasi::Input::Bytes(
        b"through a shared memory".as_slice().into(),
    ))
    .stdout(Output::Capture(1 << 10));
    let (result, ctx) = run_ctx(&engine, &module, b.build());
    result.unwrap();
    let (text_part, random) = ctx.stdout().split_at(23);
    assert_eq!(text_part, b"through a shared memory");
    assert_eq!(random.len(), 32);
    assert!(random.iter().any(|&b| b != 0), "{random:?}");
}
