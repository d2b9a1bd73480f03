//! No mapping of the process is ever writable and executable at once, whichever way a module's
//! code is loaded: copied into a pooled code slot (a memory file mapped read+execute, written
//! through a second, read+write view) or mapped read+execute from its artifact.

use ephem::{Engine, EngineConfig, Linker, Module, Store};

/// The mappings of this process that are both writable and executable, as `/proc/self/maps`
/// lists them.
fn writable_and_executable() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| {
            let perms = line.split_whitespace().nth(1).unwrap_or("");
            perms.contains('w') && perms.contains('x')
        })
        .map(str::to_owned)
        .collect()
}

/// A module with `n` functions, each of which the export calls.
fn module_text(n: usize) -> String {
    let mut wat = String::from("(module (memory 1)\n");
    for i in 0..n {
        wat += &format!(
            "(func $f{i} (param i32) (result i32) \
             (i32.store (i32.const {a}) (i32.mul (local.get 0) (i32.const {i}))) \
             (i32.add (i32.load (i32.const {a})) (i32.const 1)))\n",
            a = (i % 1000) * 4
        );
    }
    wat += "(func (export \"run\") (result i32) (local $s i32)\n";
    for i in 0..n {
        wat += &format!("(local.set $s (i32.add (local.get $s) (call $f{i} (i32.const 1))))\n");
    }
    wat += "(local.get $s)))";
    wat
}

#[test]
fn no_mapping_is_writable_and_executable_however_code_is_loaded() {
    // Every text mapped from its artifact, then every text copied into a code slot.
    for map_text_at in [0, usize::MAX] {
        let engine = Engine::with_config(EngineConfig {
            map_text_at: Some(map_text_at),
            ..EngineConfig::default()
        })
        .unwrap();
        for n in [3, 3000] {
            let module = Module::new(&engine, module_text(n)).unwrap();
            let mut store = Store::new(&engine, ());
            let instance = Linker::new(&engine)
                .instantiate(&mut store, &module)
                .unwrap();
            let run = instance
                .get_typed_func::<(), i32>(&mut store, "run")
                .unwrap();
            let expected: i32 = (0..n as i32).map(|i| i + 1).sum();
            assert_eq!(run.call(&mut store, ()).unwrap(), expected);
            // While the code is loaded and after it ran.
            let both = writable_and_executable();
            assert!(both.is_empty(), "writable and executable: {both:?}");
        }
    }
}
