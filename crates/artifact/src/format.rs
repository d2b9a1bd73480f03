//! The file layout, and the writer.
//!
//! ```text
//! 0      header (HEADER_SIZE bytes, fixed layout, little-endian)
//!        meta     rkyv archive: target, module info, relocations, trampolines, memory images
//!        data     the bytes of every data segment that no image holds
//!        funcs    per defined function, sorted by code offset: code offset u32, function u32
//!                 (0 = the first defined one); its code reaches to the next entry's (the last
//!                 one's to the end of the machine code)
//!        traps    per trapping instruction, sorted: code offset u32, kind u32; then an index:
//!                 the code offset of every TRAP_BLOCK-th entry (u32), so that finding a trap
//!                 reads the index and one block, not a table of megabytes
//!        spans    per image, the ranges its segments write: start u64, end u64
//!        names    count u32; per named function, by function: func u32, start u32, end u32;
//!                 then the names' bytes (start and end index them)
//! page → text     the machine code; then, 8-aligned, the lazy funcrefs (per lazy slot: func
//!                 u32, code offset u32) and each lazy table's initial elements (u32: 0 null,
//!                 else funcref slot + 1), which the runtime reads in place from the loaded
//!                 text (see `ephem_module::FuncrefLayout`); the rest of its last page is `int3`
//! page → images   one per memory image, each starting on a page
//! ```
//!
//! The header names every section by (offset, length), records the cache key of the wasm the
//! artifact came from (`source`), and carries the seal: a keyed BLAKE3 of the whole file (taken
//! with the seal field as zeros) under the deployment's [`ArtifactKey`]. Opening reads the
//! header, `meta` and `data`: `meta` is validated and then read in place; `data` is what
//! instantiation copies. The rest grows with the module's functions or segments and is read on
//! first use: `funcs`, `names` and `traps` on the first trap (backtraces), `spans` when an image
//! must be applied to a memory that may hold data already; `text` is copied or mapped, images
//! are mapped or copied into linear memory.

use ephem_module::{
    CompiledModule, ConstExpr, ImportKind, ModuleInfo, Placement, Reloc, SegmentMode, Target,
    ValType,
};
use rkyv::{Archive, Serialize};

use crate::ArtifactKey;

/// The first bytes of every artifact.
pub const MAGIC: [u8; 8] = *b"\0EPHEMAF";
/// Bumped whenever the layout or the meaning of any field changes, or what generated code
/// expects of the runtime (15: bulk-memory builtins may return 3, interrupted; 16: start
/// snapshots, `ModuleInfo::snapshot`; 17: metered code takes its fuel in the pinned register;
/// 18: `table.set` marks its table in `VmTable::code_wrote`; 19: `Meta::small_ids` and
/// `Meta::imports_digest`; 20: stores set write marks before the memory's base,
/// `ephem_module::MARK_SHIFT`; 21: the text is laid out by calls, the function table sorted by
/// offset; 22: `unreachable` calls the `Raise` builtin; 23: `ModuleInfo::checks_bounds`; 24:
/// failed checks find `Raise` in the entry frame, `ephem_module::ENTRY_FRAME_RAISE`; 25: reference
/// types `ValType::Ref`, `ModuleInfo::table_inits`, `TrapKind::NullReference`; lengths kept
/// across calls that cannot grow a memory; 26: exception handling, `ModuleInfo::tags`, the vmctx's
/// tags, `Meta::call_sites`; `ModuleInfo::rec_groups`, whose types have no small id; 27: shared
/// memories and 64-bit memories past 4 GiB; 28: `ModuleInfo::types` are `TypeDef`s, struct and
/// array types among them, and `HeapType` has GC's heap types; `ModuleInfo::faults_bound`; 29:
/// GC's objects: `ModuleInfo::subs`, `ConstOp`'s GC instructions, the vmctx's `GC_HEAP`, new
/// trap kinds and builtins; 30: `CallSite::refs` (stack maps) and one encoding of host
/// references for `anyref` and `externref`; 31: a 64-bit memory's write marks lie
/// `MARKS_BEFORE_LARGE` bytes before its base, as its large slot keeps them, and the
/// `MarkLoop` builtin).
pub const FORMAT_VERSION: u32 = 31;
/// The ephem release that writes and reads artifacts; code from another release is refused.
pub const EPHEM_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const HEADER_SIZE: usize = 256;
/// Alignment of the text and of memory images in the file: the host page size on every target
/// ephem supports (4 KiB; a 16 KiB-page aarch64 host would need this raised).
pub const FILE_PAGE: usize = 4096;
/// An image stores at most this many pages for every page of data its segments write, plus
/// [`IMAGE_SLACK_PAGES`]; a memory whose segments are spread more thinly gets no image (they
/// are copied at instantiation instead). So an artifact's size is bounded by its module's data,
/// never by the span of its offsets: a few bytes at 0 and at 64 MiB do not make a 64 MiB file.
pub const IMAGE_PAGES_PER_DATA_PAGE: u64 = 4;
/// See [`IMAGE_PAGES_PER_DATA_PAGE`].
pub const IMAGE_SLACK_PAGES: u64 = 16;

