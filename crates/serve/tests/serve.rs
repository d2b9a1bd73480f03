//! `ephem-serve` against a real server on loopback: uploads, calls, commands, every error
//! status, limits a request cannot raise, a guest that loops forever answered at its deadline
//! while others are served, the worker gate's `503`, tokens, eviction, and two nodes sharing
//! one artifact store, as a directory or an object store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ephem_serve::object_store::ObjectStore;
use ephem_serve::{Config, Server};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// A server running on its own runtime until dropped.
struct Running {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        let _ = self.thread.take().map(|t| t.join());
    }
}

fn config(data: &Path) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_owned(),
        workers: 2,
        ..Config::default()
    }
}

fn start(config: Config) -> Running {
    start_with(config, None)
}

/// A server with `objects` as its fleet's object store.
fn start_with(config: Config, objects: Option<Arc<dyn ObjectStore>>) -> Running {
    start_serving(config, Serving::Modules(objects))
}

/// What a test server serves.
enum Serving {
    /// Modules, with this fleet object store.
    Modules(Option<Arc<dyn ObjectStore>>),
    /// This `wasi:http` component at every path.
    Component(Vec<u8>),
}

fn start_serving(config: Config, serving: Serving) -> Running {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let server = match serving {
                Serving::Modules(Some(objects)) => Server::bind_with(config, Some(objects)).await,
                Serving::Modules(None) => Server::bind(config).await,
                Serving::Component(bytes) => Server::bind_component(config, &bytes).await,
            };
            let server = server.unwrap();
            addr_tx.send(server.local_addr().unwrap()).unwrap();
            server
                .run(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr_rx.recv().unwrap();
    Running {
        base: format!("http://{addr}"),
        stop: Some(stop),
        thread: Some(thread),
    }
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The server's metrics, as text.
fn metrics(c: &Client, base: &str) -> String {
    (c.get(format!("{base}/metrics")).send().unwrap().text()).unwrap()
}

/// Uploads `wasm`; returns the status and the body.
fn upload(c: &Client, base: &str, wasm: Vec<u8>) -> (StatusCode, Value) {
    let r = c.put(format!("{base}/modules")).body(wasm).send().unwrap();
    let status = r.status();
    (status, r.json().unwrap_or(Value::Null))
}

/// Uploads `wasm`, which must be accepted; returns its id.
fn upload_ok(c: &Client, base: &str, wasm: Vec<u8>) -> String {
    let (status, body) = upload(c, base, wasm);
    assert!(status.is_success(), "{status} {body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Calls `export` of module `id` with `args` (and a query); returns the status and the body.
fn invoke(c: &Client, base: &str, id: &str, call: &str, args: Value) -> (StatusCode, Value) {
    let r = (c.post(format!("{base}/modules/{id}/invoke/{call}")))
        .body(args.to_string())
        .send()
        .unwrap();
    let status = r.status();
    (status, r.json().unwrap_or(Value::Null))
}

/// Calls `add` of `MODULE` (uploaded as `id`) through `base`, which must answer 5.
fn adds(c: &Client, base: &str, id: &str) {
    let (status, body) = invoke(c, base, id, "add", json!([2, 3]));
    assert_eq!(
        (status, &body["results"]),
        (StatusCode::OK, &json!([5])),
        "{body}"
    );
}

const MODULE: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1)))
  (func (export "div") (param i32 i32) (result i32) (i32.div_s (local.get 0) (local.get 1)))
  (func (export "spin") (loop (br 0)))
  (tag $oops (param i32))
  (func (export "throws") (param i32) (throw $oops (local.get 0)))
  (func $recurse (export "recurse") (call $recurse))
  ;; Grows memory a page at a time until it cannot; returns the pages it ended with.
  (func (export "bomb") (result i32)
    (block (loop (br_if 1 (i32.eq (memory.grow (i32.const 1)) (i32.const -1))) (br 0)))
    (memory.size)))"#;

fn wasm(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap()
}

