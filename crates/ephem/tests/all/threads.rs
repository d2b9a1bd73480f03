//! Shared memories and atomics through the embedding API: one memory used by stores on several
//! threads at once (atomic read-modify-writes that lose no update, growth one thread sees from
//! another), wait and notify across threads, a deadline ending a guest that waits, waiting on
//! a memory that is not shared, and that a shared memory's slot, reused, shows nothing of it.

use std::time::{Duration, Instant};

use ephem::{
    Engine, Linker, Memory, MemoryType, Module, SharedMemory, Store, TrapKind, WaitResult,
};

const WORKER: &str = r#"(module
  (import "env" "memory" (memory 1 4 shared))
  ;; Adds 1 to the counter at 0, n times.
  (func (export "count") (param $n i32)
    (loop $l
      (drop (i32.atomic.rmw.add (i32.const 0) (i32.const 1)))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))
  ;; Waits at 8 while the word there is 0, at most `timeout` ns (-1: without end).
  (func (export "wait") (param $timeout i64) (result i32)
    (memory.atomic.wait32 (i32.const 8) (i32.const 0) (local.get $timeout)))
  ;; Sets the word at 8 and wakes one waiter there.
  (func (export "wake") (result i32)
    (i32.atomic.store (i32.const 8) (i32.const 1))
    (memory.atomic.notify (i32.const 8) (i32.const 1)))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "size") (result i32) (memory.size))
  (func (export "load") (param i32) (result i32) (i32.load (local.get 0)))
  (func (export "atomic_load") (param i32) (result i32) (i32.atomic.load (local.get 0)))
  ;; Reads the last word of the memory as it is now.
  (func (export "last") (result i32)
    (i32.atomic.load (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 4))))
)"#;

/// A store on its own thread with an instance of [`WORKER`] on `shared`.
fn worker(engine: &Engine, module: &Module, shared: &SharedMemory) -> (Store<()>, ephem::Instance) {
    let mut store = Store::new(engine, ());
    let memory = Memory::from_shared(&mut store, shared).unwrap();
    let mut linker = Linker::new(engine);
    linker.define(&store, "env", "memory", memory).unwrap();
    let instance = linker.instantiate(&mut store, module).unwrap();
    (store, instance)
}

#[test]
fn atomic_adds_on_two_threads_lose_no_update() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let shared = SharedMemory::new(&engine, MemoryType::shared(1, 4)).unwrap();
    const N: i32 = 200_000;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (engine, module, shared) = (engine.clone(), module.clone(), shared.clone());
            std::thread::spawn(move || {
                let (mut store, instance) = worker(&engine, &module, &shared);
                let count = instance
                    .get_typed_func::<i32, ()>(&mut store, "count")
                    .unwrap();
                count.call(&mut store, N).unwrap();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let data = shared.data();
    // SAFETY (of the read): the threads that wrote have been joined.
    let counter = u32::from_le_bytes(std::array::from_fn(|i| unsafe { *data[i].get() }));
    assert_eq!(counter, 2 * N as u32);
}

#[test]
fn growth_on_one_thread_is_seen_on_another() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let shared = SharedMemory::new(&engine, MemoryType::shared(1, 4)).unwrap();
    let (mut a, ia) = worker(&engine, &module, &shared);
    let size = ia.get_typed_func::<(), i32>(&mut a, "size").unwrap();
    let last = ia.get_typed_func::<(), i32>(&mut a, "last").unwrap();
    assert_eq!(
        (
            size.call(&mut a, ()).unwrap(),
            last.call(&mut a, ()).unwrap()
        ),
        (1, 0)
    );
    // Past the end, plain and atomic accesses trap (by fault: a shared memory is tight).
    let load = ia.get_typed_func::<i32, i32>(&mut a, "load").unwrap();
    let atomic_load = ia
        .get_typed_func::<i32, i32>(&mut a, "atomic_load")
        .unwrap();
    for f in [&load, &atomic_load] {
        for at in [65536, 65540, 3 << 16, -4] {
            let e = f.call(&mut a, at).unwrap_err();
            let kind = e.trap().map(|t| t.kind);
            assert_eq!(kind, Some(TrapKind::MemoryOutOfBounds), "{at}: {e}");
        }
    }
    // (An access that begins inside and ends past the end.)
    let e = load.call(&mut a, 65533).unwrap_err();
    let kind = e.trap().map(|t| t.kind);
    assert_eq!(kind, Some(TrapKind::MemoryOutOfBounds), "{e}");
    let grown = {
        let (engine, module, shared) = (engine.clone(), module.clone(), shared.clone());
        std::thread::spawn(move || {
            let (mut b, ib) = worker(&engine, &module, &shared);
            let grow = ib.get_typed_func::<i32, i32>(&mut b, "grow").unwrap();
            (grow.call(&mut b, 2).unwrap(), grow.call(&mut b, 2).unwrap())
        })
        .join()
        .unwrap()
    };
    assert_eq!(
        grown,
        (1, -1),
        "grown from 1 page to 3; a fourth and fifth pass the maximum"
    );
    // The first store's code reads the new length: its last word is now three pages in.
    assert_eq!(size.call(&mut a, ()).unwrap(), 3);
    assert_eq!(last.call(&mut a, ()).unwrap(), 0);
    assert_eq!(
        load.call(&mut a, 65536).unwrap(),
        0,
        "within the grown memory"
    );
    assert_eq!(atomic_load.call(&mut a, (3 << 16) - 4).unwrap(), 0);
    assert!(load.call(&mut a, 3 << 16).is_err());
    assert_eq!((shared.size(), shared.data_size()), (3, 3 << 16));
    assert_eq!(shared.grow(1).unwrap(), 3);
    assert!(shared.grow(1).is_err(), "past the maximum");
}

