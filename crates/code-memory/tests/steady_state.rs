//! Steady-state loading into a `dual` pool makes no system call and takes no page fault; the
//! write view moves to fresh addresses on schedule. Tests here run one at a time (they fork and
//! count process-wide mappings).

mod common;

use std::sync::Mutex;

use common::*;
use ephem_code_memory::{CodePool, PoolConfig, Strategy};

static SERIAL: Mutex<()> = Mutex::new(());

fn pool(strategy: Strategy, remap_every: u32) -> CodePool {
    CodePool::new(PoolConfig {
        slot_size: 64 << 10,
        max_slots: 2,
        prefault_slots: 2,
        remap_every,
        ..PoolConfig::with_strategy(strategy)
    })
    .unwrap()
}

/// Loads `loads` modules of `len` bytes in a forked child under seccomp's strict mode, where any
/// system call but read, write and exit kills the child. Returns the child's wait status.
fn loads_under_seccomp(pool: &CodePool, len: usize, loads: u32) -> i32 {
    let image = module(len, &[(0, 0), (len - 6, 0)]);
    // SAFETY: the child only runs code that neither allocates nor takes locks another thread of
    // the parent could hold (this pool is used by this thread only), and does not unwind.
    unsafe {
        ephem_test_support::under_seccomp(|| {
            let mut code = 0;
            for i in 0..loads {
                let mut slot = pool.acquire(len).unwrap_unchecked();
                let bytes = slot.bytes_mut();
                bytes.copy_from_slice(&image);
                bytes[1..5].copy_from_slice(&i.to_le_bytes());
                let loaded = slot.publish().unwrap_unchecked();
                if call(&loaded, 0) != i {
                    code = 1;
                }
            }
            code
        })
    }
}

#[test]
fn dual_loads_make_no_system_call() {
    let _serial = SERIAL.lock().unwrap();
    let pool = pool(Strategy::Dual, 1_000_000);
    let status = loads_under_seccomp(&pool, 48 << 10, 2000);
    assert!(
        libc::WIFEXITED(status),
        "child killed by signal {}",
        libc::WTERMSIG(status)
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "wrong values returned by loaded code"
    );
}

#[test]
fn the_syscall_check_catches_a_strategy_that_makes_them() {
    let _serial = SERIAL.lock().unwrap();
    let pool = pool(Strategy::Reuse, 0);
    let status = loads_under_seccomp(&pool, 48 << 10, 10);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
}

fn minor_faults_of_this_thread() -> i64 {
    // SAFETY: getrusage fills the struct we pass.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
        usage.ru_minflt
    }
}

#[test]
fn dual_loads_take_no_page_fault() {
    let _serial = SERIAL.lock().unwrap();
    let pool = pool(Strategy::Dual, 1_000_000);
    let len = 60 << 10;
    let image = module(len, &[(0, 7), (len - 6, 8)]);
    // Warm up everything the loop touches (the image, the stack, the pool's queue).
    for _ in 0..10 {
        let code = load(&pool, &image).unwrap();
        call(&code, len - 6);
    }
    let before = minor_faults_of_this_thread();
    for _ in 0..1000 {
        let code = load(&pool, &image).unwrap();
        assert_eq!(call(&code, 0) + call(&code, len - 6), 15);
    }
    assert_eq!(minor_faults_of_this_thread() - before, 0);
}

fn code_file_mappings() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.contains("ephem-code")).count()
}

#[test]
fn write_view_moves_every_n_loads_and_the_old_one_is_unmapped() {
    let _serial = SERIAL.lock().unwrap();
    let pool = CodePool::new(PoolConfig {
        slot_size: 16 << 10,
        max_slots: 1,
        prefault_slots: 1,
        remap_every: 4,
        ..PoolConfig::with_strategy(Strategy::Dual)
    })
    .unwrap();
    let mappings = code_file_mappings();
    for i in 0..20u32 {
        let code = load(&pool, &module(8192, &[(0, i)])).unwrap();
        assert_eq!(call(&code, 0), i);
    }
    // Loads 5, 9, 13 and 17 each moved the view.
    assert_eq!(pool.stats().write_view_remaps, 4);
    assert_eq!(
        code_file_mappings(),
        mappings,
        "an old write view was left mapped"
    );
}
