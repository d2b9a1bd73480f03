//! Host resources through a component, as WASI's streams go: the host makes an object and
//! hands the component an `own` handle, the component lends it back as a `borrow` and drops it,
//! which runs the host's destructor. Every misuse of a handle is an error of the call.

use ephem_component::{Component, Error, Linker, Resource, ResourceTable, ResourceType, Val};
use ephem_runtime::{Engine, Store};

/// A host object: what was written to it.
struct Stream {
    name: String,
    written: usize,
}

#[derive(Default)]
struct Host {
    table: ResourceTable,
    log: Vec<String>,
}

const COMPONENT: &str = include_str!("resources.wat");

fn linker(engine: &Engine) -> anyhow::Result<Linker<Host>> {
    let mut linker = Linker::<Host>::new(engine);
    let mut host = linker.instance("host")?;
    host.resource(
        "stream",
        ResourceType::host::<Stream>(),
        |mut store, rep| {
            let host = store.data_mut();
            let stream = host.table.delete(Resource::<Stream>::new_own(rep))?;
            host.log
                .push(format!("closed {} after {}", stream.name, stream.written));
            Ok(())
        },
    )?;
    host.func_wrap("open", |mut store, (name,): (String,)| {
        let stream = store.data_mut().table.push(Stream { name, written: 0 })?;
        Ok((stream,))
    })?;
    host.func_wrap(
        "write",
        |mut store, (s, bytes): (Resource<Stream>, Vec<u8>)| {
            assert!(!s.owned(), "the guest lends its handle");
            store.data_mut().table.get_mut(&s)?.written += bytes.len();
            Ok((bytes.len() as u32,))
        },
    )?;
    Ok(linker)
}

#[test]
fn a_component_opens_writes_to_and_drops_a_host_resource() -> anyhow::Result<()> {
    let engine = Engine::default();
    let component = Component::new(&engine, COMPONENT)?;
    let linker = linker(&engine)?;
    let mut store = Store::new(&engine, Host::default());
    let i = linker.instantiate(&mut store, &component)?;
    let run = i.get_typed_func::<(), (u32,)>(&mut store, "run")?;
    assert_eq!(run.call(&mut store, ())?, (10,));
    assert_eq!(store.data().log, ["closed log after 10"]);

    // The host hands in an own handle; the guest drops it: the destructor runs.
    let s = store.data_mut().table.push(Stream {
        name: "given".into(),
        written: 0,
    })?;
    let consume = i.get_typed_func::<(Resource<Stream>,), ()>(&mut store, "consume")?;
    consume.call(&mut store, (s,))?;
    assert_eq!(store.data().log[1], "closed given after 0");

    // A borrow the guest drops before it returns; the object stays the host's.
    let s = store.data_mut().table.push(Stream {
        name: "lent".into(),
        written: 0,
    })?;
    let peek = i.get_typed_func::<(Resource<Stream>,), (u32,)>(&mut store, "peek")?;
    assert_eq!(
        peek.call(&mut store, (Resource::new_borrow(s.rep()),))?,
        (5,)
    );
    assert_eq!(store.data().table.get(&s)?.written, 5);
    assert_eq!(store.data().log.len(), 2, "no destructor for a borrow");

    // An own handle the guest makes and returns: the host's now.
    let make = i.get_typed_func::<(), (Resource<Stream>,)>(&mut store, "make")?;
    let (made,) = make.call(&mut store, ())?;
    assert!(made.owned());
    assert_eq!(store.data().table.get(&made)?.name, "log");
    Ok(())
}

#[test]
fn misused_handles_are_errors_of_the_call() -> anyhow::Result<()> {
    let engine = Engine::default();
    let component = Component::new(&engine, COMPONENT)?;
    let linker = linker(&engine)?;
    for name in ["use-after-drop", "double-drop", "forged"] {
        let mut store = Store::new(&engine, Host::default());
        let i = linker.instantiate(&mut store, &component)?;
        let f = i.get_func(&mut store, name).unwrap();
        let mut out = vec![Val::Bool(false); f.ty().result.is_some() as usize];
        let err = f.call(&mut store, &[], &mut out).unwrap_err();
        assert!(format!("{err:?}").contains("no handle"), "{name}: {err:?}");
    }
    // A borrow the guest keeps past its return.
    let mut store = Store::new(&engine, Host::default());
    let i = linker.instantiate(&mut store, &component)?;
    let s = store.data_mut().table.push(Stream {
        name: "kept".into(),
        written: 0,
    })?;
    let keep = i.get_typed_func::<(Resource<Stream>,), (u32,)>(&mut store, "keep")?;
    let err = keep
        .call(&mut store, (Resource::new_borrow(s.rep()),))
        .unwrap_err();
    assert!(
        matches!(err, Error::Abi(ref m) if m.contains("not dropped")),
        "{err:?}"
    );
    // A borrow where an own is wanted, and a handle of another Rust type, are refused.
    let consume = i.get_func(&mut store, "consume").unwrap();
    let lent = Val::Resource(ephem_component::ResourceAny::new(
        ResourceType::host::<Stream>(),
        s.rep(),
        false,
    ));
    assert!(consume.call(&mut store, &[lent], &mut []).is_err());
    let other = Val::Resource(ephem_component::ResourceAny::new(
        ResourceType::host::<String>(),
        s.rep(),
        true,
    ));
    assert!(matches!(
        consume.call(&mut store, &[other], &mut []),
        Err(Error::Usage(_))
    ));
    Ok(())
}

