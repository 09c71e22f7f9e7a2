//! The command line: every subcommand of `cargo xtask`, with the flags only one command has.
//! A flag several commands share is defined once, in kiln-engine's `options` (or in
//! kiln-contract's `flags` where a runner or the remote server parses it too), and flattened
//! here.

#[cfg(test)]
pub mod reference;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
pub use kiln_contract::ServeArgs;
use kiln_contract::flags::{BackendArg, CellArg, DevicesArg};
pub use kiln_engine::flags::{BackendsArg, DeviceArg, ModelsArg, PlanOnlyArg, PrecisionsArg};
pub use kiln_engine::options::{BurnArgs, CommonArgs, ExplainArgs, InferArgs, OutDir, VerifyArgs};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Kiln: which Burn backend trains fastest here?"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run the whole matrix (model x backend x device x precision) and write a report.
    #[command(mut_arg("plan_only", |a| a.conflicts_with("burn")))]
    BenchAll {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        backends: BackendsArg,
        #[command(flatten)]
        models: ModelsArg,
        #[command(flatten)]
        precisions: PrecisionsArg,
        /// Finish an interrupted run: run only its cells that have no final record, with its
        /// configuration (flags given with --resume must match it).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "burn", "plan_only"])]
        resume: Option<PathBuf>,
        /// A cell for every available device of each backend, not only its default (best) one.
        #[arg(long, conflicts_with = "burn")]
        all_devices: bool,
        #[command(flatten)]
        plan_only: PlanOnlyArg,
        #[command(flatten)]
        remote: DeviceArg,
        #[command(flatten)]
        burns: BurnArgs,
    },
    /// Run one cell: from flags, or the request file --cell names (which no flag that shapes
    /// a cell may accompany: only --out and --token).
    #[command(mut_arg("backend", |a| a.required_unless_present_any(["cell", "device"])))]
    #[command(mut_arg("models", |a| a.required_unless_present("cell")))]
    #[command(mut_arg("device", |a| a.conflicts_with("burn")))]
    #[command(mut_arg("devices", |a| a.conflicts_with_all(["device", "data_parallel", "burn"])))]
    Bench {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        cell: CellArg,
        #[command(flatten)]
        backend: BackendArg,
        #[command(flatten)]
        device: DeviceArg,
        /// Graphics API of the wgpu backend: vulkan, metal, dx12 or webgpu.
        #[arg(long, conflicts_with = "burn")]
        api: Option<String>,
        #[command(flatten)]
        model: ModelsArg,
        #[command(flatten)]
        precision: PrecisionsArg,
        /// Measure the Kiln loop's overhead against a bare loop of the same steps.
        #[arg(long, conflicts_with = "burn")]
        bare: bool,
        #[command(flatten)]
        devices: DevicesArg,
        /// --devices with the backend's first N available devices.
        #[arg(long, value_name = "N", conflicts_with = "burn")]
        data_parallel: Option<usize>,
        #[command(flatten)]
        burns: BurnArgs,
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
    /// Which backend crate to embed for serving: every backend (and the PyTorch reference)
    /// loads the same weights and measures its first prediction from process start, query
    /// latency percentiles at batch 1 and 8, throughput, memory to serve and top-1 agreement
    /// with the reference (docs/inference.md). Exits 1 when a row fails.
    Infer(InferArgs),
    /// Host this machine's devices for other machines' remote cells (`--device
    /// remote:ws://HOST:PORT`) with Burn's remote server over WebSocket, and Kiln's link (this
    /// machine's fingerprint, pings) on the next port; runs until stopped (docs/remote.md).
    Serve {
        #[command(flatten)]
        serve: ServeArgs,
        #[command(flatten)]
        burns: BurnArgs,
    },
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
    /// Build the results site: every run under docs/results and the run directories given,
    /// each record checked against the record schema first, as static pages (docs/site.md).
    Site {
        #[command(flatten)]
        out: OutDir,
        /// Run directories (or folders of runs) to show besides docs/results.
        runs: Vec<PathBuf>,
    },
    /// Check a run directory and copy it under docs/results by its canonical name
    /// (DATE-CPU-TAG-WHAT, from its records), for a pull request (docs/site.md).
    Submit {
        /// The run directory (`results/<stamp>`).
        run: PathBuf,
        /// What the run was, the name's last part (default: the directory's name when it is
        /// not a bare time stamp, else `run`).
        #[arg(long)]
        what: Option<String>,
    },
    /// Build a GPU kit: what a Linux x86-64 machine with an NVIDIA driver but no Rust toolchain or
    /// network needs to run Kiln's GPU rows (the GPU runners stripped and compressed, the
    /// PyTorch script, a plan of the GPU cells and run.sh), under 64 MiB (docs/gpu.md).
    GpuKit {
        #[command(flatten)]
        out: OutDir,
        #[command(flatten)]
        backends: BackendsArg,
        #[command(flatten)]
        plan_only: PlanOnlyArg,
        /// Plan from this measured profile instead of the committed H200 one
        /// (gpu-kit/profiles/; the format: docs/gpu.md). With --replay: plan from this
        /// profile, replay the other's device (a GPU that is not the one planned for).
        #[arg(long, value_name = "FILE")]
        profile: Option<PathBuf>,
        /// Replay the kit on this CPU: its plan from this profile, scaled by its `scale`, run
        /// through the engine with each cell's steps taking the profile's times; writes the
        /// run into --out (default: a new folder under target/).
        #[arg(long, value_name = "FILE", conflicts_with_all = ["backends", "plan_only"])]
        replay: Option<PathBuf>,
        /// A kit for the next window: plan only the cells this earlier kit run's folder (its
        /// results.jsonl) has no record of but "not reached", and carry the CubeCL caches it
        /// left (DIR/cubecl-cache.tgz) for them to start from.
        #[arg(long, value_name = "DIR", conflicts_with = "replay")]
        after: Option<PathBuf>,
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
        #[command(flatten)]
        burns: BurnArgs,
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

/// The flag a clap id of the command `sub` stands for, as a user types it (`training_loop`:
/// `--loop`); none when the id is no argument of it (a group clap makes of a flattened struct).
pub fn flag_name(sub: &clap::Command, id: &str) -> Option<String> {
    let arg = sub.get_arguments().find(|a| a.get_id() == id)?;
    Some(match arg.get_long() {
        Some(long) => format!("--{long}"),
        None => format!("--{}", id.replace('_', "-")),
    })
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
        found.extend(ci_commands(&root));
        found
    }

    /// `cargo xtask ...` commands `.ci/run` runs, `\` continuations joined, a redirect or `&`
    /// cut off: CI runs them on every landing, so a renamed flag must fail here first.
    fn ci_commands(root: &std::path::Path) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        let joined = text.replace("\\\n", " ");
        joined
            .lines()
            .filter_map(|line| line.find("cargo xtask ").map(|at| &line[at..]))
            .map(|c| {
                // Shell quoting goes; the one numeric variable gets a number.
                let c = c.split(['>', '&', ';']).next().unwrap_or_default();
                let c = c.replace('"', "").replace("$port", "9000");
                (".ci/run".to_string(), c.trim().to_string())
            })
            .collect()
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

#[cfg(test)]
mod resume_tests {
    use super::*;
    use kiln_engine::bench::resume::{applied_on_resume, refused_on_resume};

    #[test]
    fn resume_applies_or_refuses_every_bench_all_flag() {
        let cli = <Cli as clap::CommandFactory>::command();
        let ids: Vec<String> = cli
            .find_subcommand("bench-all")
            .expect("bench-all")
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .filter(|id| id != "help")
            .collect();
        let applied = applied_on_resume();
        for applied in &applied {
            assert!(
                ids.iter().any(|id| id == applied),
                "{applied} is no bench-all flag"
            );
        }
        let bench_all = cli.find_subcommand("bench-all").expect("bench-all");
        let given: Vec<(String, String)> = ids
            .iter()
            .map(|id| (id.clone(), flag_name(bench_all, id).expect("an argument")))
            .collect();
        let refused = refused_on_resume(&given);
        // Exactly the flags that are not applied, each by its command-line name.
        assert_eq!(refused.len(), ids.len() - applied.len(), "{refused:?}");
        for flag in [
            "--all-devices",
            "--device",
            "--synthetic",
            "--dataset",
            "--plan-only",
        ] {
            assert!(
                refused.iter().any(|r| r == flag),
                "{flag} must be refused: {refused:?}"
            );
        }
    }

    #[test]
    fn a_burn_that_is_no_version_or_checkout_is_refused_by_its_flag() {
        use clap::Parser;
        let Err(err) = Cli::try_parse_from(["xtask", "bench-all", "--burn", "latest"]) else {
            panic!("--burn latest was taken");
        };
        let err = err.to_string();
        assert!(
            err.contains("--burn") && err.contains("path:../burn"),
            "{err}"
        );
    }
}
