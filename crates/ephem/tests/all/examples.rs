//! Every Rust example in the repository's `examples/` folder runs and checks its own results.

#[path = "../../../../examples/hello.rs"]
mod hello;

#[path = "../../../../examples/fresh.rs"]
mod fresh;

#[path = "../../../../examples/threads.rs"]
mod threads;

#[path = "../../../../examples/wasi.rs"]
mod wasi;

#[path = "../../../../examples/component.rs"]
mod component;

#[test]
fn hello_runs() {
    hello::main().unwrap();
}

#[test]
fn fresh_runs() {
    fresh::main().unwrap();
}

#[test]
fn threads_runs() {
    threads::main().unwrap();
}

#[test]
fn wasi_runs() {
    wasi::main().unwrap();
}

#[test]
fn component_runs() {
    component::main().unwrap();
}

#[test]
fn every_example_is_run_here() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut examples: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    examples.sort();
    assert_eq!(
        examples,
        ["component", "fresh", "hello", "threads", "wasi"],
        "a new example needs a test here"
    );
}