fn guest(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wasi/tests/guests")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn modules_are_uploaded_described_called_and_deleted() {
    let data = tempfile::tempdir().unwrap();
    let server = start(config(data.path()));
    let (c, base) = (client(), &server.base);
    let (status, body) = upload(&c, base, wasm(MODULE));
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(id, blake3::hash(&wasm(MODULE)).to_hex().as_str());
    let names: Vec<&str> = (body["exports"].as_array().unwrap().iter())
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["memory", "add", "div", "spin", "throws", "recurse", "bomb"]
    );
    // The same module again is the same module.
    assert_eq!(upload(&c, base, wasm(MODULE)).0, StatusCode::OK);
    let r = c.get(format!("{base}/modules/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["exports"], body["exports"]);

    let (status, body) = invoke(&c, base, &id, "add", json!([40, 2]));
    assert_eq!(
        (status, &body["results"]),
        (StatusCode::OK, &json!([42])),
        "{body}"
    );
    assert!(body["fuel_used"].as_u64().unwrap() > 0, "{body}");

    let r = c.delete(format!("{base}/modules/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        invoke(&c, base, &id, "add", json!([1, 2])).0,
        StatusCode::NOT_FOUND
    );
    let r = c.delete(format!("{base}/modules/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = c.get(format!("{base}/modules/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[test]
fn every_error_has_its_status_and_says_why() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.limits.max_module = 4096;
    let server = start(cfg);
    let (c, base) = (client(), &server.base);
    // Not wasm; invalid wasm (a type error); too large; imports this server lacks.
    let (status, body) = upload(&c, base, b"\0asm\x01\0\0\0\x01".to_vec());
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = upload(&c, base, wasm("(module (func (result i32) i64.const 1))"));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("type mismatch"),
        "{body}"
    );
    let (status, body) = upload(&c, base, vec![0; 8192]);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        body["error"], "too_large",
        "413 is JSON as every other error: {body}"
    );
    let (status, body) = upload(&c, base, wasm(r#"(module (import "env" "f" (func)))"#));
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["message"].as_str().unwrap().contains("env"), "{body}");

    let id = upload_ok(&c, base, wasm(MODULE));
    let no_module = "0".repeat(64);
    assert_eq!(
        invoke(&c, base, &no_module, "add", json!([])).0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        invoke(&c, base, "../../etc", "add", json!([])).0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        invoke(&c, base, &id, "nothing", json!([])).0,
        StatusCode::NOT_FOUND
    );
    for bad in [
        json!([1]),
        json!([1, "x"]),
        json!([1, 4294967296u64]),
        json!({"a": 1}),
    ] {
        let (status, body) = invoke(&c, base, &id, "add", bad.clone());
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = invoke(&c, base, &id, "div", json!([1, 0]));
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["kind"], "IntegerDivisionByZero", "{body}");
    let (status, body) = invoke(&c, base, &id, "recurse", json!([]));
    assert_eq!(
        (status, &body["kind"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("StackOverflow"))
    );
    // An exception no handler caught is the guest's fault, as a trap is.
    let (status, body) = invoke(&c, base, &id, "throws", json!([7]));
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("exception")),
        "{body}"
    );
    let r = c
        .post(format!("{base}/modules/{id}/invoke/add?speed=fast"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // The metrics saw them.
    let metrics = metrics(&c, base);
    assert!(
        metrics.contains(r#"ephem_traps_total{kind="IntegerDivisionByZero"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"route="/modules",status="413""#),
        "{metrics}"
    );
}

#[test]
fn limits_bound_every_call_and_a_request_cannot_raise_them() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.limits.fuel = 100_000;
    cfg.limits.timeout_ms = 200;
    cfg.limits.max_memory = 1 << 20;
    let server = start(cfg);
    let (c, base) = (client(), &server.base);
    let id = upload_ok(&c, base, wasm(MODULE));
    let call = |query: &str, export: &str| {
        let r = (c.post(format!("{base}/modules/{id}/invoke/{export}?{query}")))
            .send()
            .unwrap();
        let status = r.status();
        (status, r.json::<Value>().unwrap())
    };
    // The configured fuel stops a loop; asking for more changes nothing; less stops sooner.
    let (status, body) = call("", "spin");
    assert_eq!(
        (status, &body["kind"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("OutOfFuel"))
    );
    assert_eq!(body["fuel_used"], Value::Null);
    let (_, body) = call("fuel=1000000000000", "spin");
    assert_eq!(body["kind"], "OutOfFuel", "{body}");
    // No fuel runs nothing, not even a call that would cost little.
    let (status, body) = call("fuel=0", "bomb");
    assert_eq!(
        (status, &body["kind"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("OutOfFuel")),
        "{body}"
    );
    // Sizes in the query take units.
    let (_, body) = call("max_memory=128KiB", "bomb");
    assert_eq!(body["results"], json!([2]), "{body}");
    // A memory bomb gets the limit: memory.grow fails past 1 MiB (16 pages) and the guest goes on.
    let (status, body) = call("", "bomb");
    assert_eq!(
        (status, &body["results"]),
        (StatusCode::OK, &json!([16])),
        "{body}"
    );
    let (_, body) = call("max_memory=131072", "bomb");
    assert_eq!(body["results"], json!([2]), "{body}");
    let (_, body) = call("max_memory=1000000000000", "bomb");
    assert_eq!(body["results"], json!([16]), "{body}");
    // A module whose initial memory is beyond the limit fails to instantiate, naming it.
    let big = upload_ok(&c, base, wasm("(module (memory 32) (func (export \"f\")))"));
    let (status, body) = invoke(&c, base, &big, "f", json!([]));
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("limit"))
    );
}

#[test]
fn a_guest_that_loops_forever_is_stopped_at_its_deadline_while_others_are_served() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.limits.fuel = u64::MAX / 2;
    cfg.limits.timeout_ms = 1_000;
    let server = start(cfg);
    let base = server.base.clone();
    let id = upload_ok(&client(), &base, wasm(MODULE));
    let spinning = {
        let (base, id) = (base.clone(), id.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let (status, body) = invoke(&client(), &base, &id, "spin", json!([]));
            (status, body, t.elapsed())
        })
    };
    // Meanwhile the other worker answers.
    std::thread::sleep(Duration::from_millis(100));
    let c = client();
    for i in 0..20 {
        let (status, body) = invoke(&c, &base, &id, "add", json!([i, 1]));
        assert_eq!(
            (status, &body["results"]),
            (StatusCode::OK, &json!([i + 1]))
        );
    }
    let (status, body, took) = spinning.join().unwrap();
    assert_eq!(
        (status, &body["kind"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("Interrupted"))
    );
    assert!(took >= Duration::from_millis(1_000), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A request may ask for a shorter deadline.
    let t = Instant::now();
    let r = (client().post(format!("{base}/modules/{id}/invoke/spin?timeout_ms=50")))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

/// POSTs to `path` a request that announces a body of a megabyte and sends none of it; returns
/// the status line of the answer, which must come within two seconds.
fn announce_body_without_sending_it(base: &str, path: &str) -> String {
    use std::io::{BufRead, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1000000\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut line = String::new();
    let read = std::io::BufReader::new(stream).read_line(&mut line);
    read.map_or_else(|e| format!("no answer: {e}"), |_| line)
}

#[test]
fn a_full_queue_is_answered_503_at_once() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.workers = 1;
    cfg.queue = Some(1);
    cfg.limits.fuel = u64::MAX / 2;
    cfg.limits.timeout_ms = 1_500;
    let server = start(cfg);
    let base = server.base.clone();
    let id = upload_ok(&client(), &base, wasm(MODULE));
    // One spinning on the worker, one waiting in the queue: the third is refused at once.
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let (base, id) = (base.clone(), id.clone());
            let t = std::thread::spawn(move || invoke(&client(), &base, &id, "spin", json!([])).0);
            std::thread::sleep(Duration::from_millis(200));
            t
        })
        .collect();
    let t = Instant::now();
    let r = (client().post(format!("{base}/modules/{id}/invoke/add")))
        .body("[1, 2]")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Refused before its body is read: a request announcing a megabyte it never sends.
    for route in ["invoke/add", "run"] {
        let status = announce_body_without_sending_it(&base, &format!("/modules/{id}/{route}"));
        assert!(status.starts_with("HTTP/1.1 503"), "{route}: {status}");
    }
    for s in spinners {
        assert_eq!(s.join().unwrap(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    // Then it serves again.
    assert_eq!(
        invoke(&client(), &base, &id, "add", json!([1, 2])).0,
        StatusCode::OK
    );
    // As many clients as workers + queue, each sending its next call as soon as it has an
    // answer, are never refused: a call handed the worker but not yet woken up is not also
    // counted as waiting.
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (base, id) = (base.clone(), id.clone());
            std::thread::spawn(move || {
                let c = client();
                (0..300)
                    .filter(|_| invoke(&c, &base, &id, "add", json!([1, 2])).0 != StatusCode::OK)
                    .count()
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 0);
    }
}

#[test]
fn wasi_commands_take_stdin_args_and_env_and_return_stdout_and_their_exit_code() {
    let data = tempfile::tempdir().unwrap();
    let server = start(config(data.path()));
    let (c, base) = (client(), &server.base);
    let wc = upload_ok(&c, base, guest("wc.wasm"));
    let r = (c.post(format!("{base}/modules/{wc}/run")))
        .body("one\ntwo\nthree\n")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-ephem-exit-code"], "0");
    assert!(
        r.headers()["x-ephem-fuel-used"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(r.text().unwrap(), "3 14\n");

    let basics = upload_ok(&c, base, guest("basics.wasm"));
    let r = (c.post(format!("{base}/modules/{basics}/run?arg=exit&arg=7")))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-ephem-exit-code"], "7");
    let r = (c.post(format!(
        "{base}/modules/{basics}/run?arg=args&arg=a%20b&env=K=V"
    )))
    .send()
    .unwrap();
    let out = r.text().unwrap();
    assert!(out.contains("arg 1: args\narg 2: a b\n"), "{out}");
    // stdout is bounded by the request's max_output: the guest's write fails past it.
    let r = (c.post(format!("{base}/modules/{wc}/run?max_output=2")))
        .body("x\n")
        .send()
        .unwrap();
    assert!(r.text().unwrap().len() <= 2);
}

/// With `trap_unknown_imports`, a module built for another host is accepted: its imported
/// memory is fresh per call, and only calling a missing function traps. Two modules importing
/// one name with different types each get their own stub.
#[test]
fn unknown_imports_may_be_stubbed_to_trap() {
    let data = tempfile::tempdir().unwrap();
    let server = start(Config {
        trap_unknown_imports: true,
        ..config(data.path())
    });
    let (c, base) = (client(), &server.base);
    let glue = upload_ok(
        &c,
        base,
        wasm(
            r#"(module
              (import "env" "f" (func $f (param i32)))
              (import "env" "memory" (memory 1))
              (func (export "bump") (result i32)
                (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
                (i32.load (i32.const 0)))
              (func (export "glue") (call $f (i32.const 1))))"#,
        ),
    );
    // A fresh memory every call: the count starts at 0 each time.
    for _ in 0..2 {
        let (status, body) = invoke(&c, base, &glue, "bump", json!([]));
        assert_eq!((status, &body["results"]), (StatusCode::OK, &json!([1])));
    }
    let (status, body) = invoke(&c, base, &glue, "glue", json!([]));
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("env"), "{body}");
    let other = upload_ok(
        &c,
        base,
        wasm(
            r#"(module (import "env" "f" (func $f (result i64)))
                 (func (export "seven") (result i32) (i32.const 7)))"#,
        ),
    );
    let (status, body) = invoke(&c, base, &other, "seven", json!([]));
    assert_eq!((status, &body["results"]), (StatusCode::OK, &json!([7])));
}

/// Sightglass programs read `default.input` from their directory: sent as the body with
/// `input=NAME`, each prints exactly its expected output, and its input directory is gone after.
#[test]
fn sightglass_programs_run_with_their_input_as_the_body() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/sightglass");
    if !root.is_dir() {
        eprintln!("skipped: {} is absent", root.display());
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let server = start(config(data.path()));
    let (c, base) = (client(), &server.base);
    let read = |program: &str, file: &str| std::fs::read(root.join(program).join(file)).unwrap();
    for (program, input) in [
        ("quicksort", Some("default.input")),
        ("blake3-scalar", Some("default.input")),
        ("pulldown-cmark", Some("default.input.md")),
        ("noop", None),
    ] {
        let id = upload_ok(&c, base, read(program, "benchmark.wasm"));
        let (query, body) = match input {
            Some(name) => (format!("?input={name}"), read(program, name)),
            None => (String::new(), Vec::new()),
        };
        let r = (c.post(format!("{base}/modules/{id}/run{query}")))
            .body(body)
            .send()
            .unwrap();
        if r.status() != StatusCode::OK {
            panic!("{program}: {}", r.text().unwrap());
        }
        assert_eq!(r.headers()["x-ephem-exit-code"], "0", "{program}");
        let stderr = percent_encoding::percent_decode(r.headers()["x-ephem-stderr"].as_bytes())
            .collect::<Vec<u8>>();
        // The first 4 KiB of stderr come back; the rest is dropped and counted.
        let expected = read(program, "benchmark.stderr.expected");
        let kept = expected.len().min(4096);
        assert_eq!(stderr, expected[..kept], "{program}");
        let dropped = r.headers().get("x-ephem-stderr-dropped");
        let dropped = dropped.map_or(0, |v| v.to_str().unwrap().parse().unwrap());
        assert_eq!(kept + dropped, expected.len(), "{program}");
        assert_eq!(
            r.bytes().unwrap().as_ref(),
            read(program, "benchmark.stdout.expected"),
            "{program}"
        );
    }
    let scratch = data.path().join("scratch");
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);

    let quicksort = upload_ok(&c, base, read("quicksort", "benchmark.wasm"));
    for name in ["..%2Fx", "a%2Fb", "", "."] {
        let r = (c.post(format!("{base}/modules/{quicksort}/run?input={name}")))
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "input={name}");
    }
    // Without the file the program panics (a trap); the server answers and goes on.
    let r = (c.post(format!("{base}/modules/{quicksort}/run")))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json::<Value>().unwrap()["error"], "trap");
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

#[test]
fn tokens_are_required_when_configured_and_beyond_loopback() {
    let data = tempfile::tempdir().unwrap();
    let token_file = data.path().join("token");
    std::fs::write(&token_file, "s3cret-token-of-some-length\n").unwrap();
    let mut cfg = config(data.path());
    cfg.token_file = Some(token_file);
    let server = start(cfg);
    let (c, base) = (client(), &server.base);
    let put = |auth: Option<&str>| {
        let mut r = c.put(format!("{base}/modules")).body(wasm(MODULE));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send().unwrap().status()
    };
    assert_eq!(put(None), StatusCode::UNAUTHORIZED);
    assert_eq!(put(Some("Bearer wrong")), StatusCode::UNAUTHORIZED);
    assert_eq!(
        put(Some("Bearer s3cret-token-of-some-lengt")),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        put(Some("Bearer s3cret-token-of-some-length")),
        StatusCode::CREATED
    );
    let id = blake3::hash(&wasm(MODULE)).to_hex().to_string();
    assert_eq!(
        invoke(&c, base, &id, "add", json!([1, 2])).0,
        StatusCode::UNAUTHORIZED
    );
    // Health and metrics stay open (for probes and scrapers).
    assert_eq!(
        c.get(format!("{base}/healthz")).send().unwrap().status(),
        StatusCode::OK
    );

    // Beyond loopback, a server without a token does not start.
    let mut open = config(data.path());
    open.listen = "0.0.0.0:0".parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let refused = rt.block_on(Server::bind(open)).err().expect("refused");
    assert!(refused.to_string().contains("token"), "{refused}");
}

#[test]
fn many_uploads_with_a_small_artifact_store_evict_and_keep_serving() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.artifacts_max_bytes = 256 << 10;
    let server = start(cfg);
    let (c, base) = (client(), &server.base);
    let n = 300;
    let ids: Vec<String> = (0..n)
        .map(|i| {
            let text = format!("(module (func (export \"f\") (result i32) i32.const {i}))");
            upload_ok(&c, base, wasm(&text))
        })
        .collect();
    let artifacts = std::fs::read_dir(data.path().join("artifacts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "ephem")
        })
        .count();
    assert!(artifacts < n, "{artifacts} artifacts: nothing was evicted");
    // Every module still answers: evicted ones are compiled again from what was uploaded.
    for (i, id) in ids.iter().enumerate().step_by(7) {
        let (status, body) = invoke(&c, base, id, "f", json!([]));
        assert_eq!(
            (status, &body["results"]),
            (StatusCode::OK, &json!([i])),
            "{body}"
        );
    }
}

#[test]
fn two_nodes_sharing_a_store_compile_a_module_once() {
    let shared = tempfile::tempdir().unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node = |data: &Path| {
        let mut cfg = config(data);
        cfg.artifacts_dir = Some(shared.path().join("artifacts"));
        cfg.modules_dir = Some(shared.path().join("modules"));
        start(cfg)
    };
    let (one, two) = (node(a.path()), node(b.path()));
    let c = client();
    let id = upload_ok(&c, &one.base, wasm(MODULE));
    adds(&c, &two.base, &id);
    let (m1, m2) = (metrics(&c, &one.base), metrics(&c, &two.base));
    assert!(
        m1.contains(r#"ephem_artifacts_total{outcome="compiled"} 1"#),
        "{m1}"
    );
    assert!(!m2.contains(r#"outcome="compiled""#), "{m2}");
    assert!(
        m2.contains(r#"ephem_artifacts_total{outcome="hit"} 1"#),
        "{m2}"
    );
    // The second call on node two finds the module kept open; deleted through node one, it is
    // not called again, though node two still holds it open.
    assert_eq!(
        invoke(&c, &two.base, &id, "add", json!([2, 3])).0,
        StatusCode::OK
    );
    let m2 = metrics(&c, &two.base);
    assert!(
        m2.contains(r#"ephem_artifacts_total{outcome="open"} 1"#),
        "{m2}"
    );
    let r = c
        .delete(format!("{}/modules/{id}", one.base))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        invoke(&c, &two.base, &id, "add", json!([2, 3])).0,
        StatusCode::NOT_FOUND
    );
}

#[test]
fn concurrent_uploads_of_one_module_compile_it_once() {
    let data = tempfile::tempdir().unwrap();
    let server = start(config(data.path()));
    let base = server.base.clone();
    let uploads: Vec<_> = (0..8)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || upload(&client(), &base, wasm(MODULE)).0)
        })
        .collect();
    for u in uploads {
        assert!(u.join().unwrap().is_success());
    }
    let m = metrics(&client(), &base);
    assert!(
        m.contains(r#"ephem_artifacts_total{outcome="compiled"} 1"#),
        "{m}"
    );
}

/// A fleet key file in `dir` (the test's own key, mode 0600).
fn fleet_key(dir: &Path) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("fleet.key");
    let key = blake3::hash(dir.as_os_str().as_encoded_bytes()).to_hex();
    let mut f = (std::fs::OpenOptions::new())
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, key.as_bytes()).unwrap();
    path
}

/// How many times metric `ephem_artifacts_total` counted `outcome` (0 if never).
fn artifacts(m: &str, outcome: &str) -> u64 {
    let line = format!(r#"ephem_artifacts_total{{outcome="{outcome}"}} "#);
    m.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.parse().unwrap())
}

/// Nodes that share nothing but an object store (in memory here) and the fleet key: a module
/// uploaded to one is called on another, which fetches its artifact rather than compiling it;
/// a node with an empty disk serves it too; a delete through one node reaches the others at
/// their next check (every call here: `object_store_recheck_secs = 0`).
#[test]
fn nodes_sharing_an_object_store_compile_a_module_once_and_see_its_deletion() {
    let keys = tempfile::tempdir().unwrap();
    let key = fleet_key(keys.path());
    let bucket: Arc<dyn ObjectStore> = Arc::new(ephem_serve::object_store::memory::InMemory::new());
    let node = |data: &Path| {
        let mut cfg = config(data);
        cfg.artifact_key_file = Some(key.clone());
        cfg.object_store_recheck_secs = 0;
        start_with(cfg, Some(bucket.clone()))
    };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (one, two) = (node(dirs[0].path()), node(dirs[1].path()));
    let c = client();
    let (status, body) = upload(&c, &one.base, wasm(MODULE));
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        adds(&c, &two.base, &id);
    }
    let (m1, m2) = (metrics(&c, &one.base), metrics(&c, &two.base));
    assert_eq!(artifacts(&m1, "compiled"), 1, "{m1}");
    assert_eq!(artifacts(&m2, "compiled"), 0, "{m2}");
    assert_eq!(artifacts(&m2, "fetched"), 1, "{m2}");
    assert_eq!(artifacts(&m2, "open"), 1, "{m2}");
    // Uploaded again through another node: the fleet has it already.
    assert_eq!(upload(&c, &two.base, wasm(MODULE)).0, StatusCode::OK);

    // A node whose disk is empty (new, or replaced) serves it from the bucket.
    let three = node(dirs[2].path());
    assert_eq!(
        invoke(&c, &three.base, &id, "add", json!([1, 1])).0,
        StatusCode::OK
    );
    let m3 = metrics(&c, &three.base);
    assert_eq!(artifacts(&m3, "fetched"), 1, "{m3}");

    let r = c
        .delete(format!("{}/modules/{id}", one.base))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    for n in [&two, &three] {
        assert_eq!(
            invoke(&c, &n.base, &id, "add", json!([2, 3])).0,
            StatusCode::NOT_FOUND
        );
    }
    assert!(!dirs[1].path().join(format!("modules/{id}.wasm")).exists());
    // Gone from the fleet, so uploading it again makes it new.
    assert_eq!(upload(&c, &two.base, wasm(MODULE)).0, StatusCode::CREATED);
}

/// The object store named by URL (a directory here): what a node takes from it is checked. An
/// artifact that does not verify is compiled again and replaced in the bucket; bytes stored
/// under a module's name that are not that module are refused; a node without the fleet key
/// does not start.
#[test]
fn what_comes_from_an_object_store_is_checked() {
    let (keys, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let key = fleet_key(keys.path());
    let url = format!("file://{}/fleet", objects.path().display());
    std::fs::create_dir(objects.path().join("fleet")).unwrap();
    let cfg = |data: &Path| {
        let mut cfg = config(data);
        cfg.artifact_key_file = Some(key.clone());
        cfg.object_store = Some(url.clone());
        cfg
    };
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let c = client();
    let id = upload_ok(&c, &start(cfg(dirs[0].path())).base, wasm(MODULE));
    let stored = objects.path().join("fleet/artifacts");
    let artifact = std::fs::read_dir(&stored)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        objects
            .path()
            .join(format!("fleet/modules/{id}.wasm"))
            .is_file()
    );

    // Damaged in the bucket: compiled again, and the bucket's copy replaced.
    let good = std::fs::read(&artifact).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&artifact, &bad).unwrap();
    let two = start(cfg(dirs[1].path()));
    assert_eq!(
        invoke(&c, &two.base, &id, "add", json!([2, 3])).0,
        StatusCode::OK
    );
    let m = metrics(&c, &two.base);
    assert_eq!(
        (artifacts(&m, "fetched"), artifacts(&m, "compiled")),
        (0, 1),
        "{m}"
    );
    assert_eq!(std::fs::read(&artifact).unwrap(), good);
    let three = start(cfg(dirs[2].path()));
    assert_eq!(
        invoke(&c, &three.base, &id, "add", json!([2, 3])).0,
        StatusCode::OK
    );
    let m = metrics(&c, &three.base);
    assert_eq!(artifacts(&m, "fetched"), 1, "{m}");

    // Another module's bytes under this one's name.
    let other =
        wasm(r#"(module (func (export "add") (param i32 i32) (result i32) (i32.const 7)))"#);
    std::fs::write(
        objects.path().join(format!("fleet/modules/{id}.wasm")),
        other,
    )
    .unwrap();
    std::fs::remove_file(&artifact).unwrap();
    let four = start(cfg(dirs[3].path()));
    let (status, body) = invoke(&c, &four.base, &id, "add", json!([2, 3]));
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.to_string().contains("other bytes"), "{body}");

    // No fleet key: refused at start.
    let mut keyless = cfg(dirs[3].path());
    keyless.artifact_key_file = None;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let refused = rt.block_on(Server::bind(keyless)).err().unwrap();
    assert!(refused.to_string().contains("artifact key"), "{refused}");
}

/// A bucket that stops answering does not stop a node from serving what it holds: the check
/// that a held module is still there gives up after `CHECK_TIMEOUT`.
#[test]
fn a_node_serves_what_it_holds_when_the_object_store_does_not_answer() {
    use ephem_serve::object_store::throttle::{ThrottleConfig, ThrottledStore};
    let keys = tempfile::tempdir().unwrap();
    let key = fleet_key(keys.path());
    let inner = ephem_serve::object_store::memory::InMemory::new();
    let bucket = Arc::new(ThrottledStore::new(inner, ThrottleConfig::default()));
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.artifact_key_file = Some(key);
    cfg.object_store_recheck_secs = 0;
    let node = start_with(cfg, Some(bucket.clone()));
    let c = client();
    let id = upload_ok(&c, &node.base, wasm(MODULE));
    bucket.config_mut(|t| t.wait_get_per_call = Duration::from_secs(60));
    let t = Instant::now();
    adds(&c, &node.base, &id);
    let waited = t.elapsed();
    assert!(
        waited >= ephem_serve::store::CHECK_TIMEOUT && waited < Duration::from_secs(20),
        "{waited:?}"
    );
}

/// The `wasi:http` handler built from `guests/http-handler.c` (see `guests/build.sh`).
fn http_handler() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/http-handler.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// FNV-1a, 32 bits: the hash the handler reports of a body.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(2166136261u32, |h, &b| (h ^ b as u32).wrapping_mul(16777619))
}

