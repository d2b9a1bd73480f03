//! `ephem serve` as a process: it survives `kill -9` with nothing lost (and, with an object
//! store, the loss of its disk), and on SIGTERM it
//! finishes the requests in flight before it exits.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};

const MODULE: &str = r#"(module
  (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1)))
  (func (export "spin") (loop (br 0))))"#;

/// Starts `ephem serve` on a free port; returns the process and its base URL.
pub(crate) fn serve(data: &Path, extra: &[&str]) -> (Child, String) {
    let (child, base, _logs) = serve_logged(data, extra);
    (child, base)
}

/// As [`serve`], with the thread that reads the server's log lines: joined once the server has
/// exited, it returns them.
fn serve_logged(
    data: &Path,
    extra: &[&str],
) -> (Child, String, std::thread::JoinHandle<Vec<String>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ephem"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "2",
            "--data-dir",
        ])
        .arg(data)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server said where it listens")
            .unwrap();
        if let Some(at) = line.split("address=").nth(1) {
            break at.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep draining its logs so that it never blocks on a full pipe.
    let logs = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (child, format!("http://{addr}"), logs)
}

fn call(c: &Client, base: &str, id: &str, export: &str, args: Value) -> (StatusCode, Value) {
    let r = (c.post(format!("{base}/modules/{id}/invoke/{export}")))
        .body(args.to_string())
        .send()
        .unwrap();
    (r.status(), r.json().unwrap_or(Value::Null))
}

/// Uploads `MODULE` through `base`; returns its id.
fn upload(c: &Client, base: &str) -> String {
    let r = (c.put(format!("{base}/modules")))
        .body(wat::parse_str(MODULE).unwrap())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = r.json::<Value>().unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Calls `add` of module `id` through `base`, which must answer 42.
fn add(c: &Client, base: &str, id: &str) {
    let (status, body) = call(c, base, id, "add", json!([20, 22]));
    assert_eq!(
        (status, &body["results"]),
        (StatusCode::OK, &json!([42])),
        "{body}"
    );
}

#[test]
fn modules_survive_kill_9_and_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let (mut server, base) = serve(data.path(), &[]);
    let c = Client::new();
    let id = upload(&c, &base);
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();

    let (mut server, base) = serve(data.path(), &[]);
    add(&c, &base, &id);
    server.kill().unwrap();
    server.wait().unwrap();
}

/// With an object store (`--object-store`), a node killed and replaced by one with an empty
/// disk still serves what was uploaded to it.
#[test]
fn modules_survive_the_loss_of_a_node_through_an_object_store() {
    use std::os::unix::fs::OpenOptionsExt;
    let (fleet, first, second) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let key = fleet.path().join("key");
    let mut f = (std::fs::OpenOptions::new())
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key)
        .unwrap();
    std::io::Write::write_all(&mut f, "5e".repeat(32).as_bytes()).unwrap();
    let bucket = fleet.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let url = format!("file://{}", bucket.display());
    let flags = [
        "--object-store",
        &url,
        "--artifact-key",
        key.to_str().unwrap(),
    ];
    let (mut server, base) = serve(first.path(), &flags);
    let c = Client::new();
    let id = upload(&c, &base);
    server.kill().unwrap();
    server.wait().unwrap();
    drop(first);

    let (mut server, base) = serve(second.path(), &flags);
    add(&c, &base, &id);
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn sigterm_finishes_the_requests_in_flight() {
    let data = tempfile::tempdir().unwrap();
    let (mut server, base) = serve(
        data.path(),
        &["--timeout", "1s", "--fuel", "100000000000000"],
    );
    let c = Client::new();
    let r = (c.put(format!("{base}/modules")))
        .body(wat::parse_str(MODULE).unwrap())
        .send()
        .unwrap();
    let id = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let in_flight = {
        let (base, id) = (base.clone(), id.clone());
        std::thread::spawn(move || call(&Client::new(), &base, &id, "spin", json!([])))
    };
    std::thread::sleep(Duration::from_millis(300));
    let pid = rustix::process::Pid::from_child(&server);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let t = Instant::now();
    let (status, body) = in_flight.join().unwrap();
    assert_eq!(
        (status, &body["kind"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("Interrupted"))
    );
    let exit = server.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

/// A line per request only with `--access-log`: it costs throughput (BENCHMARKS.md, Serve).
#[test]
fn requests_are_logged_only_with_an_access_log() {
    for (flags, expected) in [(&[][..], false), (&["--access-log"][..], true)] {
        let data = tempfile::tempdir().unwrap();
        let (mut server, base, logs) = serve_logged(data.path(), flags);
        let c = Client::new();
        let id = upload(&c, &base);
        add(&c, &base, &id);
        server.kill().unwrap();
        server.wait().unwrap();
        let logs = logs.join().unwrap();
        let logged = logs.iter().any(|l| {
            l.contains("request") && l.contains("/invoke/{export}") && l.contains("status=200")
        });
        assert_eq!(logged, expected, "{flags:?}: {logs:?}");
    }
}
