//! Write marks set once before a loop for the whole range its index goes through (the
//! compiler's `marks::hoist_from_loops`) instead of at each store: whatever a loop wrote, the
//! next memory in the same slot sees zeros there, at its first iteration's page and its last,
//! through each way the range is marked (one or two pages inline, more through the runtime, a
//! range it cannot trust by reading the memory at its reset), for 32-bit indices compared
//! unsigned or signed, 64-bit ones, and a loop that runs off the end of the memory and traps.

use ephem::{Engine, Instance, Module, Store};

use crate::bounds_checks::one_slot_engine;

/// Loops that store `val` at `j` for `j` from `start` while `j < end` (unsigned or signed),
/// stepping by `step`: top-tested as compilers write `for` loops (`fill_*`), and rotated, the
/// first iteration before any comparison, storing at `j + 1000` (`rotated_*`), as compilers
/// emit them.
fn module(engine: &Engine, index: &str) -> Module {
    let (lt, ge_u, ge_s, memory) = match index {
        "i32" => (
            "i32",
            "i32.ge_u",
            "i32.ge_s",
            "(memory (export \"memory\") 4)",
        ),
        _ => (
            "i64",
            "i64.ge_u",
            "i64.ge_s",
            "(memory (export \"memory\") i64 4)",
        ),
    };
    let rotated = |name: &str, lt_op: &str| {
        format!(
            r#"(func (export "{name}") (param $j {lt}) (param $end {lt}) (param $step {lt}) (param $val i32)
                 (loop $next
                   (i32.store8 offset=3 ({lt}.add (local.get $j) ({lt}.const 1000)) (local.get $val))
                   (local.set $j ({lt}.add (local.get $j) (local.get $step)))
                   (br_if $next ({lt}.{lt_op} (local.get $j) (local.get $end)))))"#
        )
    };
    let fill = |name: &str, ge: &str| {
        format!(
            r#"(func (export "{name}") (param $j {lt}) (param $end {lt}) (param $step {lt}) (param $val i32)
                 (block $done
                   (loop $next
                     (br_if $done ({ge} (local.get $j) (local.get $end)))
                     (i32.store8 offset=3 (local.get $j) (local.get $val))
                     (local.set $j ({lt}.add (local.get $j) (local.get $step)))
                     (br $next))))"#
        )
    };
    let text = format!(
        "(module {memory} {} {} {} {})",
        fill("fill_u", ge_u),
        fill("fill_s", ge_s),
        rotated("rotated_u", "lt_u"),
        rotated("rotated_s", "lt_s"),
    );
    Module::new(engine, text).unwrap()
}

/// The memory's bytes, read by the host.
fn bytes(store: &mut Store<()>, instance: &Instance) -> Vec<u8> {
    let memory = instance.get_memory(&mut *store, "memory").unwrap();
    memory.data(&*store).to_vec()
}

