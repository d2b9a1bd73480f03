//! Resources a component defines itself: `resource.new` makes an own handle for a rep,
//! `resource.rep` reads it back, `resource.drop` of an own handle runs the component's
//! destructor, a borrow lent to the defining instance arrives as the rep, and each instance's
//! type is its own. The expected values follow from the component's code (`guest-resources.wat`)
//! by hand.

use ephem_component::{Component, Error, Linker, ResourceAny, Val};
use ephem_runtime::{ArtifactKey, Engine, Store};

const COMPONENT: &str = include_str!("guest-resources.wat");

fn call(
    store: &mut Store<()>,
    i: &ephem_component::Instance,
    name: &str,
    args: &[Val],
) -> Result<Option<Val>, Error> {
    let f = i.get_func(&mut *store, name).expect("exported");
    let mut out = vec![Val::Bool(false); f.ty().result.is_some() as usize];
    f.call(&mut *store, args, &mut out)?;
    Ok(out.pop())
}

fn handle(v: Option<Val>) -> ResourceAny {
    match v {
        Some(Val::Resource(r)) => r,
        other => panic!("a resource expected, not {other:?}"),
    }
}

fn borrowed(r: ResourceAny) -> Val {
    Val::Resource(ResourceAny::new(r.ty(), r.rep(), false))
}

fn lifetimes(component: &Component, engine: &Engine) -> anyhow::Result<()> {
    let mut store = Store::new(engine, ());
    let i = Linker::new(engine).instantiate(&mut store, component)?;

    let h = handle(call(&mut store, &i, "make", &[Val::U32(42)])?);
    assert!(h.owned() && h.ty().is_guest());
    assert_eq!(h.rep(), 42, "an own handle lifted out carries its rep");
    // Lent back to the instance that defines it: the rep itself reaches the core function.
    assert_eq!(
        call(&mut store, &i, "peek", &[borrowed(h)])?,
        Some(Val::U32(42))
    );
    assert_eq!(call(&mut store, &i, "destroyed", &[])?, Some(Val::U32(0)));
    // Given back own: a handle again, whose rep `resource.rep` reads; dropped, destroyed.
    let consumed = call(&mut store, &i, "consume", &[Val::Resource(h)])?;
    assert_eq!(consumed, Some(Val::U32(42)));
    assert_eq!(call(&mut store, &i, "destroyed", &[])?, Some(Val::U32(42)));
    call(&mut store, &i, "churn", &[Val::U32(5), Val::U32(7)])?;
    assert_eq!(call(&mut store, &i, "destroyed", &[])?, Some(Val::U32(54)));

    // A handle never made is an error of the call, not a host that reads anything.
    let forged = call(&mut store, &i, "forged", &[]).unwrap_err();
    assert!(format!("{forged}").contains("no handle 99"), "{forged}");

    // Another instance's type is another type: its handles are refused here.
    let j = Linker::new(engine).instantiate(&mut store, component)?;
    let other = handle(call(&mut store, &j, "make", &[Val::U32(1)])?);
    assert_ne!(other.ty(), h.ty());
    let refused = call(&mut store, &i, "consume", &[Val::Resource(other)]).unwrap_err();
    assert!(matches!(refused, Error::Usage(_)), "{refused:?}");
    Ok(())
}

#[test]
fn a_component_makes_reads_and_destroys_resources_of_its_own_type() -> anyhow::Result<()> {
    let engine = Engine::default();
    lifetimes(&Component::new(&engine, COMPONENT)?, &engine)
}

#[test]
fn resources_of_a_components_own_type_live_through_its_artifact() -> anyhow::Result<()> {
    let engine = Engine::default();
    let key = ArtifactKey::generate()?;
    let artifact = Component::new(&engine, COMPONENT)?.to_artifact(&key)?;
    lifetimes(
        &Component::from_artifact(&engine, &artifact, &key)?,
        &engine,
    )
}

/// One component defines the type and makes handles; another, given the type and `make`,
/// drops what it makes: the defining instance's destructor runs for each.
#[test]
fn a_handle_made_by_one_component_and_dropped_by_another_runs_the_first_ones_destructor()
-> anyhow::Result<()> {
    let text = r#"(component
      (component $A
        (core module $impl
          (global $destroyed (mut i32) (i32.const 0))
          (func (export "dtor") (param i32)
            (global.set $destroyed (i32.add (global.get $destroyed) (local.get 0))))
          (func (export "destroyed") (result i32) (global.get $destroyed)))
        (core instance $impl (instantiate $impl))
        (alias core export $impl "dtor" (core func $dtor))
        (type $r (resource (rep i32) (dtor (core func $dtor))))
        (core func $new (canon resource.new $r))
        (core module $m (import "" "new" (func $new (param i32) (result i32)))
          (func (export "make") (param i32) (result i32) (call $new (local.get 0))))
        (core instance $m (instantiate $m (with "" (instance (export "new" (func $new))))))
        (export $R "r" (type $r))
        (func (export "make") (param "rep" u32) (result (own $R))
          (canon lift (core func $m "make")))
        (func (export "destroyed") (result u32) (canon lift (core func $impl "destroyed"))))
      (component $B
        (import "r" (type $r (sub resource)))
        (import "make" (func $make (param "rep" u32) (result (own $r))))
        (core func $make (canon lower (func $make)))
        (core func $drop (canon resource.drop $r))
        (core module $m
          (import "" "make" (func $make (param i32) (result i32)))
          (import "" "drop" (func $drop (param i32)))
          (func (export "run") (param i32) (call $drop (call $make (local.get 0)))))
        (core instance $m (instantiate $m (with "" (instance
          (export "make" (func $make)) (export "drop" (func $drop))))))
        (func (export "run") (param "rep" u32) (canon lift (core func $m "run"))))
      (instance $a (instantiate $A))
      (instance $b (instantiate $B (with "r" (type $a "r")) (with "make" (func $a "make"))))
      (export "run" (func $b "run"))
      (export "destroyed" (func $a "destroyed")))"#;
    let engine = Engine::default();
    let component = Component::new(&engine, text)?;
    let mut store = Store::new(&engine, ());
    let i = Linker::new(&engine).instantiate(&mut store, &component)?;
    call(&mut store, &i, "run", &[Val::U32(3)])?;
    call(&mut store, &i, "run", &[Val::U32(4)])?;
    assert_eq!(call(&mut store, &i, "destroyed", &[])?, Some(Val::U32(7)));
    Ok(())
}