// The expected texts below are what `wasmtime serve -Scli` (wasmtime 49.0.3) answered to the
// same requests with the same component.

#[test]
fn a_wasi_http_component_answers_as_wasmtime_serve_does() {
    let data = tempfile::tempdir().unwrap();
    let server = start_serving(config(data.path()), Serving::Component(http_handler()));
    let c = client();
    let base = &server.base;

    let r = c
        .post(format!("{base}/a/b?c=d"))
        .header("x-foo", "bar")
        .header("X-Up", "Case")
        .header("connection", "keep-alive")
        .body("hello body")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.headers()["x-handled-by"], "c");
    assert_eq!(
        r.text().unwrap(),
        "method POST\npath /a/b?c=d\nscheme 0\nheader x-foo: bar\nheader x-up: Case\n\
         forbidden seen 0\ntrailers none\nbody 10 776466081\n"
    );

    let r = c.patch(format!("{base}/fields")).send().unwrap();
    assert_eq!(
        r.text().unwrap(),
        "from-list bad name: err 0\nfrom-list connection: err 1\nappend: 11\nget x-b: 1 2\n\
         set: 1 has: 1\nentries: x-upper=V x-b=3\ndelete: 1 has: 0\nappend host: err 1\n\
         append crlf: err 0\nrequest headers append: err 2\nclone append: 1 has: 1\n"
    );

    let method = reqwest::Method::from_bytes(b"FOO").unwrap();
    let r = c
        .request(method, format!("{base}/status/418"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 418);
    assert_eq!(
        r.text().unwrap(),
        "method OTHER FOO\npath /status/418\nscheme 0\nforbidden seen 0\ntrailers none\n\
         body 0 2166136261\n"
    );

    // A larger body, read by the guest in several reads.
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 1000) as u8).collect();
    let r = c
        .put(format!("{base}/up"))
        .body(body.clone())
        .send()
        .unwrap();
    let text = r.text().unwrap();
    let expected = format!("body {} {}\n", body.len(), fnv1a(&body));
    assert!(text.ends_with(&expected), "{text}");

    // A streamed body: 300 chunks written after the response was set.
    let r = c.get(format!("{base}/stream/300")).send().unwrap();
    let bytes = r.bytes().unwrap();
    let head = "method GET\npath /stream/300\nscheme 0\nforbidden seen 0\ntrailers none\nbody 0 2166136261\n";
    assert_eq!(&bytes[..head.len()], head.as_bytes());
    let chunks = &bytes[head.len()..];
    assert_eq!(chunks.len(), 300 * 4096);
    for (i, chunk) in chunks.chunks(4096).enumerate() {
        assert!(
            chunk.iter().all(|&b| b == b'a' + (i % 26) as u8),
            "chunk {i}"
        );
    }

    // Failures before a response: 500, as wasmtime answers, with the reason.
    for (path, error) in [
        ("none", "no_response"),
        ("error", "handler_error"),
        ("trap", "trap"),
    ] {
        let r = c.get(format!("{base}/{path}")).send().unwrap();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        let v: Value = r.json().unwrap();
        assert_eq!(v["error"], error, "{path}: {v}");
    }
    let r = c.get(format!("{base}/error")).send().unwrap();
    assert!(
        r.text()
            .unwrap()
            .contains("internal-error(some(\\\"boom\\\"))")
    );
}

