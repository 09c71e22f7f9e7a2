//! The command line: every subcommand and flag of `cargo xtask`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kiln_results::{
    AutotuneLevel, DatasetName, FallbackTarget, ModelKind, Precision, TrainingLoop,
};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Kiln: which Burn backend trains fastest here?"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

/// Options shared by `bench-all` and `bench`.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Quick profile: embedded Fashion-MNIST sample, 3 epochs, 200 s per cell.
    #[arg(long)]
    pub quick: bool,
    /// Run directory (default: results/<UTC timestamp>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Epochs per cell (default: 20, or 3 with --quick).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Batch size, or several comma-separated (`32,128,512`: each a cell of the matrix, with
    /// images/s drawn against batch size; default: 128).
    #[arg(long, value_delimiter = ',')]
    pub batch: Option<Vec<usize>>,
    /// Training time budget per cell: 90s, 5m, 1h, 1h30m or none (default: 20m, or 200s with
    /// --quick).
    #[arg(long, value_name = "DURATION", value_parser = crate::time::parse_budget)]
    pub budget: Option<crate::time::Budget>,
    /// Seed of initialisation, shuffling and synthetic data (default 42).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory holding dataset files (directly or in DIR/<dataset>/).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Train every cell on generated data (labelled synthetic in every record).
    #[arg(long)]
    pub synthetic: bool,
    /// Dataset for every cell: mnist, fashion-mnist, fashion-mnist-sample, cifar-10, synthetic,
    /// or your own files in --data-dir: idx (IDX image/label pairs), image-folder (one
    /// sub-folder per class).
    #[arg(long)]
    pub dataset: Option<DatasetName>,
    /// Evaluate at most this many test samples after each epoch.
    #[arg(long)]
    pub eval_limit: Option<usize>,
    /// Gradient accumulation: each batch as N micro-batches (N must divide the batch size).
    #[arg(long)]
    pub accum_steps: Option<usize>,
    /// Adam's learning rate (default 0.001, the article's); recorded in every row.
    #[arg(long = "lr", value_name = "RATE")]
    pub learning_rate: Option<f64>,
    /// Train on at most this many samples per epoch (smoke runs; times are still scaled to the
    /// standard epoch and labelled).
    #[arg(long)]
    pub train_limit: Option<usize>,
    /// `cpu`: run a cell whose device is unavailable, or which fails on an unsupported
    /// operation or type, on the CPU instead (recorded as "fell back from ...").
    #[arg(long, value_name = "TARGET")]
    pub fallback: Option<FallbackTarget>,
    /// CubeCL autotune level for GPU cells: minimal, balanced (default), extensive, full.
    #[arg(long)]
    pub autotune: Option<AutotuneLevel>,
    /// GPU cells neither read nor write CubeCL's on-disk autotune cache (a cold-cache cell).
    #[arg(long)]
    pub no_autotune_cache: bool,
    /// The longest a cell may warm up (compile, autotune) before its step times are steady;
    /// a cell not steady by then records `not steady` and no time (default: 10m with --quick,
    /// else 20m).
    #[arg(long, value_name = "DURATION", value_parser = crate::time::parse_bound)]
    pub warmup_cap: Option<Duration>,
    /// Skip the GEMM calibration at the run's start (no "% of device peak" column; one process
    /// less per backend and type, as the GPU kit runs).
    #[arg(long)]
    pub no_calibration: bool,
    /// Loss scaling of amp-* cells: dynamic (scale, skip overflowing steps) or none (default:
    /// dynamic for amp-f16, none for amp-bf16, as PyTorch advises).
    #[arg(long, value_name = "MODE")]
    pub loss_scaling: Option<kiln_results::LossScalingMode>,
    /// Run each cell N times as independent processes, interleaved across the matrix
    /// (A B C A B C ...); rows show the median over runs and the spread between them
    /// (default: 3, or 1 with --quick).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub repeats: Option<usize>,
    /// Before each cell, wait until other processes use at most 5% of the CPU, for at most MAX
    /// (default 2m); a cell that still starts on a busy machine is flagged.
    #[arg(long, value_name = "MAX", num_args = 0..=1, default_missing_value = "2m", require_equals = true,
          value_parser = crate::time::parse_bound)]
    pub wait_quiet: Option<Duration>,
    /// Record each cell's training time until its test accuracy first reaches A (0.8 for
    /// 80%), or "not reached" (evaluated after every epoch, outside the clock); `none` turns
    /// it off. Default: off with --quick; else each dataset's target (MNIST 0.98,
    /// Fashion-MNIST 0.88, CIFAR-10 0.70; docs/methodology.md).
    #[arg(long, value_name = "A|none")]
    pub target_accuracy: Option<TargetAccuracy>,
    /// Training loop: kiln (Kiln's own, the default) or learner (burn-train's Learner, its
    /// dataloader, loss and accuracy metrics and events). `learner` also runs each cell
    /// through Kiln's loop, so the report shows the Learner's overhead; `kiln,learner` is the
    /// same.
    #[arg(long = "loop", value_name = "LOOP", value_delimiter = ',')]
    pub training_loop: Option<Vec<TrainingLoop>>,
    /// The token of the remote servers (`--device remote:...`), or KILN_REMOTE_TOKEN. It goes
    /// to the runners in their environment, never into a run directory.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
}

