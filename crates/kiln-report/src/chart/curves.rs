//! Line charts: test accuracy against training time, images/s against batch size.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::table::{row_title, several_batch_sizes};
use kiln_contract::{Record, Status};

use super::palette::*;

/// Per model, test accuracy against training seconds (the epochs' own times, warm-up
/// included, evaluation excluded, unscaled), one line per row (a repeated cell's first run),
/// with the `--target-accuracy` as a dashed line: `(model, svg)`.
pub fn accuracy_curves(records: &[Record]) -> Result<Vec<(String, String)>> {
    let several = crate::table::machines(records).len() > 1;
    let mut out = Vec::new();
    for (model, group) in crate::table::by_model(records) {
        let model = model.as_str();
        let batches = several_batch_sizes(&group);
        let lines: Vec<(String, Vec<(f64, f64)>)> = group
            .into_iter()
            .filter(|r| r.status == Status::Ok && r.loop_overhead.is_none())
            .filter(|r| r.repeat.as_ref().is_none_or(|p| p.index == 1))
            .map(|r| {
                let mut t = 0.0;
                let points = r
                    .epochs
                    .iter()
                    .filter_map(|e| {
                        t += e.seconds;
                        e.test_accuracy.map(|a| (t, a * 100.0))
                    })
                    .collect();
                (row_title(r, several, batches), points)
            })
            .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
            .collect();
        if lines.is_empty() {
            continue;
        }
        let target = records
            .iter()
            .find_map(|r| r.time_to_accuracy.as_ref().map(|t| t.target * 100.0));
        let svg = draw_curves(model, &lines, target)
            .map_err(|e| anyhow!("drawing the {model} accuracy curves: {e}"))?;
        out.push((model.to_string(), svg));
    }
    Ok(out)
}

fn draw_curves(
    model: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    target: Option<f64>,
) -> Result<String, Box<dyn std::error::Error>> {
    let points = || lines.iter().flat_map(|(_, p)| p.iter());
    let t_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let t_max = points().map(|p| p.0).fold(0f64, f64::max);
    let a_min = points()
        .map(|p| p.1)
        .chain(target)
        .fold(f64::INFINITY, f64::min);
    let a_max = points().map(|p| p.1).chain(target).fold(0f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{model}: test accuracy against training time (log scale)"),
                ("sans-serif", 18),
            )
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(
                ((t_min / 1.5)..(t_max * 1.5)).log_scale(),
                (a_min - 2.0).max(0.0)..(a_max + 2.0).min(100.0),
            )?;
        chart
            .configure_mesh()
            .x_desc("training seconds (warm-up included, evaluation excluded)")
            .y_desc("test accuracy (%)")
            .x_labels(8)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        if let Some(target) = target {
            chart.draw_series(DashedLineSeries::new(
                vec![(t_min / 1.5, target), (t_max * 1.5, target)],
                6,
                4,
                BLACK.stroke_width(1),
            ))?;
        }
        labelled_lines(&mut chart, lines, SeriesLabelPosition::LowerRight)?;
        root.present()?;
    }
    Ok(svg)
}

/// `lines` on `chart`, one palette colour each with its points marked, and their legend at
/// `position`: the accuracy curves' and inference's latency chart's one way of drawing series.
pub(super) fn labelled_lines<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    lines: &[(String, Vec<(f64, f64)>)],
    position: SeriesLabelPosition,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Per model run at several batch sizes, images/s against batch size (batch on a log axis,
/// images/s from zero), one line per backend/device/precision, a batch that ran out of memory
/// as a red cross on the axis: `(model, svg)`.
pub fn batch_charts(records: &[Record]) -> Result<Vec<(String, String)>> {
    crate::batch::batch_curves(records)
        .into_iter()
        .map(|(model, curves)| {
            let svg = draw_batch(&model, &curves)
                .map_err(|e| anyhow!("drawing the {model} batch-size chart: {e}"))?;
            Ok((model, svg))
        })
        .collect()
}

fn draw_batch(
    model: &str,
    curves: &[crate::batch::BatchCurve],
) -> Result<String, Box<dyn std::error::Error>> {
    let sizes = crate::batch::sizes(curves);
    // Batch sizes sit at log2(batch): doublings are equally spaced.
    let x = |batch: usize| (batch.max(1) as f64).log2();
    let (x_lo, x_hi) = (
        sizes.first().map_or(0.0, |&b| x(b)) - 0.4,
        sizes.last().map_or(1.0, |&b| x(b)) + 0.4,
    );
    let top = curves
        .iter()
        .flat_map(|c| c.points.iter().filter_map(|p| p.images_per_second))
        .fold(0f64, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{model}: training images/s against batch size"),
                ("sans-serif", 18),
            )
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x_lo..x_hi, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("batch size (samples per optimizer step; log scale)")
            .y_desc("training images/s (median)")
            // The batch sizes are written under their points instead of ticks.
            .x_labels(0)
            .y_labels(8)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        chart.draw_series(sizes.iter().map(|&b| {
            Text::new(
                format!("batch {b}"),
                (x(b) - 0.08, top * 0.035),
                ("sans-serif", 12).into_font().color(&BLACK),
            )
        }))?;
        for (i, curve) in curves.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let points: Vec<(f64, f64)> = curve
                .points
                .iter()
                .filter_map(|p| p.images_per_second.map(|i| (x(p.batch), i)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(curve.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            chart.draw_series(points.iter().map(|&(px, py)| {
                Text::new(
                    format!("{py:.0}"),
                    (px + 0.04, py + top * 0.02),
                    ("sans-serif", 11).into_font().color(&color),
                )
            }))?;
        }
        let oom: Vec<(f64, f64)> = curves
            .iter()
            .flat_map(|c| c.points.iter())
            .filter(|p| p.status == Status::OutOfMemory)
            .map(|p| (x(p.batch), top * 0.09))
            .collect();
        if !oom.is_empty() {
            chart
                .draw_series(
                    oom.iter()
                        .map(|&p| Cross::new(p, 7, OOM_COLOR.stroke_width(3))),
                )?
                .label("out of memory at this batch")
                .legend(|(x, y)| Cross::new((x + 9, y), 5, OOM_COLOR.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}
