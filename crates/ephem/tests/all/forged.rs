//! Forged artifacts: metadata edited and sealed again with the key (what an attacker who holds
//! the key, or a user of `open_unverified`, can make) is refused with a clear error or opens and
//! instantiates without a panic or a wild jump: never trusted to index out of bounds.

use ephem::{Artifact, ArtifactKey, Compiler, Engine, Linker, Module, Store};
use ephem_artifact::format;
use ephem_module::{
    CompiledModule, ConstExpr, EntityIndex, Export, ImportKind, SegmentMode, TrapKind, ValType,
};

static KEY: ArtifactKey = ArtifactKey::from_bytes([5; 32]);

/// Something of every kind the metadata describes: imports of each sort, an active and a
/// passive data segment, active, passive and declared element segments, globals initialised
/// from constants, an import and a function reference, exports of each sort, names.
const WAT: &str = r#"(module
  (import "env" "f" (func $imp (param i32) (result i32)))
  (import "env" "g" (global $gimp i32))
  (memory (export "mem") 1 4)
  (table (export "tab") 4 funcref)
  (global $a (export "a") i32 (global.get $gimp))
  (global $r funcref (ref.func $two))
  (data (i32.const 16) "active")
  (data $p "passive segment: thirty-one by.")
  (elem (i32.const 0) $one $two)
  (elem $pe func $one)
  (elem declare func $three)
  (func $one (result i32) i32.const 1)
  (func $two (result i32) i32.const 2)
  (func $three (result i32) (ref.func $three) drop i32.const 3)
  (func (export "run") (result i32)
    (memory.init $p (i32.const 100) (i32.const 0) (i32.const 31))
    (i32.add (call_indirect (result i32) (i32.const 1)) (call $imp (i32.const 40)))))"#;

fn compiled() -> CompiledModule {
    Compiler::new().unwrap().compile(WAT.as_bytes()).unwrap()
}

fn open_bytes(name: &str, bytes: &[u8]) -> Result<Artifact, ephem_artifact::Error> {
    let tmp = ephem_test_support::temp_dir();
    let path = tmp.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    Artifact::open(&path, &KEY)
}

fn forge(edit: impl FnOnce(&mut CompiledModule)) -> Result<Artifact, ephem_artifact::Error> {
    let mut c = compiled();
    edit(&mut c);
    open_bytes(
        "forged.ephem",
        &ephem_artifact::to_bytes(&c, &[0; 32], &KEY),
    )
}

fn run(artifact: Artifact) -> Result<i32, ephem::Error> {
    instantiate(artifact, true)
}

/// Instantiates the module with its imports, and calls `run` if `call`.
fn instantiate(artifact: Artifact, call: bool) -> Result<i32, ephem::Error> {
    let engine = Engine::default();
    let module = Module::from_artifact(&engine, artifact);
    let mut linker = Linker::new(&engine);
    linker.func_wrap("env", "f", |x: i32| x)?;
    let mut store = Store::new(&engine, ());
    let g = ephem::Global::new(
        &mut store,
        ephem::GlobalType {
            ty: ValType::I32,
            mutable: false,
        },
        ephem::Val::I32(9),
    )?;
    linker.define(&store, "env", "g", g)?;
    let instance = linker.instantiate(&mut store, &module)?;
    if !call {
        return Ok(0);
    }
    let run = instance.get_typed_func::<(), i32>(&mut store, "run")?;
    run.call(&mut store, ())
}

#[test]
fn the_intact_module_runs() {
    assert_eq!(run(forge(|_| {}).unwrap()).unwrap(), 42);
}

