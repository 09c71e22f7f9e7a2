//! Inference's latency chart: per model, each row's one-sample query latency at p50, p90, p99
//! and its slowest query (its first run's series), one line per backend, on a log axis.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::infer::InferRecord;
use kiln_contract::{ModelKind, Status};

/// The chart's x axis: evenly spaced positions, and what each one is.
const POINTS: [(f64, &str); 4] = [(0.0, "p50"), (1.0, "p90"), (2.0, "p99"), (3.0, "max")];

/// `model`'s latency chart as SVG, or `None` when no row has a one-sample series.
pub fn latency_chart(records: &[InferRecord], model: ModelKind) -> Result<Option<String>> {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.model == model && r.status == Status::Ok)
    {
        let Some(l) = r.latency_at(1) else { continue };
        if lines.iter().any(|(label, _)| *label == r.label()) {
            continue;
        }
        let values = [l.p50_seconds, l.p90_seconds, l.p99_seconds, l.max_seconds];
        let points = POINTS
            .iter()
            .zip(values)
            .map(|((p, _), s)| (*p, s * 1e3))
            .collect();
        lines.push((r.label(), points));
    }
    if lines.is_empty() {
        return Ok(None);
    }
    draw(model, &lines)
        .map(Some)
        .map_err(|e| anyhow!("drawing the {model} latency chart: {e}"))
}

fn draw(
    model: ModelKind,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<String, Box<dyn std::error::Error>> {
    let ms = || lines.iter().flat_map(|(_, p)| p.iter().map(|p| p.1));
    let (lo, hi) = (
        ms().fold(f64::INFINITY, f64::min),
        ms().fold(0f64, f64::max),
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{model}: one-sample query latency (log scale)"),
                ("sans-serif", 18),
            )
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.3..3.3, ((lo / 1.5)..(hi * 1.5)).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("percentile of the queries (max: the slowest)")
            .y_desc("milliseconds")
            .x_labels(POINTS.len())
            .x_label_formatter(&|v: &f64| {
                POINTS
                    .iter()
                    .find(|(p, _)| (*p - *v).abs() < 0.05)
                    .map_or(String::new(), |(_, l)| l.to_string())
            })
            .y_label_formatter(&|v| format!("{v:.3}"))
            .draw()?;
        super::curves::labelled_lines(&mut chart, lines, SeriesLabelPosition::UpperLeft)?;
        root.present()?;
    }
    Ok(svg)
}
