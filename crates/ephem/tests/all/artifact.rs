//! Artifacts on disk: damaged, foreign and wrong-CPU files are refused before anything runs;
//! memory images initialise instances, pooled memory slots never leak one instance's data to
//! the next, and memories grow past their images.

use ephem::{
    Artifact, ArtifactKey, Compiler, Engine, EngineConfig, Extern, Global, GlobalType, Instance,
    Linker, Memory, MemoryConfig, MemoryType, Module, PoolConfig, Store, Val, ValType,
};
use ephem_artifact::{Error, format};

/// A module with a memory image: "image" at 65536 + 16, and functions to read and write bytes.
const WAT: &str = r#"
(module
  (memory (export "mem") 2 8)
  (data (i32.const 65552) "image")
  (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "trap") (result i32) (i32.load (i32.const -1))))
"#;
const IMAGE_AT: i32 = 65552;

/// The deployment key these tests seal and open with.
static KEY: ArtifactKey = ArtifactKey::from_bytes([7; 32]);

fn seal(c: &ephem_module::CompiledModule) -> Vec<u8> {
    ephem_artifact::to_bytes(c, &[0; 32], &KEY)
}

fn artifact_bytes(wat: &str) -> Vec<u8> {
    seal(&Compiler::new().unwrap().compile(wat.as_bytes()).unwrap())
}

/// Writes `bytes` to a fresh file (a fresh identity, so its seal is verified) and opens it.
fn open(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Result<Artifact, Error> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    Artifact::open(&path, &KEY)
}

/// An instance in a store of its own: dropping it frees its memory slot and code.
struct Run {
    store: Store<()>,
    instance: Instance,
}

impl Run {
    fn new(module: &Module, imports: &[Extern]) -> Run {
        let mut store = Store::new(module.engine(), ());
        let instance = Instance::new(&mut store, module, imports).unwrap();
        Run { store, instance }
    }

    fn try_call(&mut self, name: &str, args: &[Val]) -> Result<Vec<Val>, ephem::Error> {
        let func = self.instance.get_func(&mut self.store, name).unwrap();
        let mut results: Vec<Val> = func
            .ty(&self.store)
            .results
            .iter()
            .map(|&t| Val::default_for(t))
            .collect();
        func.call(&mut self.store, args, &mut results)?;
        Ok(results)
    }

    fn call(&mut self, name: &str, args: &[Val]) -> Vec<Val> {
        self.try_call(name, args)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn i32(&mut self, name: &str, args: &[Val]) -> i32 {
        match self.call(name, args)[..] {
            [Val::I32(v)] => v,
            ref other => panic!("{other:?}"),
        }
    }

    fn load(&mut self, at: i32) -> i32 {
        self.i32("load", &[Val::I32(at)])
    }

    fn grow(&mut self, pages: i32) -> i32 {
        self.i32("grow", &[Val::I32(pages)])
    }

    fn store(&mut self, at: i32, byte: i32) {
        self.call("store", &[Val::I32(at), Val::I32(byte)]);
    }

    fn read_image(&mut self) -> Vec<u8> {
        (0..5).map(|i| self.load(IMAGE_AT + i) as u8).collect()
    }

    /// The address of the exported memory `mem`: which pool slot it took. (Read through
    /// `data`: `data_ptr` would let the host write, and the next reset would not trust the
    /// write marks, which these tests are also about.)
    fn base(&mut self) -> usize {
        let mem = self.instance.get_memory(&mut self.store, "mem").unwrap();
        mem.data(&self.store).as_ptr() as usize
    }
}

#[test]
fn an_artifact_file_runs_and_has_an_image() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let bytes = artifact_bytes(WAT);
    assert!(ephem_artifact::is_artifact(&bytes));
    let artifact = open(&dir, "a.ephem", &bytes).unwrap();
    assert_eq!(
        artifact.images().len(),
        1,
        "constant in-bounds segments make an image"
    );
    let image = &artifact.images()[0];
    assert_eq!(image.offset.to_native() % 4096, 0);
    assert_eq!(artifact.image_file_offset(image) % 4096, 0);
    assert_eq!(artifact.text_file_offset() % 4096, 0);

    let engine = Engine::default();
    let module = Module::from_artifact(&engine, artifact);
    let mut run = Run::new(&module, &[]);
    assert_eq!(run.read_image(), b"image");
    let trap = run.try_call("trap", &[]).unwrap_err();
    assert_eq!(
        trap.trap().unwrap().kind,
        ephem::TrapKind::MemoryOutOfBounds
    );
}

#[test]
fn damaged_artifacts_are_refused() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let bytes = artifact_bytes(WAT);
    let len = bytes.len();

    // Truncated anywhere: inside the header, after it, one byte short.
    for (i, cut) in [0, 5, 100, format::HEADER_SIZE + 10, len / 2, len - 1]
        .into_iter()
        .enumerate()
    {
        let e = open(&dir, &format!("cut{i}"), &bytes[..cut]).unwrap_err();
        match e {
            Error::Damaged(_) => {}
            Error::NotArtifact if cut == 0 => {}
            other => panic!("cut at {cut}: {other}"),
        }
    }

    // One flipped bit anywhere after the header: metadata, text, image, last byte.
    for (i, at) in [
        format::HEADER_SIZE,
        format::HEADER_SIZE + 40,
        len / 2,
        len - 1,
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let e = open(&dir, &format!("flip{i}"), &b).unwrap_err();
        assert!(matches!(e, Error::Unsealed), "{e}");
    }

    // Damaged header fields.
    let mut b = bytes.clone();
    b[0] ^= 1;
    assert!(matches!(open(&dir, "magic", &b), Err(Error::Damaged(w)) if w.contains("magic")));
    let mut b = bytes.clone();
    b[80] ^= 1; // file length
    assert!(matches!(open(&dir, "len", &b), Err(Error::Damaged(_))));
    let mut b = bytes.clone();
    b[88 + 15] = 0xff; // length of the first section, beyond the file
    assert!(
        matches!(open(&dir, "section", &b), Err(Error::Damaged(w)) if w.contains("out of bounds"))
    );
    // Not an artifact at all.
    assert!(matches!(
        open(&dir, "wasm", b"\0asm\x01\0\0\0"),
        Err(Error::NotArtifact)
    ));

    // The intact file still opens: the refusals were about the damage.
    open(&dir, "intact", &bytes).unwrap();
}

