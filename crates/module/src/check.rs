//! Consistency of a [`ModuleInfo`] read from a file: every index points inside its index space
//! and every type is one the runtime can act on.
//!
//! The compiler only produces infos from validated wasm; this check is for infos read back
//! from an artifact, whose metadata may be damaged or forged. It proves what the runtime's
//! reads of the metadata rely on (nothing indexes out of bounds, constants have the types their
//! users expect, the start function takes and returns nothing), not that the metadata matches
//! the machine code: only the artifact's key vouches for that. (`names` is not checked: an
//! artifact keeps names in a section of their own, which it checks itself.)

use crate::{
    ConstExpr, ConstOp, EntityIndex, FieldType, HeapType, ImportKind, ModuleInfo, RefType,
    SegmentMode, StorageType, TypeDef, ValType,
};

impl ModuleInfo {
    /// Checks that the info is self-consistent (see the module documentation); the error says
    /// what is not.
    pub fn check(&self) -> Result<(), String> {
        let types = self.types.len();
        let funcs = self.funcs.len();
        let is_sig = |t: u32| self.types.get(t as usize).and_then(|t| t.as_func());
        if let Some(f) = self.funcs.iter().position(|&t| is_sig(t).is_none()) {
            return Err(format!(
                "function {f} has type {} of {types}, not a function type",
                self.funcs[f]
            ));
        }
        // Recursion groups of more than one type, in order, within the types.
        let mut end = 0;
        for g in &self.rec_groups {
            let fits = (g.start.checked_add(g.len)).is_some_and(|e| e as usize <= types);
            if g.len < 2 || g.start < end || !fits {
                return Err(format!("bad recursion group {g:?}"));
            }
            end = g.start + g.len;
        }
        // A concrete type names a type before it, itself or a member of its group, of the
        // kind its reference says, and every other type that names one exists.
        let kind_ok = |h: HeapType| match h.concrete() {
            Some(c) => self.types.get(c as usize).is_some_and(|t| t.heap(c) == h),
            None => true,
        };
        for (i, ty) in self.types.iter().enumerate() {
            let last = crate::group_of(&self.rec_groups, i as u32)
                .map_or(i as u32, |g| g.start + g.len - 1);
            if let Some(c) = ty.concrete().find(|&c| c > last) {
                return Err(format!("type {i} names type {c}, after it and its group"));
            }
            let mut heaps = ty.value_types().filter_map(|t| Some(t.as_ref()?.heap));
            if let Some(h) = heaps.find(|&h| !kind_ok(h)) {
                return Err(format!("type {i} names {h:?}, not a type of that kind"));
            }
        }
        // What types declare of subtyping: a supertype before them, of their kind, not final.
        if !self.subs.is_empty() && self.subs.len() != types {
            return Err("one subtyping declaration per type is wanted".into());
        }
        for (i, sub) in self.subs.iter().enumerate() {
            let Some(s) = sub.supertype else { continue };
            let kind = |t: u32| self.types[t as usize].heap(0);
            if s as usize >= i || self.sub(s).is_final || kind(s) != kind(i as u32) {
                return Err(format!("type {i} cannot declare type {s} its supertype"));
            }
        }
        // Types compare as WebAssembly compares them: a module may declare one type twice.
        let reps = self.representatives();
        let canon = |t: ValType| t.map_concrete(|c| reps[c as usize]);
        // Whether representative `a` is below representative `b` by declared supertypes.
        let below = |a: u32, b: u32| self.supertypes(a).any(|s| reps[s as usize] == b);
        let fits = |t: ValType, want: ValType| canon(t).matches_with(canon(want), &below);
        // A declared supertype's fields, parameters and results fit the subtype's.
        for (i, sub) in self.subs.iter().enumerate() {
            if let Some(s) = sub.supertype
                && !self.extends(&self.types[i], &self.types[s as usize], &fits)
            {
                return Err(format!("type {i} does not extend its supertype {s}"));
            }
        }
        let concrete_ok = |t: ValType| t.as_ref().is_none_or(|r| kind_ok(r.heap));
        let value_types = (self.tables.iter().map(|t| t.elem))
            .chain(self.globals.iter().map(|g| g.ty))
            .chain(self.elems.iter().map(|e| e.ty));
        for t in value_types {
            if !concrete_ok(t) {
                return Err(format!("{t:?} names a type that is not there"));
            }
        }
        // A tag's type says what its exceptions carry: no results.
        let tag_ok = |&t: &u32| is_sig(t).is_some_and(|t| t.results.is_empty());
        if let Some(tag) = self.tags.iter().position(|t| !tag_ok(t)) {
            return Err(format!("tag {tag} has a type that is not a tag's"));
        }
        let imported = [
            self.imported_funcs as usize,
            self.imported_tables as usize,
            self.imported_memories as usize,
            self.imported_globals as usize,
            self.imported_tags as usize,
        ];
        let defined = [
            funcs,
            self.tables.len(),
            self.memories.len(),
            self.globals.len(),
            self.tags.len(),
        ];
        if imported.iter().zip(&defined).any(|(i, d)| i > d) {
            return Err("more imports than entities".into());
        }
        // Imports come first in each index space, in order, with the declared types.
        let mut seen = [0usize; 5];
        for import in &self.imports {
            let (space, matches) = match &import.kind {
                ImportKind::Func(t) => (0, self.funcs.get(seen[0]) == Some(t)),
                ImportKind::Table(t) => (1, self.tables.get(seen[1]) == Some(t)),
                ImportKind::Memory(t) => (2, self.memories.get(seen[2]) == Some(t)),
                ImportKind::Global(t) => (3, self.globals.get(seen[3]) == Some(t)),
                ImportKind::Tag(t) => (4, self.tags.get(seen[4]) == Some(t)),
            };
            if !matches {
                return Err(format!(
                    "import {}::{} does not match its entity",
                    import.module, import.name
                ));
            }
            seen[space] += 1;
        }
        if seen != imported {
            return Err("import counts do not match the imports".into());
        }
        for t in &self.tables {
            if !t.elem.is_ref() || t.max.is_some_and(|m| m < t.min) {
                return Err(format!("bad table type {t:?}"));
            }
        }
        if let Some(m) = self.memories.iter().find(|m| !m.is_valid()) {
            return Err(format!("bad memory type {m:?}"));
        }
        // A memory whose accesses only faults bound, in code that checks the others, is one
        // of 32-bit addresses and 64 KiB pages, shared or defined here (as the compiler decides).
        let imported_memories = self.imported_memories as usize;
        let faults_fit = |(i, (m, &f)): (usize, (&crate::MemoryType, &bool))| {
            !f || (self.checks_bounds
                && !m.needs_bounds_checks()
                && (m.shared || i >= imported_memories))
        };
        if self.faults_bound.len() != self.memories.len()
            || !(self.memories.iter().zip(&self.faults_bound).enumerate()).all(faults_fit)
        {
            return Err("bad list of memories bounded by faults".into());
        }

        // Constant expressions: what they read exists, and they have the type wanted.
        // A constant reads the globals before it: for a global's initialiser, the globals
        // before that one (imported ones, and with WebAssembly 3.0 defined ones); elsewhere
        // every global (they are all initialised first).
        let all = self.globals.len() as u32;
        let const_type = |e: &ConstExpr, want: ValType, visible: u32| -> Result<(), String> {
            let ok = match *e {
                ConstExpr::I32(_) => want == ValType::I32,
                ConstExpr::I64(_) => want == ValType::I64,
                ConstExpr::F32(_) => want == ValType::F32,
                ConstExpr::F64(_) => want == ValType::F64,
                ConstExpr::V128(_) => want == ValType::V128,
                ConstExpr::Extended(i) => self
                    .extended
                    .get(i as usize)
                    .and_then(|ops| self.extended_type(ops, visible, &fits))
                    .is_some_and(|t| fits(t, want)),
                ConstExpr::RefNull => matches!(want, ValType::Ref(r) if r.nullable),
                ConstExpr::RefFunc(f) => self.funcs.get(f as usize).is_some_and(|&t| {
                    let ty = RefType {
                        nullable: false,
                        heap: HeapType::ConcreteFunc(reps[t as usize]),
                    };
                    ValType::Ref(ty).matches_with(canon(want), &below)
                }),
                ConstExpr::GlobalGet(g) => g < visible && fits(self.globals[g as usize].ty, want),
            };
            if ok {
                Ok(())
            } else {
                Err(format!("constant {e:?} where a {want:?} is wanted"))
            }
        };
        let defined_globals = self.globals.len() - self.imported_globals as usize;
        if self.global_inits.len() != defined_globals {
            return Err("one initialiser per defined global is wanted".into());
        }
        let inits = self.global_inits.iter().zip(&self.globals[imported[3]..]);
        for (k, (init, g)) in inits.enumerate() {
            const_type(init, g.ty, (imported[3] + k) as u32)?;
        }

        let defined_tables = self.tables.len() - self.imported_tables as usize;
        if self.table_inits.len() != defined_tables {
            return Err("one initialiser per defined table is wanted".into());
        }
        for (init, t) in self.table_inits.iter().zip(&self.tables[imported[1]..]) {
            const_type(init, t.elem, all)?;
        }

        for e in &self.exports {
            let (index, len) = match e.index {
                EntityIndex::Func(i) => (i, funcs),
                EntityIndex::Table(i) => (i, self.tables.len()),
                EntityIndex::Memory(i) => (i, self.memories.len()),
                EntityIndex::Global(i) => (i, self.globals.len()),
                EntityIndex::Tag(i) => (i, self.tags.len()),
            };
            if index as usize >= len {
                return Err(format!(
                    "export {:?} names {:?}, which is not there",
                    e.name, e.index
                ));
            }
        }
        if let Some(start) = self.start {
            let ty = self.funcs.get(start as usize).map(|&t| self.sig(t));
            if !ty.is_some_and(|t| t.params.is_empty() && t.results.is_empty()) {
                return Err(format!(
                    "start function {start} is not a function of no values"
                ));
            }
        }

        for (i, seg) in self.elems.iter().enumerate() {
            if !seg.ty.is_ref() {
                return Err(format!("element segment {i} holds {:?}", seg.ty));
            }
            if let SegmentMode::Active { index, offset } = &seg.mode {
                let table = self.tables.get(*index as usize);
                let Some(table) = table.filter(|t| fits(seg.ty, t.elem)) else {
                    return Err(format!("element segment {i} does not fit table {index}"));
                };
                const_type(offset, table.index_type(), all)?;
            }
            for item in &seg.items {
                const_type(item, seg.ty, all)?;
            }
        }
        for (i, seg) in self.datas.iter().enumerate() {
            if seg.range.start > seg.range.end {
                return Err(format!("data segment {i} has a reversed range"));
            }
            if let SegmentMode::Active { index, offset } = &seg.mode {
                let Some(memory) = self.memories.get(*index as usize) else {
                    return Err(format!("data segment {i} targets memory {index}"));
                };
                const_type(offset, memory.index_type(), all)?;
            }
        }
        Ok(())
    }

