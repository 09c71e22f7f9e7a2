//! Batch size as a dimension of the matrix (`--batch 32,128,512`): per model, one curve per
//! backend/device/precision (and machine) of images/s against batch size, and the largest
//! batch each fit before it ran out of memory. Computed once here from records; the report's
//! table and chart are renderers of it.

use std::fmt::Write as _;

use crate::fields::row_name;
use crate::table::{by_model, machines, several_batch_sizes};
use kiln_contract::schema::{Record, Status};

/// One batch size of a curve: its status, and its throughput when it trained.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPoint {
    pub batch: usize,
    pub status: Status,
    /// Training images per second (the median over the row's runs).
    pub images_per_second: Option<f64>,
}

/// One backend/device/precision's points, by batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchCurve {
    /// `backend/device/precision`, with the machine when records come from several.
    pub label: String,
    pub points: Vec<BatchPoint>,
}

impl BatchCurve {
    /// The largest batch size that trained.
    pub fn largest_fit(&self) -> Option<usize> {
        self.points
            .iter()
            .filter(|p| p.status == Status::Ok)
            .map(|p| p.batch)
            .max()
    }

    /// The smallest batch size that ran out of memory.
    pub fn first_out_of_memory(&self) -> Option<usize> {
        self.points
            .iter()
            .filter(|p| p.status == Status::OutOfMemory)
            .map(|p| p.batch)
            .min()
    }

