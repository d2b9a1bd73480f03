//! Each thread that runs wasm gets an alternate signal stack large enough for a fault handler
//! and an interrupt nested in it (the runtime's `signals`), and gives it back when it exits:
//! a server that starts threads all day must not leak one per thread. Its own test binary, so
//! that no other test maps memory while it counts mappings.

use ephem::{Engine, Instance, Store, TrapKind};

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// This thread's alternate signal stack's size, 0 when it has none.
fn alt_stack_size() -> usize {
    let mut current = std::mem::MaybeUninit::<libc::stack_t>::uninit();
    // SAFETY: reads this thread's alternate stack into `current`.
    assert_eq!(
        unsafe { libc::sigaltstack(std::ptr::null(), current.as_mut_ptr()) },
        0
    );
    // SAFETY: filled by the call above.
    let current = unsafe { current.assume_init() };
    if current.ss_flags & libc::SS_DISABLE != 0 {
        0
    } else {
        current.ss_size
    }
}

#[test]
fn threads_that_trap_have_a_large_alternate_stack_and_leave_none_behind() {
    let engine = Engine::default();
    let module = ephem::Module::new(
        &engine,
        br#"(module (memory 1) (func (export "oob") (result i32) (i32.load (i32.const 65536))))"#,
    )
    .unwrap();
    let run = || {
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let oob = instance
            .get_typed_func::<(), i32>(&mut store, "oob")
            .unwrap();
        let trap = oob.call(&mut store, ()).unwrap_err();
        assert_eq!(
            trap.trap().map(|t| t.kind),
            Some(TrapKind::MemoryOutOfBounds)
        );
        alt_stack_size()
    };
    // Warm: the pools' and this thread's mappings.
    run();
    let before = mappings();
    for _ in 0..64 {
        let size = std::thread::scope(|s| s.spawn(run).join().unwrap());
        assert!(size >= 64 << 10, "an alternate stack of {size} bytes");
    }
    let after = mappings();
    // A stack left behind per thread would be 64 mappings or more.
    assert!(
        after < before + 16,
        "{before} mappings before 64 threads, {after} after"
    );
}
