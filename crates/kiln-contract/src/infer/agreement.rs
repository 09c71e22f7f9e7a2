//! A row's predictions against the reference's: the logits files every row writes, and the
//! agreement the engine computes from two of them.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// How a row's predictions compare with the reference row's, from the same weights (the
/// engine fills it; a runner never does).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Agreement {
    /// The reference row (`pytorch cpu f32`).
    pub reference: String,
    pub samples: usize,
    /// The share of samples whose top-1 class is the reference's.
    pub top1: f64,
    /// The largest absolute difference of one logit.
    pub max_logit_difference: f64,
    /// Test accuracy of this row's predictions (the labels of the samples).
    #[serde(default)]
    pub accuracy: Option<f64>,
}

/// A logits file: `samples × classes` F32 values, row after row, in safetensors.
pub fn write_logits(path: &Path, values: &[f32], classes: usize) -> Result<(), String> {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let rows = values.len() / classes.max(1);
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, classes], &raw)
            .map_err(|e| format!("logits [{rows}, {classes}]: {e}"))?;
    let bytes = safetensors::serialize([("logits", view)], None)
        .map_err(|e| format!("cannot encode the logits: {e}"))?;
    std::fs::write(path, bytes)
        .map_err(|e| format!("cannot write logits to {}: {e}", path.display()))
}

/// Read a logits file: its values row after row and its classes per row.
pub fn read_logits(path: &Path) -> Result<(Vec<f32>, usize), String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read logits from {}: {e}", path.display()))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not safetensors: {e}", path.display()))?;
    let view = file
        .tensor("logits")
        .map_err(|e| format!("{}: no tensor `logits`: {e}", path.display()))?;
    match (view.dtype(), view.shape()) {
        (safetensors::Dtype::F32, &[_, classes]) => Ok((
            view.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            classes,
        )),
        (dtype, shape) => Err(format!(
            "{}: tensor `logits` is {dtype} {shape:?}, not F32 [samples, classes]",
            path.display()
        )),
    }
}

/// The index of each row's largest value (the predicted class).
pub fn top1(values: &[f32], classes: usize) -> Vec<usize> {
    values
        .chunks(classes.max(1))
        .map(|row| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i)
        })
        .collect()
}

/// `row`'s agreement with `reference` (both logits, `classes` per sample) over the samples
/// both have, and its accuracy against `labels` where given.
pub fn agreement(
    reference_name: &str,
    reference: &[f32],
    row: &[f32],
    classes: usize,
    labels: Option<&[u8]>,
) -> Option<Agreement> {
    let n = reference.len().min(row.len()) / classes.max(1);
    if n == 0 {
        return None;
    }
    let (a, b) = (&reference[..n * classes], &row[..n * classes]);
    let (ta, tb) = (top1(a, classes), top1(b, classes));
    // A sample with a logit that is not a number (NaN, infinite) on either side agrees with
    // nothing, and makes the largest difference infinite: a NaN must fail the row.
    let finite = |s: &[f32], i: usize| {
        s[i * classes..(i + 1) * classes]
            .iter()
            .all(|v| v.is_finite())
    };
    let same = (0..n)
        .filter(|&i| ta[i] == tb[i] && finite(a, i) && finite(b, i))
        .count();
    let max_logit_difference = a
        .iter()
        .zip(b)
        .map(|(x, y)| match (x - y).abs() {
            d if d.is_finite() => f64::from(d),
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max);
    let accuracy = labels.filter(|l| l.len() >= n).map(|l| {
        tb.iter()
            .zip(l)
            .filter(|(p, l)| **p == usize::from(**l))
            .count() as f64
            / n as f64
    });
    Some(Agreement {
        reference: reference_name.to_string(),
        samples: n,
        top1: same as f64 / n as f64,
        max_logit_difference,
        accuracy,
    })
}
