//! A run's configuration, its planned cells and the request each cell becomes.

use std::path::PathBuf;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use kiln_results::{
    AutotuneLevel, CellId, CellRequest, DatasetName, FallbackTarget, ModelKind, Precision, Profile,
    TrainingLoop, parse_duration,
};

use crate::flags::{CommonArgs, TargetAccuracy};

/// Marker file of a run directory.
pub const RUN_FILE: &str = "run.json";

/// The settings every cell of a run shares.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub profile: Profile,
    pub epochs: usize,
    /// The batch sizes of the matrix (`--batch 32,128,512`), each a cell of its own; a run
    /// file written before batch size was a dimension holds one number here (`batch_size`).
    #[serde(alias = "batch_size", deserialize_with = "one_or_many")]
    pub batch_sizes: Vec<usize>,
    pub budget_seconds: Option<f64>,
    pub seed: u64,
    pub data_dir: Option<PathBuf>,
    pub eval_limit: Option<usize>,
    pub train_limit: Option<usize>,
    #[serde(default = "one")]
    pub accum_steps: usize,
    /// Adam's learning rate (`--lr`; a run file without it: the protocol's).
    #[serde(default = "learning_rate")]
    pub learning_rate: f64,
    pub bare: bool,
    /// `cpu`: a cell whose device is unavailable, or which fails on an unsupported operation or
    /// type, is run again on the CPU and recorded as a fallback.
    #[serde(default)]
    pub fallback: Option<FallbackTarget>,
    /// CubeCL autotune level for GPU cells (`None`: the runtime's default).
    #[serde(default)]
    pub autotune: Option<AutotuneLevel>,
    /// GPU cells neither read nor write the on-disk autotune cache.
    #[serde(default)]
    pub no_autotune_cache: bool,
    /// Independent runs of each cell, interleaved across the matrix.
    #[serde(default = "one")]
    pub repeats: usize,
    /// `--wait-quiet`: before each cell, wait up to this many seconds for a quiet machine.
    #[serde(default)]
    pub wait_quiet_seconds: Option<f64>,
    /// `--target-accuracy`: record the training time to this test accuracy.
    #[serde(default)]
    pub target_accuracy: Option<f64>,
    /// Without `--target-accuracy`, each cell races to its dataset's default target (the
    /// full profile; `DatasetName::default_target`).
    #[serde(default)]
    pub default_targets: bool,
    /// The training loops each cell runs through (`--loop`), Kiln's first.
    #[serde(default = "kiln_loop")]
    pub loops: Vec<TrainingLoop>,
}

fn kiln_loop() -> Vec<TrainingLoop> {
    vec![TrainingLoop::Kiln]
}

/// `--loop`: each loop once, Kiln's first; `learner` alone brings Kiln's loop along, the
/// reference its overhead is measured against.
pub(super) fn loops(given: Option<&[TrainingLoop]>) -> Vec<TrainingLoop> {
    let given = given.unwrap_or(&[TrainingLoop::Kiln]);
    let mut loops = vec![TrainingLoop::Kiln];
    if given.contains(&TrainingLoop::Learner) {
        loops.push(TrainingLoop::Learner);
    }
    loops
}

fn learning_rate() -> f64 {
    kiln_results::LEARNING_RATE
}

pub(super) fn one() -> usize {
    1
}

/// A list of numbers, or one number (a run file of an older Kiln).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(usize),
        Many(Vec<usize>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(n) => vec![n],
        OneOrMany::Many(v) => v,
    })
}

/// One cell as planned, with the dataset chosen for it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PlannedCell {
    pub id: CellId,
    pub dataset: DatasetName,
    /// Why this dataset (a fallback), if it is not the obvious one.
    pub dataset_note: Option<String>,
    /// This cell's own training budget and autotune level, when they differ from the run's
    /// (a CPU-emulated GPU gets a short budget: it is a correctness row).
    #[serde(default)]
    pub budget_seconds: Option<f64>,
    #[serde(default)]
    pub autotune: Option<AutotuneLevel>,
}

