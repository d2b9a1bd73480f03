//! `ephem bench load`: the code-memory strategies side by side (the same workload as the
//! criterion benchmark `load`), as a table of ratios, JSON lines, or a chart.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ephem_code_memory::Strategy;
use ephem_code_memory::workload::{Fill, Target, measure};

#[derive(clap::Args)]
pub struct Args {
    /// Module sizes, with an optional k or m suffix (KiB, MiB).
    #[arg(long, value_delimiter = ',', default_value = "4k,64k,1m", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Also measure with this many threads sharing one pool (1 thread is always measured).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Strategies to measure (default: all; `rwx` only with --allow-rwx).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<Strategy>,
    /// Include the `rwx` baseline, which breaks W^X.
    #[arg(long)]
    allow_rwx: bool,
    /// Loads per thread per measurement (default: scaled to the size).
    #[arg(long)]
    loads: Option<u64>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the comparison as an SVG chart to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

pub fn parse_size(s: &str) -> Result<usize, String> {
    let lower = s.to_ascii_lowercase();
    let (digits, unit) = match lower.strip_suffix('k') {
        Some(d) => (d, 1 << 10),
        None => match lower.strip_suffix('m') {
            Some(d) => (d, 1 << 20),
            None => (lower.as_str(), 1),
        },
    };
    let n: usize = digits.parse().map_err(|_| format!("bad size `{s}`"))?;
    match n.checked_mul(unit) {
        Some(0) | None => Err(format!("bad size `{s}`")),
        Some(size) => Ok(size),
    }
}

/// One measured row.
pub struct Row {
    pub target: Target,
    pub size: usize,
    pub fill: Fill,
    pub threads: usize,
    pub ns_per_load: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut strategies = if args.strategies.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        args.strategies.clone()
    };
    if !args.allow_rwx {
        if args.strategies.contains(&Strategy::Rwx) {
            bail!("the `rwx` strategy breaks W^X; pass --allow-rwx to measure it as a baseline");
        }
        strategies.retain(|s| *s != Strategy::Rwx);
    }
    let targets: Vec<Target> = std::iter::once(Target::Memcpy)
        .chain(strategies.into_iter().map(Target::Strategy))
        .collect();
    let mut thread_counts = vec![1];
    if args.threads > 1 {
        thread_counts.push(args.threads);
    }

    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for &threads in &thread_counts {
        for fill in [Fill::Page, Fill::Full] {
            for &size in &args.sizes {
                let loads = args
                    .loads
                    .unwrap_or(((64usize << 20) / size).clamp(200, 20_000) as u64);
                let group_start = rows.len();
                for &target in &targets {
                    match measure(target, size, fill, threads, loads) {
                        Ok(ns_per_load) => rows.push(Row {
                            target,
                            size,
                            fill,
                            threads,
                            ns_per_load,
                        }),
                        Err(e) => {
                            let note = format!("{}: {e}", target.name());
                            if !skipped.contains(&note) {
                                skipped.push(note);
                            }
                        }
                    }
                }
                print_group(&rows[group_start..], args.json);
            }
        }
    }
    for note in &skipped {
        eprintln!("skipped {note}");
    }
    if let Some(path) = &args.svg {
        crate::chart::write_svg(path, &rows)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(())
}

fn ns_of(rows: &[Row], name: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.target.name() == name)
        .map(|r| r.ns_per_load)
}

fn print_group(group: &[Row], json: bool) {
    let Some(first) = group.first() else { return };
    let memcpy = ns_of(group, "memcpy");
    let naive = ns_of(group, "naive");
    // Time relative to memcpy (>= 1: how far from the physical limit) and speed-up over naive.
    let vs_memcpy = |ns: f64| memcpy.map(|m| ns / m);
    let speedup = |ns: f64| naive.map(|n| n / ns);
    if json {
        for r in group {
            let line = serde_json::json!({
                "strategy": r.target.name(),
                "size": r.size,
                "fill": r.fill.name(),
                "threads": r.threads,
                "ns_per_load": (r.ns_per_load * 10.0).round() / 10.0,
                "vs_memcpy": vs_memcpy(r.ns_per_load),
                "speedup_vs_naive": speedup(r.ns_per_load),
            });
            println!("{line}");
        }
        return;
    }
    println!(
        "\n{} KiB, fill {}, {} thread(s)",
        first.size >> 10,
        first.fill.name(),
        first.threads
    );
    println!(
        "{:<14} {:>12} {:>10} {:>10}",
        "strategy", "ns/load", "×memcpy", "naive÷"
    );
    for r in group {
        let fmt = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.2}"));
        println!(
            "{:<14} {:>12.0} {:>10} {:>10}",
            r.target.name(),
            r.ns_per_load,
            fmt(vs_memcpy(r.ns_per_load)),
            fmt(speedup(r.ns_per_load)),
        );
    }
}
