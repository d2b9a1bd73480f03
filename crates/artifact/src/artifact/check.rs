//! The metadata checks that verifying an artifact runs (see `open.rs`): the archive is valid,
//! what is derived from the module info is the info's, and every index, offset and range the
//! runtime reads later (in the metadata, the function, name and trap tables, and the lazy
//! funcref data in the text) lies where it must.
//!
//! Invariant: an artifact that passes makes no later read of it index out of bounds or name an
//! unknown trap; it says nothing of whether the machine code matches (only the seal vouches for
//! that). Everything here is proportional to the metadata, the tables and the lazy data, so it
//! runs once per file identity and key.

use ephem_module::TrapKind;

use super::tables::{FUNC_ENTRY, name_entry, names_count};
use super::{Artifact, damaged, read_at, u32_at};
use crate::Error;
use crate::format::{ArchivedMeta, FILE_PAGE, Section, TRAP_BLOCK};

impl Artifact {
    /// Validates the metadata archive, then cross-checks it against itself and the sections, so
    /// that nothing read later indexes out of bounds. Proportional to the metadata.
    pub(super) fn check_metadata(&self) -> Result<(), Error> {
        rkyv::access::<ArchivedMeta, rkyv::rancor::Error>(self.meta_bytes())
            .map_err(|e| damaged(format!("metadata: {e}")))?;
        let info: ephem_module::ModuleInfo = ephem_module::native(&self.meta().info);
        info.check()
            .map_err(|why| damaged(format!("metadata: {why}")))?;
        let derived = self.meta().small_ids.as_slice()
            == crate::format::small_ids(&info).as_slice()
            && self.meta().imports_digest == crate::format::imports_digest(&info);
        if !derived {
            return Err(damaged(
                "metadata: the type ids or the imports' digest are not the module's",
            ));
        }
        let eager = info.escaping();
        if self.eager() != eager.as_slice() {
            return Err(damaged(
                "metadata: the eager functions are not the module's",
            ));
        }
        let slots = crate::format::elem_slots(&info, &eager);
        let archived = &self.meta().elem_slots;
        let same = slots.len() == archived.len()
            && (slots.iter().zip(archived.iter())).all(|(s, a)| a.as_slice() == s.as_slice());
        if !same {
            return Err(damaged(
                "metadata: the element segments' funcref slots are not theirs",
            ));
        }
        self.check_consistency()?;
        self.check_tables()
    }

    /// The function and trap tables: every defined function has one entry, its code lies inside
    /// the machine code without overlapping another's, in order; the trap table is sorted and
    /// names known kinds.
    fn check_tables(&self) -> Result<(), Error> {
        let text = u64::from(self.code_len());
        let mut code = vec![None; self.info().defined_funcs()];
        for (func, f) in self.funcs()? {
            // The length is what lies before the next entry (or the end): 0 when two share an
            // offset, wrapped past the text when they are out of order.
            if f.len == 0 || u64::from(f.offset) + u64::from(f.len) > text {
                return Err(damaged(
                    "a function's code lies outside the text, or overlaps another's",
                ));
            }
            match code.get_mut(func as usize) {
                Some(slot @ None) => *slot = Some(f.offset),
                _ => {
                    return Err(damaged(
                        "the function table names a function twice, or none",
                    ));
                }
            }
        }
        let imported = self.info().imported_funcs.to_native();
        let code_is = |f: u32, at: u32| {
            f.checked_sub(imported)
                .and_then(|f| code.get(f as usize).copied().flatten())
                .is_some_and(|offset| offset == at)
        };
        let code_matches = (self.eager().iter())
            .zip(self.eager_code())
            .all(|(f, code)| code_is(f.to_native(), code.to_native()));
        if self.eager().len() != self.eager_code().len() || !code_matches {
            return Err(damaged(
                "the eager functions' code is not the function table's",
            ));
        }
        self.check_lazy(code_is)?;
        let names = self.lazy_section(&self.0.names, Section::Names)?;
        let count = names_count(names)?;
        let mut last = None;
        for k in 0..count {
            let (func, bytes) = name_entry(names, count, k);
            let in_bounds = bytes.start <= bytes.end && bytes.end <= names.len();
            if last.is_some_and(|l| l >= func)
                || func >= self.info().funcs.len() as u32
                || !in_bounds
            {
                return Err(damaged(
                    "the names table is not sorted by function, or lies outside",
                ));
            }
            last = Some(func);
        }
        let traps = self.lazy_section(&self.0.traps, Section::Traps)?;
        let (entries, index) = traps.split_at(8 * self.trap_count());
        let indexed = (entries.chunks_exact(8).step_by(TRAP_BLOCK))
            .zip(index.chunks_exact(4))
            .all(|(e, i)| e[..4] == *i);
        if !indexed {
            return Err(damaged("the trap table's index is not its own"));
        }
        let mut last = None;
        for entry in entries.chunks_exact(8) {
            let at = u32_at(entry, 0);
            if last.is_some_and(|l| l >= at)
                || u64::from(at) >= text
                || TrapKind::from_code(u32_at(entry, 4)).is_none()
            {
                return Err(damaged(
                    "the trap table is not sorted, or names unknown traps",
                ));
            }
            last = Some(at);
        }
        self.check_call_sites()
    }

