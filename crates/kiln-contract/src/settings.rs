//! A cell's settings: the one home of every knob a run gives its cells (`--epochs`, `--lr`,
//! ...). Its JSON keys, defaults and rules are written once, here: xtask's run file
//! (`RunConfig`) and every cell request (`CellRequest`, which the runners read, Python's too)
//! flatten this struct, so the same keys sit at the top level of both documents.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::protocol::{LEARNING_RATE, default_learning_rate};
use crate::vocab::{AutotuneLevel, FallbackTarget, LossScalingMode, Precision, Profile};

/// The settings every cell of a run shares (a cell may still override its budget and
/// autotune level: `PlannedCell`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellSettings {
    /// Which profile's defaults apply (synthetic set sizes, GPU loop sizes).
    pub profile: Profile,
    pub epochs: usize,
    /// Training time allowed to the cell from steady state on; when it runs out the cell stops
    /// and is projected from its steady-state steps.
    pub budget_seconds: Option<f64>,
    /// The longest warm-up (compilation, autotune, caches) before steady state: a cell whose
    /// step times have not settled by then ends `not steady`, with no time.
    #[serde(default = "default_warmup_cap")]
    pub warmup_cap_seconds: f64,
    /// Loss scaling of `amp-*` cells; `None`: the precision's default (dynamic for f16, none
    /// for bf16).
    #[serde(default)]
    pub loss_scaling: Option<LossScalingMode>,
    /// Micro-batches per batch (gradient accumulation); 1 without accumulation.
    #[serde(default = "one")]
    pub accum_steps: usize,
    /// Adam's learning rate (`--lr`).
    #[serde(default = "default_learning_rate")]
    pub learning_rate: f64,
    pub seed: u64,
    /// Directory holding dataset files.
    pub data_dir: Option<PathBuf>,
    /// Evaluate at most this many test samples after each epoch.
    pub eval_limit: Option<usize>,
    /// Train on at most this many samples per epoch.
    pub train_limit: Option<usize>,
    /// CubeCL autotune level (GPU runtimes); `None`: the runtime's default.
    #[serde(default)]
    pub autotune: Option<AutotuneLevel>,
    /// False: neither read nor write CubeCL's on-disk autotune cache (compiled kernels are
    /// still cached).
    #[serde(default = "yes")]
    pub autotune_cache: bool,
    /// True: the cell starts with fresh, empty CubeCL caches (autotune results and compiled
    /// kernels), in a CubeCL environment of its own that the runner removes when it ends: a
    /// cold measurement. False: CubeCL's default environment, as earlier processes left it
    /// (the record says `warm` when that environment existed, `cold` when it did not).
    #[serde(default)]
    pub cold_caches: bool,
    /// What xtask does when the device or precision cannot run the cell.
    #[serde(default)]
    pub fallback: Option<FallbackTarget>,
    /// Measure the loop overhead against a bare loop instead of training a full cell.
    pub bare: bool,
    /// Record the training time until the test accuracy first reaches this share (0..1].
    #[serde(default)]
    pub target_accuracy: Option<f64>,
}

fn one() -> usize {
    1
}

fn default_warmup_cap() -> f64 {
    Profile::Full.warmup_cap().as_secs_f64()
}

fn yes() -> bool {
    true
}

impl CellSettings {
    /// The profile's defaults: its epochs and budget, seed 42, Adam at the article's rate.
    pub fn new(profile: Profile) -> CellSettings {
        CellSettings {
            profile,
            epochs: profile.epochs(),
            budget_seconds: profile.budget().map(|b| b.as_secs_f64()),
            warmup_cap_seconds: profile.warmup_cap().as_secs_f64(),
            loss_scaling: None,
            accum_steps: 1,
            learning_rate: LEARNING_RATE,
            seed: crate::protocol::SEED,
            data_dir: None,
            eval_limit: None,
            train_limit: None,
            autotune: None,
            autotune_cache: true,
            cold_caches: false,
            fallback: None,
            bare: false,
            target_accuracy: None,
        }
    }

    /// The rules of the settings at a batch of `batch_size` (a run checks its settings this
    /// way, once per batch size, before any cell exists; a request adds the rules of its cell).
    pub fn validate_for_batch(&self, batch_size: usize) -> Result<(), String> {
        self.validate()?;
        if batch_size == 0 {
            return Err("--batch must be at least 1 (got 0)".into());
        }
        if !batch_size.is_multiple_of(self.accum_steps) {
            return Err(format!(
                "--accum-steps {} must divide the batch size {batch_size}",
                self.accum_steps
            ));
        }
        Ok(())
    }

    /// The rules of the settings alone (a request adds those that involve its cell); the
    /// error names the flag and the value.
    pub fn validate(&self) -> Result<(), String> {
        if self.epochs == 0 {
            return Err("--epochs must be at least 1 (got 0)".into());
        }
        if self.accum_steps == 0 {
            return Err("--accum-steps 0 must be at least 1".into());
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
        if !(self.warmup_cap_seconds.is_finite() && self.warmup_cap_seconds > 0.0) {
            return Err(format!(
                "--warmup-cap {} s: give a positive duration (default {} s)",
                self.warmup_cap_seconds,
                default_warmup_cap()
            ));
        }
        if let Some(a) = self.target_accuracy
            && !(a > 0.0 && a <= 1.0)
        {
            return Err(format!(
                "--target-accuracy {a}: give a share of the test set between 0 and 1 (0.8 for 80%)"
            ));
        }
        Ok(())
    }

    /// The loss scaling a cell in `precision` trains with (only `amp-*` cells scale).
    pub fn loss_scaling_for(&self, precision: Precision) -> Option<LossScalingMode> {
        precision.is_amp().then(|| {
            self.loss_scaling
                .unwrap_or(LossScalingMode::default_for(precision))
        })
    }

    /// The warm-up cap as a duration.
    pub fn warmup_cap(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_cap_seconds)
    }

    /// The training budget as a duration.
    pub fn budget(&self) -> Option<Duration> {
        self.budget_seconds.map(Duration::from_secs_f64)
    }
}