/// Entries of the trap table per entry of its index (see the layout above).
pub const TRAP_BLOCK: usize = 512;

/// The trap section's length for `count` entries: the entries and their index.
pub(crate) fn traps_len(count: usize) -> usize {
    count * 8 + count.div_ceil(TRAP_BLOCK) * 4
}

/// Byte that fills the text's last page after the code: `int3`.
const TEXT_FILL: u8 = 0xCC;

pub(crate) mod off {
    pub const MAGIC: usize = 0;
    pub const FORMAT: usize = 8;
    pub const VERSION: usize = 16;
    pub const VERSION_LEN: usize = 32;
    pub const SEAL: usize = 48;
    pub const FILE_LEN: usize = 80;
    pub const SECTIONS: usize = 88;
    /// After the eight sections' (offset, length) pairs.
    pub const SOURCE: usize = 216;
}

/// The sections the header locates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    Meta,
    Funcs,
    Traps,
    Data,
    Text,
    Images,
    Spans,
    Names,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::Meta,
        Section::Funcs,
        Section::Traps,
        Section::Data,
        Section::Text,
        Section::Images,
        Section::Spans,
        Section::Names,
    ];
}

/// A linear memory's initial contents, as laid out in the file.
///
/// Imported memories get images too: a fresh memory made for the instance (still all zeros)
/// takes the image as a defined one does, and one that may hold data already gets just the
/// segments' bytes (`spans`) copied out of the image, as applying the segments would.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize)]
pub struct MemoryImage {
    /// The memory (module index space).
    pub memory: u32,
    /// Where the image starts in linear memory (page-aligned).
    pub offset: u64,
    /// Length in bytes (a whole number of pages, within the memory's minimum size).
    pub len: u64,
    /// Where the image starts in the images section (page-aligned, as the section is).
    pub section_offset: u64,
    /// Which entries of the spans section are this image's (`[first, end)`): the bytes the data
    /// segments write, as sorted disjoint `[start, end)` ranges in linear memory, within
    /// `[offset, offset + len)`; the rest of the image is zeros. Kept out of the metadata: one
    /// span per segment would make every open read them, and only a memory that may hold data
    /// already needs them.
    pub spans: [u32; 2],
}

