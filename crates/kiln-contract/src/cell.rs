//! The cell contract: what xtask asks a runner to do, as one JSON document. xtask plans
//! `CellRequest`s and writes each to a file; a runner (Rust or Python) takes `--cell FILE`. A
//! runner's human flags only build a request, and every request goes through one `validate`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ModelKind;
use crate::protocol::TimingRules;
use crate::schema::CellId;
use crate::settings::CellSettings;
use crate::vocab::{DatasetName, Precision, Profile, TrainingLoop};

/// Version of the request layout; a runner refuses a request of another version.
pub const CELL_VERSION: u32 = 1;

/// Fault injection for tests: every other step from `from` (1-based; the odd-numbered ones
/// by default) to `steps` sleeps `seconds` before its clock is read, like a backend compiling
/// a kernel every other step; `steps` past the warm-up cap makes a cell that never settles,
/// and `from` = `steps` plants one slow step (a late compile, after steady state).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SlowSteps {
    pub steps: usize,
    pub seconds: f64,
    #[serde(default = "first_step")]
    pub from: usize,
}

fn first_step() -> usize {
    1
}

impl SlowSteps {
    /// The extra time step `step` (1-based) sleeps.
    pub fn delay(&self, step: usize) -> Option<std::time::Duration> {
        (step >= self.from && step <= self.steps && (step - self.from).is_multiple_of(2))
            .then(|| std::time::Duration::from_secs_f64(self.seconds.max(0.0)))
    }
}

