//! The comparison of each row with the reference, its verdict and the Markdown tables.

use serde::{Deserialize, Serialize};

use kiln_contract::verify::{Verdict, VerifyRecord, Weights};
use kiln_contract::vocab::Vocabulary;
use kiln_contract::{Precision, Status};

/// Pass and warn limits of one precision, for the loss curve's and the final weights' largest
/// relative deviation from the reference (above `warn`: fail).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub loss_pass: f64,
    pub loss_warn: f64,
    pub weights_pass: f64,
    pub weights_warn: f64,
}

/// The thresholds a row in `precision` is held to (docs/verify.md explains them).
pub fn thresholds(precision: Precision) -> Thresholds {
    match precision {
        // f32 against f32: after 20 steps of batch 32 the Burn backends agree to 1e-6 in the
        // loss and 1e-5 in the weights, PyTorch (its own loss and Adam) to 0.07% and 0.26%;
        // one gradient of the wrong sign moved the weights by 3.3% in 8 steps (kiln-core's test).
        Precision::F32 => Thresholds {
            loss_pass: 1e-3,
            loss_warn: 5e-3,
            weights_pass: 5e-3,
            weights_warn: 2e-2,
        },
        // 16-bit types carry 3 (bf16) or 4 (f16) significant digits. After 20 steps of batch
        // 32 PyTorch's own rows against flex f32 are off by 1.6% in the loss and 5.9–8.9%
        // in the final weights (docs/verify.md): a row in a 16-bit type passes where PyTorch's
        // does. These limits are wide: a wrong op is caught in f32.
        Precision::F16 | Precision::AmpF16 | Precision::BF16 | Precision::AmpBF16 => Thresholds {
            loss_pass: 5e-2,
            loss_warn: 2e-1,
            weights_pass: 1e-1,
            weights_warn: 3e-1,
        },
    }
}

/// One row of the verify table: a record against the reference.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Deviation {
    pub label: String,
    /// Largest relative loss deviation in each step range (`(first, last, deviation)`,
    /// 1-based steps; `None` deviation: a non-finite loss in the range).
    pub loss_ranges: Vec<(usize, usize, Option<f64>)>,
    /// The largest of them (`None`: some loss was not finite).
    pub loss_max: Option<f64>,
    /// The final weights' largest per-tensor relative deviation `|a-b| / |b|` (L2 norms), and
    /// the tensor it is in.
    pub weights_max: Option<f64>,
    pub weights_worst: Option<String>,
    pub verdict: Verdict,
    /// Why the verdict, in words.
    pub why: String,
}

/// Step ranges: four quarters of `steps` (fewer when there are fewer steps).
pub fn step_ranges(steps: usize) -> Vec<(usize, usize)> {
    let parts = steps.clamp(1, 4);
    (0..parts)
        .map(|i| (i * steps / parts + 1, (i + 1) * steps / parts))
        .collect()
}

/// Relative deviation of `x` from the reference `r`.
fn relative(x: f64, r: f64) -> f64 {
    (x - r).abs() / r.abs().max(1e-12)
}