    /// The calls with exception handlers or stack maps: sorted by return address, each in a
    /// function with its handlers, its frame a sane size holding the vmctx and the references
    /// it names, its tags the module's.
    /// (The unwinder sets the stack pointer and jumps by these: only the seal vouches that the
    /// code agrees, but nothing here may send it outside the function or its frame.)
    fn check_call_sites(&self) -> Result<(), Error> {
        /// The largest frame a call site may claim (Cranelift's frames are far smaller).
        const MAX_FRAME: u32 = 1 << 24;
        let tags = self.info().tags.len() as u32;
        let mut last = None;
        for site in self.meta().call_sites.iter() {
            let (ret, frame) = (site.ret.to_native(), site.frame_offset.to_native());
            let func = ret
                .checked_sub(1)
                .and_then(|at| self.func_at(at))
                .map(|(f, _)| f);
            let in_func = |at: u32| self.func_at(at).map(|(f, _)| f) == func;
            let sound = func.is_some()
                && last.is_none_or(|l| l < ret)
                && frame.is_multiple_of(8)
                && frame <= MAX_FRAME
                && site
                    .vmctx_at
                    .to_native()
                    .checked_add(8)
                    .is_some_and(|end| end <= frame)
                && (site.refs.iter()).all(|r| {
                    let r = r.to_native();
                    r.is_multiple_of(8) && r.checked_add(8).is_some_and(|end| end <= frame)
                })
                && (site.catches.iter()).all(|c| {
                    in_func(c.target.to_native())
                        && c.tag.as_ref().is_none_or(|t| t.to_native() < tags)
                });
            if !sound {
                return Err(damaged(
                    "the call sites are not sorted, their handlers or references lie outside \
                     their function or frame, or they name unknown tags",
                ));
            }
            last = Some(ret);
        }
        Ok(())
    }

    /// The lazy funcrefs and tables in the text: the slots name defined functions, sorted,
    /// with their code as the function table has it, and none eager; every table element is
    /// null or a slot; tables are defined funcref ones, each named once.
    fn check_lazy(&self, code_is: impl Fn(u32, u32) -> bool) -> Result<(), Error> {
        // Only what follows the code: the lazy data is all there.
        let code_len = self.code_len() as usize;
        let mut tail = vec![0; self.text_len().saturating_sub(code_len)];
        read_at(
            &self.0.file,
            &mut tail,
            self.text_file_offset() + code_len as u64,
        )?;
        let words = |at: u32, count: u32| {
            let start = (at as usize).checked_sub(code_len)?;
            let end = (count as usize)
                .checked_mul(4)
                .and_then(|n| n.checked_add(start));
            let bytes = end
                .filter(|_| (at as usize).is_multiple_of(4))
                .and_then(|e| tail.get(start..e));
            bytes.map(|b| {
                b.chunks_exact(4)
                    .map(|w| u32_at(w, 0))
                    .collect::<Vec<u32>>()
            })
        };
        let bad = |why: &str| damaged(format!("the lazy funcrefs: {why}"));
        let (at, count) = self.lazy_slots();
        let slots = words(at, count.checked_mul(2).ok_or_else(|| bad("too many"))?)
            .ok_or_else(|| bad("outside the text"))?;
        let (slots, _) = slots.as_chunks::<2>();
        let eager = self.eager();
        let sound = slots.windows(2).all(|w| w[0][0] < w[1][0])
            && (slots.iter())
                .all(|&[f, code]| code_is(f, code) && eager.binary_search(&f.into()).is_err());
        if !sound {
            return Err(bad("not the module's functions"));
        }
        let info = self.info();
        let all = self.funcref_slots();
        let mut seen = Vec::new();
        for t in self.meta().lazy_tables.iter() {
            let (table, len) = (t.table.to_native(), t.len.to_native());
            let ty = info.tables.get(table as usize);
            let fits = ty.is_some_and(|ty| {
                table >= info.imported_tables.to_native()
                    && ty.elem.native() == ephem_module::ValType::FUNCREF
                    && len <= ty.min.to_native()
            });
            let elements = words(t.at.to_native(), len).ok_or_else(|| bad("outside the text"))?;
            if !fits || seen.contains(&table) || elements.iter().any(|&e| e > all) {
                return Err(bad(
                    "a table that cannot be lazy, or an element that is no slot",
                ));
            }
            seen.push(table);
        }
        Ok(())
    }

