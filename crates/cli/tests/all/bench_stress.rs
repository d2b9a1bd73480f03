//! `ephem bench stress-modules`: the generated modules are valid and compute what their shape
//! says, compiled into the cache and run from it.

use std::process::Command;

use ephem_bench::stress::Shape;

#[test]
fn stress_modules_run_and_return_what_their_shape_says() {
    let tmp = ephem_test_support::temp_dir();
    let dir = tmp.path().join("modules");
    let out = Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args(["bench", "stress-modules"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shape in Shape::all(1) {
        let path = dir.join(shape.file_name());
        // Twice: compiled into the cache, then opened from it.
        for _ in 0..2 {
            let out = Command::new(env!("CARGO_BIN_EXE_ephem"))
                .env("EPHEM_CACHE_DIR", tmp.path().join("cache"))
                .args(["run", "--trap-unknown-imports"])
                .arg(&path)
                .args(["--invoke", "run"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{shape:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                shape.expected().to_string(),
                "{shape:?}"
            );
        }
    }
}
