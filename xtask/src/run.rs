//! Running cells: plan, one child process per cell, records appended as they arrive, report.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use kiln_results::read::RESULTS_FILE;
use kiln_results::render::{human_seconds, obtained_text};
use kiln_results::{
    AutotuneLevel, CellId, CellRequest, DatasetName, Event, FallbackTarget, ModelKind, Precision,
    ProbeReport, Profile, Record, Status, parse_duration,
};

use crate::backends::{self, Backend, Runner};
use crate::export::export_data;
use crate::plan;
use crate::{CommonArgs, time, workspace_root};

/// Marker file of a run directory.
pub const RUN_FILE: &str = "run.json";

/// The settings every cell of a run shares.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub profile: Profile,
    pub epochs: usize,
    pub batch_size: usize,
    pub budget_seconds: Option<f64>,
    pub seed: u64,
    pub data_dir: Option<PathBuf>,
    pub eval_limit: Option<usize>,
    pub train_limit: Option<usize>,
    #[serde(default = "one")]
    pub accum_steps: usize,
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
}

fn one() -> usize {
    1
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
        r.batch_size = cfg.batch_size;
        r.budget_seconds = self.budget_seconds.or(cfg.budget_seconds);
        r.accum_steps = cfg.accum_steps;
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
        r.validate().map_err(|e| anyhow::anyhow!(e))?;
        Ok(r)
    }

    /// A cell of `model` on `device` of backend `b`, with the budget and autotune level a
    /// CPU-emulated adapter gets unless the user set them.
    fn new(
        id: CellId,
        dataset: (DatasetName, Option<String>),
        emulated: bool,
        common: &CommonArgs,
        profile: Profile,
    ) -> PlannedCell {
        PlannedCell {
            id,
            dataset: dataset.0,
            dataset_note: dataset.1,
            budget_seconds: (emulated && common.budget.is_none())
                .then(|| profile.emulated_budget().as_secs_f64()),
            autotune: (emulated && common.autotune.is_none()).then_some(AutotuneLevel::Minimal),
        }
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

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C stops the current cell (it is not recorded, so `--resume` runs it again), keeps every
/// finished one and still writes the report.
pub fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            // A second Ctrl-C: leave now.
            std::process::exit(130);
        }
        eprintln!("\nkiln: interrupted; stopping the current cell (Ctrl-C again to quit at once)");
    });
}

/// True once Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn config(common: &CommonArgs, bare: bool) -> Result<(Profile, RunConfig)> {
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
        batch_size: common.batch.unwrap_or(profile.batch_size()),
        budget_seconds: budget.map(|b| b.as_secs_f64()),
        seed: common.seed.unwrap_or(42),
        data_dir: common.data_dir.clone(),
        eval_limit: common.eval_limit,
        train_limit: common.train_limit,
        accum_steps: common.accum_steps.unwrap_or(1),
        bare,
        fallback: common.fallback,
        autotune: common.autotune,
        no_autotune_cache: common.no_autotune_cache,
    };
    // The rules of a cell are the cell request's: check them once, before any work.
    let probe = PlannedCell {
        id: CellId {
            model: ModelKind::MnistCnn.to_string(),
            backend: "any".into(),
            device: "default".into(),
            precision: Precision::F32.to_string(),
        },
        dataset: DatasetName::Synthetic,
        dataset_note: None,
        budget_seconds: None,
        autotune: None,
    };
    probe.request(&cfg)?;
    Ok((profile, cfg))
}

