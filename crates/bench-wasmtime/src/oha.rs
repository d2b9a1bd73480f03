//! Load from `oha`, a real HTTP load generator (`cargo install oha`), read from its JSON.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

/// How to run `oha`.
pub struct Oha<'a> {
    pub binary: &'a Path,
    /// CPUs to run it on (`taskset -c` list), away from the server's.
    pub cpus: Option<&'a str>,
    /// Seconds of load per run.
    pub seconds: u64,
}

/// What one `oha` run measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct Load {
    /// Answers per second, of every status.
    pub rps: f64,
    /// Of the `2xx` answers.
    pub ok_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Share of answers that were not `2xx`.
    pub refused: f64,
}

/// A command running `program`, on the CPUs `cpus` lists (`taskset -c`) if given.
pub fn pinned(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

impl Oha<'_> {
    /// Loads `url` (a `POST` of JSON `body` if given, else a `GET`) with `connections`
    /// connections, at most `rate` requests per second. An error if none succeeded.
    pub fn load(
        &self,
        url: &str,
        body: Option<&str>,
        connections: usize,
        rate: Option<f64>,
    ) -> anyhow::Result<Load> {
        let mut cmd = pinned(self.binary, self.cpus);
        cmd.args([
            "--no-tui",
            "--output-format",
            "json",
            "--stats-success-breakdown",
        ]);
        if let Some(body) = body {
            cmd.args(["-m", "POST", "-d", body, "-T", "application/json"]);
        }
        cmd.args(["-z", &format!("{}s", self.seconds)])
            .args(["-c", &connections.to_string()]);
        if let Some(q) = rate {
            cmd.args(["-q", &format!("{q:.0}")]);
        }
        let out = cmd
            .arg(url)
            .output()
            .with_context(|| format!("running {}", self.binary.display()))?;
        if !out.status.success() {
            bail!("oha: {}", String::from_utf8_lossy(&out.stderr));
        }

        let v: Value = serde_json::from_slice(&out.stdout).context("reading oha's JSON")?;
        let statuses = v["statusCodeDistribution"].as_object().cloned();
        let count = |ok: bool| -> f64 {
            (statuses.iter().flatten())
                .filter(|(code, _)| code.starts_with('2') == ok)
                .map(|(_, n)| n.as_f64().unwrap_or(0.0))
                .fold(0.0, |a, b| a + b)
        };
        let (ok, not_ok) = (count(true), count(false));
        if ok == 0.0 {
            bail!(
                "no request to {url} succeeded: {}",
                v["statusCodeDistribution"]
            );
        }
        let total_s = v["summary"]["total"].as_f64().unwrap_or(1.0);
        let ms = |p: &str| {
            v["latencyPercentilesSuccessful"][p]
                .as_f64()
                .unwrap_or(f64::NAN)
                * 1e3
        };
        Ok(Load {
            rps: (ok + not_ok) / total_s,
            ok_rps: ok / total_s,
            p50_ms: ms("p50"),
            p99_ms: ms("p99"),
            refused: not_ok / (ok + not_ok),
        })
    }
}