#[test]
fn a_resource_the_linker_does_not_define_is_a_link_error() -> anyhow::Result<()> {
    let engine = Engine::default();
    let component = Component::new(&engine, COMPONENT)?;
    let mut linker = Linker::<Host>::new(&engine);
    let mut host = linker.instance("host")?;
    host.func_new("open", |_, _, _, _| Ok(()))?;
    host.func_new("write", |_, _, _, _| Ok(()))?;
    let mut store = Store::new(&engine, Host::default());
    let err = linker.instantiate(&mut store, &component).err();
    assert!(
        matches!(err, Some(Error::Link(ref m)) if m.contains("stream")),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn resources_survive_the_component_artifact() -> anyhow::Result<()> {
    let engine = Engine::default();
    let key = ephem_runtime::ArtifactKey::from_bytes([9; 32]);
    let bytes = Component::new(&engine, COMPONENT)?.to_artifact(&key)?;
    let component = Component::from_artifact(&engine, &bytes, &key)?;
    let mut store = Store::new(&engine, Host::default());
    let i = linker(&engine)?.instantiate(&mut store, &component)?;
    let run = i.get_typed_func::<(), (u32,)>(&mut store, "run")?;
    assert_eq!(run.call(&mut store, ())?, (10,));
    assert_eq!(store.data().log, ["closed log after 10"]);
    Ok(())
}

/// A borrow lent to a call that traps ends with the call: its handle cannot be used after.
#[test]
fn a_borrow_lent_to_a_call_that_traps_ends_with_it() -> anyhow::Result<()> {
    let engine = Engine::default();
    let component = Component::new(&engine, COMPONENT)?;
    let mut store = Store::new(&engine, Host::default());
    let i = linker(&engine)?.instantiate(&mut store, &component)?;
    let s = store.data_mut().table.push(Stream {
        name: "lent".into(),
        written: 0,
    })?;
    let trap = i.get_typed_func::<(Resource<Stream>,), ()>(&mut store, "trap-lent")?;
    assert!(
        trap.call(&mut store, (Resource::new_borrow(s.rep()),))
            .is_err()
    );
    // The guest knows the handle was 1; it is gone.
    let use_index = i.get_typed_func::<(u32,), (u32,)>(&mut store, "use-index")?;
    let err = use_index.call(&mut store, (1,)).unwrap_err();
    assert!(format!("{err:?}").contains("no handle 1"), "{err:?}");
    assert_eq!(store.data().table.get(&s)?.written, 0);
    Ok(())
}

/// A handle lent as a borrow to a call cannot be given away as an own in the same call (the
/// canonical ABI's lend count): `both(h, h)` traps, instead of the callee destroying what it
/// still borrows.
#[test]
fn a_handle_lent_to_a_call_cannot_be_given_away_in_it() -> anyhow::Result<()> {
    let text = r#"(component
      (import "host" (instance $host
        (export "stream" (type $s (sub resource)))
        (export "open" (func (param "name" string) (result (own $s))))
        (export "both" (func (param "b" (borrow $s)) (param "o" (own $s))))))
      (alias export $host "stream" (type $s))
      (core module $libc (memory (export "memory") 1)
        (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 64)))
      (core instance $libc (instantiate $libc))
      (core func $open (canon lower (func $host "open") (memory (core memory $libc "memory"))))
      (core func $both (canon lower (func $host "both")))
      (core func $drop (canon resource.drop $s))
      (core module $m
        (import "" "open" (func $open (param i32 i32) (result i32)))
        (import "" "both" (func $both (param i32 i32)))
        (import "" "drop" (func $drop (param i32)))
        (func (export "twice") (local $h i32)
          (local.set $h (call $open (i32.const 0) (i32.const 1)))
          (call $both (local.get $h) (local.get $h)))
        (func (export "apart") (local $h i32) (local $g i32)
          (local.set $h (call $open (i32.const 0) (i32.const 1)))
          (local.set $g (call $open (i32.const 0) (i32.const 1)))
          (call $both (local.get $h) (local.get $g))
          (call $drop (local.get $h))))
      (core instance $i (instantiate $m (with "" (instance
        (export "open" (func $open)) (export "both" (func $both)) (export "drop" (func $drop))))))
      (func (export "twice") (canon lift (core func $i "twice")))
      (func (export "apart") (canon lift (core func $i "apart"))))"#;
    let engine = Engine::default();
    let component = Component::new(&engine, text)?;
    let mut linker = linker(&engine)?;
    linker
        .instance("host")?
        .func_new("both", |_, _, _, _| Ok(()))?;
    let mut store = Store::new(&engine, Host::default());
    let i = linker.instantiate(&mut store, &component)?;
    let err = i
        .get_func(&mut store, "twice")
        .unwrap()
        .call(&mut store, &[], &mut []);
    let err = err.unwrap_err();
    assert!(format!("{err}").contains("lent"), "{err}");
    // Two handles: one lent, the other given; the lent one is the caller's again after.
    i.get_func(&mut store, "apart")
        .unwrap()
        .call(&mut store, &[], &mut [])?;
    Ok(())
}