#[test]
fn what_a_loop_wrote_is_reset_however_its_marks_were_set() {
    let page = 65536i64;
    let size = 4 * page;
    // (function, start, end, step, traps): one and two pages inline, four and many pages
    // through the runtime, a range past the memory (the loop traps at its end), a step larger
    // than a page (a range not trusted), signed, and a signed start below zero (not trusted).
    let cases: [(&str, i64, i64, i64, bool); 16] = [
        ("fill_u", 100, 300, 1, false),
        ("fill_u", 4000, 4200, 3, false),
        ("fill_u", 4090, 4090 + 3 * 4096, 13, false),
        ("fill_u", 5, size - 3, 7, false),
        ("fill_u", page - 1, 0x7FFF_0000, 1, true),
        ("fill_u", 17, size - 3, 5000, false),
        ("fill_s", 8191, 3 * page + 9, 4096, false),
        ("fill_s", 12, 12 + 4096 * 9, 4096, false),
        ("fill_s", -5, 100, 1, true),
        ("rotated_u", 5, 300, 1, false),
        ("rotated_u", 8000, 8000 + 2 * 4096, 5, false),
        ("rotated_u", 300, 5, 1, false),
        ("rotated_u", 0, size - 1004, 9000, false),
        ("rotated_u", 2, size - 1004, 4093, false),
        ("rotated_s", 7, 2 * page, 11, false),
        ("rotated_s", 40_000, 5, 1, false),
    ];
    for index in ["i32", "i64"] {
        let engine = one_slot_engine();
        let module = module(&engine, index);
        for (name, start, end, step, traps) in cases {
            let case = format!("{index} {name}({start}, {end}, {step})");
            let mut store = Store::new(&engine, ());
            let instance = Instance::new(&mut store, &module, &[]).unwrap();
            let result = match index {
                "i32" => instance
                    .get_typed_func::<(i32, i32, i32, i32), ()>(&mut store, name)
                    .unwrap()
                    .call(&mut store, (start as i32, end as i32, step as i32, 0xAB)),
                _ => instance
                    .get_typed_func::<(i64, i64, i64, i32), ()>(&mut store, name)
                    .unwrap()
                    .call(&mut store, (start, end, step, 0xAB)),
            };
            assert_eq!(result.is_err(), traps, "{case}: {result:?}");
            // The loop wrote at its first iteration and at its last (offset 3).
            let written = bytes(&mut store, &instance);
            if start >= 0 {
                let extra = if name.starts_with("rotated") { 1003 } else { 3 };
                let first = start as usize + extra;
                assert_eq!(written[first], 0xAB, "{case}: first");
                let last = match traps {
                    true => (size - 1) as usize,
                    false if start >= end => first,
                    false => (start + (end - 1 - start) / step * step) as usize + extra,
                };
                assert_eq!(written[last], 0xAB, "{case}: last");
            }
            drop(store);
            // The next memory, in the same slot, is all zeros.
            let mut store = Store::new(&engine, ());
            let instance = Instance::new(&mut store, &module, &[]).unwrap();
            let seen = bytes(&mut store, &instance);
            let left = seen.iter().position(|&b| b != 0);
            assert_eq!(left, None, "{case}: a byte the last instance wrote is left");
        }
    }
}

/// Loops whose shape nearly proves a range but does not (found by review): a path around the
/// comparison that steps the index past its bound and round to below its start, and an index
/// that reaches exactly 2^31 and wraps signed. Whatever they wrote is gone for the next memory.
#[test]
fn loops_that_only_nearly_prove_a_range_still_have_their_writes_reset() {
    let modules = [
        (
            r#"(module (memory (export "memory") 1)
                 (func (export "f") (param $j i32) (param $n i32)
                   (block $exit (loop $l
                     (block $skip
                       (br_if $skip (i32.gt_u (local.get $j) (local.get $n)))
                       (br_if $exit (i32.ge_u (local.get $j) (local.get $n)))
                       (i32.store8 (local.get $j) (i32.const 42)))
                     (local.set $j (i32.add (local.get $j) (i32.const 0x1000)))
                     (br $l)))))"#,
            (0x2000, 0x1000),
        ),
        (
            r#"(module (memory (export "memory") 1)
                 (func (export "f") (param $j i32) (param $unused i32)
                   (loop $l
                     (if (i32.lt_u (local.get $j) (i32.const 0x10000))
                       (then (i32.store8 (local.get $j) (i32.const 42))))
                     (br_if $l (i32.lt_s
                       (local.tee $j (i32.add (local.get $j) (i32.const 0x40000000)))
                       (i32.const 0x40000000))))))"#,
            (0x4000_0000, 0),
        ),
    ];
    for (text, args) in modules {
        let engine = one_slot_engine();
        let module = Module::new(&engine, text).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let f = instance
            .get_typed_func::<(i32, i32), ()>(&mut store, "f")
            .unwrap();
        f.call(&mut store, args).unwrap();
        assert_eq!(bytes(&mut store, &instance)[0], 42, "the loop wrote at 0");
        drop(store);
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let left = bytes(&mut store, &instance).iter().position(|&b| b != 0);
        assert_eq!(left, None, "{text}");
    }
}
