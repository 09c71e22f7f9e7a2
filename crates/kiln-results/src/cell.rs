//! The cell contract: what xtask asks a runner to do, as one JSON document. xtask plans
//! `CellRequest`s and writes each to a file; a runner (Rust or Python) takes `--cell FILE`. A
//! runner's human flags only build a request, and every request goes through one `validate`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::protocol::{LEARNING_RATE, TimingRules, default_learning_rate};
use crate::schema::CellId;
use crate::vocab::{
    AutotuneLevel, DatasetName, FallbackTarget, ModelKind, Precision, Profile, TrainingLoop,
};

/// Version of the request layout; a runner refuses a request of another version.
pub const CELL_VERSION: u32 = 1;

/// One cell of the matrix, fully specified.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CellRequest {
    /// [`CELL_VERSION`].
    pub kiln_cell: u32,
    pub model: ModelKind,
    /// The backend's name (`flex`, `tch`, ...).
    pub backend: String,
    /// Device spec from the backend's probe, or `default`.
    pub device: String,
    pub precision: Precision,
    /// Which profile's defaults apply (synthetic set sizes, GPU loop sizes).
    pub profile: Profile,
    pub epochs: usize,
    pub batch_size: usize,
    /// Training time allowed to the cell; when it runs out the cell stops and is projected.
    pub budget_seconds: Option<f64>,
    /// Micro-batches per batch (gradient accumulation); 1 without accumulation.
    pub accum_steps: usize,
    /// Adam's learning rate (`--lr`).
    #[serde(default = "default_learning_rate")]
    pub learning_rate: f64,
    pub seed: u64,
    /// The dataset; `None`: the model's default for the profile.
    pub dataset: Option<DatasetName>,
    /// Why this dataset was chosen, when it is a fallback (kept in the record's notes).
    #[serde(default)]
    pub dataset_note: Option<String>,
    /// Directory holding dataset files.
    pub data_dir: Option<PathBuf>,
    /// The cell's data exported by xtask, for runners that do not read datasets themselves.
    #[serde(default)]
    pub data_file: Option<PathBuf>,
    /// Evaluate at most this many test samples after each epoch.
    pub eval_limit: Option<usize>,
    /// Train on at most this many samples per epoch.
    pub train_limit: Option<usize>,
    /// CubeCL autotune level (GPU runtimes); `None`: the runtime's default.
    pub autotune: Option<AutotuneLevel>,
    /// False: neither read nor write CubeCL's on-disk autotune cache (a cold-cache cell).
    pub autotune_cache: bool,
    /// What xtask does when the device or precision cannot run the cell.
    pub fallback: Option<FallbackTarget>,
    /// Measure the device's GEMM peak (for efficiency figures).
    pub calibrate: bool,
    /// Measure it again even if it is cached (the default: a cached value is used only when
    /// the user asks, `--cached-calibration`).
    pub recalibrate: bool,
    /// Only measure the device's GEMM peak and report it (xtask's calibration at a run's
    /// start); no training.
    #[serde(default)]
    pub calibrate_only: bool,
    /// This backend's GEMM peak, measured at the run's start: the runner reports it instead
    /// of measuring again.
    #[serde(default)]
    pub given_peak: Option<crate::Calibration>,
    /// Measure the loop overhead against a bare loop instead of training a full cell.
    pub bare: bool,
    /// Record the training time until the test accuracy first reaches this share (0..1].
    #[serde(default)]
    pub target_accuracy: Option<f64>,
    /// Fault injection (tests): the loss of this 1-based step is made NaN.
    #[serde(default)]
    pub inject_nan_at_step: Option<usize>,
    /// Fault injection (tests): after each epoch the runner keeps this many more bytes it
    /// never frees, a leak the record's memory per epoch must show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_leak_bytes_per_epoch: Option<u64>,
    /// The training loop: Kiln's own, or burn-train's `Learner` (`--loop learner`).
    #[serde(default)]
    pub training_loop: TrainingLoop,
    /// A data-parallel cell's devices (`--devices A,B`); empty: the one `device`. The first
    /// is `device` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// When the runner reads its clocks ([`TimingRules::KILN`]).
    #[serde(default)]
    pub timing: TimingRules,
}

