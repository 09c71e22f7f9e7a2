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