/// The dataset for `model`, resolved once so every backend trains on the same data.
fn dataset_for(model: ModelKind, common: &CommonArgs) -> Result<(DatasetName, Option<String>)> {
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

/// Validate and create the run directory.
fn prepare_out(out: Option<&Path>) -> Result<PathBuf> {
    let dir = check_out(out)?;
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// The run directory `--out` names (or the default), checked before any work: it must be new or
/// empty, and never an existing run, whose results must not be mixed with new ones.
fn check_out(out: Option<&Path>) -> Result<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => workspace_root()
            .join("results")
            .join(time::stamp(time::unix_now())),
    };
    if dir.exists() {
        if !dir.is_dir() {
            bail!("--out {}: exists and is not a directory", dir.display());
        }
        let empty = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            if dir.join(RUN_FILE).is_file() {
                bail!(
                    "--out {}: already holds a Kiln run; choose another directory (its results \
                     stay as they are; `cargo xtask report {}` re-renders them)",
                    dir.display(),
                    dir.display()
                );
            }
            bail!(
                "--out {}: exists, is not empty and is not a Kiln run; choose an empty or new directory",
                dir.display()
            );
        }
    }
    Ok(dir)
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(workspace_root())
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Append one record as one line, flushed and synced, so a killed run loses nothing finished.
pub fn append_record(path: &Path, record: &Record) -> Result<()> {
    let mut line = serde_json::to_string(record)?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.write_all(line.as_bytes())
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Progress display on standard error: one rewritten line on a terminal, a line now and then
/// otherwise.
struct Display {
    tty: bool,
    last_line: Instant,
    width: usize,
}

impl Display {
    fn new() -> Self {
        Display {
            tty: std::io::stderr().is_terminal(),
            last_line: Instant::now() - Duration::from_secs(3600),
            width: 0,
        }
    }

    fn status(&mut self, text: &str) {
        if self.tty {
            let pad = self.width.saturating_sub(text.chars().count());
            eprint!("\r{text}{}", " ".repeat(pad));
            self.width = text.chars().count();
        } else if self.last_line.elapsed() >= Duration::from_secs(30) {
            eprintln!("{text}");
            self.last_line = Instant::now();
        }
    }

    fn line(&mut self, text: &str) {
        if self.tty && self.width > 0 {
            eprint!("\r{}\r", " ".repeat(self.width));
            self.width = 0;
        }
        eprintln!("{text}");
    }
}

/// Where the matrix is, for progress lines.
struct Position {
    index: usize,
    total: usize,
    /// Upper bound of the seconds the cells after this one will take.
    later_seconds: f64,
}

fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// A file name for the cell `id` (its log, its request).
fn cell_stem(id: &CellId) -> String {
    format!(
        "{}-{}-{}-{}",
        id.model,
        id.backend,
        id.device.replace([':', '/'], "_"),
        id.precision
    )
}

/// A cell's wall-clock limit: its budget three times over plus ten minutes for loading data,
/// compiling kernels and evaluating (a day without a budget).
fn wall_clock_limit(budget_seconds: Option<f64>) -> Duration {
    Duration::from_secs_f64(budget_seconds.map_or(24.0 * 3600.0, |b| b * 3.0 + 600.0))
}

/// Run one cell in its own process and return its record (a failed one if it produced none),
/// or `None` when Ctrl-C interrupted it.
fn run_cell(
    runner: &Runner,
    cell: &PlannedCell,
    cfg: &RunConfig,
    out: &Path,
    position: &Position,
    display: &mut Display,
    limit: Duration,
) -> Result<Option<Record>> {
    let id = &cell.id;
    let log = out.join("logs").join(format!("{}.stderr", cell_stem(id)));
    let mut request = cell.request(cfg)?;
    if runner.needs_data_file {
        request.data_file = Some(export_data(&request, out)?);
    }
    let request_path = out.join("cells").join(format!("{}.json", cell_stem(id)));
    std::fs::create_dir_all(out.join("cells"))
        .and_then(|_| request.write(&request_path))
        .with_context(|| format!("cannot write {}", request_path.display()))?;
    let mut cmd = runner.command();
    cmd.arg("--cell").arg(&request_path);
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        cmd.env("KILN_COMMIT", commit);
    }
    if let Some(status) = git(&["status", "--porcelain", "--untracked-files=no"]) {
        cmd.env("KILN_DIRTY", if status.is_empty() { "0" } else { "1" });
    }
    cmd.env("KILN_WORKSPACE", workspace_root());
    let stderr = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("cannot start {}", runner.display()))?;
    let stdout = child.stdout.take().context("runner has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let started = Instant::now();
    let label = format!(
        "[{}/{}] {} {} {} ({})",
        position.index, position.total, id.backend, id.device, id.model, id.precision
    );
    display.line(&format!("{label}: starting, data {}", cell.dataset));
    let mut final_record = None;
    let mut unparsed = Vec::new();
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(Ok(line)) => match serde_json::from_str::<Event>(&line) {
                Ok(Event::Final(record)) => final_record = Some(*record),
                Ok(Event::Start(s)) => display.line(&format!(
                    "{label}: {} train / {} test samples, {} steps per epoch, {} epochs, budget {}",
                    s.train_samples,
                    s.test_samples,
                    s.steps_per_epoch,
                    s.epochs,
                    s.budget_seconds
                        .map(human_seconds)
                        .unwrap_or_else(|| "none".into())
                )),
                Ok(Event::Epoch(e)) => display.line(&format!(
                    "{label}: epoch {}{}: {} over {} steps, loss {:.4}, test accuracy {}",
                    e.epoch,
                    if e.partial {
                        " (cut by the budget)"
                    } else {
                        ""
                    },
                    human_seconds(e.seconds),
                    e.steps,
                    e.mean_loss,
                    e.test_accuracy
                        .map(|a| format!("{:.1}%", a * 100.0))
                        .unwrap_or_else(|| "–".into())
                )),
                Ok(Event::Progress(p)) => {
                    let eta = p.eta_seconds.unwrap_or(0.0);
                    display.status(&format!(
                        "{label}: epoch {} step {}/{} | {} elapsed | cell ETA {} | run ETA ≤{}",
                        p.epoch,
                        p.step,
                        p.steps_per_epoch,
                        time::short(p.elapsed_seconds),
                        time::short(eta),
                        time::short(eta + position.later_seconds)
                    ))
                }
                Err(_) => unparsed.push(line),
            },
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if interrupted() {
                    let _ = child.kill();
                    break;
                }
                if started.elapsed() > limit {
                    let _ = child.kill();
                    timed_out = true;
                    break;
                }
            }
        }
    }
    let status = child.wait()?;
    if interrupted() {
        display.line(&format!("{label}: interrupted, not recorded"));
        return Ok(None);
    }
    let record = match final_record {
        Some(r) => r,
        None => {
            let why = if timed_out {
                format!("timed out after {}", human_seconds(limit.as_secs_f64()))
            } else {
                format!("the runner exited ({status}) without a final record")
            };
            let mut detail = tail_of(&log, 5);
            if !unparsed.is_empty() {
                detail = format!(
                    "{detail} | unparsable output: {}",
                    unparsed.last().cloned().unwrap_or_default()
                );
            }
            Record::not_run(id, Status::Failed, format!("{why}; stderr: {detail}"))
        }
    };
    let summary = match (record.status, &record.epoch_seconds) {
        (Status::Ok, Some(e)) => format!(
            "{} per {}-sample epoch, test accuracy {} ({})",
            human_seconds(e.median),
            record.obtained.standard_epoch_samples,
            record
                .test_accuracy
                .map(|a| format!("{:.1}%", a * 100.0))
                .unwrap_or_else(|| "–".into()),
            obtained_text(&record)
        ),
        (Status::Ok, None) => match &record.loop_overhead {
            Some(o) => format!(
                "Kiln loop {:.1} ms/step, bare loop {:.1} ms/step: overhead {:+.2}% (median of {} rounds of {} steps)",
                o.kiln_step_seconds.median * 1e3,
                o.bare_step_seconds.median * 1e3,
                o.overhead_percent,
                o.rounds,
                o.steps_per_round
            ),
            None => "done".into(),
        },
        (s, _) => format!(
            "{}: {}",
            s.as_str(),
            record.reason.clone().unwrap_or_default()
        ),
    };
    display.line(&format!(
        "{label}: {summary} [{} wall]",
        time::short(started.elapsed().as_secs_f64())
    ));
    Ok(Some(record))
}

