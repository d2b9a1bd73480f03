//! `serve-vs-wasmtime`: `ephem serve` under load from a real HTTP load generator (`oha`),
//! beside the same HTTP stack with wasmtime behind it and with no wasm at all, in one run.
//!
//! One process serves every target on one axum router, one worker pool (the server's gate,
//! lent by `Server::workers`, so each target waits and is refused alike) and one port:
//! - `POST /modules/{id}/invoke/{export}`: ephem-serve's own route, unchanged: the module's
//!   artifact opened from the artifact store, a fresh store and instance, fuel and a deadline.
//! - `POST /wasmtime/{n}`: the same call on wasmtime (pooling allocator, a fresh store per
//!   request, fuel and an epoch deadline), the module deserialized from its precompiled file
//!   on every request, as ephem opens its artifact on every request.
//! - `POST /wasmtime-loaded/{n}`: wasmtime with the module kept in memory: its best case, which
//!   a server with more modules than memory does not have.
//! - `POST /noop`: the body parsed as JSON, a worker taken and given back, a JSON answer:
//!   everything a call costs but the wasm.
//!
//! Each target is loaded in turn for `--seconds` by `oha` with `--connections` connections
//! (a closed loop; at most workers + queue requests are in the server, so none is refused).
//! Then the overload check, on ephem with the small module and with a busy one (a call of a
//! few hundred microseconds, so that wasm rather than HTTP takes the CPU): p99 of one connection alone
//! (unloaded), then `oha -q` at twice the measured throughput with many connections: the
//! accepted requests' p99 (oha's success breakdown) beside the unloaded one, and the share
//! answered `503`. `oha` runs on the same machine as the server, for every target alike; with
//! `--oha-cpus` on CPUs of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use ephem_bench_wasmtime::oha::{Load, Oha};
use ephem_bench_wasmtime::wt;
use ephem_serve::http::{ApiError, Workers};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "ephem serve under HTTP load, beside wasmtime and a handler without wasm")]
struct Args {
    /// Modules to load the server with besides the small built-in one, as `FILE[:EXPORT]`:
    /// the export is called with zeros for its parameters; without one, the export `ephem
    /// bench fresh` calls (`_start`, else the first without parameters).
    modules: Vec<String>,
    /// The `oha` binary (`cargo install oha`).
    #[arg(long, default_value = "oha")]
    oha: PathBuf,
    /// CPUs to run `oha` on (`taskset -c` list), so that it does not take the server's: run
    /// this command itself under `taskset -c` with the others.
    #[arg(long, value_name = "LIST")]
    oha_cpus: Option<String>,
    /// Seconds of load per target.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Calls running at once (default: the CPUs).
    #[arg(long)]
    workers: Option<usize>,
    /// Calls waiting for a worker before `503` (default: half the workers, at least one).
    #[arg(long)]
    queue: Option<usize>,
    /// Connections of the throughput runs (default: workers + queue).
    #[arg(long)]
    connections: Option<usize>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// The small module: one addition.
const SMALL: &str = r#"(module (func (export "add") (param i32 i32) (result i32)
  (i32.add (local.get 0) (local.get 1))))"#;

/// A call that works for a while (a few hundred microseconds): the overload check on a server
/// whose CPU goes to wasm rather than to HTTP.
const BUSY: &str = r#"(module (func (export "spin") (result i32) (local i32)
  (loop (br_if 0 (i32.ne (local.tee 0 (i32.add (local.get 0) (i32.const 1)))
                         (i32.const 300000))))
  (local.get 0)))"#;

/// A module on the wasmtime routes.
struct WtModule {
    name: String,
    export: Option<String>,
    path: PathBuf,
    loaded: wasmtime::Module,
    host: (wasmtime::Linker<wt::Data>, bool),
}

struct Wasmtime {
    engine: wasmtime::Engine,
    bounds: wt::Bounds,
    modules: Vec<WtModule>,
    _ticker: wt::EpochTicker,
}

#[derive(Clone)]
struct Baselines {
    workers: Workers,
    wasmtime: Arc<Wasmtime>,
}

fn bad_body(e: serde_json::Error) -> ApiError {
    ApiError::new(axum::http::StatusCode::BAD_REQUEST, "bad_request", e)
}

async fn noop(State(b): State<Baselines>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let args: Vec<Value> = serde_json::from_slice(&body).map_err(bad_body)?;
    let n = b.workers.run(move || args.len()).await?;
    Ok(Json(json!({"results": [n], "fuel_used": 0, "time_us": 0})))
}