#[test]
fn a_wasi_http_response_streams_waits_for_its_client_and_is_cut_short_when_the_guest_fails() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.workers = 1;
    cfg.queue = Some(0);
    let server = start_serving(cfg, Serving::Component(http_handler()));
    let c = client();
    let base = &server.base;

    // One client asking again as soon as it has its answer never finds the one place taken:
    // the place is given back before the response's end reaches the client, with a length
    // (the client knows the end at its last byte) and without.
    for i in 0..300 {
        let path = ["length", "status/201"][i % 2];
        let r = c.get(format!("{base}/{path}")).send().unwrap();
        assert!(r.status().is_success(), "request {i}: {}", r.status());
        if path == "length" {
            assert!(r.headers().contains_key("content-length"));
        }
        r.bytes().unwrap();
    }

    // Bytes written before the response is set wait for it, and come first.
    let r = c.get(format!("{base}/early")).send().unwrap();
    let text = r.text().unwrap();
    assert!(
        text.starts_with("early chunk\nearly chunk\nearly chunk\nmethod GET\npath /early\n"),
        "{text}"
    );

    // A guest failing after its head was sent: the client sees the body fail, not end.
    let r = c.get(format!("{base}/trap-after")).send();
    assert!(
        r.and_then(|r| r.bytes()).is_err(),
        "a response cut short must not read as whole"
    );

    // 400 MiB asked for, the client reading a little and going away: the guest, held back by
    // the bounded channel, sees its stream closed and ends; the one worker is free again.
    let mut r = served(&c, &format!("{base}/stream/100000"));
    let mut first = [0; 4096];
    std::io::Read::read_exact(&mut r, &mut first).unwrap();
    drop(r);
    served(&c, &format!("{base}/"));
}