#[test]
fn a_notify_on_one_thread_wakes_a_wait_on_another() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let shared = SharedMemory::new(&engine, MemoryType::shared(1, 4)).unwrap();
    let waiter = {
        let (engine, module, shared) = (engine.clone(), module.clone(), shared.clone());
        std::thread::spawn(move || {
            let (mut store, instance) = worker(&engine, &module, &shared);
            let wait = instance
                .get_typed_func::<i64, i32>(&mut store, "wait")
                .unwrap();
            wait.call(&mut store, -1).unwrap()
        })
    };
    let (mut store, instance) = worker(&engine, &module, &shared);
    let wake = instance
        .get_typed_func::<(), i32>(&mut store, "wake")
        .unwrap();
    // Until the waiter waits, nobody is woken; once it is, it returns 0 ("ok").
    let started = Instant::now();
    loop {
        // Keep the word 0 until the notify that wakes: a waiter that finds 1 does not wait.
        let woken = shared.atomic_notify(8, 1).unwrap();
        if woken == 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the waiter never waited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(waiter.join().unwrap(), 0, "woken by a notify");
    // The word is 1 now: a wait for 0 returns "not equal" (1) at once; nobody waits.
    assert_eq!(wake.call(&mut store, ()).unwrap(), 0);
    let wait = instance
        .get_typed_func::<i64, i32>(&mut store, "wait")
        .unwrap();
    assert_eq!(wait.call(&mut store, -1).unwrap(), 1);
    assert_eq!(
        shared
            .atomic_wait32(8, 1, Some(Duration::from_millis(1)))
            .unwrap(),
        WaitResult::TimedOut
    );
    assert_eq!(
        shared.atomic_wait32(8, 0, None).unwrap(),
        WaitResult::Mismatch
    );
}

#[test]
fn a_wait_times_out_and_a_deadline_ends_one_without_end() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let shared = SharedMemory::new(&engine, MemoryType::shared(1, 4)).unwrap();
    let (mut store, instance) = worker(&engine, &module, &shared);
    let wait = instance
        .get_typed_func::<i64, i32>(&mut store, "wait")
        .unwrap();
    let started = Instant::now();
    assert_eq!(wait.call(&mut store, 20_000_000).unwrap(), 2, "timed out");
    assert!(started.elapsed() >= Duration::from_millis(20));

    store.set_epoch_deadline(1);
    let ticker = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            engine.increment_epoch();
        })
    };
    let started = Instant::now();
    let e = wait.call(&mut store, -1).unwrap_err();
    ticker.join().unwrap();
    assert_eq!(e.trap().map(|t| t.kind), Some(TrapKind::Interrupted), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Nothing of the ended wait remains: a notify finds no waiter.
    assert_eq!(shared.atomic_notify(8, 1).unwrap(), 0);
}

#[test]
fn waiting_on_a_memory_that_is_not_shared_traps() {
    let engine = Engine::default();
    let module = Module::new(
        &engine,
        r#"(module (memory 1)
          (func (export "wait") (param i32) (result i32)
            (memory.atomic.wait32 (i32.const 0) (local.get 0) (i64.const -1)))
          (func (export "notify") (result i32)
            (memory.atomic.notify (i32.const 0) (i32.const 5))))"#,
    )
    .unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Linker::new(&engine)
        .instantiate(&mut store, &module)
        .unwrap();
    let wait = instance
        .get_typed_func::<i32, i32>(&mut store, "wait")
        .unwrap();
    let notify = instance
        .get_typed_func::<(), i32>(&mut store, "notify")
        .unwrap();
    // Whatever the value (as wasmtime has it): nothing could wake the wait.
    for value in [0, 1] {
        let e = wait.call(&mut store, value).unwrap_err();
        let kind = e.trap().map(|t| t.kind);
        assert_eq!(kind, Some(TrapKind::WaitOnUnsharedMemory), "{value}: {e}");
    }
    assert_eq!(notify.call(&mut store, ()).unwrap(), 0);
}

