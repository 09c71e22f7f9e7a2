//! The result schema: what `results.jsonl` holds (a runner's output lines are in `events.rs`).

use serde::{Deserialize, Serialize};

use crate::stats::Stats;
use crate::vocab::TrainingLoop;

/// Version of the record layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// How a cell ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Trained and timed; the numbers are valid.
    Ok,
    /// The loss became NaN or infinite: no time is reported.
    Diverged,
    /// The cell failed (error, crash, timeout); `reason` says why.
    Failed,
    /// The cell was not run (device or precision unsupported); `reason` says why.
    Skipped,
    /// The device ran out of memory (at this batch size): a result, not a failure; `reason`
    /// says where it was seen.
    OutOfMemory,
    /// Step times never settled within the warm-up cap: no time is reported (`warmup` holds
    /// the step times); a result about the backend, not a failure.
    NotSteady,
    /// The run's time ran out before this planned cell could run (the GPU kit's window);
    /// `reason` says how much was left and what the cell was planned for.
    NotReached,
}

impl Status {
    /// The status as written in records and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Diverged => "diverged",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::OutOfMemory => "out of memory",
            Status::NotSteady => "not steady",
            Status::NotReached => "not reached",
        }
    }

    /// Whether the cell ended as the matrix expects of some cells: trained, skipped for a
    /// stated reason, out of memory at its batch size, never steady within its warm-up cap, or
    /// not reached in the run's time (a run with only these exits 0, or 3 when one has no
    /// time).
    pub fn is_result(self) -> bool {
        matches!(
            self,
            Status::Ok
                | Status::Skipped
                | Status::OutOfMemory
                | Status::NotSteady
                | Status::NotReached
        )
    }
}

/// Whether a cell's epoch time was timed over whole epochs or projected from steps.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Whole epochs that began at steady state were timed.
    Measured,
    /// No whole epoch began at steady state within the budget (or the epochs asked for):
    /// the steady-state steps' times were scaled up.
    Projected,
    /// Training ended before the steady-state rule could judge (fewer steps than its two
    /// windows, within the warm-up cap): the mean of the steps after the first, scaled up,
    /// never checked steady.
    Unjudged,
    /// Not timed (failed, diverged or skipped cells).
    None,
}

/// Chunks a projection needs to be more than a low-confidence estimate.
pub const MIN_CHUNKS: usize = 3;

/// Real files or generated data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DataKind {
    Real,
    /// The user's own files (`--dataset idx|image-folder`).
    Custom,
    Synthetic,
}

/// How the epoch time in a record was obtained.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Obtained {
    pub method: Method,
    /// Whole epochs timed after the warm-up epoch.
    pub epochs: usize,
    /// Training steps inside the timed region (warm-up excluded).
    pub steps: usize,
    /// Synced chunks a projected time was computed from (a projection from fewer than
    /// [`MIN_CHUNKS`] is low confidence).
    #[serde(default)]
    pub chunks: usize,
    /// Samples in one epoch of the data actually used.
    pub epoch_samples: usize,
    /// Samples in the standard epoch every time is reported for (60,000 MNIST, 50,000 CIFAR).
    pub standard_epoch_samples: usize,
    /// The per-cell time budget, if one applied.
    pub budget_seconds: Option<f64>,
    /// True when training stopped because the budget ran out.
    pub budget_exhausted: bool,
}

mod cell_id;
mod parts;
mod replayed;
mod warmed;

pub use cell_id::*;
pub use parts::*;
pub use replayed::*;
pub use warmed::*;

