//! The results site: every committed run's records (and any run directories given) as one
//! static, self-contained site (HTML, CSS, one script, the data as JSON; no server, no network
//! at view time). Every record is checked against the record schema first (`validate`); the
//! rows are `rows`'s, the pages `pages`'s; `name` is the rule a committed run is named by.

pub mod name;
pub mod pages;
pub mod rows;
pub mod validate;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_results::schema::Record;

use crate::read::RESULTS_FILE;
pub use validate::{Checker, Refused};

/// The site's script and style, written beside its pages.
const SCRIPT: &str = include_str!("assets/site.js");
const STYLE: &str = include_str!("assets/site.css");

/// One run directory's records, by the directory's name.
#[derive(Debug, Clone)]
pub struct Run {
    pub name: String,
    pub records: Vec<Record>,
}

/// What a build wrote, and the directories it passed over (they hold no `results.jsonl`:
/// explain, verify or build-timing runs).
#[derive(Debug, Default)]
pub struct Built {
    pub runs: usize,
    pub records: usize,
    pub rows: usize,
    pub machines: usize,
    pub passed_over: Vec<PathBuf>,
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

/// The site of `runs`, written to `out`: index.html, compare.html, machines.html, one page per
/// machine under machines/, site.js, site.css, and the data as data.json (and as data.js, which
/// pages opened from files can load).
pub fn build(runs: &[Run], out: &Path) -> Result<Built> {
    let (machines, rows, per_run) = rows::site_rows(runs);
    std::fs::create_dir_all(out.join("machines"))
        .with_context(|| format!("{}: cannot create the site here", out.display()))?;
    let data = serde_json::json!({
        "machines": machines,
        "rows": rows,
        "filters": pages::FILTERS,
        "columns": pages::COLUMNS,
    });
    let json = serde_json::to_string(&data)?;
    let mut files: Vec<(String, String)> = vec![
        (
            "index.html".into(),
            pages::index(rows.len(), machines.len(), runs.len()),
        ),
        ("compare.html".into(), pages::compare()),
        ("machines.html".into(), pages::machine_list(&machines)),
        ("site.js".into(), SCRIPT.into()),
        ("site.css".into(), STYLE.into()),
        ("data.js".into(), format!("window.KILN_SITE = {json};\n")),
        ("data.json".into(), json),
    ];
    for (i, m) in machines.iter().enumerate() {
        // The machine's share of each of its runs (a fleet's run holds several machines).
        let its: Vec<(Run, Vec<rows::Row>)> = runs
            .iter()
            .zip(&per_run)
            .filter(|(run, _)| m.runs.contains(&run.name))
            .map(|(run, rows)| {
                let records = run
                    .records
                    .iter()
                    .filter(|r| crate::cells::machine_key(r) == m.key);
                let run = Run {
                    name: run.name.clone(),
                    records: records.cloned().collect(),
                };
                (
                    run,
                    rows.iter().filter(|r| r.machine == i).cloned().collect(),
                )
            })
            .collect();
        files.push((m.page.clone(), pages::machine(m, &its)));
    }
    for (name, text) in &files {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(Built {
        runs: runs.len(),
        records: runs.iter().map(|r| r.records.len()).sum(),
        rows: rows.len(),
        machines: machines.len(),
        passed_over: Vec::new(),
    })
}
