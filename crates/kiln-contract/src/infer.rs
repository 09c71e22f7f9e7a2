//! Inference: the request a runner answers with `--infer FILE` and the record it writes. From
//! one weights file (safetensors, verify's format), a runner measures what an application
//! that embeds its backend waits for: its first prediction from process start, the latency of
//! one-sample and small-batch queries after steady state (percentiles), the throughput of its
//! largest batch, the memory serving takes, and the logits of the test set, from which the
//! engine computes agreement with the reference (docs/inference.md).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{DatasetName, Fingerprint, ModelKind, Precision, Status, TimingRules};

mod agreement;
pub use agreement::{Agreement, agreement, read_logits, top1, write_logits};

/// Version of the inference request and record; runners refuse another.
pub const INFER_VERSION: u32 = 1;

/// `cargo xtask infer`'s default: a latency series is its queries or this many seconds of them.
pub const SERIES_SECONDS: f64 = 10.0;

/// `cargo xtask infer`'s default: throughput is timed over this many seconds of batches.
pub const THROUGHPUT_SECONDS: f64 = 3.0;

/// One backend/device/precision's inference measurements.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct InferRequest {
    /// [`INFER_VERSION`].
    pub kiln_infer: u32,
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    /// The weights every row loads (safetensors, Burn's layout: verify's format).
    pub weights: PathBuf,
    pub dataset: DatasetName,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The data exported by xtask, for runners that do not read datasets themselves.
    #[serde(default)]
    pub data_file: Option<PathBuf>,
    /// The first this-many test samples are predicted for agreement (and queried).
    pub samples: usize,
    /// Where their logits go (safetensors: one F32 tensor `logits`, `[samples, classes]`).
    pub logits_out: PathBuf,
    /// The batch sizes whose query latency is measured, each a series of its own.
    pub latency_batches: Vec<usize>,
    /// A latency series is this many queries ...
    pub queries: usize,
    /// ... or, when they take longer, as many as this many seconds hold (at least
    /// [`InferRequest::MIN_QUERIES`]).
    pub series_seconds: f64,
    /// One-sample latency is measured again with each of these many clients querying the
    /// model at once (threads of the process, each sending its next query when its last is
    /// answered), for `throughput_seconds` from one start (at least [`InferRequest::MIN_QUERIES`]
    /// each).
    #[serde(default)]
    pub clients: Vec<usize>,
    /// Throughput is measured at this batch, halved until it fits the device's memory.
    pub throughput_batch: usize,
    /// For this many seconds.
    pub throughput_seconds: f64,
    /// The longest the warm-up of each series may take before it counts as not steady.
    pub warmup_cap_seconds: f64,
    /// The rule that says when a series' warm-up has settled, applied to the medians of
    /// groups of [`InferRequest::GROUP`] queries.
    #[serde(default = "kiln_timing")]
    pub timing: TimingRules,
    /// When the engine started the runner's process (Unix time, microseconds): the first
    /// prediction's time counts from it.
    #[serde(default)]
    pub spawned_at_unix_us: Option<u64>,
    /// CubeCL's caches fresh and empty for this process (a cold first prediction), removed
    /// after it; else the caches earlier processes left.
    #[serde(default)]
    pub cold_caches: bool,
    /// Seed of synthetic data (real datasets ignore it).
    #[serde(default)]
    pub seed: u64,
}

fn kiln_timing() -> TimingRules {
    TimingRules::KILN
}

impl InferRequest {
    /// The fewest queries a latency series reports percentiles over.
    pub const MIN_QUERIES: usize = 20;

    /// The most clients one request may ask for: each is a thread the runner holds.
    pub const MAX_CLIENTS: usize = 64;

    /// Queries per group while a series warms up: the steady rule compares the medians of
    /// groups, so one slow query among fast ones neither settles nor unsettles a series.
    pub const GROUP: usize = 10;

    /// Read and validate a request file.
    pub fn read(path: &Path) -> Result<InferRequest, String> {
        crate::cell::read_request(
            path,
            "an inference request",
            "`cargo xtask infer` writes them",
            InferRequest::validate,
        )
    }

    /// Whether the request can be run.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_infer != INFER_VERSION {
            return Err(format!(
                "inference request version {} is not {INFER_VERSION}; rerun `cargo xtask infer`",
                self.kiln_infer
            ));
        }
        if self.samples == 0 || self.queries < Self::MIN_QUERIES || self.throughput_batch == 0 {
            return Err(format!(
                "samples and throughput_batch must be at least 1 and queries at least {} \
                 (got {}, {} and {})",
                Self::MIN_QUERIES,
                self.samples,
                self.throughput_batch,
                self.queries
            ));
        }
        if let Some(&b) = self
            .latency_batches
            .iter()
            .find(|&&b| b == 0 || b > self.samples)
        {
            return Err(format!(
                "latency batch {b}: must be 1 to the {} samples queried",
                self.samples
            ));
        }
        if let Some(&n) = self
            .clients
            .iter()
            .find(|&&n| n == 0 || n > Self::MAX_CLIENTS)
        {
            return Err(format!(
                "{n} clients: must be 1 to {} (`cargo xtask infer --clients`)",
                Self::MAX_CLIENTS
            ));
        }
        if !self.dataset.fits(self.model.geometry()) {
            return Err(format!(
                "dataset {} does not fit model {}",
                self.dataset, self.model
            ));
        }
        Ok(())
    }

    /// `model-backend-device-precision`, a file name's stem.
    pub fn stem(&self) -> String {
        format!(
            "{}-{}-{}-{}",
            self.model,
            self.backend,
            self.device.replace([':', ','], "_"),
            self.precision
        )
    }
}

