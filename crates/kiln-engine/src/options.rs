//! The options of a run (`bench-all`, `bench`): every setting a user gives, as flags (clap's
//! `Args`, flattened into xtask's commands) or built in code by a program that embeds the
//! engine (`CommonArgs::parse_from`, or its fields).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kiln_contract::{AutotuneLevel, CellSettings, DatasetName, FallbackTarget, TrainingLoop};

use crate::flags::{BackendsArg, BatchArg, ModelsArg, PrecisionsArg, QuickArg, ReferenceArg};

/// `--out`: the folder a command writes into, one flag for every command that writes one.
#[derive(Args, Debug, Clone, Default)]
pub struct OutDir {
    /// The folder to write into. Default: results/<UTC timestamp>/ (bench-all, bench),
    /// results/<command>-<UTC timestamp>/ (explain, verify, infer), target/site (site),
    /// target/gpu-kit (gpu-kit, replacing an earlier kit there).
    #[arg(id = "out", long = "out", value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

impl OutDir {
    /// The folder given, if any.
    pub fn get(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }
}

/// Options shared by `bench-all` and `bench`.
#[derive(Args, Debug, Clone, Default)]
pub struct CommonArgs {
    #[command(flatten)]
    pub quick: QuickArg,
    #[command(flatten)]
    pub out: OutDir,
    /// The settings every cell of the run shares (epochs, budget, seed, learning rate, ...).
    #[command(flatten)]
    pub settings: SettingFlags,
    #[command(flatten)]
    pub batch: BatchArg,
    /// Train every cell on generated data (labelled synthetic in every record).
    #[arg(long)]
    pub synthetic: bool,
    /// Dataset for every cell: mnist, fashion-mnist, fashion-mnist-sample, cifar-10, synthetic,
    /// or your own files in --data-dir: idx (IDX image/label pairs), image-folder (one
    /// sub-folder per class).
    #[arg(long)]
    pub dataset: Option<DatasetName>,
    /// Skip the GEMM calibration at the run's start (no "% of device peak" column; one process
    /// less per backend and type, as the GPU kit runs).
    #[arg(long)]
    pub no_calibration: bool,
    #[command(flatten)]
    pub repeats: RepeatsArg,
    /// Before each cell, wait until other processes use at most 5% of the CPU, for at most MAX
    /// (default 2m); a cell that still starts on a busy machine is flagged.
    #[arg(long, value_name = "MAX", num_args = 0..=1, default_missing_value = "2m", require_equals = true,
          value_parser = crate::time::parse_bound)]
    pub wait_quiet: Option<Duration>,
    /// Training loop: kiln (Kiln's own, the default) or learner (burn-train's Learner, its
    /// dataloader, loss and accuracy metrics and events). `learner` also runs each cell
    /// through Kiln's loop, so the report shows the Learner's overhead; `kiln,learner` is the
    /// same.
    #[arg(long = "loop", value_name = "LOOP", value_delimiter = ',')]
    pub training_loop: Option<Vec<TrainingLoop>>,
    #[command(flatten)]
    pub token: kiln_contract::TokenArg,
}

/// `--repeats`, the one definition `bench-all`, `bench` and `infer` share.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct RepeatsArg {
    /// Run each cell (or inference row) N times as independent processes, interleaved
    /// (A B C A B C ...); rows show the median over runs and the spread between them
    /// (default: bench-all 3, or 1 with --quick; infer 1). With --burn A --burn B the runs
    /// alternate between the Burns and pair up: bench-all's default, `auto`, adds pairs until
    /// every cell's epoch time is decided (changed, or within 3% either way), 3 to 16 pairs;
    /// infer's is 3 passes per Burn.
    #[arg(long, value_name = "N|auto", value_parser = parse_repeats)]
    pub repeats: Option<Repeats>,
}

/// `--repeats`: a number of runs, or `auto` (an A/B's pairs until decided).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeats {
    Runs(usize),
    Auto,
}

fn parse_repeats(s: &str) -> Result<Repeats, String> {
    if s == "auto" {
        return Ok(Repeats::Auto);
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(Repeats::Runs(n)),
        _ => Err(format!(
            "{s:?} is no number of runs: give 1 to 1000, or `auto` (with --burn A --burn B)"
        )),
    }
}

