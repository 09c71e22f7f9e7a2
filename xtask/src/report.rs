//! `cargo xtask report`: re-render one run or several (A/B and explain runs included) in the
//! formats asked for.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_contract::Record;
use kiln_report::export::ExportInputs;
use kiln_report::html::HtmlParts;

use crate::flags::ReportOutputs;
use kiln_report::chart;

use crate::run_report::{all_charts, chart_sets, log_links};

/// Where the chart of `model` goes when the user asked for `--svg target`.
fn svg_path(target: &Path, model: &str, several: bool) -> PathBuf {
    if !several {
        return target.with_extension("svg");
    }
    let stem = target
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chart".into());
    target.with_file_name(format!("{stem}-{model}.svg"))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("kiln: wrote {}", path.display());
    Ok(())
}

/// Every file the flags asked for (`--html FILE`, `--csv FILE`, ..., `--svg FILE`).
fn write_outputs(
    paths: &[PathBuf],
    records: &[Record],
    baseline: Option<&str>,
    outputs: &ReportOutputs,
) -> Result<()> {
    for (format, target) in &outputs.files {
        let mut parts = HtmlParts::default();
        if format.shows_charts {
            let dir = target.parent().unwrap_or(Path::new("."));
            for run in paths.iter().filter(|p| p.is_dir()) {
                parts.logs.extend(log_links(run, records, dir));
            }
            parts.title = match paths {
                [one] => one.display().to_string(),
                _ => format!("{} runs", paths.len()),
            };
            parts.charts = all_charts(&chart_sets(records, baseline)?);
        }
        let inputs = ExportInputs {
            records,
            baseline,
            parts,
        };
        write(target, &(format.render)(&inputs))?;
    }
    if let Some(target) = &outputs.svg {
        let charts = chart::charts(records, baseline)?;
        for (model, svg) in &charts {
            write(&svg_path(target.as_path(), model, charts.len() > 1), svg)?;
        }
        for (model, svg) in chart::batch_charts(records)? {
            write(
                &svg_path(target.as_path(), &format!("batch-{model}"), true),
                &svg,
            )?;
        }
    }
    Ok(())
}

pub fn report(
    paths: &[PathBuf],
    baseline: Option<&str>,
    outputs: &ReportOutputs,
) -> Result<Vec<Record>> {
    // An A/B run directory (`--burn A --burn B`): its comparison, rendered again.
    if let [dir] = paths
        && let Some(sides) = crate::burns::side_dirs(dir)?
    {
        print!("{}", kiln_engine::bench::ab::rewrite(dir, &sides)?);
        return Ok(Vec::new());
    }
    // `cargo xtask explain` directories hold explain.jsonl; a run directory may hold both.
    let explained = crate::explain::load(paths)?;
    let timed: Vec<PathBuf> = paths
        .iter()
        .filter(|p| {
            let explain_only = if p.is_dir() {
                p.join(crate::explain::EXPLAIN_FILE).is_file() && !p.join("results.jsonl").exists()
            } else {
                p.file_name()
                    .is_some_and(|n| n == crate::explain::EXPLAIN_FILE)
            };
            !explain_only
        })
        .cloned()
        .collect();
    if !explained.is_empty() {
        print!("{}", kiln_report::explain::report(&explained));
        if let Some(target) = &outputs.svg {
            let charts = crate::explain::charts(&explained)?;
            for (model, svg) in &charts {
                write(&svg_path(target, &format!("explain-{model}"), true), svg)?;
            }
        }
        if timed.is_empty() {
            return Ok(Vec::new());
        }
    }
    let paths = &timed[..];
    let loaded = kiln_report::read::load(paths)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    if loaded.records.is_empty() {
        anyhow::bail!(
            "no valid record in {}; nothing to render",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    print!(
        "{}",
        kiln_report::render::markdown(&loaded.records, baseline)
    );
    write_outputs(paths, &loaded.records, baseline, outputs)?;
    Ok(loaded.records)
}

/// `report --expect BACKENDS`: an error listing every expected backend without a plausible row
/// (`kiln_report::check`); `Ok(true)` when all have one, or when none is expected.
pub fn expect(records: &[Record], backends: &[String]) -> Result<bool> {
    let problems = kiln_report::check::expect(records, backends);
    if problems.is_empty() {
        if !backends.is_empty() {
            eprintln!(
                "kiln: every expected backend has a plausible row: {}",
                backends.join(", ")
            );
        }
        return Ok(true);
    }
    anyhow::bail!(
        "{} problem(s) with the rows expected:\n  {}",
        problems.len(),
        problems.join("\n  ")
    )
}
