//! The GPU kit's plan: which cells `run.sh` runs, in which order, each with its warm-up cap,
//! its budget and the time it is given, all from a measured profile of the device (the
//! committed H200 one unless another is named), and the time the whole plan is given. The same
//! plan, scaled, is what `gpu-kit --replay` runs on this CPU.

use std::time::Duration;

use anyhow::{Context, Result};
use kiln_contract::replay::{ReplayProfile, StepTimes};
use kiln_contract::{ModelKind, Precision, Record, Status, TimingRules, TrainingLoop};

use crate::bench::PlanEntry;

/// A kit cell: its coordinates and its training budget from steady state, in seconds.
pub struct KitCell {
    pub model: ModelKind,
    pub backend: &'static str,
    pub device: &'static str,
    pub precision: Precision,
    pub training_loop: TrainingLoop,
    pub budget: u64,
}

const fn cell(
    model: ModelKind,
    backend: &'static str,
    device: &'static str,
    precision: Precision,
    training_loop: TrainingLoop,
    budget: u64,
) -> KitCell {
    KitCell {
        model,
        backend,
        device,
        precision,
        training_loop,
        budget,
    }
}

use ModelKind::{MnistCnn, ResNet18};
use Precision::{AmpBF16, BF16, F32};
use TrainingLoop::{Kiln, Learner};

/// The cells `run.sh` runs, in the order of what the matrix is for: Burn's f32 rows of every
/// model (cuda, then wgpu), one PyTorch f32 reference per model, Burn's bf16 and amp-bf16 rows
/// (WGSL has no bf16: wgpu's rows are f32 only), burn-train's Learner on one GPU and
/// data-parallel on two, and only then PyTorch's precision variants. A cell the window cannot
/// hold is dropped, in this order, before the kit starts.
pub const CELLS: &[KitCell] = &[
    cell(MnistCnn, "cuda", "cuda:0", F32, Kiln, 4),
    cell(ResNet18, "cuda", "cuda:0", F32, Kiln, 5),
    cell(MnistCnn, "wgpu", "vulkan:discrete:0", F32, Kiln, 4),
    cell(ResNet18, "wgpu", "vulkan:discrete:0", F32, Kiln, 4),
    cell(MnistCnn, "pytorch", "cuda:0", F32, Kiln, 3),
    cell(ResNet18, "pytorch", "cuda:0", F32, Kiln, 4),
    cell(MnistCnn, "cuda", "cuda:0", BF16, Kiln, 2),
    cell(ResNet18, "cuda", "cuda:0", BF16, Kiln, 2),
    cell(MnistCnn, "cuda", "cuda:0", AmpBF16, Kiln, 2),
    cell(ResNet18, "cuda", "cuda:0", AmpBF16, Kiln, 2),
    cell(MnistCnn, "cuda", "cuda:0", F32, Learner, 2),
    cell(MnistCnn, "cuda", "cuda:0,cuda:1", F32, Learner, 2),
    cell(MnistCnn, "pytorch", "cuda:0", BF16, Kiln, 2),
    cell(ResNet18, "pytorch", "cuda:0", BF16, Kiln, 2),
    cell(MnistCnn, "pytorch", "cuda:0", AmpBF16, Kiln, 2),
    cell(ResNet18, "pytorch", "cuda:0", AmpBF16, Kiln, 2),
];

/// What a cell takes beside its device time: starting the runner, loading the data, opening
/// the device and writing the record (on the H200: wall time less the epochs, 2 to 6 s). Not
/// scaled in a replay: it is this machine's.
pub const CELL_OVERHEAD: Duration = Duration::from_secs(6);

/// A command `run.sh` runs after the matrix (`xtask ARGS --out OUT/NAME`), and the seconds it
/// is given.
pub struct After {
    pub name: &'static str,
    pub args: &'static [&'static str],
    pub seconds: u64,
}

