//! Resources: handles to things the host owns, passed to a component as `own<R>` and
//! `borrow<R>` and dropped by it with `resource.drop`.
//!
//! The host keeps its objects where it likes (a [`ResourceTable`] in the store's data is the
//! usual place) and names each by a 32-bit *rep*; a component sees only handles, small
//! numbers into its instance's handle table (`Handles`, one table per component instance of
//! the plan, as the canonical ABI has it). An `own` lowered into a component adds a handle,
//! lifted out of it takes the handle away; a `borrow` lowered into an export lasts for the
//! call (the component must drop it before it returns); `resource.drop` of an own handle runs
//! the host's destructor for the rep. A handle of the wrong type, or one that is not there, is
//! an ABI error, which traps.
//!
//! A component may define resource types itself: `resource.new` makes an own handle for a rep
//! of its choosing, `resource.rep` gives a handle's rep back, and dropping the last own handle
//! (`resource.drop`, in whichever component holds it) runs the defining instance's destructor.
//! Each instantiation makes new types ([`ResourceType::fresh`]), so one instance's handles are
//! never taken for another's. A borrow of such a resource lent to the instance that defines it
//! passes its rep, not a handle, as the canonical ABI has it.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Mutex;

use ephem_runtime::{HostError, StoreContextMut};

use crate::Error;
use crate::types::{ResourceIndex, Type};

/// A resource type: the host's, as the linker defines it (the Rust type standing for it), or
/// one a component instance defines (a new type each time a component is instantiated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceType(Kind);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Host(TypeId),
    Guest(u64),
}

impl ResourceType {
    /// The resource type `T` stands for.
    pub fn host<T: 'static>() -> ResourceType {
        ResourceType(Kind::Host(TypeId::of::<T>()))
    }

    /// A resource type no other is equal to: a component instance's own.
    pub(crate) fn fresh() -> ResourceType {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        ResourceType(Kind::Guest(
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ))
    }

    /// Whether a component defines the type (else the host does).
    pub fn is_guest(&self) -> bool {
        matches!(self.0, Kind::Guest(_))
    }
}

/// A resource handle as a dynamic value: its host type, its rep and whether it is owned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceAny {
    ty: ResourceType,
    rep: u32,
    owned: bool,
}

impl ResourceAny {
    /// A handle of resource type `ty`.
    pub fn new(ty: ResourceType, rep: u32, owned: bool) -> ResourceAny {
        ResourceAny { ty, rep, owned }
    }
    /// The resource's type.
    pub fn ty(&self) -> ResourceType {
        self.ty
    }
    /// The host's name for the resource.
    pub fn rep(&self) -> u32 {
        self.rep
    }
    /// Whether this is an `own` handle (else a `borrow`).
    pub fn owned(&self) -> bool {
        self.owned
    }
}

/// A typed handle to a host resource of type `T` (wasmtime's `Resource<T>`).
pub struct Resource<T> {
    rep: u32,
    owned: bool,
    _ty: PhantomData<fn() -> T>,
}

impl<T> Clone for Resource<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Resource<T> {}

impl<T> std::fmt::Debug for Resource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Resource({}, owned: {})", self.rep, self.owned)
    }
}

impl<T: 'static> Resource<T> {
    /// An `own` handle for the host's object `rep`.
    pub fn new_own(rep: u32) -> Resource<T> {
        Resource {
            rep,
            owned: true,
            _ty: PhantomData,
        }
    }
    /// A `borrow` handle for the host's object `rep`.
    pub fn new_borrow(rep: u32) -> Resource<T> {
        Resource {
            rep,
            owned: false,
            _ty: PhantomData,
        }
    }
    /// The host's name for the object.
    pub fn rep(&self) -> u32 {
        self.rep
    }
    /// Whether this is an `own` handle.
    pub fn owned(&self) -> bool {
        self.owned
    }
}

impl<T: 'static> crate::typed::ComponentType for Resource<T> {
    fn typecheck(ty: &Type) -> bool {
        matches!(ty, Type::Own(_) | Type::Borrow(_))
    }
    fn into_val(self) -> crate::Val {
        crate::Val::Resource(ResourceAny::new(
            ResourceType::host::<T>(),
            self.rep,
            self.owned,
        ))
    }
    fn from_val(val: crate::Val) -> Option<Self> {
        match val {
            crate::Val::Resource(r) if r.ty == ResourceType::host::<T>() => Some(Resource {
                rep: r.rep,
                owned: r.owned,
                _ty: PhantomData,
            }),
            _ => None,
        }
    }
}

