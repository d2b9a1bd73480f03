//! Every strategy: published code runs and returns what was written, never stale code, under
//! W^X; pool limits give their documented errors.

use crate::common::*;
use ephem_code_memory::{CodePool, Error, PoolConfig, Strategy};

fn small_config(strategy: Strategy) -> PoolConfig {
    PoolConfig {
        slot_size: 64 << 10,
        max_slots: 4,
        prefault_slots: 1,
        remap_every: 7,
        ..PoolConfig::with_strategy(strategy)
    }
}

#[test]
fn every_strategy_runs_fresh_code_each_load() {
    for strategy in w_xor_x_strategies() {
        let Some(pool) = pool_or_skip(small_config(strategy)) else {
            continue;
        };
        for i in 0..200u32 {
            // Different values and a different length every iteration, so stale code shows.
            let len = 4096 + (i as usize % 5) * 3000;
            let offsets = [0, 100, 4096 - 12, len - 6];
            let functions: Vec<(usize, u32)> = offsets
                .iter()
                .enumerate()
                .map(|(k, &o)| (o, i * 10 + k as u32))
                .collect();
            let code = load(&pool, &module(len, &functions)).unwrap();
            for &(offset, value) in &functions {
                assert_eq!(
                    call(&code, offset),
                    value,
                    "{strategy}: load {i}, offset {offset}"
                );
            }
        }
    }
}

#[test]
fn shorter_module_never_exposes_the_previous_one() {
    for strategy in w_xor_x_strategies() {
        let config = PoolConfig {
            max_slots: 1,
            ..small_config(strategy)
        };
        let Some(pool) = pool_or_skip(config) else {
            continue;
        };
        let long = load(&pool, &module(20_000, &[(0, 1), (12_000, 2)])).unwrap();
        assert_eq!(call(&long, 12_000), 2);
        drop(long);
        let short = load(&pool, &module(8_000, &[(0, 3)])).unwrap();
        assert_eq!(call(&short, 0), 3);
        // The previous module's function at 12 000 lies beyond the new code: it must be gone
        // from the executable view (trap bytes, or zero for never-written memory).
        // `naive` unmapped the old module; only the rest of the new page is mapped there.
        let visible = if strategy == Strategy::Naive {
            192
        } else {
            12_000
        };
        // SAFETY: the slot is mapped readable that far (it was just published).
        let left = unsafe { std::slice::from_raw_parts(short.as_ptr().add(8_000), visible) };
        assert!(
            left.iter().all(|&b| b == 0xCC || b == 0),
            "{strategy}: bytes of the previous module are still executable"
        );
    }
}

#[test]
fn no_mapping_is_writable_and_executable() {
    for strategy in w_xor_x_strategies() {
        let Some(pool) = pool_or_skip(small_config(strategy)) else {
            continue;
        };
        // One slot mid-write, one published, one released: every state a slot can be in.
        let released = load(&pool, &module(8192, &[(0, 1)])).unwrap();
        drop(released);
        let published = load(&pool, &module(8192, &[(0, 2)])).unwrap();
        let mut writing = pool.acquire(8192).unwrap();
        writing.bytes_mut().fill(0xCC);
        let wx = writable_executable_mappings();
        assert!(
            wx.is_empty(),
            "{strategy}: writable+executable mappings: {wx:?}"
        );
        assert_eq!(call(&published, 0), 2);
    }
}

#[test]
fn exhausted_pool_is_a_clear_error_until_a_slot_returns() {
    let pool = CodePool::new(PoolConfig {
        max_slots: 2,
        ..small_config(Strategy::Dual)
    })
    .unwrap();
    let a = load(&pool, &module(4096, &[(0, 1)])).unwrap();
    let b = load(&pool, &module(4096, &[(0, 2)])).unwrap();
    match pool.acquire(4096) {
        Err(Error::Exhausted { max_slots: 2 }) => {}
        other => panic!("expected exhaustion, got {other:?}"),
    }
    drop(a);
    let c = load(&pool, &module(4096, &[(0, 3)])).unwrap();
    assert_eq!((call(&b, 0), call(&c, 0)), (2, 3));
    assert_eq!(pool.stats().slots, 2);
}

