//! SVG bar charts of a report, drawn with plotters: per model, one bar per timed row for the
//! epoch time and one for the speed-up over the baseline, each with its interval as an error
//! bar (between runs where the row combines repeats, else within its one run), on log axes
//! fitted to the data (backends differ by orders of magnitude). A projection from too few
//! chunks is a low-confidence estimate: it gets no bar, only a line under the chart.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use kiln_results::cells::{low_confidence, pick_baseline};
use kiln_results::stats::ratio_with_uncertainty;
use kiln_results::table::{row_title, several_batch_sizes};
use kiln_results::{Record, Status};

/// Fill of the epoch-time bars (tests count bars by it).
pub const TIME_COLOR: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
/// Fill of the speed-up bars.
pub const SPEEDUP_COLOR: RGBColor = RGBColor(0xd9, 0x6c, 0x1e);

/// One bar: its value and the interval drawn around it.
#[derive(Clone, Copy)]
struct Bar {
    value: f64,
    low: f64,
    high: f64,
}

/// A log axis fitted to the bars and their intervals, with room right of the longest bar for
/// its value.
fn bounds(bars: &[Bar]) -> (f64, f64) {
    let min = bars
        .iter()
        .map(|b| b.low.min(b.value))
        .fold(f64::INFINITY, f64::min);
    let max = bars
        .iter()
        .map(|b| b.high.max(b.value))
        .fold(0f64, f64::max);
    (min / 1.5, max * 3.0)
}

/// One SVG document per model that has at least one timed row: `(model, svg)`.
pub fn charts(records: &[Record], baseline: Option<&str>) -> Result<Vec<(String, String)>> {
    let combined = kiln_results::repeats::combine(records);
    let several = kiln_results::table::machines(records).len() > 1;
    let mut out = Vec::new();
    for (model, group) in kiln_results::table::by_model(&combined) {
        let model = model.as_str();
        let timed: Vec<&Record> = group
            .into_iter()
            .filter(|r| r.status == Status::Ok && r.epoch_seconds.is_some())
            .collect();
        let (estimates, rows): (Vec<&Record>, Vec<&Record>) =
            timed.iter().partition(|r| low_confidence(r));
        if rows.is_empty() {
            continue;
        }
        let base = pick_baseline(&rows, baseline);
        let batches = several_batch_sizes(&rows);
        let label = |r: &Record| row_title(r, several, batches);
        let times: Vec<Bar> = rows
            .iter()
            .filter_map(|r| r.epoch_seconds.as_ref())
            .map(|e| Bar {
                value: e.median,
                low: e.min,
                high: e.max,
            })
            .collect();
        let speedups: Vec<Bar> = rows
            .iter()
            .map(|r| {
                match (
                    base.and_then(|b| b.epoch_seconds.as_ref()),
                    &r.epoch_seconds,
                ) {
                    (Some(b), Some(e)) => {
                        let (ratio, err) = ratio_with_uncertainty(b, e);
                        // Only a spread between runs makes an interval for a ratio.
                        let err = if r.between_runs.is_some()
                            && base.is_some_and(|b| b.between_runs.is_some())
                        {
                            err
                        } else {
                            0.0
                        };
                        Bar {
                            value: ratio,
                            low: (ratio - err).max(ratio / 10.0),
                            high: ratio + err,
                        }
                    }
                    _ => Bar {
                        value: 1.0,
                        low: 1.0,
                        high: 1.0,
                    },
                }
            })
            .collect();
        let base_label = base.map(label).unwrap_or_else(|| "baseline".into());
        let labels: Vec<String> = rows.iter().map(|r| label(r)).collect();
        let left_out: Vec<String> = estimates
            .iter()
            .map(|r| {
                format!(
                    "not drawn: {} ≈ {:.0} s, projected from {} chunk(s) (low confidence)",
                    label(r),
                    r.epoch_seconds.as_ref().map_or(0.0, |e| e.median),
                    r.obtained.chunks
                )
            })
            .collect();
        // Time to the target accuracy, when the rows raced to one: a bar, or "not reached".
        let target = rows
            .iter()
            .find_map(|r| r.time_to_accuracy.as_ref().map(|t| t.target));
        let to_target: Option<Vec<Option<Bar>>> = target.map(|_| {
            rows.iter()
                .map(|r| {
                    r.time_to_accuracy
                        .as_ref()
                        .and_then(|t| t.seconds)
                        .map(|s| Bar {
                            value: s,
                            low: s,
                            high: s,
                        })
                })
                .collect()
        });
        let panels = Panels {
            times: &times,
            speedups: &speedups,
            to_target: target.zip(to_target.as_deref()),
        };
        let svg = draw(model, &labels, &panels, &base_label, &left_out)
            .map_err(|e| anyhow!("drawing the {model} chart: {e}"))?;
        out.push((model.to_string(), svg));
    }
    Ok(out)
}