/// The flags that set a cell's settings, each field named as the `CellSettings` field it sets
/// (its command-line name may differ: `--lr` sets `learning_rate`); [`SettingFlags::apply`]
/// writes the given ones over a cell's settings, typed, and does not compile for a setting
/// without a flag or a flag without a setting.
#[derive(Args, Debug, Clone, Default)]
pub struct SettingFlags {
    /// Epochs per cell (default: 20, or 3 with --quick).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Training time budget per cell: 90s, 5m, 1h, 1h30m or none (default: 20m, or 200s with
    /// --quick).
    #[arg(long = "budget", value_name = "DURATION", value_parser = crate::time::parse_budget)]
    pub budget_seconds: Option<crate::time::Budget>,
    #[command(flatten)]
    pub warmup: WarmupArgs,
    /// Loss scaling of amp-* cells: dynamic (scale, skip overflowing steps) or none (default:
    /// dynamic for amp-f16, none for amp-bf16, as PyTorch advises).
    #[arg(long, value_name = "MODE")]
    pub loss_scaling: Option<kiln_contract::LossScalingMode>,
    /// Gradient accumulation: each batch as N micro-batches (N must divide the batch size).
    #[arg(long)]
    pub accum_steps: Option<usize>,
    /// Adam's learning rate (default 0.001, the article's); recorded in every row.
    #[arg(long = "lr", value_name = "RATE")]
    pub learning_rate: Option<f64>,
    #[command(flatten)]
    pub data: DataArgs,
    /// Evaluate at most this many test samples after each epoch.
    #[arg(long)]
    pub eval_limit: Option<usize>,
    /// Train on at most this many samples per epoch (smoke runs; times are still scaled to the
    /// standard epoch and labelled).
    #[arg(long)]
    pub train_limit: Option<usize>,
    /// CubeCL autotune level for GPU cells: minimal, balanced (default), extensive, full.
    #[arg(long)]
    pub autotune: Option<AutotuneLevel>,
    /// GPU cells neither read nor write CubeCL's on-disk autotune cache (a cold-cache cell).
    #[arg(
        long = "no-autotune-cache",
        num_args = 0,
        default_missing_value = "false"
    )]
    pub autotune_cache: Option<bool>,
    /// `cpu`: run a cell whose device is unavailable, or which fails on an unsupported
    /// operation or type, on the CPU instead (recorded as "fell back from ...").
    #[arg(long, value_name = "TARGET")]
    pub fallback: Option<FallbackTarget>,
    /// Record each cell's training time until its test accuracy first reaches A (0.8 for
    /// 80%), or "not reached" (evaluated after every epoch, outside the clock); `none` turns
    /// it off. Default: off with --quick; else each dataset's target (MNIST 0.98,
    /// Fashion-MNIST 0.88, CIFAR-10 0.70; docs/methodology.md).
    #[arg(long, value_name = "A|none")]
    pub target_accuracy: Option<TargetAccuracy>,
}

impl SettingFlags {
    /// `settings` with every flag given written over it. Both structs are taken apart field by
    /// field, so a flag without a setting, or a setting without a flag, does not compile
    /// (`bare` and `profile` are set by the command and `--quick`, not by a flag of their own).
    pub fn apply(&self, settings: &mut CellSettings) -> anyhow::Result<()> {
        self.data.check()?;
        let SettingFlags {
            epochs,
            budget_seconds,
            warmup:
                WarmupArgs {
                    warmup_cap_seconds,
                    cold_caches,
                },
            loss_scaling,
            accum_steps,
            learning_rate,
            data: DataArgs { seed, data_dir },
            eval_limit,
            train_limit,
            autotune,
            autotune_cache,
            fallback,
            target_accuracy,
        } = self.clone();
        fn set<T>(slot: &mut T, given: Option<T>) {
            if let Some(value) = given {
                *slot = value;
            }
        }
        let CellSettings {
            profile: _,
            bare: _,
            epochs: s_epochs,
            budget_seconds: s_budget,
            warmup_cap_seconds: s_warmup_cap,
            loss_scaling: s_loss_scaling,
            accum_steps: s_accum_steps,
            learning_rate: s_learning_rate,
            seed: s_seed,
            data_dir: s_data_dir,
            eval_limit: s_eval_limit,
            train_limit: s_train_limit,
            autotune: s_autotune,
            autotune_cache: s_autotune_cache,
            cold_caches: s_cold_caches,
            fallback: s_fallback,
            target_accuracy: s_target_accuracy,
        } = settings;
        set(s_epochs, epochs);
        set(
            s_budget,
            budget_seconds.map(|b| b.0.map(|d| d.as_secs_f64())),
        );
        set(s_warmup_cap, warmup_cap_seconds);
        set(s_loss_scaling, loss_scaling.map(Some));
        set(s_accum_steps, accum_steps);
        set(s_learning_rate, learning_rate);
        set(s_seed, seed);
        set(s_data_dir, data_dir.map(Some));
        set(s_eval_limit, eval_limit.map(Some));
        set(s_train_limit, train_limit.map(Some));
        set(s_autotune, autotune.map(Some));
        set(s_autotune_cache, autotune_cache);
        set(s_cold_caches, cold_caches.then_some(true));
        set(s_fallback, fallback.map(Some));
        set(
            s_target_accuracy,
            target_accuracy.map(|t| match t {
                TargetAccuracy::Off => None,
                TargetAccuracy::Share(a) => Some(a),
            }),
        );
        Ok(())
    }
}