#[test]
fn artifacts_from_other_versions_and_formats_are_refused() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let bytes = artifact_bytes(WAT);

    let mut b = bytes.clone();
    b[16..48].fill(0);
    b[16..22].copy_from_slice(b"0.0.0x");
    let e = open(&dir, "version", &b).unwrap_err();
    assert!(
        matches!(e, Error::Version { ref found } if found == "0.0.0x"),
        "{e}"
    );
    assert!(e.to_string().contains(format::EPHEM_VERSION));

    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(format::FORMAT_VERSION + 1).to_le_bytes());
    assert!(matches!(
        open(&dir, "format", &b),
        Err(Error::Format { found }) if found == format::FORMAT_VERSION + 1
    ));
}

/// Intact files (valid seals) whose metadata does not fit the module are refused before
/// anything is loaded: here an export of a function the module does not have, which would put
/// a funcref past the end of the function table.
#[test]
fn artifacts_whose_metadata_does_not_fit_are_refused() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let mut c = Compiler::new().unwrap().compile(WAT.as_bytes()).unwrap();
    c.info.exports.push(ephem_module::Export {
        name: "ghost".into(),
        index: ephem_module::EntityIndex::Func(999),
    });
    let e = open(&dir, "ghost", &seal(&c)).unwrap_err();
    assert!(
        matches!(e, Error::Damaged(ref w) if w.contains("export \"ghost\"")),
        "{e}"
    );
}

#[test]
fn artifacts_for_another_cpu_are_refused() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let compiled = |edit: &dyn Fn(&mut ephem_module::Target)| {
        let mut c = Compiler::new().unwrap().compile(WAT.as_bytes()).unwrap();
        edit(&mut c.target);
        seal(&c)
    };
    // Intact files (valid seals) that claim what this machine cannot run.
    let unknown = compiled(&|t| t.cpu_features.push("has_teleport".into()));
    assert!(matches!(
        open(&dir, "unknown", &unknown),
        Err(Error::UnknownCpuFeature(f)) if f == "has_teleport"
    ));
    let arch = compiled(&|t| t.arch = "riscv64".into());
    assert!(matches!(open(&dir, "arch", &arch), Err(Error::Arch { .. })));
    // A known feature this CPU lacks, if there is one (the check itself is unit-tested with a
    // fake CPU in ephem-artifact).
    let missing = ephem_artifact::cpu::known_features()
        .find(|f| ephem_artifact::cpu::host_has(f) == Some(false));
    if let Some(f) = missing {
        let b = compiled(&|t| t.cpu_features.push(f.into()));
        assert!(matches!(open(&dir, "missing", &b), Err(Error::CpuFeature(g)) if g == f));
    }
}

/// One idle memory slot at most, so that every memory reuses the same one.
fn engine_with(map_image_at: usize, keep_resident: usize, reuse_images: bool) -> Engine {
    one_slot_engine(MemoryConfig {
        reuse_images,
        keep_resident,
        map_image_at,
        ..MemoryConfig::default()
    })
}