/// What the kit runs after the matrix, in this order, each with its share of the window.
/// Neither has been measured on a GPU yet, so the order is by what a user asks first: which
/// backend crate serves the CNN fastest from the same weights (docs/inference.md; weights from
/// PyTorch, which compiles nothing; short series: a GPU answers 300 queries in well under a
/// second; each CubeCL row still compiles its kernels), then every op of a step on both models.
pub const AFTER: &[After] = &[
    After {
        name: "infer",
        args: &[
            "infer",
            "--model",
            "mnist-cnn",
            "--backends",
            "cuda,pytorch",
            "--train-on",
            "pytorch",
            "--train-steps",
            "60",
            "--queries",
            "300",
            "--series-seconds",
            "3",
            "--throughput-seconds",
            "1",
        ],
        seconds: 90,
    },
    After {
        name: "explain",
        args: &[
            "explain",
            "--backends",
            "cuda,pytorch",
            "--model",
            "mnist-cnn,resnet18",
            "--runs-per-op",
            "3",
        ],
        seconds: 45,
    },
];

/// The seconds [`AFTER`]'s commands are given together.
pub fn after_seconds() -> Duration {
    Duration::from_secs(AFTER.iter().map(|a| a.seconds).sum())
}

/// [`AFTER`] as `run.sh` reads it (`plan/after.tsv`): one command a line, its name, its seconds
/// and its arguments, separated by tabs.
pub fn after_tsv() -> String {
    AFTER
        .iter()
        .map(|a| format!("{}\t{}\t{}\n", a.name, a.seconds, a.args.join("\t")))
        .collect()
}

/// The wall time the whole kit is given: the matrix, then [`AFTER`]'s commands (one command
/// on the GPU machine may run 600 s).
pub const WINDOW: Duration = Duration::from_secs(570);

/// A session's device time on the GPU machine, all calls together (its start counted).
pub const DEVICE_SESSION: Duration = Duration::from_secs(900);

/// The machine's start and the transfers of one call, both ways: "a minute or more" to start
/// (the device tool's own words) and the tree and kit out, the results back; an estimate
/// until a kit run measures it.
pub const DEVICE_START: Duration = Duration::from_secs(120);

/// The measured profile the kit plans from: the H200's, from its committed records
/// (docs/results/2026-12-04-xeon-f6m207-h200-*; a test derives it from them again).
pub const MEASURED: &str = "gpu-kit/profiles/h200-2026-12-04.json";

/// [`MEASURED`], as built into xtask.
pub fn measured() -> Result<ReplayProfile> {
    let profile: ReplayProfile = serde_json::from_str(include_str!(
        "../../../gpu-kit/profiles/h200-2026-12-04.json"
    ))
    .with_context(|| format!("{MEASURED}: not a replay profile"))?;
    profile
        .check()
        .map_err(|e| anyhow::anyhow!("{MEASURED}: {e}"))?;
    Ok(profile)
}

/// The measured profile a plan comes from: `path`'s, else the committed H200 one; with its
/// name.
pub fn profile_of(path: Option<&std::path::Path>) -> Result<(ReplayProfile, String)> {
    match path {
        Some(p) => {
            let profile = ReplayProfile::read(p).map_err(|e| anyhow::anyhow!(e))?;
            if !profile.ignored.is_empty() {
                eprintln!(
                    "kiln: replay profile {}: read past keys this Kiln does not know: {}",
                    p.display(),
                    profile.ignored.join(", ")
                );
            }
            Ok((profile, p.display().to_string()))
        }
        None => Ok((measured()?, MEASURED.to_string())),
    }
}

/// The run configuration of the kit's plan: the quick profile (the embedded Fashion-MNIST
/// sample; ResNet18 on its default data), one run per cell, no GEMM calibration (each would
/// be a process and a warm-up more).
pub fn kit_common_args() -> crate::flags::CommonArgs {
    crate::flags::CommonArgs {
        quick: kiln_engine::flags::QuickArg { quick: true },
        // Two epochs: the warm-up settles in the first, the second is timed whole.
        settings: kiln_engine::options::SettingFlags {
            epochs: Some(2),
            ..Default::default()
        },
        no_calibration: true,
        ..Default::default()
    }
}