/// Write `run.json`, which marks `out` as a Kiln run and lets `--resume` finish it.
fn write_run_file(out: &Path, cfg: &RunConfig, cells: &[PlannedCell]) -> Result<()> {
    let run_file = RunFile {
        kiln_run: 1,
        created_at: time::unix_now(),
        command: std::env::args().collect(),
        config: cfg.clone(),
        cells: cells.to_vec(),
    };
    std::fs::write(out.join(RUN_FILE), serde_json::to_string_pretty(&run_file)?)
        .with_context(|| format!("cannot write {}", out.join(RUN_FILE).display()))
}

/// Run planned cells, append their records, render the report. Returns false if any failed or
/// the run was interrupted.
fn execute(cells: Vec<PlannedCell>, built: &[Built], cfg: RunConfig, out: &Path) -> Result<bool> {
    let results = out.join(RESULTS_FILE);
    eprintln!(
        "kiln: {} cells; results go to {}",
        cells.len(),
        results.display()
    );
    let mut display = Display::new();
    let per_cell_bound = cfg.budget_seconds.map_or(0.0, |b| b + 120.0);
    let mut all_ok = true;
    for (i, cell) in cells.iter().enumerate() {
        let position = Position {
            index: i + 1,
            total: cells.len(),
            later_seconds: per_cell_bound * (cells.len() - i - 1) as f64,
        };
        let runner = runner_of(built, &cell.id.backend).cloned();
        let record = match runner {
            Some(runner) => run_cell(
                &runner,
                cell,
                &cfg,
                out,
                &position,
                &mut display,
                wall_clock_limit(cell.budget_seconds.or(cfg.budget_seconds)),
            )?,
            None => Some(Record::not_run(
                &cell.id,
                Status::Skipped,
                backends::find(&cell.id.backend)
                    .ok()
                    .and_then(backends::unbuildable)
                    .unwrap_or_else(|| "backend not built".into()),
            )),
        };
        let Some(record) = record else {
            all_ok = false;
            eprintln!(
                "kiln: {} of {} cells finished; finish the run with `cargo xtask bench-all --resume {}`",
                i,
                cells.len(),
                out.display()
            );
            break;
        };
        append_record(&results, &record)?;
        let probes = probes(built);
        let fallback = match (&cfg.fallback, fallback_reason(&record)) {
            (Some(_), Some(why)) => plan::fallback_cell(cell, &probes)
                .and_then(|c| runner_of(built, &c.id.backend).map(|r| (c, r)))
                .map(|c| (c, why)),
            _ => None,
        };
        match fallback {
            Some(((fb_cell, fb_runner), why)) => {
                let from = format!("{} {}: {why}", cell.id.backend, cell.id.device);
                display.line(&format!(
                    "kiln: {} falls back to {} {}",
                    cell.id, fb_cell.id.backend, fb_cell.id.device
                ));
                let Some(mut fb) = run_cell(
                    fb_runner,
                    &fb_cell,
                    &cfg,
                    out,
                    &position,
                    &mut display,
                    wall_clock_limit(fb_cell.budget_seconds.or(cfg.budget_seconds)),
                )?
                else {
                    all_ok = false;
                    break;
                };
                fb.fallback_from = Some(from.clone());
                fb.reason = Some(match fb.reason.take() {
                    Some(r) => format!("fell back from {from}; {r}"),
                    None => format!("fell back from {from}"),
                });
                all_ok &= matches!(fb.status, Status::Ok | Status::Skipped);
                append_record(&results, &fb)?;
            }
            None => all_ok &= matches!(record.status, Status::Ok | Status::Skipped),
        }
    }
    let loaded = kiln_results::read::load(std::slice::from_ref(&results))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let mut markdown = kiln_results::render::markdown(&loaded.records, None);
    for (model, svg) in crate::chart::charts(&loaded.records, None)? {
        let name = format!("chart-{model}.svg");
        std::fs::write(out.join(&name), svg)
            .with_context(|| format!("cannot write {name} in {}", out.display()))?;
        markdown.push_str(&format!("![{model}]({name})\n\n"));
    }
    let report = out.join("report.md");
    std::fs::write(&report, &markdown)
        .with_context(|| format!("cannot write {}", report.display()))?;
    std::fs::write(
        out.join("results.csv"),
        kiln_results::render::csv(&loaded.records),
    )
    .with_context(|| format!("cannot write results.csv in {}", out.display()))?;
    println!("\n{markdown}");
    eprintln!(
        "kiln: report written to {} (re-render with `cargo xtask report {}`)",
        report.display(),
        out.display()
    );
    Ok(all_ok)
}

