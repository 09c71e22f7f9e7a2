//! Running a planned matrix: the order of its cells (repeats interleaved), one child process
//! per cell with its calibration and drift measured around them, the records appended as they
//! arrive, and the run's report at the end.

use std::cell::RefCell;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use kiln_contract::{CellId, ModelKind, Precision, ProbeReport, Record, Status};
use kiln_report::read::RESULTS_FILE;

use super::calibration::{Peaks, calibrate, cell_run, measure_drift};
use super::child::CellRun;
use super::child::run_cell;
use super::config::dataset_for;
use super::config::{PlannedCell, RunConfig};
use super::fallback::fallback_reason;
use super::learned::Lessons;
use super::limits::{planned_limit, wall_clock_limit};
use super::progress::{Display, Position};
use super::rundir::append_record;
use super::{noise, plan};
use crate::backends::{self, Backend};
use crate::options::CommonArgs;
use crate::runners::{Built, Runner, runner_of};
use kiln_report::fields::human_seconds;

/// The order a run's cells run in: each repeat of the whole matrix in turn (A B C A B C ...),
/// so drift over time spreads over every row; `done` lists the (cell, repeat) pairs that
/// already have a record (a resumed run).
pub(super) fn schedule(
    cells: &[PlannedCell],
    repeats: usize,
    done: &[(CellId, usize)],
) -> Vec<(usize, usize)> {
    (1..=repeats.max(1))
        .flat_map(|k| (0..cells.len()).map(move |i| (i, k)))
        .filter(|(i, k)| !done.contains(&(cells[*i].id.clone(), *k)))
        .collect()
}

/// Run planned cells, append their records, render the report. Returns false if any failed or
/// the run was interrupted.
pub(super) fn execute(
    cells: Vec<PlannedCell>,
    built: &[Built],
    cfg: RunConfig,
    out: &Path,
) -> Result<bool> {
    execute_rest(cells, built, cfg, out, &[], true)
}

/// [`execute`], leaving out the (cell, repeat) pairs in `done`.
pub(super) fn execute_rest(
    cells: Vec<PlannedCell>,
    built: &[Built],
    cfg: RunConfig,
    out: &Path,
    done: &[(CellId, usize)],
    announce: bool,
) -> Result<bool> {
    let results = out.join(RESULTS_FILE);
    let repeats = cfg.repeats.max(1);
    let order = schedule(&cells, repeats, done);
    eprintln!(
        "kiln: {} cells{}; results go to {}",
        cells.len(),
        if repeats > 1 {
            format!(
                " x {repeats} runs each, interleaved ({} to run)",
                order.len()
            )
        } else {
            String::new()
        },
        results.display()
    );
    let mut display = Display::new(order.len());
    let peaks = if cfg.cell.bare || order.is_empty() || !cfg.calibrate {
        Some(Peaks::default())
    } else {
        calibrate(&cells, built, &cfg, out, &mut display, false)?
    };
    let Some(peaks) = peaks else {
        display.finish();
        eprintln!(
            "kiln: interrupted during calibration; finish the run with `cargo xtask bench-all --resume {}`",
            out.display()
        );
        return Ok(false);
    };
    let run = Underway {
        built,
        probes: probes(built),
        cfg: &cfg,
        out,
        results: &results,
        peaks: &peaks,
        run_id: out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        repeats,
        deadline: cfg
            .time_limit_seconds
            .map(|s| Instant::now() + Duration::from_secs_f64(s)),
        learned: RefCell::new(Lessons::default()),
    };
    let per_cell_bound = cfg.cell.budget_seconds.map_or(0.0, |b| b + 120.0);
    let mut all_ok = true;
    for (i, &(c, k)) in order.iter().enumerate() {
        let position = Position {
            index: i + 1,
            total: order.len(),
            later_seconds: per_cell_bound * (order.len() - i - 1) as f64,
        };
        match run.cell(&cells[c], k, &position, &mut display)? {
            Some(ok) => all_ok &= ok,
            None => {
                display.finish();
                eprintln!(
                    "kiln: {i} of {} cells finished; finish the run with `cargo xtask bench-all --resume {}`",
                    order.len(),
                    out.display()
                );
                all_ok = false;
                break;
            }
        }
    }
    if all_ok && announce && repeats > 1 && !peaks.own.is_empty() {
        measure_drift(&cells, built, &cfg, out, &mut display, &peaks)?;
    }
    display.finish();
    report(&results, out, announce)?;
    Ok(all_ok)
}

