//! What `explain` asks a runner to time and what the runner writes back.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::sites::{Phase, Site, sites};
use crate::{Fingerprint, ModelKind, Precision, Status};

/// Version of the explain request and record; runners refuse another.
pub const EXPLAIN_VERSION: u32 = 1;

/// What `cargo xtask explain` asks a runner to time (one backend, device and precision).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    pub kiln_explain: u32,
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    pub batch: usize,
    pub seed: u64,
    /// Untimed runs of each op before it is timed, at least; more until the op's times are
    /// steady by `timing`'s rule (a JIT backend compiles and tunes on the first runs), for at
    /// most `warmup_cap_runs` runs or `op_seconds` × 10 seconds.
    pub warmup: usize,
    /// The most warm-up runs an op gets before it is timed, steady or not.
    #[serde(default = "warmup_cap_runs")]
    pub warmup_cap_runs: usize,
    /// The steady-state rule the warm-up runs follow (a cell's: [`crate::TimingRules::KILN`]).
    #[serde(default)]
    pub timing: crate::TimingRules,
    /// Timed runs of each op (the median is kept); fewer when an op is slow, see `op_seconds`.
    pub repeats: usize,
    /// An op stops repeating once its timed runs took this long (and at least 3 ran).
    pub op_seconds: f64,
    /// The operations, from [`sites`].
    pub sites: Vec<Site>,
    /// Adam's learning rate in the timed update and step (the protocol's unless given).
    #[serde(default = "crate::protocol::default_learning_rate")]
    pub learning_rate: f64,
}

fn warmup_cap_runs() -> usize {
    40
}

impl ExplainRequest {
    /// The request for `model` on `backend`'s `device` with the default repeats.
    pub fn new(
        model: ModelKind,
        backend: &str,
        device: &str,
        precision: Precision,
        batch: usize,
    ) -> Self {
        ExplainRequest {
            kiln_explain: EXPLAIN_VERSION,
            model,
            backend: backend.into(),
            device: device.into(),
            precision,
            batch,
            seed: crate::protocol::SEED,
            warmup: 1,
            timing: crate::TimingRules::KILN,
            warmup_cap_runs: warmup_cap_runs(),
            repeats: 7,
            op_seconds: 4.0,
            sites: sites(model, batch),
            learning_rate: crate::protocol::LEARNING_RATE,
        }
    }

    /// Read a request xtask wrote, with an error naming the file.
    pub fn read(path: &Path) -> Result<ExplainRequest, String> {
        crate::cell::read_request(
            path,
            "an explain request",
            "`cargo xtask explain` writes them",
            ExplainRequest::validate,
        )
    }

    /// Whether the request can be run.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_explain != EXPLAIN_VERSION {
            return Err(format!(
                "explain request version {} is not {EXPLAIN_VERSION}; rerun `cargo xtask explain`",
                self.kiln_explain
            ));
        }
        if self.batch == 0 || self.repeats == 0 {
            return Err("batch and repeats must be at least 1".into());
        }
        if self.precision.is_amp() {
            return Err(format!(
                "explain times pure precisions (f32, f16, bf16); {} mixes two types per op, \
                 which isolated ops cannot reproduce",
                self.precision
            ));
        }
        if self.sites.is_empty() {
            return Err("the request lists no operations".into());
        }
        Ok(())
    }
}

/// A timed thing: median of the timed runs, their mean, their range, how many ran. Read as
/// written, or from the runs' seconds alone (`{"samples_seconds": [...]}`, what the PyTorch
/// reference writes), summarized here with Kiln's one median.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(try_from = "TimingWire")]
pub struct Timing {
    pub median_seconds: f64,
    /// The mean: what the op costs over all its calls (a change that slows one call in four
    /// moves it, not the median). `None` in records older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_seconds: Option<f64>,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub runs: usize,
}

/// A timing as written: summarized, or the runs' seconds.
#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
enum TimingWire {
    Summary(TimingSummary),
    Samples(TimingSamples),
}

#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
struct TimingSummary {
    median_seconds: f64,
    #[serde(default)]
    mean_seconds: Option<f64>,
    min_seconds: f64,
    max_seconds: f64,
    runs: usize,
}

#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
struct TimingSamples {
    samples_seconds: Vec<f64>,
}

impl TryFrom<TimingWire> for Timing {
    type Error = String;

    fn try_from(wire: TimingWire) -> Result<Timing, String> {
        match wire {
            TimingWire::Summary(t) => Ok(Timing {
                median_seconds: t.median_seconds,
                mean_seconds: t.mean_seconds,
                min_seconds: t.min_seconds,
                max_seconds: t.max_seconds,
                runs: t.runs,
            }),
            TimingWire::Samples(t) => Timing::of(&t.samples_seconds)
                .ok_or_else(|| "a timing with no finite sample".to_string()),
        }
    }
}

impl Timing {
    /// The timing of `samples` (seconds); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Timing> {
        let finite: Vec<f64> = samples.iter().copied().filter(|s| s.is_finite()).collect();
        let stats = crate::Stats::from_samples(&finite)?;
        Some(Timing {
            median_seconds: stats.median,
            mean_seconds: Some(stats.mean),
            min_seconds: stats.min,
            max_seconds: stats.max,
            runs: stats.n,
        })
    }
}

/// One op of one site in one phase, timed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OpTiming {
    /// Index of the site in the request's (and record's) `sites`.
    pub site: usize,
    pub phase: Phase,
    pub timing: Timing,
}

