//! Text affinity: a free slot keeps the code it last published, and a load that names the same
//! text takes it back as it is; a load of any other text, or one whose writing was abandoned,
//! never sees it.

use crate::common::*;
use ephem_code_memory::{Acquired, CodePool, LoadedCode, PoolConfig, Strategy, TextId};

fn config(strategy: Strategy, keep_texts: usize) -> PoolConfig {
    PoolConfig {
        slot_size: 64 << 10,
        max_slots: 8,
        prefault_slots: 1,
        keep_texts,
        remap_every: 2,
        ..PoolConfig::with_strategy(strategy)
    }
}

fn id(n: u64) -> TextId {
    TextId([n; 6])
}

/// Loads text `id` (`bytes` unless a slot still holds it); says whether it was kept.
fn load_text(pool: &CodePool, text: TextId, bytes: &[u8]) -> (LoadedCode, bool) {
    match pool.acquire_text(bytes.len(), text, 0).unwrap() {
        Acquired::Kept(code) => (code, true),
        Acquired::Empty(mut slot) => {
            slot.bytes_mut().copy_from_slice(bytes);
            (slot.publish().unwrap(), false)
        }
    }
}

#[test]
fn a_kept_text_runs_as_it_was_and_only_for_its_own_id() {
    for strategy in w_xor_x_strategies() {
        let Some(pool) = pool_or_skip(config(strategy, 4)) else {
            continue;
        };
        let (a, b) = (
            module(8192, &[(0, 11), (8186, 12)]),
            module(8192, &[(0, 21)]),
        );
        let (code, kept) = load_text(&pool, id(1), &a);
        assert!(!kept);
        let at = code.as_ptr();
        drop(code);
        // `naive` unmaps a slot's code on release: nothing is ever kept.
        let keeps = strategy != Strategy::Naive;
        for round in 0..20 {
            let (code, kept) = load_text(&pool, id(1), &a);
            assert_eq!(kept, keeps, "{strategy}, round {round}");
            if keeps {
                assert_eq!(code.as_ptr(), at, "{strategy}: the same slot");
            }
            assert_eq!((call(&code, 0), call(&code, 8186)), (11, 12), "{strategy}");
            drop(code);
            // Another text of the same length: written into a slot of its own, never `a`'s.
            let (code, kept) = load_text(&pool, id(2), &b);
            assert_eq!(kept, keeps && round > 0, "{strategy}, round {round}");
            assert_eq!(call(&code, 0), 21, "{strategy}");
        }
        // Kept loads write nothing, so they never move the write view (every 2 writing loads).
        if strategy == Strategy::Dual {
            assert_eq!(pool.stats().write_view_remaps, 0);
        }
    }
}

#[test]
fn a_slot_whose_writing_was_abandoned_holds_no_text() {
    let pool = CodePool::new(config(Strategy::Dual, 1)).unwrap();
    let a = module(4096, &[(0, 5)]);
    drop(load_text(&pool, id(1), &a));
    let Acquired::Kept(code) = pool.acquire_text(4096, id(1), 0).unwrap() else {
        panic!("kept");
    };
    drop(code);
    // Taken for `a` again but as a write (another length), half written, dropped unpublished.
    let Acquired::Empty(mut slot) = pool.acquire_text(2048, id(1), 0).unwrap() else {
        panic!("a text of another length is never taken back");
    };
    slot.bytes_mut()[..6].copy_from_slice(&ret_value(99));
    drop(slot);
    let (code, kept) = load_text(&pool, id(1), &a);
    assert!(!kept, "the abandoned slot forgot its text");
    assert_eq!(call(&code, 0), 5);
}

#[test]
fn texts_beyond_the_bound_evict_the_one_freed_longest_ago() {
    let pool = CodePool::new(config(Strategy::Dual, 2)).unwrap();
    let text = |n: u32| module(4096, &[(0, n)]);
    for n in 1..=2 {
        drop(load_text(&pool, id(n as u64), &text(n)));
    }
    assert_eq!(pool.stats().slots, 2);
    // A third text: no new slot (two are kept), so text 1, freed first, is overwritten.
    let (code, kept) = load_text(&pool, id(3), &text(3));
    assert!(!kept);
    assert_eq!(call(&code, 0), 3);
    drop(code);
    assert_eq!(pool.stats().slots, 2);
    let (code, kept) = load_text(&pool, id(2), &text(2));
    assert!(kept, "text 2 was kept");
    assert_eq!(call(&code, 0), 2);
    drop(code);
    let (code, kept) = load_text(&pool, id(1), &text(1));
    assert!(!kept, "text 1 was evicted");
    assert_eq!(call(&code, 0), 1);
}

#[test]
fn slots_in_use_are_never_handed_out_and_more_are_made_up_to_the_maximum() {
    let pool = CodePool::new(PoolConfig {
        max_slots: 3,
        ..config(Strategy::Dual, 1)
    })
    .unwrap();
    let a = module(4096, &[(0, 1)]);
    let held: Vec<LoadedCode> = (0..3).map(|_| load_text(&pool, id(1), &a).0).collect();
    assert!(matches!(
        pool.acquire_text(4096, id(1), 0),
        Err(ephem_code_memory::Error::Exhausted { max_slots: 3 })
    ));
    for code in &held {
        assert_eq!(call(code, 0), 1);
    }
}

/// A thread keeps the slots it released: it takes its text back from its own slot, another
/// thread loading the same text meanwhile writes a slot of its own, and a thread's slots go to
/// the pool's list when it exits, where a third thread finds the text.
#[test]
fn a_thread_keeps_the_slots_it_released() {
    let pool = CodePool::new(config(Strategy::Dual, 4)).unwrap();
    let a = module(4096, &[(0, 7)]);
    let load = || {
        let (code, kept) = load_text(&pool, id(1), &a);
        assert_eq!(call(&code, 0), 7);
        (code.as_ptr() as usize, kept)
    };
    let (ours, theirs, again) = std::thread::scope(|s| {
        let ours = load();
        let theirs = s.spawn(load).join().unwrap();
        (ours, theirs, load())
    });
    assert!(!ours.1);
    assert_ne!(theirs.0, ours.0, "another thread took this thread's slot");
    assert!(!theirs.1, "another thread took this thread's text");
    assert_eq!(again, (ours.0, true), "kept by this thread");
    let third = std::thread::scope(|s| s.spawn(load).join().unwrap());
    assert_eq!(third, (theirs.0, true), "released to the list on exit");
}