    /// For each type, the index of the first type equal to it: two declarations of one
    /// signature are one type, and so are two that name equal types. Each type names only
    /// earlier ones or itself (checked before this is asked).
    fn representatives(&self) -> Vec<u32> {
        let concrete = |t: &ValType| t.concrete().is_some();
        let any_concrete = self.types.iter().any(|t| t.concrete().next().is_some())
            || !self.rec_groups.is_empty()
            || !self.subs.is_empty()
            || self.tables.iter().any(|t| concrete(&t.elem))
            || self.globals.iter().any(|g| concrete(&g.ty))
            || self.elems.iter().any(|e| concrete(&e.ty));
        if !any_concrete {
            // Nothing compares types by index (a function reference of no concrete type
            // matches `funcref` whatever its type): no keys to make.
            return (0..self.types.len() as u32).collect();
        }
        let mut reps: Vec<u32> = Vec::with_capacity(self.types.len());
        let mut first = std::collections::HashMap::new();
        let mut key = Vec::new();
        for i in 0..self.types.len() as u32 {
            let outside = &mut |c: u32, out: &mut Vec<u8>| crate::id_key(reps[c as usize], out);
            let sub = |t: u32| self.sub(t);
            crate::type_key(&self.types, &sub, &self.rec_groups, i, &mut key, outside);
            reps.push(*first.entry(key.clone()).or_insert(i));
        }
        reps
    }