/// Each forgery, named after what it breaks, is refused when the file is opened, with an
/// error that says the metadata is damaged. The first five are the crashes the issue reproduced.
#[test]
fn forged_metadata_is_refused_at_open() {
    type Edit = Box<dyn Fn(&mut CompiledModule)>;
    let export = |index| {
        Box::new(move |c: &mut CompiledModule| {
            c.info.exports.push(Export {
                name: "forged".into(),
                index,
            })
        }) as Edit
    };
    let forgeries: Vec<(&str, Edit)> = vec![
        (
            "export of a function that is not there",
            export(EntityIndex::Func(999)),
        ),
        (
            "function code outside the text",
            Box::new(|c| c.funcs[0].offset = c.text.len() as u32 + 64),
        ),
        (
            "import of a type that is not there",
            Box::new(|c| c.info.imports[0].kind = ImportKind::Func(999)),
        ),
        (
            "element item that is not a reference",
            Box::new(|c| c.info.elems[0].items[0] = ConstExpr::I32(5)),
        ),
        (
            "export of a table that is not there",
            export(EntityIndex::Table(3)),
        ),
        (
            "export of a memory that is not there",
            export(EntityIndex::Memory(1)),
        ),
        (
            "export of a global that is not there",
            export(EntityIndex::Global(40)),
        ),
        (
            "function code that overlaps the next",
            Box::new(|c| c.funcs[1].offset = c.funcs[0].offset),
        ),
        (
            "function code that starts at the end of the text",
            Box::new(|c| c.funcs[0].offset = c.text.len() as u32),
        ),
        (
            "element item of a function that is not there",
            Box::new(|c| c.info.elems[1].items[0] = ConstExpr::RefFunc(999)),
        ),
        (
            "element segment for a table that is not there",
            Box::new(|c| {
                c.info.elems[0].mode = SegmentMode::Active {
                    index: 7,
                    offset: ConstExpr::I32(0),
                }
            }),
        ),
        (
            "element offset that is not an i32",
            Box::new(|c| {
                c.info.elems[0].mode = SegmentMode::Active {
                    index: 0,
                    offset: ConstExpr::I64(0),
                }
            }),
        ),
        (
            "element segment of numbers",
            Box::new(|c| c.info.elems[1].ty = ValType::I32),
        ),
        (
            "data segment for a memory that is not there",
            Box::new(|c| {
                c.info.datas[0].mode = SegmentMode::Active {
                    index: 2,
                    offset: ConstExpr::I32(0),
                }
            }),
        ),
        (
            "data offset reading a global that is not there",
            Box::new(|c| {
                c.info.datas[1].mode = SegmentMode::Active {
                    index: 0,
                    offset: ConstExpr::GlobalGet(77),
                }
            }),
        ),
        (
            "global initialised with a value of another type",
            Box::new(|c| c.info.global_inits[1] = ConstExpr::I32(0x1000)),
        ),
        (
            "global initialised from a defined global",
            Box::new(|c| c.info.global_inits[0] = ConstExpr::GlobalGet(1)),
        ),
        (
            "a global without an initialiser",
            Box::new(|c| {
                c.info.global_inits.pop();
            }),
        ),
        (
            "start function that is not there",
            Box::new(|c| c.info.start = Some(999)),
        ),
        (
            "start function that takes an argument",
            Box::new(|c| c.info.start = Some(0)),
        ),
        (
            "function of a type that is not there",
            Box::new(|c| *c.info.funcs.last_mut().unwrap() = 999),
        ),
        (
            "more imported functions than functions",
            Box::new(|c| c.info.imported_funcs = 100),
        ),
        (
            "import counts that do not match the imports",
            Box::new(|c| c.info.imported_globals = 0),
        ),
        (
            "imported global of another type than declared",
            Box::new(|c| c.info.globals[0].ty = ValType::F64),
        ),
        (
            "memory larger than 4 GiB",
            Box::new(|c| c.info.memories[0] = ephem_module::MemoryType::new(70000, None)),
        ),
        (
            "shared memory without a maximum",
            Box::new(|c| {
                c.info.memories[0] = ephem_module::MemoryType {
                    max: None,
                    ..ephem_module::MemoryType::shared(1, 1)
                }
            }),
        ),
        (
            "64-bit memory whose maximum is below its minimum",
            Box::new(|c| c.info.memories[0] = ephem_module::MemoryType::new64(3, Some(2))),
        ),
        (
            "a page size that is neither 1 nor 64 KiB",
            Box::new(|c| {
                c.info.memories[0] = ephem_module::MemoryType::new(1, None).with_page_size_log2(12)
            }),
        ),
        (
            "table of numbers",
            Box::new(|c| c.info.tables[0].elem = ValType::F32),
        ),
        (
            "table with a maximum below its minimum",
            Box::new(|c| c.info.tables[0].max = Some(1)),
        ),
        (
            "name for a function that is not there",
            Box::new(|c| {
                c.info.names.push(ephem_module::FuncName {
                    func: 500,
                    name: "x".into(),
                })
            }),
        ),
        (
            "relocation outside the text",
            Box::new(|c| {
                c.relocs.push(ephem_module::Reloc {
                    offset: c.text.len() as u32,
                    target: ephem_module::LibCall::CeilF32,
                    addend: 0,
                })
            }),
        ),
        (
            "trampoline outside the text",
            Box::new(|c| c.trampolines[0] = c.text.len() as u32 + 1),
        ),
        (
            "one trampoline too few",
            Box::new(|c| {
                c.trampolines.pop();
            }),
        ),
        (
            "trap table out of order",
            Box::new(|c| {
                c.traps.push((0, TrapKind::Unreachable));
            }),
        ),
        (
            "no word on which memories faults bound",
            Box::new(|c| c.info.faults_bound.clear()),
        ),
        (
            "a memory bounded by faults in code that checks no bounds",
            Box::new(|c| {
                c.info.checks_bounds = false;
                c.info.faults_bound[0] = true;
            }),
        ),
        (
            "a memory of one-byte pages bounded by faults",
            Box::new(|c| {
                c.info.memories[0] = c.info.memories[0].with_page_size_log2(0);
                c.info.faults_bound[0] = true;
            }),
        ),
        (
            "a function whose type is a struct type",
            Box::new(|c| {
                let f = c.info.funcs[0] as usize;
                c.info.types[f] = ephem_module::TypeDef::Struct(Vec::new());
            }),
        ),
        (
            "a function reference naming a struct type",
            Box::new(|c| {
                let s = c.info.types.len() as u32;
                push_type(c, ephem_module::TypeDef::Struct(Vec::new()));
                c.info.tables[0].elem = ValType::Ref(ephem_module::RefType {
                    nullable: true,
                    heap: ephem_module::HeapType::ConcreteFunc(s),
                });
            }),
        ),
        (
            "a struct in a recursion group naming a later struct outside it",
            Box::new(|c| {
                let group = c.info.types.len() as u32;
                let later = group + 2;
                let field = |heap| ephem_module::FieldType {
                    storage: ephem_module::StorageType::Val(ValType::Ref(ephem_module::RefType {
                        nullable: true,
                        heap,
                    })),
                    mutable: false,
                };
                let named = ephem_module::HeapType::ConcreteStruct(later);
                push_type(c, ephem_module::TypeDef::Struct(vec![field(named)]));
                push_type(c, ephem_module::TypeDef::Struct(Vec::new()));
                push_type(c, ephem_module::TypeDef::Struct(Vec::new()));
                (c.info.rec_groups).push(ephem_module::RecGroup {
                    start: group,
                    len: 2,
                });
            }),
        ),
        (
            "a struct reference naming a function type",
            Box::new(|c| {
                push_type(
                    c,
                    ephem_module::TypeDef::Array(ephem_module::FieldType {
                        storage: ephem_module::StorageType::Val(ValType::Ref(
                            ephem_module::RefType {
                                nullable: true,
                                heap: ephem_module::HeapType::ConcreteStruct(0),
                            },
                        )),
                        mutable: false,
                    }),
                );
            }),
        ),
        (
            "a recursion group of one type",
            Box::new(|c| (c.info.rec_groups).push(ephem_module::RecGroup { start: 0, len: 1 })),
        ),
        (
            "a recursion group past the types",
            Box::new(|c| (c.info.rec_groups).push(ephem_module::RecGroup { start: 0, len: 99 })),
        ),
        (
            "a type naming a later type outside its group",
            Box::new(|c| {
                let later = c.info.types.len() as u32 + 1;
                c.info.types.push(
                    ephem_module::FuncType::new(
                        [ValType::Ref(ephem_module::RefType {
                            nullable: true,
                            heap: ephem_module::HeapType::ConcreteFunc(later),
                        })],
                        [],
                    )
                    .into(),
                );
                c.info.types.push(ephem_module::FuncType::default().into());
            }),
        ),
        (
            "subtyping declared for some types only",
            Box::new(|c| {
                push_type(c, ephem_module::TypeDef::Struct(Vec::new()));
                c.info.subs = vec![ephem_module::Sub::FINAL];
            }),
        ),
        (
            "a struct declaring a later struct its supertype",
            Box::new(|c| forge_supertype(c, false, 1, true)),
        ),
        (
            "a struct declaring a final struct its supertype",
            Box::new(|c| forge_supertype(c, true, 0, true)),
        ),
        (
            "a struct declaring a function type its supertype",
            Box::new(|c| {
                forge_supertype(c, false, 0, true);
                let last = c.info.subs.last_mut().unwrap();
                last.supertype = Some(0);
            }),
        ),
        (
            "a struct declaring a supertype with a field it lacks",
            Box::new(|c| forge_supertype(c, false, 0, false)),
        ),
        (
            "a struct made by a constant expression with too few fields",
            Box::new(|c| {
                let s = c.info.types.len() as u32;
                let i32_field = ephem_module::FieldType {
                    storage: ephem_module::StorageType::Val(ValType::I32),
                    mutable: false,
                };
                push_type(c, ephem_module::TypeDef::Struct(vec![i32_field]));
                forge_global(c, s, vec![ephem_module::ConstOp::StructNew(s)]);
            }),
        ),
        (
            "an array made by a constant expression of a struct type",
            Box::new(|c| {
                let s = c.info.types.len() as u32;
                push_type(c, ephem_module::TypeDef::Struct(Vec::new()));
                let ops = vec![
                    ephem_module::ConstOp::I32(0),
                    ephem_module::ConstOp::ArrayNewDefault(s),
                ];
                forge_global(c, s, ops);
            }),
        ),
        (
            "trap outside the text",
            Box::new(|c| {
                c.traps
                    .push((c.text.len() as u32 + 8, TrapKind::Unreachable))
            }),
        ),
    ];
    for (what, edit) in forgeries {
        match forge(edit) {
            Err(ephem_artifact::Error::Damaged(why)) => {
                assert!(
                    why.contains("metadata")
                        || why.contains("table")
                        || why.contains("text")
                        || why.contains("sections"),
                    "{what}: {why}"
                )
            }
            Err(e) => panic!("{what}: refused, but not as damage: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
}

/// Adds two struct types of one `i64` field, the second declaring the first plus `offset`
/// its supertype, the first final or not; the second without its field unless `same_fields`.
fn forge_supertype(c: &mut CompiledModule, first_final: bool, offset: u32, same_fields: bool) {
    let first = c.info.types.len() as u32;
    let field = ephem_module::FieldType {
        storage: ephem_module::StorageType::Val(ValType::I64),
        mutable: true,
    };
    push_type(c, ephem_module::TypeDef::Struct(vec![field]));
    let second = if same_fields { vec![field] } else { Vec::new() };
    push_type(c, ephem_module::TypeDef::Struct(second));
    c.info.subs = vec![ephem_module::Sub::FINAL; first as usize];
    c.info.subs.push(ephem_module::Sub {
        supertype: None,
        is_final: first_final,
    });
    c.info.subs.push(ephem_module::Sub {
        supertype: Some(first + offset),
        is_final: true,
    });
}

/// Adds a defined immutable global of type `(ref $ty)` initialised by the extended constant
/// expression `ops`.
fn forge_global(c: &mut CompiledModule, ty: u32, ops: Vec<ephem_module::ConstOp>) {
    let heap = ephem_module::HeapType::ConcreteStruct(ty);
    c.info.globals.push(ephem_module::GlobalType {
        ty: ValType::Ref(ephem_module::RefType {
            nullable: false,
            heap,
        }),
        mutable: false,
    });
    c.info.extended.push(ops);
    let e = c.info.extended.len() as u32 - 1;
    c.info
        .global_inits
        .push(ephem_module::ConstExpr::Extended(e));
}

/// Adds `ty` to the module's types with the entry trampoline and host adapter every type has
/// (type 0's), so that only what `ty` says can be wrong.
fn push_type(c: &mut CompiledModule, ty: ephem_module::TypeDef) {
    c.info.types.push(ty);
    c.trampolines.push(c.trampolines[0]);
    c.host_adapters.push(c.host_adapters[0]);
}

/// `good` with the archived little-endian `u32`s `list` found in it (they must be there, once)
/// and the `n`th replaced by `value`, sealed again, then opened: the error.
fn refused_with_u32_replaced(good: &[u8], list: &[u32], n: usize, value: u32) -> String {
    let needle: Vec<u8> = list.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut found = good.windows(needle.len()).enumerate();
    let (at, _) = (found.find(|(_, w)| *w == needle)).expect("the list is archived as LE u32s");
    assert!(
        !found.any(|(_, w)| w == needle),
        "the list is archived once"
    );
    let mut forged = good.to_vec();
    forged[at + 4 * n..at + 4 * n + 4].copy_from_slice(&value.to_le_bytes());
    format::reseal(&mut forged, &KEY);
    match open_bytes("forged.ephem", &forged) {
        Ok(_) => panic!("the forged artifact opened"),
        Err(e) => e.to_string(),
    }
}

/// The eager-function list (the funcrefs instantiation fills in) must be exactly the
/// module's: one left out would leave an exported function's funcref empty.
#[test]
fn a_forged_eager_list_is_refused() {
    let good = ephem_artifact::to_bytes(&compiled(), &[0; 32], &KEY);
    let artifact = open_bytes("good.ephem", &good).unwrap();
    let eager: Vec<u32> = artifact.eager().iter().map(|f| f.to_native()).collect();
    assert!(!eager.is_empty());
    let e = refused_with_u32_replaced(&good, &eager, 0, eager[0] + 1);
    assert!(e.contains("eager") || e.contains("metadata"), "{e}");
}

/// The function table (sorted by code offset, each entry naming its function; backtraces read
/// it) must name every defined function once.
#[test]
fn a_forged_function_table_is_refused() {
    let compiled = compiled();
    let good = ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY);
    let mut entries: Vec<(u32, u32)> = (0..)
        .zip(&compiled.funcs)
        .map(|(i, f)| (f.offset, i))
        .collect();
    entries.sort_unstable();
    let table: Vec<u32> = entries.iter().flat_map(|&(o, i)| [o, i]).collect();
    // The second entry names the first entry's function.
    let e = refused_with_u32_replaced(&good, &table, 3, entries[0].1);
    assert!(e.contains("names a function twice"), "{e}");
}

/// The types' small ids are the engine's canonical type ids: a wrong one would let a
/// `call_indirect` of one signature reach a function of another.
#[test]
fn a_forged_small_type_id_is_refused() {
    let good = ephem_artifact::to_bytes(&compiled(), &[0; 32], &KEY);
    let artifact = open_bytes("good.ephem", &good).unwrap();
    let ids: Vec<u32> = artifact.small_ids().map(|id| id.unwrap()).collect();
    assert!(ids.len() >= 2 && ids[0] != ids[1]);
    let e = refused_with_u32_replaced(&good, &ids, 1, ids[0]);
    assert!(e.contains("type ids"), "{e}");
}

/// The imports' digest is what a linker knows an import list by: one that names another
/// module's imports would link this module as that one.
#[test]
fn a_forged_imports_digest_is_refused() {
    let good = ephem_artifact::to_bytes(&compiled(), &[0; 32], &KEY);
    let digest = *open_bytes("good.ephem", &good).unwrap().imports_digest();
    let at = good.windows(32).position(|w| w == digest).unwrap();
    let mut forged = good.clone();
    forged[at] ^= 1;
    format::reseal(&mut forged, &KEY);
    let e = open_bytes("forged.ephem", &forged).unwrap_err();
    assert!(e.to_string().contains("digest"), "{e}");
}

/// A passive segment's items are funcref slots the writer derives from the module; one pointing
/// at another function's slot would let `table.init` put a function of another type in a table.
#[test]
fn a_forged_element_slot_is_refused() {
    const SLOTS: &str = r#"(module
      (table 8 funcref)
      (type $i (func (result i32)))
      (elem $p func $a $b $c $b $a)
      (func $a (result i32) i32.const 1)
      (func $b (result i32) i32.const 2)
      (func $c (param i32) (result i32) local.get 0)
      (func (export "run") (result i32)
        (table.init $p (i32.const 0) (i32.const 0) (i32.const 5))
        (call_indirect (type $i) (i32.const 3))))"#;
    let compiled = Compiler::new().unwrap().compile(SLOTS.as_bytes()).unwrap();
    let good = ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY);
    let artifact = open_bytes("good.ephem", &good).unwrap();
    let slots: Vec<u32> = (artifact.elem_slots(0).iter())
        .map(|s| s.to_native())
        .collect();
    assert_eq!(slots.len(), 5);
    assert_eq!(run(artifact).unwrap(), 2);
    // Item 3 (`$b`) made `$c`'s slot: a call through it would pass no argument to `$c`.
    let e = refused_with_u32_replaced(&good, &slots, 3, slots[2]);
    assert!(e.contains("funcref slots"), "{e}");
}

