//! `bench-all` and `bench`: plan the matrix, run one child process per cell, append records as
//! they arrive, fall back to the CPU where asked, write the report.

pub mod ab;
mod calibration;
pub mod child;
mod config;
mod execute;
use execute::{execute, matrix, probes, with_fallback_backends};
mod fallback;
mod interrupt;
mod learned;
mod limits;
mod noise;
mod one;
pub mod plan;
mod progress;
pub mod resume;
pub mod rundir;
#[cfg(test)]
pub mod tests;
pub mod watch;

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use kiln_contract::{CellId, ModelKind, Precision, TrainingLoop};
use kiln_report::read::RESULTS_FILE;

use crate::options::CommonArgs;
use crate::runners::{build_and_probe, wanted_with_remote};
pub use config::{PlannedCell, REPLAY_RUNNER};
use config::{config, dataset_for};
pub use interrupt::{install_interrupt_handler, interrupted};
pub use one::{OneCell, bench_one, bench_request, cell_only, one_backend};
pub use resume::{Given, resume};
use rundir::{append_record, check_out, prepare_out, write_run_file};

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
    config::no_auto(&cfg, "bench-all without --burn")?;
    let backends_named = backend_names.is_some();
    let wanted = wanted_with_remote(backend_names.as_deref(), remote)?;
    let matrix = matrix(
        common,
        &cfg,
        models,
        precisions,
        &wanted,
        backends_named,
        all_devices,
    )?;
    let out = check_out(common.out.get())?;
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
/// is its list, `cuda:0,cuda:1`), its own budget and warm-up cap when given, the wall time the
/// plan gives it, and its replay when it is one.
#[derive(Debug, Clone)]
pub struct PlanEntry {
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    pub training_loop: TrainingLoop,
    pub budget: Option<Duration>,
    pub warmup_cap: Option<Duration>,
    pub planned: Option<Duration>,
    pub replay: Option<kiln_contract::replay::Replay>,
    /// Why the plan could not fit this cell: it is recorded as not reached with this reason,
    /// never run.
    pub not_planned: Option<String>,
}

/// Write a plan without probing, as `bench-all --plan-only` writes one (`run.json` and a request
/// per cell in `dir`, which must be new or empty): `cells` in order, under the run
/// configuration `common` gives, within `time_limit` when given. `bench-all --resume DIR` runs
/// it; the GPU kit plans a machine it is not built on this way.
pub fn write_plan(
    dir: &Path,
    common: &CommonArgs,
    cells: &[PlanEntry],
    time_limit: Option<Duration>,
) -> Result<Vec<PlannedCell>> {
    let (_, mut cfg) = config(common, false)?;
    cfg.time_limit_seconds = time_limit.map(|t| t.as_secs_f64());
    let mut planned = Vec::new();
    for e in cells {
        let (dataset, dataset_note) = dataset_for(e.model, common)?;
        for &batch in &cfg.batch_sizes {
            planned.push(PlannedCell {
                replay: e.replay.clone(),
                planned_seconds: e.planned.map(|p| p.as_secs_f64()),
                id: CellId::new(e.model, &e.backend, &e.device, e.precision, batch)
                    .with_loop(e.training_loop),
                dataset,
                dataset_note: dataset_note.clone(),
                budget_seconds: e.budget.map(|b| b.as_secs_f64()),
                autotune: None,
                warmup_cap_seconds: e.warmup_cap.map(|c| c.as_secs_f64()),
                not_planned: e.not_planned.clone(),
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
