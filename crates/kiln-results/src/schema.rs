//! The result schema: what a runner prints and what `results.jsonl` holds.

use serde::{Deserialize, Serialize};

use crate::stats::Stats;
use crate::vocab::{ModelKind, Precision, TrainingLoop};

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
    /// The device ran out of memory (at this batch size): a result, not a failure; `reason`
    /// says where it was seen.
    OutOfMemory,
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
        }
    }

    /// Whether the cell ended as the matrix expects of some cells: trained, skipped for a
    /// stated reason, or out of memory at its batch size (a run with only these exits 0).
    pub fn is_result(self) -> bool {
        matches!(self, Status::Ok | Status::Skipped | Status::OutOfMemory)
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

/// Chunks a projection needs to be more than a low-confidence estimate.
pub const MIN_CHUNKS: usize = 3;

/// Real files or generated data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DataKind {
    Real,
    /// The user's own files (`--dataset idx|image-folder`).
    Custom,
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
    /// Compute capability (CUDA) or architecture of the device, where the runtime reports it.
    #[serde(default)]
    pub compute_capability: Option<String>,
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

/// The CPU's identity and the capabilities that decide training speed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CpuIdentity {
    /// `GenuineIntel`, `AuthenticAMD`, `Apple`, ...
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
    pub stepping: Option<u32>,
    /// Physical cores, where the OS reports them.
    pub physical_cores: Option<usize>,
    /// Base frequency the OS reports, in MHz.
    pub frequency_mhz: Option<u64>,
    /// The instruction sets present among those that decide training speed (AVX2, FMA,
    /// AVX-512 and its BF16/FP16/VNNI extensions, AMX; NEON, SVE, BF16 on Arm).
    pub isa: Vec<String>,
    pub l1d_bytes: Option<u64>,
    pub l2_bytes: Option<u64>,
    pub l3_bytes: Option<u64>,
}

/// The best GEMM any backend measured on a device at the start of a run, in one precision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DevicePeak {
    pub gflops: f64,
    /// The backend that reached it.
    pub backend: String,
    /// Side of the square matrices of that measurement.
    pub matrix: usize,
}

/// What training needed beyond what the runtime held before it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct TrainingMemory {
    /// Resident set size when model, optimizer and data were ready, before the first step.
    pub baseline_bytes: Option<u64>,
    /// The highest resident set size from then to the end of training (the process's
    /// high-water mark, reset at the baseline where the OS allows it).
    pub peak_bytes: Option<u64>,
    /// True when the peak was measured from the baseline on (Linux resets the high-water mark);
    /// false when it is the whole process's peak.
    #[serde(default)]
    pub peak_since_baseline: bool,
    /// The runner process's maximum resident set size as its parent saw it (`wait4`).
    #[serde(default)]
    pub parent_max_rss_bytes: Option<u64>,
}

impl TrainingMemory {
    /// Peak minus baseline: what training itself needed.
    pub fn training_bytes(&self) -> Option<u64> {
        Some(self.peak_bytes?.saturating_sub(self.baseline_bytes?))
    }
}

/// How much of the machine other processes used while a cell was timed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Noise {
    /// Share of the machine's CPU time (all cores) used by processes other than the cell's
    /// runner in its timed window; `None`: unknown on this OS. Not clamped: a value within
    /// [`Noise::resolution`] of 0 (even below it) means "quiet at this resolution", not "0".
    pub other_cpu_share: Option<f64>,
    /// The window's length in the OS's CPU-time ticks, all cores together: one tick of it is
    /// the share's resolution.
    #[serde(default)]
    pub window_ticks: Option<u64>,
    /// Share stolen by the hypervisor in that window (a virtual machine's neighbours).
    #[serde(default)]
    pub steal_share: Option<f64>,
    /// Seconds of the window measured.
    pub window_seconds: f64,
    /// What the window was (`timed epochs`, `training`, `whole cell`).
    pub window: String,
    /// The one-minute load average when the cell started.
    pub load_average_start: Option<f64>,
    /// Seconds `--wait-quiet` waited before the cell, and whether the machine was quiet then.
    #[serde(default)]
    pub waited_seconds: Option<f64>,
    #[serde(default)]
    pub quiet_before: Option<bool>,
}

/// Above this share of the machine's CPU used by others, a row is flagged as measured on a busy
/// machine (one other busy core of a 2-core machine is 0.5; of a 16-core machine 0.06).
pub const BUSY_SHARE: f64 = 0.05;

impl Noise {
    /// The share of the machine others took: other processes and the hypervisor's steal
    /// (unknown counts as none).
    pub fn busy_share(&self) -> f64 {
        self.other_cpu_share.unwrap_or(0.0).max(0.0) + self.steal_share.unwrap_or(0.0)
    }

    /// The smallest share the window can tell from none: one tick of it.
    pub fn resolution(&self) -> Option<f64> {
        self.window_ticks.filter(|&t| t > 0).map(|t| 1.0 / t as f64)
    }

    /// True when others' share is within one tick of none: quiet as far as it can tell.
    pub fn quiet_within_resolution(&self) -> bool {
        matches!(
            (self.other_cpu_share, self.resolution()),
            (Some(s), Some(r)) if s.abs() <= r
        )
    }

    /// True when others took more than [`BUSY_SHARE`] of the machine.
    pub fn busy(&self) -> bool {
        self.busy_share() > BUSY_SHARE
    }
}