/// Why a cell's record calls for the CPU fallback: its device was unavailable, or it failed
/// on an operation or type the device does not support. Other failures (crashes, timeouts,
/// divergence) are results in their own right and are not re-run.
pub fn fallback_reason(record: &Record) -> Option<String> {
    let reason = record.reason.clone().unwrap_or_default();
    let lower = reason.to_lowercase();
    let unsupported = [
        "unsupported",
        "not supported",
        "does not support",
        "not implemented",
        "unimplemented",
    ]
    .iter()
    .any(|k| lower.contains(k));
    match record.status {
        Status::Skipped => Some(reason),
        Status::Failed if unsupported => Some(reason),
        _ => None,
    }
}

/// A built backend: its runner and what its probe reported.
pub type Built = (&'static Backend, Runner, ProbeReport);

/// The runner of the backend called `name`, if it was built.
fn runner_of<'a>(built: &'a [Built], name: &str) -> Option<&'a Runner> {
    built
        .iter()
        .find(|(b, _, _)| b.name == name)
        .map(|(_, r, _)| r)
}

/// The probe reports of the built backends, by name.
fn probes(built: &[Built]) -> Vec<(&str, &ProbeReport)> {
    built.iter().map(|(b, _, p)| (b.name.as_str(), p)).collect()
}

/// Build the runners of `wanted` and probe them; returns each usable backend with its runner.
/// A backend that cannot run here (libtorch missing, say) is left out with one line saying why
/// and what fixes it.
fn build_and_probe(wanted: &[&'static Backend]) -> Result<Vec<Built>> {
    backends::build_all()?;
    let mut out = Vec::new();
    for &b in wanted {
        let runner = match backends::runner(b) {
            Ok(r) => r,
            Err(why) => {
                eprintln!("kiln: skipping {}: {why}", b.name);
                continue;
            }
        };
        let report = backends::probe(&runner)?;
        out.push((b, runner, report));
    }
    Ok(out)
}

/// The backends to probe besides `wanted`: with `--fallback`, every default backend, so that
/// a CPU device to fall back to is known.
fn with_fallback_backends(
    mut wanted: Vec<&'static Backend>,
    fallback: bool,
) -> Vec<&'static Backend> {
    if fallback {
        for b in backends::all().iter().filter(|b| b.default) {
            if !wanted.iter().any(|w| w.name == b.name) && backends::unbuildable(b).is_none() {
                wanted.push(b);
            }
        }
        wanted.sort_by_key(|b| b.order);
    }
    wanted
}

/// `cargo xtask bench-all`.
pub fn bench_all(
    common: &CommonArgs,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
    all_devices: bool,
) -> Result<bool> {
    let (profile, cfg) = config(common, false)?;
    let models = models.unwrap_or_else(|| profile.models().to_vec());
    let backends_named = backend_names.is_some();
    let wanted: Vec<&'static Backend> = match backend_names {
        Some(names) => names
            .iter()
            .map(|n| backends::find(n))
            .collect::<Result<_>>()?,
        None => backends::all().iter().filter(|b| b.default).collect(),
    };
    let matrix = plan::Matrix {
        models: models
            .iter()
            .map(|&m| dataset_for(m, common).map(|d| (m, d)))
            .collect::<Result<_>>()?,
        precisions: precisions.unwrap_or_else(|| vec![Precision::F32]),
        backends: wanted.iter().map(|b| b.name.clone()).collect(),
        backends_named,
        all_devices,
        fallback: cfg.fallback.is_some(),
        budget_given: common.budget.is_some(),
        autotune_given: common.autotune.is_some(),
        profile,
    };
    let out = check_out(common.out.as_deref())?;
    let built = build_and_probe(&with_fallback_backends(wanted, cfg.fallback.is_some()))?;
    let plan::Plan { cells, skipped } = plan::plan(&matrix, &probes(&built));
    for (_, (_, note)) in &matrix.models {
        if let Some(note) = note {
            eprintln!("kiln: {note}");
        }
    }
    let out = prepare_out(Some(&out))?;
    for r in &skipped {
        eprintln!(
            "kiln: skipping {}: {}",
            r.cell(),
            r.reason.clone().unwrap_or_default()
        );
        append_record(&out.join(RESULTS_FILE), r)?;
    }
    if cells.is_empty() {
        bail!(
            "no cell to run: every backend was unavailable or skipped (see `cargo xtask doctor`)"
        );
    }
    write_run_file(&out, &cfg, &cells)?;
    execute(cells, &built, cfg, &out)
}