/// The answer to `GET url` from a server with one worker and no queue, asked again while that
/// worker is busy (`503`) for at most 20 s.
fn served(c: &Client, url: &str) -> reqwest::blocking::Response {
    let t = Instant::now();
    loop {
        let r = c.get(url).send().unwrap();
        if r.status() == StatusCode::OK {
            return r;
        }
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the worker stayed busy"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_wasi_http_component_is_bounded_by_the_servers_limits_and_refused_if_it_is_no_handler() {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.limits.fuel = 2_000;
    let server = start_serving(cfg, Serving::Component(http_handler()));
    let r = client().get(format!("{}/", server.base)).send().unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let v: Value = r.json().unwrap();
    assert_eq!(v["kind"], "OutOfFuel", "{v}");
    drop(server);

    let mut cfg = config(data.path());
    cfg.limits.max_input = 1000;
    let server = start_serving(cfg, Serving::Component(http_handler()));
    let r = (client().post(format!("{}/", server.base)))
        .body(vec![0; 5000])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    drop(server);

    // A command is not a handler: refused when the server starts, saying why.
    let command = guest("hello.component.wasm");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let refused = rt.block_on(Server::bind_component(config(data.path()), &command));
    let message = format!("{:#}", refused.err().expect("refused"));
    assert!(message.contains("wasi:http/incoming-handler"), "{message}");
}

/// The component `guests/{name}/build.sh` builds, or `None` (said) where the toolchain it
/// needs, or the `wasi:http` WIT it takes from the cargo registry, is missing (CI).
fn built(name: &str) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("app.wasm");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/guests")
        .join(name)
        .join("build.sh");
    let built = std::process::Command::new(script)
        .arg(&out)
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&built.stderr);
    if !built.status.success() {
        let missing = ["not found", "No such file", "no wasmtime-wasi-http"];
        assert!(missing.iter().any(|m| why.contains(m)), "{why}");
        println!("skipped: {why}");
        return None;
    }
    Some(std::fs::read(&out).unwrap())
}