/// The metadata: validated when an artifact is opened, then read in place (archived, with
/// `rkyv`), never decoded into owned structures.
#[derive(Debug, Archive, Serialize)]
pub(crate) struct Meta {
    pub target: Target,
    pub info: ModuleInfo,
    pub relocs: Vec<Reloc>,
    pub trampolines: Vec<u32>,
    pub host_adapters: Vec<u32>,
    pub images: Vec<MemoryImage>,
    /// The eager functions (see `ephem_module::FuncrefLayout`): `info` (which keeps no segment
    /// a lazy table absorbed) says they escape, and instantiation writes their funcrefs.
    pub eager: Vec<u32>,
    /// Where each eager function's code starts in the text, in the same order: all that
    /// instantiation needs of the function table, which is read only for traps.
    pub eager_code: Vec<u32>,
    /// Entries in the trap table (see the layout above).
    pub trap_count: u32,
    /// The machine code's length: the text's first bytes (the lazy funcrefs and tables follow).
    pub code_len: u32,
    /// How many lazy funcref slots follow the eager ones, and where in the text their
    /// functions and code offsets are (8 bytes per slot).
    pub lazy_slots: u32,
    pub lazy_at: u32,
    /// The lazy tables' initial elements, in the text.
    pub lazy_tables: Vec<LazyTableAt>,
    /// The module index of each data segment in `info.datas`, ascending: an artifact keeps only
    /// the segments no image holds (passive ones, and active ones for memories without an
    /// image), so that nothing on the fresh path grows with the segments an image holds. A
    /// segment not listed is an active one its image applied: dropped at instantiation.
    pub data_index: Vec<u32>,
    /// Per element segment, per item: the funcref slot of a `ref.func` item (see
    /// `ephem_module::FuncrefLayout`), 0 for other items. Resolved here so that filling a table
    /// is a multiply-add per element, not a search.
    pub elem_slots: Vec<Vec<u32>>,
    /// Per type of `info.types`, its [`ephem_module::small_id`], or [`NOT_SMALL`]: an engine's
    /// canonical id without computing anything (only the others are looked up).
    pub small_ids: Vec<u32>,
    /// What identifies the imports (see [`imports_digest`]): a linker resolves a list of
    /// imports it has resolved before without looking up a name.
    pub imports_digest: [u8; 32],
    /// The calls inside `try_table`s, by return address (see `ephem_module::CallSite`): what
    /// the runtime's unwinder reads. Empty for a module without exception handlers.
    pub call_sites: Vec<ephem_module::CallSite>,
}

/// The small id recorded for a type without one (see `Meta::small_ids`).
pub(crate) const NOT_SMALL: u32 = u32::MAX;

/// The small ids of `info`'s types (see [`Meta::small_ids`]); a type of a recursion group of
/// more than one type has none (it is not identified by its structure alone).
pub(crate) fn small_ids(info: &ModuleInfo) -> Vec<u32> {
    (info.types.iter().enumerate())
        .map(
            |(i, t)| match ephem_module::group_of(&info.rec_groups, i as u32) {
                // (A type that declares subtyping is not identified by its structure alone.)
                None if info.sub(i as u32) == ephem_module::Sub::FINAL => {
                    t.small_id().unwrap_or(NOT_SMALL)
                }
                _ => NOT_SMALL,
            },
        )
        .collect()
}

/// What identifies each of `info`'s types in every module: a digest of its key
/// (`ephem_module::type_key`), in which a type before it (or before its recursion group) is
/// named by that type's digest. Empty when no import names a concrete type, directly or
/// through its function type, nor a type of a recursion group: the usual case, where nothing
/// needs them.
fn type_digests(info: &ModuleInfo) -> Vec<[u8; 32]> {
    let concrete = |t: &ValType| t.concrete().is_some();
    let named = info.imports.iter().any(|i| match &i.kind {
        ImportKind::Func(t) | ImportKind::Tag(t) => {
            (info.types.get(*t as usize)).is_some_and(|t| t.concrete().next().is_some())
                || ephem_module::group_of(&info.rec_groups, *t).is_some()
                || info.sub(*t) != ephem_module::Sub::FINAL
        }
        ImportKind::Table(t) => concrete(&t.elem),
        ImportKind::Global(g) => concrete(&g.ty),
        ImportKind::Memory(_) => false,
    });
    if !named {
        return Vec::new();
    }
    let types: &[ephem_module::TypeDef] = &info.types;
    let mut digests: Vec<[u8; 32]> = Vec::with_capacity(types.len());
    let mut key = Vec::new();
    for i in 0..types.len() as u32 {
        // (A type that is not there, which only a forged module names, hashes as its index.)
        let outside = &mut |t: u32, out: &mut Vec<u8>| match digests.get(t as usize) {
            Some(d) => out.extend_from_slice(d),
            None => out.extend_from_slice(&t.to_le_bytes()),
        };
        let sub = |t: u32| info.sub(t);
        ephem_module::type_key(types, &sub, &info.rec_groups, i, &mut key, outside);
        digests.push(*blake3::hash(&key).as_bytes());
    }
    digests
}

