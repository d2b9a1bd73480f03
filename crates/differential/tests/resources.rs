//! Host resources beside wasmtime: the same component (`crates/component/tests/resources.wat`)
//! and the same host (a table of streams, a destructor that logs) in both engines; every export
//! called in a fresh store must succeed or fail alike, with the same result and the same log of
//! what the host saw.

use ephem_component as ec;
use wasmtime::component as wc;

const COMPONENT: &str = include_str!("../../component/tests/resources.wat");

/// A host object: its name and what was written to it.
struct Stream {
    name: String,
    written: usize,
}

/// What one engine saw of one call: its result (or that it failed) and the host's log.
type Seen = (Result<String, ()>, Vec<String>);

/// The calls: an export and whether the host hands it a stream, owned or lent.
const CALLS: [(&str, Option<bool>); 10] = [
    ("run", None),
    ("use-after-drop", None),
    ("double-drop", None),
    ("forged", None),
    ("consume", Some(true)),
    ("peek", Some(false)),
    ("keep", Some(false)),
    ("make", None),
    ("trap-lent", Some(false)),
    ("use-index", None),
];

#[derive(Default)]
struct EphemHost {
    table: ec::ResourceTable,
    log: Vec<String>,
}

fn ephem_call(name: &str, given: Option<bool>) -> anyhow::Result<Seen> {
    let engine = ephem::Engine::default();
    let component = ec::Component::new(&engine, COMPONENT)?;
    let mut linker = ec::Linker::<EphemHost>::new(&engine);
    let mut host = linker.instance("host")?;
    host.resource(
        "stream",
        ec::ResourceType::host::<Stream>(),
        |mut s, rep| {
            let h = s.data_mut();
            let stream = h.table.delete(ec::Resource::<Stream>::new_own(rep))?;
            h.log
                .push(format!("closed {} after {}", stream.name, stream.written));
            Ok(())
        },
    )?;
    host.func_wrap("open", |mut s, (name,): (String,)| {
        let h = s.data_mut();
        h.log.push(format!("open {name}"));
        Ok((h.table.push(Stream { name, written: 0 })?,))
    })?;
    host.func_wrap(
        "write",
        |mut s, (r, bytes): (ec::Resource<Stream>, Vec<u8>)| {
            let h = s.data_mut();
            h.table.get_mut(&r)?.written += bytes.len();
            h.log
                .push(format!("write {} owned {}", bytes.len(), r.owned()));
            Ok((bytes.len() as u32,))
        },
    )?;
    let mut store = ephem::Store::new(&engine, EphemHost::default());
    let i = linker.instantiate(&mut store, &component)?;
    let f = i.get_func(&mut store, name).unwrap();
    let mut params = Vec::new();
    if let Some(owned) = given {
        let s = store.data_mut().table.push(Stream {
            name: "given".into(),
            written: 0,
        })?;
        params.push(ec::Val::Resource(ec::ResourceAny::new(
            ec::ResourceType::host::<Stream>(),
            s.rep(),
            owned,
        )));
    } else if name == "use-index" {
        params.push(ec::Val::U32(1));
    }
    let mut out = vec![ec::Val::Bool(false); f.ty().result.is_some() as usize];
    let result = f.call(&mut store, &params, &mut out).map_err(|_| ());
    let shown = result.map(|()| match out.first() {
        Some(ec::Val::U32(n)) => n.to_string(),
        Some(ec::Val::Resource(r)) => format!("resource owned {}", r.owned()),
        Some(other) => format!("{other:?}"),
        None => "()".into(),
    });
    Ok((shown, store.into_data().log))
}

#[derive(Default)]
struct WasmtimeHost {
    table: wasmtime::component::ResourceTable,
    log: Vec<String>,
}

fn wasmtime_call(name: &str, given: Option<bool>) -> anyhow::Result<Seen> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config)?;
    let component = wc::Component::new(&engine, wat::parse_str(COMPONENT)?)?;
    let mut linker = wc::Linker::<WasmtimeHost>::new(&engine);
    let mut host = linker.instance("host")?;
    host.resource(
        "stream",
        wc::ResourceType::host::<Stream>(),
        |mut s, rep| {
            let h = s.data_mut();
            let stream = h.table.delete(wc::Resource::<Stream>::new_own(rep))?;
            h.log
                .push(format!("closed {} after {}", stream.name, stream.written));
            Ok(())
        },
    )?;
    host.func_wrap("open", |mut s, (name,): (String,)| {
        let h = s.data_mut();
        h.log.push(format!("open {name}"));
        Ok((h.table.push(Stream { name, written: 0 })?,))
    })?;
    host.func_wrap(
        "write",
        |mut s, (r, bytes): (wc::Resource<Stream>, Vec<u8>)| {
            let h = s.data_mut();
            h.table.get_mut(&r)?.written += bytes.len();
            h.log
                .push(format!("write {} owned {}", bytes.len(), r.owned()));
            Ok((bytes.len() as u32,))
        },
    )?;
    let mut store = wasmtime::Store::new(&engine, WasmtimeHost::default());
    let i = linker.instantiate(&mut store, &component)?;
    let f = i.get_func(&mut store, name).unwrap();
    let mut params = Vec::new();
    if let Some(owned) = given {
        let s = store.data_mut().table.push(Stream {
            name: "given".into(),
            written: 0,
        })?;
        if !owned {
            // (wasmtime lends a host's borrow only through a typed call.)
            let lent = wc::Resource::<Stream>::new_borrow(s.rep());
            let result = if name == "trap-lent" {
                let f = f.typed::<(wc::Resource<Stream>,), ()>(&store)?;
                f.call(&mut store, (lent,)).map(|()| "()".to_string())
            } else {
                let f = f.typed::<(wc::Resource<Stream>,), (u32,)>(&store)?;
                f.call(&mut store, (lent,)).map(|(n,)| n.to_string())
            };
            return Ok((result.map_err(|_| ()), store.into_data().log));
        }
        params.push(wc::Val::Resource(wc::ResourceAny::try_from_resource(
            s, &mut store,
        )?));
    } else if name == "use-index" {
        params.push(wc::Val::U32(1));
    }
    let results = f.ty(&store).results().len();
    let mut out = vec![wc::Val::Bool(false); results];
    let result = f.call(&mut store, &params, &mut out).map_err(|_| ());
    let shown = result.map(|()| match out.first() {
        Some(wc::Val::U32(n)) => n.to_string(),
        Some(wc::Val::Resource(r)) => format!("resource owned {}", r.owned()),
        Some(other) => format!("{other:?}"),
        None => "()".into(),
    });
    Ok((shown, store.into_data().log))
}