/// Compare `row` (with its final weights) against the reference run; `twin` is a reference run
/// in the row's own precision (PyTorch's, or the reference backend's), which tells a precision
/// that diverges everywhere from a backend that diverges alone.
pub fn compare(
    reference: &VerifyRecord,
    reference_weights: &Weights,
    row: &VerifyRecord,
    row_weights: Option<&Weights>,
    twin: Option<&VerifyRecord>,
) -> Deviation {
    let limits = thresholds(row.precision);
    let mut d = Deviation {
        label: row.label(),
        loss_ranges: Vec::new(),
        loss_max: None,
        weights_max: None,
        weights_worst: None,
        verdict: Verdict::Deviates,
        why: String::new(),
    };
    if row.status == Status::Skipped {
        d.verdict = Verdict::Unsupported;
        d.why = row.reason.clone().unwrap_or_else(|| "not run".into());
        return d;
    }
    if row.status != Status::Ok {
        d.why = format!(
            "{}: {}",
            row.status.as_str(),
            row.reason.as_deref().unwrap_or("no reason given")
        );
        return d;
    }
    if row.losses.len() != reference.losses.len() {
        d.why = format!(
            "{} losses against the reference's {}",
            row.losses.len(),
            reference.losses.len()
        );
        return d;
    }
    (d.loss_ranges, d.loss_max) = loss_deviations(row, reference);
    if let Some(weights) = row_weights {
        match weights_deviation(reference_weights, weights) {
            Ok((worst, name)) => {
                d.weights_max = Some(worst);
                d.weights_worst = Some(name);
            }
            Err(e) => {
                d.why = e;
                return d;
            }
        }
    }
    let grade = |value: f64, pass: f64, warn: f64| {
        if value <= pass {
            Verdict::Pass
        } else if value <= warn {
            Verdict::Warn
        } else {
            Verdict::Deviates
        }
    };
    let Some(loss) = d.loss_max else {
        (d.verdict, d.why) = not_finite(row, twin);
        return d;
    };
    let by_loss = grade(loss, limits.loss_pass, limits.loss_warn);
    let by_weights = d.weights_max.map_or(Verdict::Warn, |w| {
        grade(w, limits.weights_pass, limits.weights_warn)
    });
    d.verdict = by_loss.max(by_weights);
    d.why = match d.verdict {
        Verdict::Pass => format!(
            "loss within {} and weights within {} ({}) of the reference",
            percent(limits.loss_pass),
            percent(limits.weights_pass),
            row.precision
        ),
        _ if d.weights_max.is_none() => "no final weights to compare".into(),
        _ if by_loss >= by_weights => format!(
            "loss off by {} (pass ≤ {}, warn ≤ {})",
            percent(loss),
            percent(limits.loss_pass),
            percent(limits.loss_warn)
        ),
        _ => format!(
            "{} off by {} (pass ≤ {}, warn ≤ {})",
            d.weights_worst.as_deref().unwrap_or("a tensor"),
            percent(d.weights_max.unwrap_or(0.0)),
            percent(limits.weights_pass),
            percent(limits.weights_warn)
        ),
    };
    d
}

/// Per range of steps, the largest relative deviation of `row`'s loss from the reference's
/// (`None` where a loss is not finite), and the largest of all when every one is finite.
#[allow(clippy::type_complexity)]
fn loss_deviations(
    row: &VerifyRecord,
    reference: &VerifyRecord,
) -> (Vec<(usize, usize, Option<f64>)>, Option<f64>) {
    let mut ranges = Vec::new();
    let mut all_finite = true;
    let mut loss_max: f64 = 0.0;
    for (first, last) in step_ranges(row.losses.len()) {
        let mut worst: Option<f64> = Some(0.0);
        for i in first - 1..last {
            worst = match (worst, row.losses[i], reference.losses[i]) {
                (Some(w), Some(x), Some(r)) => Some(w.max(relative(x, r))),
                _ => None,
            };
        }
        match worst {
            Some(w) => loss_max = loss_max.max(w),
            None => all_finite = false,
        }
        ranges.push((first, last, worst));
    }
    (ranges, all_finite.then_some(loss_max))
}

/// The verdict on a row whose loss is not finite: like the reference when a reference in its
/// precision (`twin`) diverges too, else a deviation, saying from which step.
fn not_finite(row: &VerifyRecord, twin: Option<&VerifyRecord>) -> (Verdict, String) {
    let mut verdict = Verdict::Deviates;
    let step = row.first_non_finite().unwrap_or(0);
    let mut why = format!("the loss is not finite from step {step} on");
    let twin = twin.filter(|t| t.status == Status::Ok && t.precision == row.precision);
    match twin.map(|t| (t.label(), t.first_non_finite())) {
        Some((label, Some(its))) => {
            verdict = Verdict::DivergesLikeReference;
            why += &format!(", as {label}'s from step {its} on");
        }
        Some((label, None)) => why += &format!(", while {label}'s stays finite"),
        None => {
            why += &format!(
                "; no reference ran in {} to tell the precision from the backend",
                row.precision
            )
        }
    }
    (verdict, why)
}

