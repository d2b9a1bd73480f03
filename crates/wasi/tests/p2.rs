//! WASI 0.2's host functions (`ephem_wasi::p2`) under components that use them as no program
//! should: imported at another type than WASI's, making pollables or HTTP fields without end,
//! asking for more bytes than a call gives. Each gets an error of the call, never a host that panics or grows.

use ephem::component::{Component, Linker, Val};
use ephem::{Engine, Store};
use ephem_wasi::WasiCtx;

fn run(text: &str, args: &[Val]) -> Result<(), ephem::component::Error> {
    let engine = Engine::default();
    let component = Component::new(&engine, text)?;
    let mut linker = Linker::<WasiCtx>::new(&engine);
    ephem_wasi::p2::add_to_linker(&mut linker, |c| c)?;
    ephem_wasi::p2::http::add_to_linker(&mut linker, |c| c)?;
    let mut store = Store::new(&engine, WasiCtx::builder().build());
    let instance = linker.instantiate(&mut store, &component)?;
    let run = instance
        .get_func(&mut store, "run")
        .expect("an export `run`");
    run.call(&mut store, args, &mut [])
}

#[test]
fn a_wasi_function_imported_at_another_type_is_an_error_of_the_call() {
    // `exit` without its parameter.
    let err = run(
        r#"(component
            (import "wasi:cli/exit@0.2.3" (instance $e (export "exit" (func))))
            (core func $exit (canon lower (func $e "exit")))
            (core module $m (import "" "exit" (func $exit)) (func (export "run") (call $exit)))
            (core instance $i (instantiate $m (with "" (instance (export "exit" (func $exit))))))
            (func (export "run") (canon lift (core func $i "run"))))"#,
        &[],
    )
    .unwrap_err();
    assert!(format!("{err:?}").contains("parameter 0"), "{err:?}");
    // `get-random-u64` without its result.
    let err = run(
        r#"(component
            (import "wasi:random/random@0.2.3" (instance $r (export "get-random-u64" (func))))
            (core func $f (canon lower (func $r "get-random-u64")))
            (core module $m (import "" "f" (func $f)) (func (export "run") (call $f)))
            (core instance $i (instantiate $m (with "" (instance (export "f" (func $f))))))
            (func (export "run") (canon lift (core func $i "run"))))"#,
        &[],
    )
    .unwrap_err();
    assert!(format!("{err:?}").contains("result"), "{err:?}");
}

#[test]
fn more_random_bytes_than_a_call_gives_is_an_error_not_fewer() {
    let text = r#"(component
        (import "wasi:random/random@0.2.0" (instance $r
          (export "get-random-bytes" (func (param "len" u64) (result (list u8))))))
        (core module $libc
          (memory (export "memory") 40)
          (global $next (mut i32) (i32.const 1024))
          (func (export "realloc") (param i32 i32 i32 i32) (result i32)
            (local $p i32)
            (local.set $p (global.get $next))
            (global.set $next (i32.add (local.get $p) (local.get 3)))
            (local.get $p)))
        (core instance $libc (instantiate $libc))
        (core func $f (canon lower (func $r "get-random-bytes")
          (memory (core memory $libc "memory")) (realloc (core func $libc "realloc"))))
        (core module $m
          (import "" "f" (func $f (param i64 i32)))
          (func (export "run") (param i64) (call $f (local.get 0) (i32.const 16))))
        (core instance $i (instantiate $m (with "" (instance (export "f" (func $f))))))
        (func (export "run") (param "n" u64) (canon lift (core func $i "run"))))"#;
    run(text, &[Val::U64(1 << 20)]).expect("a mebibyte is given");
    let err = run(text, &[Val::U64((1 << 20) + 1)]).unwrap_err();
    assert!(format!("{err:?}").contains("at most"), "{err:?}");
}

