//! The result schema: what a runner prints and what `results.jsonl` holds.

use serde::{Deserialize, Serialize};

use crate::stats::Stats;

/// Version of the record layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of a runner's standard output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The cell has loaded its data and is about to train.
    Start(Start),
    /// Periodic progress while training (no device sync is implied).
    Progress(Progress),
    /// One finished epoch, as measured.
    Epoch(EpochSummary),
    /// The cell's final record; exactly one per cell (Rust runners).
    Final(Box<Record>),
    /// What a runner that leaves the record to Kiln observed (the PyTorch reference): xtask
    /// turns it into the final record with [`crate::Observed::into_record`].
    Observed(Box<crate::Observed>),
}

/// What a cell announces once its data is on the device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Start {
    pub model: String,
    pub backend: String,
    pub device: String,
    pub device_name: String,
    pub precision: String,
    pub dataset: String,
    pub train_samples: usize,
    pub test_samples: usize,
    pub steps_per_epoch: usize,
    pub epochs: usize,
    pub budget_seconds: Option<f64>,
}

/// A progress tick: where training is and how long it will probably take.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Progress {
    pub epoch: usize,
    pub step: usize,
    pub steps_per_epoch: usize,
    pub elapsed_seconds: f64,
    /// Estimated seconds left in this cell's training, bounded by its budget.
    pub eta_seconds: Option<f64>,
}

/// How a cell ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
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
}

impl Status {
    /// The status as written in records and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Diverged => "diverged",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// Whether a cell's epoch time was timed over whole epochs or projected from steps.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Whole epochs after the warm-up epoch were timed.
    Measured,
    /// The budget ended before a whole non-warm-up epoch: per-step times were scaled up.
    Projected,
    /// Not timed (failed, diverged or skipped cells).
    None,
}

/// Real files or generated data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DataKind {
    Real,
    Synthetic,
}

/// How the epoch time in a record was obtained.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Obtained {
    pub method: Method,
    /// Whole epochs timed after the warm-up epoch.
    pub epochs: usize,
    /// Training steps inside the timed region (warm-up excluded).
    pub steps: usize,
    /// Samples in one epoch of the data actually used.
    pub epoch_samples: usize,
    /// Samples in the standard epoch every time is reported for (60,000 MNIST, 50,000 CIFAR).
    pub standard_epoch_samples: usize,
    /// The per-cell time budget, if one applied.
    pub budget_seconds: Option<f64>,
    /// True when training stopped because the budget ran out.
    pub budget_exhausted: bool,
}

/// Peak device allocator figures, where the backend reports them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceMemory {
    pub peak_in_use_bytes: u64,
    pub peak_reserved_bytes: u64,
}

/// One epoch as it ran (times are for the epoch actually run, not scaled).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EpochSummary {
    pub epoch: usize,
    pub seconds: f64,
    pub steps: usize,
    pub samples: usize,
    /// True when the budget cut this epoch short.
    pub partial: bool,
    /// NaN or infinite when training diverged; JSON has no such numbers, so it is written as
    /// `null` and read back as NaN.
    #[serde(deserialize_with = "null_as_nan")]
    pub mean_loss: f64,
    pub test_accuracy: Option<f64>,
}

/// The Kiln loop against a bare loop of the same operations (`--bare`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LoopOverhead {
    pub rounds: usize,
    pub steps_per_round: usize,
    pub kiln_step_seconds: Stats,
    pub bare_step_seconds: Stats,
    /// (kiln median / bare median - 1) x 100.
    pub overhead_percent: f64,
}

/// A device's measured matrix-multiply peak (a short large-GEMM calibration).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Calibration {
    /// Best GFLOP/s of the square products timed.
    pub gflops: f64,
    /// Side of the square matrices.
    pub matrix: usize,
    /// Products timed.
    pub reps: usize,
    /// True when the value came from the calibration cache.
    pub cached: bool,
}

/// How a device's runtime was set up for a cell (GPU runtimes; `None` fields were not reported).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Runtime {
    /// Graphics or compute API (`vulkan`, `metal`, `dx12`, `webgpu`, `cuda`, ...).
    pub api: Option<String>,
    /// Driver name and version as the device reports them.
    pub driver: Option<String>,
    /// True for a software implementation on the CPU (lavapipe/llvmpipe, SwiftShader, WARP):
    /// a correctness row, not a GPU result.
    pub cpu_emulated: bool,
    /// Kernel fusion compiled in and on.
    pub fusion: Option<bool>,
    /// Autotune level (`minimal`, `balanced`, `extensive`, `full`), `None` when not applicable.
    pub autotune: Option<String>,
    /// State of the on-disk autotune cache when the cell started: `warm`, `cold` or `disabled`.
    pub autotune_cache: Option<String>,
    /// Where that cache lives.
    pub autotune_cache_dir: Option<String>,
}