/// `--target-accuracy`: a share of the test set, or `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TargetAccuracy {
    Off,
    Share(f64),
}

impl std::str::FromStr for TargetAccuracy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(TargetAccuracy::Off);
        }
        match s.parse::<f64>() {
            Ok(a) if a > 0.0 && a <= 1.0 => Ok(TargetAccuracy::Share(a)),
            _ => Err(format!(
                "{s:?}: give a share of the test set between 0 and 1 (0.8 for 80%), or none"
            )),
        }
    }
}

/// What `explain` and `verify` ask: which models, on which backends, written where.
#[derive(Args, Debug, Clone)]
pub struct AskArgs {
    #[command(flatten)]
    pub models: ModelsArg,
    #[command(flatten)]
    pub backends: BackendsArg,
    #[command(flatten)]
    pub out: OutDir,
}

/// The options of `explain` (`cargo xtask explain`'s flags).
#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The models, backends and output directory.
    #[command(flatten)]
    pub ask: AskArgs,
    #[command(flatten)]
    pub precision: PrecisionsArg,
    #[command(flatten)]
    pub batch: BatchArg,
    /// Timed runs of each op in its process (the median and the mean kept; fewer for an op
    /// slower than 4 s, at least 3).
    #[arg(long, default_value_t = 7)]
    pub runs_per_op: usize,
    #[command(flatten)]
    pub burns: BurnArgs,
    /// With --burn: runs of explain per Burn, alternating (A B, B A, ...), at least; passes are
    /// added (up to 12) while an op is significant alone but not yet across the ops, or the
    /// measured step moved and the ops named do not account for half of its change.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub passes: u64,
}

/// `--warmup-cap` and `--cold-caches`, one definition a run's settings and `infer` share.
#[derive(Args, Debug, Clone, Default)]
pub struct WarmupArgs {
    /// The longest a warm-up (compiles, autotune) may take. A training cell not steady by then
    /// records `not steady` and no time (default: 10m with --quick, else 20m); an inference
    /// series is timed anyway and says so (default: 10m, each series).
    #[arg(long = "warmup-cap", value_name = "DURATION", value_parser = crate::time::parse_bound_seconds)]
    pub warmup_cap_seconds: Option<f64>,
    /// CubeCL backends (wgpu, burn-cpu, cuda, rocm) start with fresh, empty caches (autotune
    /// and compiled kernels, in a CubeCL environment of their own, removed after): a cold
    /// measurement, a cold first prediction. Without it they use CubeCL's default environment
    /// as earlier runs left it (`warm` in the record when it existed).
    #[arg(long)]
    pub cold_caches: bool,
}

impl WarmupArgs {
    /// `infer`'s cap on each series' warm-up: `--warmup-cap`, else the quick profile's.
    pub fn infer_cap_seconds(&self) -> f64 {
        self.warmup_cap_seconds
            .unwrap_or(kiln_contract::Profile::Quick.warmup_cap().as_secs_f64())
    }
}

/// `--seed` and `--data-dir`, one definition for a run's cell settings ([`SettingFlags`]),
/// `verify` and `infer`, with the one check of the directory ([`DataArgs::check`]).
#[derive(Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// Seed of initialisation, shuffling and synthetic data (default 42).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory holding dataset files (directly or in DIR/<dataset>/).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl DataArgs {
    /// `--seed`, else the protocol's.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(kiln_contract::protocol::SEED)
    }

    /// Refuse a `--data-dir` that is not a directory, before anything runs.
    pub fn check(&self) -> anyhow::Result<()> {
        match &self.data_dir {
            Some(dir) if !dir.is_dir() => anyhow::bail!(
                "--data-dir {}: no such directory (give the folder that holds the dataset files)",
                dir.display()
            ),
            _ => Ok(()),
        }
    }
}

