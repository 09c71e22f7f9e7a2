//! Rendering records: one writer for a run directory (`bench-all`, `bench`) and for
//! `cargo xtask report`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_results::Record;

use crate::chart;

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

/// Outputs `report` writes besides the Markdown it prints.
pub struct Outputs<'a> {
    pub csv: Option<&'a Path>,
    pub json: Option<&'a Path>,
    pub svg: Option<&'a Path>,
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("kiln: wrote {}", path.display());
    Ok(())
}

pub fn report(paths: &[PathBuf], baseline: Option<&str>, outputs: Outputs) -> Result<()> {
    let loaded = kiln_results::read::load(paths)?;
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
        kiln_results::render::markdown(&loaded.records, baseline)
    );
    if let Some(path) = outputs.csv {
        write(path, &kiln_results::render::csv(&loaded.records))?;
    }
    if let Some(path) = outputs.json {
        write(path, &kiln_results::render::json(&loaded.records))?;
    }
    if let Some(target) = outputs.svg {
        let charts = chart::charts(&loaded.records, baseline)?;
        for (model, svg) in &charts {
            write(&svg_path(target, model, charts.len() > 1), svg)?;
        }
    }
    Ok(())
}

/// Write a run directory's report from its records: `chart-<model>.svg`, `report.md` (the
/// tables with the charts linked) and `results.csv`. Returns the Markdown and its path.
pub fn write_run_report(out: &Path, records: &[Record]) -> Result<(String, PathBuf)> {
    let mut markdown = kiln_results::render::markdown(records, None);
    for (model, svg) in chart::charts(records, None)? {
        let name = format!("chart-{model}.svg");
        std::fs::write(out.join(&name), svg)
            .with_context(|| format!("cannot write {name} in {}", out.display()))?;
        markdown.push_str(&format!("![{model}]({name})\n\n"));
    }
    let report = out.join("report.md");
    std::fs::write(&report, &markdown)
        .with_context(|| format!("cannot write {}", report.display()))?;
    std::fs::write(out.join("results.csv"), kiln_results::render::csv(records))
        .with_context(|| format!("cannot write results.csv in {}", out.display()))?;
    Ok((markdown, report))
}
