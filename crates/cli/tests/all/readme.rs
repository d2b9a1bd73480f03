//! The README's `ephem serve` example, run line by line as a reader would paste it (with the
//! server on a free port instead of 8080), so that the README cannot drift from what the server
//! answers.

use std::process::{Command, Stdio};

/// The shell block that follows the README's marker comment.
fn serve_example() -> Vec<String> {
    let readme = include_str!("../../../../README.md");
    let after = readme
        .split("crates/cli/tests/all/readme.rs")
        .nth(1)
        .expect("the README marks its serve example");
    let block = after
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a shell block after the marker");
    block.lines().map(str::to_owned).collect()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_readme_serve_example_answers_what_it_says() {
    if !(have("curl") && have("jq")) {
        eprintln!("skipped: the README's example needs curl and jq on the PATH");
        return;
    }
    let lines = serve_example();
    assert!(
        lines[0].starts_with("ephem serve --data-dir "),
        "the example starts the server first: {lines:?}"
    );
    let data = ephem_test_support::temp_dir();
    let (mut server, base) = crate::serve::serve(data.path(), &[]);
    let addr = base.trim_start_matches("http://");

    let script = lines[1..].join("\n").replace("localhost:8080", addr);
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    let invoked: serde_json::Value = serde_json::from_str(answers[0]).unwrap();
    assert_eq!(invoked["results"], serde_json::json!([6765]), "{stdout}");
    assert_eq!(answers[1], "2 8", "wc's count of `one\\ntwo\\n`: {stdout}");
}