/// How long training took to reach a test accuracy (`--target-accuracy`): the training time
/// of the epochs until the first whose test accuracy reached the target, the warm-up epoch
/// included, evaluation excluded, on the data actually trained on (not scaled).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TimeToAccuracy {
    pub target: f64,
    /// `None`: not reached.
    pub seconds: Option<f64>,
    /// The epoch whose evaluation first reached the target.
    pub epoch: Option<usize>,
    /// Epochs evaluated (the last may be cut by the budget).
    pub epochs_evaluated: usize,
    /// The best test accuracy seen.
    pub best: Option<f64>,
    /// True when the budget ended training before the target was reached.
    #[serde(default)]
    pub budget_exhausted: bool,
}

impl TimeToAccuracy {
    /// "not reached in 3 epochs (best 62.5%)", or `None` when reached.
    pub fn not_reached(&self) -> Option<String> {
        self.seconds.is_none().then(|| {
            format!(
                "not reached in {} epoch{}{} (best {})",
                self.epochs_evaluated,
                if self.epochs_evaluated == 1 { "" } else { "s" },
                if self.budget_exhausted {
                    ", budget exhausted"
                } else {
                    ""
                },
                self.best
                    .map(|b| format!("{:.1}%", b * 100.0))
                    .unwrap_or_else(|| "–".into())
            )
        })
    }
}

/// Which repeat of a cell a record is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// 1-based.
    pub index: usize,
    pub of: usize,
    /// The run the repeats belong to (its directory's name and start time): repeats combine
    /// within one run, never across runs.
    pub run: String,
}

/// How a row that combines a cell's repeats was made (derived by [`crate::repeats::combine`],
/// never written by a runner).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BetweenRuns {
    /// Repeats recorded.
    pub runs: usize,
    /// Repeats that trained and were timed.
    pub ok: usize,
    /// Run medians the row's statistics use (the fastest and slowest are dropped from 5 or more).
    pub used: Vec<f64>,
    /// Run medians dropped as outliers.
    pub dropped: Vec<f64>,
    /// The largest within-run coefficient of variation among the runs used.
    pub within_cv_max: f64,
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
    /// Compute capability (CUDA) or architecture of the GPU, where its runtime reports it.
    #[serde(default)]
    pub gpu_compute_capability: Option<String>,
    /// What `nvidia-smi` said of the machine's NVIDIA GPUs when the record was made (driver and
    /// CUDA versions, each GPU, and the whole `nvidia-smi -q` report); `None` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_smi: Option<NvidiaSmi>,
    /// The CPU as its identification instructions describe it (`None` in records made before
    /// Kiln recorded it, or where the architecture has no such instruction).
    #[serde(default)]
    pub cpu: Option<CpuIdentity>,
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

/// The NVIDIA driver's own account of a machine's GPUs (`nvidia-smi -q`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct NvidiaSmi {
    pub driver_version: Option<String>,
    /// The newest CUDA version the driver supports.
    pub cuda_version: Option<String>,
    /// One line per GPU: name, memory, bus id.
    pub gpus: Vec<String>,
    /// The whole `nvidia-smi -q` report (clocks, power limits, temperatures when it ran).
    pub query: String,
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
}

/// How a data-parallel cell trained on several devices.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DataParallel {
    /// The device specs, the first one holding the model and the optimizer.
    pub devices: Vec<String>,
    /// burn-train's execution strategy: `multi-device` (gradients gathered on the first
    /// device, one optimizer step) or `ddp` (an all-reduce between devices).
    pub strategy: String,
    /// Samples per optimizer step over all devices (each device takes `batch_size`).
    pub global_batch_size: usize,
}

/// A remote device as the client reached it (`cargo xtask serve` on the other machine).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Remote {
    /// Burn's remote server as given (`ws://host:port`).
    pub url: String,
    /// The device's position in the list the server hosts.
    pub index: usize,
    /// The backend the server computes with (`flex`, `cuda`, ...), and its device's spec and
    /// name there.
    pub backend: String,
    pub device: String,
    pub device_name: String,
    /// The machine that did the arithmetic, as Kiln's server reported it.
    pub fingerprint: Fingerprint,
    /// Median round trip of Kiln's own link to the server (one small request and its answer
    /// over TCP), measured before the cell.
    pub rtt_seconds: f64,
    /// Median time to read back one float through Burn's remote backend (an upload, an op and
    /// a read over the session), measured before the cell: what every sync costs at least.
    pub sync_seconds: f64,
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
            batch_size: cell.batch_size,
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
                chunks: 0,
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
            device_peak: None,
            training_memory: None,
            noise: None,
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

/// The coordinates of one cell of the matrix: model × backend × device × precision × batch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellId {
    pub model: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
    /// Samples per optimizer step; 0 in a run file written before batch size was a dimension
    /// (`--resume` gives such cells their run's one batch size).
    #[serde(default)]
    pub batch_size: usize,
    /// The training loop when it is not Kiln's own (`--loop learner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_loop: Option<TrainingLoop>,
}

impl CellId {
    /// The coordinates of `model` on `backend`'s `device` in `precision` at `batch_size`.
    pub fn new(
        model: ModelKind,
        backend: &str,
        device: &str,
        precision: Precision,
        batch_size: usize,
    ) -> CellId {
        CellId {
            model: model.to_string(),
            backend: backend.to_string(),
            device: device.to_string(),
            precision: precision.to_string(),
            batch_size,
            training_loop: None,
        }
    }

    /// The same cell trained through `training_loop`.
    pub fn with_loop(mut self, training_loop: TrainingLoop) -> CellId {
        self.training_loop = training_loop.id_part();
        self
    }
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} {} ({}, batch {}{})",
            self.model,
            self.backend,
            self.device,
            self.precision,
            self.batch_size,
            match self.training_loop {
                Some(l) => format!(", {l} loop"),
                None => String::new(),
            }
        )
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