/// A digest of `info`'s imports: every import's module, name, kind and type (a function's by
/// value, not by index), in order. Two modules with the same digest have the same imports, so
/// whatever a linker resolved for one holds for the other. A BLAKE3 hash, 256 bits: the
/// modules are untrusted, and finding two import lists with the same digest must be infeasible.
pub(crate) fn imports_digest(info: &ModuleInfo) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    let mut bytes = Vec::new();
    let digests = type_digests(info);
    // A concrete type by its digest: what it is, not where it is in this module.
    let mut concrete = |t: u32, out: &mut Vec<u8>| match digests.get(t as usize) {
        Some(d) => out.extend_from_slice(d),
        None => out.extend_from_slice(&t.to_le_bytes()),
    };
    // A function type by its digest where digests are made (it names a concrete type or is in
    // a recursion group), else by its key. (A type that is not there, which only a forged
    // module has, hashes as none.)
    let signature =
        |bytes: &mut Vec<u8>, t: u32, concrete: &mut dyn FnMut(u32, &mut Vec<u8>)| match (
            digests.get(t as usize),
            info.types.get(t as usize),
        ) {
            (Some(d), _) => bytes.extend_from_slice(d),
            (None, Some(ty)) => ty.key(bytes, concrete),
            (None, None) => {}
        };
    for import in &info.imports {
        for name in [&import.module, &import.name] {
            h.update(&(name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
        }
        // (`FuncType::key` clears what it writes to: the kind's tag is hashed on its own.)
        bytes.clear();
        let tag: u8 = match &import.kind {
            ImportKind::Func(t) => {
                signature(&mut bytes, *t, &mut concrete);
                0
            }
            ImportKind::Table(t) => {
                t.elem.key(&mut bytes, &mut concrete);
                limits(&mut bytes, t.min, t.max);
                bytes.push(t.table64 as u8);
                1
            }
            ImportKind::Memory(m) => {
                limits(&mut bytes, m.min, m.max);
                bytes.push(m.page_size_log2);
                bytes.push(m.memory64 as u8);
                2
            }
            ImportKind::Global(g) => {
                g.ty.key(&mut bytes, &mut concrete);
                bytes.push(g.mutable as u8);
                3
            }
            ImportKind::Tag(t) => {
                signature(&mut bytes, *t, &mut concrete);
                4
            }
        };
        h.update(&[tag]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    *h.finalize().as_bytes()
}

fn limits(out: &mut Vec<u8>, min: u32, max: Option<u32>) {
    out.extend(min.to_le_bytes());
    match max {
        Some(max) => out.extend([1].into_iter().chain(max.to_le_bytes())),
        None => out.push(0),
    }
}

/// Where a lazy table's initial elements are in the text: `len` u32s from `at`.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize)]
pub struct LazyTableAt {
    pub table: u32,
    pub at: u32,
    pub len: u32,
}

/// See [`Meta::elem_slots`].
pub(crate) fn elem_slots(info: &ModuleInfo, eager: &[u32]) -> Vec<Vec<u32>> {
    let slot = |e: &ConstExpr| match *e {
        ConstExpr::RefFunc(f) => {
            ephem_module::VmOffsets::eager_slot(info.imported_funcs, eager, f).unwrap_or(0)
        }
        _ => 0,
    };
    info.elems
        .iter()
        .map(|seg| seg.items.iter().map(slot).collect())
        .collect()
}

/// The image of memory `memory`, if its active segments allow one: every segment that targets
/// it has a constant offset and lies within its minimum size (so instantiation cannot trap on
/// it; an imported memory is at least that large), and the initialised span is at most
/// the compiler's `max_image_bytes` and dense enough (see [`IMAGE_PAGES_PER_DATA_PAGE`]).
/// Later segments overwrite earlier ones, as applying them in order would. Returns the image
/// (its `section_offset` still 0) and its bytes.
fn plan_image(
    compiled: &CompiledModule,
    memory: u32,
) -> Option<(MemoryImage, Vec<[u64; 2]>, Vec<u8>)> {
    let info = &compiled.info;
    let ty = info.memories[memory as usize];
    let min_bytes = u64::from(ty.min) << ty.page_size_log2;
    let mut spans = Vec::new();
    for seg in &info.datas {
        let len = u64::from(seg.range.end - seg.range.start);
        let (start, end) = match seg.mode.placement(memory, len, min_bytes, ty.memory64) {
            Placement::Elsewhere => continue,
            Placement::Dynamic => return None,
            Placement::Static(r) => (r.start, r.end),
        };
        if end > start {
            spans.push((start, seg.range.clone()));
        }
    }
    let lo = spans.iter().map(|s| s.0).min()? & !(FILE_PAGE as u64 - 1);
    let hi = spans
        .iter()
        .map(|(start, r)| start + u64::from(r.end - r.start))
        .max()?
        .next_multiple_of(FILE_PAGE as u64);
    let data_bytes: u64 = spans.iter().map(|(_, r)| u64::from(r.end - r.start)).sum();
    let data_pages = data_bytes.div_ceil(FILE_PAGE as u64);
    let pages = (hi - lo) / FILE_PAGE as u64;
    // (A memory of one-byte pages may end inside the image's last page: its segments are
    // copied.)
    if hi > min_bytes
        || hi - lo > compiled.max_image_bytes
        || pages > IMAGE_PAGES_PER_DATA_PAGE * data_pages + IMAGE_SLACK_PAGES
    {
        return None;
    }
    let mut bytes = vec![0; (hi - lo) as usize];
    let mut covered: Vec<[u64; 2]> = Vec::new();
    for (start, r) in &spans {
        let at = (start - lo) as usize;
        let src = &compiled.data[r.start as usize..r.end as usize];
        bytes[at..at + src.len()].copy_from_slice(src);
        covered.push([*start, start + src.len() as u64]);
    }
    covered.sort_unstable();
    let mut merged: Vec<[u64; 2]> = Vec::with_capacity(covered.len());
    for [start, end] in covered {
        match merged.last_mut() {
            Some(last) if start <= last[1] => last[1] = last[1].max(end),
            _ => merged.push([start, end]),
        }
    }
    let image = MemoryImage {
        memory,
        offset: lo,
        len: bytes.len() as u64,
        section_offset: 0,
        spans: [0; 2],
    };
    Some((image, merged, bytes))
}

fn pad_to(out: &mut Vec<u8>, align: usize, fill: u8) {
    out.resize(out.len().next_multiple_of(align), fill);
}

/// Serialises `compiled` into artifact bytes, recording `source` (the cache key of the wasm it
/// came from, see [`crate::Cache::key`]) and sealed under `key`.
pub fn to_bytes(compiled: &CompiledModule, source: &[u8; 32], key: &ArtifactKey) -> Vec<u8> {
    let info = &compiled.info;
    let planned: Vec<(MemoryImage, Vec<[u64; 2]>, Vec<u8>)> = (0..info.memories.len() as u32)
        .filter_map(|m| plan_image(compiled, m))
        .collect();

    // The metadata goes right after the header: HEADER_SIZE keeps it aligned for reading in
    // place from a buffer that holds the file's first bytes.
    let mut out = vec![0u8; HEADER_SIZE];
    let mut sections = [(0u64, 0u64); Section::ALL.len()];
    let mut section = |out: &mut Vec<u8>, s: Section, start: usize| {
        sections[s as usize] = (start as u64, (out.len() - start) as u64);
    };

    let (mut at, mut span_at) = (0u64, 0u32);
    let images: Vec<MemoryImage> = planned
        .iter()
        .map(|(image, spans, _)| {
            let first = span_at;
            span_at += spans.len() as u32;
            let placed = MemoryImage {
                section_offset: at,
                spans: [first, span_at],
                ..image.clone()
            };
            at += image.len;
            placed
        })
        .collect();
    // Segments that an image holds are left out (see `Meta::data_index`); the others keep
    // their bytes.
    let mut info = info.clone();
    let mut data = Vec::new();
    let mut data_index = Vec::new();
    let mut kept = Vec::new();
    for (i, seg) in compiled.info.datas.iter().enumerate() {
        let covered = matches!(seg.mode, SegmentMode::Active { index, .. }
            if planned.iter().any(|(image, _, _)| image.memory == index));
        if covered {
            continue;
        }
        let start = data.len() as u32;
        data.extend_from_slice(&compiled.data[seg.range.start as usize..seg.range.end as usize]);
        kept.push(ephem_module::DataSegment {
            mode: seg.mode.clone(),
            range: start..data.len() as u32,
        });
        data_index.push(i as u32);
    }
    info.datas = kept;
    // Segments a lazy table absorbed are kept as declared ones without items; the lazy data
    // goes at the end of the text.
    let imported = compiled.info.imported_funcs;
    let layout = ephem_module::FuncrefLayout::of(&compiled.info);
    info.drop_covered(&layout.covered);
    // (An inconsistent module, which only a test forges, gets 0s; opening refuses it.)
    let code_of = |f: u32| {
        let loc = f
            .checked_sub(imported)
            .and_then(|i| compiled.funcs.get(i as usize));
        loc.map_or(0, |l| l.offset)
    };
    let eager_code = layout.eager.iter().map(|&f| code_of(f)).collect();
    let mut text = compiled.text.clone();
    pad_to(&mut text, 8, TEXT_FILL);
    let lazy_at = text.len() as u32;
    for &f in &layout.lazy {
        text.extend_from_slice(&f.to_le_bytes());
        text.extend_from_slice(&code_of(f).to_le_bytes());
    }
    let lazy_tables = layout
        .tables
        .iter()
        .map(|t| {
            let at = text.len() as u32;
            for e in &t.elements {
                let slot = e.and_then(|f| layout.slot(imported, f));
                text.extend_from_slice(&slot.map_or(0, |s| s + 1).to_le_bytes());
            }
            LazyTableAt {
                table: t.table,
                at,
                len: t.elements.len() as u32,
            }
        })
        .collect();
    // Names are only for backtraces: a section of their own, read on the first trap.
    let names = std::mem::take(&mut info.names);
    let elem_slots = elem_slots(&info, &layout.eager);
    let (small_ids, imports_digest) = (small_ids(&info), imports_digest(&info));
    let meta = Meta {
        target: compiled.target.clone(),
        info,
        relocs: compiled.relocs.clone(),
        trampolines: compiled.trampolines.clone(),
        host_adapters: compiled.host_adapters.clone(),
        images,
        elem_slots,
        code_len: compiled.text.len() as u32,
        trap_count: compiled.traps.len() as u32,
        lazy_slots: layout.lazy.len() as u32,
        lazy_at,
        lazy_tables,
        eager: layout.eager,
        eager_code,
        data_index,
        small_ids,
        imports_digest,
        call_sites: compiled.call_sites.clone(),
    };
    let meta_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&meta).expect("metadata always encodes");

    let start = out.len();
    out.extend_from_slice(&meta_bytes);
    section(&mut out, Section::Meta, start);
    let start = out.len();
    out.extend_from_slice(&data);
    section(&mut out, Section::Data, start);
    let start = out.len();
    let mut by_offset: Vec<(u32, u32)> = (0..)
        .zip(&compiled.funcs)
        .map(|(i, f)| (f.offset, i))
        .collect();
    by_offset.sort_unstable();
    for (offset, i) in by_offset {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&i.to_le_bytes());
    }
    section(&mut out, Section::Funcs, start);
    let start = out.len();
    for &(at, kind) in &compiled.traps {
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&kind.code().to_le_bytes());
    }
    for &(at, _) in compiled.traps.iter().step_by(TRAP_BLOCK) {
        out.extend_from_slice(&at.to_le_bytes());
    }
    section(&mut out, Section::Traps, start);
    let start = out.len();
    for [from, to] in planned.iter().flat_map(|(_, spans, _)| spans) {
        out.extend_from_slice(&from.to_le_bytes());
        out.extend_from_slice(&to.to_le_bytes());
    }
    section(&mut out, Section::Spans, start);
    let start = out.len();
    if !names.is_empty() {
        out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    }
    let mut at = 0u32;
    for n in &names {
        let end = at + n.name.len() as u32;
        for v in [n.func, at, end] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        at = end;
    }
    for n in &names {
        out.extend_from_slice(n.name.as_bytes());
    }
    section(&mut out, Section::Names, start);

    pad_to(&mut out, FILE_PAGE, 0);
    let start = out.len();
    out.extend_from_slice(&text);
    section(&mut out, Section::Text, start);
    pad_to(&mut out, FILE_PAGE, TEXT_FILL);

    let start = out.len();
    for (_, _, bytes) in &planned {
        out.extend_from_slice(bytes);
    }
    section(&mut out, Section::Images, start);

    // Header last: it holds the final length, then the seal of the whole file.
    let file_len = out.len() as u64;
    let h = &mut out[..HEADER_SIZE];
    h[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC);
    h[off::FORMAT..off::FORMAT + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let v = EPHEM_VERSION.as_bytes();
    h[off::VERSION..off::VERSION + v.len().min(off::VERSION_LEN)]
        .copy_from_slice(&v[..v.len().min(off::VERSION_LEN)]);
    h[off::FILE_LEN..off::FILE_LEN + 8].copy_from_slice(&file_len.to_le_bytes());
    for (i, (offset, len)) in sections.iter().enumerate() {
        let at = off::SECTIONS + i * 16;
        h[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        h[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
    }
    h[off::SOURCE..off::SOURCE + 32].copy_from_slice(source);
    let sum = seal(&out, key);
    out[off::SEAL..off::SEAL + 32].copy_from_slice(&sum);
    out
}

/// The seal of a whole artifact: BLAKE3 keyed with `key` of every byte, with the seal field as
/// zeros.
pub fn seal(file: &[u8], key: &ArtifactKey) -> [u8; 32] {
    seal_at(file, off::SEAL, key)
}

/// The seal of a whole file whose seal lies at `at` (an artifact's at `off::SEAL`, a bundle's
/// where its owner puts it): BLAKE3 keyed with `key` of every byte, with the seal's 32 as zeros.
pub fn seal_at(file: &[u8], at: usize, key: &ArtifactKey) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key.bytes());
    h.update(&file[..at]);
    h.update(&[0; 32]);
    h.update(&file[at + 32..]);
    *h.finalize().as_bytes()
}

/// Seals artifact bytes again under `key` (after editing them: for tools and tests that
/// forge artifacts on purpose).
pub fn reseal(file: &mut [u8], key: &ArtifactKey) {
    reseal_at(file, off::SEAL, key);
}

/// Seals a file whose seal lies at `at` under `key` (see [`seal_at`]).
pub fn reseal_at(file: &mut [u8], at: usize, key: &ArtifactKey) {
    let sum = seal_at(file, at, key);
    file[at..at + 32].copy_from_slice(&sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ephem_module::{FuncType, GlobalType, HeapType, Import, RefType};

    /// A module importing a global of concrete type 0, where type 0 is `ty`.
    fn importing(ty: FuncType) -> ModuleInfo {
        let g = GlobalType {
            ty: ValType::Ref(RefType {
                nullable: true,
                heap: HeapType::ConcreteFunc(0),
            }),
            mutable: false,
        };
        ModuleInfo {
            types: vec![ty.into()],
            imports: vec![Import {
                module: "m".into(),
                name: "g".into(),
                kind: ImportKind::Global(g),
            }],
            globals: vec![g],
            imported_globals: 1,
            ..ModuleInfo::default()
        }
    }

    /// Imports of one name but of concrete types that differ have different digests; of equal
    /// types at different indices, the same.
    #[test]
    fn digests_tell_concrete_types_by_what_they_are() {
        let unary = FuncType {
            params: vec![ValType::I32],
            results: vec![],
        };
        let a = imports_digest(&importing(FuncType::default()));
        let b = imports_digest(&importing(unary.clone()));
        assert_ne!(a, b);
        let mut shifted = importing(unary);
        shifted.types.insert(0, FuncType::default().into());
        if let ImportKind::Global(g) = &mut shifted.imports[0].kind {
            g.ty = ValType::Ref(RefType {
                nullable: true,
                heap: HeapType::ConcreteFunc(1),
            });
        }
        assert_eq!(imports_digest(&shifted), b);
    }

    /// A function import whose signature names a struct type: two structs of different
    /// fields make different import lists.
    #[test]
    fn digests_tell_struct_types_in_signatures_apart() {
        use ephem_module::{FieldType, StorageType, TypeDef};
        let info = |field: ValType| {
            let param = ValType::Ref(RefType {
                nullable: true,
                heap: HeapType::ConcreteStruct(0),
            });
            ModuleInfo {
                types: vec![
                    TypeDef::Struct(vec![FieldType {
                        storage: StorageType::Val(field),
                        mutable: false,
                    }]),
                    FuncType::new([param], []).into(),
                ],
                imports: vec![Import {
                    module: "env".into(),
                    name: "f".into(),
                    kind: ImportKind::Func(1),
                }],
                funcs: vec![1],
                imported_funcs: 1,
                ..ModuleInfo::default()
            }
        };
        assert_ne!(
            imports_digest(&info(ValType::I32)),
            imports_digest(&info(ValType::F64))
        );
    }
}