/// What went wrong with a [`ResourceTable`] entry.
#[derive(Debug, thiserror::Error)]
pub enum ResourceTableError {
    /// No entry with that rep (never made, or deleted).
    #[error("no such resource")]
    NotPresent,
    /// The entry holds another type than the handle's.
    #[error("a resource of another type")]
    WrongType,
    /// The table holds `u32::MAX` entries.
    #[error("the resource table is full")]
    Full,
}

/// The host's objects behind resource handles, by rep (wasmtime's `ResourceTable`): what a
/// store's data keeps for the resources it hands to components.
#[derive(Default)]
pub struct ResourceTable {
    entries: Vec<Option<Box<dyn Any + Send>>>,
    free: Vec<u32>,
}

impl ResourceTable {
    /// An empty table.
    pub fn new() -> ResourceTable {
        ResourceTable::default()
    }

    /// Keeps `value`; gives an `own` handle to it.
    pub fn push<T: Send + 'static>(&mut self, value: T) -> Result<Resource<T>, ResourceTableError> {
        let rep = match self.free.pop() {
            Some(rep) => {
                self.entries[rep as usize] = Some(Box::new(value));
                rep
            }
            None => {
                let rep =
                    u32::try_from(self.entries.len()).map_err(|_| ResourceTableError::Full)?;
                self.entries.push(Some(Box::new(value)));
                rep
            }
        };
        Ok(Resource::new_own(rep))
    }

    fn entry(&self, rep: u32) -> Result<&(dyn Any + Send), ResourceTableError> {
        match self.entries.get(rep as usize) {
            Some(Some(v)) => Ok(&**v),
            _ => Err(ResourceTableError::NotPresent),
        }
    }

    /// The object a handle names.
    pub fn get<T: 'static>(&self, handle: &Resource<T>) -> Result<&T, ResourceTableError> {
        (self.entry(handle.rep)? as &dyn Any)
            .downcast_ref()
            .ok_or(ResourceTableError::WrongType)
    }

    /// The object a handle names, to change.
    pub fn get_mut<T: 'static>(
        &mut self,
        handle: &Resource<T>,
    ) -> Result<&mut T, ResourceTableError> {
        match self.entries.get_mut(handle.rep as usize) {
            Some(Some(v)) => (&mut **v as &mut dyn Any)
                .downcast_mut()
                .ok_or(ResourceTableError::WrongType),
            _ => Err(ResourceTableError::NotPresent),
        }
    }

    /// Takes the object a handle names out of the table.
    pub fn delete<T: 'static>(&mut self, handle: Resource<T>) -> Result<T, ResourceTableError> {
        self.get::<T>(&handle)?;
        let boxed = self.entries[handle.rep as usize].take().expect("present");
        self.free.push(handle.rep);
        let any: Box<dyn Any> = boxed;
        Ok(*any.downcast().expect("checked above"))
    }
}