/// The final record of one cell; every rendered table is derived from these.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Record {
    pub schema: u32,
    pub model: String,
    pub backend: String,
    pub device: String,
    pub device_name: String,
    pub precision: String,
    pub status: Status,
    /// Why a cell is not `ok`, or a note on how it ran.
    pub reason: Option<String>,
    pub batch_size: usize,
    /// Micro-batches per batch (gradient accumulation); 1 without accumulation.
    #[serde(default = "one")]
    pub accum_steps: usize,
    /// Samples per micro-batch (`batch_size / accum_steps`).
    #[serde(default)]
    pub micro_batch_size: usize,
    pub epochs_requested: usize,
    /// Seconds per standard epoch at steady state.
    pub epoch_seconds: Option<Stats>,
    /// The first epoch (warm-up included), scaled to the standard epoch.
    pub first_epoch_seconds: Option<f64>,
    /// The very first training step, synced (compilation, autotune, caches).
    pub first_step_seconds: Option<f64>,
    /// The warm-up to steady state: its steps and time, apart from every epoch time (records
    /// older than the steady-state rule have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Warmup>,
    pub images_per_second: Option<f64>,
    /// Peak resident set size of the runner process.
    pub peak_memory_bytes: Option<u64>,
    /// Threads of the runner process when the cell ended (`num_threads` in /proc; Linux): the
    /// backend's workers, its runtime's server threads and the runner's own (PyTorch's: torch's
    /// pools and Python's). More than its CPUs where a backend grew its pool (burn-cpu after
    /// tuning, docs/burn-cpu.md). Absent off Linux and in records before 2026-12-06.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_threads: Option<usize>,
    pub device_memory: Option<DeviceMemory>,
    pub test_accuracy: Option<f64>,
    pub test_samples: usize,
    pub train_samples: usize,
    pub obtained: Obtained,
    pub data: DataKind,
    pub dataset: String,
    pub seed: u64,
    /// Adam's learning rate the cell trained with (records older than `--lr`: the protocol's).
    #[serde(default = "crate::protocol::default_learning_rate")]
    pub learning_rate: f64,
    pub epochs: Vec<EpochSummary>,
    pub loop_overhead: Option<LoopOverhead>,
    /// Floating-point operations of one training sample (forward and backward).
    #[serde(default)]
    pub flops_per_sample: Option<u64>,
    /// `flops_per_sample` x `images_per_second`, in GFLOP/s.
    #[serde(default)]
    pub achieved_gflops: Option<f64>,
    /// The device's measured GEMM peak in this precision.
    #[serde(default)]
    pub peak: Option<Calibration>,
    #[serde(default)]
    pub device_kind: Option<crate::DeviceKind>,
    /// How the device's runtime was set up (GPU backends).
    #[serde(default)]
    pub runtime: Option<Runtime>,
    /// Loss scaling of mixed-precision (`amp-*`) cells.
    #[serde(default)]
    pub loss_scaling: Option<LossScaling>,
    /// Set when this cell ran on the CPU fallback: the cell it replaces and why
    /// (`fell back from wgpu vulkan:cpu: ...`).
    #[serde(default)]
    pub fallback_from: Option<String>,
    /// The device's GEMM peak shared by every backend on it in this run (the best any backend
    /// measured at the run's start): the denominator of "% of device peak".
    #[serde(default)]
    pub device_peak: Option<DevicePeak>,
    /// Training memory: the runtime's baseline before the first step and its peak during
    /// training.
    #[serde(default)]
    pub training_memory: Option<TrainingMemory>,
    /// How busy the machine was with other work while the cell was timed.
    #[serde(default)]
    pub noise: Option<Noise>,
    /// How far the machine drifted over the record's run: the largest change of a GEMM peak
    /// between the run's start and its end, as a share (its directory's `drift.json`,
    /// attached when the record is read; runners never write it). The floor of the row's
    /// interval for the next run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_drift: Option<f64>,
    /// The Burn the runner was built against, when the run named one (`--burn`; xtask adds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burn: Option<BurnBuild>,
    /// Which of a run's repeats of this cell the record is (`None`: a run without repeats).
    #[serde(default)]
    pub repeat: Option<Repeat>,
    /// Training time to `--target-accuracy`, when one was asked for.
    #[serde(default)]
    pub time_to_accuracy: Option<TimeToAccuracy>,
    /// Set on a row combining a cell's repeats: its `epoch_seconds` are then between runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_runs: Option<BetweenRuns>,
    pub fingerprint: Fingerprint,
    /// Seconds since the Unix epoch when the cell started.
    pub started_at: u64,
    /// Wall-clock seconds the whole cell took, data loading and evaluation included.
    pub wall_seconds: f64,
    /// The runner's command-line arguments.
    pub args: Vec<String>,
    /// The training loop when it is not Kiln's own (`--loop learner`): burn-train's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_loop: Option<TrainingLoop>,
    /// Set on a data-parallel cell (`--devices`): its devices and how burn-train spread the
    /// batches over them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel: Option<DataParallel>,
    /// Set on a cell trained on a device another machine serves (`--device remote:ws://...`):
    /// that machine, its device and the link. `fingerprint` stays the client's, where the
    /// runner, its autodiff graph and its memory were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Remote>,
    /// Every setting the cell ran with, as its request gave them (`None` in records made
    /// before Kiln kept them): a new setting is recorded without a field of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<crate::CellSettings>,
    /// Set on a replayed cell (`gpu-kit --replay`): the profile whose step times it followed.
    /// Its times are the profile's, scaled; it trained nothing and has no accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
}

fn one() -> usize {
    1
}

impl Record {
    /// Hold a record written before the steady-state rule (no `warmup`) to that rule as far
    /// as it can be: its timed samples (whole epochs after the first, or chunks after the
    /// first step) are taken as steady only when no sample is more than the rule's spike
    /// factor times another, and a projection needs two samples. Otherwise the record becomes
    /// `not steady`: its time was taken while kernels still compiled (the H200's 20-second
    /// cells: 2 chunks, 20.8 s and 1,715 s per epoch) and is never shown as an epoch time.
    /// The raw epochs stay in the record.
    pub fn judge_legacy_steadiness(&mut self) {
        if self.warmup.is_some() || self.status != Status::Ok {
            return;
        }
        let Some(stats) = &self.epoch_seconds else {
            return;
        };
        let rules = crate::TimingRules::KILN;
        let spread = stats.max / stats.min.max(f64::MIN_POSITIVE);
        let projected = self.obtained.method == Method::Projected;
        let steady = spread <= rules.steady_spike && (stats.n >= 2 || !projected);
        if steady {
            return;
        }
        let why = format!(
            "not steady: recorded before Kiln's steady-state rule, {} {} timed sample(s) from \
             {:.3} s to {:.3} s per epoch ({}): no epoch time is shown",
            if projected {
                "projected from"
            } else {
                "measured over"
            },
            stats.n,
            stats.min,
            stats.max,
            if spread > rules.steady_spike {
                format!("more than {}x apart", rules.steady_spike)
            } else {
                "one projected sample cannot show that the steps had settled".to_string()
            }
        );
        self.status = Status::NotSteady;
        self.reason = Some(match self.reason.take() {
            Some(r) => format!("{why}; {r}"),
            None => why,
        });
        self.epoch_seconds = None;
        self.images_per_second = None;
        self.achieved_gflops = None;
    }

