//! Reading runs for the site and `submit`: which directories are runs (a folder of runs, an
//! A/B run's sides), and each run's records, checked against the record schema.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_contract::schema::Record;

use super::validate::Checker;
use crate::read::RESULTS_FILE;

/// One run directory's records, by the directory's name.
#[derive(Debug, Clone)]
pub struct RunRecords {
    pub name: String,
    pub records: Vec<Record>,
    /// Why none of its records is a measurement, where none is ([`simulated_run`]).
    pub simulated: Option<&'static str>,
}

/// The label of a GPU kit's run on a machine without its GPU: every cell skipped.
pub const DRY_RUN: &str = "dry run";

/// The label of a replayed record (`gpu-kit --replay`): step times from a profile.
pub const REPLAYED: &str = "replayed";

/// Why a run directory's records are no measurements: a GPU kit's run (it holds `kit.json`)
/// in which no cell trained, as on a machine without the kit's GPU ([`DRY_RUN`]).
fn simulated_run(dir: &Path, records: &[Record]) -> Option<&'static str> {
    let ok = records
        .iter()
        .any(|r| r.status == kiln_contract::Status::Ok && r.replay.is_none());
    (dir.join("kit.json").is_file() && !ok).then_some(DRY_RUN)
}

/// A run directory and its name on the site: its path under the folder of runs it was found
/// in (`RUN`, an A/B run's side `RUN/a-0.22.1`, a fleet task `RUN/results/TASK`).
#[derive(Debug, Clone)]
pub struct RunDir {
    pub name: String,
    pub path: PathBuf,
}

/// How far below a folder of runs a run may lie: an A/B run's sides one level down, a fleet
/// run's tasks (`RUN/results/TASK/`) two.
const DEPTH: usize = 3;

/// The run directories among `paths`: a directory that holds a `results.jsonl` is a run;
/// any other directory is a folder of runs (`docs/results`), each of its directories a run or
/// holding runs below it (an A/B run's sides, a fleet run's tasks), in name order. The
/// directories under it that hold no run at all (explain, verify or build-timing runs) are
/// returned apart, to be named.
pub fn run_dirs(paths: &[PathBuf]) -> Result<(Vec<RunDir>, Vec<PathBuf>)> {
    dirs_holding(paths, RESULTS_FILE)
}

/// The directories among `paths` (and below them, as [`run_dirs`] finds runs) that hold `file`
/// (`results.jsonl`, `infer.jsonl`), and those under a folder of runs that hold none.
pub fn dirs_holding(paths: &[PathBuf], file: &str) -> Result<(Vec<RunDir>, Vec<PathBuf>)> {
    let (mut runs, mut other) = (Vec::new(), Vec::new());
    for path in paths {
        if path.join(file).is_file() {
            // A run given itself: named by its last component.
            collect(path.parent().unwrap_or(path), path, (1, file), &mut runs)?;
            continue;
        }
        let children = subdirs(path).with_context(|| {
            format!(
                "{}: not a run directory nor a folder of runs",
                path.display()
            )
        })?;
        for child in children {
            let found = runs.len();
            collect(path, &child, (DEPTH, file), &mut runs)?;
            if runs.len() == found {
                other.push(child);
            }
        }
    }
    Ok((runs, other))
}

/// `dir` if it holds `file`, else the directories below it that do, down to `depth` levels,
/// named by their path under `root`.
fn collect(
    root: &Path,
    dir: &Path,
    (depth, file): (usize, &str),
    runs: &mut Vec<RunDir>,
) -> Result<()> {
    if dir.join(file).is_file() {
        let name = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
        runs.push(RunDir {
            name,
            path: dir.to_path_buf(),
        });
    } else if depth > 1 {
        for sub in subdirs(dir)? {
            collect(root, &sub, (depth - 1, file), runs)?;
        }
    }
    Ok(())
}

/// The directories in `path`, in name order.
fn subdirs(path: &Path) -> Result<Vec<PathBuf>> {
    let mut children: Vec<PathBuf> = std::fs::read_dir(path)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    children.sort();
    Ok(children)
}

/// Every run of `dirs`, checked; the first record that fails the check refuses the build.
pub fn read_runs(dirs: &[RunDir]) -> Result<Vec<RunRecords>> {
    let checker = Checker::new()?;
    let mut runs: Vec<RunRecords> = Vec::new();
    for dir in dirs {
        let name = dir.name.clone();
        if runs.iter().any(|r| r.name == name) {
            anyhow::bail!(
                "{}: a second run named {name}; give each run once",
                dir.path.display()
            );
        }
        let records = checker.check_run(&dir.path)?;
        let simulated = simulated_run(&dir.path, &records);
        runs.push(RunRecords {
            name,
            records,
            simulated,
        });
    }
    Ok(runs)
}
