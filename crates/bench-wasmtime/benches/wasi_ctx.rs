//! What a WASI context costs per invocation, on ephem and on wasmtime, side by side: three
//! arguments, three environment variables, one preopened directory, stdout and stderr into
//! memory. ephem builds it from a template made once (`WasiCtxBuilder::build`); wasmtime's
//! builder is consumed by `build_p1`, so a context is built from scratch each time, as a
//! wasmtime embedder does per request.

use criterion::{Criterion, criterion_group, criterion_main};

const ARGS: [&str; 3] = ["prog", "--input", "request.json"];
const ENV: [(&str, &str); 3] = [("LANG", "C"), ("TZ", "UTC"), ("MODE", "fresh")];
const OUTPUT: usize = 1 << 20;

fn contexts(c: &mut Criterion) {
    let dir = std::env::temp_dir();
    let mut group = c.benchmark_group("wasi-ctx");

    let mut template = ephem_wasi::WasiCtxBuilder::new();
    template.args(ARGS).unwrap();
    for (k, v) in ENV {
        template.env(k, v).unwrap();
    }
    template
        .stdout(ephem_wasi::Output::Capture(OUTPUT))
        .stderr(ephem_wasi::Output::Capture(OUTPUT))
        .preopened_dir(&dir, ".", ephem_wasi::DirPerms::ReadWrite)
        .unwrap();
    group.bench_function("ephem", |b| b.iter(|| template.build()));

    group.bench_function("wasmtime", |b| {
        b.iter(|| {
            use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
            let mut w = wasmtime_wasi::WasiCtxBuilder::new();
            w.args(&ARGS)
                .envs(&ENV)
                .stdout(MemoryOutputPipe::new(OUTPUT))
                .stderr(MemoryOutputPipe::new(OUTPUT))
                .preopened_dir(&dir, ".", wasmtime_wasi::FsPerms::ReadWrite)
                .unwrap();
            w.build_p1()
        })
    });
    group.finish();
}

criterion_group!(benches, contexts);
criterion_main!(benches);