async fn wasmtime_call(
    b: Baselines,
    n: usize,
    body: Bytes,
    loaded: bool,
) -> Result<Json<Value>, ApiError> {
    // Parsed as ephem's route parses them, for the same work; the call passes zeros.
    let _args: Vec<Value> = serde_json::from_slice(&body).map_err(bad_body)?;
    let w = b.wasmtime.clone();
    let sample = b
        .workers
        .run(move || {
            let m = w.modules.get(n).context("no such module")?;
            let export = m.export.as_deref();
            let bounds = Some(w.bounds);
            match loaded {
                true => wt::invoke(&w.engine, &m.loaded, &m.host, &m.name, export, bounds),
                false => wt::invoke_file(&w.engine, &m.path, &m.host, &m.name, export, bounds),
            }
        })
        .await?
        .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?;
    Ok(Json(json!({
        "results": [],
        "time_us": sample.total().as_micros() as u64,
    })))
}

async fn wasmtime_file(
    State(b): State<Baselines>,
    UrlPath(n): UrlPath<usize>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    wasmtime_call(b, n, body, false).await
}

async fn wasmtime_loaded(
    State(b): State<Baselines>,
    UrlPath(n): UrlPath<usize>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    wasmtime_call(b, n, body, true).await
}

/// Loads `url` with `oha` as `args` say (see [`ephem_bench_wasmtime::oha`]).
fn oha(
    args: &Args,
    url: &str,
    body: &str,
    connections: usize,
    rate: Option<f64>,
) -> anyhow::Result<Load> {
    let oha = Oha {
        binary: &args.oha,
        cpus: args.oha_cpus.as_deref(),
        seconds: args.seconds,
    };
    oha.load(url, Some(body), connections, rate)
}

