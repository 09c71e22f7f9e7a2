//! A run's configuration, its planned cells and the request each cell becomes.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use kiln_contract::{
    AutotuneLevel, CellId, CellRequest, CellSettings, DatasetName, ModelKind, Profile, TrainingLoop,
};

use crate::options::CommonArgs;

/// The backend whose runner plays every replayed cell (`gpu-kit --replay`): built on every
/// machine, and its steps cost nothing beside the replayed times.
pub const REPLAY_RUNNER: &str = "flex";

/// Marker file of a run directory.
pub const RUN_FILE: &str = "run.json";

/// A run's configuration: the settings every cell shares and the matrix's own dimensions.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Epochs, budget, seed, learning rate, ...: their one home is `CellSettings`, whose keys
    /// sit at the top level of run.json as they do in every cell request.
    #[serde(flatten)]
    pub cell: CellSettings,
    /// The batch sizes of the matrix (`--batch 32,128,512`), each a cell of its own; a run
    /// file written before batch size was a dimension holds one number here (`batch_size`).
    #[serde(alias = "batch_size", deserialize_with = "one_or_many")]
    pub batch_sizes: Vec<usize>,
    /// Independent runs of each cell, interleaved across the matrix.
    #[serde(default = "one")]
    pub repeats: usize,
    /// `--wait-quiet`: before each cell, wait up to this many seconds for a quiet machine.
    #[serde(default)]
    pub wait_quiet_seconds: Option<f64>,
    /// Without `--target-accuracy`, each cell races to its dataset's default target (the
    /// full profile; `DatasetName::default_target`).
    #[serde(default)]
    pub default_targets: bool,
    /// The training loops each cell runs through (`--loop`), Kiln's first.
    #[serde(default = "kiln_loop")]
    pub loops: Vec<TrainingLoop>,
    /// The Burn this run's runners were built against, when the run named one (a side of
    /// `--burn A --burn B`); every record carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burn: Option<kiln_contract::BurnBuild>,
    /// Measure each backend's GEMM peak at the run's start (`--no-calibration`: no "% of
    /// peak", one process less per backend and type; the GPU kit's runs).
    #[serde(default = "yes")]
    pub calibrate: bool,
    /// The run's time, counted from each start or resume of it (the GPU kit's window): a cell
    /// that no longer fits is recorded as not reached, and none runs past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_seconds: Option<f64>,
    /// `--repeats auto` (an A/B only): passes are added until every cell's epoch time is
    /// decided by this rule, `repeats` at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<kiln_contract::stats::Sequential>,
}

fn yes() -> bool {
    true
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
    /// This cell's own warm-up cap, when it differs from the run's (the GPU kit's plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_cap_seconds: Option<f64>,
    /// A replayed cell's step times (`gpu-kit --replay`): Kiln's replay runner plays it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<kiln_contract::replay::Replay>,
    /// The wall time the plan gives this cell, start to record (the GPU kit's plan, from
    /// measured warm-ups): its watchdog is this and a margin, and a run whose time is short
    /// of it records the cell as not reached instead of starting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_seconds: Option<f64>,
    /// Why the plan could not fit this cell in its window (the GPU kit's): its record says
    /// "not planned: ..." (status not reached), and it never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_planned: Option<String>,
}

impl PlannedCell {
    /// The request a runner gets for this cell of a run configured by `cfg`.
    pub fn request(&self, cfg: &RunConfig) -> Result<CellRequest> {
        let model: ModelKind = self.id.model.parse()?;
        let mut r = CellRequest::new(model, &self.id.backend, cfg.cell.profile);
        r.device = self.id.device.clone();
        r.precision = self.id.precision.parse()?;
        r.batch_size = self.id.batch_size;
        r.settings = cfg.cell.clone();
        r.settings.budget_seconds = self.budget_seconds.or(cfg.cell.budget_seconds);
        r.calibrate = cfg.calibrate;
        if let Some(cap) = self.warmup_cap_seconds {
            r.settings.warmup_cap_seconds = cap;
        }
        r.settings.autotune = cfg.cell.autotune.or(self.autotune);
        if cfg.default_targets && r.settings.target_accuracy.is_none() {
            r.settings.target_accuracy = self.dataset.default_target();
        }
        r.dataset = Some(self.dataset);
        r.dataset_note = self.dataset_note.clone();
        r.training_loop = self.id.training_loop.unwrap_or_default();
        r.replay = self.replay.clone();
        if self.id.device.contains(',') {
            r.devices = self.id.device.split(',').map(str::to_string).collect();
            r.device = r.devices[0].clone();
        }
        r.validate().map_err(|e| anyhow::anyhow!(e))?;
        Ok(r)
    }
}

