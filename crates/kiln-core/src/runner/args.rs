//! The runner's flags: `--cell FILE`, or the flags that build the same request.

use std::path::PathBuf;

use clap::Parser;

use kiln_results::{
    AutotuneLevel, CellRequest, DatasetName, ModelKind, Precision, Profile, TrainingLoop,
    Vocabulary, parse_duration,
};

/// The flags that train a cell: each one only sets a field of the [`CellRequest`] it builds.
const CELL_FLAGS: &[&str] = &[
    "model",
    "device",
    "api",
    "precision",
    "autotune",
    "no_autotune_cache",
    "epochs",
    "batch",
    "budget",
    "seed",
    "dataset",
    "data_dir",
    "synthetic",
    "quick",
    "eval_limit",
    "train_limit",
    "no_calibrate",
    "cached_calibration",
    "accum_steps",
    "learning_rate",
    "inject_nan_at_step",
    "bare",
    "target_accuracy",
    "training_loop",
    "devices",
];

#[derive(Parser, Debug)]
#[command(
    about = "Kiln runner: trains one benchmark cell on this backend and prints JSON lines",
    after_help = "Run by `cargo xtask bench` with --cell; can be run directly. See the README."
)]
pub(super) struct Args {
    /// Print this backend's devices as JSON and exit.
    #[arg(long)]
    pub(super) probe: bool,
    /// The whole cell as a JSON request (what xtask writes); no other cell flag may be given.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS)]
    pub(super) cell: Option<PathBuf>,
    /// Time every operation of one training step alone (what `cargo xtask explain` writes as
    /// an explain request) and print the record as one JSON line.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS, conflicts_with = "cell")]
    pub(super) explain: Option<PathBuf>,
    /// Train K steps from given weights on the first K batches and print the losses (what
    /// `cargo xtask verify` writes as a verify request) as one JSON line.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS, conflicts_with_all = ["cell", "explain"])]
    pub(super) verify: Option<PathBuf>,
    /// Model: mnist-cnn, resnet18 or resnet18-gray.
    #[arg(long)]
    pub(super) model: Option<ModelKind>,
    /// Device spec from --probe (`default` picks the backend's default device).
    #[arg(long)]
    pub(super) device: Option<String>,
    /// Graphics API of a GPU backend (wgpu: vulkan, metal, dx12, webgpu); prefixes --device.
    #[arg(long)]
    pub(super) api: Option<String>,
    /// f32, f16, bf16 (pure), amp-f16 or amp-bf16 (mixed, with dynamic loss scaling).
    #[arg(long)]
    pub(super) precision: Option<Precision>,
    /// CubeCL autotune level (minimal, balanced, extensive, full) for GPU backends.
    #[arg(long)]
    pub(super) autotune: Option<AutotuneLevel>,
    /// Neither read nor write CubeCL's on-disk autotune cache (a cold-cache cell).
    #[arg(long)]
    pub(super) no_autotune_cache: bool,
    /// Epochs (default: 20, or 3 with --quick).
    #[arg(long)]
    pub(super) epochs: Option<usize>,
    /// Batch size (default 128).
    #[arg(long)]
    pub(super) batch: Option<usize>,
    /// Training time budget of the cell: 90s, 5m, 1h or none (default: 20m, or 200s with --quick).
    #[arg(long)]
    pub(super) budget: Option<String>,
    /// Seed of initialisation, shuffling and synthetic data (default 42).
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// Dataset: mnist, fashion-mnist, fashion-mnist-sample, cifar-10, synthetic, or your own
    /// files in --data-dir: idx (IDX image/label pairs) or image-folder (a folder per class).
    #[arg(long)]
    pub(super) dataset: Option<DatasetName>,
    /// Directory holding dataset files (directly or in a subfolder named after the dataset).
    #[arg(long)]
    pub(super) data_dir: Option<PathBuf>,
    /// Train on generated data of the model's input shape.
    #[arg(long)]
    pub(super) synthetic: bool,
    /// Quick profile: embedded sample, 3 epochs, 200 s budget.
    #[arg(long)]
    pub(super) quick: bool,
    /// Evaluate at most this many test samples after each epoch.
    #[arg(long)]
    pub(super) eval_limit: Option<usize>,
    /// Train on at most this many training samples (smoke runs and tests).
    #[arg(long)]
    pub(super) train_limit: Option<usize>,
    /// Skip the GEMM calibration (no efficiency figures in the record).
    #[arg(long)]
    pub(super) no_calibrate: bool,
    /// Use the device's GEMM peak from the calibration cache when it holds one (by default it
    /// is measured afresh).
    #[arg(long)]
    pub(super) cached_calibration: bool,
    /// Gradient accumulation: run each batch as N micro-batches (N must divide the batch).
    #[arg(long)]
    pub(super) accum_steps: Option<usize>,
    /// Adam's learning rate (default 0.001).
    #[arg(long = "lr", value_name = "RATE")]
    pub(super) learning_rate: Option<f64>,
    /// Fault injection (tests): make the loss of this step NaN.
    #[arg(long, hide = true)]
    pub(super) inject_nan_at_step: Option<usize>,
    /// Measure the Kiln loop against a bare loop of the same steps instead of a full cell.
    #[arg(long)]
    pub(super) bare: bool,
    /// Record the training time until the test accuracy first reaches A (0.8 for 80%).
    #[arg(long, value_name = "A")]
    pub(super) target_accuracy: Option<f64>,
    /// Training loop: kiln (Kiln's own, the default) or learner (burn-train's Learner).
    #[arg(long = "loop", value_name = "LOOP")]
    pub(super) training_loop: Option<TrainingLoop>,
    /// Train the cell data-parallel on these devices (specs from --probe, comma-separated;
    /// the first holds the optimizer); implies --loop learner.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SPECS",
        conflicts_with = "device"
    )]
    pub(super) devices: Option<Vec<String>>,
}