impl PlannedCell {
    /// The request a runner gets for this cell of a run configured by `cfg`.
    pub fn request(&self, cfg: &RunConfig) -> Result<CellRequest> {
        let model: ModelKind = self.id.model.parse()?;
        let mut r = CellRequest::new(model, &self.id.backend, cfg.profile);
        r.device = self.id.device.clone();
        r.precision = self.id.precision.parse()?;
        r.epochs = cfg.epochs;
        r.batch_size = self.id.batch_size;
        r.budget_seconds = self.budget_seconds.or(cfg.budget_seconds);
        r.accum_steps = cfg.accum_steps;
        r.learning_rate = cfg.learning_rate;
        r.seed = cfg.seed;
        r.dataset = Some(self.dataset);
        r.dataset_note = self.dataset_note.clone();
        r.data_dir = cfg.data_dir.clone();
        r.eval_limit = cfg.eval_limit;
        r.train_limit = cfg.train_limit;
        r.autotune = cfg.autotune.or(self.autotune);
        r.autotune_cache = !cfg.no_autotune_cache;
        r.fallback = cfg.fallback;
        r.bare = cfg.bare;
        r.training_loop = self.id.training_loop.unwrap_or_default();
        if self.id.device.contains(',') {
            r.devices = self.id.device.split(',').map(str::to_string).collect();
            r.device = r.devices[0].clone();
        }
        r.target_accuracy = cfg.target_accuracy.or_else(|| {
            cfg.default_targets
                .then(|| self.dataset.default_target())
                .flatten()
        });
        r.validate().map_err(|e| anyhow::anyhow!(e))?;
        Ok(r)
    }
}

impl RunConfig {
    /// The configuration of a run of the one cell `r` describes.
    pub fn of_request(r: &CellRequest) -> RunConfig {
        RunConfig {
            profile: r.profile,
            epochs: r.epochs,
            batch_sizes: vec![r.batch_size],
            budget_seconds: r.budget_seconds,
            seed: r.seed,
            data_dir: r.data_dir.clone(),
            eval_limit: r.eval_limit,
            train_limit: r.train_limit,
            accum_steps: r.accum_steps,
            learning_rate: r.learning_rate,
            bare: r.bare,
            fallback: r.fallback,
            autotune: r.autotune,
            no_autotune_cache: !r.autotune_cache,
            repeats: 1,
            wait_quiet_seconds: None,
            target_accuracy: r.target_accuracy,
            default_targets: false,
            loops: vec![r.training_loop],
        }
    }
}

impl PlannedCell {
    /// The planned cell `r` describes, its dataset resolved (the model's default when the
    /// request names none).
    pub fn of_request(r: &CellRequest) -> Result<PlannedCell> {
        let (dataset, note) = match r.dataset {
            Some(d) => (d, r.dataset_note.clone()),
            None => kiln_data::default_dataset(
                r.model.geometry(),
                r.profile == Profile::Quick,
                r.data_dir.as_deref(),
            )?,
        };
        Ok(PlannedCell {
            id: r.id(),
            dataset,
            dataset_note: note,
            budget_seconds: None,
            autotune: None,
        })
    }
}

/// `run.json`: what a run directory is and what it was asked to do.
#[derive(Serialize, Deserialize, Debug)]
pub struct RunFile {
    pub kiln_run: u32,
    pub created_at: u64,
    pub command: Vec<String>,
    pub config: RunConfig,
    pub cells: Vec<PlannedCell>,
}