    /// Add `note` after the reason the record already has (or make it the reason): how the
    /// run treated the cell (a raised warm-up cap, a second try).
    pub fn append_reason(&mut self, note: &str) {
        self.reason = Some(match self.reason.take() {
            Some(r) => format!("{r}; {note}"),
            None => note.to_string(),
        });
    }

    /// A record for a cell that produced no measurement (skipped or failed before training).
    pub fn not_run(cell: &CellId, status: Status, reason: impl Into<String>) -> Self {
        Record {
            schema: SCHEMA_VERSION,
            model: cell.model.clone(),
            backend: cell.backend.clone(),
            device: cell.device.clone(),
            device_name: cell.device.clone(),
            precision: cell.precision.clone(),
            status,
            reason: Some(reason.into()),
            batch_size: cell.batch_size,
            accum_steps: 1,
            micro_batch_size: 0,
            epochs_requested: 0,
            epoch_seconds: None,
            first_epoch_seconds: None,
            first_step_seconds: None,
            warmup: None,
            images_per_second: None,
            peak_memory_bytes: None,
            process_threads: None,
            device_memory: None,
            test_accuracy: None,
            test_samples: 0,
            train_samples: 0,
            obtained: Obtained {
                method: Method::None,
                epochs: 0,
                steps: 0,
                chunks: 0,
                epoch_samples: 0,
                standard_epoch_samples: 0,
                budget_seconds: None,
                budget_exhausted: false,
            },
            data: DataKind::Synthetic,
            dataset: String::new(),
            seed: 0,
            learning_rate: crate::protocol::LEARNING_RATE,
            epochs: Vec::new(),
            loop_overhead: None,
            flops_per_sample: None,
            achieved_gflops: None,
            peak: None,
            device_kind: None,
            runtime: None,
            loss_scaling: None,
            fallback_from: None,
            device_peak: None,
            training_memory: None,
            noise: None,
            run_drift: None,
            burn: None,
            repeat: None,
            time_to_accuracy: None,
            between_runs: None,
            fingerprint: Fingerprint::default(),
            started_at: 0,
            wall_seconds: 0.0,
            args: Vec::new(),
            training_loop: cell.training_loop,
            data_parallel: None,
            remote: None,
            settings: None,
            replay: None,
        }
    }

    /// What training needed beyond the ready runtime (peak − baseline), where recorded.
    pub fn training_bytes(&self) -> Option<u64> {
        self.training_memory.as_ref()?.training_bytes()
    }

    /// The cell this record belongs to.
    pub fn cell(&self) -> CellId {
        CellId {
            model: self.model.clone(),
            backend: self.backend.clone(),
            device: self.device.clone(),
            precision: self.precision.clone(),
            batch_size: self.batch_size,
            training_loop: self.training_loop,
        }
    }
}

/// Whether a failure's text says the device or the host ran out of memory: Rust's allocation
/// failure, CubeCL's and wgpu's out-of-memory errors, CUDA's, libtorch's CPU and GPU
/// allocators, PyTorch's `OutOfMemoryError` and Python's `MemoryError`.
pub fn says_out_of_memory(text: &str) -> bool {
    let lower = text.to_lowercase();
    (lower.contains("memory allocation of") && lower.contains("failed"))
        || [
            "out of memory",
            "outofmemory",
            "out_of_memory",
            "can't allocate memory",
            "cannot allocate memory",
            "failed to allocate",
            "memoryerror",
        ]
        .iter()
        .any(|k| lower.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;

    #[test]
    fn a_diverged_epoch_survives_its_json_line() {
        let e = EpochSummary {
            epoch: 1,
            seconds: 1.0,
            steps: 2,
            samples: 16,
            partial: false,
            mean_loss: f64::NAN,
            test_accuracy: None,
            rss_bytes: None,
        };
        let line = serde_json::to_string(&Event::Epoch(e)).unwrap();
        assert!(line.contains("\"mean_loss\":null"), "{line}");
        let Event::Epoch(back) = serde_json::from_str(&line).unwrap() else {
            panic!("not an epoch: {line}");
        };
        assert!(back.mean_loss.is_nan());
    }
}