/// A Python handler built by componentize-py (CPython inside, 18 MB) answers what `wasmtime
/// serve` answered.
#[test]
fn a_componentize_py_handler_answers_as_wasmtime_serve_does() {
    let Some(bytes) = built("python") else { return };
    let data = tempfile::tempdir().unwrap();
    let server = start_serving(config(data.path()), Serving::Component(bytes));
    let c = client();
    let r = (c.post(format!("{}/a/b?c=d", server.base)))
        .header("x-foo", "bar")
        .header("X-Up", "Case")
        .body("hello body")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-handled-by"], "python");
    assert_eq!(
        r.text().unwrap(),
        "POST /a/b?c=d\nx-foo: bar\nx-up: Case\nbody 10 b'hello body'\n"
    );
    let r = c.get(format!("{}/missing", server.base)).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let big = c.get(format!("{}/big", server.base)).send().unwrap();
    let big = big.bytes().unwrap();
    // What wasmtime sent: the echo, then 1 MiB (its MD5 was 0ebc1aefc8e6f62f636966bf717ce4a5).
    let echo = b"GET /big\nbody 0 b''\n";
    assert_eq!(&big[..echo.len()], echo);
    assert_eq!(big.len(), echo.len() + (1 << 20));
    assert!(
        big[echo.len()..]
            .chunks(16)
            .all(|c| c == b"0123456789abcdef")
    );
}