/// Dynamic loss scaling of an `amp-*` cell (what PyTorch's GradScaler does).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LossScaling {
    pub initial_scale: f64,
    pub final_scale: f64,
    /// Optimizer steps skipped because a gradient overflowed (inf or NaN after unscaling).
    pub skipped_steps: usize,
    /// Optimizer steps taken.
    pub applied_steps: usize,
    /// Overflow-free steps after which the scale doubles.
    pub growth_interval: usize,
}

/// Where and with what a record was produced.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Fingerprint {
    pub hostname: String,
    pub cpu_model: String,
    pub logical_cores: usize,
    pub threads: usize,
    pub memory_bytes: Option<u64>,
    pub os: String,
    pub kernel: String,
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub gpu_driver: Option<String>,
    #[serde(default)]
    pub gpu_memory_bytes: Option<u64>,
    /// Version of the Burn backend crate the runner was built with.
    #[serde(default)]
    pub backend_version: String,
    #[serde(default)]
    pub rustc_version: Option<String>,
    pub burn_version: String,
    pub kiln_version: String,
    pub kiln_commit: String,
    pub kiln_dirty: Option<bool>,
}

/// The final record of one cell; every rendered table is derived from these.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
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
    /// Seconds per standard epoch, after the warm-up epoch.
    pub epoch_seconds: Option<Stats>,
    /// The first (warm-up) epoch, scaled to the standard epoch.
    pub first_epoch_seconds: Option<f64>,
    /// The very first training step, synced (compilation, autotune, caches).
    pub first_step_seconds: Option<f64>,
    pub images_per_second: Option<f64>,
    /// Peak resident set size of the runner process.
    pub peak_memory_bytes: Option<u64>,
    pub device_memory: Option<DeviceMemory>,
    pub test_accuracy: Option<f64>,
    pub test_samples: usize,
    pub train_samples: usize,
    pub obtained: Obtained,
    pub data: DataKind,
    pub dataset: String,
    pub seed: u64,
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
    pub fingerprint: Fingerprint,
    /// Seconds since the Unix epoch when the cell started.
    pub started_at: u64,
    /// Wall-clock seconds the whole cell took, data loading and evaluation included.
    pub wall_seconds: f64,
    /// The runner's command-line arguments.
    pub args: Vec<String>,
}

fn one() -> usize {
    1
}

/// A float that JSON may hold as `null` (serde_json writes NaN and infinities so).
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Record {
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
            batch_size: 0,
            accum_steps: 1,
            micro_batch_size: 0,
            epochs_requested: 0,
            epoch_seconds: None,
            first_epoch_seconds: None,
            first_step_seconds: None,
            images_per_second: None,
            peak_memory_bytes: None,
            device_memory: None,
            test_accuracy: None,
            test_samples: 0,
            train_samples: 0,
            obtained: Obtained {
                method: Method::None,
                epochs: 0,
                steps: 0,
                epoch_samples: 0,
                standard_epoch_samples: 0,
                budget_seconds: None,
                budget_exhausted: false,
            },
            data: DataKind::Synthetic,
            dataset: String::new(),
            seed: 0,
            epochs: Vec::new(),
            loop_overhead: None,
            flops_per_sample: None,
            achieved_gflops: None,
            peak: None,
            device_kind: None,
            runtime: None,
            loss_scaling: None,
            fallback_from: None,
            fingerprint: Fingerprint::default(),
            started_at: 0,
            wall_seconds: 0.0,
            args: Vec::new(),
        }
    }

    /// The cell this record belongs to.
    pub fn cell(&self) -> CellId {
        CellId {
            model: self.model.clone(),
            backend: self.backend.clone(),
            device: self.device.clone(),
            precision: self.precision.clone(),
        }
    }
}

/// The coordinates of one cell of the matrix.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellId {
    pub model: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} {} ({})",
            self.model, self.backend, self.device, self.precision
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let line = serde_json::to_string(&Event::Epoch(e)).unwrap();
        assert!(line.contains("\"mean_loss\":null"), "{line}");
        let Event::Epoch(back) = serde_json::from_str(&line).unwrap() else {
            panic!("not an epoch: {line}");
        };
        assert!(back.mean_loss.is_nan());
    }
}