#[test]
fn oversized_module_grows_its_slot_up_to_the_limit() {
    for strategy in w_xor_x_strategies() {
        let config = PoolConfig {
            slot_size: 4096,
            max_slot_size: 1 << 20,
            ..small_config(strategy)
        };
        let Some(pool) = pool_or_skip(config) else {
            continue;
        };
        let len = 300_000;
        let code = load(&pool, &module(len, &[(0, 5), (len - 6, 6)])).unwrap();
        assert_eq!((call(&code, 0), call(&code, len - 6)), (5, 6), "{strategy}");
        drop(code);
        match pool.acquire((1 << 20) + 1) {
            Err(Error::TooLarge { len, max }) => assert_eq!((len, max), ((1 << 20) + 1, 1 << 20)),
            other => panic!("{strategy}: expected TooLarge, got {other:?}"),
        }
    }
}

#[test]
fn rwx_needs_the_explicit_opt_in() {
    let config = PoolConfig::with_strategy(Strategy::Rwx);
    assert!(matches!(CodePool::new(config), Err(Error::RwxNotOptedIn)));
    assert!("rwx".parse::<Strategy>().is_ok_and(|s| s == Strategy::Rwx));
    assert!("bogus".parse::<Strategy>().is_err());
    assert_eq!(PoolConfig::default().strategy, Strategy::Dual);
}

#[test]
fn many_threads_share_one_pool() {
    for strategy in [Strategy::Dual, Strategy::Reuse, Strategy::Naive] {
        let pool = CodePool::new(PoolConfig {
            max_slots: 4,
            ..small_config(strategy)
        })
        .unwrap();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let pool = &pool;
                s.spawn(move || {
                    for i in 0..300u32 {
                        let value = t << 16 | i;
                        let code =
                            load(pool, &module(4096 * (1 + (i as usize % 3)), &[(64, value)]))
                                .unwrap();
                        assert_eq!(call(&code, 64), value, "{strategy}: thread {t}");
                    }
                });
            }
        });
        assert!(pool.stats().slots <= 4);
    }
}

#[test]
fn published_code_is_found_in_the_registry_until_dropped() {
    use ephem_code_memory::registry;
    for strategy in w_xor_x_strategies() {
        let Some(pool) = pool_or_skip(small_config(strategy)) else {
            continue;
        };
        let bytes = module(5000, &[(0, 9)]);
        let mut slot = pool.acquire(bytes.len()).unwrap();
        slot.bytes_mut().copy_from_slice(&bytes);
        let code = slot.publish_tagged(0xfeed).unwrap();
        let start = code.as_ptr() as usize;
        assert_eq!(registry::lookup(start), Some((start, 0xfeed)), "{strategy}");
        assert_eq!(
            registry::lookup(start + 4999),
            Some((start, 0xfeed)),
            "{strategy}"
        );
        assert_eq!(
            registry::lookup(start + 5000),
            None,
            "{strategy}: past the end"
        );
        assert_eq!(call(&code, 0), 9);
        drop(code);
        assert_eq!(
            registry::lookup(start),
            None,
            "{strategy}: still registered after release"
        );
    }
}

/// A text mapped from a file (into a region of the arena) is found in the registry under its
/// load's tag while it is loaded, and not once it is dropped, though its region keeps the text
/// mapped; taken back for the same text, it is found under the new load's tag.
#[test]
fn mapped_code_is_found_in_the_registry_until_dropped() {
    use ephem_code_memory::{LoadedCode, TextId, registry};
    use std::io::Write;
    use std::os::fd::AsFd;
    let bytes = module(5000, &[(0, 9)]);
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&bytes).unwrap();
    let id = Some(TextId([0x7e57; 6]));
    let map = |tag| LoadedCode::map_file(file.as_fd(), 0, bytes.len(), tag, id).unwrap();

    let code = map(0xa);
    let start = code.as_ptr() as usize;
    assert_eq!(registry::lookup(start + 4999), Some((start, 0xa)));
    assert_eq!(registry::lookup(start + 5000), None, "past the end");
    assert_eq!(call(&code, 0), 9);
    drop(code);
    assert_eq!(
        registry::lookup(start),
        None,
        "still registered after release"
    );

    let again = map(0xb);
    assert_eq!(
        again.as_ptr() as usize,
        start,
        "the region that holds the text"
    );
    assert_eq!(registry::lookup(start), Some((start, 0xb)));
    assert_eq!(call(&again, 0), 9);
    drop(again);
    assert_eq!(registry::lookup(start), None);
}
