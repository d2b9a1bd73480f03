//! A compiled component as one file: its plan and every core module's artifact, sealed as a
//! whole with the deployment's key, so that `ephem compile` can make it once and `ephem run` (or
//! an embedder without the compiler) can load it.
//!
//! Layout: [`MAGIC`], the format version (u32, little-endian), the seal (32 bytes), the front's
//! length (u64), then the front's body: ephem's version, the plan (see `encode`), and where
//! each core module's artifact lies (offset and length, u64 each) with its name if it has one;
//! then the artifacts, each as it is on its own (sealed too, under the same key) and each
//! starting on a page of its own. The seal is BLAKE3 keyed with the key over the whole file
//! with the seal's bytes as zeros (`ephem_artifact::format::seal_at`): a file changed
//! anywhere, or sealed under another key, is refused before anything in it is read. The plan is
//! then checked again (every index within what exists when it is used), so that even a file
//! sealed by a buggy writer cannot index out of bounds.
//!
//! The file is an [`ephem_artifact::Bundle`]: its modules are opened in place, their texts and
//! images mapped from it as a module's are from its own file (never copied out); the seal is
//! verified once per file identity and key in a process (the file read and hashed in pieces,
//! never held whole), and a later open reads only the front.
//! [`Component::from_artifact_file`](crate::Component::from_artifact_file) keeps what it
//! opened per thread, as the cache keeps its entries.

use std::sync::Arc;

use ephem_artifact::Bundle;
use ephem_artifact::format::FILE_PAGE;
use ephem_runtime::{ArtifactKey, Engine, Module};

use crate::Error;
use crate::abi::Encoding;
use crate::plan::{
    Callee, CoreDef, Export, ImportKind, Lift, Lowering, Options, Path, Plan, ResourceDef,
    ResourceFunc, ResourceFuncKind, Step,
};
use crate::types::{Case, Field, FuncType, MAX_DEPTH, ResourceIndex, Type};

/// What a component artifact starts with.
pub const MAGIC: &[u8; 16] = b"\0ephem-component";

/// The layout's version: a file of another is refused.
const FORMAT: u32 = 5;

const SEAL_AT: usize = 20;
/// Where the front's length lies (u64): the bytes up to the end of the module table.
const FRONT_LEN_AT: usize = SEAL_AT + 32;
const BODY_AT: usize = FRONT_LEN_AT + 8;

fn bad(what: impl Into<String>) -> Error {
    Error::Artifact(what.into())
}

