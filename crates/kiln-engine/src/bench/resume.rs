//! `bench-all --resume DIR`: finish a run with its own configuration, refusing any flag that
//! would change it.

use std::path::Path;

use anyhow::{Context, Result, bail};
use kiln_contract::{CellId, ModelKind, Precision, Record};
use kiln_report::read::RESULTS_FILE;

use super::config::{PlannedCell, RUN_FILE, RunConfig, RunFile};
use super::execute::with_fallback_backends;
use crate::backends::{self, Backend};
use crate::options::CommonArgs;
use crate::runners::build_and_probe;

/// Describe how `stored` and `wanted` differ, field by field.
pub(super) fn config_differences(stored: &RunConfig, wanted: &RunConfig) -> Vec<String> {
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

/// The (cell, repeat) pairs of a run that have a final record in its results file (a record
/// without a repeat is the first run).
pub(super) fn done_runs(dir: &Path) -> Result<Vec<(CellId, usize)>> {
    let results = dir.join(RESULTS_FILE);
    if !results.exists() {
        return Ok(Vec::new());
    }
    Ok(kiln_report::read::load(std::slice::from_ref(&results))?
        .records
        .iter()
        .map(|r: &Record| (r.cell(), r.repeat.as_ref().map_or(1, |p| p.index)))
        .collect())
}

/// The planned cells of a run that still miss a record of some repeat.
pub(super) fn remaining_cells(run: &RunFile, dir: &Path) -> Result<Vec<PlannedCell>> {
    let done = done_runs(dir)?;
    let order = super::execute::schedule(&run.cells, run.config.repeats, &done);
    Ok(run
        .cells
        .iter()
        .enumerate()
        .filter(|(i, _)| order.iter().any(|(c, _)| c == i))
        .map(|(_, c)| c.clone())
        .collect())
}

/// The run options (`CommonArgs`, by clap's argument ids) that `--resume` does not apply:
/// where the run's files go and which data its planned cells train on (run.json fixes both).
/// Each is refused when given with `--resume`.
pub const NOT_APPLIED: &[&str] = &["out", "synthetic", "dataset"];

/// The bench-all flags besides the run options that `--resume` takes: itself, and the matrix
/// it compares with the run's (`backends`, `models`, `precisions`).
const MATRIX: &[&str] = &["resume", "backends", "models", "precisions"];

/// The bench-all flags (clap's argument ids) that `--resume` applies, each compared with what
/// the run has (a difference is refused): every run option but [`NOT_APPLIED`], read from
/// `CommonArgs` itself, so a new setting's flag is applied by `RunConfig::apply`, the one
/// mapping (a test fails for a flag that mapping leaves out), and the matrix. Every other flag
/// given with `--resume` is refused outright: a resumed run never mixes two configurations.
pub fn applied_on_resume() -> Vec<String> {
    use clap::Args;
    CommonArgs::augment_args(clap::Command::new("bench-all"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .filter(|id| !NOT_APPLIED.contains(&id.as_str()))
        .chain(MATRIX.iter().map(|m| m.to_string()))
        .collect()
}

/// The flags given on a command line: each argument's id (clap's, `remote`) beside the name
/// the user typed it by (`--device`).
pub type Given = [(String, String)];

/// The flags of `given` that `--resume` cannot apply, by their command-line names.
pub fn refused_on_resume(given: &Given) -> Vec<String> {
    let applied = applied_on_resume();
    given
        .iter()
        .filter(|(id, _)| !applied.contains(id))
        .map(|(_, name)| name.clone())
        .collect()
}

/// The run file of `dir`, refused when its run was built against another Burn; cells of an
/// older Kiln without a batch size get the run's.
fn read_run(dir: &Path) -> Result<RunFile> {
    let run_path = dir.join(RUN_FILE);
    let text = std::fs::read_to_string(&run_path).with_context(|| {
        format!(
            "--resume {}: no {RUN_FILE} there, so it is not a Kiln run directory",
            dir.display()
        )
    })?;
    let mut run: RunFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a run file this Kiln can read", run_path.display()))?;
    if let Some(burn) = run.config.burn.as_ref().filter(|b| {
        b.path.is_some() || {
            let manifest =
                std::fs::read_to_string(crate::workspace::workspace_root().join("Cargo.toml"))
                    .unwrap_or_default();
            crate::burns::workspace_burn_version(&manifest).as_deref() != Some(b.version.as_str())
        }
    }) {
        bail!(
            "--resume {}: this run was built against Burn {}, not this workspace's; run the A/B \
             again (`--burn`), resume finishes runs of this workspace's Burn only",
            dir.display(),
            burn.label()
        );
    }
    // A run file of an older Kiln plans cells without a batch size: its run's one applies.
    let batch = run.config.batch_sizes.first().copied().unwrap_or(128);
    for c in run.cells.iter_mut().filter(|c| c.id.batch_size == 0) {
        c.id.batch_size = batch;
    }
    Ok(run)
}

/// The backends, models and precisions given now that differ from the run's cells'.
fn matrix_differences(
    run: &RunFile,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
) -> Vec<String> {
    let mut differences = Vec::new();
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
    differences
}

/// `cargo xtask bench-all --resume DIR`: run the cells of DIR that have no final record;
/// `given` names the flags given on the command line (clap's argument ids).
pub fn resume(
    dir: &Path,
    common: &CommonArgs,
    given: &Given,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
) -> Result<bool> {
    let run = read_run(dir)?;
    // The run's configuration with every flag given now applied: any change is a difference.
    let mut wanted = run.config.clone();
    wanted.apply(common)?;
    let mut differences = config_differences(&run.config, &wanted);
    for flag in refused_on_resume(given) {
        differences.push(format!(
            "{flag}: --resume cannot apply it (the run's run.json fixes its cells)"
        ));
    }
    differences.extend(matrix_differences(&run, backend_names, models, precisions));
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
        // A cell the plan could not fit is recorded without a runner.
        let mut names: Vec<&str> = remaining
            .iter()
            .filter(|c| c.not_planned.is_none())
            .map(|c| match c.replay {
                Some(_) => super::config::REPLAY_RUNNER,
                None => c.id.backend.as_str(),
            })
            .collect();
        names.sort();
        names.dedup();
        names
            .iter()
            .map(|n| backends::find(n))
            .collect::<Result<_>>()?
    };
    let built = build_and_probe(
        &with_fallback_backends(wanted, run.config.cell.fallback.is_some()),
        remaining.iter().any(|c| {
            c.replay.is_none() && c.id.training_loop == Some(kiln_contract::TrainingLoop::Learner)
        }),
    )?;
    eprintln!(
        "kiln: resuming {}: {} of {} cells left",
        dir.display(),
        remaining.len(),
        run.cells.len()
    );
    let done = done_runs(dir)?;
    super::execute::execute_rest(run.cells.clone(), &built, run.config, dir, &done, true)
}
