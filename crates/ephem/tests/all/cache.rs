//! The compile cache: hits, damaged entries replaced, least recently used eviction, and an
//! unusable directory that still lets modules run.

use std::time::{Duration, SystemTime};

use ephem::{Cache, Compiler, Engine, Instance, Outcome, Store};

fn wat(n: i32) -> String {
    format!(
        r#"(module (memory 1) (data (i32.const 8) "data") (func (export "f") (result i32) i32.const {n}))"#
    )
}

fn run(engine: &Engine, module: &ephem::Module) -> i32 {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    let f = instance.get_typed_func::<(), i32>(&mut store, "f").unwrap();
    f.call(&mut store, ()).unwrap()
}

#[test]
fn hits_misses_and_damaged_entries() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    // Asking kept entries' files on every open, so that damage done from outside the cache is
    // seen at once.
    let cache =
        Cache::new(tmp.path().join("hits"), 1 << 30).asking_kept_entries_every(Duration::ZERO);
    let w = wat(1);

    let (m, outcome) = ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Compiled { replaced: None });
    assert_eq!(run(&engine, &m), 1);
    let (m, outcome) = ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Hit);
    assert_eq!(run(&engine, &m), 1);
    assert_eq!(cache.stats().unwrap().entries, 1);

    // Damage the entry in place, as a disk might: it is detected, removed and recompiled.
    let key = Cache::key(w.as_bytes(), &compiler.fingerprint());
    let path = cache.path(&key);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0xff;
    std::fs::remove_file(&path).unwrap(); // a new inode: this process verifies it afresh
    std::fs::write(&path, &bytes).unwrap();
    let (m, outcome) = ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
    match outcome {
        Outcome::Compiled {
            replaced: Some(why),
        } => assert!(
            why.contains("not sealed") && why.contains(&*path.to_string_lossy()),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(run(&engine, &m), 1);
    let (_, outcome) = ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Hit, "the replacement is intact");

    // Another compiler fingerprint is another key.
    let other = Compiler::with_isa_settings(&[("has_sse41", "false")]).unwrap();
    let (_, outcome) = ephem::compile_cached(&other, &engine, &cache, w.as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Compiled { replaced: None });
    assert_eq!(cache.stats().unwrap().entries, 2);
    assert_eq!(cache.clear().unwrap(), 2);
    assert_eq!(cache.stats().unwrap().entries, 0);
}

#[test]
fn least_recently_used_entries_are_evicted() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().join("evict");
    let probe = Cache::new(&dir, u64::MAX);
    ephem::compile_cached(&compiler, &engine, &probe, wat(0).as_bytes()).unwrap();
    let entry_size = probe.stats().unwrap().bytes;
    probe.clear().unwrap();

    // Room for two entries.
    let cache = Cache::new(&dir, 2 * entry_size + entry_size / 2);
    let path = |n: i32| cache.path(&Cache::key(wat(n).as_bytes(), &compiler.fingerprint()));
    let age = |n: i32, secs: u64| {
        let f = std::fs::File::open(path(n)).unwrap();
        let t = SystemTime::now() - Duration::from_secs(secs);
        f.set_times(std::fs::FileTimes::new().set_accessed(t))
            .unwrap();
    };
    for n in [1, 2] {
        ephem::compile_cached(&compiler, &engine, &cache, wat(n).as_bytes()).unwrap();
    }
    // Entry 1 was used more recently than entry 2.
    age(1, 100);
    age(2, 200);
    ephem::compile_cached(&compiler, &engine, &cache, wat(3).as_bytes()).unwrap();
    assert!(path(1).exists() && path(3).exists());
    assert!(!path(2).exists(), "the least recently used entry goes");
    assert_eq!(cache.stats().unwrap().entries, 2);

    // A hit on an entry whose access time is old refreshes it, so it survives the next write.
    age(1, 10_000);
    age(3, 5_000);
    let (_, outcome) =
        ephem::compile_cached(&compiler, &engine, &cache, wat(1).as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Hit);
    ephem::compile_cached(&compiler, &engine, &cache, wat(4).as_bytes()).unwrap();
    assert!(path(1).exists() && path(4).exists() && !path(3).exists());
}

#[test]
fn an_unusable_cache_directory_still_runs_modules() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    // A directory below a regular file can never be created, whoever we run as.
    let tmp = ephem_test_support::temp_dir();
    let file = tmp.path().join("unusable");
    std::fs::write(&file, b"not a directory").unwrap();
    let cache = Cache::new(file.join("cache"), 1 << 30);
    for _ in 0..2 {
        let (m, outcome) =
            ephem::compile_cached(&compiler, &engine, &cache, wat(5).as_bytes()).unwrap();
        match outcome {
            Outcome::Uncached { why } => assert!(why.contains("cache"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(run(&engine, &m), 5);
    }
    std::fs::remove_file(&file).unwrap();
}
