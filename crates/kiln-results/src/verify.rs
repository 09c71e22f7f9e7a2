//! `cargo xtask verify`: does every backend compute the same training? Each runner trains the
//! same model from the same initial weights on the same batches for K steps and reports its
//! loss curve and final weights; this module holds what the runners and xtask share: the
//! request and record, the weights file (safetensors layout), and the comparison against the
//! reference backend with its documented thresholds.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::vocab::Vocabulary;
use crate::{CellId, DatasetName, Fingerprint, ModelKind, Precision, Status};

/// Version of the verify request and record; runners refuse another.
pub const VERIFY_VERSION: u32 = 1;

/// A fault a test injects to see verify fail (never set by `cargo xtask verify` itself).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The first parameter's gradient (the first convolution's weights) comes back with its
    /// sign flipped, as from a backend whose convolution weight-gradient kernel is wrong.
    WrongWeightGradient,
}

/// One backend/device/precision's part of a verify run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// [`VERIFY_VERSION`].
    pub kiln_verify: u32,
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    /// Training steps (K); step `i` trains on training samples `[i*batch, (i+1)*batch)`.
    pub steps: usize,
    pub batch: usize,
    /// Seed of the initial weights (used only without `weights_in`) and of synthetic data.
    pub seed: u64,
    pub dataset: DatasetName,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The data exported by xtask, for runners that do not read datasets themselves.
    #[serde(default)]
    pub data_file: Option<PathBuf>,
    /// Start from these weights; `None`: initialise with `seed` and write them to `init_out`.
    #[serde(default)]
    pub weights_in: Option<PathBuf>,
    #[serde(default)]
    pub init_out: Option<PathBuf>,
    /// Where the weights after the last step go.
    pub final_out: PathBuf,
    /// Tests only: a fault to inject.
    #[serde(default)]
    pub fault: Option<Fault>,
}

impl VerifyRequest {
    /// Read and validate a request file.
    pub fn read(path: &Path) -> Result<VerifyRequest, String> {
        crate::cell::read_request(
            path,
            "a verify request",
            "`cargo xtask verify` writes them",
            VerifyRequest::validate,
        )
    }

    /// The row's coordinates, as a cell's (model, backend, device, precision).
    pub fn id(&self) -> CellId {
        CellId::new(
            self.model,
            &self.backend,
            &self.device,
            self.precision,
            self.batch,
        )
    }

    /// Whether the request can be run.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_verify != VERIFY_VERSION {
            return Err(format!(
                "verify request version {} is not {VERIFY_VERSION}; rerun `cargo xtask verify`",
                self.kiln_verify
            ));
        }
        if self.steps == 0 || self.batch == 0 {
            return Err(format!(
                "--steps and --batch must be at least 1 (got {} and {})",
                self.steps, self.batch
            ));
        }
        if !self.dataset.fits(self.model) {
            return Err(format!(
                "dataset {} does not fit model {}",
                self.dataset, self.model
            ));
        }
        if self.weights_in.is_none() && self.init_out.is_none() {
            return Err("give weights_in (start from them) or init_out (write the start)".into());
        }
        Ok(())
    }

    /// The training samples the run needs.
    pub fn samples(&self) -> usize {
        self.steps * self.batch
    }
}

/// What one runner did with a verify request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VerifyRecord {
    pub kiln_verify: u32,
    pub model: ModelKind,
    pub backend: String,
    pub backend_version: String,
    pub device: String,
    pub device_name: String,
    pub precision: Precision,
    pub steps: usize,
    pub batch: usize,
    /// Worker threads the backend computed with.
    #[serde(default)]
    pub threads: usize,
    pub status: Status,
    #[serde(default)]
    pub reason: Option<String>,
    /// Each step's mean batch loss (before its update), `None` where it was not finite.
    #[serde(default)]
    pub losses: Vec<Option<f64>>,
    /// The weights after the last step (`final_out`), when written.
    #[serde(default)]
    pub final_weights: Option<PathBuf>,
    #[serde(default)]
    pub fault: Option<Fault>,
    /// What the runner did to make the run deterministic (dropout) and anything else to know.
    #[serde(default)]
    pub notes: Vec<String>,
    pub wall_seconds: f64,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    /// How the run compares with the reference (`cargo xtask verify` sets it; a runner never
    /// does), and why in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_reason: Option<String>,
}

