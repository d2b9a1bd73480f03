//! Artifacts and the cache under hostile conditions: entries bound to their key, sealed with the
//! deployment's key, files that change underneath, amplification, leftovers and odd files.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use ephem::{
    Artifact, ArtifactKey, Cache, Compiler, Engine, EngineConfig, ErrorKind, Instance,
    MemoryConfig, Module, Outcome, Store,
};

fn wat(n: i32) -> String {
    format!(
        r#"(module (memory 1) (data (i32.const 8) "data") (func (export "f") (result i32) i32.const {n}))"#
    )
}

fn call_f(engine: &Engine, module: &Module) -> i32 {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    let f = instance.get_typed_func::<(), i32>(&mut store, "f").unwrap();
    f.call(&mut store, ()).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn an_entry_holding_another_modules_artifact_is_replaced() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    let cache = Cache::new(tmp.path(), 1 << 30);
    let (a, b) = (wat(1), wat(2));
    ephem::compile_cached(&compiler, &engine, &cache, a.as_bytes()).unwrap();
    ephem::compile_cached(&compiler, &engine, &cache, b.as_bytes()).unwrap();
    let path = |w: &str| cache.path(&Cache::key(w.as_bytes(), &compiler.fingerprint()));
    // Both are sealed with the same key: only the recorded source tells them apart.
    std::fs::remove_file(path(&a)).unwrap();
    std::fs::copy(path(&b), path(&a)).unwrap();
    let (m, outcome) = ephem::compile_cached(&compiler, &engine, &cache, a.as_bytes()).unwrap();
    match outcome {
        Outcome::Compiled {
            replaced: Some(why),
        } => assert!(why.contains("another module"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(call_f(&engine, &m), 1);
    let (m, outcome) = ephem::compile_cached(&compiler, &engine, &cache, a.as_bytes()).unwrap();
    assert_eq!(outcome, Outcome::Hit);
    assert_eq!(call_f(&engine, &m), 1);
}

#[test]
fn the_cache_makes_one_private_key_and_seals_with_it() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().join("c");
    // Processes (here threads with caches of their own) that start at once agree on one key.
    let keys: Vec<ArtifactKey> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| Cache::new(&dir, 1 << 30).artifact_key().unwrap().clone()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(keys.windows(2).all(|w| w[0] == w[1]));
    let key_file = dir.join("key");
    assert_eq!(mode(&key_file), 0o600);
    let text = std::fs::read_to_string(&key_file).unwrap();
    assert_eq!(text.trim(), keys[0].to_hex());
    assert_eq!(text.trim().len(), 64);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["key"], "no temporary key files are left");

    // An entry is sealed with that key and written read-only.
    let cache = Cache::new(&dir, 1 << 30);
    ephem::compile_cached(&compiler, &engine, &cache, wat(3).as_bytes()).unwrap();
    let entry = cache.path(&Cache::key(wat(3).as_bytes(), &compiler.fingerprint()));
    assert_eq!(mode(&entry) & 0o222, 0, "entries are read-only");
    Artifact::open(&entry, &keys[0]).unwrap();
    let other = ArtifactKey::generate().unwrap();
    assert!(matches!(
        Artifact::open(&entry, &other),
        Err(ephem_artifact::Error::Unsealed)
    ));
    // SAFETY: this test's own artifact, compiled just now.
    let m = unsafe { Module::from_file_unverified(&engine, &entry) }.unwrap();
    assert_eq!(call_f(&engine, &m), 3);

    // A cache with another key (another deployment) replaces the entry rather than run it.
    let foreign = Cache::with_key(&dir, 1 << 30, other.clone());
    let (m, outcome) =
        ephem::compile_cached(&compiler, &engine, &foreign, wat(3).as_bytes()).unwrap();
    match outcome {
        Outcome::Compiled {
            replaced: Some(why),
        } => assert!(why.contains("not sealed"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(call_f(&engine, &m), 3);
    Artifact::open(&entry, &other).unwrap();
}

#[test]
fn key_files_that_others_could_change_are_refused() {
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("key");
    std::fs::write(&path, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o644)).unwrap();
    assert_eq!(
        ArtifactKey::from_file(&path).unwrap().to_hex(),
        "ab".repeat(32)
    );
    for bad_mode in [0o664, 0o646] {
        std::fs::set_permissions(&path, PermissionsExt::from_mode(bad_mode)).unwrap();
        let e = ArtifactKey::from_file(&path).unwrap_err();
        assert!(e.to_string().contains("another user could change"), "{e}");
    }
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not a key").unwrap();
    let e = ArtifactKey::from_file(&path).unwrap_err();
    assert!(e.to_string().contains("64 hex digits"), "{e}");
}

/// A module whose text and memory image are both mapped from its artifact (with the engine
/// below): `f` returns the sum of its image's first bytes plus 1000.
const MAPPED: &str = r#"(module
  (memory 1)
  (data (i32.const 0) "\01\02\03\04")
  (func (export "f") (result i32)
    (i32.add (i32.const 1000)
      (i32.add (i32.add (i32.load8_u (i32.const 0)) (i32.load8_u (i32.const 1)))
               (i32.add (i32.load8_u (i32.const 2)) (i32.load8_u (i32.const 3)))))))"#;

fn mapping_engine() -> Engine {
    Engine::with_config(EngineConfig {
        map_text_at: Some(0),
        memory: MemoryConfig {
            map_image_at: 0,
            reuse_images: false,
            ..MemoryConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

static KEY: ArtifactKey = ArtifactKey::from_bytes([9; 32]);

fn write_artifact(path: &Path, wat: &str) {
    let compiled = Compiler::new().unwrap().compile(wat.as_bytes()).unwrap();
    std::fs::write(path, ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY)).unwrap();
}

/// A file its owner leaves writable (mode 0644) is snapshotted on open: overwriting its text
/// and image with traps and garbage, then truncating it, changes nothing for the module.
#[test]
fn a_file_that_can_be_written_in_place_is_snapshotted() {
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("writable.ephem");
    write_artifact(&path, MAPPED);
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o644)).unwrap();
    let engine = mapping_engine();
    let module = Module::from_artifact_file(&engine, &path, &KEY).unwrap();
    assert_eq!(call_f(&engine, &module), 1010);

    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    let tail = ephem_artifact::format::HEADER_SIZE..len;
    bytes[tail.clone()]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = [0xcc, 0xee][i % 2]);
    // In place: the same inode, as an attacker with write access would.
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::OpenOptions::new().write(true).open(&path).unwrap(),
        &bytes[tail],
        4096,
    )
    .unwrap();
    assert_eq!(call_f(&engine, &module), 1010, "overwritten in place");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(300)
        .unwrap();
    assert_eq!(call_f(&engine, &module), 1010, "truncated");
}

/// A read-only file of this user is mapped as it is; if it is truncated anyway, the guest's
/// fault on it is an I/O error that names the file, not a guest trap.
#[test]
fn truncating_a_mapped_read_only_artifact_is_an_io_error_naming_it() {
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join("readonly.ephem");
    write_artifact(&path, MAPPED);
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o444)).unwrap();
    let engine = mapping_engine();
    let module = Module::from_artifact_file(&engine, &path, &KEY).unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    let f = instance.get_typed_func::<(), i32>(&mut store, "f").unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let e = f.call(&mut store, ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Artifact, "{e}");
    assert!(e.trap().is_none());
    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
}

