//! Generated code's traps take no invalid-opcode exception on x86-64: a `ud2` costs a VM exit
//! on KVM guests, so the compiler writes `hlt`s at its trap sites, which fault as SIGSEGV (see
//! `rewrite_traps` in the compiler's `arch/x86_64.rs`). This test runs each kind of trap with
//! SIGILL blocked on its thread: a `ud2` would then kill the process. Its own test binary,
//! since that kills it.

#![cfg(target_arch = "x86_64")]

use ephem::{Engine, Instance, Store, TrapKind};

#[test]
fn every_trap_reports_its_kind_without_sigill() {
    let wat = r#"(module
        (type $v (func))
        (memory 1)
        (table 2 funcref)
        (elem (i32.const 0) $nothing)
        (func $nothing)
        (func (export "out_of_bounds") (param i32) (result i32) (i32.load (local.get 0)))
        (func (export "table") (param i32) (call_indirect (type $v) (local.get 0)))
        (func (export "signature") (result i32)
          (call_indirect (result i32) (i32.const 0)))
        (func (export "overflow") (param i32) (result i32)
          (i32.div_s (i32.const 0x80000000) (local.get 0)))
        (func (export "convert") (param f32) (result i32) (i32.trunc_f32_s (local.get 0)))
        (func $deep (export "deep") (param i32) (result i32)
          (i32.add (call $deep (local.get 0)) (i32.const 1))))"#;
    let engine = Engine::default();
    let module = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    let kind = |r: Result<(), ephem::Error>| r.err().and_then(|e| e.trap().map(|t| t.kind));

    let mut ill = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: fills the set, then blocks SIGILL on this thread only.
    unsafe {
        libc::sigemptyset(ill.as_mut_ptr());
        libc::sigaddset(ill.as_mut_ptr(), libc::SIGILL);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, ill.as_ptr(), std::ptr::null_mut()),
            0
        );
    }
    let mut kinds = Vec::new();
    let i32_arg = |name: &str, arg: i32, store: &mut Store<()>| {
        let f = instance
            .get_typed_func::<i32, i32>(&mut *store, name)
            .unwrap();
        kind(f.call(store, arg).map(drop))
    };
    kinds.push(i32_arg("out_of_bounds", 65536, &mut store));
    kinds.push(i32_arg("overflow", -1, &mut store));
    kinds.push(i32_arg("deep", 0, &mut store));
    let table = instance
        .get_typed_func::<i32, ()>(&mut store, "table")
        .unwrap();
    kinds.push(kind(table.call(&mut store, 1)));
    kinds.push(kind(table.call(&mut store, 5)));
    let signature = instance
        .get_typed_func::<(), i32>(&mut store, "signature")
        .unwrap();
    kinds.push(kind(signature.call(&mut store, ()).map(drop)));
    let convert = instance
        .get_typed_func::<f32, i32>(&mut store, "convert")
        .unwrap();
    kinds.push(kind(convert.call(&mut store, f32::NAN).map(drop)));
    // SAFETY: unblocks what was blocked above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_UNBLOCK, ill.as_ptr(), std::ptr::null_mut());
    }
    assert_eq!(
        kinds,
        [
            TrapKind::MemoryOutOfBounds,
            TrapKind::IntegerOverflow,
            TrapKind::StackOverflow,
            TrapKind::IndirectCallToNull,
            TrapKind::UndefinedElement,
            TrapKind::BadSignature,
            TrapKind::BadConversionToInteger,
        ]
        .map(Some)
    );
}
