//! A WASI command as a request handler: the WASI template is built once; every request gets a
//! fresh store, instance and WASI context, with the request as standard input and the response
//! captured from standard output. The guest is `crates/wasi/tests/guests/wc.c` (it counts the
//! lines and bytes of its input).
//!
//! Run it with `cargo run -p ephem --example wasi`.

use ephem::{Engine, Linker, Store};
use ephem_wasi::{Output, WasiCtx, WasiCtxBuilder};

pub fn main() -> anyhow::Result<()> {
    let engine = Engine::default();
    let wasm = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wasi/tests/guests/wc.wasm"
    ))?;
    let module = ephem::Module::new(&engine, &wasm)?;
    let mut linker = Linker::new(&engine);
    ephem_wasi::add_to_linker(&mut linker, |ctx: &mut WasiCtx| ctx)?;
    let pre = linker.instantiate_pre(&module)?;

    let mut template = WasiCtxBuilder::new();
    template.arg("wc")?.stdout(Output::Capture(64 << 10));
    for request in ["one line\n", "two\nlines\n", ""] {
        let mut ctx = template.build();
        ctx.set_stdin(request.as_bytes());
        let mut store = Store::new(&engine, ctx);
        let instance = pre.instantiate(&mut store)?;
        let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
        match start.call(&mut store, ()) {
            Ok(()) => {}
            // A C program's `exit(0)` (older wasi-libc always ends `_start` with it).
            Err(e) if ephem_wasi::exit_code(&e) == Some(0) => {}
            Err(e) => return Err(e.into()),
        }
        let response = String::from_utf8(store.data_mut().take_stdout())?;
        let expected = format!("{} {}\n", request.matches('\n').count(), request.len());
        assert_eq!(response, expected, "for {request:?}");
        println!("{request:?} -> {response:?}");
    }
    Ok(())
}