/// The issue's 67-byte module: data at 0 and at 64 MiB - 1. Its artifact holds no 64 MiB image;
/// the segments are copied at instantiation and land where they should.
#[test]
fn sparse_data_does_not_amplify_the_artifact() {
    let wat = r#"(module (memory (export "m") 1025)
        (data (i32.const 0) "a") (data (i32.const 67108863) "z")
        (func (export "f") (result i32)
          (i32.add (i32.load8_u (i32.const 0)) (i32.load8_u (i32.const 67108863)))))"#;
    let bytes = ephem_artifact::to_bytes(
        &Compiler::new().unwrap().compile(wat.as_bytes()).unwrap(),
        &[0; 32],
        &KEY,
    );
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    let engine = Engine::default();
    let m = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
    assert_eq!(call_f(&engine, &m), i32::from(b'a' + b'z'));

    // Dense data still gets an image; the per-compiler bound turns it off.
    let dense = r#"(module (memory 1) (data (i32.const 4096) "dense") (func (export "f") (result i32) (i32.load8_u (i32.const 4100))))"#;
    let with_bound = |bound: Option<u64>| {
        let mut c = Compiler::new().unwrap();
        if let Some(b) = bound {
            c = c.with_max_image_bytes(b);
        }
        let compiled = c.compile(dense.as_bytes()).unwrap();
        Artifact::from_compiled(&compiled).unwrap().images().len()
    };
    assert_eq!(with_bound(None), 1);
    assert_eq!(with_bound(Some(0)), 0);
    assert_ne!(
        Compiler::new().unwrap().fingerprint(),
        Compiler::new()
            .unwrap()
            .with_max_image_bytes(0)
            .fingerprint(),
        "the bound is part of the cache key"
    );
    let m = ephem::compile_with(
        &Compiler::new().unwrap().with_max_image_bytes(0),
        &engine,
        dense.as_bytes(),
    )
    .unwrap();
    assert_eq!(call_f(&engine, &m), i32::from(b'e'));
}