/// A host resource type's destructor: what `resource.drop` of an own handle runs.
pub(crate) type Dtor<T> =
    dyn Fn(StoreContextMut<'_, T>, u32) -> Result<(), HostError> + Send + Sync;

/// One handle in a component instance's table.
#[derive(Clone, Copy, Debug)]
struct Handle {
    resource: ResourceIndex,
    rep: u32,
    owned: bool,
    /// Borrows of it lent to calls in progress: while there are any, it can be neither given
    /// away nor dropped (the canonical ABI's lend count).
    lends: u32,
}

/// The handle tables of one instance of a plan: one per component instance in it, and the
/// host type of each of the plan's resources.
#[derive(Default)]
pub(crate) struct Handles {
    tables: Vec<Table>,
    /// Handles in all tables.
    live: usize,
    types: Vec<ResourceType>,
    /// For each resource a component instance defines, that instance's table.
    owners: Vec<Option<usize>>,
}

/// One component instance's handles: slots by index less one, and the free ones.
#[derive(Clone, Default)]
struct Table {
    slots: Vec<Option<Handle>>,
    free: Vec<u32>,
}

/// The most handles the tables of one instance of a plan hold at once, all together (the
/// canonical ABI allows 2^28 per table; each takes 20 bytes of the host's memory).
const MAX_HANDLES: usize = 1 << 22;

fn abi(message: impl Into<String>) -> Error {
    Error::Abi(message.into())
}

impl Handles {
    pub(crate) fn new(
        tables: usize,
        types: Vec<ResourceType>,
        owners: Vec<Option<usize>>,
    ) -> Handles {
        Handles {
            tables: vec![Table::default(); tables],
            live: 0,
            types,
            owners,
        }
    }

    fn insert(&mut self, table: usize, handle: Handle) -> Result<u32, Error> {
        if self.live >= MAX_HANDLES {
            return Err(abi(format!("more than {MAX_HANDLES} handles at once")));
        }
        self.live += 1;
        let t = &mut self.tables[table];
        // Handles count from 1; 0 is never one.
        if let Some(i) = t.free.pop() {
            t.slots[i as usize] = Some(handle);
            return Ok(i + 1);
        }
        t.slots.push(Some(handle));
        Ok(t.slots.len() as u32)
    }

    fn get(&self, table: usize, index: u32, resource: ResourceIndex) -> Result<Handle, Error> {
        let found = (index.checked_sub(1))
            .and_then(|i| self.tables[table].slots.get(i as usize))
            .copied()
            .flatten();
        match found {
            Some(h) if h.resource == resource => Ok(h),
            Some(_) => Err(abi(format!("handle {index} is of another resource type"))),
            None => Err(abi(format!("no handle {index}"))),
        }
    }

    /// Changes the lend count of handle `index` (there, as a lift found it) by `by`.
    fn lend(&mut self, table: usize, index: u32, by: i32) {
        let slot =
            (index.checked_sub(1)).and_then(|i| self.tables[table].slots.get_mut(i as usize));
        if let Some(Some(h)) = slot {
            h.lends = h.lends.saturating_add_signed(by);
        }
    }

    fn remove(&mut self, table: usize, index: u32) {
        let t = &mut self.tables[table];
        t.slots[index as usize - 1] = None;
        t.free.push(index - 1);
        self.live = self.live.saturating_sub(1);
    }
}

/// The resource side of one lifting or lowering: the handle tables, which component
/// instance's table the values go in or come from, and the borrows lowered into a callee for
/// the call (which it must have dropped when it returns).
pub(crate) struct Res<'a> {
    pub handles: Option<&'a Mutex<Handles>>,
    pub table: usize,
    pub lent: std::cell::RefCell<Vec<u32>>,
    /// Handles of this table lifted as borrows for a call: lent until [`Res::release`].
    pub borrowed: std::cell::RefCell<Vec<u32>>,
    /// Host memory the values lifted in this call take so far (see [`MAX_LIFTED`]).
    pub spent: std::cell::Cell<u64>,
}

/// The most host memory the values lifted in one call may take: a guest's list of strings
/// that all point at the same bytes would otherwise make the host copy them without end.
pub(crate) const MAX_LIFTED: u64 = 256 << 20;

