//! `bench-all` and `bench`: plan the matrix, run one child process per cell, append records as
//! they arrive, fall back to the CPU where asked, write the report.

pub mod ab;
mod calibration;
pub(crate) mod child;
mod config;
mod fallback;
mod interrupt;
mod limits;
mod noise;
mod one;
pub mod plan;
mod progress;
mod resume;
pub(crate) mod rundir;
#[cfg(test)]
pub(crate) mod tests;

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use kiln_report::read::RESULTS_FILE;
use kiln_results::{CellId, ModelKind, Precision, ProbeReport, Record, Status, TrainingLoop};

use crate::backends::{self, Backend};
use crate::flags::CommonArgs;
use crate::runners::Runner;
use crate::runners::{Built, build_and_probe, wanted_backends};
use calibration::{Peaks, calibrate, cell_run, measure_drift};
use child::run_cell;
pub use config::{PlannedCell, RunConfig};
use config::{config, dataset_for};
use fallback::fallback_reason;
pub use interrupt::{install_interrupt_handler, interrupted};
use limits::wall_clock_limit;
pub use one::{OneCell, bench_one, bench_request, cell_only, one_backend};
use progress::{Display, Position};
pub use resume::resume;
#[cfg(test)]
use rundir::cell_stem;
use rundir::{append_record, check_out, prepare_out, write_run_file};

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
fn execute(cells: Vec<PlannedCell>, built: &[Built], cfg: RunConfig, out: &Path) -> Result<bool> {
    execute_rest(cells, built, cfg, out, &[], true)
}

/// [`execute`], leaving out the (cell, repeat) pairs in `done`.
fn execute_rest(
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
    let run_id = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
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
    let per_cell_bound = cfg.cell.budget_seconds.map_or(0.0, |b| b + 120.0);
    let probes = probes(built);
    let mut all_ok = true;
    for (i, &(c, k)) in order.iter().enumerate() {
        let cell = &cells[c];
        let position = Position {
            index: i + 1,
            total: order.len(),
            later_seconds: per_cell_bound * (order.len() - i - 1) as f64,
        };
        let waited = cfg.wait_quiet_seconds.map(|max| {
            noise::wait_quiet(Duration::from_secs_f64(max), |m| {
                display.line(&format!("kiln: {m}"))
            })
        });
        let run = cell_run(cell, &peaks, k, repeats, &run_id, waited);
        let runner = runner_of(built, &cell.id.backend).cloned();
        let record = match runner {
            Some(runner) => run_cell(
                &runner,
                cell,
                &cfg,
                out,
                &position,
                &mut display,
                wall_clock_limit(
                    cell.budget_seconds.or(cfg.cell.budget_seconds),
                    cell.warmup_cap_seconds
                        .unwrap_or(cfg.cell.warmup_cap_seconds),
                ),
                &run,
            )?,
            None => Some(Record::not_run(
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
            ))
            .map(|mut r| {
                r.repeat = run.repeat.clone();
                r
            }),
        };
        let Some(record) = record else {
            all_ok = false;
            display.finish();
            eprintln!(
                "kiln: {} of {} cells finished; finish the run with `cargo xtask bench-all --resume {}`",
                i,
                order.len(),
                out.display()
            );
            break;
        };
        append_record(&results, &record)?;
        let fallback = match (&cfg.cell.fallback, fallback_reason(&record)) {
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
                let fb_run = cell_run(&fb_cell, &peaks, k, repeats, &run_id, None);
                let Some(mut fb) = run_cell(
                    fb_runner,
                    &fb_cell,
                    &cfg,
                    out,
                    &position,
                    &mut display,
                    wall_clock_limit(
                        fb_cell.budget_seconds.or(cfg.cell.budget_seconds),
                        fb_cell
                            .warmup_cap_seconds
                            .unwrap_or(cfg.cell.warmup_cap_seconds),
                    ),
                    &fb_run,
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
                all_ok &= fb.status.is_result();
                append_record(&results, &fb)?;
            }
            None => all_ok &= record.status.is_result(),
        }
    }
    if all_ok && announce && repeats > 1 && !peaks.own.is_empty() {
        measure_drift(&cells, built, &cfg, out, &mut display, &peaks)?;
    }
    display.finish();
    let loaded = kiln_report::read::load(std::slice::from_ref(&results))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let (_, report, html) = crate::report::write_run_report(out, &loaded.records)?;
    if !announce {
        return Ok(all_ok);
    }
    println!("\n{}", crate::report::terminal(&loaded.records, Some(out)));
    println!("Report: {}\n        {}", report.display(), html.display());
    eprintln!(
        "kiln: re-render with `cargo xtask report {}` (--html, --csv, --svg)",
        out.display()
    );
    Ok(all_ok)
}

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
        budget_given: common.budget.is_some(),
        autotune_given: common.autotune.is_some(),
        profile,
        loops: cfg.loops.clone(),
    })
}