/// A data segment whose range reaches past the segment data (the writer cannot make one: the
/// range is edited in the file). The issue's panic in `instance.rs`.
#[test]
fn a_forged_data_range_is_refused() {
    let good = ephem_artifact::to_bytes(&compiled(), &[0; 32], &KEY);
    // The passive segment is the only one stored outside the image: its range is 0..31.
    let needle: Vec<u8> = [0u32, 31].iter().flat_map(|v| v.to_le_bytes()).collect();
    let at = format::HEADER_SIZE
        + good[format::HEADER_SIZE..]
            .windows(8)
            .position(|w| w == needle)
            .expect("the archived range");
    let mut forged = good.clone();
    forged[at + 4..at + 8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    format::reseal(&mut forged, &KEY);
    let e = open_bytes("forged.ephem", &forged).unwrap_err();
    assert!(e.to_string().contains("metadata"), "{e}");
}

/// Random edits of everything before the text (metadata, function table, segment data, trap
/// table), each sealed again: every one is refused cleanly, or opens and instantiates (or fails
/// to, with an error). A panic or a crash fails the test. Seeded: the same edits every run. The
/// module is not called: an edit the checks cannot see (the code's own layout, its types) is
/// what only the key vouches for.
#[test]
fn randomly_forged_metadata_never_crashes_the_host() {
    let good = ephem_artifact::to_bytes(&compiled(), &[0; 32], &KEY);
    let text_start =
        u64::from_le_bytes(good[88 + 4 * 16..88 + 4 * 16 + 8].try_into().unwrap()) as usize;
    let front = format::HEADER_SIZE..text_start;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let (mut refused, mut opened) = (0, 0);
    for _ in 0..1000 {
        let mut forged = good.clone();
        for _ in 0..1 + next() % 4 {
            let at = front.start + (next() as usize) % front.len();
            forged[at] = match next() % 3 {
                0 => forged[at] ^ (1 << (next() % 8)),
                1 => next() as u8,
                _ => forged[at].wrapping_add(1),
            };
        }
        format::reseal(&mut forged, &KEY);
        let outcome = std::panic::catch_unwind(|| match open_bytes("random.ephem", &forged) {
            Ok(artifact) => {
                let _ = instantiate(artifact, false);
                true
            }
            Err(_) => false,
        });
        match outcome {
            Ok(true) => opened += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("a forged artifact made the host panic"),
        }
    }
    eprintln!("{refused} refused, {opened} opened");
    assert!(
        refused > 100,
        "edits are caught ({refused} refused, {opened} opened)"
    );
}

/// The lazy funcref data at the end of the text (see `ephem_module::FuncrefLayout`), edited in
/// the file: a table element naming a slot past the vmctx's, and a lazy slot whose code is not
/// its function's, are refused at open.
#[test]
fn forged_lazy_funcref_data_is_refused() {
    const LAZY: &str = r#"(module
      (table 4 funcref)
      (elem (i32.const 1) $a $b)
      (func $a (result i32) i32.const 1)
      (func $b (result i32) i32.const 2)
      (func (export "run") (result i32) (call_indirect (result i32) (i32.const 2))))"#;
    let compiled = Compiler::new().unwrap().compile(LAZY.as_bytes()).unwrap();
    let good = ephem_artifact::to_bytes(&compiled, &[0; 32], &KEY);
    let artifact = open_bytes("good.ephem", &good).unwrap();
    let text = artifact.text_file_offset() as usize;
    let (table_at, len) = artifact.lazy_table(0).expect("the table is lazy");
    let (slots_at, slots) = artifact.lazy_slots();
    assert_eq!((len, slots), (3, 2));
    assert_eq!(run(artifact).unwrap(), 2);

    let edit = |at: usize, value: u32| {
        let mut forged = good.clone();
        forged[text + at..text + at + 4].copy_from_slice(&value.to_le_bytes());
        format::reseal(&mut forged, &KEY);
        open_bytes("forged.ephem", &forged)
    };
    // Element 2 names slot 999; then the second lazy slot's code is the first one's.
    let first_code = u32::from_le_bytes(
        good[text + slots_at as usize + 4..text + slots_at as usize + 8]
            .try_into()
            .unwrap(),
    );
    for (what, at, value) in [
        ("element", table_at as usize + 8, 1000),
        ("slot code", slots_at as usize + 12, first_code),
        ("slot function", slots_at as usize + 8, 0),
    ] {
        let e = edit(at, value).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("lazy funcrefs"), "{what}: {e}");
    }
}