impl CellRequest {
    /// A request with the profile's defaults: batch 128, its epochs and budget, seed 42, the
    /// model's default dataset, the backend's default device, f32.
    pub fn new(model: ModelKind, backend: &str, profile: Profile) -> CellRequest {
        CellRequest {
            kiln_cell: CELL_VERSION,
            model,
            backend: backend.to_string(),
            device: "default".into(),
            precision: Precision::F32,
            profile,
            epochs: profile.epochs(),
            batch_size: profile.batch_size(),
            budget_seconds: profile.budget().map(|b| b.as_secs_f64()),
            accum_steps: 1,
            learning_rate: LEARNING_RATE,
            seed: 42,
            dataset: None,
            dataset_note: None,
            data_dir: None,
            data_file: None,
            eval_limit: None,
            train_limit: None,
            autotune: None,
            autotune_cache: true,
            fallback: None,
            calibrate: true,
            recalibrate: true,
            calibrate_only: false,
            given_peak: None,
            bare: false,
            target_accuracy: None,
            inject_nan_at_step: None,
            inject_leak_bytes_per_epoch: None,
            training_loop: TrainingLoop::Kiln,
            devices: Vec::new(),
            timing: TimingRules::KILN,
        }
    }

    /// Every rule a request must satisfy, checked before any work; the error names the field
    /// (as its flag) and the value.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_cell != CELL_VERSION {
            return Err(format!(
                "cell request version {} is not {CELL_VERSION}, the one this Kiln reads; \
                 rebuild the runners (`cargo xtask doctor --build`)",
                self.kiln_cell
            ));
        }
        if self.backend.is_empty() {
            return Err("the backend name is empty".into());
        }
        if self.epochs == 0 {
            return Err("--epochs must be at least 1 (got 0)".into());
        }
        if self.batch_size == 0 {
            return Err("--batch must be at least 1 (got 0)".into());
        }
        if self.accum_steps == 0 || !self.batch_size.is_multiple_of(self.accum_steps) {
            return Err(format!(
                "--accum-steps {} must be at least 1 and divide the batch size {}",
                self.accum_steps, self.batch_size
            ));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(format!(
                "--lr {}: a learning rate is a positive number (the protocol's is {LEARNING_RATE})",
                self.learning_rate
            ));
        }
        if self.eval_limit == Some(0) || self.train_limit == Some(0) {
            return Err("--eval-limit and --train-limit must be at least 1 (got 0)".into());
        }
        if let Some(b) = self.budget_seconds
            && !(b.is_finite() && b > 0.0)
        {
            return Err(format!(
                "--budget {b} s: a budget is a positive number of seconds, or none"
            ));
        }
        if let Some(d) = self.dataset
            && !d.fits(self.model)
        {
            let (g, m) = (
                d.geometry().unwrap_or(self.model.geometry()),
                self.model.geometry(),
            );
            return Err(format!(
                "dataset {d} has {}x{}x{} images; model {} takes {}x{}x{}",
                g.channels, g.height, g.width, self.model, m.channels, m.height, m.width
            ));
        }
        if let Some(a) = self.target_accuracy
            && !(a > 0.0 && a <= 1.0)
        {
            return Err(format!(
                "--target-accuracy {a}: give a share of the test set between 0 and 1 (0.8 for 80%)"
            ));
        }
        if self.inject_nan_at_step == Some(0) {
            return Err("--inject-nan-at-step counts steps from 1".into());
        }
        if self.training_loop == TrainingLoop::Learner {
            // burn-train's loop has neither Kiln's loss scaling nor its micro-batching, and
            // `--bare` compares Kiln's loop with a bare one.
            if self.precision.is_amp() {
                return Err(format!(
                    "--loop learner trains in pure precisions only (f32, f16, bf16): burn-train \
                     has no loss scaling for {}; use --loop kiln",
                    self.precision
                ));
            }
            if self.accum_steps != 1 {
                return Err(format!(
                    "--loop learner does not split a batch into micro-batches (--accum-steps {}): \
                     burn-train accumulates whole batches instead; use --loop kiln",
                    self.accum_steps
                ));
            }
            if self.bare {
                return Err(
                    "--bare measures Kiln's loop; it does not combine with --loop learner".into(),
                );
            }
        }
        if !self.devices.is_empty() {
            if self.devices.len() < 2 {
                return Err(format!(
                    "--devices {}: a data-parallel cell needs at least two devices",
                    self.devices.join(",")
                ));
            }
            if self.training_loop != TrainingLoop::Learner {
                return Err(
                    "--devices trains through burn-train's execution strategies: it \
                            needs --loop learner"
                        .into(),
                );
            }
            if self.devices.first() != Some(&self.device) {
                return Err(format!(
                    "--devices {}: the first device must be the cell's device {}",
                    self.devices.join(","),
                    self.device
                ));
            }
        }
        Ok(())
    }

    /// The training budget as a duration.
    pub fn budget(&self) -> Option<Duration> {
        self.budget_seconds.map(Duration::from_secs_f64)
    }

    /// The cell's coordinates in the matrix.
    pub fn id(&self) -> CellId {
        let device = if self.devices.is_empty() {
            self.device.clone()
        } else {
            self.devices.join(",")
        };
        CellId::new(
            self.model,
            &self.backend,
            &device,
            self.precision,
            self.batch_size,
        )
        .with_loop(self.training_loop)
    }

    /// Read and validate a request file.
    pub fn read(path: &Path) -> Result<CellRequest, String> {
        read_request(
            path,
            "a cell request",
            "requests are written by `cargo xtask bench-all --plan-only` and by every run (its \
             cells/ folder)",
            CellRequest::validate,
        )
    }

    /// Write the request as pretty JSON.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }
}

