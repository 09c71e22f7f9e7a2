//! The parts of a record that describe how it was measured and on what: memory, overhead,
//! calibration, runtime, noise, time to accuracy, repeats, the machine's fingerprint,
//! data-parallel and remote cells (the warm-up: `warmed.rs`).

use serde::{Deserialize, Serialize};

use crate::stats::Stats;

/// Peak device allocator figures, where the backend reports them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeviceMemory {
    pub peak_in_use_bytes: u64,
    pub peak_reserved_bytes: u64,
}

/// One epoch as it ran (times are for the epoch actually run, not scaled).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
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
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub mean_loss: f64,
    pub test_accuracy: Option<f64>,
    /// The runner's resident set size when the epoch's training ended (where the OS says), so
    /// that memory growing epoch after epoch shows ([`crate::memory_growth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

/// The Kiln loop against a bare loop of the same operations (`--bare`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// State of CubeCL's on-disk caches (autotune results, compiled kernels) when the cell
    /// started: `warm` (this cell ran in the CubeCL environment it used before: its kernels
    /// are compiled and tuned there), `shared` (the environment held only other processes'
    /// work: other cells', the GEMM calibration's), `cold` (it did not exist; with
    /// `--cold-caches` always) or `disabled` (autotune not cached). Records before 2026-12-05
    /// said `warm` when the cache folder held any file.
    pub autotune_cache: Option<String>,
    /// Where those caches were: the CubeCL environment's database file (records before
    /// 2026-12-05: its folder).
    pub autotune_cache_dir: Option<String>,
    /// Compute capability (CUDA) or architecture of the device, where the runtime reports it.
    #[serde(default)]
    pub compute_capability: Option<String>,
    /// True when CubeCL profiled every kernel launch, its launching thread waiting for the
    /// kernel to end, because `CUBECL_DEBUG_LOG` or `CUBECL_DEBUG_OPTION` (`debug*`,
    /// `profile*`) was set: on burn-cpu that trains about four times faster than Burn's
    /// default, queued launches (docs/burn-cpu.md). Absent in records before 2026-12-06.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_launches: Option<bool>,
}

/// Dynamic loss scaling of an `amp-*` cell (what PyTorch's GradScaler does).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LossScaling {
    /// Whether the loss was scaled (`--loss-scaling`; records before it: dynamic).
    #[serde(default = "dynamic")]
    pub mode: crate::LossScalingMode,
    pub initial_scale: f64,
    pub final_scale: f64,
    /// Optimizer steps skipped because a gradient overflowed (inf or NaN after unscaling).
    pub skipped_steps: usize,
    /// Optimizer steps taken.
    pub applied_steps: usize,
    /// Overflow-free steps after which the scale doubles.
    pub growth_interval: usize,
}

fn dynamic() -> crate::LossScalingMode {
    crate::LossScalingMode::Dynamic
}

/// The CPU's identity and the capabilities that decide training speed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DevicePeak {
    pub gflops: f64,
    /// The backend that reached it.
    pub backend: String,
    /// Side of the square matrices of that measurement.
    pub matrix: usize,
}

/// What training needed beyond what the runtime held before it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TrainingMemory {
    /// Resident set size when model, optimizer and data were ready, before the first step.
    pub baseline_bytes: Option<u64>,
    /// The highest resident set size from then to the end of training (the process's
    /// high-water mark, reset at the baseline where the OS allows it); from steady state on
    /// where the warm-up's own peak was read and reset (`warmup.peak_rss_bytes`).
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Noise {
    /// Share of the machine's CPU time (all cores) used by processes other than the cell's
    /// runner in its timed window; `None`: unknown on this OS. Never negative (records before
    /// 2026-12-05 can read below 0: the counters tick apart); a value within
    /// [`Noise::resolution`] of 0 means "quiet at this resolution", not "0".
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// The Burn a runner was built against, when a run names one (`--burn SPEC`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BurnBuild {
    /// As given: `0.22.1`, `path:../burn`.
    pub spec: String,
    /// Burn's version (a checkout's own, from its manifest).
    pub version: String,
    /// A checkout's directory, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A checkout's git revision, when it is a git work tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Whether that work tree had changes not committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty: Option<bool>,
    /// The default features of Burn's CubeCL backends (`autotune`, `fusion`) this build leaves
    /// out for every runner, as cargo resolves burn-cubecl's features with every runner
    /// feature on: a checkout that turns one off. A CubeCL record's runtime (its autotune
    /// level) then says what was asked for, not what ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without: Vec<String>,
}