/// The size bound counts what files take on disk: a sparse file of a gigabyte takes nothing.
#[test]
fn the_cache_counts_bytes_on_disk() {
    let tmp = ephem_test_support::temp_dir();
    let cache = Cache::new(tmp.path(), 1 << 30);
    let sparse = cache.path(&"f".repeat(64));
    std::fs::create_dir_all(tmp.path()).unwrap();
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let dense = cache.path(&"e".repeat(64));
    std::fs::write(&dense, vec![1u8; 1 << 20]).unwrap();
    let stats = cache.stats().unwrap();
    assert_eq!(stats.entries, 2);
    assert!(
        (1 << 20..2 << 20).contains(&stats.bytes),
        "{} bytes counted",
        stats.bytes
    );
}

fn temp_name(pid: u32) -> String {
    format!(".{}.ephem.{pid}.0.tmp", "0".repeat(64))
}

#[test]
fn stale_temporary_files_are_counted_and_removed() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    let cache = Cache::new(tmp.path(), 1 << 30);
    ephem::compile_cached(&compiler, &engine, &cache, wat(1).as_bytes()).unwrap();
    // A writer that was killed (no such process), and one that still runs (this one).
    let dead = tmp.path().join(temp_name(i32::MAX as u32));
    let live = tmp.path().join(temp_name(std::process::id()));
    std::fs::write(&dead, vec![1u8; 100_000]).unwrap();
    std::fs::write(&live, vec![1u8; 100_000]).unwrap();
    let stats = cache.stats().unwrap();
    assert_eq!((stats.entries, stats.temps), (1, 2));
    assert!(
        stats.bytes >= 200_000,
        "temporary files count against the bound"
    );
    // Clearing removes the stale one, not a live writer's.
    assert_eq!(cache.clear().unwrap(), 1);
    assert!(!dead.exists() && live.exists());

    // A temporary file older than the bound is stale even if its pid runs; the next write
    // removes it.
    let old =
        std::time::SystemTime::now() - Duration::from_secs(ephem_artifact::STALE_TEMP_SECS + 60);
    std::fs::File::options()
        .write(true)
        .open(&live)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(old))
        .unwrap();
    std::fs::write(&dead, b"again").unwrap();
    ephem::compile_cached(&compiler, &engine, &cache, wat(2).as_bytes()).unwrap();
    assert!(!dead.exists() && !live.exists());
    assert_eq!(cache.stats().unwrap().temps, 0);
}

#[test]
fn concurrent_clears_both_succeed() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    for round in 0..5 {
        let cache = Cache::new(tmp.path(), 1 << 30);
        for n in 0..40 {
            ephem::compile_cached(&compiler, &engine, &cache, wat(round * 100 + n).as_bytes())
                .unwrap();
        }
        let removed: usize = std::thread::scope(|s| {
            let a = s.spawn(|| Cache::new(tmp.path(), 1 << 30).clear().unwrap());
            let b = s.spawn(|| Cache::new(tmp.path(), 1 << 30).clear().unwrap());
            a.join().unwrap() + b.join().unwrap()
        });
        assert!(removed <= 40 && removed > 0);
        assert_eq!(cache.stats().unwrap().entries, 0);
    }
}

