//! The canonical ABI against wasmtime's: seeded random component types and values, each sent
//! through the same component in both engines. The component's `echo` export hands its
//! argument to the host's `echo` import and returns what the host gives back, so a value is
//! lowered into guest memory, lifted out to the host, lowered back at a return pointer and
//! lifted to the caller. Both engines must hand the host the same value, return the same value,
//! and leave the guest's memory byte for byte the same (the guest's allocator is a bump
//! allocator, so the layout of everything lowered shows in the image).

use ephem_component as ec;
use wasmtime::component as wc;

/// Seeds of the slice: fixed, so that a failure reproduces.
const SEEDS: std::ops::Range<u64> = 0..150;

/// A small, seeded generator (xorshift64*), enough for shapes and values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A generated type: its text, with the named types it needs defined in `prelude`, and its
/// flattening into core types, worked out here independently of ephem.
struct Gen {
    prelude: String,
    names: usize,
    rng: Rng,
}

const SCALARS: [(&str, &str); 13] = [
    ("bool", "i32"),
    ("s8", "i32"),
    ("u8", "i32"),
    ("s16", "i32"),
    ("u16", "i32"),
    ("s32", "i32"),
    ("u32", "i32"),
    ("s64", "i64"),
    ("u64", "i64"),
    ("float32", "f32"),
    ("float64", "f64"),
    ("char", "i32"),
    ("string", "i32 i32"),
];

fn join(a: &str, b: &str) -> &'static str {
    match (a, b) {
        ("i32", "i32") => "i32",
        ("i64", "i64") => "i64",
        ("f32", "f32") => "f32",
        ("f64", "f64") => "f64",
        ("i32", "f32") | ("f32", "i32") => "i32",
        _ => "i64",
    }
}

impl Gen {
    /// A named type: defined in the prelude and imported, as a function's types must be.
    fn name(&mut self, def: String) -> String {
        let n = self.names;
        self.names += 1;
        self.prelude +=
            &format!("(type $n{n}d {def}) (import \"n{n}\" (type $n{n} (eq $n{n}d)))\n");
        format!("$n{n}")
    }

    /// A type of at most `depth` more levels, and its core flattening.
    fn ty(&mut self, depth: u32) -> (String, Vec<&'static str>) {
        let pick = if depth == 0 { 0 } else { self.rng.below(9) };
        match pick {
            0 | 1 => {
                let (t, flat) = SCALARS[self.rng.below(SCALARS.len() as u64) as usize];
                (t.to_string(), flat.split(' ').collect())
            }
            2 => {
                let (t, _) = self.ty(depth - 1);
                (format!("(list {t})"), vec!["i32", "i32"])
            }
            3 => {
                let (t, flat) = self.ty(depth - 1);
                (format!("(option {t})"), variant_flat(&[flat]))
            }
            4 => {
                let ok = self.rng.below(3) > 0;
                let err = self.rng.below(3) > 0;
                let (mut text, mut cases) = ("(result".to_string(), Vec::new());
                if ok {
                    let (t, flat) = self.ty(depth - 1);
                    text += &format!(" {t}");
                    cases.push(flat);
                }
                if err {
                    let (t, flat) = self.ty(depth - 1);
                    text += &format!(" (error {t})");
                    cases.push(flat);
                }
                (text + ")", variant_flat(&cases))
            }
            5 => {
                let (mut text, mut flat) = ("(tuple".to_string(), Vec::new());
                for _ in 0..1 + self.rng.below(3) {
                    let (t, f) = self.ty(depth - 1);
                    text += &format!(" {t}");
                    flat.extend(f);
                }
                (text + ")", flat)
            }
            6 => {
                let (mut text, mut flat) = ("(record".to_string(), Vec::new());
                for i in 0..1 + self.rng.below(4) {
                    let (t, f) = self.ty(depth - 1);
                    text += &format!(" (field \"f{i}\" {t})");
                    flat.extend(f);
                }
                (self.name(text + ")"), flat)
            }
            7 => {
                let (mut text, mut cases) = ("(variant".to_string(), Vec::new());
                for i in 0..1 + self.rng.below(4) {
                    if self.rng.below(3) == 0 {
                        text += &format!(" (case \"c{i}\")");
                    } else {
                        let (t, f) = self.ty(depth - 1);
                        text += &format!(" (case \"c{i}\" {t})");
                        cases.push(f);
                    }
                }
                (self.name(text + ")"), variant_flat(&cases))
            }
            _ => {
                let n = 1 + self.rng.below(20);
                let names: String = (0..n).map(|i| format!(" \"e{i}\"")).collect();
                if self.rng.below(2) == 0 {
                    (self.name(format!("(enum{names})")), vec!["i32"])
                } else {
                    let flat = if n == 0 { vec![] } else { vec!["i32"] };
                    (self.name(format!("(flags{names})")), flat)
                }
            }
        }
    }
}

