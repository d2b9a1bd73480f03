//! Code compiled with bounds checks (the default) and the loose memories it
//! allows: a slot keeps the pages its memory grew into, so every access past a memory's length
//! must be caught by the comparison alone, and code without checks must never be handed a
//! memory with pages accessible past its length.

use ephem::{
    Compiler, Engine, EngineConfig, Instance, MemoryConfig, Module, Store, TrapKind, WasmParams,
    WasmResults,
};

/// An engine whose pool keeps one idle memory slot, so that each new memory takes the slot the
/// last one gave back.
pub(crate) fn one_slot_engine() -> Engine {
    Engine::with_config(EngineConfig {
        memory: MemoryConfig {
            max_idle_slots: 1,
            ..MemoryConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A compiler of code without checks.
fn unchecked() -> Compiler {
    Compiler::new().unwrap().without_bounds_checks()
}

/// Every kind of memory access: its name, the bytes it reaches, and the body of a function
/// `(param i32)` that makes it at that address.
fn accesses() -> Vec<(&'static str, u32, String)> {
    let load = |ty: &str, op: &str| format!("(drop ({ty}.{op} (local.get 0)))");
    let store = |ty: &str, op: &str, value: &str| format!("({ty}.{op} (local.get 0) ({value}))");
    let v = "v128.const i64x2 0 0";
    let mut all = vec![
        ("i32.load", 4, load("i32", "load")),
        ("i64.load", 8, load("i64", "load")),
        ("f32.load", 4, load("f32", "load")),
        ("f64.load", 8, load("f64", "load")),
        ("i32.load8_u", 1, load("i32", "load8_u")),
        ("i32.load16_s", 2, load("i32", "load16_s")),
        ("i64.load8_s", 1, load("i64", "load8_s")),
        ("i64.load16_u", 2, load("i64", "load16_u")),
        ("i64.load32_s", 4, load("i64", "load32_s")),
        ("i64.load32_u", 4, load("i64", "load32_u")),
        ("i32.store", 4, store("i32", "store", "i32.const 1")),
        ("i64.store", 8, store("i64", "store", "i64.const 1")),
        ("f32.store", 4, store("f32", "store", "f32.const 1")),
        ("f64.store", 8, store("f64", "store", "f64.const 1")),
        ("i32.store8", 1, store("i32", "store8", "i32.const 1")),
        ("i32.store16", 2, store("i32", "store16", "i32.const 1")),
        ("i64.store8", 1, store("i64", "store8", "i64.const 1")),
        ("i64.store16", 2, store("i64", "store16", "i64.const 1")),
        ("i64.store32", 4, store("i64", "store32", "i64.const 1")),
        ("v128.load", 16, load("v128", "load")),
        ("v128.load8x8_s", 8, load("v128", "load8x8_s")),
        ("v128.load32x2_u", 8, load("v128", "load32x2_u")),
        ("v128.load8_splat", 1, load("v128", "load8_splat")),
        ("v128.load16_splat", 2, load("v128", "load16_splat")),
        ("v128.load32_splat", 4, load("v128", "load32_splat")),
        ("v128.load64_splat", 8, load("v128", "load64_splat")),
        ("v128.load32_zero", 4, load("v128", "load32_zero")),
        ("v128.load64_zero", 8, load("v128", "load64_zero")),
        ("v128.store", 16, store("v128", "store", v)),
    ];
    for (bits, bytes) in [(8, 1u32), (16, 2), (32, 4), (64, 8)] {
        all.push((
            [
                "v128.load8_lane",
                "v128.load16_lane",
                "v128.load32_lane",
                "v128.load64_lane",
            ][bytes.trailing_zeros() as usize],
            bytes,
            format!("(drop (v128.load{bits}_lane 0 (local.get 0) ({v})))"),
        ));
        all.push((
            [
                "v128.store8_lane",
                "v128.store16_lane",
                "v128.store32_lane",
                "v128.store64_lane",
            ][bytes.trailing_zeros() as usize],
            bytes,
            format!("(v128.store{bits}_lane 0 (local.get 0) ({v}))"),
        ));
    }
    all
}

/// A module with a one-page memory that may grow to three, a function per access kind,
/// `grow`, and `poke`, which stores a byte.
fn module_text() -> String {
    let mut wat = String::from(
        r#"(module (memory (export "mem") 1 3)
        (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
        (func (export "poke") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
        (func (export "peek") (param i32) (result i32) (i32.load8_u (local.get 0)))
        (func (export "two_loads") (param i32) (result i64)
            (i64.add (i64.load (local.get 0)) (i64.load offset=8 (local.get 0))))
        (func (export "two_pointers") (param i32 i32) (result i64)
            (i64.add (i64.load (local.get 0)) (i64.load (local.get 1))))
        (func (export "store_then_load") (param i32) (result i64)
            (i64.store (local.get 0) (i64.const 7))
            (i64.load offset=8 (local.get 0)))
        (func $grow_one (drop (memory.grow (i32.const 1))))
        (func (export "load_grow_load") (param i32) (result i32)
            (drop (i32.load (local.get 0)))
            (drop (memory.grow (i32.const 1)))
            (i32.load offset=65536 (local.get 0)))
        (func (export "load_call_load") (param i32) (result i32)
            (drop (i32.load (local.get 0)))
            (call $grow_one)
            (i32.load offset=65536 (local.get 0)))
        (func (export "load_divide_load") (param i32 i32) (result i32)
            (i32.add (i32.div_u (i32.load (local.get 0)) (local.get 1))
                (i32.load offset=4 (local.get 0))))"#,
    );
    for (name, _, body) in accesses() {
        wat.push_str(&format!("\n(func (export \"{name}\") (param i32) {body})"));
    }
    wat.push(')');
    wat
}

/// Calls export `name` of `instance`, of type `(param P) (result R)`.
fn call<P: WasmParams, R: WasmResults>(
    store: &mut Store<()>,
    instance: &Instance,
    name: &str,
    params: P,
) -> Result<R, ephem::Error> {
    let func = instance.get_typed_func::<P, R>(&mut *store, name)?;
    func.call(store, params)
}

/// Grows a memory of `module` to three pages and writes into the grown pages, so that the
/// slot it gives back has them accessible (and, before its reset, not zero).
fn leave_the_slot_grown(engine: &Engine, module: &Module) {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    assert_eq!(
        call::<i32, i32>(&mut store, &instance, "grow", 2).unwrap(),
        1
    );
    for at in [65536, 2 * 65536 + 100, 3 * 65536 - 1] {
        call::<(i32, i32), ()>(&mut store, &instance, "poke", (at, 0x5e)).unwrap();
    }
}

/// Access `name` of `bytes` bytes runs where it ends at the end of a one-page memory, and traps
/// out of bounds at three addresses past it.
fn traps_exactly_past_one_page(store: &mut Store<()>, instance: &Instance, name: &str, bytes: u32) {
    let last = 65536 - bytes as i32;
    call::<i32, ()>(store, instance, name, last)
        .unwrap_or_else(|e| panic!("{name} at {last}: {e}"));
    for at in [last + 1, 65536, 2 * 65536] {
        let e = call::<i32, ()>(store, instance, name, at)
            .expect_err(&format!("{name} at {at} must trap"));
        assert_eq!(
            e.trap().map(|t| t.kind),
            Some(TrapKind::MemoryOutOfBounds),
            "{name} at {at}: {e}"
        );
    }
}

/// In a slot whose pages past the memory's length are accessible, every access kind still
/// traps exactly when it ends past the length, and pages grown into again read as zeros.
#[test]
fn checked_accesses_past_the_length_trap_in_a_slot_left_grown() {
    let engine = one_slot_engine();
    let module = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    for (name, bytes, _) in accesses() {
        leave_the_slot_grown(&engine, &module);
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        traps_exactly_past_one_page(&mut store, &instance, name, bytes);
        assert_eq!(
            call::<i32, i32>(&mut store, &instance, "grow", 2).unwrap(),
            1
        );
        for at in [65536, 2 * 65536 + 100, 3 * 65536 - 1] {
            assert_eq!(
                call::<i32, i32>(&mut store, &instance, "peek", at).unwrap(),
                0,
                "byte {at} of the last memory in the slot"
            );
        }
    }
}

/// A memory that checked code made, in a slot left grown, is imported by code without checks:
/// its pages past its length become inaccessible first, so that code's access there traps.
#[test]
fn a_loose_memory_is_tightened_for_code_without_checks() {
    let engine = one_slot_engine();
    let module = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    let importer = ephem::compile_with(
        &unchecked(),
        &engine,
        br#"(module (import "env" "mem" (memory 1))
            (func (export "peek") (param i32) (result i32) (i32.load8_u (local.get 0))))"#,
    )
    .unwrap();
    leave_the_slot_grown(&engine, &module);
    let mut store = Store::new(&engine, ());
    let exporter = Instance::new(&mut store, &module, &[]).unwrap();
    let memory = exporter.get_memory(&mut store, "mem").unwrap();
    let plain = Instance::new(&mut store, &importer, &[memory.into()]).unwrap();
    let peek = |store: &mut Store<()>, at| call::<i32, i32>(store, &plain, "peek", at);
    let e = peek(&mut store, 65536).expect_err("must trap");
    assert_eq!(e.trap().map(|t| t.kind), Some(TrapKind::MemoryOutOfBounds));
    // Both still work within the length, and growth opens the page for both.
    assert_eq!(peek(&mut store, 65535).unwrap(), 0);
    assert_eq!(
        call::<i32, i32>(&mut store, &exporter, "grow", 1).unwrap(),
        1
    );
    assert_eq!(peek(&mut store, 65536).unwrap(), 0);
}

/// Code without checks that takes a slot a loose memory left grown finds exactly its own
/// pages accessible.
#[test]
fn a_slot_left_grown_is_shrunk_for_code_without_checks() {
    let engine = one_slot_engine();
    let module = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    let plain = ephem::compile_with(&unchecked(), &engine, module_text().as_bytes()).unwrap();
    leave_the_slot_grown(&engine, &module);
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &plain, &[]).unwrap();
    assert_eq!(
        call::<i32, i32>(&mut store, &instance, "peek", 65535).unwrap(),
        0
    );
    let e = call::<i32, i32>(&mut store, &instance, "peek", 65536).expect_err("must trap");
    assert_eq!(e.trap().map(|t| t.kind), Some(TrapKind::MemoryOutOfBounds));
}

/// A module that never grows its memory leaves its accesses unchecked (faults bound them), so
/// its memory must be tight even in a slot a growing module left grown: every access kind
/// traps exactly past the length, by a fault; and the host may still grow it, which opens the
/// page for that code and no further.
#[test]
fn a_memory_its_module_never_grows_is_bounded_by_faults_in_a_slot_left_grown() {
    let engine = one_slot_engine();
    let grower = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    let mut wat = String::from(r#"(module (memory (export "mem") 1 3)"#);
    for (name, _, body) in accesses() {
        wat.push_str(&format!("\n(func (export \"{name}\") (param i32) {body})"));
    }
    wat.push(')');
    let fixed = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
    assert!(!fixed.artifact().info().checks_memory(0));
    assert!(grower.artifact().info().checks_memory(0));
    for (name, bytes, _) in accesses() {
        leave_the_slot_grown(&engine, &grower);
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &fixed, &[]).unwrap();
        let signals = ephem::trap_signals();
        traps_exactly_past_one_page(&mut store, &instance, name, bytes);
        assert_eq!(ephem::trap_signals(), signals + 3, "{name}: faults trapped");
        let memory = instance.get_memory(&mut store, "mem").unwrap();
        assert_eq!(memory.grow(&mut store, 1).unwrap(), 1);
        call::<i32, ()>(&mut store, &instance, name, 2 * 65536 - bytes as i32)
            .unwrap_or_else(|e| panic!("{name} in the grown page: {e}"));
        let e = call::<i32, ()>(&mut store, &instance, name, 2 * 65536).unwrap_err();
        assert_eq!(e.trap().map(|t| t.kind), Some(TrapKind::MemoryOutOfBounds));
    }
}

/// A check or a mark holds in the blocks its block dominates, never in others, and a check is
/// never widened for an access in another block: an arm's access past a dominating check is
/// checked on its own, the other arm's is not made to trap, and a store after an `if` marks
/// its page though the arm that marked it did not run.
#[test]
fn checks_and_marks_carry_into_dominated_blocks_only() {
    let engine = one_slot_engine();
    let wat = r#"(module (memory (export "mem") 1 3)
        (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
        (func (export "poke") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
        (func (export "peek") (param i32) (result i32) (i32.load8_u (local.get 0)))
        (func (export "arm") (param $p i32) (param $c i32) (result i32)
          (drop (i32.load (local.get $p)))
          (if (result i32) (local.get $c)
            (then (i32.load offset=4 (local.get $p)))
            (else (i32.load (local.get $p)))))
        (func (export "store_after_if") (param $p i32) (param $c i32)
          (if (local.get $c) (then (i32.store (local.get $p) (i32.const 1))))
          (i32.store (local.get $p) (i32.const 2))))"#;
    let module = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
    leave_the_slot_grown(&engine, &module);
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    let last = 65536 - 4;
    assert_eq!(
        call::<(i32, i32), i32>(&mut store, &instance, "arm", (last, 0)).unwrap(),
        0
    );
    let e = call::<(i32, i32), i32>(&mut store, &instance, "arm", (last, 1)).unwrap_err();
    assert_eq!(e.trap().map(|t| t.kind), Some(TrapKind::MemoryOutOfBounds));
    call::<(i32, i32), ()>(&mut store, &instance, "store_after_if", (8192, 0)).unwrap();
    assert_eq!(
        call::<i32, i32>(&mut store, &instance, "peek", 8192).unwrap(),
        2
    );
    drop(store);
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    assert_eq!(
        call::<i32, i32>(&mut store, &instance, "peek", 8192).unwrap(),
        0,
        "the store after the if was reset"
    );
}

/// A checked function sees the length that growth gave, by `memory.grow` or in a callee.
#[test]
fn checks_see_growth_within_a_function() {
    let engine = one_slot_engine();
    let module = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    for name in ["load_grow_load", "load_call_load"] {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        // The first load ends at the old length, the second at the new one.
        let last = call::<i32, i32>(&mut store, &instance, name, 65536 - 4);
        assert_eq!(last.unwrap(), 0, "{name}");
    }
}

/// Checks of one block are shared: a passed check covers later accesses it proves, and one
/// with nothing observable since is widened to cover the next. Each case is run in a slot left
/// grown, where a missing check is not caught by a fault.
#[test]
fn shared_checks_trap_where_separate_ones_would() {
    let engine = one_slot_engine();
    let module = ephem::Module::new(&engine, module_text().as_bytes()).unwrap();
    let fresh = || {
        leave_the_slot_grown(&engine, &module);
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        (store, instance)
    };
    let kind = |r: Result<i64, ephem::Error>| r.unwrap_err().trap().map(|t| t.kind);
    let out = Some(TrapKind::MemoryOutOfBounds);

    // Two loads from one pointer: the second ends 16 bytes past it.
    let (mut store, instance) = fresh();
    call::<i32, i64>(&mut store, &instance, "two_loads", 65536 - 16).unwrap();
    for at in [65536 - 15, 65536 - 8] {
        assert_eq!(
            kind(call(&mut store, &instance, "two_loads", at)),
            out,
            "{at}"
        );
    }
    // Two pointers: each is checked.
    for (p, q) in [(0, 65536 - 7), (65536 - 7, 0)] {
        assert_eq!(
            kind(call(&mut store, &instance, "two_pointers", (p, q))),
            out,
            "{p}, {q}"
        );
    }
    // A store, then a load past the length: the store happened before the trap.
    let (mut store, instance) = fresh();
    assert_eq!(
        kind(call(&mut store, &instance, "store_then_load", 65536 - 12)),
        out
    );
    assert_eq!(
        call::<i32, i32>(&mut store, &instance, "peek", 65536 - 12).unwrap(),
        7
    );
    // A division by zero between two loads, the second past the length: the division traps.
    let (mut store, instance) = fresh();
    let e = call::<(i32, i32), i32>(&mut store, &instance, "load_divide_load", (65536 - 4, 0))
        .unwrap_err();
    assert_eq!(
        e.trap().map(|t| t.kind),
        Some(TrapKind::IntegerDivisionByZero)
    );
    assert_eq!(
        kind(
            call::<(i32, i32), i32>(&mut store, &instance, "load_divide_load", (65536 - 4, 1))
                .map(i64::from)
        ),
        out
    );
}

/// A function keeps a memory's length in a register across calls of functions that cannot grow
/// a memory (see the compiler's `growth`), and reads it again after any call that can: one
/// that grows it two direct calls down, through a tail call, or by a host function. Run in a
/// slot left grown, where only the comparison catches an access past the length.
#[test]
fn lengths_are_read_again_after_calls_that_may_grow_and_kept_across_the_others() {
    let engine = one_slot_engine();
    let wat = r#"(module
        (import "host" "grow" (func $host_grow))
        (memory (export "mem") 1 3)
        (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
        (func $grow_one (drop (memory.grow (i32.const 1))))
        (func $middle (call $grow_one))
        (func $tail (return_call $middle))
        (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
        (func (export "poke") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
        ;; Bytes at..at+n-1, a call of $leaf before each.
        (func (export "loop_calling_leaf") (param $at i32) (param $n i32) (result i32)
          (local $i i32) (local $sum i32)
          (loop $l
            (local.set $sum (call $leaf (local.get $sum)))
            (local.set $sum (i32.add (local.get $sum)
              (i32.load8_u (i32.add (local.get $at) (local.get $i)))))
            (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
              (local.get $n))))
          (local.get $sum))
        ;; Each iteration reads the byte at at + i, then grows the memory by a page (a call
        ;; two calls down): the length read before the loop would be stale after the first.
        (func (export "loop_growing") (param $at i32) (param $n i32) (result i32)
          (local $i i32) (local $sum i32)
          (loop $l
            (local.set $sum (i32.add (local.get $sum)
              (i32.load8_u (i32.add (local.get $at) (i32.mul (local.get $i) (i32.const 65536))))))
            (call $middle)
            (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
              (local.get $n))))
          (local.get $sum))
        ;; An inner loop that cannot grow, in an outer one that grows between its runs: the
        ;; inner loop's length is read again before each run.
        (func (export "inner_after_growth") (param $at i32) (result i32)
          (local $round i32) (local $i i32) (local $sum i32)
          (loop $outer
            (local.set $i (i32.const 0))
            (loop $inner
              (local.set $sum (i32.add (local.get $sum) (i32.load8_u
                (i32.add (i32.add (local.get $at) (i32.mul (local.get $round) (i32.const 65536)))
                  (local.get $i)))))
              (br_if $inner (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                (i32.const 4))))
            (call $grow_one)
            (br_if $outer (i32.lt_u (local.tee $round (i32.add (local.get $round) (i32.const 1)))
              (i32.const 2))))
          (local.get $sum))
        (func (export "deep") (param i32) (result i32)
          (drop (i32.load (local.get 0))) (call $middle) (i32.load offset=65536 (local.get 0)))
        (func (export "tail") (param i32) (result i32)
          (drop (i32.load (local.get 0))) (call $tail) (i32.load offset=65536 (local.get 0)))
        (func (export "host") (param i32) (result i32)
          (drop (i32.load (local.get 0))) (call $host_grow)
          (i32.load offset=65536 (local.get 0))))"#;
    let module = Module::new(&engine, wat).unwrap();
    let host_grow = |store: &mut Store<()>| {
        ephem::Func::wrap(store, |mut caller: ephem::Caller<'_, ()>| {
            let Some(ephem::Extern::Memory(m)) = caller.get_export("mem") else {
                panic!("the memory is exported");
            };
            m.grow(&mut caller, 1).unwrap();
        })
    };
    let fresh = || {
        let mut store = Store::new(&engine, ());
        let grow = host_grow(&mut store);
        let instance = Instance::new(&mut store, &module, &[grow.into()]).unwrap();
        // Leave the slot grown: three pages written, then given back at one.
        call::<i32, i32>(&mut store, &instance, "grow", 2).unwrap();
        for at in [65536, 3 * 65536 - 1] {
            call::<(i32, i32), ()>(&mut store, &instance, "poke", (at, 0x5e)).unwrap();
        }
        drop(store);
        let mut store = Store::new(&engine, ());
        let grow = host_grow(&mut store);
        let instance = Instance::new(&mut store, &module, &[grow.into()]).unwrap();
        (store, instance)
    };
    // Growth below the call, however deep, is seen: the second load ends in the new page.
    for name in ["deep", "tail", "host"] {
        let (mut store, instance) = fresh();
        let last = call::<i32, i32>(&mut store, &instance, name, 65536 - 4);
        assert_eq!(last.unwrap(), 0, "{name}");
    }
    // A loop that grows sees each page it grew into, and traps one byte past the last.
    // (The memory's maximum is three pages: the fourth iteration reads past them.)
    for (at, n, ok) in [
        (65535, 2, true),
        (65535, 3, true),
        (65535, 4, false),
        (65536, 1, false),
    ] {
        let (mut store, instance) = fresh();
        let r = call::<(i32, i32), i32>(&mut store, &instance, "loop_growing", (at, n));
        assert_eq!(r.is_ok(), ok, "{at} {n}: {r:?}");
    }
    // The inner loop's second run reads the page the outer loop grew (at + 65536 + i), past
    // the length before it; its first run traps at its last iteration when at is 65536 - 3,
    // and at its first when at is 65536.
    for (at, ok) in [(65536 - 4, true), (65536 - 3, false), (65536, false)] {
        let (mut store, instance) = fresh();
        let r = call::<i32, i32>(&mut store, &instance, "inner_after_growth", at);
        assert_eq!(r.is_ok(), ok, "{at}: {r:?}");
    }
    // Across calls that cannot grow, the kept length still bounds every iteration: the last
    // byte of the memory at the last iteration, one past it at the last and at the first.
    let kind = |r: Result<i32, ephem::Error>| r.unwrap_err().trap().map(|t| t.kind);
    let out = Some(TrapKind::MemoryOutOfBounds);
    let (mut store, instance) = fresh();
    let sum = call::<(i32, i32), i32>(&mut store, &instance, "loop_calling_leaf", (65536 - 8, 8));
    assert_eq!(sum.unwrap(), 8);
    for (at, n) in [(65536 - 7, 8), (65536, 8), (65536, 1)] {
        let r = call::<(i32, i32), i32>(&mut store, &instance, "loop_calling_leaf", (at, n));
        assert_eq!(kind(r), out, "{at} {n}");
    }
}