#[test]
fn host_resources_behave_as_in_wasmtime() {
    let mut differences = Vec::new();
    for (name, given) in CALLS {
        let ours = ephem_call(name, given).unwrap();
        let theirs = wasmtime_call(name, given).unwrap();
        println!("{name}: {ours:?}");
        if ours != theirs {
            differences.push(format!("{name}:\n ephem    {ours:?}\n wasmtime {theirs:?}"));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

const GUEST: &str = include_str!("../../component/tests/guest-resources.wat");

/// The script both engines run in one store on `guest-resources.wat`: a call, its arguments
/// (`H` stands for the handle `make` returned, lent or given), each result shown as text.
const SCRIPT: [(&str, &str); 8] = [
    ("make", "42"),
    ("peek", "lend"),
    ("destroyed", ""),
    ("consume", "give"),
    ("destroyed", ""),
    ("churn", "5 7"),
    ("destroyed", ""),
    ("forged", ""),
];

fn ephem_script() -> anyhow::Result<Vec<String>> {
    let engine = ephem::Engine::default();
    let component = ec::Component::new(&engine, GUEST)?;
    let mut store = ephem::Store::new(&engine, ());
    let i = ec::Linker::new(&engine).instantiate(&mut store, &component)?;
    let mut handle = None;
    let mut seen = Vec::new();
    for (name, args) in SCRIPT {
        let args: Vec<ec::Val> = match args {
            "lend" | "give" => {
                let h: ec::ResourceAny = handle.expect("made");
                vec![ec::Val::Resource(ec::ResourceAny::new(
                    h.ty(),
                    h.rep(),
                    args == "give",
                ))]
            }
            _ => args
                .split_whitespace()
                .map(|n| ec::Val::U32(n.parse().unwrap()))
                .collect(),
        };
        let f = i.get_func(&mut store, name).expect("exported");
        let mut out = vec![ec::Val::Bool(false); f.ty().result.is_some() as usize];
        seen.push(match f.call(&mut store, &args, &mut out) {
            Ok(()) => match out.pop() {
                Some(ec::Val::Resource(r)) => {
                    handle = Some(r);
                    "a handle".to_string()
                }
                Some(v) => format!("{v}"),
                None => "()".to_string(),
            },
            Err(_) => "failed".to_string(),
        });
    }
    Ok(seen)
}

fn wasmtime_script() -> anyhow::Result<Vec<String>> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config)?;
    let component = wc::Component::new(&engine, wat::parse_str(GUEST)?)?;
    let mut store = wasmtime::Store::new(&engine, ());
    let i = wc::Linker::new(&engine).instantiate(&mut store, &component)?;
    let mut handle = None;
    let mut seen = Vec::new();
    for (name, args) in SCRIPT {
        let args: Vec<wc::Val> = match args {
            "lend" | "give" => vec![wc::Val::Resource(handle.expect("made"))],
            _ => args
                .split_whitespace()
                .map(|n| wc::Val::U32(n.parse().unwrap()))
                .collect(),
        };
        let f = i.get_func(&mut store, name).expect("exported");
        let mut out = vec![wc::Val::Bool(false); f.ty(&store).results().len()];
        seen.push(match f.call(&mut store, &args, &mut out) {
            Ok(()) => match out.pop() {
                Some(wc::Val::Resource(r)) => {
                    handle = Some(r);
                    "a handle".to_string()
                }
                Some(wc::Val::U32(n)) => n.to_string(),
                Some(v) => format!("{v:?}"),
                None => "()".to_string(),
            },
            Err(_) => "failed".to_string(),
        });
    }
    Ok(seen)
}

#[test]
fn a_components_own_resources_behave_as_in_wasmtime() {
    let ours = ephem_script().unwrap();
    let theirs = wasmtime_script().unwrap();
    assert_eq!(ours, theirs);
    // (And what they agree on is what the component's code says.)
    assert_eq!(
        ours,
        ["a handle", "42", "0", "42", "42", "()", "54", "failed"]
    );
}
