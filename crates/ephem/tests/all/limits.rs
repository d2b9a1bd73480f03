//! Resource limits per store: growth beyond a limit fails the way the specification allows
//! (`memory.grow` and `table.grow` return -1 and the guest goes on), creation beyond one is a
//! clear error naming it, and counts of instances, memories and tables are bounded.

use ephem::{
    Engine, ErrorKind, Linker, Memory, MemoryType, Module, Store, StoreLimits, StoreLimitsBuilder,
};

const PAGE: usize = 65536;

fn limited(engine: &Engine, limits: StoreLimits) -> Store<StoreLimits> {
    let mut store = Store::new(engine, limits);
    store.limiter(|limits| limits);
    store
}

fn module(engine: &Engine, wat: &str) -> Module {
    Module::new(engine, wat.as_bytes()).unwrap()
}

#[test]
fn memory_grow_beyond_the_limit_returns_minus_one_and_the_guest_goes_on() {
    let engine = Engine::default();
    let m = module(
        &engine,
        r#"(module (memory (export "mem") 1)
             (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
             (func (export "poke") (param i32) (result i32)
               (i32.store (local.get 0) (i32.const 7)) (i32.load (local.get 0))))"#,
    );
    let mut store = limited(
        &engine,
        StoreLimitsBuilder::new().memory_size(3 * PAGE).build(),
    );
    let instance = Linker::new(&engine).instantiate(&mut store, &m).unwrap();
    let grow = instance
        .get_typed_func::<i32, i32>(&mut store, "grow")
        .unwrap();
    let poke = instance
        .get_typed_func::<i32, i32>(&mut store, "poke")
        .unwrap();
    assert_eq!(grow.call(&mut store, 2).unwrap(), 1, "up to the limit");
    assert_eq!(grow.call(&mut store, 1).unwrap(), -1, "past it");
    assert_eq!(grow.call(&mut store, 65535).unwrap(), -1);
    assert_eq!(poke.call(&mut store, 3 * PAGE as i32 - 4).unwrap(), 7);
    let memory = instance.get_memory(&mut store, "mem").unwrap();
    assert_eq!(memory.size(&store), 3);
    let e = memory.grow(&mut store, 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    assert_eq!(
        grow.call(&mut store, 0).unwrap(),
        3,
        "growing by nothing is allowed"
    );
}

#[test]
fn a_memory_or_table_larger_than_the_limit_fails_instantiation_naming_it() {
    let engine = Engine::default();
    let limits = StoreLimitsBuilder::new()
        .memory_size(2 * PAGE)
        .table_elements(100)
        .build();
    let big_memory = module(&engine, "(module (memory 3))");
    let mut store = limited(&engine, limits.clone());
    let e = Linker::new(&engine)
        .instantiate(&mut store, &big_memory)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    assert!(e.to_string().contains("memory of 196608 bytes"), "{e}");
    let big_table = module(&engine, "(module (table 101 funcref))");
    let e = Linker::new(&engine)
        .instantiate(&mut store, &big_table)
        .unwrap_err();
    assert!(e.to_string().contains("table of 101 elements"), "{e}");
    // Fresh imported memories and the host's own memories are limited alike.
    let imports = module(&engine, r#"(module (import "env" "m" (memory 3)))"#);
    let mut linker = Linker::new(&engine);
    linker.define_unknown_imports_as_traps(&imports).unwrap();
    let e = linker.instantiate(&mut store, &imports).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    let ty = MemoryType::new(3, None);
    assert_eq!(
        Memory::new(&mut store, ty).unwrap_err().kind(),
        ErrorKind::Limit
    );
    // Within the limits, the same store goes on working.
    let fits = module(&engine, "(module (memory 2) (table 100 funcref))");
    Linker::new(&engine).instantiate(&mut store, &fits).unwrap();
}

#[test]
fn table_grow_beyond_the_limit_returns_minus_one() {
    let engine = Engine::default();
    let m = module(
        &engine,
        r#"(module (table $t 10 funcref)
             (func (export "grow") (param i32) (result i32)
               (table.grow $t (ref.null func) (local.get 0))))"#,
    );
    let mut store = limited(
        &engine,
        StoreLimitsBuilder::new().table_elements(20).build(),
    );
    let instance = Linker::new(&engine).instantiate(&mut store, &m).unwrap();
    let grow = instance
        .get_typed_func::<i32, i32>(&mut store, "grow")
        .unwrap();
    assert_eq!(grow.call(&mut store, 10).unwrap(), 10);
    assert_eq!(grow.call(&mut store, 1).unwrap(), -1);
}

#[test]
fn instances_memories_and_tables_are_counted() {
    let engine = Engine::default();
    let plain = module(&engine, "(module)");
    let mut store = limited(&engine, StoreLimitsBuilder::new().instances(2).build());
    let linker = Linker::new(&engine);
    linker.instantiate(&mut store, &plain).unwrap();
    linker.instantiate(&mut store, &plain).unwrap();
    let e = linker.instantiate(&mut store, &plain).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    assert!(e.to_string().contains("2 instances"), "{e}");

    let with_memory = module(&engine, "(module (memory 1) (table 1 funcref))");
    let limits = StoreLimitsBuilder::new().memories(1).tables(2).build();
    let mut store = limited(&engine, limits);
    linker.instantiate(&mut store, &with_memory).unwrap();
    let e = linker.instantiate(&mut store, &with_memory).unwrap_err();
    assert!(e.to_string().contains("1 memories"), "{e}");
    let tables_only = module(&engine, "(module (table 1 funcref))");
    linker.instantiate(&mut store, &tables_only).unwrap();
    let e = linker.instantiate(&mut store, &tables_only).unwrap_err();
    assert!(e.to_string().contains("2 tables"), "{e}");
}

#[test]
fn without_a_limiter_a_memory_grows_to_its_maximum() {
    let engine = Engine::default();
    let m = module(
        &engine,
        r#"(module (memory 1 100)
             (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
    );
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine).instantiate(&mut store, &m).unwrap();
    let grow = instance
        .get_typed_func::<i32, i32>(&mut store, "grow")
        .unwrap();
    assert_eq!(grow.call(&mut store, 99).unwrap(), 1);
    assert_eq!(grow.call(&mut store, 1).unwrap(), -1);
}

#[test]
fn the_engine_bounds_all_its_memories_together() {
    let engine = Engine::with_config(ephem::EngineConfig {
        memory: ephem::MemoryConfig {
            max_total_bytes: Some(3 * PAGE),
            ..ephem::MemoryConfig::default()
        },
        ..ephem::EngineConfig::default()
    })
    .unwrap();
    let m = module(
        &engine,
        r#"(module (memory 2)
             (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
    );
    let linker = Linker::new(&engine);
    let mut first = Store::new(&engine, ());
    let instance = linker.instantiate(&mut first, &m).unwrap();
    let mut second = Store::new(&engine, ());
    let e = linker.instantiate(&mut second, &m).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    assert!(e.to_string().contains("engine's bound"), "{e}");
    // Growth is bounded by the same count: one more page fits, a second does not.
    let grow = instance
        .get_typed_func::<i32, i32>(&mut first, "grow")
        .unwrap();
    assert_eq!(grow.call(&mut first, 1).unwrap(), 2);
    assert_eq!(grow.call(&mut first, 1).unwrap(), -1);
    // Dropping a store gives its memory's bytes back, grown pages included.
    drop(first);
    let mut third = Store::new(&engine, ());
    linker.instantiate(&mut third, &m).unwrap();
    linker.instantiate(&mut second, &m).unwrap_err();
}