    /// Whether `sub` may declare `sup` its supertype (of one kind, checked before): its
    /// signature takes what `sup`'s takes and returns what it returns, or its fields begin
    /// with `sup`'s, each the same where mutable and below where not.
    fn extends(
        &self,
        sub: &TypeDef,
        sup: &TypeDef,
        fits: &dyn Fn(ValType, ValType) -> bool,
    ) -> bool {
        let field = |a: &FieldType, b: &FieldType| {
            a.mutable == b.mutable
                && match (a.storage, b.storage) {
                    (StorageType::Val(x), StorageType::Val(y)) => {
                        fits(x, y) && (!a.mutable || fits(y, x))
                    }
                    (x, y) => x == y,
                }
        };
        match (sub, sup) {
            (TypeDef::Func(a), TypeDef::Func(b)) => {
                a.params.len() == b.params.len()
                    && a.results.len() == b.results.len()
                    && a.params.iter().zip(&b.params).all(|(&x, &y)| fits(y, x))
                    && a.results.iter().zip(&b.results).all(|(&x, &y)| fits(x, y))
            }
            (TypeDef::Struct(a), TypeDef::Struct(b)) => {
                a.len() >= b.len() && a.iter().zip(b).all(|(x, y)| field(x, y))
            }
            (TypeDef::Array(a), TypeDef::Array(b)) => field(a, b),
            _ => false,
        }
    }

