//! `ephem bench load --json` prints one well-formed object per measured configuration.

use std::process::Command;

#[test]
fn bench_load_json_lines_have_the_documented_fields() {
    let rows = ephem_test_support::json_lines(
        Command::new(env!("CARGO_BIN_EXE_ephem"))
            .args([
                "bench",
                "load",
                "--sizes",
                "4k,8k",
                "--threads",
                "2",
                "--loads",
                "20",
            ])
            .args(["--strategies", "naive,dual", "--json"]),
    );
    // 2 sizes × 2 fills × 2 thread counts × (memcpy, naive, dual).
    assert_eq!(rows.len(), 24);
    for row in &rows {
        assert!(["memcpy", "naive", "dual"].contains(&row["strategy"].as_str().unwrap()));
        assert!([4096, 8192].contains(&row["size"].as_u64().unwrap()));
        assert!(["page", "full"].contains(&row["fill"].as_str().unwrap()));
        assert!([1, 2].contains(&row["threads"].as_u64().unwrap()));
        assert!(row["ns_per_load"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bench_load_refuses_rwx_without_the_opt_in() {
    let out = Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args([
            "bench",
            "load",
            "--sizes",
            "4k",
            "--strategies",
            "rwx",
            "--loads",
            "20",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-rwx"));
}