/// A run under way: what every cell of it shares.
struct Underway<'a> {
    built: &'a [Built],
    /// The built backends' probe reports, by name (where a fallback cell goes).
    probes: Vec<(&'a str, &'a ProbeReport)>,
    cfg: &'a RunConfig,
    out: &'a Path,
    results: &'a Path,
    peaks: &'a Peaks,
    run_id: String,
    repeats: usize,
    /// When the run's time (`time_limit_seconds`) runs out.
    deadline: Option<Instant>,
    /// What the run's earlier cells measured of their warm-ups: later caps of the same backend
    /// and device follow it.
    learned: RefCell<Lessons>,
}

impl Underway<'_> {
    /// Run repeat `k` of `cell` (and its fallback, when it needs one), appending the records:
    /// whether they are results, or `None` when Ctrl-C interrupted it.
    fn cell(
        &self,
        cell: &PlannedCell,
        k: usize,
        position: &Position,
        display: &mut Display,
    ) -> Result<Option<bool>> {
        let waited = self.cfg.wait_quiet_seconds.map(|max| {
            noise::wait_quiet(Duration::from_secs_f64(max), |m| {
                display.line(&format!("kiln: {m}"))
            })
        });
        let Some(mut record) = self.attempt(cell, k, waited, position, display)? else {
            return Ok(None);
        };
        // A planned warm-up that ran past its cap is tried once more under the cap it taught
        // (at least doubled), when the run's time still holds it: the plan was made for
        // another device.
        let retry = (record.status == Status::NotSteady)
            .then(|| self.learned.borrow().raise(cell))
            .flatten()
            .filter(|(raised, _)| self.not_reached(raised).is_none());
        if retry.is_some() {
            let first = record.warmup.as_ref().map_or(0.0, |w| w.seconds);
            let cap = cell.warmup_cap_seconds.unwrap_or_default();
            display.line(&format!(
                "kiln: {}: not steady under the plan's {} cap; once more under a raised one",
                cell.id,
                human_seconds(cap)
            ));
            let Some(mut again) = self.attempt(cell, k, None, position, display)? else {
                return Ok(None);
            };
            let note = format!(
                "a first try under the plan's {} warm-up cap did not settle (stopped after {})",
                human_seconds(cap),
                human_seconds(first)
            );
            again.append_reason(&note);
            record = again;
        }
        append_record(self.results, &record)?;
        let fallback = match (&self.cfg.cell.fallback, fallback_reason(&record)) {
            (Some(_), Some(why)) => plan::fallback_cell(cell, &self.probes)
                .and_then(|c| runner_of(self.built, &c.id.backend).map(|r| (c, r)))
                .map(|c| (c, why)),
            _ => None,
        };
        let Some(((fb_cell, fb_runner), why)) = fallback else {
            return Ok(Some(record.status.is_result()));
        };
        let from = format!("{} {}: {why}", cell.id.backend, cell.id.device);
        display.line(&format!(
            "kiln: {} falls back to {} {}",
            cell.id, fb_cell.id.backend, fb_cell.id.device
        ));
        let fb_run = cell_run(&fb_cell, self.peaks, k, self.repeats, &self.run_id, None);
        let Some(mut fb) = self.run(fb_runner, &fb_cell, &fb_run, position, display)? else {
            return Ok(None);
        };
        fb.fallback_from = Some(from.clone());
        fb.reason = Some(match fb.reason.take() {
            Some(r) => format!("fell back from {from}; {r}"),
            None => format!("fell back from {from}"),
        });
        append_record(self.results, &fb)?;
        Ok(Some(fb.status.is_result()))
    }

    /// One try of repeat `k` of `cell`, its cap raised by what the run's earlier cells taught
    /// (the record says so), learned from in turn; `None` when Ctrl-C interrupted it.
    fn attempt(
        &self,
        cell: &PlannedCell,
        k: usize,
        waited: Option<(f64, Option<bool>)>,
        position: &Position,
        display: &mut Display,
    ) -> Result<Option<Record>> {
        let raised = self.learned.borrow().raise(cell);
        let (cell, raised_note) = match &raised {
            Some((c, note)) => (c, Some(note)),
            None => (cell, None),
        };
        let run = cell_run(cell, self.peaks, k, self.repeats, &self.run_id, waited);
        let backend = match cell.replay {
            Some(_) => super::config::REPLAY_RUNNER,
            None => cell.id.backend.as_str(),
        };
        let not_run = match &cell.not_planned {
            Some(why) => Some(format!("not planned: {why}")),
            None => self.not_reached(cell),
        };
        let record = match (not_run, runner_of(self.built, backend)) {
            (Some(why), _) => {
                display.line(&format!("kiln: {}: {why}", cell.id));
                let mut r = Record::not_run(&cell.id, Status::NotReached, why);
                r.repeat = run.repeat.clone();
                Some(r)
            }
            (None, Some(runner)) => self.run(runner, cell, &run, position, display)?,
            (None, None) => Some(not_built(cell, &run)),
        };
        let Some(mut record) = record else {
            return Ok(None);
        };
        if let Some(note) = raised_note {
            record.append_reason(note);
        }
        self.learned.borrow_mut().learn(cell, &record);
        Ok(Some(record))
    }

    /// What is left of the run's time, if it has one.
    fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Why `cell` is not started: the run's time left is short of the time planned for it.
    fn not_reached(&self, cell: &PlannedCell) -> Option<String> {
        let left = self.left()?;
        let planned = cell.planned_seconds.unwrap_or(0.0);
        (left.as_secs_f64() < planned.max(1.0)).then(|| {
            format!(
                "not reached: {} of the run's {} were left, and the plan gives this cell {}",
                human_seconds(left.as_secs_f64()),
                human_seconds(self.cfg.time_limit_seconds.unwrap_or_default()),
                human_seconds(planned)
            )
        })
    }

    /// One cell's process under its wall-clock limits.
    fn run(
        &self,
        runner: &Runner,
        cell: &PlannedCell,
        run: &CellRun,
        position: &Position,
        display: &mut Display,
    ) -> Result<Option<Record>> {
        let mut limits = wall_clock_limit(
            cell.budget_seconds.or(self.cfg.cell.budget_seconds),
            cell.warmup_cap_seconds
                .unwrap_or(self.cfg.cell.warmup_cap_seconds),
        );
        limits.whole = match cell.planned_seconds {
            Some(planned) => Some(planned_limit(planned, self.left())),
            None => self.left(),
        };
        run_cell(
            runner, cell, self.cfg, self.out, position, display, limits, run,
        )
    }
}