#[test]
fn pollables_made_and_dropped_without_end_take_no_more_room() {
    // 200 000 pollables, each dropped: more than a context holds at once, so the slots must be
    // reused for this to pass.
    let text = r#"(component $C
      (import "wasi:io/poll@0.2.0" (instance $poll (export "pollable" (type (sub resource)))))
      (alias export $poll "pollable" (type $pollable))
      (import "wasi:clocks/monotonic-clock@0.2.0" (instance $clock
        (alias outer $C $pollable (type $p))
        (export "subscribe-duration" (func (param "when" u64) (result (own $p))))))
      (core func $sub (canon lower (func $clock "subscribe-duration")))
      (core func $drop (canon resource.drop $pollable))
      (core module $m
        (import "" "sub" (func $sub (param i64) (result i32)))
        (import "" "drop" (func $drop (param i32)))
        (func (export "run") (param $n i32) (param $keep i32)
          (local $h i32)
          (loop $l
            (local.set $h (call $sub (i64.const 0)))
            (if (i32.eqz (local.get $keep)) (then (call $drop (local.get $h))))
            (local.set $n (i32.sub (local.get $n) (i32.const 1)))
            (br_if $l (local.get $n)))))
      (core instance $i (instantiate $m (with "" (instance
        (export "sub" (func $sub)) (export "drop" (func $drop))))))
      (func (export "run") (param "n" u32) (param "keep" u32)
        (canon lift (core func $i "run"))))"#;
    run(text, &[Val::U32(200_000), Val::U32(0)]).expect("dropped ones are reused");
    // Kept, they stop at the bound with an error.
    let err = run(text, &[Val::U32(200_000), Val::U32(1)]).unwrap_err();
    assert!(format!("{err:?}").contains("at once"), "{err:?}");
}

#[test]
fn http_fields_made_without_end_stop_at_a_bound() {
    // Fields of 100 KiB each, kept: 1 000 of them would be 100 MB of the host's memory.
    let text = r#"(component $C
      (import "wasi:http/types@0.2.0" (instance $t
        (export "fields" (type $f (sub resource)))
        (type $he (variant (case "invalid-syntax") (case "forbidden") (case "immutable")))
        (export "header-error" (type $e (eq $he)))
        (export "[constructor]fields" (func (result (own $f))))
        (export "[method]fields.append"
          (func (param "self" (borrow $f)) (param "name" string) (param "value" (list u8))
            (result (result (error $e)))))))
      (core module $libc (memory (export "memory") 4)
        (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 0)))
      (core instance $libc (instantiate $libc))
      (core func $new (canon lower (func $t "[constructor]fields")))
      (core func $append (canon lower (func $t "[method]fields.append")
        (memory (core memory $libc "memory"))))
      (core module $m
        (import "" "new" (func $new (result i32)))
        (import "" "append" (func $append (param i32 i32 i32 i32 i32 i32)))
        (import "" "memory" (memory 1))
        (data (memory 0) (i32.const 0) "x-a")
        (func (export "run") (param $n i32)
          (local $f i32)
          (memory.fill (i32.const 1024) (i32.const 97) (i32.const 102400))
          (loop $l
            (local.set $f (call $new))
            ;; The name "x-a" at 0, a value of 100 KiB of 'a's at 1024.
            (call $append (local.get $f) (i32.const 0) (i32.const 3)
              (i32.const 1024) (i32.const 102400) (i32.const 200000))
            (local.set $n (i32.sub (local.get $n) (i32.const 1)))
            (br_if $l (local.get $n)))))
      (core instance $i (instantiate $m (with "" (instance
        (export "new" (func $new)) (export "append" (func $append))
        (export "memory" (memory $libc "memory"))))))
      (func (export "run") (param "n" u32) (canon lift (core func $i "run"))))"#;
    run(text, &[Val::U32(20)]).expect("2 MB of fields are made");
    let err = run(text, &[Val::U32(1000)]).unwrap_err();
    assert!(
        format!("{err:?}").contains("bytes of fields made"),
        "{err:?}"
    );
}