/// `--burn SPEC`, the one definition every command that builds runners against a Burn shares
/// (bench-all, bench, explain, verify, infer, test).
#[derive(Args, Debug, Clone, Default)]
pub struct BurnArgs {
    /// Build the runners against this Burn: a published version (0.22.1) or a local checkout
    /// (path:../burn). Twice or more: an A/B, the same work against each Burn, alternating,
    /// B compared with A (ab.md, explain-ab.md, infer-ab.md, verify.md; docs/burn-ab.md).
    /// With `test`: check that Kiln compiles against each Burn instead of running the tests.
    /// With `serve`: a server per Burn, on --port and every second port after it.
    #[arg(long, value_name = "SPEC")]
    pub burn: Vec<crate::burns::BurnSpec>,
}

/// The options of `verify` (`cargo xtask verify`'s flags).
#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// The models, backends and output directory.
    #[command(flatten)]
    pub ask: AskArgs,
    #[command(flatten)]
    pub precisions: PrecisionsArg,
    #[command(flatten)]
    pub reference: ReferenceArg,
    /// Training steps (default 20, or 8 with --quick).
    #[arg(long)]
    pub steps: Option<usize>,
    #[command(flatten)]
    pub batch: BatchArg,
    #[command(flatten)]
    pub quick: QuickArg,
    #[command(flatten)]
    pub data: DataArgs,
    /// Keep every row's final weights (safetensors) in the output directory.
    #[arg(long)]
    pub keep_weights: bool,
    #[command(flatten)]
    pub burns: BurnArgs,
}

/// The options of `infer` (`cargo xtask infer`'s flags).
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// The models, backends and output directory.
    #[command(flatten)]
    pub ask: AskArgs,
    /// Run nothing: render infer.md again from this run folder's infer.jsonl.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub precisions: PrecisionsArg,
    /// The weights every row loads (safetensors in verify's format; one model). Default: a
    /// short training on --train-on's backend, written to the run's weights/.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
    /// The backend that trains the weights.
    #[arg(long, default_value = "flex")]
    pub train_on: String,
    /// Its training steps of batch 64 (the quick dataset's 8,000 samples: 125).
    #[arg(long, default_value_t = 125)]
    pub train_steps: usize,
    #[command(flatten)]
    pub reference: ReferenceArg,
    #[command(flatten)]
    pub repeats: RepeatsArg,
    #[command(flatten)]
    pub burns: BurnArgs,
    /// Queries per latency series ...
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// ... or as many as this many seconds hold, when they take longer.
    #[arg(long, default_value_t = kiln_contract::infer::SERIES_SECONDS)]
    pub series_seconds: f64,
    /// Clients querying at once, comma-separated: one-sample latency and queries per second
    /// with each many (threads sharing the model); `--clients` alone measures none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,2,4")]
    pub clients: Vec<usize>,
    /// The batch throughput is measured at (halved until it fits).
    #[arg(long, default_value_t = 256)]
    pub throughput_batch: usize,
    /// For this many seconds.
    #[arg(long, default_value_t = kiln_contract::infer::THROUGHPUT_SECONDS)]
    pub throughput_seconds: f64,
    /// Test samples predicted for agreement.
    #[arg(long, default_value_t = 2000)]
    pub samples: usize,
    #[command(flatten)]
    pub warmup: WarmupArgs,
    #[command(flatten)]
    pub data: DataArgs,
}

impl InferArgs {
    /// Runs of every row: `--repeats`, else 1 (3 passes per Burn in an A/B, the fewest that
    /// give a verdict a spread).
    pub fn repeats(&self) -> anyhow::Result<usize> {
        let default = if self.burns.burn.is_empty() { 1 } else { 3 };
        match self.repeats.repeats {
            None => Ok(default),
            Some(Repeats::Runs(n)) => Ok(n),
            Some(Repeats::Auto) => anyhow::bail!(
                "infer --repeats auto: an inference A/B runs a fixed number of passes; give \
                 --repeats N (3 per Burn by default)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_that_is_not_there_is_refused_by_the_one_check_every_command_calls() {
        let data = DataArgs {
            seed: None,
            data_dir: Some(PathBuf::from("/nowhere/kiln-data")),
        };
        let err = data.check().unwrap_err().to_string();
        assert!(
            err.contains("--data-dir /nowhere/kiln-data: no such directory"),
            "{err}"
        );
        // A run's settings take the same check.
        let flags = SettingFlags {
            data: data.clone(),
            ..Default::default()
        };
        assert!(
            flags
                .apply(&mut CellSettings::new(kiln_contract::Profile::Quick))
                .is_err()
        );
        assert_eq!(data.seed(), kiln_contract::protocol::SEED);
        let here = DataArgs {
            seed: Some(7),
            data_dir: Some(std::env::temp_dir()),
        };
        assert!(here.check().is_ok());
        assert_eq!(here.seed(), 7);
    }
}
