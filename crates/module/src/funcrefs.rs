//! Where a module's funcrefs live, and which of its tables are filled lazily.
//!
//! Instantiation must not grow with a module's tables or functions: a Go program has a funcref
//! table of ten thousand elements, and writing them (and a funcref per function they name) on
//! every instantiation costs more than the rest of the fresh path together. So:
//!
//! - A defined funcref table is **lazy** when every active element segment that targets it has a
//!   constant offset, lies within the table's minimum size (so applying it cannot trap) and
//!   holds only `ref.func` and `ref.null` items. Its initial contents are computed here once,
//!   at compile time ([`LazyTable::elements`]); instantiation leaves the table empty, and an
//!   element is made the first time anything reads it (`call_indirect`, `table.get`,
//!   `table.copy`, the host). The segments it absorbed are **covered**: instantiation skips
//!   them, which is what dropping an applied active segment amounts to.
//! - Funcref slots in the vmctx come in three runs: the imported functions', then the **eager**
//!   ones' (written at instantiation: what exports, global initialisers, the start function and
//!   uncovered segments name, see [`ModuleInfo::escaping`]), then the **lazy** ones' (functions
//!   only covered segments name, written when an element or a `ref.func` first needs one).
//!
//! The compiler and the artifact writer both derive the layout with [`FuncrefLayout::of`], so
//! the slots the code uses and the ones the runtime fills agree.

use crate::{ConstExpr, ModuleInfo, Placement, SegmentMode, ValType};

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncrefLayout {
    /// Defined functions whose funcref instantiation writes (sorted).
    pub eager: Vec<u32>,
    /// Defined functions only covered segments name (sorted, none of them eager).
    pub lazy: Vec<u32>,
    /// The lazy tables, by table index.
    pub tables: Vec<LazyTable>,
    /// Per element segment: whether a lazy table absorbed it.
    pub covered: Vec<bool>,
}

/// A lazy table's initial contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LazyTable {
    pub table: u32,
    /// Element `i`'s function, or `None` for null; elements past the end are null.
    pub elements: Vec<Option<u32>>,
}

impl FuncrefLayout {
    pub fn of(info: &ModuleInfo) -> FuncrefLayout {
        let mut covered = vec![false; info.elems.len()];
        let mut tables = Vec::new();
        for table in info.imported_tables..info.tables.len() as u32 {
            if let Some((lazy, segments)) = lazy_table(info, table) {
                for s in segments {
                    covered[s] = true;
                }
                tables.push(lazy);
            }
        }
        let eager = info.escaping_but(&covered);
        // Every function a covered segment names, even one a later segment overwrote: `ref.func`
        // may name it.
        let named = (info.elems.iter().zip(&covered))
            .filter(|(_, c)| **c)
            .flat_map(|(seg, _)| &seg.items);
        let mut lazy: Vec<u32> = named
            .filter_map(|item| match *item {
                ConstExpr::RefFunc(f) => Some(f),
                _ => None,
            })
            .filter(|&f| f >= info.imported_funcs && eager.binary_search(&f).is_err())
            .collect();
        lazy.sort_unstable();
        lazy.dedup();
        FuncrefLayout {
            eager,
            lazy,
            tables,
            covered,
        }
    }

    /// Funcref slots in all: imported, eager and lazy.
    pub fn slots(&self, imported: u32) -> u32 {
        imported + (self.eager.len() + self.lazy.len()) as u32
    }

    /// The slot of function `func`, if it has one.
    pub fn slot(&self, imported: u32, func: u32) -> Option<u32> {
        let first_lazy = imported + self.eager.len() as u32;
        crate::VmOffsets::eager_slot(imported, &self.eager, func)
            .or_else(|| (self.lazy.binary_search(&func).ok()).map(|r| first_lazy + r as u32))
    }

    /// Whether `slot` is one of the lazy ones.
    pub fn is_lazy(&self, imported: u32, slot: u32) -> bool {
        slot >= imported + self.eager.len() as u32
    }
}

