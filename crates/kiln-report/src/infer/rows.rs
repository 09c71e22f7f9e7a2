//! A table's rows from inference records: the records grouped by model and by row (backend,
//! device, precision), and a figure's repeats combined into one cell.

use kiln_contract::infer::InferRecord;
use kiln_contract::{ModelKind, Stats, Status};

/// `values` (one per repeat) as their median, with the next run's interval where there are
/// several: `17.2 µs (16.9 µs–17.5 µs)`, or `(≤ 30.1 µs)` where the interval reaches zero.
pub(super) fn combined(values: &[f64], text: fn(f64) -> String) -> String {
    match Stats::from_samples(values) {
        None => "–".into(),
        Some(s) => match s.prediction_interval().filter(|_| values.len() > 1) {
            Some((lo, hi)) if lo > 0.0 => format!("{} ({}–{})", text(s.median), text(lo), text(hi)),
            Some((_, hi)) => format!("{} (≤ {})", text(s.median), text(hi)),
            None => text(s.median),
        },
    }
}

/// The models `records` hold, in the order they first appear.
pub fn models(records: &[InferRecord]) -> Vec<ModelKind> {
    let mut models: Vec<ModelKind> = Vec::new();
    for r in records {
        if !models.contains(&r.model) {
            models.push(r.model);
        }
    }
    models
}

/// The rows of `model` in `records`, grouped by backend, device and precision in the order
/// they first appear.
pub fn groups(records: &[InferRecord], model: ModelKind) -> Vec<Vec<&InferRecord>> {
    let mut rows: Vec<Vec<&InferRecord>> = Vec::new();
    for r in records.iter().filter(|r| r.model == model) {
        match rows.iter_mut().find(|g| g[0].label() == r.label()) {
            Some(g) => g.push(r),
            None => rows.push(vec![r]),
        }
    }
    rows
}

/// The records of a row (a group of [`groups`]) that succeeded.
pub fn succeeded<'a>(group: &[&'a InferRecord]) -> Vec<&'a InferRecord> {
    group
        .iter()
        .copied()
        .filter(|r| r.status == Status::Ok)
        .collect()
}
