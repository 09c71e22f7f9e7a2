//! The bar charts of a report: per model, epoch time and speed-up (and time to the target
//! accuracy), each bar with its interval.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::fields::{low_confidence, pick_baseline};
use crate::table::{row_title, several_batch_sizes};
use kiln_contract::stats::ratio_with_uncertainty;
use kiln_contract::{Record, Status};

use super::palette::*;

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
    let combined = crate::repeats::combine(records);
    let several = crate::table::machines(records).len() > 1;
    let mut out = Vec::new();
    for (model, group) in crate::table::by_model(&combined) {
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

/// The bar chart's panels: epoch time, speed-up, and time to the target accuracy (with the
/// target) when the rows raced to one (`None` in it: not reached).
struct Panels<'a> {
    times: &'a [Bar],
    speedups: &'a [Bar],
    to_target: Option<(f64, &'a [Option<Bar>])>,
}

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
            draw_panel(&area, &bars, color, &caption, first, labels)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One panel of the bar chart: a bar per row that has one (with its interval and its value),
/// "not reached" where a row has none; `first` panel carries the rows' labels.
fn draw_panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    bars: &[Option<Bar>],
    color: RGBColor,
    caption: &str,
    first: bool,
    labels: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let n = labels.len();
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
    let mut chart = ChartBuilder::on(area)
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
        .x_label_formatter(&axis_value)
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
        let text = bar_text(b, seconds);
        Text::new(
            text,
            (b.high.max(b.value) * 1.08, y + 0.12),
            ("sans-serif", 12).into_font().color(&BLACK),
        )
    }))?;
    // A row that never reached the target says so where its bar would be.
    chart.draw_series(
        bars.iter()
            .enumerate()
            .filter(|(_, b)| b.is_none())
            .map(|(i, _)| {
                let y = (n - 1 - i) as f64;
                Text::new(
                    "not reached",
                    (lo * 1.08, y + 0.12),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )
            }),
    )?;
    Ok(())
}

/// An axis value with the digits its size needs.
fn axis_value(v: &f64) -> String {
    if *v >= 10.0 {
        format!("{v:.0}")
    } else if *v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A bar's value as its label says it: seconds, or a ratio with its interval.
fn bar_text(b: Bar, seconds: bool) -> String {
    if seconds {
        format!("{:.1} s", b.value)
    } else if b.high > b.value {
        format!("{:.2}× ± {:.2}", b.value, b.high - b.value)
    } else {
        format!("{:.2}×", b.value)
    }
}
