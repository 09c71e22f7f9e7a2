//! The stacked-bar chart of an explain table.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::palette::*;

/// Pixels right of the explain chart's share panel for its legend.
const LEGEND_WIDTH: u32 = 230;

/// The stacked-bar chart of one explain table: one bar per backend, one segment per op row
/// (the eight heaviest, then "other ops"), a black tick at each backend's measured step.
pub fn explain_chart(table: &crate::explain::ExplainTable) -> Result<String> {
    draw_explain(table).map_err(|e| anyhow!("drawing the explain chart of {}: {e}", table.model))
}

fn draw_explain(
    table: &crate::explain::ExplainTable,
) -> Result<String, Box<dyn std::error::Error>> {
    let rows = table.rows_by_weight();
    let shown = rows.len().min(PALETTE.len() - 1);
    let n = table.columns.len();
    let totals: Vec<f64> = table.totals.iter().map(|t| 1000.0 * t).collect();
    let top = totals
        .iter()
        .copied()
        .chain(table.steps.iter().flatten().map(|s| 1000.0 * s))
        .fold(1e-3f64, f64::max)
        * 1.12;
    let stacks = Stacks {
        table,
        segments: segments(table, &rows, shown),
        totals,
        top,
        shown,
        others: rows.len() > shown,
    };
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
            } else if stacks.others {
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
        draw_stacks(&left, &stacks, true)?;
        draw_stacks(&right, &stacks, false)?;
        root.present()?;
    }
    Ok(svg)
}

/// What both panels of the explain chart draw.
struct Stacks<'a> {
    table: &'a crate::explain::ExplainTable,
    /// Per column, the segments' milliseconds: the heaviest rows, then the rest summed.
    segments: Vec<Vec<f64>>,
    totals: Vec<f64>,
    /// The milliseconds axis' top.
    top: f64,
    /// How many rows have a segment of their own.
    shown: usize,
    /// Whether rows beyond those are summed as "other ops".
    others: bool,
}

/// Per column, the milliseconds of the `shown` heaviest rows, then of the rest summed.
fn segments(
    table: &crate::explain::ExplainTable,
    rows: &[&crate::explain::FamilyRow],
    shown: usize,
) -> Vec<Vec<f64>> {
    (0..table.columns.len())
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
        .collect()
}

/// One panel of stacked bars: milliseconds with the measured step (`absolute`), or shares.
fn draw_stacks(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    st: &Stacks,
    absolute: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = st.table.columns.len();
    let value = |c: usize, v: f64| {
        if absolute {
            v
        } else if st.totals[c] > 0.0 {
            100.0 * v / st.totals[c]
        } else {
            0.0
        }
    };
    let (caption, ceiling, desc) = stack_axis(absolute, st.top);
    let mut chart = ChartBuilder::on(area)
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
                st.table
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
    for k in 0..=st.shown {
        if k == st.shown && !st.others {
            continue;
        }
        let color = PALETTE
            .get(k)
            .copied()
            .filter(|_| k < st.shown)
            .unwrap_or(OTHER_COLOR);
        let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
            .filter(|&c| st.segments[c][k] > 0.0)
            .map(|c| {
                let below = value(c, st.segments[c][..k].iter().sum());
                let x = c as f64;
                Rectangle::new(
                    [
                        (x - 0.3, below),
                        (x + 0.3, below + value(c, st.segments[c][k])),
                    ],
                    color.filled(),
                )
            })
            .collect();
        chart.draw_series(bars)?;
    }
    if !absolute {
        return Ok(());
    }
    for (c, step) in st.table.steps.iter().enumerate() {
        if let Some(step) = step {
            let (x, y) = (c as f64, 1000.0 * step);
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x - 0.4, y), (x + 0.4, y)],
                BLACK.stroke_width(3),
            )))?;
        }
        let explained = st
            .table
            .explained(c)
            .map_or(String::new(), |e| format!(" ({:.0}%)", 100.0 * e));
        chart.draw_series(std::iter::once(Text::new(
            format!("{:.0} ms{explained}", st.totals[c]),
            (
                c as f64 - 0.3,
                st.totals[c].max(step.map_or(0.0, |s| 1000.0 * s)) + st.top * 0.02,
            ),
            ("sans-serif", 12).into_font().color(&BLACK),
        )))?;
    }
    Ok(())
}

/// A stacked panel's caption, axis top and axis title: milliseconds up to `top`, or shares.
fn stack_axis(absolute: bool, top: f64) -> (&'static str, f64, &'static str) {
    if absolute {
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
    }
}