/// Per model, test accuracy against training seconds (the epochs' own times, warm-up
/// included, evaluation excluded, unscaled), one line per row (a repeated cell's first run),
/// with the `--target-accuracy` as a dashed line: `(model, svg)`.
pub fn accuracy_curves(records: &[Record]) -> Result<Vec<(String, String)>> {
    let several = kiln_results::table::machines(records).len() > 1;
    let mut out = Vec::new();
    for (model, group) in kiln_results::table::by_model(records) {
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
        for (i, (label, points)) in lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Per model run at several batch sizes, images/s against batch size (batch on a log axis,
/// images/s from zero), one line per backend/device/precision, a batch that ran out of memory
/// as a red cross on the axis: `(model, svg)`.
pub fn batch_charts(records: &[Record]) -> Result<Vec<(String, String)>> {
    kiln_results::batch::batch_curves(records)
        .into_iter()
        .map(|(model, curves)| {
            let svg = draw_batch(&model, &curves)
                .map_err(|e| anyhow!("drawing the {model} batch-size chart: {e}"))?;
            Ok((model, svg))
        })
        .collect()
}

/// Colour of the out-of-memory crosses.
pub const OOM_COLOR: RGBColor = RGBColor(0xc0, 0x1c, 0x28);

fn draw_batch(
    model: &str,
    curves: &[kiln_results::batch::BatchCurve],
) -> Result<String, Box<dyn std::error::Error>> {
    let sizes = kiln_results::batch::sizes(curves);
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

/// The bar chart's panels: epoch time, speed-up, and time to the target accuracy (with the
/// target) when the rows raced to one (`None` in it: not reached).
struct Panels<'a> {
    times: &'a [Bar],
    speedups: &'a [Bar],
    to_target: Option<(f64, &'a [Option<Bar>])>,
}

/// Fill of the time-to-accuracy bars.
pub const TARGET_COLOR: RGBColor = RGBColor(0x3a, 0x8a, 0x4a);

fn draw(
    model: &str,
    labels: &[String],
    data: &Panels,
    base_label: &str,
    left_out: &[String],
) -> Result<String, Box<dyn std::error::Error>> {
    let n = labels.len();
    let notes = left_out.len() as u32;
    let height = 110 + 34 * n as u32 + 18 * notes;
    let width = if data.to_target.is_some() { 1460 } else { 1100 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!("{model}: epoch time and speed-up per row (log scales, intervals as bars)"),
            ("sans-serif", 18),
        )?;
        let (plots, footer) = root.split_vertically(height - 30 - 18 * notes);
        for (i, note) in left_out.iter().enumerate() {
            footer.draw(&Text::new(
                note.clone(),
                (12, 4 + 18 * i as i32),
                ("sans-serif", 12).into_font().color(&BLACK),
            ))?;
        }
        let (left, rest) = plots.split_horizontally(680);
        let (middle, last) = rest.split_horizontally(420);
        let some = |bars: &[Bar]| -> Vec<Option<Bar>> { bars.iter().copied().map(Some).collect() };
        let mut panels = vec![
            (
                left,
                some(data.times),
                TIME_COLOR,
                "seconds per standard epoch (median, range)".to_string(),
                true,
            ),
            (
                if data.to_target.is_some() {
                    middle
                } else {
                    rest
                },
                some(data.speedups),
                SPEEDUP_COLOR,
                format!("speed-up vs {base_label}"),
                false,
            ),
        ];
        if let Some((target, bars)) = data.to_target {
            panels.push((
                last,
                bars.to_vec(),
                TARGET_COLOR,
                format!("seconds to {:.0}% test accuracy", target * 100.0),
                false,
            ));
        }
        for (area, bars, color, caption, first) in panels {
            let drawn: Vec<Bar> = bars.iter().flatten().copied().collect();
            // Rows with a bar, by position (a row that missed the target has none).
            let present: Vec<(usize, Bar)> = bars
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.map(|b| (i, b)))
                .collect();
            let seconds = color != SPEEDUP_COLOR;
            // A panel whose rows all missed still gets an axis (and its "not reached" words).
            let (lo, hi) = if drawn.is_empty() {
                (1.0, 10.0)
            } else {
                bounds(&drawn)
            };
            let mut chart = ChartBuilder::on(&area)
                .caption(caption, ("sans-serif", 14))
                .margin(12)
                .x_label_area_size(28)
                .y_label_area_size(if first { 250 } else { 10 })
                .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))?;
            let row_of = |y: f64| n.checked_sub(1 + y.round() as usize);
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(n.max(1))
                .y_label_style(("sans-serif", 12))
                .y_label_formatter(&|y| {
                    if first && (y - y.round()).abs() < 1e-6 {
                        row_of(*y)
                            .and_then(|i| labels.get(i))
                            .cloned()
                            .unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .x_labels(6)
                .x_label_formatter(&|v| {
                    if *v >= 10.0 {
                        format!("{v:.0}")
                    } else if *v >= 1.0 {
                        format!("{v:.1}")
                    } else {
                        format!("{v:.3}")
                    }
                })
                .draw()?;
            chart.draw_series(present.iter().map(|&(i, b)| {
                let y = (n - 1 - i) as f64;
                Rectangle::new([(lo, y - 0.3), (b.value, y + 0.3)], color.filled())
            }))?;
            // The interval: a line from low to high with end caps.
            for &(i, b) in present.iter().filter(|(_, b)| b.high > b.low) {
                let y = (n - 1 - i) as f64;
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(b.low, y), (b.high, y)],
                    BLACK.stroke_width(2),
                )))?;
                for x in [b.low, b.high] {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x, y - 0.15), (x, y + 0.15)],
                        BLACK.stroke_width(2),
                    )))?;
                }
            }
            chart.draw_series(present.iter().map(|&(i, b)| {
                let y = (n - 1 - i) as f64;
                let text = if seconds {
                    format!("{:.1} s", b.value)
                } else if b.high > b.value {
                    format!("{:.2}× ± {:.2}", b.value, b.high - b.value)
                } else {
                    format!("{:.2}×", b.value)
                };
                Text::new(
                    text,
                    (b.high.max(b.value) * 1.08, y + 0.12),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )
            }))?;
            // A row that never reached the target says so where its bar would be.
            chart.draw_series(bars.iter().enumerate().filter(|(_, b)| b.is_none()).map(
                |(i, _)| {
                    let y = (n - 1 - i) as f64;
                    Text::new(
                        "not reached",
                        (lo * 1.08, y + 0.12),
                        ("sans-serif", 12).into_font().color(&BLACK),
                    )
                },
            ))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One palette for every chart with several series: accuracy curves (one per row, cycled) and