/// `cargo xtask bench-all`; with `plan_only`, the run directory gets `run.json` and a request
/// per cell (`cells/*.json`) and nothing runs.
pub fn bench_all(
    common: &CommonArgs,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
    all_devices: bool,
    plan_only: bool,
    remote: bool,
) -> Result<bool> {
    let (_, cfg) = config(common, false)?;
    let backends_named = backend_names.is_some();
    let mut wanted = wanted_backends(backend_names.as_deref())?;
    // `--device remote:...` adds the remote backend; its probe reports those devices.
    if remote && !wanted.iter().any(|b| b.name == "remote") {
        wanted.push(backends::find("remote")?);
    }
    let matrix = matrix(
        common,
        &cfg,
        models,
        precisions,
        &wanted,
        backends_named,
        all_devices,
    )?;
    let out = check_out(common.out.as_deref())?;
    let built = build_and_probe(
        &with_fallback_backends(wanted, cfg.cell.fallback.is_some()),
        cfg.loops.contains(&TrainingLoop::Learner),
    )?;
    let plan::Plan { cells, skipped } = plan::plan(&matrix, &probes(&built));
    for (_, (_, note)) in &matrix.models {
        if let Some(note) = note {
            eprintln!("kiln: {note}");
        }
    }
    let out = prepare_out(Some(&out))?;
    if plan_only {
        write_run_file(&out, &cfg, &cells)?;
        for cell in &cells {
            let path = rundir::write_request(&out, &cell.request(&cfg)?, "")?;
            println!("run     {}  ({})", cell.id, path.display());
        }
        for r in &skipped {
            println!(
                "skip    {}: {}",
                r.cell(),
                r.reason.clone().unwrap_or_default()
            );
        }
        eprintln!(
            "kiln: planned {} cells ({} skipped) in {}; run one with `cargo xtask bench --cell \
             FILE`, or all with `cargo xtask bench-all --resume {}`",
            cells.len(),
            skipped.len(),
            out.display(),
            out.display()
        );
        return Ok(true);
    }
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

/// One cell of a plan written without probing: its coordinates (a data-parallel cell's device
/// is its list, `cuda:0,cuda:1`), and its own budget and warm-up cap when given.
#[derive(Debug, Clone, Copy)]
pub struct PlanEntry {
    pub model: ModelKind,
    pub backend: &'static str,
    pub device: &'static str,
    pub precision: Precision,
    pub training_loop: TrainingLoop,
    pub budget: Option<Duration>,
    pub warmup_cap: Option<Duration>,
}

/// Write a plan without probing, as `bench-all --plan-only` writes one (`run.json` and a request
/// per cell in `dir`, which must be new or empty): `cells` in order, under the run
/// configuration `common` gives. `bench-all --resume DIR` runs it; the GPU kit plans a machine
/// it is not built on this way.
pub fn write_plan(
    dir: &Path,
    common: &CommonArgs,
    cells: &[PlanEntry],
) -> Result<Vec<PlannedCell>> {
    let (_, cfg) = config(common, false)?;
    let mut planned = Vec::new();
    for e in cells {
        let (dataset, dataset_note) = dataset_for(e.model, common)?;
        for &batch in &cfg.batch_sizes {
            planned.push(PlannedCell {
                id: CellId::new(e.model, e.backend, e.device, e.precision, batch)
                    .with_loop(e.training_loop),
                dataset,
                dataset_note: dataset_note.clone(),
                budget_seconds: e.budget.map(|b| b.as_secs_f64()),
                autotune: None,
                warmup_cap_seconds: e.warmup_cap.map(|c| c.as_secs_f64()),
            });
        }
    }
    let dir = prepare_out(Some(dir))?;
    write_run_file(&dir, &cfg, &planned)?;
    for cell in &planned {
        rundir::write_request(&dir, &cell.request(&cfg)?, "")?;
    }
    Ok(planned)
}