/// A shared memory defined by a module is exported as a memory whose handle other stores
/// take; once every handle is gone its slot goes back to the pool, and the next memory that
/// takes it (shared or not) finds zeros.
#[test]
fn a_defined_shared_memory_reaches_other_stores_and_its_slot_comes_back_clean() {
    // One idle slot: each new memory takes the slot the last one gave back.
    let engine = crate::bounds_checks::one_slot_engine();
    let definer = Module::new(
        &engine,
        r#"(module (memory (export "memory") 1 1 shared)
          (data (i32.const 16) "seed")
          (func (export "fill")
            (memory.fill (i32.const 0) (i32.const 0xab) (i32.const 65536))))"#,
    )
    .unwrap();
    let module = Module::new(
        &engine,
        WORKER.replace("(memory 1 4 shared)", "(memory 1 1 shared)"),
    )
    .unwrap();
    for round in 0..3 {
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine)
            .instantiate(&mut store, &definer)
            .unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let shared = memory.shared(&store).expect("a shared memory");
        let mut seen = [0; 4];
        memory.read(&store, 16, &mut seen).unwrap();
        assert_eq!(
            &seen, b"seed",
            "round {round}: the data segment, and nothing else"
        );
        // SAFETY (of the reads): no wasm runs on the memory now.
        let rest: Vec<u8> = shared.data().iter().map(|b| unsafe { *b.get() }).collect();
        assert!(
            rest[..16].iter().chain(&rest[20..]).all(|&b| b == 0),
            "round {round}"
        );
        let fill = instance
            .get_typed_func::<(), ()>(&mut store, "fill")
            .unwrap();
        fill.call(&mut store, ()).unwrap();
        // Another store, on another thread, counts in the memory this store made.
        let (engine2, module2, shared2) = (engine.clone(), module.clone(), shared.clone());
        std::thread::spawn(move || {
            let (mut s, i) = worker(&engine2, &module2, &shared2);
            i.get_typed_func::<i32, ()>(&mut s, "count")
                .unwrap()
                .call(&mut s, 5)
                .unwrap();
        })
        .join()
        .unwrap();
        memory.read(&store, 0, &mut seen).unwrap();
        assert_eq!(u32::from_le_bytes(seen), 0xabab_abab + 5);
        let base = shared.base();
        drop((shared, store));
        // A memory that is not shared takes the slot back next and finds it clean.
        let mut store = Store::new(&engine, ());
        let plain = Memory::new(&mut store, MemoryType::new(1, Some(1))).unwrap();
        assert_eq!(plain.data_ptr(&store), base, "round {round}: the same slot");
        let mut page = vec![1; 65536];
        plain.read(&store, 0, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0), "round {round}");
    }
}

#[test]
fn shared_and_unshared_memories_do_not_stand_in_for_each_other() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let mut store = Store::new(&engine, ());
    let plain = Memory::new(&mut store, MemoryType::new(1, Some(4))).unwrap();
    let mut linker = Linker::new(&engine);
    linker.define(&store, "env", "memory", plain).unwrap();
    let e = linker.instantiate(&mut store, &module).unwrap_err();
    assert!(e.to_string().contains("shared"), "{e}");
    assert!(
        SharedMemory::new(&engine, MemoryType::new(1, Some(4))).is_err(),
        "not shared"
    );
    let unbounded = MemoryType {
        max: None,
        ..MemoryType::shared(1, 4)
    };
    assert!(SharedMemory::new(&engine, unbounded).is_err(), "no maximum");
    let other = Engine::default();
    let foreign = SharedMemory::new(&other, MemoryType::shared(1, 4)).unwrap();
    assert!(
        Memory::from_shared(&mut store, &foreign).is_err(),
        "another engine's"
    );
}

/// wasmtime's form: one linker defines the shared memory (`Extern::SharedMemory`) and serves
/// stores on several threads, each getting a memory of it; `Linker::get` gives it back. An
/// instance given one directly, not through a linker, is refused with the way to do it.
#[test]
fn one_linker_defining_a_shared_memory_serves_stores_on_two_threads() {
    let engine = Engine::default();
    let module = Module::new(&engine, WORKER).unwrap();
    let shared = SharedMemory::new(&engine, MemoryType::shared(1, 4)).unwrap();
    let mut linker = Linker::new(&engine);
    let store = Store::new(&engine, ());
    linker
        .define(&store, "env", "memory", shared.clone())
        .unwrap();
    let got = linker.get(Store::new(&engine, ()), "env", "memory");
    assert!(matches!(got, Some(ephem::Extern::SharedMemory(m)) if SharedMemory::same(&m, &shared)));
    let linker = std::sync::Arc::new(linker);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (engine, module, linker) = (engine.clone(), module.clone(), linker.clone());
            std::thread::spawn(move || {
                let mut store = Store::new(&engine, ());
                let instance = linker.instantiate(&mut store, &module).unwrap();
                let count = instance
                    .get_typed_func::<i32, ()>(&mut store, "count")
                    .unwrap();
                count.call(&mut store, 1000).unwrap();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut store = Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let memory = instance.get_memory(&mut store, "memory");
    assert!(memory.is_none(), "the worker exports no memory");
    let mut word = [0; 4];
    let m = Memory::from_shared(&mut store, &shared).unwrap();
    m.read(&store, 0, &mut word).unwrap();
    assert_eq!(u32::from_le_bytes(word), 2000);

    let e = ephem::Instance::new(&mut store, &module, &[ephem::Extern::SharedMemory(shared)])
        .unwrap_err();
    assert!(e.to_string().contains("Memory::from_shared"), "{e}");
}