impl Res<'_> {
    /// A call's resource state for table `table`.
    pub(crate) fn new(handles: Option<&Mutex<Handles>>, table: usize) -> Res<'_> {
        Res {
            handles,
            table,
            lent: Default::default(),
            borrowed: Default::default(),
            spent: Default::default(),
        }
    }

    /// Counts `bytes` more of lifted values; an ABI error past [`MAX_LIFTED`].
    pub(crate) fn charge(&self, bytes: u64) -> Result<(), Error> {
        let spent = self.spent.get().saturating_add(bytes);
        self.spent.set(spent);
        if spent > MAX_LIFTED {
            return Err(abi(format!(
                "the values lifted in one call take more than {MAX_LIFTED} bytes"
            )));
        }
        Ok(())
    }

    fn handles(&self) -> Result<std::sync::MutexGuard<'_, Handles>, Error> {
        let handles = self
            .handles
            .ok_or_else(|| abi("a resource handle where the plan has no resources"))?;
        Ok(handles.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The value for handle `index` of type `ty` coming out of the table: an own handle
    /// leaves it, a borrow stays.
    pub(crate) fn lift(&self, ty: &Type, index: u32) -> Result<crate::Val, Error> {
        let mut handles = self.handles()?;
        let (resource, own) = match ty {
            Type::Own(r) => (*r, true),
            Type::Borrow(r) => (*r, false),
            _ => unreachable!("a handle's type"),
        };
        let h = handles.get(self.table, index, resource)?;
        if own {
            if !h.owned {
                return Err(abi(format!("handle {index} is borrowed, not owned")));
            }
            if h.lends > 0 {
                return Err(abi(format!("handle {index} is lent to a call in progress")));
            }
            handles.remove(self.table, index);
        } else {
            handles.lend(self.table, index, 1);
            self.borrowed.borrow_mut().push(index);
        }
        let host = handles.types[resource.0 as usize];
        Ok(crate::Val::Resource(ResourceAny::new(host, h.rep, own)))
    }

    /// The handle for `value` going into the table as type `ty`.
    pub(crate) fn lower(&self, ty: &Type, value: &ResourceAny) -> Result<u32, Error> {
        let mut handles = self.handles()?;
        let (resource, own) = match ty {
            Type::Own(r) => (*r, true),
            Type::Borrow(r) => (*r, false),
            _ => unreachable!("a handle's type"),
        };
        if handles.types[resource.0 as usize] != value.ty {
            return Err(Error::Usage(
                "a resource of another type than the parameter's".into(),
            ));
        }
        if own && !value.owned {
            return Err(Error::Usage(
                "a borrowed resource where an own is wanted".into(),
            ));
        }
        if !own && handles.owners[resource.0 as usize] == Some(self.table) {
            // Lent to the instance that defines it: the rep itself.
            return Ok(value.rep);
        }
        let index = handles.insert(
            self.table,
            Handle {
                resource,
                rep: value.rep,
                owned: own,
                lends: 0,
            },
        )?;
        if !own {
            self.lent.borrow_mut().push(index);
        }
        Ok(index)
    }

    /// Ends the lends of the borrows lifted out of this table for a call (however it ended).
    pub(crate) fn release(&self) {
        let borrowed = std::mem::take(&mut *self.borrowed.borrow_mut());
        if borrowed.is_empty() {
            return;
        }
        if let Ok(mut handles) = self.handles() {
            for index in borrowed {
                handles.lend(self.table, index, -1);
            }
        }
    }

    /// Checks, once a callee has returned, that it dropped every borrow it was lent.
    pub(crate) fn returned(&self) -> Result<(), Error> {
        let lent = std::mem::take(&mut *self.lent.borrow_mut());
        if lent.is_empty() {
            return Ok(());
        }
        let mut handles = self.handles()?;
        let mut kept = false;
        for index in lent {
            let slot = handles.tables[self.table].slots.get(index as usize - 1);
            if let Some(Some(Handle { owned: false, .. })) = slot {
                handles.remove(self.table, index);
                kept = true;
            }
        }
        if kept {
            return Err(abi(
                "a borrowed handle was not dropped before the call returned",
            ));
        }
        Ok(())
    }
}

/// What `resource.new` does: an own handle in table `table` for `rep`.
pub(crate) fn new_handle(
    handles: &Mutex<Handles>,
    table: usize,
    resource: ResourceIndex,
    rep: u32,
) -> Result<u32, Error> {
    let mut handles = handles.lock().unwrap_or_else(|e| e.into_inner());
    let handle = Handle {
        resource,
        rep,
        owned: true,
        lends: 0,
    };
    handles.insert(table, handle)
}

/// What `resource.rep` does: the rep behind handle `index` of table `table`.
pub(crate) fn rep_of(
    handles: &Mutex<Handles>,
    table: usize,
    resource: ResourceIndex,
    index: u32,
) -> Result<u32, Error> {
    let handles = handles.lock().unwrap_or_else(|e| e.into_inner());
    Ok(handles.get(table, index, resource)?.rep)
}

/// What `resource.drop` does in table `table` for handle `index` of resource `resource`: the
/// rep to destroy, for an own handle.
pub(crate) fn drop_handle(
    handles: &Mutex<Handles>,
    table: usize,
    resource: ResourceIndex,
    index: u32,
) -> Result<Option<u32>, Error> {
    let mut handles = handles.lock().unwrap_or_else(|e| e.into_inner());
    let h = handles.get(table, index, resource)?;
    if h.lends > 0 {
        return Err(abi(format!("handle {index} is lent to a call in progress")));
    }
    handles.remove(table, index);
    Ok(h.owned.then_some(h.rep))
}