/// Describe how `stored` and `wanted` differ, field by field.
fn config_differences(stored: &RunConfig, wanted: &RunConfig) -> Vec<String> {
    let a = serde_json::to_value(stored).unwrap_or_default();
    let b = serde_json::to_value(wanted).unwrap_or_default();
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec!["unreadable configuration".into()];
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k}: run has {v}, flags give {}",
                b.get(k).cloned().unwrap_or_default()
            )
        })
        .collect()
}

/// The planned cells of a run that have no final record in its results file yet.
fn remaining_cells(run: &RunFile, dir: &Path) -> Result<Vec<PlannedCell>> {
    let results = dir.join(RESULTS_FILE);
    let done: Vec<CellId> = if results.exists() {
        kiln_results::read::load(std::slice::from_ref(&results))?
            .records
            .iter()
            .map(Record::cell)
            .collect()
    } else {
        Vec::new()
    };
    Ok(run
        .cells
        .iter()
        .filter(|c| !done.contains(&c.id))
        .cloned()
        .collect())
}

/// `cargo xtask bench-all --resume DIR`: run the cells of DIR that have no final record.
pub fn resume(
    dir: &Path,
    common: &CommonArgs,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
) -> Result<bool> {
    let run_path = dir.join(RUN_FILE);
    let text = std::fs::read_to_string(&run_path).with_context(|| {
        format!(
            "--resume {}: no {RUN_FILE} there, so it is not a Kiln run directory",
            dir.display()
        )
    })?;
    let run: RunFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a run file this Kiln can read", run_path.display()))?;
    // The run's configuration with every flag given now applied: any change is a difference.
    let mut wanted = run.config.clone();
    if common.quick {
        wanted.profile = Profile::Quick;
    }
    if let Some(v) = common.epochs {
        wanted.epochs = v;
    }
    if let Some(v) = common.batch {
        wanted.batch_size = v;
    }
    if let Some(text) = &common.budget {
        wanted.budget_seconds = parse_duration(text)
            .map_err(|e| anyhow::anyhow!("--budget: {e}"))?
            .map(|b| b.as_secs_f64());
    }
    if let Some(v) = common.seed {
        wanted.seed = v;
    }
    if let Some(d) = &common.data_dir {
        wanted.data_dir = Some(d.clone());
    }
    if common.eval_limit.is_some() {
        wanted.eval_limit = common.eval_limit;
    }
    if common.train_limit.is_some() {
        wanted.train_limit = common.train_limit;
    }
    if let Some(v) = common.accum_steps {
        wanted.accum_steps = v;
    }
    if common.fallback.is_some() {
        wanted.fallback = common.fallback;
    }
    if common.autotune.is_some() {
        wanted.autotune = common.autotune;
    }
    if common.no_autotune_cache {
        wanted.no_autotune_cache = true;
    }
    let mut differences = config_differences(&run.config, &wanted);
    let planned = |f: fn(&CellId) -> &String| {
        let mut v: Vec<String> = run.cells.iter().map(|c| f(&c.id).clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let models = models.map(|v| v.iter().map(ToString::to_string).collect());
    let precisions = precisions.map(|v| v.iter().map(ToString::to_string).collect());
    for (flag, given, stored) in [
        ("--backends", backend_names, planned(|c| &c.backend)),
        ("--models", models, planned(|c| &c.model)),
        ("--precisions", precisions, planned(|c| &c.precision)),
    ] {
        if let Some(mut given) = given {
            given.sort();
            given.dedup();
            if given != stored {
                differences.push(format!(
                    "{flag}: run has {}, flags give {}",
                    stored.join(","),
                    given.join(",")
                ));
            }
        }
    }
    if common.synthetic || common.dataset.is_some() {
        differences
            .push("--synthetic/--dataset: the run's datasets are fixed in its run.json".into());
    }
    if !differences.is_empty() {
        bail!(
            "--resume {}: the flags differ from that run's configuration ({}); run --resume \
             without them, or start a new run",
            dir.display(),
            differences.join("; ")
        );
    }
    let remaining = remaining_cells(&run, dir)?;
    if remaining.is_empty() {
        eprintln!("kiln: every cell of {} has its final record", dir.display());
    }
    let wanted: Vec<&'static Backend> = {
        let mut names: Vec<&str> = remaining.iter().map(|c| c.id.backend.as_str()).collect();
        names.sort();
        names.dedup();
        names
            .iter()
            .map(|n| backends::find(n))
            .collect::<Result<_>>()?
    };
    let built = build_and_probe(&with_fallback_backends(
        wanted,
        run.config.fallback.is_some(),
    ))?;
    eprintln!(
        "kiln: resuming {}: {} of {} cells left",
        dir.display(),
        remaining.len(),
        run.cells.len()
    );
    execute(remaining, &built, run.config, dir)
}

/// What `cargo xtask bench` runs: one cell.
pub struct OneCell<'a> {
    pub backend: &'a str,
    pub device: Option<String>,
    /// Graphics API (wgpu): prefixes the device spec.
    pub api: Option<String>,
    pub model: ModelKind,
    pub precision: Precision,
    pub bare: bool,
}

