//! A deployment that only runs precompiled artifacts builds the runtime alone: it must not pull in
//! the compiler (Cranelift, the wasm parser) through any dependency.

use std::process::Command;

#[test]
fn the_runtime_does_not_depend_on_the_compiler() {
    assert_no_compiler_in(&["-p", "ephem-runtime"]);
}

/// The `ephem` crate without its default `cranelift` feature is the runtime alone, as wasmtime
/// without its feature of that name: `Module::new` is absent, `deserialize_file` stays.
#[test]
fn ephem_without_cranelift_does_not_depend_on_the_compiler() {
    assert_no_compiler_in(&["-p", "ephem", "--no-default-features"]);
}

/// Components load from their artifacts without the compiler too.
#[test]
fn components_without_cranelift_do_not_depend_on_the_compiler() {
    assert_no_compiler_in(&["-p", "ephem-component", "--no-default-features"]);
}

fn assert_no_compiler_in(package: &[&str]) {
    let out = Command::new(env!("CARGO"))
        .arg("tree")
        .args(package)
        .args(["-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(
        tree.contains("ephem-artifact"),
        "not a dependency tree:\n{tree}"
    );
    for compiler_part in ["ephem-compiler", "cranelift", "wasmparser", "wat "] {
        assert!(
            !tree.contains(compiler_part),
            "the runtime depends on {compiler_part}:\n{tree}"
        );
    }
}