/// Percentiles of one latency series: queries of `batch` samples, each synced (its
/// predictions read back to the host, as an application reads them).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub batch: usize,
    pub queries: usize,
    pub p50_seconds: f64,
    /// MLPerf's single-stream headline.
    pub p90_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
    /// The rest of what MLPerf's loadgen reports of a series (`None` in records before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_seconds: Option<f64>,
    /// The warm-up before the series: queries until the rule called them steady.
    pub warmup_queries: usize,
    pub warmup_seconds: f64,
    /// Whether the warm-up settled before its cap (the series is timed either way).
    pub steady: bool,
}

/// One-sample queries from `clients` clients at once, each sending its next query when its
/// last is answered: every client's queries' percentiles together, and the queries answered
/// per second of the timed stretch.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Concurrent {
    pub clients: usize,
    pub queries_per_second: f64,
    /// Batch 1; its warm-up is the clients' together, in rounds of
    /// [`InferRequest::GROUP`] queries each.
    pub latency: Latency,
}

/// A series' warm-up: its queries, its seconds, and whether the rule called it steady.
pub type SeriesWarmup = (usize, f64, bool);

impl Latency {
    /// The series of `seconds` (one per query) as percentiles (by MLPerf's loadgen's index:
    /// [`crate::stats::percentile_of_sorted`]), its least, mean and most, with its warm-up.
    pub fn of(batch: usize, seconds: &[f64], warmup: SeriesWarmup) -> Option<Latency> {
        let mut sorted = seconds.to_vec();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| crate::stats::percentile_of_sorted(&sorted, p);
        Some(Latency {
            batch,
            queries: sorted.len(),
            p50_seconds: q(50.0)?,
            p90_seconds: q(90.0)?,
            p99_seconds: q(99.0)?,
            max_seconds: *sorted.last()?,
            p95_seconds: q(95.0),
            p999_seconds: q(99.9),
            min_seconds: sorted.first().copied(),
            mean_seconds: Some(sorted.iter().sum::<f64>() / sorted.len() as f64),
            warmup_queries: warmup.0,
            warmup_seconds: warmup.1,
            steady: warmup.2,
        })
    }
}

/// Samples per second at one batch size, over a stretch of back-to-back synced batches.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    pub batch: usize,
    pub batches: usize,
    pub seconds: f64,
    pub samples_per_second: f64,
    /// Larger batches tried first and why each was given up (out of memory).
    #[serde(default)]
    pub tried: Vec<String>,
    /// The warm-up before the timed batches: batches until the steady rule held on their
    /// times, as a latency series' (absent in records from before it).
    #[serde(default)]
    pub warmup_batches: Option<usize>,
    #[serde(default)]
    pub warmup_seconds: Option<f64>,
    /// Whether that warm-up settled before its cap (timed either way).
    #[serde(default)]
    pub steady: Option<bool>,
}

/// What an application pays before its first answer, counted from the process's start (the
/// runner's reading of the test set left out: an application has its input at hand).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FirstPrediction {
    /// Process start to the device open and the weights loaded onto it.
    pub ready_seconds: f64,
    /// Process start to the first one-sample prediction read back (kernels compiled and
    /// autotuned for it included).
    pub seconds: f64,
    /// Whether CubeCL's caches were fresh (`cold`), left by an earlier process (`warm`), or
    /// the backend has none (`None`).
    #[serde(default)]
    pub caches: Option<String>,
}

/// Memory to serve: the process's resident set once the model is ready, and its peak after
/// every query (compiled kernels, activations, the throughput batch).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ServeMemory {
    pub ready_rss_bytes: u64,
    pub peak_rss_bytes: u64,
}

impl ServeMemory {
    /// Bytes serving took beyond the ready runtime.
    pub fn serving_bytes(&self) -> u64 {
        self.peak_rss_bytes.saturating_sub(self.ready_rss_bytes)
    }
}