impl VerifyRecord {
    /// A record of `request` with nothing done yet (status failed until it succeeds).
    pub fn start(request: &VerifyRequest, backend_version: &str) -> Self {
        VerifyRecord {
            kiln_verify: VERIFY_VERSION,
            model: request.model,
            backend: request.backend.clone(),
            backend_version: backend_version.into(),
            device: request.device.clone(),
            device_name: request.device.clone(),
            precision: request.precision,
            steps: request.steps,
            batch: request.batch,
            threads: 0,
            status: Status::Failed,
            reason: None,
            losses: Vec::new(),
            final_weights: None,
            fault: request.fault,
            notes: Vec::new(),
            wall_seconds: 0.0,
            fingerprint: None,
            verdict: None,
            verdict_reason: None,
        }
    }

    /// The first step whose loss was not finite (1-based), if any.
    pub fn first_non_finite(&self) -> Option<usize> {
        self.losses.iter().position(Option::is_none).map(|i| i + 1)
    }

    /// `backend device precision`, the row's name.
    pub fn label(&self) -> String {
        format!("{} {} {}", self.backend, self.device, self.precision)
    }
}

// ------------------------------------------------------------------------------------ weights

/// One named tensor of f32 values.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// A model's trainable parameters in visiting order (Burn's `Module::visit`, PyTorch's
/// `parameters()`), in Burn's layout: a linear layer's weight is `[in, out]` (PyTorch's
/// transposed). Stored as a safetensors file whose tensor names start with the zero-padded
/// position (`003.conv2.weight`), so the order survives the format's sorted header.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Weights {
    pub tensors: Vec<NamedTensor>,
}

#[derive(Serialize, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

impl Weights {
    /// The safetensors bytes: an 8-byte little-endian header length, the JSON header, the data.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut header = BTreeMap::new();
        let mut offset = 0;
        for (i, t) in self.tensors.iter().enumerate() {
            let len = t.values.len() * 4;
            header.insert(
                format!("{i:03}.{}", t.name),
                HeaderEntry {
                    dtype: "F32".into(),
                    shape: t.shape.clone(),
                    data_offsets: [offset, offset + len],
                },
            );
            offset += len;
        }
        let mut json = serde_json::to_vec(&header).unwrap_or_default();
        // The format pads the header with spaces to a multiple of 8 bytes.
        while json.len() % 8 != 0 {
            json.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + json.len() + offset);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for t in &self.tensors {
            for v in &t.values {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Parse safetensors bytes written by [`Weights::to_bytes`] or the PyTorch reference.
    pub fn from_bytes(bytes: &[u8]) -> Result<Weights, String> {
        let len = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
            .ok_or("shorter than a safetensors header")?;
        let header = bytes.get(8..8 + len).ok_or("the header is cut short")?;
        let entries: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(header).map_err(|e| format!("bad header: {e}"))?;
        let data = &bytes[8 + len..];
        let mut tensors = Vec::new();
        for (key, value) in entries {
            if key == "__metadata__" {
                continue;
            }
            let entry: HeaderEntry = serde_json::from_value(value)
                .map_err(|e| format!("tensor {key}: bad entry: {e}"))?;
            if entry.dtype != "F32" {
                return Err(format!("tensor {key}: {} (only F32 is read)", entry.dtype));
            }
            let [from, to] = entry.data_offsets;
            let raw = data
                .get(from..to)
                .filter(|r| r.len() == entry.shape.iter().product::<usize>() * 4)
                .ok_or_else(|| format!("tensor {key}: offsets {from}..{to} do not fit"))?;
            let name = match key.split_once('.') {
                Some((pos, rest)) if pos.parse::<usize>().is_ok() => rest.to_string(),
                _ => key.clone(),
            };
            tensors.push((
                key,
                NamedTensor {
                    name,
                    shape: entry.shape,
                    values: raw
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                },
            ));
        }
        // Keys sort by their zero-padded position.
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Weights {
            tensors: tensors.into_iter().map(|(_, t)| t).collect(),
        })
    }

    pub fn write(&self, path: &Path) -> Result<(), String> {
        std::fs::write(path, self.to_bytes())
            .map_err(|e| format!("cannot write weights to {}: {e}", path.display()))
    }

    pub fn read(path: &Path) -> Result<Weights, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read weights from {}: {e}", path.display()))?;
        Weights::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }
}

// ------------------------------------------------------------------------------ comparison