/// Whether `bytes` start as a component artifact does.
pub fn is_component_artifact(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

fn page_up(n: usize) -> usize {
    n.next_multiple_of(FILE_PAGE)
}

/// The artifact of a component with `plan` and `modules`, sealed with `key`.
pub(crate) fn write(plan: &Plan, modules: &[Module], key: &ArtifactKey) -> Result<Vec<u8>, Error> {
    let artifacts = (modules.iter())
        .map(|m| {
            let mut bytes = m.artifact().to_bytes()?;
            ephem_artifact::format::reseal(&mut bytes, key);
            Ok(bytes)
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let mut w = Writer(Vec::new());
    w.0.extend_from_slice(MAGIC);
    w.u32(FORMAT);
    w.0.extend_from_slice(&[0; 32 + 8]);
    w.str(env!("CARGO_PKG_VERSION"));
    w.plan(plan);
    w.u32(artifacts.len() as u32);
    let names: Vec<&str> = modules.iter().map(|m| m.name().unwrap_or("")).collect();
    let table: usize = names.iter().map(|n| 16 + 8 + n.len()).sum();
    let mut at = page_up(w.0.len() + table);
    for (bytes, name) in artifacts.iter().zip(&names) {
        w.u64(at as u64);
        w.u64(bytes.len() as u64);
        w.str(name);
        at = page_up(at + bytes.len());
    }
    let front = w.0.len() as u64;
    w.0[FRONT_LEN_AT..BODY_AT].copy_from_slice(&front.to_le_bytes());
    for bytes in &artifacts {
        w.0.resize(page_up(w.0.len()), 0);
        w.0.extend_from_slice(bytes);
    }
    let mut file = w.0;
    ephem_artifact::format::reseal_at(&mut file, SEAL_AT, key);
    Ok(file)
}

/// Opens the component artifact in `bundle`, sealed with `key`: its plan and its modules,
/// opened in place and loaded for `engine`.
pub(crate) fn open(
    engine: &Engine,
    bundle: &Bundle,
    key: &ArtifactKey,
) -> Result<(Plan, Vec<Module>), Error> {
    let head = bundle.read(0..bundle.len().min(BODY_AT as u64))?;
    check_head(&head)?;
    let front_len = u64::from_le_bytes(head[FRONT_LEN_AT..BODY_AT].try_into().expect("8 bytes"));
    let front_len = usize::try_from(front_len).map_err(|_| bad("a front's length"))?;
    let front = (bundle.verified_front(key, SEAL_AT, front_len)).map_err(|e| match e {
        ephem_artifact::Error::Unsealed => bad(
            "not sealed with this deployment's key (forged, damaged, or from another deployment)",
        ),
        e => Error::from(e),
    })?;
    if front.len() != front_len || front_len < BODY_AT {
        return Err(bad("a front past the end of the file"));
    }
    let mut r = Reader {
        bytes: &front,
        at: BODY_AT,
    };
    let (plan, places) = read_front(&mut r)?;
    if r.at != front.len() {
        return Err(bad("bytes in the front past the module table"));
    }
    let mut modules = Vec::with_capacity(places.len());
    let mut past = r.at as u64;
    for (offset, len, name) in places {
        let end = (offset.checked_add(len)).ok_or_else(|| bad("a module's length"))?;
        if offset < past {
            return Err(bad("modules out of order, or within the front"));
        }
        past = end;
        // SAFETY: the bundle's seal was verified with `key` over the whole file (now, or for
        // this file identity before), so the module's bytes are what a writer holding the key
        // sealed: the module's own seal would say no more.
        let artifact = unsafe { bundle.artifact(offset..end) }?;
        let module = Module::from_artifact(engine, artifact);
        if !name.is_empty() {
            module.set_name(&name);
        }
        modules.push(module);
    }
    check(&plan, &modules)?;
    Ok((plan, modules))
}

/// Checks the magic and the format of a component artifact's first bytes (its seal is the
/// bundle's to check).
fn check_head(head: &[u8]) -> Result<(), Error> {
    if !is_component_artifact(head) {
        return Err(bad("not a component artifact"));
    }
    if head.len() < BODY_AT {
        return Err(bad("truncated"));
    }
    let format = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(bad(format!(
            "format {format} is not the one this ephem reads ({FORMAT})"
        )));
    }
    Ok(())
}

/// Where a module's artifact lies in the file (offset, length), and its name (empty: none).
type Place = (u64, u64, String);

/// Reads the front's body: the version, the plan, and where each module lies.
fn read_front(r: &mut Reader<'_>) -> Result<(Plan, Vec<Place>), Error> {
    let version = r.str()?;
    if version != env!("CARGO_PKG_VERSION") {
        return Err(bad(format!(
            "written by ephem {version}; this is ephem {}",
            env!("CARGO_PKG_VERSION")
        )));
    }
    let plan = r.plan()?;
    let count = r.u32()? as usize;
    let mut places = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        places.push((r.u64()?, r.u64()?, r.str()?));
    }
    Ok((plan, places))
}

/// Checks that every index of `plan` lies within what exists when it is used.
fn check(plan: &Plan, modules: &[Module]) -> Result<(), Error> {
    if plan.tables > crate::plan::MAX_STEPS {
        return Err(bad("more component instances than a plan may have"));
    }
    // Core instances, lowerings and resource built-ins made so far.
    let mut made = (0, 0, 0);
    fn core(
        def: &CoreDef,
        (instances, lowered, resource_funcs): (usize, usize, usize),
    ) -> Result<(), Error> {
        match def {
            CoreDef::Export { instance, .. } if *instance < instances => Ok(()),
            CoreDef::Lowered(n) if *n < lowered => Ok(()),
            CoreDef::Resource(n) if *n < resource_funcs => Ok(()),
            _ => Err(bad("a core item used before it is made")),
        }
    }
    fn options(o: &Options, made: (usize, usize, usize)) -> Result<(), Error> {
        o.memory
            .iter()
            .chain(&o.realloc)
            .try_for_each(|d| core(d, made))
    }
    fn lift(lift: &Lift, made: (usize, usize, usize)) -> Result<(), Error> {
        core(&lift.func, made)?;
        options(&lift.options, made)?;
        lift.post_return.iter().try_for_each(|p| core(p, made))
    }
    for step in &plan.steps {
        match step {
            Step::Instantiate { module, args } => {
                if *module >= modules.len() {
                    return Err(bad("an instantiation of a module that is not there"));
                }
                args.iter().try_for_each(|d| core(d, made))?;
                made.0 += 1;
            }
            Step::Lower(n) => {
                let l = plan.lowerings.get(*n).ok_or_else(|| bad("a lowering"))?;
                if *n != made.1 || l.table >= plan.tables {
                    return Err(bad("a lowering out of order or of a table not there"));
                }
                options(&l.options, made)?;
                match &l.callee {
                    Callee::Host(path) if path.import < plan.imports.len() => {}
                    Callee::Lifted(i) => {
                        lift(plan.lifts.get(*i).ok_or_else(|| bad("a lift"))?, made)?
                    }
                    Callee::Host(_) => return Err(bad("a lowering of an import not there")),
                }
                made.1 += 1;
            }
            Step::Resource(n) => {
                let f = plan
                    .resource_funcs
                    .get(*n)
                    .ok_or_else(|| bad("a resource built-in"))?;
                if *n != made.2 || f.table >= plan.tables {
                    return Err(bad(
                        "a resource built-in out of order or of a table not there",
                    ));
                }
                match (plan.resources.get(f.resource.0 as usize), f.kind) {
                    (None, _) => return Err(bad("a built-in of a resource not there")),
                    // `new` and `rep` only in the instance that defines the type.
                    (Some(ResourceDef::Guest { table, .. }), kind)
                        if *table != f.table && kind != ResourceFuncKind::Drop =>
                    {
                        return Err(bad("`resource.new` or `.rep` of another's type"));
                    }
                    (Some(ResourceDef::Host(_)), ResourceFuncKind::New | ResourceFuncKind::Rep) => {
                        return Err(bad("`resource.new` or `.rep` of a host's type"));
                    }
                    _ => {}
                }
                // A destructor is resolved when its type's `resource.drop` is made.
                if let Some(ResourceDef::Guest { dtor: Some(d), .. }) =
                    plan.resources.get(f.resource.0 as usize)
                {
                    core(d, made)?;
                }
                made.2 += 1;
            }
        }
    }
    if made
        != (
            plan.instances,
            plan.lowerings.len(),
            plan.resource_funcs.len(),
        )
    {
        return Err(bad("counts that do not match the steps"));
    }
    let resource_ok = |r: &ResourceDef| match r {
        ResourceDef::Host(p) => p.import < plan.imports.len(),
        ResourceDef::Guest { table, .. } => *table < plan.tables,
    };
    if !plan.resources.iter().all(resource_ok) {
        return Err(bad("a resource of an import or a table not there"));
    }
    let resources_ok = |ty: &FuncType| {
        let mut ok = true;
        ty.map_resources(&mut |r| {
            ok &= (r.0 as usize) < plan.resources.len();
            Some(r)
        });
        ok
    };
    if !plan.lowerings.iter().all(|l| resources_ok(&l.ty))
        || !(plan.lifts.iter()).all(|l| resources_ok(&l.ty) && l.table < plan.tables)
    {
        return Err(bad("a handle of a resource not there"));
    }
    // An exported lift is called once everything is made.
    plan.lifts.iter().try_for_each(|l| lift(l, made))?;
    fn exports(plan: &Plan, list: &[(String, Export)], depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(bad("exports nested too deeply"));
        }
        for (_, e) in list {
            match e {
                Export::Func(l) if *l < plan.lifts.len() => {}
                Export::Func(_) => return Err(bad("an export of a lift not there")),
                Export::Instance(items) => exports(plan, items, depth + 1)?,
            }
        }
        Ok(())
    }
    exports(plan, &plan.exports, 0)
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn usize(&mut self, v: usize) {
        self.u64(v as u64);
    }
    fn str(&mut self, s: &str) {
        self.usize(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn core(&mut self, def: &CoreDef) {
        match def {
            CoreDef::Export { instance, name } => {
                self.u8(0);
                self.usize(*instance);
                self.str(name);
            }
            CoreDef::Lowered(n) => {
                self.u8(1);
                self.usize(*n);
            }
            CoreDef::Resource(n) => {
                self.u8(2);
                self.usize(*n);
            }
        }
    }
    fn opt_core(&mut self, def: &Option<CoreDef>) {
        match def {
            None => self.u8(0),
            Some(d) => {
                self.u8(1);
                self.core(d);
            }
        }
    }
    fn options(&mut self, o: &Options) {
        self.opt_core(&o.memory);
        self.opt_core(&o.realloc);
        self.u8(match o.encoding {
            Encoding::Utf8 => 0,
            Encoding::Utf16 => 1,
            Encoding::Latin1Utf16 => 2,
        });
    }
    fn ty(&mut self, t: &Type) {
        let simple = [
            Type::Bool,
            Type::S8,
            Type::U8,
            Type::S16,
            Type::U16,
            Type::S32,
            Type::U32,
            Type::S64,
            Type::U64,
            Type::Float32,
            Type::Float64,
            Type::Char,
            Type::String,
        ];
        if let Some(i) = simple.iter().position(|s| s == t) {
            self.u8(i as u8);
            return;
        }
        match t {
            Type::List(t) => {
                self.u8(20);
                self.ty(t);
            }
            Type::Record(fields) => {
                self.u8(21);
                self.usize(fields.len());
                for f in fields.iter() {
                    self.str(&f.name);
                    self.ty(&f.ty);
                }
            }
            Type::Tuple(types) => {
                self.u8(22);
                self.usize(types.len());
                types.iter().for_each(|t| self.ty(t));
            }
            Type::Variant(cases) => {
                self.u8(23);
                self.usize(cases.len());
                for c in cases.iter() {
                    self.str(&c.name);
                    self.opt_ty(c.ty.as_ref());
                }
            }
            Type::Enum(names) | Type::Flags(names) => {
                self.u8(if matches!(t, Type::Enum(_)) { 24 } else { 25 });
                self.usize(names.len());
                names.iter().for_each(|n| self.str(n));
            }
            Type::Option(t) => {
                self.u8(26);
                self.ty(t);
            }
            Type::Result { ok, err } => {
                self.u8(27);
                self.opt_ty(ok.as_deref());
                self.opt_ty(err.as_deref());
            }
            Type::Own(r) | Type::Borrow(r) => {
                self.u8(if matches!(t, Type::Own(_)) { 28 } else { 29 });
                self.u32(r.0);
            }
            _ => unreachable!("the simple types are written above"),
        }
    }
    fn opt_ty(&mut self, t: Option<&Type>) {
        match t {
            None => self.u8(0),
            Some(t) => {
                self.u8(1);
                self.ty(t);
            }
        }
    }
    fn func_ty(&mut self, f: &FuncType) {
        self.usize(f.params.len());
        for (name, t) in &f.params {
            self.str(name);
            self.ty(t);
        }
        self.opt_ty(f.result.as_ref());
    }
    fn path(&mut self, p: &Path) {
        self.usize(p.import);
        self.usize(p.names.len());
        p.names.iter().for_each(|n| self.str(n));
    }
    fn exports(&mut self, list: &[(String, Export)]) {
        self.usize(list.len());
        for (name, e) in list {
            self.str(name);
            match e {
                Export::Func(l) => {
                    self.u8(0);
                    self.usize(*l);
                }
                Export::Instance(items) => {
                    self.u8(1);
                    self.exports(items);
                }
            }
        }
    }
    fn plan(&mut self, plan: &Plan) {
        self.usize(plan.steps.len());
        for step in &plan.steps {
            match step {
                Step::Instantiate { module, args } => {
                    self.u8(0);
                    self.usize(*module);
                    self.usize(args.len());
                    args.iter().for_each(|a| self.core(a));
                }
                Step::Lower(n) => {
                    self.u8(1);
                    self.usize(*n);
                }
                Step::Resource(n) => {
                    self.u8(2);
                    self.usize(*n);
                }
            }
        }
        self.usize(plan.lowerings.len());
        for l in &plan.lowerings {
            match &l.callee {
                Callee::Host(p) => {
                    self.u8(0);
                    self.path(p);
                }
                Callee::Lifted(i) => {
                    self.u8(1);
                    self.usize(*i);
                }
            }
            self.func_ty(&l.ty);
            self.options(&l.options);
            self.usize(l.table);
        }
        self.usize(plan.lifts.len());
        for l in &plan.lifts {
            self.core(&l.func);
            self.func_ty(&l.ty);
            self.options(&l.options);
            self.opt_core(&l.post_return);
            self.usize(l.table);
        }
        self.usize(plan.imports.len());
        for (name, kind) in &plan.imports {
            self.str(name);
            self.u8(match kind {
                ImportKind::Func => 0,
                ImportKind::Instance => 1,
                ImportKind::Other => 2,
            });
        }
        self.exports(&plan.exports);
        self.usize(plan.instances);
        self.usize(plan.resources.len());
        for r in &plan.resources {
            match r {
                ResourceDef::Host(p) => {
                    self.u8(0);
                    self.path(p);
                }
                ResourceDef::Guest { dtor, table } => {
                    self.u8(1);
                    self.opt_core(dtor);
                    self.usize(*table);
                }
            }
        }
        self.usize(plan.resource_funcs.len());
        for f in &plan.resource_funcs {
            self.u8(match f.kind {
                ResourceFuncKind::New => 0,
                ResourceFuncKind::Rep => 1,
                ResourceFuncKind::Drop => 2,
            });
            self.u32(f.resource.0);
            self.usize(f.table);
        }
        self.usize(plan.tables);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn usize(&mut self) -> Result<usize, Error> {
        usize::try_from(self.u64()?).map_err(|_| bad("a number past the address space"))
    }
    /// A count of things each at least a byte long: never more than the bytes left.
    fn count(&mut self) -> Result<usize, Error> {
        let n = self.usize()?;
        if n > self.bytes.len() - self.at {
            return Err(bad("a count past the file's end"));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String, Error> {
        let n = self.count()?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| bad("a name that is not UTF-8"))
    }
    fn core(&mut self) -> Result<CoreDef, Error> {
        Ok(match self.u8()? {
            0 => CoreDef::Export {
                instance: self.usize()?,
                name: self.str()?,
            },
            1 => CoreDef::Lowered(self.usize()?),
            2 => CoreDef::Resource(self.usize()?),
            _ => return Err(bad("a core item's kind")),
        })
    }
    fn opt_core(&mut self) -> Result<Option<CoreDef>, Error> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.core()?),
        })
    }
    fn options(&mut self) -> Result<Options, Error> {
        Ok(Options {
            memory: self.opt_core()?,
            realloc: self.opt_core()?,
            encoding: match self.u8()? {
                0 => Encoding::Utf8,
                1 => Encoding::Utf16,
                2 => Encoding::Latin1Utf16,
                _ => return Err(bad("a string encoding")),
            },
        })
    }
    fn ty(&mut self, depth: usize) -> Result<Type, Error> {
        if depth > MAX_DEPTH {
            return Err(bad("a type nested too deeply"));
        }
        let names = |r: &mut Self| -> Result<Arc<[String]>, Error> {
            let n = r.count()?;
            (0..n).map(|_| r.str()).collect()
        };
        Ok(match self.u8()? {
            0 => Type::Bool,
            1 => Type::S8,
            2 => Type::U8,
            3 => Type::S16,
            4 => Type::U16,
            5 => Type::S32,
            6 => Type::U32,
            7 => Type::S64,
            8 => Type::U64,
            9 => Type::Float32,
            10 => Type::Float64,
            11 => Type::Char,
            12 => Type::String,
            20 => Type::List(Arc::new(self.ty(depth + 1)?)),
            21 => {
                let n = self.count()?;
                Type::Record(
                    (0..n)
                        .map(|_| {
                            Ok(Field {
                                name: self.str()?,
                                ty: self.ty(depth + 1)?,
                            })
                        })
                        .collect::<Result<_, Error>>()?,
                )
            }
            22 => {
                let n = self.count()?;
                Type::Tuple(
                    (0..n)
                        .map(|_| self.ty(depth + 1))
                        .collect::<Result<_, _>>()?,
                )
            }
            23 => {
                let n = self.count()?;
                Type::Variant(
                    (0..n)
                        .map(|_| {
                            Ok(Case {
                                name: self.str()?,
                                ty: self.opt_ty(depth + 1)?,
                            })
                        })
                        .collect::<Result<_, Error>>()?,
                )
            }
            24 => Type::Enum(names(self)?),
            25 => Type::Flags(names(self)?),
            26 => Type::Option(Arc::new(self.ty(depth + 1)?)),
            27 => Type::Result {
                ok: self.opt_ty(depth + 1)?.map(Arc::new),
                err: self.opt_ty(depth + 1)?.map(Arc::new),
            },
            28 => Type::Own(ResourceIndex(self.u32()?)),
            29 => Type::Borrow(ResourceIndex(self.u32()?)),
            _ => return Err(bad("a type's kind")),
        })
    }
    fn opt_ty(&mut self, depth: usize) -> Result<Option<Type>, Error> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.ty(depth)?),
        })
    }
    fn func_ty(&mut self) -> Result<Arc<FuncType>, Error> {
        let n = self.count()?;
        let params = (0..n)
            .map(|_| Ok((self.str()?, self.ty(0)?)))
            .collect::<Result<_, Error>>()?;
        let result = self.opt_ty(0)?;
        Ok(Arc::new(FuncType::new(params, result)))
    }
    fn path(&mut self) -> Result<Path, Error> {
        let import = self.usize()?;
        let n = self.count()?;
        let names = (0..n).map(|_| self.str()).collect::<Result<_, _>>()?;
        Ok(Path { import, names })
    }
    fn exports(&mut self, depth: usize) -> Result<Vec<(String, Export)>, Error> {
        if depth > MAX_DEPTH {
            return Err(bad("exports nested too deeply"));
        }
        let n = self.count()?;
        (0..n)
            .map(|_| {
                let name = self.str()?;
                let e = match self.u8()? {
                    0 => Export::Func(self.usize()?),
                    1 => Export::Instance(self.exports(depth + 1)?),
                    _ => return Err(bad("an export's kind")),
                };
                Ok((name, e))
            })
            .collect()
    }
    fn plan(&mut self) -> Result<Plan, Error> {
        let n = self.count()?;
        let steps = (0..n)
            .map(|_| {
                Ok(match self.u8()? {
                    0 => {
                        let module = self.usize()?;
                        let n = self.count()?;
                        let args = (0..n).map(|_| self.core()).collect::<Result<_, _>>()?;
                        Step::Instantiate { module, args }
                    }
                    1 => Step::Lower(self.usize()?),
                    2 => Step::Resource(self.usize()?),
                    _ => return Err(bad("a step's kind")),
                })
            })
            .collect::<Result<_, Error>>()?;
        let n = self.count()?;
        let lowerings = (0..n)
            .map(|_| {
                let callee = match self.u8()? {
                    0 => Callee::Host(self.path()?),
                    1 => Callee::Lifted(self.usize()?),
                    _ => return Err(bad("a callee's kind")),
                };
                let ty = self.func_ty()?;
                Ok(Lowering {
                    callee,
                    core: ty.core(true),
                    ty,
                    options: self.options()?,
                    table: self.usize()?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let n = self.count()?;
        let lifts = (0..n)
            .map(|_| {
                let func = self.core()?;
                let ty = self.func_ty()?;
                Ok(Lift {
                    func,
                    core_results: ty.core(false).results,
                    ty,
                    options: self.options()?,
                    post_return: self.opt_core()?,
                    table: self.usize()?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let n = self.count()?;
        let imports = (0..n)
            .map(|_| {
                let name = self.str()?;
                let kind = match self.u8()? {
                    0 => ImportKind::Func,
                    1 => ImportKind::Instance,
                    2 => ImportKind::Other,
                    _ => return Err(bad("an import's kind")),
                };
                Ok((name, kind))
            })
            .collect::<Result<_, Error>>()?;
        let exports = self.exports(0)?;
        let instances = self.usize()?;
        let n = self.count()?;
        let resources = (0..n)
            .map(|_| {
                Ok(match self.u8()? {
                    0 => ResourceDef::Host(self.path()?),
                    1 => ResourceDef::Guest {
                        dtor: self.opt_core()?,
                        table: self.usize()?,
                    },
                    _ => return Err(bad("a resource's kind")),
                })
            })
            .collect::<Result<_, Error>>()?;
        let n = self.count()?;
        let resource_funcs = (0..n)
            .map(|_| {
                Ok(ResourceFunc {
                    kind: match self.u8()? {
                        0 => ResourceFuncKind::New,
                        1 => ResourceFuncKind::Rep,
                        2 => ResourceFuncKind::Drop,
                        _ => return Err(bad("a resource built-in's kind")),
                    },
                    resource: ResourceIndex(self.u32()?),
                    table: self.usize()?,
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Plan {
            steps,
            lowerings,
            lifts,
            imports,
            exports,
            instances,
            resources,
            resource_funcs,
            tables: self.usize()?,
        })
    }
}
