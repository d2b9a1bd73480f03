//! The `rwx` baseline (its own test binary, since its mapping would trip the W^X checks of the
//! other tests running beside it).

mod common;

use common::*;
use ephem_code_memory::{CodePool, PoolConfig, RwxOptIn, Strategy};

#[test]
fn rwx_runs_fresh_code_and_is_the_only_writable_executable_mapping() {
    assert!(writable_executable_mappings().is_empty());
    let pool = CodePool::new(PoolConfig {
        slot_size: 16 << 10,
        max_slots: 1,
        rwx: Some(RwxOptIn::benchmark_baseline_breaks_w_xor_x()),
        ..PoolConfig::with_strategy(Strategy::Rwx)
    })
    .unwrap();
    for i in 0..100u32 {
        let code = load(&pool, &module(8192, &[(0, i), (5000, !i)])).unwrap();
        assert_eq!((call(&code, 0), call(&code, 5000)), (i, !i));
    }
    // The W^X check of the other tests does see such a mapping: it is not vacuous.
    assert_eq!(writable_executable_mappings().len(), 1);
}
