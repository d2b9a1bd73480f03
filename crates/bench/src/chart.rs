//! Draws `ephem bench load` results as an SVG chart: one line per strategy, time per load on a
//! log scale, one point per (size, fill, threads) configuration.

use std::path::Path;

use plotters::prelude::*;

use crate::load::Row;

pub fn write_svg(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let mut configs: Vec<(usize, &str, usize)> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        let config = (r.size, r.fill.name(), r.threads);
        if !configs.contains(&config) {
            configs.push(config);
        }
        if !names.contains(&r.target.name()) {
            names.push(r.target.name());
        }
    }
    anyhow::ensure!(!rows.is_empty(), "nothing was measured");
    let labels: Vec<String> = configs
        .iter()
        .map(|(size, fill, t)| format!("{}K {fill} {t}t", size >> 10))
        .collect();
    let lo = rows
        .iter()
        .map(|r| r.ns_per_load)
        .fold(f64::INFINITY, f64::min)
        / 2.0;
    let hi = rows.iter().map(|r| r.ns_per_load).fold(0.0, f64::max) * 2.0;

    let root = SVGBackend::new(path, (1200, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "ephem: time per code load by strategy (lower is better)",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(70)
        .y_label_area_size(90)
        .build_cartesian_2d((0..configs.len()).into_segmented(), (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(configs.len())
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("ns per load (log)")
        .x_desc("module size, write model, threads")
        .draw()?;
    for (k, name) in names.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let points: Vec<_> = rows
            .iter()
            .filter(|r| r.target.name() == *name)
            .filter_map(|r| {
                let i = configs
                    .iter()
                    .position(|c| *c == (r.size, r.fill.name(), r.threads))?;
                Some((SegmentValue::CenterOf(i), r.ns_per_load))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