/// What one runner measured for an inference request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct InferRecord {
    pub kiln_infer: u32,
    pub model: ModelKind,
    pub backend: String,
    pub backend_version: String,
    pub device: String,
    pub device_name: String,
    pub precision: Precision,
    #[serde(default)]
    pub threads: usize,
    pub status: Status,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub first_prediction: Option<FirstPrediction>,
    #[serde(default)]
    pub latency: Vec<Latency>,
    /// One-sample latency with several clients at once, one entry per client count asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrent: Vec<Concurrent>,
    #[serde(default)]
    pub throughput: Option<Throughput>,
    /// Kiln's own cost per one-sample query: the same series with the model left out (the
    /// input's upload and a one-value read-back).
    #[serde(default)]
    pub overhead: Option<Latency>,
    #[serde(default)]
    pub memory: Option<ServeMemory>,
    /// The runner process's threads when it had served (`Record::process_threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_threads: Option<usize>,
    /// The logits of the request's samples (`logits_out`), when written.
    #[serde(default)]
    pub logits: Option<PathBuf>,
    pub samples: usize,
    #[serde(default)]
    pub notes: Vec<String>,
    pub wall_seconds: f64,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    /// Set by the engine: agreement with the reference row, the runner binary's size, and
    /// which repeat of the run this is (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<Agreement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<usize>,
    /// The Burn the runner was built against, in an A/B run (`infer --burn A --burn B`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burn: Option<crate::BurnBuild>,
}

impl InferRecord {
    /// A record of `request` with nothing measured yet (status failed until it succeeds).
    pub fn start(request: &InferRequest, backend_version: &str) -> Self {
        InferRecord {
            kiln_infer: INFER_VERSION,
            model: request.model,
            backend: request.backend.clone(),
            backend_version: backend_version.into(),
            device: request.device.clone(),
            device_name: request.device.clone(),
            precision: request.precision,
            threads: 0,
            status: Status::Failed,
            reason: None,
            first_prediction: None,
            latency: Vec::new(),
            concurrent: Vec::new(),
            throughput: None,
            overhead: None,
            memory: None,
            process_threads: None,
            logits: None,
            samples: request.samples,
            notes: Vec::new(),
            wall_seconds: 0.0,
            fingerprint: None,
            agreement: None,
            binary_bytes: None,
            repeat: None,
            burn: None,
        }
    }

    /// `backend device precision`, the row's name.
    pub fn label(&self) -> String {
        format!("{} {} {}", self.backend, self.device, self.precision)
    }

    /// The series of `clients` clients at once, if measured.
    pub fn with_clients(&self, clients: usize) -> Option<&Concurrent> {
        self.concurrent.iter().find(|c| c.clients == clients)
    }

    /// The latency series of `batch`, if measured.
    pub fn latency_at(&self, batch: usize) -> Option<&Latency> {
        self.latency.iter().find(|l| l.batch == batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentiles are indexed as MLPerf's loadgen indexes them (`sorted[n × p]`, 0-based);
    /// an empty series has none.
    #[test]
    fn latency_percentiles_are_loadgens() {
        let series: Vec<f64> = (1..=100).map(f64::from).collect();
        let l = Latency::of(1, &series, (5, 0.5, true)).unwrap();
        assert_eq!(
            (l.p50_seconds, l.p90_seconds, l.p99_seconds, l.max_seconds),
            (51.0, 91.0, 100.0, 100.0)
        );
        assert_eq!(
            (l.p95_seconds, l.p999_seconds, l.min_seconds, l.mean_seconds),
            (Some(96.0), Some(100.0), Some(1.0), Some(50.5))
        );
        let three = Latency::of(1, &[3.0, 1.0, 2.0], (0, 0.0, true)).unwrap();
        assert_eq!((three.p50_seconds, three.p90_seconds), (2.0, 3.0));
        assert_eq!(l.queries, 100);
        assert!(Latency::of(1, &[], (0, 0.0, false)).is_none());
    }

    /// Agreement counts equal top-1 classes and the largest logit difference; a logits file
    /// reads back as written, and a file of another shape is an error naming it.
    #[test]
    fn agreement_and_logits_files() {
        let reference = [0.0, 1.0, 2.0, 0.5, 0.1, 0.0];
        let row = [0.0, 1.0, 1.5, 0.5, 0.7, 0.0];
        let a = agreement("pytorch cpu f32", &reference, &row, 3, Some(&[2, 0])).unwrap();
        assert_eq!(a.samples, 2);
        assert!((a.top1 - 0.5).abs() < 1e-12, "{a:?}");
        assert!((a.max_logit_difference - 0.6).abs() < 1e-6, "{a:?}");
        // A NaN logit disagrees, and the largest difference says so.
        let nan = [0.0, 1.0, 2.0, f32::NAN, 0.1, 0.0];
        let n = agreement("pytorch cpu f32", &reference, &nan, 3, None).unwrap();
        assert!((n.top1 - 0.5).abs() < 1e-12, "{n:?}");
        assert!(n.max_logit_difference.is_infinite(), "{n:?}");
        assert_eq!(a.accuracy, Some(0.5));

        let tmp = tempfile_dir();
        let path = tmp.join("logits.safetensors");
        write_logits(&path, &row, 3).unwrap();
        assert_eq!(read_logits(&path).unwrap(), (row.to_vec(), 3));
        std::fs::write(&path, b"not a file").unwrap();
        let e = read_logits(&path).unwrap_err();
        assert!(e.contains("logits.safetensors"), "{e}");
        let _ = std::fs::remove_dir_all(tmp);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-infer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