/// Runs `f` on another thread, failing instead of hanging if it blocks.
fn within_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60)).expect("blocked")
}

#[test]
fn odd_files_at_a_keys_path_are_replaced_without_blocking_or_following() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let outside = dir.join("outside");
    std::fs::write(&outside, b"not yours").unwrap();
    let cache_dir = dir.join("cache");
    let w = wat(7);
    let compiler = Compiler::new().unwrap();
    let entry =
        Cache::new(&cache_dir, 1 << 30).path(&Cache::key(w.as_bytes(), &compiler.fingerprint()));
    std::fs::create_dir_all(&cache_dir).unwrap();
    type Maker<'a> = Box<dyn Fn(&Path) + 'a>;
    let makers: [(&str, Maker); 3] = [
        (
            "fifo",
            Box::new(|p: &Path| {
                let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }),
        ),
        (
            "directory",
            Box::new(|p: &Path| std::fs::create_dir_all(p.join("inner")).unwrap()),
        ),
        (
            "symlink",
            Box::new(|p: &Path| std::os::unix::fs::symlink(&outside, p).unwrap()),
        ),
    ];
    for (what, make) in makers {
        make(&entry);
        let (dir, w) = (cache_dir.clone(), w.clone());
        let (value, first, second) = within_seconds(move || {
            let compiler = Compiler::new().unwrap();
            let engine = Engine::default();
            let cache = Cache::new(&dir, 1 << 30);
            let (m, first) =
                ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
            let (_, second) =
                ephem::compile_cached(&compiler, &engine, &cache, w.as_bytes()).unwrap();
            (call_f(&engine, &m), first, second)
        });
        assert_eq!(value, 7, "{what}");
        assert!(
            matches!(first, Outcome::Compiled { replaced: Some(_) }),
            "{what}: {first:?}"
        );
        assert_eq!(second, Outcome::Hit, "{what}: repaired");
        std::fs::remove_file(&entry).unwrap();
    }
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        b"not yours",
        "a link's target is untouched"
    );
}

/// Entries are opened relative to the cache's directory once it is found: a directory removed
/// and made again under the same path is noticed, and its entries (made by another process's
/// cache here) are the ones opened from then on.
#[test]
fn a_replaced_cache_directory_is_followed() {
    let compiler = Compiler::new().unwrap();
    let engine = Engine::default();
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().join("cache");
    let key = ephem_artifact::ArtifactKey::from_bytes([9; 32]);
    let cache = Cache::with_key(&dir, 1 << 30, key.clone());
    let wasm = wat(1);
    let (_, first) = ephem::compile_cached(&compiler, &engine, &cache, wasm.as_bytes()).unwrap();
    assert_eq!(first, Outcome::Compiled { replaced: None });
    let (module, hit) = ephem::compile_cached(&compiler, &engine, &cache, wasm.as_bytes()).unwrap();
    assert_eq!(hit, Outcome::Hit);
    assert_eq!(call_f(&engine, &module), 1);

    std::fs::remove_dir_all(&dir).unwrap();
    let other = Cache::with_key(&dir, 1 << 30, key);
    let (_, made) = ephem::compile_cached(&compiler, &engine, &other, wasm.as_bytes()).unwrap();
    assert_eq!(made, Outcome::Compiled { replaced: None });
    for _ in 0..3 {
        let (module, hit) =
            ephem::compile_cached(&compiler, &engine, &cache, wasm.as_bytes()).unwrap();
        assert_eq!(hit, Outcome::Hit, "found in the new directory");
        assert_eq!(call_f(&engine, &module), 1);
    }
    // An entry the other cache adds later is seen through the new directory too.
    let (_, made) = ephem::compile_cached(&compiler, &engine, &other, wat(2).as_bytes()).unwrap();
    assert_eq!(made, Outcome::Compiled { replaced: None });
    let (module, hit) =
        ephem::compile_cached(&compiler, &engine, &cache, wat(2).as_bytes()).unwrap();
    assert_eq!(hit, Outcome::Hit);
    assert_eq!(call_f(&engine, &module), 2);
}