/// Device seconds a cell of these times warms up in by Kiln's rule: its first step, its
/// settling steps' compiles and the steady steps that make two windows of the rule.
fn warmup_seconds(t: &StepTimes) -> f64 {
    let steps = 2 * TimingRules::KILN.steady_window.max(1) - 1;
    t.first_step_s + t.settling_s() + steps as f64 * t.steady_step_s
}

/// A cell's warm-up cap, in device seconds: its measured warm-up, a quarter again and 5 s.
pub fn warmup_cap(t: &StepTimes) -> f64 {
    warmup_seconds(t) * 1.25 + 5.0
}

/// A cell's device seconds: its cap, its budget, the compile of the epoch's short last batch
/// (the kit's 8,000 samples are 62.5 batches of 128) and of evaluation's two batch shapes.
pub fn device_seconds(t: &StepTimes, budget: f64) -> f64 {
    warmup_cap(t) + budget + t.new_shape_s + 2.0 * t.eval_compile_s()
}

/// A plan: the cells kept, in order, and those dropped, each with why (`not_planned`).
pub struct KitPlan {
    pub cells: Vec<PlanEntry>,
    pub dropped: Vec<PlanEntry>,
    /// The matrix's time: its cells' device seconds scaled, and their start-ups.
    pub time_limit: Duration,
    pub scale: f64,
    pub profile: String,
    /// The profile replayed, when it is not the one planned from.
    pub replayed: Option<String>,
    /// Device seconds the dropped cells that one GPU can run would take in a window of their
    /// own (their measured times and start-ups, unscaled).
    pub second_window: f64,
}

/// A cell's label in the plan's text.
fn label(c: &PlanEntry) -> String {
    format!(
        "{} {} {} {} {}",
        c.model, c.backend, c.device, c.precision, c.training_loop
    )
}

/// `c` as the plan's entry, nothing set beyond what it is.
fn entry(c: &KitCell) -> PlanEntry {
    PlanEntry {
        model: c.model,
        backend: c.backend.to_string(),
        device: c.device.to_string(),
        precision: c.precision,
        training_loop: c.training_loop,
        budget: None,
        warmup_cap: None,
        planned: None,
        replay: None,
        not_planned: None,
    }
}

/// The plan `profile` (named `name`) gives: each cell's cap and time from its measured times,
/// kept in [`CELLS`]' order while the matrix's share of [`WINDOW`] holds it. `replay` (a
/// profile and its name: `profile` itself, or another device's) makes every kept cell a
/// replay of that profile's times for it. Caps, budgets and device seconds are multiplied by
/// the replayed profile's scale (1 for a real kit); start-ups are not.
pub fn plan(
    profile: &ReplayProfile,
    name: &str,
    replay: Option<(&ReplayProfile, &str)>,
) -> Result<KitPlan> {
    plan_of(profile, name, replay, &CELLS.iter().collect::<Vec<_>>())
}

/// The cells of [`CELLS`] an earlier window left: those its `records` hold no record of, or
/// only "not reached" ones (the window's time, or its plan, left them out). A cell that
/// failed there has its record: a failure is a result to read, not to run again.
pub fn left_after(records: &[Record]) -> Vec<&'static KitCell> {
    CELLS
        .iter()
        .filter(|c| {
            !records.iter().any(|r| {
                let id = r.cell();
                r.status != Status::NotReached
                    && id.model == c.model.to_string()
                    && id.backend == c.backend
                    && id.device == c.device
                    && id.precision == c.precision.to_string()
                    && id.training_loop.unwrap_or_default() == c.training_loop
            })
        })
        .collect()
}

