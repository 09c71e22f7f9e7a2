//! SVG bar charts of a report, drawn with plotters: per model, one bar per timed cell for the
//! epoch time and one for the speed-up over the baseline (both on log scales, since backends
//! differ by orders of magnitude).

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use kiln_results::render::{machine, machine_label, pick_baseline, row_label};
use kiln_results::{Record, Status};

/// Fill of the epoch-time bars (tests count bars by it).
pub const TIME_COLOR: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
/// Fill of the speed-up bars.
pub const SPEEDUP_COLOR: RGBColor = RGBColor(0xd9, 0x6c, 0x1e);

fn bounds(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0f64, f64::max);
    // Room on the right for the label written after the longest bar.
    (min / 3.0, max * 60.0)
}

/// One SVG document per model that has at least one timed cell: `(model, svg)`.
pub fn charts(records: &[Record], baseline: Option<&str>) -> Result<Vec<(String, String)>> {
    let mut models: Vec<&str> = Vec::new();
    for r in records {
        if !models.contains(&r.model.as_str()) {
            models.push(&r.model);
        }
    }
    let several = {
        let mut m: Vec<String> = records.iter().map(machine).collect();
        m.sort();
        m.dedup();
        m.len() > 1
    };
    let mut out = Vec::new();
    for model in models {
        let rows: Vec<&Record> = records
            .iter()
            .filter(|r| r.model == model && r.status == Status::Ok && r.epoch_seconds.is_some())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let base = pick_baseline(&rows, baseline);
        let label = |r: &Record| {
            if several {
                machine_label(r)
            } else {
                row_label(r)
            }
        };
        let times: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.epoch_seconds.as_ref().map(|e| e.median))
            .collect();
        let speedups: Vec<f64> = match base.and_then(|b| b.epoch_seconds.as_ref()) {
            Some(b) => times.iter().map(|t| b.median / t).collect(),
            None => vec![1.0; times.len()],
        };
        let base_label = base.map(label).unwrap_or_else(|| "baseline".into());
        let svg = draw(model, &rows, &times, &speedups, &base_label, &label)
            .map_err(|e| anyhow!("drawing the {model} chart: {e}"))?;
        out.push((model.to_string(), svg));
    }
    Ok(out)
}

fn draw(
    model: &str,
    rows: &[&Record],
    times: &[f64],
    speedups: &[f64],
    base_label: &str,
    label: &dyn Fn(&Record) -> String,
) -> Result<String, Box<dyn std::error::Error>> {
    let n = rows.len();
    let height = 110 + 34 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!("{model}: epoch time and speed-up per cell (log scales)"),
            ("sans-serif", 18),
        )?;
        let (left, right) = root.split_horizontally(600);
        let panels = [
            (
                left,
                times,
                TIME_COLOR,
                "seconds per standard epoch (median)".to_string(),
                true,
            ),
            (
                right,
                speedups,
                SPEEDUP_COLOR,
                format!("speed-up vs {base_label}"),
                false,
            ),
        ];
        for (area, values, color, caption, labelled) in panels {
            let (lo, hi) = bounds(values);
            let mut chart = ChartBuilder::on(&area)
                .caption(caption, ("sans-serif", 14))
                .margin(12)
                .x_label_area_size(28)
                .y_label_area_size(10)
                .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .disable_y_axis()
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
            chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
                let y = (n - 1 - i) as f64;
                Rectangle::new([(lo, y - 0.32), (v, y + 0.32)], color.filled())
            }))?;
            chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
                let y = (n - 1 - i) as f64;
                let text = if labelled {
                    format!("{}: {v:.1} s", label(rows[i]))
                } else {
                    format!("{}: {v:.2}×", label(rows[i]))
                };
                Text::new(
                    text,
                    (v * 1.15, y + 0.12),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )
            }))?;
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
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
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
}