/// A target of the throughput runs.
struct Target {
    module: String,
    server: &'static str,
    url: String,
    body: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = args.workers.unwrap_or(cpus);
    let queue = args.queue.unwrap_or((workers / 2).max(1));
    let connections = args.connections.unwrap_or(workers + queue);
    let data = tempfile::tempdir()?;
    let config = ephem_serve::Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: data.path().to_owned(),
        workers,
        queue: Some(queue),
        trap_unknown_imports: true,
        ..ephem_serve::Config::default()
    };
    let limits = config.limits;

    // Every module: its bytes, the export called, and its precompiled file for wasmtime.
    let mut modules = vec![
        (
            "small".to_owned(),
            wat::parse_str(SMALL)?,
            Some("add".into()),
        ),
        (
            "busy".to_owned(),
            wat::parse_str(BUSY)?,
            Some("spin".into()),
        ),
    ];
    for m in &args.modules {
        let (file, export) = match m.rsplit_once(':') {
            Some((file, export)) if !Path::new(m).exists() => (file, Some(export.to_owned())),
            _ => (m.as_str(), None),
        };
        let name = Path::new(file)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        let wasm = std::fs::read(file).with_context(|| format!("reading {file}"))?;
        modules.push((name.into_owned(), wasm, export));
    }
    let engine = wt::engine(true)?;
    let probe = ephem::Engine::default();
    let compiler = ephem::Compiler::new()?;
    // Per module: the export called and its arguments (zeros), as JSON.
    let (mut wt_modules, mut calls) = (Vec::new(), Vec::new());
    for (i, (name, wasm, export)) in modules.iter().enumerate() {
        let ours = ephem::Module::from_compiled(&probe, &compiler.compile(wasm)?)?;
        let export = match export {
            Some(e) => e.clone(),
            None => ephem_bench::fresh::default_export(&ours).with_context(|| {
                format!("{name}: no export without parameters; name one as FILE:EXPORT")
            })?,
        };
        let params = match ours.exports().find(|e| e.name == export).map(|e| e.ty) {
            Some(ephem::ExternType::Func(t)) => t.params.len(),
            _ => bail!("{name} exports no function `{export}`"),
        };
        let path = data.path().join(format!("{i}.cwasm"));
        std::fs::write(&path, engine.precompile_module(wasm)?)?;
        let loaded = wt::deserialize(&engine, &path)?;
        let host = wt::host(&engine, &loaded)?;
        calls.push((export.clone(), json!(vec![0; params]).to_string()));
        wt_modules.push(WtModule {
            name: name.clone(),
            export: Some(export),
            path,
            loaded,
            host,
        });
    }
    let wasmtime = Arc::new(Wasmtime {
        _ticker: wt::EpochTicker::start(&engine, ephem_serve::exec::TICK),
        engine,
        bounds: wt::Bounds {
            fuel: limits.fuel,
            ticks: limits
                .timeout_ms
                .div_ceil(ephem_serve::exec::TICK.as_millis() as u64)
                + 1,
        },
        modules: wt_modules,
    });

    // The server, on its own runtime.
    let rt = tokio::runtime::Runtime::new()?;
    let (addr, _server) = rt.block_on(async {
        let server = ephem_serve::Server::bind(config).await?;
        let baselines = Baselines {
            workers: server.workers(),
            wasmtime,
        };
        let router = server.router().merge(
            Router::new()
                .route("/noop", post(noop))
                .route("/wasmtime/{n}", post(wasmtime_file))
                .route("/wasmtime-loaded/{n}", post(wasmtime_loaded))
                .with_state(baselines),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move { axum::serve(listener, router).await });
        anyhow::Ok((addr, task))
    })?;
    let base = format!("http://{addr}");

    // Uploads, and the targets.
    let client = reqwest::blocking::Client::new();
    let mut targets = vec![Target {
        module: "-".into(),
        server: "no wasm",
        url: format!("{base}/noop"),
        body: "[2,3]".into(),
    }];
    for (i, (name, wasm, _)) in modules.iter().enumerate() {
        let r = client
            .put(format!("{base}/modules"))
            .body(wasm.clone())
            .send()?;
        let status = r.status();
        let v: Value = r.json()?;
        if !status.is_success() {
            bail!("uploading {name}: {status} {v}");
        }
        let (export, body) = &calls[i];
        let id = v["id"].as_str().context("no id")?;
        for (server, url) in [
            ("ephem", format!("{base}/modules/{id}/invoke/{export}")),
            ("wasmtime", format!("{base}/wasmtime/{i}")),
            (
                "wasmtime, kept loaded",
                format!("{base}/wasmtime-loaded/{i}"),
            ),
        ] {
            targets.push(Target {
                module: format!("{name}:{export}"),
                server,
                url,
                body: body.clone(),
            });
        }
    }

    if !args.json {
        println!(
            "{workers} workers, queue {queue}; {connections} connections, {}s per target",
            args.seconds
        );
        println!(
            "{:<28} {:<22} {:>9} {:>9} {:>9} {:>8}",
            "module:export", "server", "req/s", "p50 ms", "p99 ms", "refused"
        );
    }
    let mut loads = Vec::new();
    for t in &targets {
        let l = oha(&args, &t.url, &t.body, connections, None)?;
        if args.json {
            println!(
                "{}",
                json!({"module": t.module, "server": t.server, "requests_per_s": l.rps,
                    "p50_ms": l.p50_ms, "p99_ms": l.p99_ms, "refused": l.refused})
            );
        } else {
            println!(
                "{:<28} {:<22} {:>9.0} {:>9.3} {:>9.3} {:>7.1}%",
                t.module,
                t.server,
                l.rps,
                l.p50_ms,
                l.p99_ms,
                l.refused * 100.0
            );
        }
        loads.push(l);
    }

    // Ratios: ephem beside the handler without wasm (small module) and beside wasmtime.
    let rps = |module: &str, server: &str| {
        (targets.iter().zip(&loads))
            .find(|(t, _)| t.module == module && t.server == server)
            .map_or(f64::NAN, |(_, l)| l.ok_rps)
    };
    let noop_rps = loads[0].ok_rps;
    for m in targets.iter().skip(1).step_by(3) {
        let ours = rps(&m.module, "ephem");
        let ratios = json!({
            "module": m.module,
            "ephem_over_no_wasm": ours / noop_rps,
            "ephem_over_wasmtime": ours / rps(&m.module, "wasmtime"),
            "ephem_over_wasmtime_loaded": ours / rps(&m.module, "wasmtime, kept loaded"),
        });
        if args.json {
            println!("{ratios}");
        } else {
            println!(
                "{:<28} ephem's throughput: {:.2}× no wasm, {:.2}× wasmtime, {:.2}× wasmtime kept loaded",
                m.module,
                ratios["ephem_over_no_wasm"].as_f64().unwrap_or(f64::NAN),
                ratios["ephem_over_wasmtime"].as_f64().unwrap_or(f64::NAN),
                ratios["ephem_over_wasmtime_loaded"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
            );
        }
    }

    // Overload, on ephem: with the small module (HTTP is most of a call's cost) and with the
    // busy one (wasm is).
    for (i, t) in targets.iter().enumerate() {
        if t.server != "ephem" || !(t.module.starts_with("small:") || t.module.starts_with("busy:"))
        {
            continue;
        }
        let unloaded = oha(&args, &t.url, &t.body, 1, None)?;
        let capacity = loads[i].ok_rps;
        let offered = 2.0 * capacity;
        let overload = oha(
            &args,
            &t.url,
            &t.body,
            4 * (workers + queue).max(16),
            Some(offered),
        )?;
        let report = json!({
            "overload": t.module, "unloaded_p99_ms": unloaded.p99_ms,
            "capacity_per_s": capacity, "offered_per_s": offered,
            "answered_per_s": overload.rps, "accepted_per_s": overload.ok_rps,
            "accepted_p99_ms": overload.p99_ms, "refused": overload.refused,
            "p99_over_unloaded": overload.p99_ms / unloaded.p99_ms,
        });
        if args.json {
            println!("{report}");
        } else {
            println!(
                "overload ({}): unloaded p99 {:.3} ms; offered {:.0}/s (2× capacity {:.0}/s): \
                 {:.0}/s accepted with p99 {:.3} ms ({:.2}× unloaded), {:.1}% refused with 503",
                t.module,
                unloaded.p99_ms,
                offered,
                capacity,
                overload.ok_rps,
                overload.p99_ms,
                overload.p99_ms / unloaded.p99_ms,
                overload.refused * 100.0
            );
        }
    }
    drop(rt);
    Ok(())
}