/// Table `table`'s lazy contents and the segments they absorb, if it can be lazy and some
/// segment fills it.
fn lazy_table(info: &ModuleInfo, table: u32) -> Option<(LazyTable, Vec<usize>)> {
    let ty = &info.tables[table as usize];
    // Only `funcref` tables: an artifact's check of a lazy table's elements then needs no
    // types. (A table with an initialiser other than null starts full: it is not lazy.)
    let init =
        (table.checked_sub(info.imported_tables)).and_then(|t| info.table_inits.get(t as usize));
    // (A table larger than any the runtime makes never instantiates: nothing to lay out.)
    if ty.elem != ValType::FUNCREF
        || init.is_some_and(|i| *i != ConstExpr::RefNull)
        || ty.min > crate::MAX_TABLE_ELEMENTS
    {
        return None;
    }
    let mut elements = Vec::new();
    let mut segments = Vec::new();
    for (s, seg) in info.elems.iter().enumerate() {
        let len = seg.items.len() as u64;
        let (start, end) = match seg
            .mode
            .placement(table, len, u64::from(ty.min), ty.table64)
        {
            Placement::Elsewhere => continue,
            Placement::Dynamic => return None,
            Placement::Static(r) => (r.start, r.end),
        };
        if elements.len() < end as usize {
            elements.resize(end as usize, None);
        }
        for (k, item) in seg.items.iter().enumerate() {
            elements[start as usize + k] = match *item {
                ConstExpr::RefFunc(f) => Some(f),
                ConstExpr::RefNull => None,
                _ => return None,
            };
        }
        segments.push(s);
    }
    // A table no segment fills needs no initial contents: its elements start null anyway.
    (!segments.is_empty()).then_some((LazyTable { table, elements }, segments))
}

impl ModuleInfo {
    /// Absorbs the `covered` element segments: they become declared ones with no items (as
    /// artifacts store them: see [`FuncrefLayout`]).
    pub fn drop_covered(&mut self, covered: &[bool]) {
        for (seg, &c) in self.elems.iter_mut().zip(covered) {
            if c {
                seg.mode = SegmentMode::Declared;
                seg.items = Vec::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ElemSegment, TableType};

    fn module(tables: &[(u32, ValType)], elems: Vec<ElemSegment>) -> ModuleInfo {
        ModuleInfo {
            types: vec![crate::FuncType::default().into()],
            funcs: vec![0; 8],
            tables: tables
                .iter()
                .map(|&(min, elem)| TableType::new(elem, min, None))
                .collect(),
            elems,
            ..Default::default()
        }
    }

    fn active(table: u32, offset: ConstExpr, items: &[Option<u32>]) -> ElemSegment {
        ElemSegment {
            mode: SegmentMode::Active {
                index: table,
                offset,
            },
            ty: ValType::FUNCREF,
            items: items
                .iter()
                .map(|i| i.map_or(ConstExpr::RefNull, ConstExpr::RefFunc))
                .collect(),
        }
    }

    #[test]
    fn constant_segments_in_bounds_make_a_lazy_table_applied_in_order() {
        let info = module(
            &[(10, ValType::FUNCREF)],
            vec![
                active(0, ConstExpr::I32(2), &[Some(1), Some(2), Some(3)]),
                active(0, ConstExpr::I32(3), &[None, Some(5)]),
            ],
        );
        let layout = FuncrefLayout::of(&info);
        assert_eq!(layout.covered, [true, true]);
        assert_eq!(
            layout.tables,
            [LazyTable {
                table: 0,
                elements: vec![None, None, Some(1), None, Some(5)],
            }]
        );
        // Function 2 was overwritten, but `ref.func` may still name it.
        assert_eq!(layout.lazy, [1, 2, 3, 5]);
        assert!(layout.eager.is_empty());
        assert_eq!(layout.slots(0), 4);
        assert_eq!(layout.slot(0, 5), Some(3));
        assert_eq!(layout.slot(0, 4), None);
    }

    #[test]
    fn a_segment_that_could_trap_or_reads_a_global_keeps_its_table_eager() {
        for seg in [
            active(0, ConstExpr::I32(9), &[Some(1), Some(2)]),
            active(0, ConstExpr::GlobalGet(0), &[Some(1)]),
            ElemSegment {
                items: vec![ConstExpr::GlobalGet(0)],
                ..active(0, ConstExpr::I32(0), &[])
            },
        ] {
            let info = module(&[(10, ValType::FUNCREF)], vec![seg]);
            let layout = FuncrefLayout::of(&info);
            assert!(layout.tables.is_empty() && layout.covered == [false]);
        }
    }

    #[test]
    fn exported_functions_stay_eager_and_imported_ones_keep_their_index() {
        let mut info = module(
            &[(4, ValType::FUNCREF)],
            vec![active(0, ConstExpr::I32(0), &[Some(0), Some(3), Some(4)])],
        );
        info.imported_funcs = 1;
        info.exports.push(crate::Export {
            name: "f".into(),
            index: crate::EntityIndex::Func(4),
        });
        let layout = FuncrefLayout::of(&info);
        assert_eq!(
            (layout.eager.as_slice(), layout.lazy.as_slice()),
            (&[4][..], &[3][..])
        );
        assert_eq!(layout.slot(1, 0), Some(0));
        assert_eq!(layout.slot(1, 4), Some(1));
        assert_eq!(layout.slot(1, 3), Some(2));
        assert!(layout.is_lazy(1, 2) && !layout.is_lazy(1, 1));
    }
}
