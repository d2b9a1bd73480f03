//! A component from `examples/component.wat`, called as an embedder calls one: typed exports
//! with strings and records, a fresh store per call, and the component compiled once into an
//! artifact that loads without compiling.
//!
//! Run it with `cargo run -p ephem --example component`.

use ephem::component::{Component, Linker, Val};
use ephem::{ArtifactKey, Engine, Store};

pub fn main() -> Result<(), ephem::component::Error> {
    let engine = Engine::default();
    let text = include_str!("component.wat");
    let component = Component::new(&engine, text)?;
    // It imports nothing; a linker is where host functions would be defined.
    let linker = Linker::<()>::new(&engine);

    // One store per call: dropped with everything the instance made.
    for name in ["world", "wörld"] {
        let mut store = Store::new(&engine, ());
        let instance = linker.instantiate(&mut store, &component)?;
        let greet = instance.get_typed_func::<(String,), (String,)>(&mut store, "greet")?;
        let (reply,) = greet.call(&mut store, (name.to_string(),))?;
        assert_eq!(reply, format!("hello, {name}"));
    }

    // A record, called with values whose type is known only at run time.
    let mut store = Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &component)?;
    let swap = instance.get_func(&mut store, "swap").expect("exported");
    let point =
        ephem::component::wave::parse("{x: 1, y: -2, label: some(\"p\")}", &swap.ty().params[0].1)
            .expect("a point");
    let mut out = [Val::Bool(false)];
    swap.call(&mut store, &[point], &mut out)?;
    assert_eq!(out[0].to_string(), "{x: -2, y: 1, label: some(\"p\")}");

    // Compiled once into a sealed artifact; loading it compiles nothing.
    let key = ArtifactKey::generate().map_err(|e| ephem::component::Error::Usage(e.to_string()))?;
    let bytes = component.to_artifact(&key)?;
    let loaded = Component::from_artifact(&engine, &bytes, &key)?;
    let mut store = Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &loaded)?;
    let add = instance.get_typed_func::<(u32, u32), (u32,)>(&mut store, "add")?;
    assert_eq!(add.call(&mut store, (2, 3))?, (5,));
    Ok(())
}