/// A variant's flattening: the discriminant, then its cases' slots joined.
fn variant_flat(cases: &[Vec<&'static str>]) -> Vec<&'static str> {
    let mut joined: Vec<&'static str> = Vec::new();
    for case in cases {
        for (i, f) in case.iter().enumerate() {
            match joined.get_mut(i) {
                Some(j) => *j = join(j, f),
                None => joined.push(f),
            }
        }
    }
    let mut flat = vec!["i32"];
    flat.extend(joined);
    flat
}

const ALLOC: &str = r#"
    (memory (export "memory") 1)
    (global $next (mut i32) (i32.const 1024))
    (func $realloc (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
      (global.set $next (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    (func (export "dump") (result i32)
      (i32.store (i32.const 60000) (i32.const 0))
      (i32.store (i32.const 60004) (i32.const 8192))
      (i32.const 60000))
"#;

/// The component for one type: `echo` through the host, and `dump`, the guest memory's first
/// 8 KiB.
fn component_text(prelude: &str, ty: &str, flat: &[&str]) -> String {
    // Past 16 core parameters the argument travels as one pointer.
    let params = if flat.len() > 16 {
        "i32".to_string()
    } else {
        flat.join(" ")
    };
    let count = params.split_whitespace().count();
    let gets: String = (0..count).map(|i| format!("(local.get {i}) ")).collect();
    // One flat result fits in a core result; more come back through memory.
    let (import_results, export_body, export_result) = if flat.len() <= 1 {
        let r = flat
            .first()
            .map(|f| format!("(result {f})"))
            .unwrap_or_default();
        (r.clone(), format!("(call $echo {gets})"), r)
    } else {
        (
            String::new(),
            format!("(call $echo {gets} (i32.const 64)) (i32.const 64)"),
            "(result i32)".into(),
        )
    };
    let import_params = if flat.len() > 1 {
        format!("{params} i32")
    } else {
        params.clone()
    };
    // A named type is imported as it is; any other is defined first.
    let (def, named) = if ty.starts_with('$') {
        (String::new(), ty.to_string())
    } else {
        (format!("(type $t0 {ty})"), "$t0".to_string())
    };
    format!(
        r#"(component
            {prelude}
            {def}
            (import "t" (type $t (eq {named})))
            (import "echo" (func $echo (param "x" $t) (result $t)))
            (core module $libc {ALLOC})
            (core instance $libc (instantiate $libc))
            (core func $echo (canon lower (func $echo) (memory (core memory $libc "memory"))
              (realloc (core func $libc "realloc"))))
            (core module $m
              (import "host" "echo" (func $echo (param {import_params}) {import_results}))
              (func (export "echo") (param {params}) {export_result}
                {export_body}))
            (core instance $i (instantiate $m (with "host" (instance (export "echo" (func $echo))))))
            (func (export "echo") (param "x" $t) (result $t)
              (canon lift (core func $i "echo") (memory (core memory $libc "memory"))
                (realloc (core func $libc "realloc"))))
            (func (export "dump") (result (list u8))
              (canon lift (core func $libc "dump") (memory (core memory $libc "memory")))))"#
    )
}

/// A random value of `ty`.
fn value(rng: &mut Rng, ty: &ec::Type, depth: u32) -> ec::Val {
    use ec::{Type as T, Val as V};
    const STRINGS: [&str; 6] = ["", "a", "héllo", "😀 wide", "ascii only text", "ÿ"];
    match ty {
        T::Bool => V::Bool(rng.below(2) == 1),
        T::S8 => V::S8(rng.next() as i8),
        T::U8 => V::U8(rng.next() as u8),
        T::S16 => V::S16(rng.next() as i16),
        T::U16 => V::U16(rng.next() as u16),
        T::S32 => V::S32(rng.next() as i32),
        T::U32 => V::U32(rng.next() as u32),
        T::S64 => V::S64(rng.next() as i64),
        T::U64 => V::U64(rng.next()),
        T::Float32 => V::Float32((rng.next() as i32) as f32 / 7.0),
        T::Float64 => V::Float64((rng.next() as i64) as f64 / 3.0),
        T::Char => V::Char(['a', 'é', '😀', '\u{10ffff}'][rng.below(4) as usize]),
        T::String => V::String(STRINGS[rng.below(STRINGS.len() as u64) as usize].into()),
        T::List(t) => {
            let n = if depth > 2 { 0 } else { rng.below(4) };
            V::List((0..n).map(|_| value(rng, t, depth + 1)).collect())
        }
        T::Record(fields) => V::Record(
            (fields.iter())
                .map(|f| (f.name.clone(), value(rng, &f.ty, depth + 1)))
                .collect(),
        ),
        T::Tuple(types) => V::Tuple(types.iter().map(|t| value(rng, t, depth + 1)).collect()),
        T::Variant(cases) => {
            let c = &cases[rng.below(cases.len() as u64) as usize];
            V::Variant(
                c.name.clone(),
                c.ty.as_ref().map(|t| Box::new(value(rng, t, depth + 1))),
            )
        }
        T::Enum(names) => V::Enum(names[rng.below(names.len() as u64) as usize].clone()),
        T::Option(t) => V::Option((rng.below(2) == 1).then(|| Box::new(value(rng, t, depth + 1)))),
        T::Result { ok, err } => {
            if rng.below(2) == 1 {
                V::Result(Ok(ok
                    .as_deref()
                    .map(|t| Box::new(value(rng, t, depth + 1)))))
            } else {
                V::Result(Err(err
                    .as_deref()
                    .map(|t| Box::new(value(rng, t, depth + 1)))))
            }
        }
        T::Own(_) | T::Borrow(_) => unreachable!("the generator makes no resource types"),
        T::Flags(names) => V::Flags(
            names
                .iter()
                .filter(|_| rng.below(2) == 1)
                .cloned()
                .collect(),
        ),
    }
}

fn to_wasmtime(v: &ec::Val) -> wc::Val {
    use ec::Val as E;
    use wc::Val as W;
    let b = |v: &Option<Box<E>>| v.as_deref().map(|v| Box::new(to_wasmtime(v)));
    match v {
        E::Bool(x) => W::Bool(*x),
        E::S8(x) => W::S8(*x),
        E::U8(x) => W::U8(*x),
        E::S16(x) => W::S16(*x),
        E::U16(x) => W::U16(*x),
        E::S32(x) => W::S32(*x),
        E::U32(x) => W::U32(*x),
        E::S64(x) => W::S64(*x),
        E::U64(x) => W::U64(*x),
        E::Float32(x) => W::Float32(*x),
        E::Float64(x) => W::Float64(*x),
        E::Char(x) => W::Char(*x),
        E::String(x) => W::String(x.clone()),
        E::List(x) => W::List(x.iter().map(to_wasmtime).collect()),
        E::Record(x) => W::Record(x.iter().map(|(n, v)| (n.clone(), to_wasmtime(v))).collect()),
        E::Tuple(x) => W::Tuple(x.iter().map(to_wasmtime).collect()),
        E::Variant(n, p) => W::Variant(n.clone(), b(p)),
        E::Enum(n) => W::Enum(n.clone()),
        E::Option(p) => W::Option(b(p)),
        E::Result(Ok(p)) => W::Result(Ok(b(p))),
        E::Result(Err(p)) => W::Result(Err(b(p))),
        E::Flags(f) => W::Flags(f.clone()),
        E::Resource(_) => unreachable!("the generator makes no resource types"),
    }
}

/// What one engine saw: the value the host got, the value returned, the guest's memory.
type Seen = (String, String, Vec<u8>);

fn run_ephem(text: &[u8], v: &ec::Val) -> anyhow::Result<Seen> {
    let engine = ephem::Engine::default();
    let c = ec::Component::new(&engine, text)?;
    let mut linker = ec::Linker::<Vec<ec::Val>>::new(&engine);
    linker
        .root()
        .func_new("echo", |mut store, _ty, params, results| {
            store.data_mut().push(params[0].clone());
            results[0] = params[0].clone();
            Ok(())
        })?;
    let mut store = ephem::Store::new(&engine, Vec::new());
    let i = linker.instantiate(&mut store, &c)?;
    let mut out = [ec::Val::Bool(false)];
    let echo = i.get_func(&mut store, "echo").unwrap();
    echo.call(&mut store, std::slice::from_ref(v), &mut out)?;
    let dump = i.get_typed_func::<(), (Vec<u8>,)>(&mut store, "dump")?;
    let (image,) = dump.call(&mut store, ())?;
    let got = format!(
        "{:?}",
        store.data().iter().map(to_wasmtime).collect::<Vec<_>>()
    );
    Ok((got, format!("{:?}", to_wasmtime(&out[0])), image))
}

fn run_wasmtime(text: &[u8], v: &ec::Val) -> anyhow::Result<Seen> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config)?;
    let c = wc::Component::new(&engine, text)?;
    let mut linker = wc::Linker::<Vec<wc::Val>>::new(&engine);
    linker
        .root()
        .func_new("echo", |mut store, _ty, params, results| {
            store.data_mut().push(params[0].clone());
            results[0] = params[0].clone();
            Ok(())
        })?;
    let mut store = wasmtime::Store::new(&engine, Vec::new());
    let i = linker.instantiate(&mut store, &c)?;
    let mut out = [wc::Val::Bool(false)];
    let echo = i.get_func(&mut store, "echo").unwrap();
    echo.call(&mut store, &[to_wasmtime(v)], &mut out)?;
    let dump = i.get_typed_func::<(), (Vec<u8>,)>(&mut store, "dump")?;
    let (image,) = dump.call(&mut store, ())?;
    Ok((
        format!("{:?}", store.data()),
        format!("{:?}", out[0]),
        image,
    ))
}

#[test]
fn ephem_lifts_and_lowers_values_as_wasmtime_does() {
    let (mut values, mut differences) = (0, Vec::new());
    let mut through_memory = 0;
    for seed in SEEDS {
        let mut gen_ = Gen {
            prelude: String::new(),
            names: 0,
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        };
        // One type in four is a wide tuple, so that some arguments pass through memory.
        let (ty, flat) = if seed % 4 == 0 {
            let (mut text, mut flat) = ("(tuple".to_string(), Vec::new());
            for _ in 0..6 + gen_.rng.below(6) {
                let (t, f) = gen_.ty(2);
                text += &format!(" {t}");
                flat.extend(f);
            }
            (text + ")", flat)
        } else {
            gen_.ty(3)
        };
        through_memory += (flat.len() > 16) as u32;
        let text = component_text(&gen_.prelude, &ty, &flat);
        let wasm = wat::parse_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let c = ec::Component::new(&ephem::Engine::default(), &wasm)
            .unwrap_or_else(|e| panic!("seed {seed}: ephem refused: {e}\n{text}"));
        let echo_ty = c
            .exported_funcs()
            .into_iter()
            .find(|(path, _)| path == &["echo"])
            .map(|(_, ty)| ty.params[0].1.clone())
            .unwrap();
        let mut rng = Rng(seed + 1);
        for _ in 0..4 {
            let v = value(&mut rng, &echo_ty, 0);
            values += 1;
            let ours = run_ephem(&wasm, &v).map_err(|e| e.to_string());
            let theirs = run_wasmtime(&wasm, &v).map_err(|e| e.to_string());
            if ours != theirs {
                differences.push(format!(
                    "seed {seed}, type {ty}, value {v:?}:\n ephem    {:?}\n wasmtime {:?}",
                    ours.map(|(a, b, _)| (a, b)),
                    theirs.map(|(a, b, _)| (a, b))
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    println!(
        "{values} values over {} types agree ({through_memory} passed through memory)",
        SEEDS.end - SEEDS.start
    );
}