/// A JavaScript handler built by componentize-js (StarlingMonkey inside, 13 MB; the tool given
/// as `$COMPONENTIZE_JS`) answers what `wasmtime serve` answered.
#[test]
fn a_componentize_js_handler_answers_as_wasmtime_serve_does() {
    let Some(bytes) = built("js") else { return };
    let data = tempfile::tempdir().unwrap();
    let server = start_serving(config(data.path()), Serving::Component(bytes));
    let c = client();
    let r = (c.post(format!("{}/a/b?c=d", server.base)))
        .header("x-foo", "bar")
        .body("hello body")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-handled-by"], "js");
    assert_eq!(r.headers()["content-length"], "33");
    assert_eq!(r.text().unwrap(), "POST /a/b?c=d\nx-foo: bar\nbody 10\n");
    let r = c.get(format!("{}/missing", server.base)).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// A `wasi:http` component uploaded as a module is: kept by its hash, served at its own route
/// (`/modules/{id}/http/…`, the component seeing the path past it) in a fresh instance per
/// request, behind the token, until it is deleted; one that is no handler is refused at upload.
#[test]
fn an_uploaded_http_component_is_served_at_its_own_route_until_deleted() {
    let data = tempfile::tempdir().unwrap();
    let token_file = data.path().join("token");
    std::fs::write(&token_file, "s3cret-token-of-some-length\n").unwrap();
    let mut cfg = config(data.path());
    cfg.token_file = Some(token_file);
    let server = start(cfg);
    let base = &server.base;
    let auth = "Bearer s3cret-token-of-some-length";
    let c = client();

    let r = (c.put(format!("{base}/modules")))
        .header("authorization", auth)
        .body(http_handler())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().unwrap();
    assert_eq!(v["kind"], "component");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(id, blake3::hash(&http_handler()).to_hex().to_string());
    assert!(
        v["exports"]
            .to_string()
            .contains("wasi:http/incoming-handler"),
        "{v}"
    );

    let url = format!("{base}/modules/{id}/http/a/b?c=d");
    let r = (c.post(&url))
        .header("authorization", auth)
        .header("x-foo", "bar")
        .body("hello body")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.text().unwrap(),
        "method POST\npath /a/b?c=d\nscheme 0\nheader x-foo: bar\nforbidden seen 0\n\
         trailers none\nbody 10 776466081\n"
    );
    let r = (c.get(format!("{base}/modules/{id}/http")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert!(r.text().unwrap().starts_with("method GET\npath /\n"));
    // The path as the client sent it, not decoded.
    let r = (c.get(format!("{base}/modules/{id}/http/a%3Fb%2F..?x=1")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert!(
        r.text()
            .unwrap()
            .starts_with("method GET\npath /a%3Fb%2F..?x=1\n")
    );
    let r = (c.get(format!("{base}/modules/{id}/http/status/418")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 418);
    // It is no module to invoke: said so.
    let r = (c.post(format!("{base}/modules/{id}/invoke/handle")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(r.json::<Value>().unwrap()["error"], "not_a_module");
    // The token guards it as every module route.
    let r = c.get(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = (c.get(format!("{base}/modules/{id}")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert_eq!(r.json::<Value>().unwrap()["kind"], "component");

    // A command component is no handler: refused at upload, saying why.
    let r = (c.put(format!("{base}/modules")))
        .header("authorization", auth)
        .body(guest("hello.component.wasm"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().unwrap();
    assert!(
        v["message"]
            .to_string()
            .contains("wasi:http/incoming-handler"),
        "{v}"
    );

    // Deleted, it is served no more.
    let r = (c.delete(format!("{base}/modules/{id}")))
        .header("authorization", auth)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = (c.get(&url)).header("authorization", auth).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// An uploaded component is kept with its component artifact beside its wasm, and a server
/// that keeps no component loaded opens it from there on each request, compiling nothing: it
/// answers though its kept wasm was spoilt meanwhile. Without the artifact it is compiled
/// again from the wasm and the artifact written again; deleted, both go.
#[test]
fn an_uploaded_component_is_opened_from_its_artifact_not_compiled_again() {
    // Kept artifacts are asked on every open whether they are still the file (else within a
    // second), so that its removal is seen at once.
    ephem::Bundle::ask_kept_every(std::time::Duration::ZERO);
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.open_modules = 0;
    let modules = cfg.modules_dir();
    let server = start(cfg);
    let (base, c) = (&server.base, client());
    let id = upload_ok(&c, base, http_handler());
    let (wasm, artifact) = (
        modules.join(format!("{id}.wasm")),
        modules.join(format!("{id}.cwasm")),
    );
    assert!(artifact.is_file());
    let answer = || {
        let r = c.get(format!("{base}/modules/{id}/http/x")).send().unwrap();
        (r.status(), r.text().unwrap())
    };
    assert!(answer().1.starts_with("method GET\npath /x\n"));

    // Compiling from this wasm (a component's preamble, then nothing valid) would fail: the
    // answer comes from the artifact.
    std::fs::write(&wasm, b"\0asm\x0d\0\x01\0 spoilt").unwrap();
    let (status, body) = answer();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("method GET\npath /x\n"));

    // Without its artifact it is compiled again from the wasm, and the artifact kept again.
    std::fs::write(&wasm, http_handler()).unwrap();
    std::fs::remove_file(&artifact).unwrap();
    assert!(answer().1.starts_with("method GET\npath /x\n"));
    assert!(artifact.is_file());

    let r = c.delete(format!("{base}/modules/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(!artifact.exists() && !wasm.exists());
}

/// A client that asks for a long streamed body and never reads it holds a worker no longer
/// than a call may run: the component's writes stop at the deadline, and the worker is free.
#[test]
fn a_client_that_never_reads_holds_a_worker_only_until_the_deadline() {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    cfg.workers = 1;
    cfg.queue = Some(0);
    cfg.limits.timeout_ms = 1000;
    let server = start_serving(cfg, Serving::Component(http_handler()));
    let addr = server.base.trim_start_matches("http://");
    let mut stuck = std::net::TcpStream::connect(addr).unwrap();
    write!(stuck, "GET /stream/100000 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Wait for its call to take the one worker.
    let c = client();
    let t = Instant::now();
    loop {
        let r = c.get(format!("{}/", server.base)).send().unwrap();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the stuck call never started"
        );
    }
    served(&c, &format!("{}/", server.base));
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "freed at the deadline, not later"
    );
    drop(stuck);
}