/// the explain chart's stacked segments (heaviest row first).
const PALETTE: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const OTHER_COLOR: RGBColor = RGBColor(170, 170, 170);
/// Pixels right of the explain chart's share panel for its legend.
const LEGEND_WIDTH: u32 = 230;

/// The stacked-bar chart of one explain table: one bar per backend, one segment per op row
/// (the eight heaviest, then "other ops"), a black tick at each backend's measured step.
pub fn explain_chart(table: &kiln_results::explain::ExplainTable) -> Result<String> {
    draw_explain(table).map_err(|e| anyhow!("drawing the explain chart of {}: {e}", table.model))
}

fn draw_explain(
    table: &kiln_results::explain::ExplainTable,
) -> Result<String, Box<dyn std::error::Error>> {
    let rows = table.rows_by_weight();
    let shown = rows.len().min(PALETTE.len() - 1);
    let n = table.columns.len();
    // Per column, the segments' milliseconds: the heaviest rows, then the rest summed.
    let segments: Vec<Vec<f64>> = (0..n)
        .map(|c| {
            let mut v: Vec<f64> = rows[..shown]
                .iter()
                .map(|r| 1000.0 * r.seconds[c].unwrap_or(0.0))
                .collect();
            v.push(
                rows[shown..]
                    .iter()
                    .map(|r| 1000.0 * r.seconds[c].unwrap_or(0.0))
                    .sum(),
            );
            v
        })
        .collect();
    let totals: Vec<f64> = table.totals.iter().map(|t| 1000.0 * t).collect();
    let top = totals
        .iter()
        .copied()
        .chain(table.steps.iter().flatten().map(|s| 1000.0 * s))
        .fold(1e-3f64, f64::max)
        * 1.12;
    let mut svg = String::new();
    {
        let panel = 140 + 110 * n as u32;
        let root =
            SVGBackend::with_string(&mut svg, (2 * panel + LEGEND_WIDTH, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!(
                "{}: one training step at batch {}, op by op",
                table.model, table.batch
            ),
            ("sans-serif", 16),
        )?;
        let (left, rest) = root.split_horizontally(panel);
        let (right, legend) = rest.split_horizontally(panel);
        // The legend: one key per segment, heaviest first, beside the shares.
        for k in 0..=shown {
            let (color, label) = if k < shown {
                (PALETTE[k], rows[k].label.clone())
            } else if rows.len() > shown {
                (OTHER_COLOR, "other ops".to_string())
            } else {
                continue;
            };
            let y = 60 + 20 * k as i32;
            legend.draw(&Rectangle::new([(4, y), (16, y + 12)], color.filled()))?;
            legend.draw(&Text::new(
                label,
                (22, y),
                ("sans-serif", 12).into_font().color(&BLACK),
            ))?;
        }
        // Left: milliseconds, with the measured step; right: each bar as shares of its sum, so
        // a fast backend's composition stays readable beside a slow one.
        for (area, absolute) in [(left, true), (right, false)] {
            let value = |c: usize, v: f64| {
                if absolute {
                    v
                } else if totals[c] > 0.0 {
                    100.0 * v / totals[c]
                } else {
                    0.0
                }
            };
            let (caption, ceiling, desc) = if absolute {
                (
                    "ms per step (black tick: measured step)",
                    top,
                    "milliseconds per step",
                )
            } else {
                (
                    "share of each backend's sum of ops",
                    100.0,
                    "% of the sum of ops",
                )
            };
            let mut chart = ChartBuilder::on(&area)
                .caption(caption, ("sans-serif", 13))
                .margin(14)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ceiling)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n.max(1))
                .x_label_formatter(&|x| {
                    if (x - x.round()).abs() < 1e-6 && x.round() >= 0.0 {
                        table
                            .columns
                            .get(x.round() as usize)
                            .cloned()
                            .unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .y_label_formatter(&|v| format!("{v:.0}"))
                .y_desc(desc)
                .draw()?;
            for k in 0..=shown {
                if k == shown && rows.len() <= shown {
                    continue;
                }
                let color = if k < shown { PALETTE[k] } else { OTHER_COLOR };
                let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
                    .filter(|&c| segments[c][k] > 0.0)
                    .map(|c| {
                        let below = value(c, segments[c][..k].iter().sum());
                        let x = c as f64;
                        Rectangle::new(
                            [
                                (x - 0.3, below),
                                (x + 0.3, below + value(c, segments[c][k])),
                            ],
                            color.filled(),
                        )
                    })
                    .collect();
                chart.draw_series(bars)?;
            }
            if !absolute {
                continue;
            }
            for (c, step) in table.steps.iter().enumerate() {
                if let Some(step) = step {
                    let (x, y) = (c as f64, 1000.0 * step);
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x - 0.4, y), (x + 0.4, y)],
                        BLACK.stroke_width(3),
                    )))?;
                }
                let explained = table
                    .explained(c)
                    .map_or(String::new(), |e| format!(" ({:.0}%)", 100.0 * e));
                chart.draw_series(std::iter::once(Text::new(
                    format!("{:.0} ms{explained}", totals[c]),
                    (
                        c as f64 - 0.3,
                        totals[c].max(step.map_or(0.0, |s| 1000.0 * s)) + top * 0.02,
                    ),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )))?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_results::{CellId, DataKind, Method, Obtained, Stats};

    fn timed(backend: &str, median: f64) -> Record {
        let cell = CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 128,
        };
        let mut r = Record::not_run(&cell, Status::Ok, "");
        r.epoch_seconds = Stats::from_samples(&[median]);
        r.obtained = Obtained {
            method: Method::Measured,
            epochs: 1,
            steps: 1,
            chunks: 0,
            epoch_samples: 1,
            standard_epoch_samples: 60_000,
            budget_seconds: None,
            budget_exhausted: false,
        };
        r.data = DataKind::Real;
        r
    }

    fn fill_count(svg: &str, color: RGBColor) -> usize {
        let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
        let fill = format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2);
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.attribute("fill")
                    .is_some_and(|f| f.eq_ignore_ascii_case(&fill))
            })
            .count()
    }

    #[test]
    fn one_well_formed_svg_per_model_with_one_bar_per_cell() {
        let mut failed = timed("ndarray", 1.0);
        failed.status = Status::Failed;
        let mut resnet = timed("flex", 90.0);
        resnet.model = "resnet18".into();
        let records = vec![
            timed("flex", 360.0),
            timed("ndarray", 19_800.0),
            failed,
            resnet,
        ];
        let charts = charts(&records, None).unwrap();
        assert_eq!(charts.len(), 2);
        let (model, svg) = &charts[0];
        assert_eq!(model, "mnist-cnn");
        assert_eq!(fill_count(svg, TIME_COLOR), 2, "the failed cell has no bar");
        assert_eq!(fill_count(svg, SPEEDUP_COLOR), 2);
        assert!(svg.contains("flex/cpu/f32"));
        assert_eq!(fill_count(&charts[1].1, TIME_COLOR), 1);
    }

    #[test]
    fn accuracy_curves_have_one_line_per_row_and_the_target() {
        let mut r = timed("flex", 10.0);
        r.epochs = (1..=3)
            .map(|e| kiln_results::EpochSummary {
                epoch: e,
                seconds: 2.0,
                steps: 1,
                samples: 1,
                partial: false,
                mean_loss: 1.0,
                test_accuracy: Some(0.5 + 0.1 * e as f64),
            })
            .collect();
        r.time_to_accuracy = Some(kiln_results::TimeToAccuracy {
            target: 0.75,
            seconds: Some(6.0),
            epoch: Some(3),
            epochs_evaluated: 3,
            best: Some(0.8),
            budget_exhausted: false,
        });
        let curves = accuracy_curves(&[r]).unwrap();
        assert_eq!(curves.len(), 1);
        let svg = &curves[0].1;
        roxmltree::Document::parse(svg).expect("well-formed SVG");
        assert!(
            svg.contains("flex/cpu/f32") && svg.contains("test accuracy"),
            "{svg}"
        );
    }

    #[test]
    fn a_target_accuracy_adds_a_panel_with_a_bar_per_row_that_reached_it() {
        let reached = |backend: &str, seconds: Option<f64>| {
            let mut r = timed(backend, 100.0);
            r.time_to_accuracy = Some(kiln_results::TimeToAccuracy {
                target: 0.8,
                seconds,
                epoch: seconds.map(|_| 2),
                epochs_evaluated: 3,
                best: Some(if seconds.is_some() { 0.82 } else { 0.6 }),
                budget_exhausted: false,
            });
            r
        };
        let records = [
            reached("flex", Some(40.0)),
            reached("tch", Some(30.0)),
            reached("ndarray", None),
        ];
        let svg = &charts(&records, None).unwrap()[0].1;
        assert_eq!(
            fill_count(svg, TARGET_COLOR),
            2,
            "one bar per row that reached it"
        );
        assert!(svg.contains("seconds to 80% test accuracy"), "{svg}");
        assert_eq!(svg.matches("not reached").count(), 1);
        // Without a target, no such panel.
        let svg = &charts(&[timed("flex", 1.0)], None).unwrap()[0].1;
        assert_eq!(fill_count(svg, TARGET_COLOR), 0);
        assert!(!svg.contains("test accuracy"));
    }

    #[test]
    fn batch_charts_draw_a_line_per_row_and_a_cross_per_out_of_memory() {
        let at = |backend: &str, batch: usize, median: f64| {
            let mut r = timed(backend, median);
            r.batch_size = batch;
            r.images_per_second = Some(60_000.0 / median);
            r
        };
        let mut oom = at("tch", 512, 1.0);
        oom.status = Status::OutOfMemory;
        oom.epoch_seconds = None;
        let records = [
            at("flex", 32, 120.0),
            at("flex", 512, 200.0),
            at("tch", 32, 60.0),
            oom,
        ];
        let charts = batch_charts(&records).unwrap();
        assert_eq!(charts.len(), 1);
        let svg = &charts[0].1;
        roxmltree::Document::parse(svg).expect("well-formed SVG");
        for text in [
            "flex/cpu/f32",
            "tch/cpu/f32",
            "batch 32",
            "batch 512",
            "500",
            "out of memory",
        ] {
            assert!(svg.contains(text), "{text:?} not in the chart");
        }
        // One batch size: no chart.
        assert!(batch_charts(&[timed("flex", 1.0)]).unwrap().is_empty());
        // The bar chart names each row with its batch.
        let bars = &super::charts(&records, None).unwrap()[0].1;
        assert!(bars.contains("flex/cpu/f32 @ batch 512"), "{bars}");
    }

    #[test]
    fn a_low_confidence_projection_gets_no_bar_and_a_note() {
        let mut slow = timed("ndarray", 17_000.0);
        slow.obtained.method = Method::Projected;
        slow.obtained.chunks = 1;
        let charts = charts(&[timed("flex", 360.0), slow], None).unwrap();
        let svg = &charts[0].1;
        assert_eq!(fill_count(svg, TIME_COLOR), 1);
        assert!(svg.contains("not drawn: ndarray/cpu/f32"), "{svg}");
    }

    #[test]
    fn explain_chart_stacks_one_segment_per_op_row_in_each_backend() {
        use kiln_results::explain::{
            ExplainRecord, ExplainRequest, ExplainTable, OpTiming, Phase, Timing,
        };
        use kiln_results::{ModelKind, Precision};
        let record = |backend: &str, seconds: &[f64]| {
            let request =
                ExplainRequest::new(ModelKind::MnistCnn, backend, "cpu", Precision::F32, 128);
            let mut r = ExplainRecord::start(&request, "", 2);
            r.status = Status::Ok;
            r.ops = seconds
                .iter()
                .enumerate()
                .map(|(site, &s)| OpTiming {
                    site,
                    phase: Phase::Forward,
                    timing: Timing {
                        median_seconds: s,
                        min_seconds: s,
                        max_seconds: s,
                        runs: 3,
                    },
                })
                .collect();
            r.step = Some(Timing {
                median_seconds: 0.05,
                min_seconds: 0.05,
                max_seconds: 0.05,
                runs: 3,
            });
            r
        };
        let flex = record("flex", &[0.01, 0.02, 0.03]);
        // Sites 0 and 2 are both conv2d forward (one row); site 1 is a max pool.
        let torch = record("pytorch", &[0.005, 0.0, 0.0]);
        let table = ExplainTable::new(&[&flex, &torch]).expect("a table");
        let svg = explain_chart(&table).expect("drawn");
        // Two rows, heaviest first, each bar in both panels (ms and shares) and one legend key;
        // pytorch's pool took no time and has no segment.
        assert_eq!(fill_count(&svg, PALETTE[0]), 2 * 2 + 1);
        assert_eq!(fill_count(&svg, PALETTE[1]), 2 + 1);
        assert_eq!(fill_count(&svg, PALETTE[2]), 0);
        assert!(svg.contains("flex") && svg.contains("pytorch"));
        assert!(
            svg.contains("60 ms (120%)"),
            "flex's sum against its 50 ms step"
        );
    }
}