/// [`plan`] of `cells` (in their order) instead of every cell of [`CELLS`].
pub fn plan_of(
    profile: &ReplayProfile,
    name: &str,
    replay: Option<(&ReplayProfile, &str)>,
    cells_asked: &[&KitCell],
) -> Result<KitPlan> {
    let scale = replay.map_or(1.0, |(device, _)| device.scale);
    let window = (WINDOW - after_seconds()).as_secs_f64();
    let overhead = CELL_OVERHEAD.as_secs_f64();
    let (mut used, mut cells, mut dropped) = (0.0, Vec::new(), Vec::new());
    let mut second_window = 0.0;
    for &c in cells_asked {
        let devices = c.device.split(',').count();
        let not_planned = |why: String| PlanEntry {
            not_planned: Some(why),
            ..entry(c)
        };
        if devices > profile.devices {
            dropped.push(not_planned(format!(
                "needs {devices} devices; the profile's machine has {}",
                profile.devices
            )));
            continue;
        }
        let (times, _) = profile.times(c.model, c.backend, c.precision, c.training_loop);
        let device = device_seconds(&times, c.budget as f64);
        if used + device + overhead > window {
            second_window += device + overhead;
            dropped.push(not_planned(format!(
                "needs {:.0} s and {:.0} s of the matrix's {:.0} s are left",
                device + overhead,
                window - used,
                window
            )));
            continue;
        }
        used += device + overhead;
        cells.push(PlanEntry {
            budget: Some(Duration::from_secs_f64(c.budget as f64 * scale)),
            warmup_cap: Some(Duration::from_secs_f64(warmup_cap(&times) * scale)),
            planned: Some(Duration::from_secs_f64(device * scale + overhead)),
            replay: replay.map(|(device, device_name)| {
                let played = device.times(c.model, c.backend, c.precision, c.training_loop);
                device.replay(device_name, played)
            }),
            ..entry(c)
        });
    }
    let starts = cells.len() as f64 * overhead;
    Ok(KitPlan {
        time_limit: Duration::from_secs_f64((used - starts) * scale + starts),
        cells,
        dropped,
        scale,
        second_window,
        profile: name.to_string(),
        replayed: replay
            .map(|(_, device_name)| device_name.to_string())
            .filter(|device_name| device_name != name),
    })
}

impl KitPlan {
    /// Every cell of the matrix as the run file holds it: the kept ones in order, then the
    /// dropped ones, each recorded "not planned" with why, never run.
    pub fn entries(&self) -> Vec<PlanEntry> {
        self.cells.iter().chain(&self.dropped).cloned().collect()
    }

    /// The plan as `cargo xtask gpu-kit --plan-only` prints it: each cell in order with its
    /// cap, budget and time, the cells dropped and why, what runs after the matrix, and the total.
    pub fn text(&self) -> String {
        let mut text = format!(
            "The GPU kit's plan from {}{}, in the order run.sh runs it (seconds: warm-up cap + \
             budget from steady state -> the cell's time, start-up, compiles of new shapes and \
             evaluation included):\n",
            self.profile,
            match (&self.replayed, self.scale == 1.0) {
                (Some(device), _) =>
                    format!(", replaying {device}'s device at scale {}", self.scale),
                (None, true) => String::new(),
                (None, false) => format!(", replayed at scale {}", self.scale),
            }
        );
        for (i, c) in self.cells.iter().enumerate() {
            let secs = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64();
            text.push_str(&format!(
                "{:>3}. {:<9} {:<8} {:<18} {:<8} {:<7} {:>6.1} + {:>4.1} -> {:>6.1} s\n",
                i + 1,
                c.model.to_string(),
                c.backend,
                c.device,
                c.precision.to_string(),
                c.training_loop.to_string(),
                secs(c.warmup_cap),
                secs(c.budget),
                secs(c.planned),
            ));
        }
        for cell in &self.dropped {
            let why = cell.not_planned.as_deref().unwrap_or_default();
            text.push_str(&format!("  dropped: {}: {why}\n", label(cell)));
        }
        let mut after = 0.0;
        for a in AFTER {
            let seconds = a.seconds as f64 * self.scale;
            after += seconds;
            text.push_str(&format!("  then: {} ({seconds:.0} s)\n", a.args.join(" ")));
        }
        text.push_str(&format!(
            "matrix {:.0} s + {:.0} s after it, of the {:.0} s window{}\n",
            self.time_limit.as_secs_f64(),
            after,
            WINDOW.as_secs_f64() * self.scale,
            if self.scale == 1.0 {
                String::new()
            } else {
                format!(
                    " (device seconds scaled; each cell's {} s start-up is this machine's, not \
                     scaled)",
                    CELL_OVERHEAD.as_secs()
                )
            }
        ));
        text.push_str(&self.device_time());
        text
    }