    /// The type an extended constant expression leaves, if it is a well-typed program that
    /// reads only globals among the first `visible`, names only types and functions that
    /// exist (a struct or array type where it makes one) and leaves exactly one value.
    /// `fits(t, want)` says whether a value of `t` is one of `want`.
    fn extended_type(
        &self,
        ops: &[ConstOp],
        visible: u32,
        fits: &dyn Fn(ValType, ValType) -> bool,
    ) -> Option<ValType> {
        let mut stack: Vec<ValType> = Vec::new();
        let pop = |stack: &mut Vec<ValType>, want: ValType| -> Option<()> {
            let t = stack.pop()?;
            fits(t, want).then_some(())
        };
        let unpacked = |f: &FieldType| match f.storage {
            StorageType::Val(t) => t,
            _ => ValType::I32,
        };
        let made = |ty: u32| {
            ValType::Ref(RefType {
                nullable: false,
                heap: self.types[ty as usize].heap(ty),
            })
        };
        let array = |ty: u32| match self.types.get(ty as usize)? {
            TypeDef::Array(elem) => Some(*elem),
            _ => None,
        };
        let defaultable = |f: &FieldType| match f.storage {
            StorageType::Val(t) => t.defaultable(),
            _ => true,
        };
        for op in ops {
            let ty = match *op {
                ConstOp::I32(_) => ValType::I32,
                ConstOp::I64(_) => ValType::I64,
                ConstOp::F32(_) => ValType::F32,
                ConstOp::F64(_) => ValType::F64,
                ConstOp::V128(_) => ValType::V128,
                ConstOp::GlobalGet(g) => {
                    if g >= visible {
                        return None;
                    }
                    self.globals.get(g as usize)?.ty
                }
                ConstOp::I32Add | ConstOp::I32Sub | ConstOp::I32Mul => {
                    pop(&mut stack, ValType::I32)?;
                    pop(&mut stack, ValType::I32)?;
                    ValType::I32
                }
                ConstOp::I64Add | ConstOp::I64Sub | ConstOp::I64Mul => {
                    pop(&mut stack, ValType::I64)?;
                    pop(&mut stack, ValType::I64)?;
                    ValType::I64
                }
                ConstOp::RefNull(heap) => {
                    if heap
                        .concrete()
                        .is_some_and(|c| c as usize >= self.types.len())
                    {
                        return None;
                    }
                    ValType::Ref(RefType {
                        nullable: true,
                        heap,
                    })
                }
                ConstOp::RefFunc(f) => {
                    let t = *self.funcs.get(f as usize)?;
                    ValType::Ref(RefType {
                        nullable: false,
                        heap: HeapType::ConcreteFunc(t),
                    })
                }
                ConstOp::RefI31 => {
                    pop(&mut stack, ValType::I32)?;
                    ValType::Ref(RefType {
                        nullable: false,
                        heap: HeapType::I31,
                    })
                }
                ConstOp::AnyConvertExtern | ConstOp::ExternConvertAny => {
                    let (from, to) = match op {
                        ConstOp::AnyConvertExtern => (HeapType::Extern, HeapType::Any),
                        _ => (HeapType::Any, HeapType::Extern),
                    };
                    let ValType::Ref(r) = stack.pop()? else {
                        return None;
                    };
                    let nullable = RefType {
                        heap: from,
                        nullable: true,
                    };
                    ValType::Ref(r)
                        .matches(ValType::Ref(nullable))
                        .then_some(())?;
                    ValType::Ref(RefType {
                        nullable: r.nullable,
                        heap: to,
                    })
                }
                ConstOp::StructNew(ty) | ConstOp::StructNewDefault(ty) => {
                    let Some(TypeDef::Struct(fields)) = self.types.get(ty as usize) else {
                        return None;
                    };
                    if matches!(op, ConstOp::StructNew(_)) {
                        for f in fields.iter().rev() {
                            pop(&mut stack, unpacked(f))?;
                        }
                    } else if !fields.iter().all(defaultable) {
                        return None;
                    }
                    made(ty)
                }
                ConstOp::ArrayNew(ty) | ConstOp::ArrayNewDefault(ty) => {
                    let elem = array(ty)?;
                    pop(&mut stack, ValType::I32)?;
                    if matches!(op, ConstOp::ArrayNew(_)) {
                        pop(&mut stack, unpacked(&elem))?;
                    } else if !defaultable(&elem) {
                        return None;
                    }
                    made(ty)
                }
                ConstOp::ArrayNewFixed(ty, n) => {
                    let elem = array(ty)?;
                    for _ in 0..n {
                        pop(&mut stack, unpacked(&elem))?;
                    }
                    made(ty)
                }
            };
            stack.push(ty);
        }
        match stack[..] {
            [ty] => Some(ty),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FuncType, GlobalType, TableType};

    fn typed(nullable: bool, t: u32) -> ValType {
        ValType::Ref(RefType {
            nullable,
            heap: HeapType::ConcreteFunc(t),
        })
    }

    /// Two function types (`[i32] -> []` and `[] -> []`) and a function of each.
    fn base() -> ModuleInfo {
        ModuleInfo {
            types: vec![
                FuncType {
                    params: vec![ValType::I32],
                    results: vec![],
                }
                .into(),
                FuncType::default().into(),
            ],
            funcs: vec![0, 1],
            ..ModuleInfo::default()
        }
    }

    fn with_global(ty: ValType, init: ConstExpr) -> ModuleInfo {
        ModuleInfo {
            globals: vec![GlobalType { ty, mutable: false }],
            global_inits: vec![init],
            ..base()
        }
    }

    #[test]
    fn typed_references_are_checked_against_the_functions_they_hold() {
        assert_eq!(base().check(), Ok(()));
        assert_eq!(
            with_global(typed(false, 0), ConstExpr::RefFunc(0)).check(),
            Ok(())
        );
        assert_eq!(
            with_global(ValType::FUNCREF, ConstExpr::RefFunc(1)).check(),
            Ok(())
        );
        assert_eq!(
            with_global(typed(true, 1), ConstExpr::RefNull).check(),
            Ok(())
        );
        // A function of the other type, null where none may be, a type that is not there.
        for (ty, init) in [
            (typed(false, 0), ConstExpr::RefFunc(1)),
            (typed(false, 0), ConstExpr::RefNull),
            (typed(true, 2), ConstExpr::RefNull),
            (ValType::EXTERNREF, ConstExpr::RefFunc(0)),
        ] {
            assert!(with_global(ty, init).check().is_err(), "{ty} = {init:?}");
        }
    }

    #[test]
    fn a_type_declared_twice_is_one_type() {
        // Types 1 and 2 are both `[] -> []`; type 3 names type 1, type 4 names type 2.
        let mut info = base();
        info.types.push(FuncType::default().into());
        for t in [1, 2] {
            info.types.push(FuncType::new([typed(false, t)], []).into());
        }
        info.funcs.push(3);
        let global = |info: &ModuleInfo, ty, init| ModuleInfo {
            globals: vec![GlobalType { ty, mutable: false }],
            global_inits: vec![init],
            ..info.clone()
        };
        // Function 1 is of type 1, function 2 of type 3.
        assert_eq!(
            global(&info, typed(false, 2), ConstExpr::RefFunc(1)).check(),
            Ok(())
        );
        assert_eq!(
            global(&info, typed(false, 4), ConstExpr::RefFunc(2)).check(),
            Ok(())
        );
        assert!(
            global(&info, typed(false, 0), ConstExpr::RefFunc(1))
                .check()
                .is_err()
        );
    }

    #[test]
    fn a_type_names_no_later_type_and_tables_start_as_their_type_allows() {
        let mut info = base();
        info.types[0] = FuncType::new([typed(false, 1)], []).into();
        assert!(info.check().is_err());
        info.types[0] = FuncType::new([typed(false, 0)], []).into();
        assert_eq!(info.check(), Ok(()));

        let table = |elem, init| ModuleInfo {
            tables: vec![TableType::new(elem, 1, None)],
            table_inits: vec![init],
            ..base()
        };
        assert_eq!(
            table(typed(false, 1), ConstExpr::RefFunc(1)).check(),
            Ok(())
        );
        assert!(
            table(typed(false, 1), ConstExpr::RefFunc(0))
                .check()
                .is_err()
        );
        assert!(table(typed(false, 1), ConstExpr::RefNull).check().is_err());
        let mut missing = table(ValType::FUNCREF, ConstExpr::RefNull);
        missing.table_inits.clear();
        assert!(missing.check().is_err());
    }
}