/// An engine with `memory`'s settings but one idle memory slot at most (and texts copied).
fn one_slot_engine(memory: MemoryConfig) -> Engine {
    Engine::with_config(EngineConfig {
        code: PoolConfig::default(),
        map_text_at: None,
        memory: MemoryConfig {
            max_idle_slots: 1,
            ..memory
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

/// An instance writes secrets inside the image, beyond it, and in grown pages; the next instance
/// in the same slot sees its own image and zeros, and so does another module after it. Under
/// every way of initialising and resetting, with and without slots keeping their images.
#[test]
fn reused_memory_slots_never_show_the_previous_instance() {
    let compiler = Compiler::new().unwrap();
    let other_wat = r#"(module (memory (export "mem") 2 8)
        (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#;
    let settings = [(0, 0), (0, 1 << 20), (usize::MAX, 0), (usize::MAX, 1 << 20)];
    for ((map_image_at, keep_resident), reuse_images) in
        settings.into_iter().flat_map(|s| [(s, true), (s, false)])
    {
        let engine = engine_with(map_image_at, keep_resident, reuse_images);
        let module = ephem::compile_with(&compiler, &engine, WAT.as_bytes()).unwrap();
        let other = ephem::compile_with(&compiler, &engine, other_wat.as_bytes()).unwrap();
        let secrets = [IMAGE_AT, IMAGE_AT + 3, 16, 65536 * 2 - 1, 65536 * 2 + 7];

        let mut first = Run::new(&module, &[]);
        let base = first.base();
        assert_eq!(first.grow(1), 2);
        for &at in &secrets {
            first.store(at, 0x5e);
        }
        assert_eq!(first.load(IMAGE_AT), 0x5e);
        drop(first);

        let mut second = Run::new(&module, &[]);
        assert_eq!(base, second.base(), "the slot was reused");
        assert_eq!(
            second.read_image(),
            b"image",
            "{map_image_at} {keep_resident}"
        );
        for at in [16, 65536 * 2 - 1] {
            assert_eq!(second.load(at), 0, "byte {at} leaked");
        }
        // The grown page is gone: the memory is back at its minimum size.
        let oob = second.try_call("load", &[Val::I32(65536 * 2 + 7)]);
        assert!(oob.is_err(), "memory did not shrink back to its minimum");
        for &at in &secrets {
            second.store(at % (65536 * 2), 0x77);
        }
        drop(second);

        // Another module in the same slot (same size, no image) sees zeros everywhere,
        // including where the first module's image was.
        let mut third = Run::new(&other, &[]);
        assert_eq!(base, third.base(), "the slot was reused");
        for at in [16, IMAGE_AT, IMAGE_AT + 4, 65536 * 2 - 1] {
            assert_eq!(third.load(at), 0, "byte {at} leaked");
        }
        assert!(
            third.try_call("load", &[Val::I32(65536 * 2)]).is_err(),
            "two pages only"
        );
        drop(third);
        // And the image comes back for its own module after that.
        let mut fourth = Run::new(&module, &[]);
        assert_eq!(fourth.read_image(), b"image");
        assert_eq!(fourth.load(16), 0);
    }
}

/// A thread's next memory of a module takes the slot the thread's last one left, not one that
/// another thread left meanwhile; a thread that exits puts its slots on the pool's list; and a
/// memory that finds none of its own among the thread's takes one from the list as before.
#[test]
fn a_thread_takes_back_the_memory_slot_it_left() {
    let engine = Engine::with_config(EngineConfig::default()).unwrap();
    let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
    let base = || Run::new(&module, &[]).base();
    let ours = base();
    let theirs = std::thread::scope(|s| s.spawn(base).join().unwrap());
    assert_ne!(ours, theirs, "this thread keeps its slot");
    assert_eq!(base(), ours, "and takes it back");
    let third = std::thread::scope(|s| s.spawn(base).join().unwrap());
    assert_eq!(third, theirs, "an exiting thread's slot goes to the list");

    // One idle slot in all: a thread whose kept slot does not fit puts it on the list and
    // takes it from there.
    let one = engine_with(0, 0, true);
    let module = ephem::Module::new(&one, WAT.as_bytes()).unwrap();
    let other = ephem::Module::new(
        &one,
        br#"(module (memory (export "mem") 2 8) (func (export "f")))"#,
    )
    .unwrap();
    let first = Run::new(&module, &[]).base();
    assert_eq!(Run::new(&other, &[]).base(), first, "repurposed");
    assert_eq!(Run::new(&module, &[]).base(), first);
}

/// A thread that runs another module in between still takes back the slot it left, even while
/// another thread runs the first module: its kept slots stay its own when it makes a memory of
/// another kind (they once went to the pool's list then, where the other thread took them).
#[test]
fn a_thread_keeps_its_slots_while_it_runs_other_modules() {
    let engine = Engine::with_config(EngineConfig::default()).unwrap();
    let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
    let other = ephem::Module::new(
        &engine,
        br#"(module (memory (export "mem") 2 8) (data (i32.const 8) "other") (func (export "f")))"#,
    )
    .unwrap();
    let ours = Run::new(&module, &[]).base();
    let between = Run::new(&other, &[]).base();
    assert_ne!(ours, between);
    let (started, finish) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        let theirs = s.spawn(|| {
            let mut run = Run::new(&module, &[]);
            let base = run.base();
            started.wait();
            // Still running while this thread makes its next memory of the module.
            finish.wait();
            base
        });
        started.wait();
        let again = Run::new(&module, &[]).base();
        finish.wait();
        let theirs = theirs.join().unwrap();
        assert_ne!(theirs, ours, "another thread took this thread's kept slot");
        assert_eq!(again, ours, "this thread did not take its slot back");
    });
}

/// Two modules whose images differ only in their bytes (same size, same place) take turns in
/// one slot, and each instance writes every page of its image: the next instance of either sees
/// its own image, whether a reset copied the pages back from the file, from the slot's
/// pristine copies (kept per image, so never the other module's), or, past the copies the slot
/// keeps, from the file again.
#[test]
fn written_image_pages_come_back_as_their_own_image() {
    // 24 pages of image (more than a slot keeps pristine copies of), each page starting with
    // its module's letter and its number.
    let wat = |letter: char| {
        let mut w = String::from(
            r#"(module (memory (export "mem") 2)
              (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0)))
              (func (export "scribble") (local $p i32)
                (loop $l
                  (i32.store8 (local.get $p) (i32.const 0xee))
                  (i32.store8 (i32.add (local.get $p) (i32.const 1)) (i32.const 0xee))
                  (local.set $p (i32.add (local.get $p) (i32.const 4096)))
                  (br_if $l (i32.lt_u (local.get $p) (i32.const 98304)))))"#,
        );
        // Whole pages of data, so that the memory has an image.
        let fill = letter.to_string().repeat(4094);
        for page in 0..24 {
            w += &format!(
                "(data (i32.const {}) \"{letter}\\{page:02x}{fill}\")",
                page * 4096
            );
        }
        w + ")"
    };
    let engine = engine_with(0, 0, true);
    let compiler = Compiler::new().unwrap();
    let modules =
        ['a', 'b'].map(|l| ephem::compile_with(&compiler, &engine, wat(l).as_bytes()).unwrap());
    let mut base = None;
    // a a b b a b a a ...: a slot finds its own image again, and the other's.
    for round in 0..16usize {
        let which = [0, 0, 1, 1, 0, 1][round % 6];
        let mut run = Run::new(&modules[which], &[]);
        assert_eq!(*base.get_or_insert(run.base()), run.base(), "one slot");
        let letter = [b'a', b'b'][which] as i32;
        for page in 0..24 {
            let at = page * 4096;
            assert_eq!(
                (run.load(at), run.load(at + 1)),
                (letter, page),
                "round {round}, page {page}"
            );
        }
        run.call("scribble", &[]);
        assert_eq!(run.load(4096), 0xee);
    }
}

/// A memory without an image, larger than the part zeroed whole: its reset reads the page map
/// and zeroes what the instance wrote in place, up to a bound, discarding the rest. Instances
/// in one slot write a different pattern each round (more pages than the bound in some rounds,
/// past the mark the slot learned in others, one sparse page, in grown pages), and each finds
/// every byte zero first; with the page map off (a bound of 0) too.
#[test]
fn resets_by_page_map_leave_nothing_behind() {
    const SPREAD: &str = r#"(module (memory (export "mem") 256 512)
      ;; Writes `v` at every `step`-th byte from `from` up to `to`.
      (func (export "fill") (param $from i32) (param $to i32) (param $step i32) (param $v i32)
        (loop $l
          (i32.store8 (local.get $from) (local.get $v))
          (local.set $from (i32.add (local.get $from) (local.get $step)))
          (br_if $l (i32.lt_u (local.get $from) (local.get $to)))))
      ;; The OR of the bytes `fill` would write: reads no other page, so that the slot learns
      ;; only where instances write.
      (func (export "probe") (param $from i32) (param $to i32) (param $step i32) (result i32)
        (local $acc i32)
        (loop $l
          (local.set $acc (i32.or (local.get $acc) (i32.load8_u (local.get $from))))
          (local.set $from (i32.add (local.get $from) (local.get $step)))
          (br_if $l (i32.lt_u (local.get $from) (local.get $to))))
        (local.get $acc))
      ;; The OR of every word of the memory.
      (func (export "or_all") (result i32) (local $at i32) (local $acc i32)
        (loop $l
          (local.set $acc (i32.or (local.get $acc) (i32.load (local.get $at))))
          (local.set $at (i32.add (local.get $at) (i32.const 4)))
          (br_if $l (i32.lt_u (local.get $at) (i32.mul (memory.size) (i32.const 65536)))))
        (local.get $acc))
      (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#;
    // Dense in the first megabyte for a while (the slot learns a mark there), then every page
    // (past the mark), a page in 7, one page far up, every 4th of 2 MiB.
    let patterns = |round: i32| {
        [
            (0, 1 << 20, 4096),
            (1, 1 << 20, 8193),
            (2, 1 << 20, 4096),
            (0, 256 * 65536, 4096),
            (5, 256 * 65536, 7 * 4096),
            (15 << 20, 16 << 20, 1 << 20),
            (round, 2 << 20, 4 * 4096),
        ][round as usize % 7]
    };
    let grown = (256 * 65536, 260 * 65536, 4093);
    for resident_dirty_bytes in [0, 64 << 10, 2 << 20] {
        let engine = one_slot_engine(MemoryConfig {
            resident_dirty_bytes,
            ..MemoryConfig::default()
        });
        let module = ephem::Module::new(&engine, SPREAD.as_bytes()).unwrap();
        let mut base = None;
        let probe = |run: &mut Run, (from, to, step): (i32, i32, i32)| {
            run.i32("probe", &[from, to, step].map(Val::I32))
        };
        for round in 0..29i32 {
            let what = format!("{resident_dirty_bytes}: round {round}");
            let mut run = Run::new(&module, &[]);
            assert_eq!(*base.get_or_insert(run.base()), run.base(), "one slot");
            if round > 0 {
                assert_eq!(probe(&mut run, patterns(round - 1)), 0, "{what}");
            }
            if round % 4 == 0 && round > 0 {
                // What the last grown instance wrote past the minimum is zeros when grown again
                // (its slot was reset, then shrunk back to the memory's size).
                assert_eq!(run.grow(4), 256);
                assert_eq!(probe(&mut run, grown), 0, "grown pages, {what}");
            }
            let (from, to, step) = patterns(round);
            run.call("fill", &[from, to, step, 0x40 + round].map(Val::I32));
            assert_ne!(probe(&mut run, patterns(round)), 0);
            if round % 4 == 3 {
                assert_eq!(run.grow(4), 256);
                run.call("fill", &[grown.0, grown.1, grown.2, 9].map(Val::I32));
            }
        }
        let mut last = Run::new(&module, &[]);
        assert_eq!(
            last.i32("or_all", &[]),
            0,
            "{resident_dirty_bytes}: at the end"
        );
    }
}

/// Every way wasm and the host write a memory, at addresses that straddle host pages (with
/// static offsets whose remainder runs into the next page too), inside an image and outside
/// it: the next instance in the same slot finds the memory exactly as a fresh one (the same
/// checksum of every byte), whichever way the slot is initialised and reset. Resets trust the
/// write marks generated code and the runtime set (see `ephem_module::MARK_SHIFT`) unless
/// the host had the raw bytes (`data_mut`), which is written here too.
#[test]
fn every_way_of_writing_is_undone_for_the_next_instance() {
    // (name, the operator with `{}` where its offset goes, the value as a constant).
    let stores = [
        ("i32", "i32.store {}", "(i32.const -1)"),
        ("i32_8", "i32.store8 {}", "(i32.const -1)"),
        ("i32_16", "i32.store16 {}", "(i32.const -1)"),
        ("i64", "i64.store {}", "(i64.const -1)"),
        ("i64_8", "i64.store8 {}", "(i64.const -1)"),
        ("i64_16", "i64.store16 {}", "(i64.const -1)"),
        ("i64_32", "i64.store32 {}", "(i64.const -1)"),
        ("f32", "f32.store {}", "(f32.const -1)"),
        ("f64", "f64.store {}", "(f64.const -1)"),
        ("v128", "v128.store {}", "(v128.const i64x2 -1 -1)"),
        ("lane8", "v128.store8_lane {} 3", "(v128.const i64x2 -1 -1)"),
        (
            "lane16",
            "v128.store16_lane {} 1",
            "(v128.const i64x2 -1 -1)",
        ),
        (
            "lane32",
            "v128.store32_lane {} 2",
            "(v128.const i64x2 -1 -1)",
        ),
        (
            "lane64",
            "v128.store64_lane {} 1",
            "(v128.const i64x2 -1 -1)",
        ),
    ];
    // Offsets: none, one whose remainder plus any size crosses a page, one of pages.
    let offsets = [0u32, 4093, 3 * 4096 + 4090];
    let mut wat = String::from(
        r#"(module (memory (export "mem") 3 3)
        (data (i32.const 65536) "image bytes, not zeros")
        (data (i32.const 70000) "more of the image")
        (data $passive "passive segment bytes")
        (func (export "fill") (param i32 i32) (memory.fill (local.get 0) (i32.const 255) (local.get 1)))
        (func (export "copy") (param i32 i32) (memory.copy (local.get 0) (i32.const 65536) (local.get 1)))
        (func (export "init") (param i32 i32) (memory.init $passive (local.get 0) (i32.const 0) (local.get 1)))
        (func (export "sum") (result i64) (local $at i32) (local $acc i64)
          (loop $l
            (local.set $acc (i64.add (i64.mul (local.get $acc) (i64.const 31))
              (i64.load8_u (local.get $at))))
            (local.set $at (i32.add (local.get $at) (i32.const 1)))
            (br_if $l (i32.lt_u (local.get $at) (i32.const 196608))))
          (local.get $acc))
        "#,
    );
    for (name, op, value) in stores {
        for offset in offsets {
            let op = op.replace("{}", &format!("offset={offset}"));
            wat += &format!(
                "(func (export \"{name}_{offset}\") (param i32) ({op} (local.get 0) {value}))\n"
            );
        }
    }
    wat += ")";
    let end = 3 * 65536;
    // Where writes begin (before any offset): page ends and starts, in the image and not.
    let addresses = [
        0,
        4095,
        4093,
        4089,
        4081,
        65536 - 3,
        65536 + 4094,
        70000 - 4,
        2 * 65536 - 7,
    ];
    let settings = [
        (0, 128 << 10, 2 << 20),
        (usize::MAX, 0, 0),
        (0, 0, 2 << 20),
        (usize::MAX, 1 << 20, 64 << 10),
    ];
    for (map_image_at, keep_resident, resident_dirty_bytes) in settings {
        let engine = one_slot_engine(MemoryConfig {
            map_image_at,
            keep_resident,
            resident_dirty_bytes,
            ..MemoryConfig::default()
        });
        let module = ephem::Module::new(&engine, wat.as_bytes()).unwrap();
        let mut fresh = Run::new(&module, &[]);
        let sum_of = |run: &mut Run| match run.call("sum", &[])[..] {
            [Val::I64(v)] => v,
            ref other => panic!("{other:?}"),
        };
        let (base, sum) = (fresh.base(), sum_of(&mut fresh));
        drop(fresh);
        let setting = format!("{map_image_at} {keep_resident} {resident_dirty_bytes}");
        let check = |what: &str, write: &mut dyn FnMut(&mut Run)| {
            let mut run = Run::new(&module, &[]);
            assert_eq!(run.base(), base, "one slot");
            write(&mut run);
            assert_ne!(sum_of(&mut run), sum, "{what} wrote nothing ({setting})");
            drop(run);
            let mut next = Run::new(&module, &[]);
            assert_eq!(
                sum_of(&mut next),
                sum,
                "{what} left data behind ({setting})"
            );
        };
        for (name, _, _) in stores {
            for offset in offsets {
                for at in addresses {
                    if at + offset as i32 + 16 > end {
                        continue;
                    }
                    let export = format!("{name}_{offset}");
                    check(&format!("{export} at {at}"), &mut |run| {
                        run.call(&export, &[Val::I32(at)]);
                    });
                }
            }
        }
        for at in addresses {
            for len in [1, 3, 17, 4097] {
                for bulk in ["fill", "copy", "init"] {
                    let len = if bulk == "init" { len.min(21) } else { len };
                    check(&format!("{bulk} of {len} at {at}"), &mut |run| {
                        run.call(bulk, &[Val::I32(at), Val::I32(len)]);
                    });
                }
                check(&format!("Memory::write of {len} at {at}"), &mut |run| {
                    let mem = run.instance.get_memory(&mut run.store, "mem").unwrap();
                    mem.write(&mut run.store, at as usize, &vec![0xee; len as usize])
                        .unwrap();
                });
                check(&format!("data_mut at {at}"), &mut |run| {
                    let mem = run.instance.get_memory(&mut run.store, "mem").unwrap();
                    mem.data_mut(&mut run.store)[at as usize + len as usize - 1] ^= 0x5a;
                });
            }
        }
    }
}

/// Code compiled without write marks (`Compiler::without_write_marks`) writes a memory
/// unmarked, whether it defines the memory or imports it beside marked code: the memory's
/// reset then reads it, and the next instance in the slot finds zeros.
#[test]
fn memories_written_by_code_without_marks_are_reset_whole() {
    const WAT: &str = r#"(module (memory (export "mem") 4)
      (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
      (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#;
    const IMPORTS: &str = r#"(module (import "env" "mem" (memory 4))
      (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1))))"#;
    let unmarked = Compiler::new().unwrap().without_write_marks();
    let marked = Compiler::new().unwrap();
    for keep_resident in [0, 1 << 20] {
        let engine = one_slot_engine(MemoryConfig {
            keep_resident,
            ..MemoryConfig::default()
        });
        let plain = ephem::compile_with(&unmarked, &engine, WAT.as_bytes()).unwrap();
        let checker = ephem::compile_with(&marked, &engine, WAT.as_bytes()).unwrap();
        let secrets = [100, 70000, 4 * 65536 - 1];
        let mut run = Run::new(&plain, &[]);
        for at in secrets {
            run.store(at, 0x5e);
        }
        drop(run);
        let mut next = Run::new(&checker, &[]);
        for at in secrets {
            assert_eq!(next.load(at), 0, "byte {at} leaked ({keep_resident})");
        }
        drop(next);

        // An imported memory that marked and unmarked code both write.
        let importer_marked = ephem::compile_with(&marked, &engine, IMPORTS.as_bytes()).unwrap();
        let importer_plain = ephem::compile_with(&unmarked, &engine, IMPORTS.as_bytes()).unwrap();
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, MemoryType::new(4, None)).unwrap();
        for (module, at) in [(&importer_marked, 100), (&importer_plain, 70000)] {
            let instance = Instance::new(&mut store, module, &[memory.into()]).unwrap();
            let store_fn = instance.get_func(&mut store, "store").unwrap();
            store_fn
                .call(&mut store, &[Val::I32(at), Val::I32(0x77)], &mut [])
                .unwrap();
        }
        drop(store);
        let mut next = Run::new(&checker, &[]);
        for at in [100, 70000] {
            assert_eq!(
                next.load(at),
                0,
                "imported: byte {at} leaked ({keep_resident})"
            );
        }
    }
}