    /// Where the session's device time goes (unscaled: the GPU machine's), and what a second
    /// window would run.
    fn device_time(&self) -> String {
        let spent = DEVICE_START + WINDOW;
        let mut text = format!(
            "device time: about {} s to start the machine and move the kit and results, the \
             kit's {} s window, {} s of the session's {} s in all, {} s left: no room to run \
             the kit twice in one session\n",
            DEVICE_START.as_secs(),
            WINDOW.as_secs(),
            spent.as_secs(),
            DEVICE_SESSION.as_secs(),
            DEVICE_SESSION.saturating_sub(spent).as_secs()
        );
        if self.second_window > 0.0 {
            text.push_str(&format!(
                "a second window would run the cells dropped for time: {:.0} s of its {} s\n",
                self.second_window,
                WINDOW.as_secs()
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A next window plans what the last one left: every cell but those with a record there
    /// other than "not reached" (a failure is a record), in the matrix's order.
    #[test]
    fn a_next_window_plans_the_cells_the_last_left() {
        let record = |c: &KitCell, status: Status| {
            let id = kiln_contract::CellId::new(c.model, c.backend, c.device, c.precision, 128)
                .with_loop(c.training_loop);
            Record::not_run(&id, status, "test")
        };
        let records = [
            record(&CELLS[0], Status::Ok),
            record(&CELLS[1], Status::NotReached),
            record(&CELLS[2], Status::Failed),
        ];
        let left = left_after(&records);
        assert_eq!(left.len(), CELLS.len() - 2);
        let first = (
            left[0].model,
            left[0].backend,
            left[0].device,
            left[0].precision,
        );
        let reached_not = (
            CELLS[1].model,
            CELLS[1].backend,
            CELLS[1].device,
            CELLS[1].precision,
        );
        assert_eq!(first, reached_not, "the not-reached cell comes first");
        let plan = plan_of(&measured().unwrap(), MEASURED, None, &left).unwrap();
        assert_eq!(plan.cells.len() + plan.dropped.len(), left.len());
    }

    /// Every command run.sh runs after the matrix is one xtask parses, as run.sh gives it
    /// (`xtask ARGS --out DIR`): a renamed flag fails here, not on the GPU machine.
    #[test]
    fn every_command_after_the_matrix_parses() {
        use clap::Parser;
        for a in AFTER {
            let line = ["xtask"].iter().chain(a.args).chain(&["--out", "/tmp/out"]);
            if let Err(e) = crate::flags::Cli::try_parse_from(line) {
                panic!("{}: {e}", a.name);
            }
        }
    }

    /// The kit's plan from the H200's measured warm-ups: every cap holds its cell's measured
    /// warm-up (the 64.6 s bf16 first step included), the f32 cells of every backend and model
    /// come first, the matrix fits its window, and what does not fit is named.
    #[test]
    fn the_plan_holds_the_measured_warm_ups_and_fits_its_window() {
        let profile = measured().unwrap();
        let plan = plan(&profile, MEASURED, None).unwrap();
        for c in &plan.cells {
            let (t, _) = profile.times(c.model, &c.backend, c.precision, c.training_loop);
            let cap = c.warmup_cap.unwrap().as_secs_f64();
            assert!(cap > warmup_seconds(&t), "{} {}: {cap}", c.model, c.backend);
        }
        let bf16 = profile.times(MnistCnn, "cuda", BF16, Kiln).0;
        assert!(bf16.first_step_s >= 64.6, "{bf16:?}");
        assert!(warmup_cap(&bf16) > 64.6);
        let first: Vec<_> = plan
            .cells
            .iter()
            .take_while(|c| c.precision == F32 && c.training_loop == Kiln)
            .map(|c| (c.model, c.backend.as_str()))
            .collect();
        for model in [MnistCnn, ResNet18] {
            for backend in ["cuda", "pytorch", "wgpu"] {
                assert!(
                    first.contains(&(model, backend)),
                    "{model} {backend}: {first:?}"
                );
            }
        }
        assert!(
            plan.time_limit + after_seconds() <= WINDOW,
            "{:?}",
            plan.time_limit
        );
        let text = plan.text();
        assert!(
            text.contains("device time: about 120 s to start the machine"),
            "{text}"
        );
        assert!(
            text.contains("dropped: mnist-cnn cuda cuda:0,cuda:1"),
            "{text}"
        );
        assert_eq!(plan.cells.len() + plan.dropped.len(), CELLS.len());
        // Burn's rows, every precision and loop, before any PyTorch precision variant.
        let last_burn = CELLS.iter().rposition(|c| c.backend != "pytorch").unwrap();
        let first_variant = CELLS
            .iter()
            .position(|c| c.backend == "pytorch" && c.precision != F32)
            .unwrap();
        assert!(last_burn < first_variant);
        // Every cell has a cap, a budget and a time of its own.
        assert!(
            plan.cells
                .iter()
                .all(|c| c.warmup_cap.is_some() && c.budget.is_some() && c.planned.is_some())
        );
    }

    /// The committed H200 profile is what its committed records measured
    /// (`ReplayProfile::from_records`; `KILN_BLESS=1` writes it again), at scale 0.1, with the
    /// issue's default for the cells those records do not hold.
    #[test]
    fn the_measured_profile_is_derived_from_the_committed_h200_records() {
        let root = crate::workspace::workspace_root();
        let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs/results"))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .starts_with("2026-12-04-xeon-f6m207-h200-")
                })
            })
            .collect();
        dirs.sort();
        assert_eq!(dirs.len(), 4, "{dirs:?}");
        let records = kiln_report::read::load(&dirs).unwrap().records;
        let default = StepTimes {
            first_step_s: 5.0,
            new_shape_s: 2.0,
            steady_step_s: 0.003,
            eval_new_shape_s: None,
            settling: None,
        };
        let derived = ReplayProfile::from_records(&records, 0.1, default);
        let path = root.join(MEASURED);
        if kiln_contract::testing::blessing() {
            let text = serde_json::to_string_pretty(&derived).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
        }
        let committed: ReplayProfile =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(derived, committed, "bless with KILN_BLESS=1");
        assert_eq!(measured().unwrap(), committed);
    }

    /// A replayed plan is the same cells with every device second scaled, start-ups not.
    #[test]
    fn a_replayed_plan_scales_device_seconds_only() {
        let profile = measured().unwrap();
        let real = plan(&profile, MEASURED, None).unwrap();
        let replay = plan(&profile, MEASURED, Some((&profile, MEASURED))).unwrap();
        assert_eq!(real.cells.len(), replay.cells.len());
        let s = profile.scale;
        for (a, b) in real.cells.iter().zip(&replay.cells) {
            let cap = |c: &PlanEntry| c.warmup_cap.unwrap().as_secs_f64();
            assert!((cap(a) * s - cap(b)).abs() < 1e-6);
            let device = |c: &PlanEntry| c.planned.unwrap().as_secs_f64() - 6.0;
            assert!((device(a) * s - device(b)).abs() < 1e-6);
            assert!(b.replay.is_some() && a.replay.is_none());
        }
    }
}
