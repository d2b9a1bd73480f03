//! A context per invocation must be cheap: building one from a template allocates once (its
//! descriptor table) whatever the arguments, environment and preopens, and makes no system call
//! (no descriptor is opened: the preopens' are shared).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn building_a_context_allocates_once_and_opens_nothing() {
    let dirs = [
        ephem_test_support::temp_dir(),
        ephem_test_support::temp_dir(),
    ];
    let mut template = ephem_wasi::WasiCtx::builder();
    template.args(["prog", "a", "b"]).unwrap();
    template.env("A", "1").unwrap().env("B", "2").unwrap();
    template.stdout(ephem_wasi::Output::Capture(1 << 20));
    for (i, d) in dirs.iter().enumerate() {
        template
            .preopened_dir(d.path(), &format!("d{i}"), ephem_wasi::DirPerms::ReadOnly)
            .unwrap();
    }
    let fds_before = ephem_test_support::open_fds();
    let mut contexts = Vec::with_capacity(100);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..100 {
        contexts.push(template.build());
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(allocations, 100, "one allocation per context");
    assert_eq!(ephem_test_support::open_fds(), fds_before);
    drop(contexts);
}
