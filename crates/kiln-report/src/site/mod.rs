//! The results site: every committed run's records (and any run directories given) as one
//! static, self-contained site (HTML, CSS, one script, the data as JSON; no server, no network
//! at view time). Every record is checked against the record schema first (`validate`); the
//! rows are `rows`'s, the pages `pages`'s, the inference runs' page `serving`'s; `name` is the
//! rule a committed run is named by.

pub mod name;
pub mod pages;
pub mod rows;
pub mod runs;
pub mod serving;
pub mod submit;
pub mod validate;

use std::path::Path;

use anyhow::{Context, Result};

pub use runs::{RunDir, RunRecords, read_runs, run_dirs};
pub use validate::{Checker, Refused};

/// The site's script and style, written beside its pages.
const SCRIPT: &str = include_str!("assets/site.js");
const STYLE: &str = include_str!("assets/site.css");

/// What a build wrote.
#[derive(Debug, Default)]
pub struct BuiltSite {
    pub runs: usize,
    pub records: usize,
    pub rows: usize,
    pub machines: usize,
}

/// The site of `runs` (and the inference runs, `serving`), written to `out`: index.html,
/// compare.html, machines.html, serving.html, one page per machine under machines/, site.js, site.css, and the data as data.json (and as data.js, which
/// pages opened from files can load).
pub fn build(
    runs: &[RunRecords],
    serving: &[serving::ServingRun],
    out: &Path,
) -> Result<BuiltSite> {
    let (mut machines, rows, per_run, simulated) = rows::site_rows(runs);
    let serving_rows = serving::serving_rows(&mut machines, serving);
    std::fs::create_dir_all(out.join("machines"))
        .with_context(|| format!("{}: cannot create the site here", out.display()))?;
    let data = serde_json::json!({
        "machines": machines,
        "rows": rows,
        "filters": pages::FILTERS,
        "columns": pages::COLUMNS,
        "rows_drawn": pages::ROWS_DRAWN,
        "serving_rows": serving_rows,
        "serving_figures": serving::FIGURES.len(),
    });
    let json = serde_json::to_string(&data)?;
    let mut files: Vec<(String, String)> = vec![
        (
            "index.html".into(),
            pages::index(rows.len(), machines.len(), runs.len()),
        ),
        ("compare.html".into(), pages::compare()),
        ("machines.html".into(), pages::machine_list(&machines)),
        (
            "simulated.html".into(),
            pages::simulated(&machines, &simulated),
        ),
        (
            "serving.html".into(),
            pages::serving(serving, serving_rows.len()),
        ),
        ("site.js".into(), SCRIPT.into()),
        ("site.css".into(), STYLE.into()),
        ("data.js".into(), format!("window.KILN_SITE = {json};\n")),
        ("data.json".into(), json),
    ];
    for (i, m) in machines.iter().enumerate() {
        // The machine's share of each of its runs (a fleet's run holds several machines).
        let its: Vec<(RunRecords, Vec<rows::SiteRow>)> = runs
            .iter()
            .zip(&per_run)
            .filter(|(run, _)| m.runs.contains(&run.name))
            .map(|(run, rows)| {
                let records = run
                    .records
                    .iter()
                    .filter(|r| crate::fields::machine_key(r) == m.key);
                let run = RunRecords {
                    name: run.name.clone(),
                    records: records.cloned().collect(),
                    simulated: run.simulated,
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
    Ok(BuiltSite {
        runs: runs.len(),
        records: runs.iter().map(|r| r.records.len()).sum(),
        rows: rows.len(),
        machines: machines.len(),
    })
}
