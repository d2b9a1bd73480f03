//! `ephem bench fresh`: the real workload (see `ephem::fresh`), per module, by part.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use ephem::fresh::{self, Sample};
use ephem::{Engine, EngineConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Modules (.wasm or .wat).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Call this export (with zero arguments) in every invocation; default: only instantiate
    /// (which runs the start function).
    #[arg(long)]
    invoke: Option<String>,
    /// Invocations per module (modules are picked at random, so each gets about this many).
    #[arg(long, default_value_t = 2000)]
    invocations: usize,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cache: crate::cache::CacheArgs,
    /// Map texts of at least this many bytes from the artifact instead of copying them
    /// (default: the engine's).
    #[arg(long, value_parser = crate::bench_load::parse_size)]
    map_text_at: Option<usize>,
    /// Map memory images of at least this many bytes instead of copying them.
    #[arg(long, value_parser = crate::bench_load::parse_size)]
    map_image_at: Option<usize>,
    /// Do not let idle memory slots keep their images mapped for the same module: what a
    /// workload whose modules never repeat pays.
    #[arg(long)]
    no_image_reuse: bool,
    /// Bytes of each memory slot zeroed in place (kept resident) on reset.
    #[arg(long, value_parser = crate::bench_load::parse_size)]
    keep_resident: Option<usize>,
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_nanos() as f64 / 1000.0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.invocations == 0 {
        bail!("--invocations must be at least 1");
    }
    let mut config = EngineConfig {
        map_text_at: args.map_text_at,
        ..EngineConfig::default()
    };
    if let Some(at) = args.map_image_at {
        config.memory.map_image_at = at;
    }
    config.memory.reuse_images = !args.no_image_reuse;
    if let Some(keep) = args.keep_resident {
        config.memory.keep_resident = keep;
    }
    let engine = Engine::with_config(config)?;
    let cache = args.cache.cache()?;
    let r = fresh::measure(
        &engine,
        &cache,
        &args.files,
        args.invoke.as_deref(),
        args.invocations,
    )?;
    if !args.json {
        println!(
            "{:<16} {:>9} {:>9} {:>9} | medians (µs): {}",
            "module",
            "text KiB",
            "median µs",
            "p90 µs",
            Sample::default()
                .parts()
                .map(|(name, _)| format!("{name:>11}"))
                .join(" ")
        );
    }
    for (subject, samples) in r.subjects.iter().zip(&r.samples) {
        let (median, p90) =
            fresh::median_p90(&mut samples.iter().map(Sample::total).collect::<Vec<_>>());
        let parts: Vec<(&str, Duration, Duration)> = (0..7)
            .map(|k| {
                let mut v: Vec<Duration> = samples.iter().map(|s| s.parts()[k].1).collect();
                let (m, p) = fresh::median_p90(&mut v);
                (Sample::default().parts()[k].0, m, p)
            })
            .collect();
        if args.json {
            let parts_json: serde_json::Map<String, serde_json::Value> = parts
                .iter()
                .map(|(name, m, p)| {
                    (
                        name.to_string(),
                        serde_json::json!({"median_ns": m.as_nanos() as u64, "p90_ns": p.as_nanos() as u64}),
                    )
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "runtime": "ephem",
                    "module": subject.name,
                    "median_ns": median.as_nanos() as u64,
                    "p90_ns": p90.as_nanos() as u64,
                    "invocations": samples.len(),
                    "text_bytes": subject.text_bytes,
                    "artifact_bytes": subject.artifact_bytes,
                    "parts": parts_json,
                })
            );
        } else {
            println!(
                "{:<16} {:>9} {:>9} {:>9} |               {}",
                subject.name,
                subject.text_bytes / 1024,
                us(median),
                us(p90),
                parts
                    .iter()
                    .map(|(_, m, _)| format!("{:>11}", us(*m)))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    Ok(())
}