/// A JSON request file of `what` ("a cell request", "an explain request") that passes
/// `validate`, with errors that name the file and say who writes such files (`writers`).
pub(crate) fn read_request<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    writers: &str,
    validate: fn(&T) -> Result<(), String>,
) -> Result<T, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {what} from {}: {e}", path.display()))?;
    let request = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not {what} this Kiln can read ({e}); {writers}",
            path.display()
        )
    })?;
    validate(&request).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_profile_and_validate() {
        let quick = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        assert_eq!(quick.epochs, 3);
        assert_eq!(quick.budget_seconds, Some(200.0));
        assert!(quick.validate().is_ok());
        let full = CellRequest::new(ModelKind::ResNet18, "flex", Profile::Full);
        assert_eq!(full.epochs, 20);
        assert!(full.validate().is_ok());
    }

    #[test]
    fn every_rule_names_its_flag() {
        let ok = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        type Change = Box<dyn Fn(&mut CellRequest)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|r| r.epochs = 0), "--epochs"),
            (Box::new(|r| r.batch_size = 0), "--batch"),
            (Box::new(|r| r.accum_steps = 3), "--accum-steps 3"),
            (Box::new(|r| r.accum_steps = 0), "--accum-steps 0"),
            (Box::new(|r| r.eval_limit = Some(0)), "--eval-limit"),
            (Box::new(|r| r.train_limit = Some(0)), "--train-limit"),
            (Box::new(|r| r.budget_seconds = Some(-1.0)), "--budget"),
            (Box::new(|r| r.budget_seconds = Some(f64::NAN)), "--budget"),
            (
                Box::new(|r| r.dataset = Some(DatasetName::Cifar10)),
                "dataset cifar-10",
            ),
            (Box::new(|r| r.kiln_cell = 99), "version 99"),
            (Box::new(|r| r.inject_nan_at_step = Some(0)), "from 1"),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.precision = Precision::AmpBF16;
                }),
                "--loop learner trains in pure precisions",
            ),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.accum_steps = 2;
                }),
                "--accum-steps 2",
            ),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.bare = true;
                }),
                "--bare",
            ),
            (
                Box::new(|r| r.devices = vec!["default".into(), "default".into()]),
                "needs --loop learner",
            ),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.devices = vec!["default".into()];
                }),
                "at least two devices",
            ),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.devices = vec!["cpu".into(), "cpu".into()];
                }),
                "must be the cell's device default",
            ),
        ];
        for (change, words) in cases {
            let mut r = ok.clone();
            change(&mut r);
            let err = r.validate().unwrap_err();
            assert!(err.contains(words), "{words:?} not in {err:?}");
        }
    }

    #[test]
    fn a_request_round_trips_through_its_file() {
        let dir = std::env::temp_dir().join(format!("kiln-cell-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cell.json");
        let mut r = CellRequest::new(ModelKind::ResNet18Gray, "tch", Profile::Full);
        r.precision = Precision::AmpBF16;
        r.autotune = Some(AutotuneLevel::Minimal);
        r.write(&path).unwrap();
        assert_eq!(CellRequest::read(&path).unwrap(), r);
        // A learner cell over two devices is another cell than the Kiln-loop one.
        let mut dp = r.clone();
        dp.precision = Precision::F32;
        dp.training_loop = TrainingLoop::Learner;
        dp.device = "cuda:0".into();
        dp.devices = vec!["cuda:0".into(), "cuda:1".into()];
        dp.write(&path).unwrap();
        let back = CellRequest::read(&path).unwrap();
        assert_eq!(back, dp);
        assert_eq!(back.id().device, "cuda:0,cuda:1");
        assert_eq!(back.id().training_loop, Some(TrainingLoop::Learner));
        assert_eq!(r.id().training_loop, None);

        std::fs::write(&path, r#"{"kiln_cell":1,"model":"lenet"}"#).unwrap();
        let err = CellRequest::read(&path).unwrap_err();
        assert!(err.contains("cell.json") && err.contains("lenet"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