/// `cargo xtask bench`: one cell.
pub fn bench_one(common: &CommonArgs, one: OneCell) -> Result<bool> {
    let (_, cfg) = config(common, one.bare)?;
    let (backend, model, precision) = (one.backend, one.model, one.precision);
    let b = backends::find(backend)?;
    if let Some(why) = backends::unbuildable(b)
        && cfg.fallback.is_none()
    {
        bail!("backend {backend} cannot run here: {why}");
    }
    let (dataset, note) = dataset_for(model, common)?;
    if let Some(note) = note {
        eprintln!("kiln: {note}");
    }
    let out = check_out(common.out.as_deref())?;
    let built = build_and_probe(&with_fallback_backends(vec![b], cfg.fallback.is_some()))?;
    let report = built
        .iter()
        .find(|(x, _, _)| x.name == b.name)
        .map(|(_, _, r)| r);
    let spec = match (one.device, one.api, report) {
        (Some(d), Some(api), _) if !d.starts_with(&format!("{api}:")) => format!("{api}:{d}"),
        (Some(d), _, _) => d,
        (None, Some(api), Some(report)) => report
            .devices
            .iter()
            .filter(|d| d.spec.starts_with(&format!("{api}:")))
            .min_by_key(|d| (!d.available, !d.default))
            .map(|d| d.spec.clone())
            .unwrap_or_else(|| api.clone()),
        (None, _, Some(report)) => report
            .devices
            .iter()
            .find(|d| d.default)
            .map(|d| d.spec.clone())
            .unwrap_or_else(|| "default".into()),
        (None, _, None) => "default".into(),
    };
    // Without --fallback an unusable device or precision is an error before any work; with
    // it, the runner records why and the CPU fallback runs.
    if cfg.fallback.is_none() {
        let report = report.context("the runner was not built")?;
        match report.devices.iter().find(|d| d.spec == spec) {
            Some(d) if !d.available => bail!(
                "{backend} device {spec} is unavailable: {} (see `cargo xtask doctor`; \
                 `--fallback cpu` runs the cell on the CPU instead)",
                d.reason.clone().unwrap_or_default()
            ),
            Some(d) if !d.precisions.iter().any(|p| p == precision.name()) => bail!(
                "{backend} {spec} does not support {precision}; it supports {}",
                d.precisions.join(", ")
            ),
            Some(_) => {}
            None => bail!(
                "{backend} has no device {spec:?}; its devices: {}",
                report
                    .devices
                    .iter()
                    .map(|d| d.spec.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    let emulated = report
        .and_then(|r| r.devices.iter().find(|d| d.spec == spec))
        .is_some_and(|d| d.kind.is_cpu_emulated());
    let cell = PlannedCell::new(
        CellId {
            model: model.to_string(),
            backend: backend.into(),
            device: spec,
            precision: precision.to_string(),
        },
        (dataset, None),
        emulated,
        common,
        cfg.profile,
    );
    let out = prepare_out(Some(&out))?;
    write_run_file(&out, &cfg, std::slice::from_ref(&cell))?;
    execute(vec![cell], &built, cfg, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_dir_rules() {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("new");
        assert!(prepare_out(Some(&fresh)).is_ok());
        // Now it holds logs/: not empty and not a run.
        let err = prepare_out(Some(&fresh)).unwrap_err().to_string();
        assert!(err.contains("not a Kiln run"), "{err}");
        std::fs::write(fresh.join(RUN_FILE), "{}").unwrap();
        let err = prepare_out(Some(&fresh)).unwrap_err().to_string();
        assert!(err.contains("already holds a Kiln run"), "{err}");
        let file = tmp.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(prepare_out(Some(&file)).is_err());
    }

    fn cfg() -> RunConfig {
        RunConfig {
            profile: Profile::Quick,
            epochs: 1,
            batch_size: 8,
            budget_seconds: Some(5.0),
            seed: 1,
            data_dir: None,
            eval_limit: None,
            train_limit: None,
            accum_steps: 1,
            bare: false,
            fallback: None,
            autotune: None,
            no_autotune_cache: false,
        }
    }

    fn cell(backend: &str) -> PlannedCell {
        PlannedCell {
            id: CellId {
                model: "mnist-cnn".into(),
                backend: backend.into(),
                device: "cpu".into(),
                precision: "f32".into(),
            },
            dataset: DatasetName::Synthetic,
            dataset_note: None,
            budget_seconds: None,
            autotune: None,
        }
    }

    /// A built backend whose probe lists one available default device of `kind`.
    fn built(name: &str, runner: Runner, spec: &str, kind: kiln_results::DeviceKind) -> Built {
        let report = ProbeReport {
            backend: name.into(),
            backend_version: "0".into(),
            devices: vec![kiln_results::DeviceReport {
                spec: spec.into(),
                name: spec.into(),
                kind,
                available: true,
                reason: None,
                precisions: vec!["f32".into()],
                default: true,
                memory_bytes: None,
                runtime: None,
            }],
        };
        (backends::find(name).unwrap(), runner, report)
    }

    fn on_cpu(name: &str, runner: Runner) -> Built {
        built(name, runner, "cpu", kiln_results::DeviceKind::Cpu)
    }

    fn script(dir: &Path, name: &str, body: &str) -> Runner {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Runner {
            program: path,
            args: Vec::new(),
            env: Vec::new(),
            needs_data_file: false,
        }
    }

    /// A fake runner that prints a final record of `status` for `backend`'s cell.
    fn runner_with(dir: &Path, backend: &str, status: Status, reason: &str) -> Runner {
        let record = Record::not_run(&cell(backend).id, status, reason);
        let event = serde_json::to_string(&Event::Final(Box::new(record))).unwrap();
        let file = dir.join(format!("final-{backend}-{}.json", status.as_str()));
        std::fs::write(&file, event).unwrap();
        script(
            dir,
            &format!("{}-{backend}", status.as_str()),
            &format!("cat {}", file.display()),
        )
    }

    #[test]
    fn an_unavailable_device_falls_back_to_a_cpu_record_labelled_as_such() {
        let tmp = tempfile::tempdir().unwrap();
        let gpu_cell = PlannedCell {
            id: CellId {
                device: "vulkan:discrete:0".into(),
                ..cell("wgpu").id
            },
            ..cell("wgpu")
        };
        let unavailable = runner_with(
            tmp.path(),
            "wgpu",
            Status::Skipped,
            "device vulkan:discrete:0 unavailable: no adapter",
        );
        let runners = vec![
            built(
                "wgpu",
                unavailable,
                "vulkan:discrete:0",
                kiln_results::DeviceKind::DiscreteGpu,
            ),
            on_cpu("flex", fine_runner(tmp.path(), "flex")),
        ];
        for fallback in [None, Some(FallbackTarget::Cpu)] {
            let out = tmp.path().join(format!("run-{}", fallback.is_some()));
            prepare_out(Some(&out)).unwrap();
            let config = RunConfig { fallback, ..cfg() };
            execute(vec![gpu_cell.clone()], &runners, config, &out).unwrap();
            let records = kiln_results::read::load(std::slice::from_ref(&out))
                .unwrap()
                .records;
            // The unavailable cell is always recorded with its reason.
            assert_eq!(records[0].status, Status::Skipped);
            assert_eq!(records[0].backend, "wgpu");
            if fallback.is_none() {
                assert_eq!(records.len(), 1, "no fallback without the flag");
                continue;
            }
            assert_eq!(records.len(), 2);
            let fb = &records[1];
            assert_eq!((fb.backend.as_str(), fb.status), ("flex", Status::Ok));
            let from = fb.fallback_from.as_deref().unwrap();
            assert!(
                from.starts_with("wgpu vulkan:discrete:0: ") && from.contains("no adapter"),
                "{from}"
            );
            assert!(
                fb.reason
                    .as_deref()
                    .unwrap()
                    .starts_with("fell back from wgpu")
            );
        }
        // A divergence or crash is a result, not a reason to fall back.
        let diverged = Record::not_run(&gpu_cell.id, Status::Diverged, "loss NaN");
        assert!(fallback_reason(&diverged).is_none());
        let crashed = Record::not_run(&gpu_cell.id, Status::Failed, "signal: 9");
        assert!(fallback_reason(&crashed).is_none());
        let op = Record::not_run(&gpu_cell.id, Status::Failed, "UnsupportedDType(BF16)");
        assert!(fallback_reason(&op).is_some());
    }

    /// A fake runner that prints an ok final record for `backend`'s cell.
    fn fine_runner(dir: &Path, backend: &str) -> Runner {
        let good = Record::not_run(&cell(backend).id, Status::Ok, "");
        let event = serde_json::to_string(&Event::Final(Box::new(good))).unwrap();
        let file = dir.join(format!("final-{backend}.json"));
        std::fs::write(&file, event).unwrap();
        script(
            dir,
            &format!("fine-{backend}"),
            &format!("cat {}", file.display()),
        )
    }

    #[test]
    fn a_failing_runner_becomes_a_failed_record_and_the_matrix_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let crash = script(
            tmp.path(),
            "crash",
            "echo 'not json'\necho 'boom: out of cheese' >&2\nexit 3",
        );
        let fine = fine_runner(tmp.path(), "ndarray");
        let out = tmp.path().join("run");
        prepare_out(Some(&out)).unwrap();
        write_run_file(&out, &cfg(), &[cell("flex"), cell("ndarray")]).unwrap();
        let runners = vec![on_cpu("flex", crash), on_cpu("ndarray", fine)];
        let all_ok = execute(vec![cell("flex"), cell("ndarray")], &runners, cfg(), &out).unwrap();
        assert!(!all_ok);
        let loaded = kiln_results::read::load(std::slice::from_ref(&out)).unwrap();
        assert_eq!(loaded.records.len(), 2);
        let failed = &loaded.records[0];
        assert_eq!(failed.status, Status::Failed);
        let reason = failed.reason.clone().unwrap();
        assert!(
            reason.contains("without a final record") && reason.contains("out of cheese"),
            "{reason}"
        );
        assert!(reason.contains("unparsable output: not json"), "{reason}");
        assert_eq!(loaded.records[1].status, Status::Ok);
        assert!(out.join("report.md").is_file() && out.join(RUN_FILE).is_file());
    }

    #[test]
    fn a_runner_killed_mid_cell_leaves_earlier_cells_intact() {
        let tmp = tempfile::tempdir().unwrap();
        let fine = fine_runner(tmp.path(), "flex");
        // Starts its cell, prints a progress line, then dies by SIGKILL mid-cell.
        let killed = script(
            tmp.path(),
            "killed",
            "echo '{\"event\":\"progress\",\"epoch\":1,\"step\":1,\"steps_per_epoch\":9,\"elapsed_seconds\":0.1,\"eta_seconds\":null}'\nkill -9 $$",
        );
        let out = tmp.path().join("run");
        prepare_out(Some(&out)).unwrap();
        let runners = vec![on_cpu("flex", fine), on_cpu("ndarray", killed)];
        execute(vec![cell("flex"), cell("ndarray")], &runners, cfg(), &out).unwrap();
        let text = std::fs::read_to_string(out.join(RESULTS_FILE)).unwrap();
        assert!(text.ends_with('\n'), "every record is a whole line");
        let loaded = kiln_results::read::load(std::slice::from_ref(&out)).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.records[0].status, Status::Ok);
        let killed = &loaded.records[1];
        assert_eq!(killed.status, Status::Failed);
        assert!(
            killed.reason.as_deref().unwrap_or("").contains("signal: 9"),
            "{:?}",
            killed.reason
        );
    }

    #[test]
    fn a_runner_past_its_wall_clock_limit_is_killed() {
        let tmp = tempfile::tempdir().unwrap();
        let hang = script(tmp.path(), "hang", "sleep 30");
        let out = tmp.path().join("run");
        prepare_out(Some(&out)).unwrap();
        let mut config = cfg();
        config.budget_seconds = None;
        // Exercise the limit directly with a tiny one.
        let mut display = Display::new();
        let position = Position {
            index: 1,
            total: 1,
            later_seconds: 0.0,
        };
        let record = run_cell(
            &hang,
            &cell("flex"),
            &config,
            &out,
            &position,
            &mut display,
            Duration::from_millis(300),
        )
        .unwrap()
        .expect("a timed-out cell is recorded");
        assert_eq!(record.status, Status::Failed);
        assert!(record.reason.unwrap().contains("timed out"));
    }

    fn common() -> CommonArgs {
        CommonArgs {
            quick: false,
            out: None,
            epochs: None,
            batch: None,
            budget: None,
            seed: None,
            data_dir: None,
            synthetic: false,
            dataset: None,
            eval_limit: None,
            train_limit: None,
            accum_steps: None,
            fallback: None,
            autotune: None,
            no_autotune_cache: false,
        }
    }

    #[test]
    fn resume_runs_only_cells_without_a_final_record_and_refuses_other_flags() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        prepare_out(Some(&out)).unwrap();
        let mut stored = cfg();
        stored.epochs = 3;
        write_run_file(&out, &stored, &[cell("flex"), cell("ndarray")]).unwrap();
        append_record(
            &out.join(RESULTS_FILE),
            &Record::not_run(&cell("flex").id, Status::Ok, ""),
        )
        .unwrap();
        let run: RunFile =
            serde_json::from_str(&std::fs::read_to_string(out.join(RUN_FILE)).unwrap()).unwrap();
        let left = remaining_cells(&run, &out).unwrap();
        assert_eq!(left, vec![cell("ndarray")]);

        let mut other = common();
        other.quick = true;
        other.epochs = Some(5);
        let err = resume(&out, &other, None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("epochs: run has 3, flags give 5"), "{err}");
        let err = resume(&out, &common(), Some(vec!["flex".into()]), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--backends: run has flex,ndarray, flags give flex"),
            "{err}"
        );
        // Every flag that shapes a cell is compared, the runtime ones included.
        let mut runtime = common();
        runtime.fallback = Some(FallbackTarget::Cpu);
        runtime.autotune = Some(AutotuneLevel::Full);
        runtime.no_autotune_cache = true;
        let err = resume(&out, &runtime, None, None, None)
            .unwrap_err()
            .to_string();
        for field in ["fallback", "autotune", "no_autotune_cache"] {
            assert!(err.contains(&format!("{field}: run has")), "{field}: {err}");
        }
        let err = resume(&tmp.path().join("nope"), &common(), None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a Kiln run directory"), "{err}");
    }

    #[test]
    fn records_are_appended_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(RESULTS_FILE);
        let id = CellId {
            model: "mnist-cnn".into(),
            backend: "flex".into(),
            device: "cpu".into(),
            precision: "f32".into(),
        };
        for _ in 0..3 {
            append_record(&path, &Record::not_run(&id, Status::Skipped, "x")).unwrap();
        }
        let loaded = kiln_results::read::load(&[tmp.path().to_path_buf()]).unwrap();
        assert_eq!(loaded.records.len(), 3);
        assert!(loaded.warnings.is_empty());
    }
}
