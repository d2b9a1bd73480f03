//! The tables an artifact reads on first use: the function table (where each defined
//! function's code is), the names (for backtraces) and the trap table (what kind of trap an
//! instruction raises). They grow with the module's code, so opening does not read them (unless
//! they lie within its first read, as a small module's do); a trap or a backtrace does.
//!
//! Invariant: the function table is sorted by code offset and each function's code reaches to
//! the next entry's; the names are sorted by function; the trap table is sorted by offset and
//! its index holds the offset of every [`TRAP_BLOCK`]-th entry, so that a lookup reads the index
//! and one block. Verification (`check.rs`) refuses a file where any of this does not hold.

use std::ops::Range;

use ephem_module::{FuncLoc, TrapKind};

use super::{Artifact, damaged, read_at, u32_at};
use crate::Error;
use crate::format::{Section, TRAP_BLOCK};

/// How many entries the names section has (its first word), checked against its length.
pub(super) fn names_count(names: &[u8]) -> Result<usize, Error> {
    if names.is_empty() {
        return Ok(0);
    }
    let count = names.get(..4).map(|b| u32_at(b, 0) as usize);
    count
        .filter(|&n| n <= (names.len() - 4) / 12)
        .ok_or_else(|| damaged("the names section is shorter than its count says"))
}

/// Where the names' bytes start in a names section of `count` entries.
fn names_base(count: usize) -> usize {
    4 + count * 12
}

/// Entry `k` of the names section: function, and the range of its name's bytes in the section
/// (of `count` entries).
pub(super) fn name_entry(names: &[u8], count: usize, k: usize) -> (u32, Range<usize>) {
    let at = 4 + k * 12;
    let base = names_base(count);
    let (start, end) = (
        u32_at(names, at + 4) as usize,
        u32_at(names, at + 8) as usize,
    );
    (u32_at(names, at), base + start..base + end)
}

/// Bytes of one entry of the function table: code offset, then function (0 = the first
/// defined one). Each function's code reaches to the next one's, the last one's to the end of
/// the machine code (the compiler puts the trampolines and host adapters first, and nothing but
/// padding between functions).
pub(super) const FUNC_ENTRY: usize = 8;

/// Entry `k` of the function `table`: its function and where its code is, up to the next
/// entry's code (the last one's up to `code_len`; the length wraps when entries are out of
/// order, which the full check refuses).
fn func_entry(table: &[[u8; FUNC_ENTRY]], k: usize, code_len: u32) -> (u32, FuncLoc) {
    let offset = u32_at(&table[k], 0);
    let end = table.get(k + 1).map_or(code_len, |next| u32_at(next, 0));
    let loc = FuncLoc {
        offset,
        len: end.wrapping_sub(offset),
    };
    (u32_at(&table[k], 4), loc)
}

/// The kind of the trap at code `offset` among sorted trap table `entries`.
fn trap_in(entries: &[u8], offset: u32) -> Option<TrapKind> {
    let (entries, _) = entries.as_chunks::<8>();
    let k = entries
        .binary_search_by_key(&offset, |e| u32_at(e, 0))
        .ok()?;
    TrapKind::from_code(u32_at(&entries[k], 4))
}

impl Artifact {
    /// Every defined function (0 = the first defined one) and where it is in the text, with
    /// the padding after it, in the order of the text.
    pub fn funcs(&self) -> Result<impl ExactSizeIterator<Item = (u32, FuncLoc)> + '_, Error> {
        let table = self.lazy_section(&self.0.funcs, Section::Funcs)?;
        let (table, _) = table.as_chunks::<FUNC_ENTRY>();
        let code_len = self.code_len();
        Ok((0..table.len()).map(move |k| func_entry(table, k, code_len)))
    }

    /// The name section's name of function `func`, if it has one (read on first use).
    pub fn func_name(&self, func: u32) -> Option<String> {
        let names = self.lazy_section(&self.0.names, Section::Names).ok()?;
        let count = names_count(names).ok()?;
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (f, bytes) = name_entry(names, count, mid);
            match f.cmp(&func) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(String::from_utf8_lossy(names.get(bytes)?).into_owned());
                }
            }
        }
        None
    }

    /// The defined function whose code contains text `offset` (module index), and the
    /// offset within it.
    pub fn func_at(&self, offset: u32) -> Option<(u32, u32)> {
        let table = self.lazy_section(&self.0.funcs, Section::Funcs).ok()?;
        let (table, _) = table.as_chunks::<FUNC_ENTRY>();
        let k = (table.partition_point(|e| u32_at(e, 0) <= offset)).checked_sub(1)?;
        let (func, f) = func_entry(table, k, self.code_len());
        (offset < f.offset.wrapping_add(f.len)).then(|| {
            (
                self.info().imported_funcs.to_native() + func,
                offset - f.offset,
            )
        })
    }

    /// The kind of trap raised by the instruction at text `offset`, if it is a trapping one
    /// (`None` also when the trap table cannot be read).
    pub fn trap_at(&self, offset: u32) -> Option<TrapKind> {
        let count = self.trap_count();
        let whole = self
            .in_front(Section::Traps)
            .or(self.0.traps.get().map(Vec::as_slice));
        if let Some(t) = whole {
            return trap_in(&t[..8 * count], offset);
        }
        // The block of the index entry at or before `offset`, read alone.
        let index = match self.0.trap_index.get() {
            Some(index) => index,
            None => {
                let r = &self.0.sections[Section::Traps as usize];
                let mut index = vec![0; count.div_ceil(TRAP_BLOCK) * 4];
                read_at(
                    &self.0.file,
                    &mut index,
                    self.0.base + r.start + 8 * count as u64,
                )
                .ok()?;
                self.0.trap_index.get_or_init(|| index)
            }
        };
        let (index, _) = index.as_chunks::<4>();
        let block =
            (index.partition_point(|&at| u32::from_le_bytes(at) <= offset)).checked_sub(1)?;
        let first = block * TRAP_BLOCK;
        let mut entries = vec![0; 8 * TRAP_BLOCK.min(count - first)];
        let start = self.0.base + self.0.sections[Section::Traps as usize].start + 8 * first as u64;
        read_at(&self.0.file, &mut entries, start).ok()?;
        trap_in(&entries, offset)
    }

    /// Entries in the trap table.
    pub(super) fn trap_count(&self) -> usize {
        self.meta().trap_count.to_native() as usize
    }
}