/// Exception handlers tell the unwinder where to set the stack pointer and jump: each forgery
/// of them, and of tags, is refused at open, and the intact module catches.
#[test]
fn forged_exception_handlers_and_tags_are_refused() {
    const THROWS: &str = r#"(module
      (tag $e (export "e") (param i32))
      (func $throw (param i32) (throw $e (local.get 0)))
      (func (export "run") (result i32)
        (block $h (result i32)
          (try_table (catch $e $h) (call $throw (i32.const 41)))
          (i32.const 0))
        (i32.add (i32.const 1))))"#;
    let good = || Compiler::new().unwrap().compile(THROWS.as_bytes()).unwrap();
    let open = |c: &CompiledModule| {
        open_bytes("throws.ephem", &ephem_artifact::to_bytes(c, &[0; 32], &KEY))
    };
    // Opens, instantiates and calls `run`.
    let run = |c: &CompiledModule| {
        let engine = Engine::default();
        let module = Module::from_artifact(&engine, open(c).unwrap());
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine)
            .instantiate(&mut store, &module)
            .unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        run.call(&mut store, ())
    };
    let intact = good();
    assert_eq!(intact.call_sites.len(), 1, "one call in a try_table");
    assert_eq!(run(&intact).unwrap(), 42);

    type Edit = Box<dyn Fn(&mut CompiledModule)>;
    let site = |edit: fn(&mut ephem_module::CallSite)| {
        Box::new(move |c: &mut CompiledModule| edit(&mut c.call_sites[0])) as Edit
    };
    let forgeries: Vec<(&str, Edit)> = vec![
        (
            "handler outside the text",
            site(|s| s.catches[0].target = u32::MAX - 4),
        ),
        (
            "handler in another function",
            site(|s| s.catches[0].target = 0),
        ),
        ("call site outside the text", site(|s| s.ret = u32::MAX)),
        (
            "a tag that is not there",
            site(|s| s.catches[0].tag = Some(7)),
        ),
        ("an unaligned frame", site(|s| s.frame_offset += 4)),
        ("a huge frame", site(|s| s.frame_offset = 1 << 30)),
        (
            "the vmctx outside the frame",
            site(|s| s.vmctx_at = s.frame_offset),
        ),
        (
            "a GC reference outside the frame",
            site(|s| s.refs.push(s.frame_offset)),
        ),
        ("an unaligned GC reference", site(|s| s.refs.push(4))),
        (
            "call sites out of order",
            Box::new(|c| c.call_sites.push(c.call_sites[0].clone())),
        ),
        (
            "a tag of a type that is not there",
            Box::new(|c| c.info.tags[0] = 99),
        ),
        (
            "a tag type with results",
            Box::new(|c| {
                c.info
                    .types
                    .push(ephem_module::FuncType::new([], [ValType::I32]).into());
                c.info.tags[0] = c.info.types.len() as u32 - 1;
            }),
        ),
        (
            "export of a tag that is not there",
            Box::new(|c| {
                c.info.exports.push(Export {
                    name: "forged".into(),
                    index: EntityIndex::Tag(3),
                })
            }),
        ),
    ];
    for (what, edit) in forgeries {
        let mut c = good();
        edit(&mut c);
        match open(&c) {
            Err(ephem_artifact::Error::Damaged(_)) => {}
            Err(e) => panic!("{what}: refused, but not as damage: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }

    // A frame the checks let through (1 MiB, aligned, holding the vmctx slot) that is not where
    // the live frames are: the unwinder does not follow it, and the exception goes uncaught
    // instead of the stack pointer going there.
    let mut c = good();
    c.call_sites[0].frame_offset = 1 << 20;
    assert!(matches!(run(&c), Err(ephem::Error::Exception(_))));
}