/// One cell of the matrix, fully specified: its coordinates, the run's settings (flattened:
/// their keys sit beside the coordinates) and what xtask adds for this cell alone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// Rust refuses an unknown key too (`unknown_key`: serde's own check does not combine with the
// flattened settings).
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct CellRequest {
    /// [`CELL_VERSION`].
    pub kiln_cell: u32,
    pub model: ModelKind,
    /// The backend's name (`flex`, `tch`, ...).
    pub backend: String,
    /// Device spec from the backend's probe, or `default`.
    pub device: String,
    pub precision: Precision,
    pub batch_size: usize,
    /// The settings of the run (epochs, budget, learning rate, seed, ...).
    #[serde(flatten)]
    pub settings: CellSettings,
    /// The dataset; `None`: the model's default for the profile.
    pub dataset: Option<DatasetName>,
    /// Why this dataset was chosen, when it is a fallback (kept in the record's notes).
    #[serde(default)]
    pub dataset_note: Option<String>,
    /// The cell's data exported by xtask, for runners that do not read datasets themselves.
    #[serde(default)]
    pub data_file: Option<PathBuf>,
    /// Measure the device's GEMM peak (for efficiency figures).
    pub calibrate: bool,
    /// Measure it again even if it is cached (the default: a cached value is used only when
    /// the request says so: `"recalibrate": false` in a request file run by hand).
    pub recalibrate: bool,
    /// Only measure the device's GEMM peak and report it (xtask's calibration at a run's
    /// start); no training.
    #[serde(default)]
    pub calibrate_only: bool,
    /// This backend's GEMM peak, measured at the run's start: the runner reports it instead
    /// of measuring again.
    #[serde(default)]
    pub given_peak: Option<crate::Calibration>,
    /// Fault injection (tests): the loss of this 1-based step is made NaN.
    #[serde(default)]
    pub inject_nan_at_step: Option<usize>,
    /// Fault injection (tests): after each epoch the runner keeps this many more bytes it
    /// never frees, a leak the record's memory per epoch must show.
    #[serde(default)]
    pub inject_leak_bytes_per_epoch: Option<u64>,
    /// Fault injection (tests): slow warm-up steps, as a JIT backend's compilation makes them.
    #[serde(default)]
    pub inject_slow_steps: Option<SlowSteps>,
    /// The training loop: Kiln's own, or burn-train's `Learner` (`--loop learner`).
    #[serde(default)]
    pub training_loop: TrainingLoop,
    /// A data-parallel cell's devices (`--devices A,B`); empty: the one `device`. The first
    /// is `device` too.
    #[serde(default)]
    pub devices: Vec<String>,
    /// When the runner reads its clocks ([`TimingRules::KILN`]).
    #[serde(default)]
    pub timing: TimingRules,
    /// A replayed cell (`gpu-kit --replay`): its steps take these measured times instead of
    /// training; only Kiln's Rust runners replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::schema::Replay>,
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
            batch_size: profile.batch_size(),
            settings: CellSettings::new(profile),
            dataset: None,
            dataset_note: None,
            data_file: None,
            calibrate: true,
            recalibrate: true,
            calibrate_only: false,
            given_peak: None,
            inject_nan_at_step: None,
            inject_leak_bytes_per_epoch: None,
            inject_slow_steps: None,
            training_loop: TrainingLoop::Kiln,
            devices: Vec::new(),
            timing: TimingRules::KILN,
            replay: None,
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
        self.settings.validate_for_batch(self.batch_size)?;
        if let Some(d) = self.dataset
            && !d.fits(self.model.geometry())
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
        if self.inject_nan_at_step == Some(0) {
            return Err("inject_nan_at_step counts steps from 1".into());
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
            if self.settings.accum_steps != 1 {
                return Err(format!(
                    "--loop learner does not split a batch into micro-batches (--accum-steps {}): \
                     burn-train accumulates whole batches instead; use --loop kiln",
                    self.settings.accum_steps
                ));
            }
            if self.settings.bare {
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
pub(crate) fn read_request<T: serde::de::DeserializeOwned + Serialize>(
    path: &Path,
    what: &str,
    writers: &str,
    validate: fn(&T) -> Result<(), String>,
) -> Result<T, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {what} from {}: {e}", path.display()))?;
    let unreadable = |e: String| {
        format!(
            "{}: not {what} this Kiln can read ({e}); {writers}",
            path.display()
        )
    };
    let given: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
    let request: T =
        serde_json::from_value(given.clone()).map_err(|e| unreadable(e.to_string()))?;
    if let Some(key) = unknown_key(&given, &request) {
        return Err(unreadable(format!("unknown field `{key}`")));
    }
    validate(&request).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(request)
}

/// The first key of `given` (a JSON object) that `parsed`, read from it, does not write back:
/// a misspelt or stale field. (serde's `deny_unknown_fields` does not combine with the
/// flattened settings; a type read this way writes every field it has.)
pub(crate) fn unknown_key<T: Serialize>(given: &serde_json::Value, parsed: &T) -> Option<String> {
    let known = serde_json::to_value(parsed).ok()?;
    unknown_keys(given, &known, "").into_iter().next()
}

/// Every key of the JSON object `given` that `known` (what was read from it, written back)
/// does not have, each after `at` (`cells[2].`); none when either is no object.
pub(crate) fn unknown_keys(
    given: &serde_json::Value,
    known: &serde_json::Value,
    at: &str,
) -> Vec<String> {
    let (Some(given), Some(known)) = (given.as_object(), known.as_object()) else {
        return Vec::new();
    };
    given
        .keys()
        .filter(|k| !known.contains_key(*k))
        .map(|k| format!("{at}{k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::AutotuneLevel;

    #[test]
    fn defaults_follow_the_profile_and_validate() {
        let quick = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        assert_eq!(quick.settings.epochs, 3);
        assert_eq!(quick.settings.budget_seconds, Some(200.0));
        assert!(quick.validate().is_ok());
        let full = CellRequest::new(ModelKind::ResNet18, "flex", Profile::Full);
        assert_eq!(full.settings.epochs, 20);
        assert!(full.validate().is_ok());
    }

    #[test]
    fn every_rule_names_its_flag() {
        let ok = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        type Change = Box<dyn Fn(&mut CellRequest)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|r| r.settings.epochs = 0), "--epochs"),
            (Box::new(|r| r.batch_size = 0), "--batch"),
            (Box::new(|r| r.settings.accum_steps = 3), "--accum-steps 3"),
            (Box::new(|r| r.settings.accum_steps = 0), "--accum-steps 0"),
            (
                Box::new(|r| r.settings.eval_limit = Some(0)),
                "--eval-limit",
            ),
            (
                Box::new(|r| r.settings.train_limit = Some(0)),
                "--train-limit",
            ),
            (
                Box::new(|r| r.settings.budget_seconds = Some(-1.0)),
                "--budget",
            ),
            (
                Box::new(|r| r.settings.budget_seconds = Some(f64::NAN)),
                "--budget",
            ),
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
                    r.settings.accum_steps = 2;
                }),
                "--accum-steps 2",
            ),
            (
                Box::new(|r| {
                    r.training_loop = TrainingLoop::Learner;
                    r.settings.bare = true;
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
        r.settings.autotune = Some(AutotuneLevel::Minimal);
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

        // A misspelt setting is refused by name, not dropped for its default.
        let mut json = serde_json::to_value(&r).unwrap();
        json["learnig_rate"] = serde_json::json!(0.01);
        std::fs::write(&path, json.to_string()).unwrap();
        let err = CellRequest::read(&path).unwrap_err();
        assert!(err.contains("unknown field `learnig_rate`"), "{err}");

        std::fs::write(&path, r#"{"kiln_cell":1,"model":"lenet"}"#).unwrap();
        let err = CellRequest::read(&path).unwrap_err();
        assert!(err.contains("cell.json") && err.contains("lenet"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