/// `cargo xtask serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The backend that computes: flex, ndarray, wgpu, or cuda, rocm (built with the
    /// remote server in a target directory of their own).
    #[arg(long)]
    pub backend: String,
    /// Its devices, comma-separated (`cargo xtask doctor`); clients pick one by position
    /// (`#0`, `#1`). Default: the backend's default device.
    #[arg(long, value_delimiter = ',', value_name = "SPECS")]
    pub devices: Vec<String>,
    /// Port of Burn's server; Kiln's link listens on the next one.
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on (default 127.0.0.1, this machine only); any other needs a
    /// token.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// The token clients must give, or KILN_REMOTE_TOKEN.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
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

#[derive(Subcommand)]
pub enum Cmd {
    /// Run the whole matrix (model x backend x device x precision) and write a report.
    BenchAll {
        #[command(flatten)]
        common: CommonArgs,
        /// Backends, comma-separated (default: every buildable default backend).
        #[arg(long, value_delimiter = ',')]
        backends: Option<Vec<String>>,
        /// Models, comma-separated (default: mnist-cnn; all three without --quick).
        #[arg(long, value_delimiter = ',')]
        models: Option<Vec<ModelKind>>,
        /// Precisions, comma-separated (default: f32).
        #[arg(long, value_delimiter = ',')]
        precisions: Option<Vec<Precision>>,
        /// Finish an interrupted run: run only its cells that have no final record, with its
        /// configuration (flags given with --resume must match it).
        #[arg(long, value_name = "DIR", conflicts_with = "out")]
        resume: Option<PathBuf>,
        /// A cell for every available device of each backend, not only its default (best) one.
        #[arg(long)]
        all_devices: bool,
        /// Plan only: write run.json and one request per cell (cells/*.json) into the run
        /// directory, print the plan, run nothing (`--resume DIR` runs it later).
        #[arg(long, conflicts_with = "resume")]
        plan_only: bool,
        /// Remote devices to add to the matrix, comma-separated: remote:ws://HOST:PORT or
        /// remote:ws://HOST:PORT#INDEX (`cargo xtask serve` on that machine; docs/remote.md).
        #[arg(long = "device", value_delimiter = ',', value_name = "SPECS")]
        remote: Vec<String>,
        /// Build the runners against this Burn: a published version (0.22.1) or a local
        /// checkout (path:../burn). Twice or more: an A/B run, the same cells alternating
        /// between the Burns (3 runs each by default), compared in ab.md (docs/burn-ab.md).
        #[arg(long, value_name = "SPEC", conflicts_with_all = ["resume", "plan_only", "all_devices", "remote"])]
        burn: Vec<crate::burn::BurnSpec>,
    },
    /// Run one cell.
    Bench {
        #[command(flatten)]
        common: CommonArgs,
        /// The whole cell as a request file (from `bench-all --plan-only` or a run's cells/);
        /// no other cell flag may be given with it, only --out.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["backend", "model", "device", "api", "precision", "bare", "devices", "data_parallel"])]
        cell: Option<PathBuf>,
        /// Backend name (implied by a remote device).
        #[arg(long, required_unless_present_any = ["cell", "device"])]
        backend: Option<String>,
        /// Device spec (see `cargo xtask doctor`); default: the backend's default device. A
        /// device another machine serves is remote:ws://HOST:PORT[#INDEX] (docs/remote.md).
        #[arg(long)]
        device: Option<String>,
        /// Graphics API of the wgpu backend: vulkan, metal, dx12 or webgpu.
        #[arg(long)]
        api: Option<String>,
        /// Model: mnist-cnn, resnet18, resnet18-gray.
        #[arg(long, required_unless_present = "cell")]
        model: Option<ModelKind>,
        /// f32, f16, bf16 (pure) or amp-f16, amp-bf16 (mixed precision with loss scaling).
        #[arg(long, default_value = "f32")]
        precision: Precision,
        /// Measure the Kiln loop's overhead against a bare loop of the same steps.
        #[arg(long)]
        bare: bool,
        /// Train the cell data-parallel on these devices (specs from `cargo xtask doctor`,
        /// comma-separated; the first holds the optimizer) through burn-train, and on the first
        /// alone for the scaling efficiency; implies --loop learner.
        #[arg(long, value_delimiter = ',', value_name = "SPECS", conflicts_with_all = ["device", "data_parallel"])]
        devices: Option<Vec<String>>,
        /// --devices with the backend's first N available devices.
        #[arg(long, value_name = "N")]
        data_parallel: Option<usize>,
        /// The cell against another Burn (a version or path:DIR); twice or more: an A/B run of
        /// this cell, as `bench-all --burn` (docs/burn-ab.md).
        #[arg(long, value_name = "SPEC", conflicts_with_all = ["cell", "device", "api", "bare", "devices", "data_parallel"])]
        burn: Vec<crate::burn::BurnSpec>,
    },
    /// Time every operation of one training step alone on each backend (forward, input and
    /// weight gradients, optimizer update) against the measured step and PyTorch's same ops;
    /// writes explain.jsonl, explain.md and a stacked-bar chart (docs/explain.md).
    Explain(ExplainArgs),
    /// Check that every backend computes the same training: each trains the same model from
    /// the same initial weights on the same batches for K steps; prints the loss curves' and
    /// final weights' deviation from the reference with a pass/warn/fail verdict
    /// (docs/verify.md). Exits 1 when a row fails.
    Verify(VerifyArgs),
    /// Host this machine's devices for other machines' remote cells (`--device
    /// remote:ws://HOST:PORT`) with Burn's remote server over WebSocket, and Kiln's link (this
    /// machine's fingerprint, pings) on the next port; runs until stopped (docs/remote.md).
    Serve(ServeArgs),
    /// Show every backend: built or not, its devices, available or not and why.
    Doctor {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Build the runners first.
        #[arg(long)]
        build: bool,
    },
    /// Re-render reports from results files or run directories (merged into one table).
    Report {
        /// results.jsonl files or run directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Baseline row for speed-ups: a prefix of backend/device/precision (default: flex/cpu/f32).
        #[arg(long)]
        baseline: Option<String>,
        /// Exit 1 unless each of these backends has rows that trained with a finite positive
        /// epoch time, accuracy above chance and memory measured (CI's smoke runs).
        #[arg(long, value_delimiter = ',', value_name = "BACKENDS")]
        expect: Vec<String>,
        #[command(flatten)]
        outputs: ReportOutputs,
    },
    /// Build a GPU kit: what a Linux x86-64 machine with an NVIDIA driver but no Rust toolchain or
    /// network needs to run Kiln's GPU rows (the GPU runners stripped and compressed, the
    /// PyTorch script, a plan of the GPU cells and run.sh), under 64 MiB (docs/gpu.md).
    GpuKit {
        /// The kit's folder (default: target/gpu-kit; an earlier kit there is replaced).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The runners to build and carry (default: cuda,wgpu); a runner left out is skipped
        /// there with that reason.
        #[arg(long, value_delimiter = ',')]
        backends: Option<Vec<String>>,
        /// Print the kit's plan (every cell in the order it runs, with its time cap) and stop.
        #[arg(long)]
        plan_only: bool,
    },
    /// Let CubeCL's GPU runtimes (the cuda and rocm rows) build without downloading LLVM: put a
    /// system LLVM (Debian 12: llvm-22-dev, libpolly-22-dev, libzstd-dev; liblld-22-dev for
    /// rocm) where their build looks for the LLVM 23 it would fetch from github.com
    /// (docs/gpu.md).
    SetupCubeclLlvm {
        /// The system's llvm-config (default: the newest /usr/lib/llvm-N, else PATH's).
        #[arg(long)]
        llvm_config: Option<PathBuf>,
        /// Remove the stand-in again (CubeCL's next build downloads its LLVM).
        #[arg(long)]
        undo: bool,
    },
    /// Install torch==2.9.0 from PyPI into a virtual environment (libtorch for the tch backend,
    /// PyTorch for the reference runner).
    SetupLibtorch {
        /// The virtual environment (default: ~/.cache/kiln/torch-2.9.0).
        #[arg(long)]
        venv: Option<PathBuf>,
        /// The Python that creates it.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Run the test suite: the workspace's tests, then the libtorch tests when libtorch is set
    /// up (the README's test command; CI runs exactly this).
    Test {
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// Download a dataset (mnist, fashion-mnist, cifar-10) with checksum verification.
    FetchData {
        /// Dataset name.
        name: String,
        /// Destination (default: datasets/cache/<name>/).
        #[arg(long)]
        dest: Option<PathBuf>,
        /// Mirror to download from instead of the manifest's (files under this URL).
        #[arg(long)]
        base_url: Option<String>,
    },
}

/// The files `cargo xtask report` writes besides the Markdown it prints: a flag per format of
/// `kiln_report::export::FORMATS` (taken from there, so a new format needs no edit here), and
/// the SVG charts.
#[derive(Debug, Default)]
pub struct ReportOutputs {
    /// Each format asked for, with its file.
    pub files: Vec<(&'static kiln_report::export::Format, PathBuf)>,
    /// The SVG charts: FILE.svg for one model, FILE-<model>.svg for several.
    pub svg: Option<PathBuf>,
}

const SVG_HELP: &str =
    "Also draw SVG bar charts: FILE.svg for one model, FILE-<model>.svg for several";

impl clap::FromArgMatches for ReportOutputs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(ReportOutputs {
            files: kiln_report::export::FORMATS
                .iter()
                .filter_map(|f| m.get_one::<PathBuf>(f.flag).map(|p| (f, p.clone())))
                .collect(),
            svg: m.get_one::<PathBuf>("svg").cloned(),
        })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ReportOutputs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let file = |flag: &'static str, help: &'static str| {
            clap::Arg::new(flag)
                .long(flag)
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help(help)
        };
        kiln_report::export::FORMATS
            .iter()
            .fold(cmd, |cmd, f| cmd.arg(file(f.flag, f.help)))
            .arg(file("svg", SVG_HELP))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The flag a clap id of `subcommand` stands for, as a user types it (`training_loop`: `--loop`).
pub fn flag_name(subcommand: &str, id: &str) -> String {
    use clap::CommandFactory;
    Cli::command()
        .find_subcommand(subcommand)
        .and_then(|c| c.get_arguments().find(|a| a.get_id() == id).cloned())
        .and_then(|a| a.get_long().map(|l| format!("--{l}")))
        .unwrap_or_else(|| format!("--{}", id.replace('_', "-")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `cargo xtask ...` commands in the README and docs: fenced lines (with `\` continuations
    /// joined) and inline code spans. Usage synopses (`[--flag]`, `a|b`) are not commands.
    fn documented_commands() -> Vec<(String, String)> {
        let root = crate::workspace::workspace_root();
        let mut files = vec![root.join("README.md")];
        let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let mut fenced = false;
            let mut pending = String::new();
            for line in text.lines() {
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    continue;
                }
                let mut candidates = Vec::new();
                if fenced {
                    pending.push_str(line.trim());
                    if let Some(head) = pending.strip_suffix('\\') {
                        pending = format!("{} ", head.trim_end());
                        continue;
                    }
                    candidates.push(std::mem::take(&mut pending));
                } else {
                    candidates.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
                }
                for c in candidates {
                    // A shell comment is not part of the command.
                    let c = c.split(" #").next().unwrap_or_default().trim().to_string();
                    if c.starts_with("cargo xtask ") && !c.contains('[') && !c.contains('|') {
                        found.push((name.clone(), c));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn every_xtask_command_in_the_readme_and_docs_parses() {
        let commands = documented_commands();
        assert!(
            commands.len() >= 20,
            "only {} commands found",
            commands.len()
        );
        for (file, command) in &commands {
            let words = command.split_whitespace().skip(2);
            let args = std::iter::once("cargo-xtask").chain(words);
            if let Err(e) = Cli::try_parse_from(args) {
                panic!("{file}: `{command}` does not parse:\n{e}");
            }
        }
    }
}

/// `cargo xtask explain`'s flags.
#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// Models, comma-separated.
    #[arg(
        long = "model",
        alias = "models",
        value_delimiter = ',',
        default_value = "mnist-cnn"
    )]
    pub models: Vec<ModelKind>,
    /// Backends, comma-separated (default: every buildable default backend).
    #[arg(long, value_delimiter = ',')]
    pub backends: Option<Vec<String>>,
    /// f32, f16 or bf16 (pure precisions only).
    #[arg(long, default_value = "f32")]
    pub precision: Precision,
    /// Batch size (default 128, the protocol's).
    #[arg(long, default_value_t = 128)]
    pub batch: usize,
    /// Timed runs per op (median kept; fewer for an op slower than 4 s, at least 3).
    #[arg(long, default_value_t = 7)]
    pub repeats: usize,
    /// Build the runners against this Burn: a published version or path:DIR (see bench-all).
    /// Twice or more: each Burn's op table side by side, and the ops whose time moved beyond
    /// their noise, in explain-ab.md (docs/burn-ab.md).
    #[arg(long, value_name = "SPEC")]
    pub burn: Vec<crate::burn::BurnSpec>,
    /// With --burn: runs of explain per Burn, alternating (A, B, A, B, ...).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub passes: u64,
    /// Output directory (default: results/explain-<UTC timestamp>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `cargo xtask verify`'s flags.
#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Models, comma-separated.
    #[arg(
        long = "model",
        alias = "models",
        value_delimiter = ',',
        default_value = "mnist-cnn"
    )]
    pub models: Vec<ModelKind>,
    /// Backends, comma-separated (default: every buildable default backend; a CPU-emulated
    /// adapter such as lavapipe takes part).
    #[arg(long, value_delimiter = ',')]
    pub backends: Option<Vec<String>>,
    /// Precisions, comma-separated (default: every precision each device supports).
    #[arg(long, value_delimiter = ',')]
    pub precisions: Option<Vec<Precision>>,
    /// The backend (and precision) every row is compared with: BACKEND or BACKEND:PRECISION.
    #[arg(long, default_value = "flex:f32")]
    pub reference: String,
    /// Training steps (default 20, or 8 with --quick).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Batch size (default 32, or 16 with --quick).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Fewer, smaller steps: a check in a few minutes.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the initial weights (and of synthetic data).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Directory holding dataset files (as for bench-all).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep every row's final weights (safetensors) in the output directory.
    #[arg(long)]
    pub keep_weights: bool,
    /// Output directory (default: results/verify-<UTC timestamp>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
}