pub(super) fn config(common: &CommonArgs, bare: bool) -> Result<(Profile, RunConfig)> {
    let profile = Profile::from_quick(common.quick);
    let budget = match &common.budget {
        Some(text) => parse_duration(text).map_err(|e| anyhow::anyhow!("--budget: {e}"))?,
        None => profile.budget(),
    };
    if let Some(dir) = &common.data_dir
        && !dir.is_dir()
    {
        bail!("--data-dir {}: no such directory", dir.display());
    }
    let cfg = RunConfig {
        profile,
        epochs: common.epochs.unwrap_or(profile.epochs()),
        batch_sizes: batch_sizes(common.batch.as_deref(), profile)?,
        budget_seconds: budget.map(|b| b.as_secs_f64()),
        seed: common.seed.unwrap_or(42),
        data_dir: common.data_dir.clone(),
        eval_limit: common.eval_limit,
        train_limit: common.train_limit,
        accum_steps: common.accum_steps.unwrap_or(1),
        learning_rate: common.learning_rate.unwrap_or(kiln_results::LEARNING_RATE),
        bare,
        fallback: common.fallback,
        autotune: common.autotune,
        no_autotune_cache: common.no_autotune_cache,
        repeats: common.repeats.unwrap_or(profile.repeats()),
        wait_quiet_seconds: wait_quiet(common)?,
        target_accuracy: match common.target_accuracy {
            Some(TargetAccuracy::Share(a)) => Some(a),
            _ => None,
        },
        default_targets: common.target_accuracy.is_none() && profile == Profile::Full,
        loops: loops(common.training_loop.as_deref()),
    };
    if cfg.repeats == 0 {
        bail!("--repeats must be at least 1 (got 0)");
    }
    // The rules of a cell are the cell request's: check them once, before any work.
    let probe = PlannedCell {
        id: CellId {
            model: ModelKind::MnistCnn.to_string(),
            backend: "any".into(),
            device: "default".into(),
            precision: Precision::F32.to_string(),
            batch_size: 0,
            training_loop: None,
        },
        dataset: DatasetName::Synthetic,
        dataset_note: None,
        budget_seconds: None,
        autotune: None,
    };
    for &batch in &cfg.batch_sizes {
        let mut one = probe.clone();
        one.id.batch_size = batch;
        one.request(&cfg)?;
    }
    Ok((profile, cfg))
}

/// `--batch 32,128,512`: the batch sizes in the order given, each once (the profile's one
/// when none is given).
pub(super) fn batch_sizes(given: Option<&[usize]>, profile: Profile) -> Result<Vec<usize>> {
    let Some(given) = given.filter(|g| !g.is_empty()) else {
        return Ok(vec![profile.batch_size()]);
    };
    for (i, b) in given.iter().enumerate() {
        if given[..i].contains(b) {
            bail!("--batch lists {b} twice; give each batch size once (e.g. --batch 32,128,512)");
        }
    }
    Ok(given.to_vec())
}

/// `--wait-quiet[=MAX]` in seconds (default two minutes).
pub(super) fn wait_quiet(common: &CommonArgs) -> Result<Option<f64>> {
    match &common.wait_quiet {
        None => Ok(None),
        Some(text) => {
            match parse_duration(text).map_err(|e| anyhow::anyhow!("--wait-quiet: {e}"))? {
                Some(d) => Ok(Some(d.as_secs_f64())),
                None => bail!("--wait-quiet: give a bound (e.g. 2m), not none"),
            }
        }
    }
}

/// The dataset for `model`, resolved once so every backend trains on the same data.
pub(super) fn dataset_for(
    model: ModelKind,
    common: &CommonArgs,
) -> Result<(DatasetName, Option<String>)> {
    if common.synthetic {
        return Ok((DatasetName::Synthetic, None));
    }
    if let Some(name) = common.dataset {
        if !name.fits(model) {
            bail!("dataset {name} does not fit model {model} (different image shape)");
        }
        kiln_data::available(name, common.data_dir.as_deref())?;
        return Ok((name, None));
    }
    Ok(kiln_data::default_dataset(
        model.geometry(),
        common.quick,
        common.data_dir.as_deref(),
    )?)
}