/// What a runner measured for one explain request; xtask adds the fingerprint.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExplainRecord {
    pub kiln_explain: u32,
    pub model: ModelKind,
    pub backend: String,
    pub backend_version: String,
    pub device: String,
    pub device_name: String,
    pub precision: Precision,
    pub batch: usize,
    pub threads: usize,
    pub warmup: usize,
    pub repeats: usize,
    pub status: Status,
    #[serde(default)]
    pub reason: Option<String>,
    pub sites: Vec<Site>,
    #[serde(default)]
    pub ops: Vec<OpTiming>,
    /// The whole training step (forward, loss, backward, update) on the same shapes.
    #[serde(default)]
    pub step: Option<Timing>,
    /// How the runner timed (what its backward times include or leave out).
    #[serde(default)]
    pub notes: Vec<String>,
    pub wall_seconds: f64,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    /// The Burn the runner was built against, when `--burn` named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burn: Option<crate::BurnBuild>,
}

impl ExplainRecord {
    /// A record of `request` with nothing timed yet.
    pub fn start(request: &ExplainRequest, backend_version: &str, threads: usize) -> Self {
        ExplainRecord {
            kiln_explain: EXPLAIN_VERSION,
            model: request.model,
            backend: request.backend.clone(),
            backend_version: backend_version.into(),
            device: request.device.clone(),
            device_name: request.device.clone(),
            precision: request.precision,
            batch: request.batch,
            threads,
            warmup: request.warmup,
            repeats: request.repeats,
            status: Status::Failed,
            reason: None,
            sites: request.sites.clone(),
            ops: Vec::new(),
            step: None,
            notes: Vec::new(),
            wall_seconds: 0.0,
            fingerprint: None,
            burn: None,
        }
    }

    /// Seconds per step of one timed op: its median times how many layers run it.
    pub fn per_step(&self, op: &OpTiming) -> f64 {
        let count = self.sites.get(op.site).map_or(1, |s| s.layers.len());
        op.timing.median_seconds * count as f64
    }

    /// An op's cost per step over all its calls: its mean call (its median where the record
    /// has no mean) times the layers that run it.
    pub fn per_step_mean(&self, op: &OpTiming) -> f64 {
        let count = self.sites.get(op.site).map_or(1, |s| s.layers.len());
        op.timing.mean_seconds.unwrap_or(op.timing.median_seconds) * count as f64
    }

    /// The sum of every op's time per step.
    pub fn ops_total(&self) -> f64 {
        self.ops.iter().map(|o| self.per_step(o)).sum()
    }

    /// The sum of the ops against the measured step (1.0 = all of it explained).
    pub fn explained(&self) -> Option<f64> {
        let step = self.step?.median_seconds;
        (step > 0.0 && !self.ops.is_empty()).then(|| self.ops_total() / step)
    }

    /// The band of "explained" (sum of ops ÷ measured step) inside which the ops timed alone are
    /// read as a decomposition of the step (docs/explain.md).
    pub const BAND: (f64, f64) = (0.70, 1.30);

    /// Why the ops do not decompose the step, when the explained share is outside [`Self::BAND`]:
    /// one line for the table and the record, with what can still be read from them.
    pub fn outside_band(&self) -> Option<String> {
        decomposition_note(&self.column(), self.explained()?)
    }

    /// How tables name the record's column.
    pub fn column(&self) -> String {
        let device = if self.device == "cpu" || self.device == "default" {
            String::new()
        } else {
            format!(" {}", self.device)
        };
        let precision = if self.precision == Precision::F32 {
            String::new()
        } else {
            format!(" {}", self.precision)
        };
        format!("{}{device}{precision}", self.backend)
    }

    /// The op a timing is of, with its phase (`conv2d 64→512 k3 at 13×13 · weight grad`).
    pub fn op_label(&self, op: &OpTiming) -> String {
        match self.sites.get(op.site) {
            Some(site) => format!("{} · {}", site.describe(), op.phase),
            None => format!("op #{} · {}", op.site, op.phase),
        }
    }
}

/// The note for a column whose ops explain `share` of its measured step, when that is outside
/// [`ExplainRecord::BAND`].
pub fn decomposition_note(column: &str, share: f64) -> Option<String> {
    let (low, high) = ExplainRecord::BAND;
    let band = format!("{:.0}–{:.0}%", 100.0 * low, 100.0 * high);
    if share > high {
        Some(format!(
            "{column}: its ops timed alone add up to {:.0}% of the measured step, above {band}: \
             here they are no decomposition of the step (alone, each op pays for cold caches, \
             its own synchronisation and thread start-up, which the step overlaps); its shares \
             overstate, but the ratios between backends for the same op still compare like with \
             like",
            100.0 * share
        ))
    } else if share < low {
        Some(format!(
            "{column}: its ops timed alone add up to only {:.0}% of the measured step, below \
             {band}: the step spends time outside them (data gathering, allocation, \
             synchronisation, or ops fused differently); read the ratios between backends for \
             the same op, not the shares",
            100.0 * share
        ))
    } else {
        None
    }
}

/// The explain records of a file (`explain.jsonl`), with an error naming the file and line.
pub fn read_records(path: &Path) -> Result<Vec<ExplainRecord>, String> {
    crate::question::read_records(path, "an explain record")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_reads_from_its_runs_with_the_one_median() {
        let t: Timing =
            serde_json::from_str(r#"{"samples_seconds": [0.3, 0.1, 0.2, 0.4]}"#).unwrap();
        assert_eq!(
            (t.median_seconds, t.min_seconds, t.max_seconds, t.runs),
            (0.25, 0.1, 0.4, 4)
        );
        let again: Timing = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(again, t);
        assert!(serde_json::from_str::<Timing>(r#"{"samples_seconds": []}"#).is_err());
        assert!(serde_json::from_str::<Timing>(r#"{"median_seconds": 1.0}"#).is_err());
    }
}