#[test]
fn a_handle_of_another_resource_type_is_refused_where_wasi_wants_a_descriptor() {
    // The component imports `wasi:filesystem`'s `descriptor` as the very type of its pollables,
    // then hands a pollable whose rep is the preopen's descriptor number to `unlink-file-at`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("victim"), "x").unwrap();
    let errors = "\"access\" \"would-block\" \"already\" \"bad-descriptor\" \"busy\" \"deadlock\" \
        \"quota\" \"exist\" \"file-too-large\" \"illegal-byte-sequence\" \"in-progress\" \
        \"interrupted\" \"invalid\" \"io\" \"is-directory\" \"loop\" \"too-many-links\" \
        \"message-size\" \"name-too-long\" \"no-device\" \"no-entry\" \"no-lock\" \
        \"insufficient-memory\" \"insufficient-space\" \"not-directory\" \"not-empty\" \
        \"not-recoverable\" \"unsupported\" \"no-tty\" \"no-such-device\" \"overflow\" \
        \"not-permitted\" \"pipe\" \"read-only\" \"invalid-seek\" \"text-file-busy\" \
        \"cross-device\"";
    let text = format!(
        r#"(component $C
      (import "wasi:io/poll@0.2.0" (instance $poll (export "pollable" (type (sub resource)))))
      (alias export $poll "pollable" (type $pollable))
      (import "wasi:clocks/monotonic-clock@0.2.0" (instance $clock
        (alias outer $C $pollable (type $p))
        (export "subscribe-duration" (func (param "when" u64) (result (own $p))))))
      (import "wasi:filesystem/types@0.2.0" (instance $fs
        (alias outer $C $pollable (type $p))
        (export "descriptor" (type $d (eq $p)))
        (type $e0 (enum {errors}))
        (export "error-code" (type $e (eq $e0)))
        (export "[method]descriptor.unlink-file-at"
          (func (param "self" (borrow $d)) (param "path" string) (result (result (error $e)))))))
      (core module $libc (memory (export "memory") 1)
        (data (i32.const 0) "victim")
        (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 64)))
      (core instance $libc (instantiate $libc))
      (core func $sub (canon lower (func $clock "subscribe-duration")))
      (core func $unlink (canon lower (func $fs "[method]descriptor.unlink-file-at")
        (memory (core memory $libc "memory"))))
      (core module $m
        (import "" "sub" (func $sub (param i64) (result i32)))
        (import "" "unlink" (func $unlink (param i32 i32 i32 i32)))
        (func (export "run") (local $h i32) (local $n i32)
          ;; Pollables with reps 0, 1, 2, 3: the last has the preopen's number.
          (loop $l
            (local.set $h (call $sub (i64.const 0)))
            (local.set $n (i32.add (local.get $n) (i32.const 1)))
            (br_if $l (i32.lt_u (local.get $n) (i32.const 4))))
          (call $unlink (local.get $h) (i32.const 0) (i32.const 6) (i32.const 128))))
      (core instance $i (instantiate $m (with "" (instance
        (export "sub" (func $sub)) (export "unlink" (func $unlink))))))
      (func (export "run") (canon lift (core func $i "run"))))"#
    );
    let engine = Engine::default();
    let component = Component::new(&engine, text).unwrap();
    let mut linker = Linker::<WasiCtx>::new(&engine);
    ephem_wasi::p2::add_to_linker(&mut linker, |c| c).unwrap();
    ephem_wasi::p2::add_filesystem_to_linker(&mut linker, |c| c).unwrap();
    let mut builder = WasiCtx::builder();
    builder
        .preopened_dir(dir.path(), ".", ephem_wasi::DirPerms::ReadWrite)
        .unwrap();
    let mut store = Store::new(&engine, builder.build());
    let instance = linker.instantiate(&mut store, &component).unwrap();
    let run = instance.get_func(&mut store, "run").unwrap();
    let err = run.call(&mut store, &[], &mut []).unwrap_err();
    assert!(format!("{err}").contains("another resource type"), "{err}");
    assert!(
        dir.path().join("victim").exists(),
        "nothing done on the preopen"
    );
}
