//! Instantiation does not leak: thousands of fresh instances leave memory and file descriptors
//! where they were. A test binary of its own, so that no other test opens or closes
//! descriptors (memory files) while it counts them.

use ephem::{Engine, Linker, Module, Store};

#[test]
fn thousands_of_instantiations_do_not_grow_memory_or_descriptors() {
    let engine = Engine::default();
    let modules: Vec<_> = (0..100)
        .map(|i| {
            let wat = format!(
                r#"(module (memory 1) (data (i32.const 16) "module {i}")
                     (global $g (mut i32) (i32.const {i}))
                     (func (export "f") (result i32)
                       (i32.store (i32.const 1024) (i32.const {i}))
                       (i32.add (global.get $g) (i32.load8_u (i32.const 23)))))"#
            );
            Module::new(&engine, wat.as_bytes()).unwrap()
        })
        .collect();
    let linker = Linker::new(&engine);
    let round = |n: usize| {
        for k in 0..n {
            let i = k % modules.len();
            let mut store = Store::new(&engine, ());
            let inst = linker.instantiate(&mut store, &modules[i]).unwrap();
            let f = inst.get_typed_func::<(), i32>(&mut store, "f").unwrap();
            let r = f.call(&mut store, ()).unwrap();
            // "module {i}": byte 23 is the first digit of i.
            let digit = i.to_string().as_bytes()[0] as i32;
            assert_eq!(r, i as i32 + digit, "module {i}");
        }
    };
    ephem_test_support::assert_no_growth(
        || round(500),
        || round(5000),
        16 << 10,
        "5000 instantiations",
    );
}