impl BurnBuild {
    /// True for a published version (no checkout).
    pub fn is_release(&self) -> bool {
        self.path.is_none()
    }

    /// The label a reader elsewhere can use: [`label`](Self::label) for a published version; for
    /// a checkout its version and revision, never the path it had on the machine that ran it
    /// (`0.22.1 checkout 1a2b3c4d dirty`).
    pub fn public_label(&self) -> String {
        if self.is_release() {
            return self.label();
        }
        let revision = match (&self.revision, self.dirty) {
            (Some(r), Some(true)) => format!(" {} dirty", &r[..r.len().min(8)]),
            (Some(r), _) => format!(" {}", &r[..r.len().min(8)]),
            (None, _) => ", not a git checkout".into(),
        };
        let without = match self.without.is_empty() {
            true => String::new(),
            false => format!(" (without {})", self.without.join(", ")),
        };
        format!("{} checkout{revision}{without}", self.version)
    }

    /// `0.22.1`, or `path:../burn (0.22.1, 1a2b3c4d dirty)`, with `without autotune` where the
    /// build left a CubeCL default feature out.
    pub fn label(&self) -> String {
        let without =
            (!self.without.is_empty()).then(|| format!("without {}", self.without.join(", ")));
        match (&self.path, without) {
            (None, None) => self.spec.clone(),
            (None, Some(without)) => format!("{} ({without})", self.spec),
            (Some(_), without) => {
                let revision = match (&self.revision, self.dirty) {
                    (Some(r), Some(true)) => format!(", {} dirty", &r[..r.len().min(8)]),
                    (Some(r), _) => format!(", {}", &r[..r.len().min(8)]),
                    (None, _) => ", not a git checkout".into(),
                };
                let without = without.map_or(String::new(), |w| format!("; {w}"));
                format!("{} ({}{revision}{without})", self.spec, self.version)
            }
        }
    }
}

/// Which repeat of a cell a record is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Repeat {
    /// 1-based.
    pub index: usize,
    pub of: usize,
    /// The run the repeats belong to (its directory's name and start time): repeats combine
    /// within one run, never across runs.
    pub run: String,
}

/// How a row that combines a cell's repeats was made (derived by `kiln_report::repeats::combine`,
/// never written by a runner).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The opt-level the runner's own crates were built at: `3` in a release build; CI's test
    /// build uses `0` (Burn's CPU kernels stay at 3), and such a record's times are not release
    /// times. `None` for the PyTorch reference and records made before Kiln recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opt_level: Option<String>,
    pub burn_version: String,
    pub kiln_version: String,
    pub kiln_commit: String,
    pub kiln_dirty: Option<bool>,
}

/// The NVIDIA driver's own account of a machine's GPUs (`nvidia-smi -q`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NvidiaSmi {
    pub driver_version: Option<String>,
    /// The newest CUDA version the driver supports.
    pub cuda_version: Option<String>,
    /// One line per GPU: name, memory, bus id.
    pub gpus: Vec<String>,
    /// The whole `nvidia-smi -q` report (clocks, power limits, temperatures when it ran).
    pub query: String,
}

/// How a data-parallel cell trained on several devices.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// A float that JSON may hold as `null` (serde_json writes NaN and infinities so).
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}