#[test]
fn memories_grow_beyond_their_image() {
    for map_image_at in [0, usize::MAX] {
        let engine = engine_with(map_image_at, 64 << 10, true);
        let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
        let mut run = Run::new(&module, &[]);
        assert_eq!(run.grow(3), 2);
        let top = 5 * 65536 - 1;
        assert_eq!(run.load(top), 0);
        run.store(top, 9);
        run.store(IMAGE_AT, b'I' as i32);
        assert_eq!(run.load(top), 9);
        assert_eq!(run.read_image(), b"Image");
        // Past the maximum (8 pages) growth fails and nothing changes.
        assert_eq!(run.grow(4), -1);
        assert_eq!(run.load(top), 9);
    }
}

/// Code mapped straight from the artifact file runs, traps, and is refused nothing.
#[test]
fn text_mapped_from_the_file_runs_and_traps() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    let engine = Engine::with_config(EngineConfig {
        code: PoolConfig {
            prefault_slots: 0,
            ..PoolConfig::default()
        },
        map_text_at: Some(0),
        ..EngineConfig::default()
    })
    .unwrap();
    let artifact = open(&dir, "m.ephem", &artifact_bytes(WAT)).unwrap();
    let module = Module::from_artifact(&engine, artifact);
    for _ in 0..3 {
        let mut run = Run::new(&module, &[]);
        assert_eq!(run.read_image(), b"image");
        let e = run.try_call("trap", &[]).unwrap_err();
        assert_eq!(e.trap().unwrap().kind, ephem::TrapKind::MemoryOutOfBounds);
    }
    assert_eq!(engine.code_pool().stats().slots, 0, "nothing was copied");
}