    /// The batch size with the highest throughput, and that throughput.
    pub fn fastest(&self) -> Option<(usize, f64)> {
        self.points
            .iter()
            .filter_map(|p| p.images_per_second.map(|i| (p.batch, i)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The fastest batch size, or "–" when none trained.
    pub fn fastest_text(&self) -> String {
        self.fastest()
            .map(|(b, _)| b.to_string())
            .unwrap_or_else(|| "–".into())
    }

    /// What the curve says about memory: "512 (1024: out of memory)", "512 (the largest
    /// tried)", or "none (32: out of memory)".
    pub fn fit_text(&self) -> String {
        let tried = self.points.iter().map(|p| p.batch).max().unwrap_or(0);
        match (self.largest_fit(), self.first_out_of_memory()) {
            (Some(fit), Some(oom)) => format!("{fit} ({oom}: out of memory)"),
            (Some(fit), None) if fit == tried => format!("{fit} (the largest tried)"),
            (Some(fit), None) => format!("{fit} (larger ones did not train for other reasons)"),
            (None, Some(oom)) => format!("none ({oom}: out of memory)"),
            (None, None) => "none trained".into(),
        }
    }
}

/// Per model that was run at two or more batch sizes, its curves (rows in the order they first
/// appear; points by batch size). Repeats are combined first, loop-overhead records left out.
pub fn batch_curves(records: &[Record]) -> Vec<(String, Vec<BatchCurve>)> {
    let timed: Vec<Record> = records
        .iter()
        .filter(|r| r.loop_overhead.is_none())
        .cloned()
        .collect();
    let combined = crate::repeats::combine(&timed);
    let several = machines(records).len() > 1;
    let mut out = Vec::new();
    for (model, rows) in by_model(&combined) {
        if !several_batch_sizes(&rows) {
            continue;
        }
        let mut curves: Vec<BatchCurve> = Vec::new();
        for r in rows.iter().filter(|r| r.batch_size > 0) {
            let label = row_name(r, several);
            let point = BatchPoint {
                batch: r.batch_size,
                status: r.status,
                images_per_second: r
                    .images_per_second
                    .filter(|_| r.status == Status::Ok && r.epoch_seconds.is_some()),
            };
            match curves.iter_mut().find(|c| c.label == label) {
                Some(c) => c.points.push(point),
                None => curves.push(BatchCurve {
                    label,
                    points: vec![point],
                }),
            }
        }
        for c in &mut curves {
            c.points.sort_by_key(|p| p.batch);
        }
        out.push((model, curves));
    }
    out
}

/// Every batch size of `curves`, ascending.
pub fn sizes(curves: &[BatchCurve]) -> Vec<usize> {
    let mut sizes: Vec<usize> = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.batch))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The Markdown section of one model's curves: images/s per batch size, the fastest batch and
/// the largest that fit.
pub fn markdown(curves: &[BatchCurve]) -> String {
    let sizes = sizes(curves);
    let mut out = String::from("Images/s by batch size:\n\n| Backend / device / precision |");
    for b in &sizes {
        let _ = write!(out, " batch {b} |");
    }
    out.push_str(" Fastest batch | Largest batch that fit |\n|---|");
    out.push_str(&"---|".repeat(sizes.len() + 2));
    out.push('\n');
    for c in curves {
        let _ = write!(out, "| {} |", c.label.replace('|', "/"));
        for b in &sizes {
            let text = match c.points.iter().find(|p| p.batch == *b) {
                None => "–".to_string(),
                Some(p) => match (p.images_per_second, p.status) {
                    (Some(i), _) => format!("{i:.0}"),
                    (None, status) => status.as_str().to_string(),
                },
            };
            let _ = write!(out, " {text} |");
        }
        let _ = writeln!(out, " {} | {} |", c.fastest_text(), c.fit_text());
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::schema::CellId;
    use kiln_contract::stats::Stats;

    fn row(backend: &str, batch: usize, status: Status, images: f64) -> Record {
        let id = CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: batch,
        };
        let mut r = Record::not_run(&id, status, "");
        if status == Status::Ok {
            r.reason = None;
            r.epoch_seconds = Stats::from_samples(&[60_000.0 / images]);
            r.images_per_second = Some(images);
        }
        r
    }

    #[test]
    fn curves_name_the_fastest_and_the_largest_batch_that_fit() {
        let records = vec![
            row("flex", 32, Status::Ok, 900.0),
            row("tch", 32, Status::Ok, 1500.0),
            row("flex", 128, Status::Ok, 1200.0),
            row("tch", 128, Status::Ok, 2500.0),
            row("flex", 512, Status::Ok, 1100.0),
            row("tch", 512, Status::OutOfMemory, 0.0),
        ];
        let curves = batch_curves(&records);
        assert_eq!(curves.len(), 1);
        let (model, curves) = &curves[0];
        assert_eq!(model, "mnist-cnn");
        let flex = &curves[0];
        assert_eq!(flex.label, "flex/cpu/f32");
        assert_eq!(
            flex.points.iter().map(|p| p.batch).collect::<Vec<_>>(),
            [32, 128, 512]
        );
        assert_eq!(flex.fastest(), Some((128, 1200.0)));
        assert_eq!(flex.fit_text(), "512 (the largest tried)");
        let tch = &curves[1];
        assert_eq!(tch.largest_fit(), Some(128));
        assert_eq!(tch.fit_text(), "128 (512: out of memory)");
        let md = markdown(curves);
        assert!(
            md.contains("| flex/cpu/f32 | 900 | 1200 | 1100 | 128 | 512 (the largest tried) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| tch/cpu/f32 | 1500 | 2500 | out of memory | 128 | 128 (512: out of memory) |"
            ),
            "{md}"
        );
    }

    #[test]
    fn one_batch_size_draws_no_curve() {
        let records = vec![
            row("flex", 128, Status::Ok, 900.0),
            row("tch", 128, Status::Ok, 1500.0),
        ];
        assert!(batch_curves(&records).is_empty());
    }

    #[test]
    fn nothing_trained_says_so() {
        let c = BatchCurve {
            label: "x".into(),
            points: vec![BatchPoint {
                batch: 32,
                status: Status::OutOfMemory,
                images_per_second: None,
            }],
        };
        assert_eq!(c.fit_text(), "none (32: out of memory)");
        assert_eq!(c.fastest(), None);
    }
}
