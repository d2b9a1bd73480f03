//! Bulk memory at the end of a 4 GiB memory: ranges that end exactly at 2^32 are in bounds (the
//! spec and wasmtime accept them), one byte further traps.

use ephem::{Engine, Instance, Store, TrapKind};

const WAT: &str = r#"
(module
  (memory (export "mem") 65536)
  (data $tail "tail")
  (data (i32.const -4) "last")
  (func (export "fill") (param i32 i32) (memory.fill (local.get 0) (i32.const 0x5a) (local.get 1)))
  (func (export "copy") (param i32 i32 i32) (memory.copy (local.get 0) (local.get 1) (local.get 2)))
  (func (export "init") (param i32 i32) (memory.init $tail (local.get 0) (i32.const 0) (local.get 1)))
  (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))
"#;

/// A data segment at a dynamic offset (an imported global) that ends exactly at 2^32.
const DYNAMIC: &str = r#"
(module
  (import "env" "at" (global i32))
  (memory (export "mem") 65536)
  (data (global.get 0) "dyn!")
  (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))
"#;

const END: i64 = 1 << 32;

fn at(offset_from_end: i64) -> i32 {
    (END - offset_from_end) as u32 as i32
}

#[test]
fn bulk_memory_ranges_may_end_exactly_at_4_gib() {
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    let load = instance
        .get_typed_func::<i32, i32>(&mut store, "load")
        .unwrap();
    let fill = instance
        .get_typed_func::<(i32, i32), ()>(&mut store, "fill")
        .unwrap();
    let copy = instance
        .get_typed_func::<(i32, i32, i32), ()>(&mut store, "copy")
        .unwrap();
    let init = instance
        .get_typed_func::<(i32, i32), ()>(&mut store, "init")
        .unwrap();
    let byte = |store: &mut Store<()>, from_end: i64| load.call(store, at(from_end)).unwrap() as u8;

    // The constant data segment ending at 2^32 was applied.
    assert_eq!(
        (1..=4)
            .rev()
            .map(|i| byte(&mut store, i))
            .collect::<Vec<_>>(),
        b"last"
    );

    // fill: ending at 2^32 works, one byte more traps and writes nothing.
    fill.call(&mut store, (at(8), 8)).unwrap();
    assert_eq!(byte(&mut store, 1), 0x5a);
    let e = fill.call(&mut store, (at(8), 9)).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::MemoryOutOfBounds);

    // copy from low memory up to the very end, and from the very end down.
    init.call(&mut store, (0, 4)).unwrap();
    copy.call(&mut store, (at(4), 0, 4)).unwrap();
    assert_eq!(
        (1..=4)
            .rev()
            .map(|i| byte(&mut store, i))
            .collect::<Vec<_>>(),
        b"tail"
    );
    copy.call(&mut store, (100, at(4), 4)).unwrap();
    assert_eq!(load.call(&mut store, 100).unwrap() as u8, b't');
    assert_eq!(load.call(&mut store, 103).unwrap() as u8, b'l');
    for (dst, src) in [(at(3), 0), (0, at(3))] {
        let e = copy.call(&mut store, (dst, src, 4)).unwrap_err();
        assert_eq!(e.trap().unwrap().kind, TrapKind::MemoryOutOfBounds);
    }

    // init: the segment's bytes written to end exactly at 2^32, and one byte further traps.
    fill.call(&mut store, (at(4), 4)).unwrap();
    init.call(&mut store, (at(4), 4)).unwrap();
    assert_eq!(byte(&mut store, 4), b't');
    assert_eq!(byte(&mut store, 1), b'l');
    let e = init.call(&mut store, (at(3), 4)).unwrap_err();
    assert_eq!(e.trap().unwrap().kind, TrapKind::MemoryOutOfBounds);
}

#[test]
fn a_data_segment_at_a_dynamic_offset_may_end_exactly_at_4_gib() {
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, DYNAMIC.as_bytes()).unwrap();
    for (offset, fits) in [(at(4), true), (at(3), false)] {
        let mut store = Store::new(&engine, ());
        let global = ephem::Global::new(
            &mut store,
            ephem::GlobalType {
                ty: ephem::ValType::I32,
                mutable: false,
            },
            ephem::Val::I32(offset),
        )
        .unwrap();
        let instance = match Instance::new(&mut store, &module, &[global.into()]) {
            Ok(_) if !fits => panic!("a segment one byte past 4 GiB cannot be applied"),
            Ok(instance) => instance,
            Err(e) => {
                assert!(!fits, "{e}");
                assert_eq!(e.trap().unwrap().kind, TrapKind::MemoryOutOfBounds);
                continue;
            }
        };
        let load = instance
            .get_typed_func::<i32, i32>(&mut store, "load")
            .unwrap();
        assert_eq!(load.call(&mut store, at(1)).unwrap() as u8, b'!');
        assert_eq!(load.call(&mut store, at(4)).unwrap() as u8, b'd');
    }
}