impl Args {
    /// The request these flags describe (validated).
    pub(super) fn request(&self, backend: &str) -> Result<CellRequest, String> {
        let model = self.model.ok_or_else(|| {
            format!(
                "--model is required (one of {}), or --cell FILE",
                ModelKind::names()
            )
        })?;
        let mut r = CellRequest::new(model, backend, Profile::from_quick(self.quick));
        let device = match &self.devices {
            Some(list) => list.first().cloned().unwrap_or_else(|| "default".into()),
            None => self.device.clone().unwrap_or_else(|| "default".into()),
        };
        r.device = match &self.api {
            Some(api) if device == "default" => api.clone(),
            Some(api) => format!("{api}:{device}"),
            None => device,
        };
        if let Some(p) = self.precision {
            r.precision = p;
        }
        if let Some(text) = &self.budget {
            r.budget_seconds = parse_duration(text)
                .map_err(|e| format!("--budget: {e}"))?
                .map(|b| b.as_secs_f64());
        }
        r.epochs = self.epochs.unwrap_or(r.epochs);
        r.batch_size = self.batch.unwrap_or(r.batch_size);
        r.seed = self.seed.unwrap_or(r.seed);
        r.accum_steps = self.accum_steps.unwrap_or(r.accum_steps);
        r.learning_rate = self.learning_rate.unwrap_or(r.learning_rate);
        r.dataset = if self.synthetic {
            Some(DatasetName::Synthetic)
        } else {
            self.dataset
        };
        r.data_dir = self.data_dir.clone();
        r.eval_limit = self.eval_limit;
        r.train_limit = self.train_limit;
        r.autotune = self.autotune;
        r.autotune_cache = !self.no_autotune_cache;
        r.calibrate = !self.no_calibrate;
        r.recalibrate = !self.cached_calibration;
        r.bare = self.bare;
        r.target_accuracy = self.target_accuracy;
        r.inject_nan_at_step = self.inject_nan_at_step;
        r.devices = self.devices.clone().unwrap_or_default();
        r.training_loop = self.training_loop.unwrap_or(if r.devices.is_empty() {
            TrainingLoop::Kiln
        } else {
            TrainingLoop::Learner
        });
        r.validate()?;
        Ok(r)
    }
}