/// How a row compares with the reference. Only [`Verdict::Deviates`] says that a backend
/// computes another training than the reference: `cargo xtask verify` exits 1 for it alone.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within the precision's pass limits of the reference.
    Pass,
    /// Agrees, but between the pass and warn limits.
    Warn,
    /// Its loss stops being finite, and so does the reference's run in the same precision:
    /// the precision diverges, not the backend.
    DivergesLikeReference,
    /// Beyond the warn limits, or not finite where the reference in its precision stays
    /// finite, or it failed.
    Deviates,
    /// The backend or device cannot run this precision (the probe or the runner says so).
    Unsupported,
}

impl Verdict {
    /// True for the verdicts that say the backend agrees with the reference.
    pub fn agrees(self) -> bool {
        matches!(
            self,
            Verdict::Pass | Verdict::Warn | Verdict::DivergesLikeReference
        )
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::DivergesLikeReference => "diverges, like the reference",
            Verdict::Deviates => "deviates",
            Verdict::Unsupported => "unsupported",
        })
    }
}

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
        d.loss_ranges.push((first, last, worst));
    }
    d.loss_max = all_finite.then_some(loss_max);
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
        let step = row.first_non_finite().unwrap_or(0);
        d.why = format!("the loss is not finite from step {step} on");
        let twin = twin.filter(|t| t.status == Status::Ok && t.precision == row.precision);
        match twin.map(|t| (t.label(), t.first_non_finite())) {
            Some((label, Some(its))) => {
                d.verdict = Verdict::DivergesLikeReference;
                d.why += &format!(", as {label}'s from step {its} on");
            }
            Some((label, None)) => d.why += &format!(", while {label}'s stays finite"),
            None => {
                d.why += &format!(
                    "; no reference ran in {} to tell the precision from the backend",
                    row.precision
                )
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(backend: &str, losses: &[f64]) -> VerifyRecord {
        let request = VerifyRequest {
            kiln_verify: VERIFY_VERSION,
            model: ModelKind::MnistCnn,
            backend: backend.into(),
            device: "cpu".into(),
            precision: Precision::F32,
            steps: losses.len(),
            batch: 4,
            seed: 1,
            dataset: DatasetName::Synthetic,
            data_dir: None,
            data_file: None,
            weights_in: None,
            init_out: Some("init".into()),
            final_out: "final".into(),
            fault: None,
        };
        let mut r = VerifyRecord::start(&request, "0");
        r.status = Status::Ok;
        r.losses = losses.iter().map(|&l| Some(l)).collect();
        r
    }

    fn weights(values: &[f32]) -> Weights {
        Weights {
            tensors: vec![
                NamedTensor {
                    name: "conv1.weight".into(),
                    shape: vec![values.len()],
                    values: values.to_vec(),
                },
                NamedTensor {
                    name: "fc.bias".into(),
                    shape: vec![1, 2],
                    values: vec![1.0, -1.0],
                },
            ],
        }
    }

    #[test]
    fn weights_survive_the_safetensors_layout_in_order() {
        let mut w = weights(&[0.5, -2.0, 3.25]);
        // More than ten tensors: the order must not follow the names' sorting.
        for i in 0..11 {
            w.tensors.push(NamedTensor {
                name: format!("z{}", 10 - i),
                shape: vec![1],
                values: vec![i as f32],
            });
        }
        let bytes = w.to_bytes();
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header % 8, 0);
        assert_eq!(Weights::from_bytes(&bytes).unwrap(), w);
        assert!(Weights::from_bytes(&bytes[..20]).is_err());
    }

    #[test]
    fn step_ranges_cover_every_step_once() {
        assert_eq!(step_ranges(20), vec![(1, 5), (6, 10), (11, 15), (16, 20)]);
        assert_eq!(step_ranges(2), vec![(1, 1), (2, 2)]);
        for steps in 1..40 {
            let r = step_ranges(steps);
            assert_eq!(r[0].0, 1);
            assert_eq!(r.last().unwrap().1, steps);
            assert!(r.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        }
    }

    #[test]
    fn identical_runs_pass_and_a_drift_is_graded_by_the_precision() {
        let reference = record("flex", &[2.3, 2.0, 1.5, 1.0]);
        let w = weights(&[0.5, -2.0, 3.25]);
        let same = compare(
            &reference,
            &w,
            &record("ndarray", &[2.3, 2.0, 1.5, 1.0]),
            Some(&w),
            None,
        );
        assert_eq!(same.verdict, Verdict::Pass, "{}", same.why);
        assert_eq!(same.loss_max, Some(0.0));

        // 0.3% off on the last step: a warning in f32, a pass in bf16.
        let drift = record("tch", &[2.3, 2.0, 1.5, 1.003]);
        let d = compare(&reference, &w, &drift, Some(&w), None);
        assert_eq!(d.verdict, Verdict::Warn, "{}", d.why);
        assert!(d.why.contains("loss off by 0.30%"), "{}", d.why);
        assert_eq!(d.loss_ranges[3].2.map(|v| (v * 1e4).round()), Some(30.0));
        let mut bf16 = drift.clone();
        bf16.precision = Precision::BF16;
        assert_eq!(
            compare(&reference, &w, &bf16, Some(&w), None).verdict,
            Verdict::Pass
        );

        // A wrong tensor fails and is named.
        let wrong = weights(&[0.5, -2.0, -3.25]);
        let d = compare(
            &reference,
            &w,
            &record("fake", &[2.3, 2.0, 1.5, 1.0]),
            Some(&wrong),
            None,
        );
        assert_eq!(d.verdict, Verdict::Deviates);
        assert_eq!(d.weights_worst.as_deref(), Some("conv1.weight"));
        assert!(d.why.contains("conv1.weight"), "{}", d.why);
    }

    #[test]
    fn failures_and_non_finite_losses_deviate_with_their_reason() {
        let reference = record("flex", &[2.3, 2.0]);
        let w = weights(&[1.0]);
        let mut failed = record("wgpu", &[]);
        failed.status = Status::Failed;
        failed.reason = Some("no adapter".into());
        let d = compare(&reference, &w, &failed, None, None);
        assert_eq!(d.verdict, Verdict::Deviates);
        assert!(d.why.contains("no adapter"));

        let mut nan = record("f16", &[2.3, 2.0]);
        nan.losses[1] = None;
        let d = compare(&reference, &w, &nan, Some(&w), None);
        assert_eq!(d.verdict, Verdict::Deviates);
        assert_eq!(d.loss_ranges[1].2, None);
        assert!(
            d.why.contains("from step 2") && d.why.contains("no reference ran"),
            "{}",
            d.why
        );
        let table = table(&reference, &[d]);
        assert!(table.contains("not finite"), "{table}");

        let mut skipped = record("ndarray", &[]);
        skipped.status = Status::Skipped;
        skipped.reason = Some("ndarray cpu does not support f16".into());
        let d = compare(&reference, &w, &skipped, None, None);
        assert_eq!(d.verdict, Verdict::Unsupported);
        assert!(!d.verdict.agrees() && d.why.contains("does not support f16"));
    }

    #[test]
    fn a_row_that_diverges_like_the_reference_in_its_precision_agrees() {
        let reference = record("flex", &[2.3, 2.0, 1.8]);
        let w = weights(&[1.0]);
        let f16 = |backend: &str, from: usize| {
            let mut r = record(backend, &[2.3, 2.0, 1.8]);
            r.precision = Precision::F16;
            for l in &mut r.losses[from - 1..] {
                *l = None;
            }
            r
        };
        // PyTorch in f16 diverges too: the precision diverges, not the backend.
        let torch = f16("pytorch", 3);
        let d = compare(&reference, &w, &f16("flex", 2), Some(&w), Some(&torch));
        assert_eq!(d.verdict, Verdict::DivergesLikeReference, "{}", d.why);
        assert!(d.verdict.agrees());
        assert!(
            d.why.contains("as pytorch cpu f16's from step 3 on"),
            "{}",
            d.why
        );
        // PyTorch stays finite in f16: this backend alone diverges.
        let mut finite = record("pytorch", &[2.3, 2.0, 1.8]);
        finite.precision = Precision::F16;
        let d = compare(&reference, &w, &f16("wgpu", 2), Some(&w), Some(&finite));
        assert_eq!(d.verdict, Verdict::Deviates, "{}", d.why);
        assert!(d.why.contains("stays finite"), "{}", d.why);
        // A twin in another precision is no twin.
        let d = compare(&reference, &w, &f16("wgpu", 2), Some(&w), Some(&reference));
        assert_eq!(d.verdict, Verdict::Deviates, "{}", d.why);
    }

    #[test]
    fn mismatched_weights_are_an_error_naming_the_tensor() {
        let a = weights(&[1.0, 2.0]);
        let b = weights(&[1.0, 2.0, 3.0]);
        let e = weights_deviation(&a, &b).unwrap_err();
        assert!(e.contains("conv1.weight"), "{e}");
    }

    #[test]
    fn percentages_keep_two_significant_digits() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(percent(0.034), "3.4%");
        assert_eq!(percent(0.000012), "0.0012%");
    }
}
