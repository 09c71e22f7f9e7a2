//! Reading runs for the site and `submit`: which directories are runs (a folder of runs, an
//! A/B run's sides), and each run's records, checked against the record schema.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_results::schema::Record;

use super::validate::Checker;
use crate::read::RESULTS_FILE;

/// One run directory's records, by the directory's name.
#[derive(Debug, Clone)]
pub struct Run {
    pub name: String,
    pub records: Vec<Record>,
}

/// A run directory and its name on the site: its own, under its folder's for a side of an
/// A/B run (`RUN/a-0.22.1`).
#[derive(Debug, Clone)]
pub struct RunDir {
    pub name: String,
    pub path: PathBuf,
}

impl RunDir {
    fn named(path: &Path, folder: Option<&Path>) -> RunDir {
        let own = |p: &Path| {
            p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        };
        let name = match folder {
            Some(f) => format!("{}/{}", own(f), own(path)),
            None => own(path),
        };
        RunDir {
            name,
            path: path.to_path_buf(),
        }
    }
}

/// The run directories among `paths`: a directory that holds a `results.jsonl` is a run;
/// any other directory is a folder of runs (`docs/results`, or an A/B run's folder of its
/// sides), read down to two levels, in name order. The folders under it that hold no run
/// (explain, verify or build-timing runs) are returned apart.
pub fn run_dirs(paths: &[PathBuf]) -> Result<(Vec<RunDir>, Vec<PathBuf>)> {
    let (mut runs, mut other) = (Vec::new(), Vec::new());
    for path in paths {
        if path.join(RESULTS_FILE).is_file() {
            runs.push(RunDir::named(path, None));
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
            if child.join(RESULTS_FILE).is_file() {
                runs.push(RunDir::named(&child, None));
                continue;
            }
            for side in subdirs(&child)? {
                if side.join(RESULTS_FILE).is_file() {
                    runs.push(RunDir::named(&side, Some(&child)));
                }
            }
            if runs.len() == found {
                other.push(child);
            }
        }
    }
    Ok((runs, other))
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
pub fn read_runs(dirs: &[RunDir]) -> Result<Vec<Run>> {
    let checker = Checker::new()?;
    let mut runs: Vec<Run> = Vec::new();
    for dir in dirs {
        let name = dir.name.clone();
        if runs.iter().any(|r| r.name == name) {
            anyhow::bail!(
                "{}: a second run named {name}; give each run once",
                dir.path.display()
            );
        }
        let records = checker.check_run(&dir.path)?;
        runs.push(Run { name, records });
    }
    Ok(runs)
}