/// With room in the pool, each kind of memory keeps slots of its own: alternating modules do not
/// take each other's slot (which would cost a resize and an image swap every time).
#[test]
fn alternating_modules_keep_their_own_memory_slots() {
    let engine = Engine::default();
    let a = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
    let b = ephem::Module::new(&engine, br#"(module (memory (export "mem") 3))"#).unwrap();
    let base = |m: &Module| Run::new(m, &[]).base();
    let (a0, b0) = (base(&a), base(&b));
    assert_ne!(a0, b0);
    for _ in 0..3 {
        assert_eq!(base(&a), a0);
        assert_eq!(base(&b), b0);
    }
}

/// A pool that keeps no idle slot still makes memories (each a fresh reservation).
#[test]
fn a_pool_without_idle_slots_works() {
    let engine = Engine::with_config(EngineConfig {
        memory: MemoryConfig {
            max_idle_slots: 0,
            ..MemoryConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    let module = ephem::Module::new(&engine, WAT.as_bytes()).unwrap();
    for _ in 0..3 {
        assert_eq!(Run::new(&module, &[]).read_image(), b"image");
    }
}

/// A module that imports its memory, with segments on both sides of a gap inside one image
/// page, and an element segment placed by an imported global (so that instantiation can be
/// made to fail before the data segments).
const IMPORTS_MEMORY: &str = r#"
(module
  (import "env" "mem" (memory 2 8))
  (import "env" "at" (global i32))
  (table 1 funcref)
  (func $f)
  (elem (global.get 0) $f)
  (data (i32.const 65552) "ima")
  (data (i32.const 65556) "e")
  (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
  (export "mem" (memory 0)))
"#;

fn bytes_at(store: &Store<()>, memory: Memory, at: usize, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    memory.read(store, at, &mut buf).unwrap();
    buf
}

/// An imported memory gets the module's image when it is fresh (whatever an idle slot under it
/// last held), only the segments' bytes when it already holds data, and nothing when
/// instantiation fails before the data segments; a fresh memory over an idle image reads zeros.
#[test]
fn imported_memories_get_images_only_as_segments_would_write_them() {
    let compiler = Compiler::new().unwrap();
    let no_image = r#"(module (import "env" "mem" (memory 2 8))
        (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#;
    let settings = [(0, 0), (0, 1 << 20), (usize::MAX, 1 << 20)];
    let ty = MemoryType::new(2, Some(8));
    for ((map_image_at, keep_resident), reuse_images) in
        settings.into_iter().flat_map(|s| [(s, true), (s, false)])
    {
        let what = format!("map at {map_image_at}, keep {keep_resident}, reuse {reuse_images}");
        let engine = engine_with(map_image_at, keep_resident, reuse_images);
        let module = ephem::compile_with(&compiler, &engine, IMPORTS_MEMORY.as_bytes()).unwrap();
        let plain = ephem::compile_with(&compiler, &engine, no_image.as_bytes()).unwrap();
        let image = b"ima\0e";
        let at = |store: &mut Store<()>, v: i32| -> Extern {
            let ty = GlobalType {
                ty: ValType::I32,
                mutable: false,
            };
            Global::new(store, ty, Val::I32(v)).unwrap().into()
        };

        // Fresh memories made by the linker, twice (the second in the slot the first left,
        // maybe with its image): the image, and nothing the first instance wrote.
        let mut fresh = Linker::new(&engine);
        for round in 0..2 {
            let mut store = Store::new(&engine, ());
            let global = at(&mut store, 0);
            fresh.allow_shadowing(true);
            fresh.define(&store, "env", "at", global).unwrap();
            fresh.define_unknown_imports_as_traps(&module).unwrap();
            let instance = fresh.instantiate(&mut store, &module).unwrap();
            let memory = instance.get_memory(&mut store, "mem").unwrap();
            assert_eq!(
                bytes_at(&store, memory, IMAGE_AT as usize, 5),
                image,
                "{what}"
            );
            let mut run = Run { store, instance };
            assert_eq!(run.load(16), 0, "{what} round {round}");
            for at in [16, IMAGE_AT, IMAGE_AT + 3] {
                run.store(at, 0x5e);
            }
        }

        // Instantiation fails at the element segment: the fresh memory (over the slot that
        // kept the image, where it is kept) must not show the data segments.
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, ty).unwrap();
        let global = at(&mut store, 5);
        assert!(Instance::new(&mut store, &module, &[memory.into(), global]).is_err());
        assert_eq!(
            bytes_at(&store, memory, IMAGE_AT as usize, 5),
            [0; 5],
            "{what}"
        );
        drop(store);

        // A fresh memory for a module without an image, and one the host makes: zeros.
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, ty).unwrap();
        let mut run = Run {
            instance: Instance::new(&mut store, &plain, &[memory.into()]).unwrap(),
            store,
        };
        assert_eq!(run.load(IMAGE_AT), 0, "{what}");
        drop(run);
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, ty).unwrap();
        assert_eq!(
            bytes_at(&store, memory, IMAGE_AT as usize - 16, 32),
            [0; 32],
            "{what}"
        );
        drop(store);

        // A memory that already holds data: the segments' bytes are written, the gap between
        // them and everything around them are left alone.
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, ty).unwrap();
        memory
            .write(&mut store, IMAGE_AT as usize - 1, &[0xaa; 7])
            .unwrap();
        memory.write(&mut store, 16, &[0xbb]).unwrap();
        let global = at(&mut store, 0);
        let instance = Instance::new(&mut store, &module, &[memory.into(), global]).unwrap();
        let expected = [0xaa, b'i', b'm', b'a', 0xaa, b'e', 0xaa];
        assert_eq!(
            bytes_at(&store, memory, IMAGE_AT as usize - 1, 7),
            expected,
            "{what}"
        );
        assert_eq!(Run { store, instance }.load(16), 0xbb, "{what}");
    }
}

/// A module's image mapped over a slot that holds another, larger image of the same memory
/// size: what the old image had outside the new one reads as zeros.
#[test]
fn an_image_replacing_a_larger_one_leaves_only_zeros_around_it() {
    let wide = r#"(module (memory (export "mem") 2 2)
        (data (i32.const 16) "AAAA") (data (i32.const 12304) "aaaa"))"#;
    let narrow = r#"(module (memory (export "mem") 2 2) (data (i32.const 4112) "BB")
        (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#;
    for (map_image_at, reuse_images) in [(0, true), (0, false), (usize::MAX, true)] {
        let engine = engine_with(map_image_at, 1 << 20, reuse_images);
        let wide = ephem::Module::new(&engine, wide.as_bytes()).unwrap();
        let narrow = ephem::Module::new(&engine, narrow.as_bytes()).unwrap();
        drop(Run::new(&wide, &[]));
        let mut run = Run::new(&narrow, &[]);
        let what = format!("map at {map_image_at}, reuse {reuse_images}");
        for (at, byte) in [(16, 0), (12304, 0), (4112, b'B'), (4113, b'B'), (4114, 0)] {
            assert_eq!(run.load(at), byte as i32, "byte {at}: {what}");
        }
    }
}

/// An artifact keeps only the data segments no image holds, so that opening and instantiating
/// do not grow with the segments an image applies; the ones it leaves out still behave as
/// dropped active segments (`memory.init` of zero bytes works, of more traps; `data.drop` does
/// nothing), and the passive ones it keeps work by their module index.
#[test]
fn segments_an_image_holds_are_left_out_and_behave_as_dropped() {
    let mut wat = String::from("(module (memory (export \"mem\") 1)\n");
    for k in 0..1000 {
        wat += &format!("(data (i32.const {}) \"{}\")\n", k * 4, k % 10);
    }
    wat += r#"(data $p "passive")
      (func (export "init") (param i32 i32) (memory.init 1000 (local.get 0) (i32.const 0) (local.get 1)))
      (func (export "init_active") (param i32) (memory.init 7 (i32.const 0) (i32.const 0) (local.get 0)))
      (func (export "drop_active") (data.drop 7))
      (func (export "drop_passive") (data.drop 1000))
      (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#;
    let tmp = ephem_test_support::temp_dir();
    let artifact = open(tmp.path(), "segments.ephem", &artifact_bytes(&wat)).unwrap();
    assert_eq!(artifact.images().len(), 1);
    assert_eq!(
        artifact.info().datas.len(),
        1,
        "only the passive segment is kept"
    );
    assert_eq!(artifact.data_slot(1000), Some(0));
    assert_eq!(artifact.data_slot(7), None);

    let engine = Engine::default();
    let module = Module::from_artifact(&engine, artifact);
    let mut run = Run::new(&module, &[]);
    assert_eq!(run.load(4 * 999), i32::from(b'9'));
    run.call("init_active", &[Val::I32(0)]);
    let trap = run.try_call("init_active", &[Val::I32(1)]).unwrap_err();
    assert_eq!(
        trap.trap().unwrap().kind,
        ephem::TrapKind::MemoryOutOfBounds
    );
    run.call("drop_active", &[]);
    run.call("init", &[Val::I32(8000), Val::I32(7)]);
    assert_eq!(run.load(8000), i32::from(b'p'));
    assert_eq!(run.load(8006), i32::from(b'e'));
    run.call("drop_passive", &[]);
    let trap = run
        .try_call("init", &[Val::I32(8000), Val::I32(1)])
        .unwrap_err();
    assert_eq!(
        trap.trap().unwrap().kind,
        ephem::TrapKind::MemoryOutOfBounds
    );
    run.call("init", &[Val::I32(8000), Val::I32(0)]);
}

/// Texts keep their code memory when released (an arena region when mapped from the file, a
/// code slot when copied), and the next load of the same file takes it back as it is. Two
/// artifacts of the same size (so they compete for the same regions and slots), loaded in turn
/// many times, each run their own code; a file replaced by another at the same path (a new
/// file, as the cache replaces entries) runs the new code.
#[test]
fn text_memory_taken_back_runs_its_own_code_never_another() {
    for map_text_at in [Some(0), Some(usize::MAX)] {
        let tmp = ephem_test_support::temp_dir();
        let wat = |n: i32| format!(r#"(module (func (export "f") (result i32) i32.const {n}))"#);
        let write = |name: &str, n: i32| {
            let path = tmp.path().join(name);
            ephem_artifact::write_atomic(&path, &artifact_bytes(&wat(n))).unwrap();
            path
        };
        let (a, b) = (write("a.ephem", 1111), write("b.ephem", 2222));
        let engine = Engine::with_config(EngineConfig {
            map_text_at,
            ..EngineConfig::default()
        })
        .unwrap();
        let prefaulted = engine.code_pool().stats().slots;
        let call = |path: &std::path::Path| {
            let module = Module::from_artifact_file(&engine, path, &KEY).unwrap();
            Run::new(&module, &[]).i32("f", &[])
        };
        for round in 0..200 {
            let (first, second) = if round % 3 == 0 { (&b, &a) } else { (&a, &b) };
            let want = |p: &std::path::Path| if p == a { 1111 } else { 2222 };
            assert_eq!(call(first), want(first), "{map_text_at:?}, round {round}");
            assert_eq!(call(second), want(second), "{map_text_at:?}, round {round}");
        }
        // The same path, a new file with other code.
        let replaced = write("c.ephem", 3333);
        std::fs::rename(&replaced, &a).unwrap();
        for _ in 0..3 {
            assert_eq!(call(&a), 3333, "{map_text_at:?}");
            assert_eq!(call(&b), 2222, "{map_text_at:?}");
        }
        let made = engine.code_pool().stats().slots - prefaulted;
        if map_text_at == Some(0) {
            assert_eq!(made, 0, "nothing was copied");
        } else {
            // At most a slot per text (three), not one per load.
            assert!(made <= 3, "{made} code slots made");
        }
    }
}

/// With `reuse_texts` off (what `bench fresh --no-text-reuse` measures), every load writes its
/// text into a slot again; on, loads after the first take it back. Counted by the dual write
/// view's moves, one every second writing load of a slot here.
#[test]
fn loads_write_their_text_again_only_when_texts_are_not_reused() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().to_path_buf();
    for reuse_texts in [true, false] {
        let engine = Engine::with_config(EngineConfig {
            code: PoolConfig {
                remap_every: 1,
                ..PoolConfig::with_strategy(ephem::Strategy::Dual)
            },
            map_text_at: Some(usize::MAX),
            reuse_texts,
            ..EngineConfig::default()
        })
        .unwrap();
        let artifact = open(&dir, "m.ephem", &artifact_bytes(WAT)).unwrap();
        let module = Module::from_artifact(&engine, artifact);
        for _ in 0..10 {
            assert_eq!(Run::new(&module, &[]).read_image(), b"image");
        }
        let moves = engine.code_pool().stats().write_view_remaps;
        if reuse_texts {
            assert_eq!(moves, 0, "one load wrote");
        } else {
            assert!(moves >= 4, "{moves} moves: each load wrote");
        }
    }
}

/// Modules compiled in this process (memory files, made and dropped one after another) with
/// other constants, many rounds over a few at a time: each runs its own code, whatever slot
/// an earlier one left its text in.
#[test]
fn modules_made_in_memory_never_run_each_others_code() {
    let engine = Engine::default();
    let compiler = Compiler::new().unwrap();
    let module = |n: i32| {
        let wat = format!(r#"(module (func (export "f") (result i32) i32.const {n}))"#);
        Module::from_artifact(
            &engine,
            Artifact::from_compiled(&compiler.compile(wat.as_bytes()).unwrap()).unwrap(),
        )
    };
    for round in 0..100 {
        let live: Vec<(i32, Module)> = (0..3)
            .map(|k| (round * 3 + k, module(round * 3 + k)))
            .collect();
        for (n, m) in live.iter().chain(live.iter().rev()) {
            assert_eq!(Run::new(m, &[]).i32("f", &[]), *n, "round {round}");
        }
    }
}

/// A module with thousands of trap sites and a text too large to be read on open: finding a
/// trap reads the trap table's index and one block of it (see the format). Every site is found
/// with its kind, in the first, a middle and the last block, and no other offset is; and a trap
/// through the runtime names its kind.
#[test]
fn traps_are_found_through_the_trap_tables_index() {
    let mut wat = String::from("(module (memory 1)\n");
    for i in 0..3000 {
        let loads = (1..6)
            .map(|k| format!("(i32.load offset={} (local.get 0))", i * 4 + k))
            .fold("(local.get 0)".to_string(), |acc, l| {
                format!("(i32.xor {acc} {l})")
            });
        wat += &format!(
            "(func $f{i} (param i32) (result i32) (i32.div_s {loads} (i32.load (local.get 0))))\n"
        );
    }
    wat += "(func (export \"trap\") (result i32) (call $f2999 (i32.const -1))))";
    let compiled = Compiler::new().unwrap().compile(wat.as_bytes()).unwrap();
    assert!(compiled.traps.len() > 3 * format::TRAP_BLOCK);
    let dir = ephem_test_support::temp_dir();
    let bytes = ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY);
    // Read-only, as the cache writes entries: the first open verifies the file (and reads the
    // whole table), the second remembers that and reads neither.
    let path = dir.path().join("many.ephem");
    ephem_artifact::write_atomic(&path, &bytes).unwrap();
    drop(Artifact::open(&path, &KEY).unwrap());
    let artifact = Artifact::open(&path, &KEY).unwrap();
    let n = compiled.traps.len();
    for &(at, kind) in compiled.traps[..20]
        .iter()
        .chain(&compiled.traps[n / 2 - 10..n / 2 + 10])
        .chain(&compiled.traps[n - 20..])
    {
        assert_eq!(artifact.trap_at(at), Some(kind), "site {at}");
    }
    let sites: std::collections::HashSet<u32> = compiled.traps.iter().map(|t| t.0).collect();
    let others = (0..compiled.text.len() as u32)
        .step_by(97)
        .filter(|o| !sites.contains(o));
    for at in others.take(2000) {
        assert_eq!(artifact.trap_at(at), None, "offset {at}");
    }

    let engine = Engine::default();
    let module = Module::from_artifact(&engine, artifact);
    let mut run = Run::new(&module, &[]);
    let e = run.try_call("trap", &[]).unwrap_err();
    assert_eq!(
        e.trap().map(|t| t.kind),
        Some(ephem::TrapKind::MemoryOutOfBounds),
        "{e}"
    );
}