    /// Cross-checks the metadata against the sections.
    fn check_consistency(&self) -> Result<(), Error> {
        let m = self.meta();
        let info = &m.info;
        let text = self.code_len() as usize;
        let sec = |s: Section| self.section_len(s);
        let types = info.types.len();
        let imports_fit = info.imported_funcs.to_native() as usize <= info.funcs.len()
            && info.imported_memories.to_native() as usize <= info.memories.len()
            && info.imported_tables.to_native() as usize <= info.tables.len()
            && info.imported_globals.to_native() as usize <= info.globals.len();
        let ok = imports_fit
            && text <= self.text_len()
            && sec(Section::Funcs) == FUNC_ENTRY * info.defined_funcs()
            && sec(Section::Traps) == crate::format::traps_len(m.trap_count.to_native() as usize)
            && m.trampolines.len() == types
            && m.host_adapters.len() == types
            && m.trampolines
                .iter()
                .chain(m.host_adapters.iter())
                .all(|o| (o.to_native() as usize) < text)
            && m.relocs
                .iter()
                .all(|r| (r.offset.to_native() as usize).saturating_add(8) <= text)
            && info.funcs.iter().all(|t| (t.to_native() as usize) < types)
            && m.eager.iter().all(|f| {
                (info.imported_funcs.to_native()..info.funcs.len() as u32).contains(&f.to_native())
            })
            && info.datas.iter().all(|d| {
                d.range.start <= d.range.end
                    && d.range.end.to_native() as usize <= sec(Section::Data)
            })
            && m.data_index.len() == info.datas.len()
            && m.data_index.windows(2).all(|w| w[0] < w[1])
            && sec(Section::Spans) % 16 == 0
            && m.images.iter().all(|i| {
                let (memory, offset, len) = (
                    i.memory.to_native(),
                    i.offset.to_native(),
                    i.len.to_native(),
                );
                let section_offset = i.section_offset.to_native();
                let [first, end] = i.spans.map(|s| s.to_native() as usize);
                (memory as usize) < info.memories.len()
                    && first <= end
                    && end <= sec(Section::Spans) / 16
                    && offset % FILE_PAGE as u64 == 0
                    && section_offset % FILE_PAGE as u64 == 0
                    && section_offset.saturating_add(len) <= sec(Section::Images) as u64
                    && offset.saturating_add(len) <= {
                        let ty = &info.memories[memory as usize];
                        u64::from(ty.min.to_native()) << ty.page_size_log2.min(16)
                    }
            });
        if !ok {
            return Err(damaged("metadata does not match the sections"));
        }
        // Each image's spans: sorted, disjoint, within the image.
        for image in m.images.iter() {
            let (offset, len) = (image.offset.to_native(), image.len.to_native());
            let mut last = offset;
            for (start, end) in self.image_spans(image)? {
                if !(last <= start && start < end && end <= offset.saturating_add(len)) {
                    return Err(damaged("an image's spans do not fit it"));
                }
                last = end;
            }
        }
        Ok(())
    }
}