/// The record of a cell whose backend has no runner here, saying why.
fn not_built(cell: &PlannedCell, run: &CellRun) -> Record {
    let mut r = Record::not_run(
        &cell.id,
        Status::Skipped,
        backends::find(&cell.id.backend)
            .ok()
            .and_then(|b| {
                crate::runners::runner(b)
                    .err()
                    .or_else(|| backends::unbuildable(b))
            })
            .unwrap_or_else(|| "backend not built".into()),
    );
    r.repeat = run.repeat.clone();
    r
}

/// The run's report from its records; with `announce`, the terminal table and where the
/// reports are.
fn report(results: &Path, out: &Path, announce: bool) -> Result<()> {
    let loaded = kiln_report::read::load(std::slice::from_ref(&results.to_path_buf()))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let (_, report, html) = crate::run_report::write_run_report(out, &loaded.records)?;
    if announce {
        println!(
            "\n{}",
            crate::run_report::terminal(&loaded.records, Some(out))
        );
        println!("Report: {}\n        {}", report.display(), html.display());
        eprintln!(
            "kiln: re-render with `cargo xtask report {}` (--html, --csv, --svg)",
            out.display()
        );
    }
    Ok(())
}

/// The probe reports of the built backends, by name.
pub(super) fn probes(built: &[Built]) -> Vec<(&str, &ProbeReport)> {
    built.iter().map(|(b, _, p)| (b.name.as_str(), p)).collect()
}

/// The backends to probe besides `wanted`: with `--fallback`, every default backend, so that
/// a CPU device to fall back to is known.
pub(super) fn with_fallback_backends(
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

/// The matrix of a run: the models (the profile's unless given) with their datasets, the
/// precisions (f32 unless given), and the `wanted` backends, with `cfg`'s batch sizes and loops.
pub(crate) fn matrix(
    common: &CommonArgs,
    cfg: &RunConfig,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
    wanted: &[&'static Backend],
    backends_named: bool,
    all_devices: bool,
) -> Result<plan::Matrix> {
    let profile = cfg.cell.profile;
    let models = models.unwrap_or_else(|| profile.models().to_vec());
    Ok(plan::Matrix {
        models: models
            .iter()
            .map(|&m| dataset_for(m, common).map(|d| (m, d)))
            .collect::<Result<_>>()?,
        precisions: precisions.unwrap_or_else(|| vec![Precision::F32]),
        batch_sizes: cfg.batch_sizes.clone(),
        backends: wanted.iter().map(|b| b.name.clone()).collect(),
        backends_named,
        all_devices,
        fallback: cfg.cell.fallback.is_some(),
        budget_given: common.settings.budget_seconds.is_some(),
        autotune_given: common.settings.autotune.is_some(),
        profile,
        loops: cfg.loops.clone(),
    })
}