impl RunConfig {
    /// A run of the profile's defaults, before any flag applies.
    pub fn new(profile: Profile) -> RunConfig {
        RunConfig {
            cell: CellSettings::new(profile),
            batch_sizes: vec![profile.batch_size()],
            repeats: profile.repeats(),
            wait_quiet_seconds: None,
            default_targets: profile == Profile::Full,
            loops: kiln_loop(),
            burn: None,
            calibrate: true,
            time_limit_seconds: None,
            sequential: None,
        }
    }

    /// The configuration of a run of the one cell `r` describes.
    pub fn of_request(r: &CellRequest) -> RunConfig {
        RunConfig {
            cell: r.settings.clone(),
            batch_sizes: vec![r.batch_size],
            repeats: 1,
            wait_quiet_seconds: None,
            default_targets: false,
            loops: vec![r.training_loop],
            burn: None,
            calibrate: r.calibrate,
            time_limit_seconds: None,
            sequential: None,
        }
    }

    /// Apply the flags given in `common` (each one set; `--quick` only picks the profile:
    /// `new` made its defaults). `bench-all`, `bench` and `--resume` share this one mapping
    /// from flags to settings.
    pub fn apply(&mut self, common: &CommonArgs) -> Result<()> {
        if common.quick.quick {
            self.cell.profile = Profile::Quick;
        }
        common.settings.apply(&mut self.cell)?;
        // A target given (or `none`) replaces each dataset's default target.
        if common.settings.target_accuracy.is_some() {
            self.default_targets = false;
        }
        if let Some(v) = &common.batch.batch {
            self.batch_sizes = batch_sizes(Some(v), self.cell.profile)?;
        }
        match common.repeats.repeats {
            Some(crate::options::Repeats::Runs(n)) => self.repeats = n,
            Some(crate::options::Repeats::Auto) => {
                let rule = kiln_contract::stats::Sequential::KILN;
                self.repeats = rule.max_pairs;
                self.sequential = Some(rule);
            }
            None => {}
        }
        if let Some(max) = common.wait_quiet {
            self.wait_quiet_seconds = Some(max.as_secs_f64());
        }
        if common.no_calibration {
            self.calibrate = false;
        }
        if let Some(l) = &common.training_loop {
            self.loops = loops(Some(l));
        }
        Ok(())
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
                r.settings.profile == Profile::Quick,
                r.settings.data_dir.as_deref(),
            )?,
        };
        Ok(PlannedCell {
            replay: None,
            planned_seconds: None,
            id: r.id(),
            dataset,
            dataset_note: note,
            budget_seconds: None,
            autotune: None,
            warmup_cap_seconds: None,
            not_planned: None,
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

/// Refuse `--repeats auto` outside an A/B run (`for_what`: the command): it stops when B's
/// difference from A is decided.
pub(super) fn no_auto(cfg: &RunConfig, for_what: &str) -> Result<()> {
    if cfg.sequential.is_some() {
        anyhow::bail!(
            "--repeats auto adds runs until Burn B's difference from Burn A is decided: it \
             needs --burn A --burn B; {for_what} takes --repeats N"
        );
    }
    Ok(())
}

pub(super) fn config(common: &CommonArgs, bare: bool) -> Result<(Profile, RunConfig)> {
    let profile = Profile::from_quick(common.quick.quick);
    let mut cfg = RunConfig::new(profile);
    cfg.cell.bare = bare;
    cfg.apply(common)?;
    // The settings' rules, checked once before any work, as settings: a cell's own rules
    // (its model's data, its loop) are checked when its request is made.
    for &batch in &cfg.batch_sizes {
        cfg.cell
            .validate_for_batch(batch)
            .map_err(|e| anyhow::anyhow!(e))?;
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

/// The dataset for `model`, resolved once so every backend trains on the same data.
pub(super) fn dataset_for(
    model: ModelKind,
    common: &CommonArgs,
) -> Result<(DatasetName, Option<String>)> {
    if common.synthetic {
        return Ok((DatasetName::Synthetic, None));
    }
    if let Some(name) = common.dataset {
        if !name.fits(model.geometry()) {
            bail!("dataset {name} does not fit model {model} (different image shape)");
        }
        kiln_data::available(name, common.settings.data.data_dir.as_deref())?;
        return Ok((name, None));
    }
    Ok(kiln_data::default_dataset(
        model.geometry(),
        common.quick.quick,
        common.settings.data.data_dir.as_deref(),
    )?)
}