/// The largest per-tensor relative L2 deviation of `row` from `reference`, and its tensor.
pub fn weights_deviation(reference: &Weights, row: &Weights) -> Result<(f64, String), String> {
    if reference.tensors.len() != row.tensors.len() {
        return Err(format!(
            "{} weight tensors against the reference's {}",
            row.tensors.len(),
            reference.tensors.len()
        ));
    }
    let mut worst = (0.0, String::new());
    for (r, x) in reference.tensors.iter().zip(&row.tensors) {
        if r.shape != x.shape {
            return Err(format!(
                "tensor {} has shape {:?}, the reference's {} {:?}",
                x.name, x.shape, r.name, r.shape
            ));
        }
        let (mut diff, mut norm) = (0.0f64, 0.0f64);
        for (a, b) in x.values.iter().zip(&r.values) {
            let (a, b) = (f64::from(*a), f64::from(*b));
            diff += (a - b) * (a - b);
            norm += b * b;
        }
        let rel = if diff.is_finite() {
            diff.sqrt() / norm.sqrt().max(1e-12)
        } else {
            f64::INFINITY
        };
        if rel > worst.0 || worst.1.is_empty() {
            worst = (rel, r.name.clone());
        }
    }
    Ok(worst)
}

/// A share as a percentage with two significant digits (`0.0012%`, `3.4%`).
pub fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p == 0.0 {
        "0%".into()
    } else if p >= 10.0 {
        format!("{p:.0}%")
    } else if p >= 1.0 {
        format!("{p:.1}%")
    } else {
        let digits = (-p.log10().floor()) as usize + 1;
        format!("{p:.digits$}%")
    }
}

/// The verify table of one model: one row per record, reference first.
pub fn table(reference: &VerifyRecord, rows: &[Deviation]) -> String {
    let ranges = step_ranges(reference.steps);
    let mut head = vec!["backend device precision".to_string()];
    head.extend(ranges.iter().map(|(a, b)| format!("loss, steps {a}–{b}")));
    head.extend(["final weights (worst tensor)".into(), "verdict".into()]);
    let mut out = format!(
        "### {} — {} steps of batch {} against {}\n\n",
        reference.model,
        reference.steps,
        reference.batch,
        reference.label()
    );
    out += &format!("| {} |\n", head.join(" | "));
    out += &format!("|{}\n", " --- |".repeat(head.len()));
    for d in rows {
        let mut cells = vec![d.label.clone()];
        if d.loss_ranges.is_empty() {
            cells.extend(ranges.iter().map(|_| "—".to_string()));
        } else {
            cells.extend(
                d.loss_ranges
                    .iter()
                    .map(|(_, _, v)| v.map_or("not finite".into(), percent)),
            );
        }
        cells.push(match (&d.weights_max, &d.weights_worst) {
            (Some(w), Some(name)) if w.is_finite() => format!("{} ({name})", percent(*w)),
            (Some(_), Some(name)) => format!("not finite ({name})"),
            _ => "—".into(),
        });
        cells.push(format!("**{}**: {}", d.verdict, d.why));
        out += &format!("| {} |\n", cells.join(" | "));
    }
    out
}

/// The thresholds as a markdown table (for reports and docs).
pub fn thresholds_table() -> String {
    let mut out = String::from(
        "| precision | loss: pass ≤ | loss: warn ≤ | final weights: pass ≤ | final weights: warn ≤ |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for &p in Precision::ALL {
        let t = thresholds(p);
        out += &format!(
            "| {p} | {} | {} | {} | {} |\n",
            percent(t.loss_pass),
            percent(t.loss_warn),
            percent(t.weights_pass),
            percent(t.weights_warn)
        );
    }
    out
}
