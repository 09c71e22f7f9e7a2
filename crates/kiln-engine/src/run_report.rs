//! The files a run writes about itself, from its records: `report.md` with its charts linked,
//! `report.html`, `results.csv`, and the table printed at the end of a run.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use kiln_contract::{Method, Record, Status};
use kiln_report::chart;
use kiln_report::export::{ExportInputs, FORMATS};
use kiln_report::fields::{human_seconds, row_label};
use kiln_report::html::HtmlParts;
use kiln_report::table::{Column, ModelTable, model_tables};
use kiln_report::units::percent;

/// Every chart of a report, by kind: the file prefix (`chart-<model>.svg`), what report.md's
/// link says it shows, and `(model, svg)` per model.
pub type ChartSet = (&'static str, &'static str, Vec<(String, String)>);

pub fn chart_sets(records: &[Record], baseline: Option<&str>) -> Result<[ChartSet; 3]> {
    Ok([
        ("chart", "", chart::charts(records, baseline)?),
        (
            "accuracy",
            ": test accuracy against training time",
            chart::accuracy_curves(records)?,
        ),
        (
            "batch",
            ": training images/s against batch size",
            chart::batch_charts(records)?,
        ),
    ])
}

/// Every chart of `sets` (from [`chart_sets`]), as the HTML page shows them inline.
pub fn all_charts(sets: &[ChartSet]) -> Vec<(String, String)> {
    sets.iter()
        .flat_map(|(_, _, charts)| charts.iter().cloned())
        .collect()
}

/// Links from the page in `page_dir` to the logs of `run`'s cells that have one: relative when
/// the page is in the run directory, else absolute.
pub fn log_links(run: &Path, records: &[Record], page_dir: &Path) -> Vec<(String, String)> {
    records
        .iter()
        .filter_map(|r| {
            let file = crate::bench::rundir::cell_log(run, r)?;
            let name = file.file_name()?.to_string_lossy().into_owned();
            let same_dir = std::fs::canonicalize(run).ok() == std::fs::canonicalize(page_dir).ok();
            let href = if same_dir {
                format!("logs/{name}")
            } else {
                std::fs::canonicalize(&file)
                    .unwrap_or(file)
                    .display()
                    .to_string()
            };
            Some((kiln_report::table::cell_key(r), href))
        })
        .collect()
}

/// Write a run directory's report from its records: `chart-<model>.svg`, `report.md` (the
/// tables with the charts linked), `report.html` (self-contained) and `results.csv`. Returns
/// the Markdown and the paths of the two reports.
pub fn write_run_report(out: &Path, records: &[Record]) -> Result<(String, PathBuf, PathBuf)> {
    let mut markdown = kiln_report::render::markdown(records, None);
    // Each chart file, linked from report.md with what it shows (and inline in report.html).
    let sets = chart_sets(records, None)?;
    for (prefix, shows, charts) in &sets {
        for (model, svg) in charts {
            let name = format!("{prefix}-{model}.svg");
            std::fs::write(out.join(&name), svg)
                .with_context(|| format!("cannot write {name} in {}", out.display()))?;
            markdown.push_str(&format!("![{model}{shows}]({name})\n\n"));
        }
    }
    let report = out.join("report.md");
    std::fs::write(&report, &markdown)
        .with_context(|| format!("cannot write {}", report.display()))?;
    // Every format that names a file of its own in a run directory (report.html, results.csv).
    let inputs = ExportInputs {
        records,
        baseline: None,
        parts: HtmlParts {
            title: out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            charts: all_charts(&sets),
            logs: log_links(out, records, out),
        },
    };
    for format in FORMATS {
        if let Some(name) = format.run_file {
            std::fs::write(out.join(name), (format.render)(&inputs))
                .with_context(|| format!("cannot write {name} in {}", out.display()))?;
        }
    }
    Ok((markdown, report, out.join("report.html")))
}

/// The end of a run on the terminal: per model a compact table that fits 100 columns (the
/// columns that matter; report.md and report.html have them all), then every cell that did not
/// run or failed, with its reason and its log.
pub fn terminal(records: &[Record], out: Option<&Path>) -> String {
    let mut text = String::new();
    // The rows the tables show: each cell's repeats combined.
    let combined = kiln_report::repeats::combine(records);
    for t in model_tables(records, None) {
        let rows: Vec<&Record> = combined
            .iter()
            .filter(|r| r.loop_overhead.is_none() && r.model == t.model)
            .collect();
        text.push_str(&format!("{}\n{}\n", t.model, terminal_table(&t, &rows)));
    }
    let not_ok: Vec<&Record> = records.iter().filter(|r| r.status != Status::Ok).collect();
    if !not_ok.is_empty() {
        text.push_str("\nCells that did not run or did not finish:\n");
        for r in not_ok {
            let log = out
                .and_then(|o| crate::bench::rundir::cell_log(o, r))
                .map(|p| format!(" (log: {})", p.display()))
                .unwrap_or_default();
            let batch = match r.batch_size {
                0 => String::new(),
                b => format!(" (batch {b})"),
            };
            text.push_str(&format!(
                "- {}/{}{batch}: {}: {}{log}\n",
                r.model,
                row_label(r),
                r.status.as_str(),
                r.reason.clone().unwrap_or_default()
            ));
        }
    }
    text
}

/// The terminal's columns, in order, with their short titles.
const TERMINAL_COLUMNS: [(Column, &str); 10] = [
    (Column::Device, "backend / device"),
    (Column::Precision, "prec."),
    (Column::Batch, "batch"),
    (Column::EpochTime, "epoch time"),
    (Column::WarmUp, "warm-up"),
    (Column::SpeedUp, "speed-up"),
    (Column::VsPytorch, "÷ PyTorch"),
    (Column::TimeToAccuracy, "to target acc."),
    (Column::Memory, "training memory"),
    (Column::Accuracy, "accuracy"),
];

/// One model's table, at most 100 columns wide; `rows` are the records of `t`'s rows.
fn terminal_table(t: &ModelTable, rows: &[&Record]) -> Table {
    // 100 columns hold one ratio: ÷ PyTorch where the run has PyTorch rows, else the
    // speed-up (report.md has both).
    let with_torch = t.index(Column::VsPytorch).is_some();
    let columns: Vec<(Column, usize, &str)> = TERMINAL_COLUMNS
        .iter()
        .filter(|(c, _)| !(with_torch && *c == Column::SpeedUp))
        .filter_map(|&(c, title)| t.index(c).map(|i| (c, i, title)))
        .collect();
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    // The terminal's width when there is one, never more than 100 columns.
    let width = table.width().unwrap_or(100).min(100);
    table.set_width(width);
    let mut header: Vec<&str> = columns.iter().map(|(_, _, title)| *title).collect();
    header.push("obtained");
    table.set_header(header);
    for (row, r) in t.rows.iter().zip(rows) {
        let mut cells: Vec<String> = columns
            .iter()
            .map(|&(column, i, _)| terminal_cell(column, &row.cells[i].text, row.status, r))
            .collect();
        cells.push(obtained_cell(r));
        table.add_row(cells);
    }
    table
}

/// A row's cell in `column`, compact; `full` is the report's text of it.
fn terminal_cell(column: Column, full: &str, status: Status, r: &Record) -> String {
    match (column, &r.epoch_seconds, status) {
        (Column::EpochTime, Some(e), Status::Ok) if kiln_report::fields::low_confidence(r) => {
            format!("≈ {} (low confidence)", human_seconds(e.median))
        }
        (Column::EpochTime, Some(e), Status::Ok) => epoch_text(r, e),
        (Column::EpochTime, _, status) => status.as_str().to_uppercase(),
        (Column::Memory, _, _) => {
            let total = r.peak_memory_bytes.map(kiln_report::fields::human_bytes);
            match (
                r.training_bytes().map(kiln_report::fields::human_bytes),
                total,
            ) {
                (Some(t), Some(total)) => format!("{t} (RSS {total})"),
                (Some(t), None) => t,
                (None, Some(total)) => format!("RSS {total}"),
                (None, None) => "–".into(),
            }
        }
        (Column::VsPytorch, _, _) if r.backend == "pytorch" => "reference".into(),
        // Compact: the seconds to steady state ("not steady" when it never was; an older
        // record's first step).
        (Column::WarmUp, _, _) => match (&r.warmup, r.first_step_seconds) {
            (Some(w), _) if w.steady && w.late_compiles > 0 => format!(
                "{} + {} late",
                human_seconds(w.seconds),
                human_seconds(w.late_compile_seconds)
            ),
            (Some(w), _) if w.steady => human_seconds(w.seconds),
            (Some(w), _) if kiln_contract::observe::too_short_to_judge(w) => {
                format!("too short ({} steps)", w.steps)
            }
            (Some(_), _) => "not steady".into(),
            (None, Some(s)) => human_seconds(s),
            (None, None) => "–".into(),
        },
        // The epoch time already says "single run".
        (Column::SpeedUp | Column::VsPytorch, _, _) => {
            full.replace(" ± ", "±").replace(" (single run)", "")
        }
        (Column::Accuracy, _, _) => percent(r.test_accuracy),
        (Column::Device, _, _) => {
            let mut d = format!("{} / {}", r.backend, r.device);
            if r.device_kind
                .is_some_and(kiln_contract::DeviceKind::is_cpu_emulated)
            {
                d.push_str(" (CPU-emulated)");
            }
            if r.fallback_from.is_some() {
                d.push_str(" (fallback)");
            }
            if let Some(l) = r.training_loop {
                d.push_str(&format!(" ({l})"));
            }
            d
        }
        _ => full.to_string(),
    }
}

/// The epoch time with the 95% interval for the next run's (± has one meaning in Kiln,
/// docs/methodology.md, as in report.md), or "single run"; "busy" when others used the CPU.
fn epoch_text(r: &Record, e: &kiln_contract::Stats) -> String {
    let mut text = match &r.between_runs {
        Some(_) if e.n > 1 => match e.prediction_interval() {
            Some((lo, hi)) => format!(
                "{} (next run {}–{}; {} runs)",
                human_seconds(e.median),
                human_seconds(lo.max(0.0)),
                human_seconds(hi),
                e.n
            ),
            None => format!("{} ({} runs)", human_seconds(e.median), e.n),
        },
        _ => format!("{} (single run)", human_seconds(e.median)),
    };
    if r.noise.as_ref().is_some_and(kiln_contract::Noise::busy) {
        text.push_str(" ⚠ busy");
    }
    text
}

/// How the row's time was obtained, in a few words.
fn obtained_cell(r: &Record) -> String {
    let data = match r.data {
        kiln_contract::DataKind::Real => "",
        kiln_contract::DataKind::Synthetic => ", synthetic data",
        kiln_contract::DataKind::Custom => ", custom data",
    };
    let replay = if r.replay.is_some() { "REPLAY, " } else { "" };
    match (r.status, r.obtained.method) {
        (Status::Ok, Method::Measured) => format!(
            "{replay}measured, {} epoch{}{data}",
            r.obtained.epochs,
            if r.obtained.epochs == 1 { "" } else { "s" }
        ),
        (Status::Ok, Method::Projected) => format!(
            "{replay}PROJECTED from {} steps in {} chunks{data}",
            r.obtained.steps, r.obtained.chunks
        ),
        (Status::Ok, Method::Unjudged) => format!(
            "{replay}UNJUDGED: {} steps, too short for the steady-state rule{data}",
            r.obtained.steps
        ),
        (status, _) => format!("{} (below)", status.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_run_directory_gets_every_chart_linked_from_its_report() {
        // The committed batch-size run: several batch sizes, a target accuracy.
        let run = crate::workspace::workspace_root()
            .join("docs/results/2026-12-01-epyc-f26m2-quick-batch");
        let records = kiln_report::read::load(std::slice::from_ref(&run))
            .expect("the committed run loads")
            .records;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (markdown, report, html) = write_run_report(dir.path(), &records).expect("written");
        for name in [
            "chart-mnist-cnn.svg",
            "accuracy-mnist-cnn.svg",
            "batch-mnist-cnn.svg",
        ] {
            assert!(dir.path().join(name).is_file(), "{name} missing");
            assert!(
                markdown.contains(&format!("]({name})")),
                "{name} not linked"
            );
        }
        assert!(markdown.contains("Images/s by batch size"));
        assert!(report.is_file() && html.is_file());
        assert!(dir.path().join("results.csv").is_file());
    }

    /// Headless Chromium, if installed (CI installs it: `KILN_CI=1` makes its absence a failure).
    fn chromium() -> Option<&'static str> {
        let found = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find(|b| {
                Command::new(b)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
        if found.is_none() {
            kiln_contract::testing::skip(
                "report.html in chromium",
                "no chromium to render report.html (apt-get install chromium)",
            );
        }
        found
    }

    /// The README's "What you will see" is the table this code prints for the run it names.
    #[test]
    fn the_readme_shows_the_terminal_table_of_its_run() {
        let root = crate::workspace::workspace_root();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let section = readme
            .split("## What you will see")
            .nth(1)
            .and_then(|s| s.split("```").nth(1))
            .unwrap();
        let run = regex::Regex::new(r"\(docs/results/([^)/]+)/?\)")
            .unwrap()
            .captures(readme.split("## What you will see").nth(1).unwrap())
            .unwrap()[1]
            .to_string();
        let records = kiln_report::read::load(&[root.join("docs/results").join(&run)])
            .unwrap()
            .records;
        let printed = terminal(&records, None);
        let table: Vec<&str> = printed
            .lines()
            .skip_while(|l| !l.starts_with('┌'))
            .take_while(|l| !l.is_empty())
            .collect();
        let shown: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with('┌'))
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(
            shown,
            table,
            "README.md's table of {run}; now:\n{}",
            table.join("\n")
        );
    }

    #[test]
    fn the_terminal_table_fits_100_columns_and_lists_what_did_not_run() {
        let run =
            crate::workspace::workspace_root().join("docs/results/2026-11-30-epyc-f26m2-quick-all");
        let records = kiln_report::read::load(std::slice::from_ref(&run))
            .unwrap()
            .records;
        let text = terminal(&records, Some(&run));
        for line in text.lines().filter(|l| !l.starts_with("- ")) {
            assert!(
                line.chars().count() <= 100,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert!(
            text.contains("tch / cpu") && text.contains("reference"),
            "{text}"
        );
        assert!(text.contains("PROJECTED"), "{text}");
        assert!(
            text.contains("- mnist-cnn/wgpu/vulkan:cpu/f32: skipped: llvmpipe"),
            "{text}"
        );
    }

    #[test]
    fn report_html_renders_in_headless_chromium_without_console_errors() {
        let Some(browser) = chromium() else { return };
        let run =
            crate::workspace::workspace_root().join("docs/results/2026-11-30-epyc-f26m2-quick-all");
        let records = kiln_report::read::load(std::slice::from_ref(&run))
            .unwrap()
            .records;
        let tmp = tempfile::tempdir().unwrap();
        let page_path = tmp.path().join("report.html");
        let parts = HtmlParts {
            title: "test".into(),
            charts: all_charts(&chart_sets(&records, None).unwrap()),
            logs: Vec::new(),
        };
        let text = kiln_report::html::html(&records, None, &parts);
        std::fs::write(&page_path, &text).unwrap();
        // Open it sorted by the epoch-time column, fastest first.
        let table = &kiln_report::table::model_tables(&records, None)[0];
        let col = table.index(kiln_report::table::Column::EpochTime).unwrap();
        let url = format!("file://{}#sort={col}", page_path.display());
        let out = Command::new(browser)
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .args(["--enable-logging=stderr", "--v=0", "--dump-dom"])
            .arg(&url)
            .env("HOME", tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "console messages: {console:?}");
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(
            dom.contains("data-ready=\"1\""),
            "the page's script did not finish"
        );
        // The rows of the first table, in the order the page now shows them.
        let body = &dom[dom.find("<tbody>").unwrap()..dom.find("</tbody>").unwrap()];
        let shown: Vec<f64> = body
            .split("<tr")
            .skip(1)
            .filter_map(|row| {
                let cell = row.split("<td").nth(col + 1)?;
                let value = cell.split("data-sort=\"").nth(1)?.split('"').next()?;
                value.parse().ok()
            })
            .collect();
        let timed = table
            .rows
            .iter()
            .filter(|r| r.cells[col].sort.is_some())
            .count();
        assert_eq!(shown.len(), timed, "{body}");
        assert!(
            shown.windows(2).all(|w| w[0] <= w[1]),
            "not sorted: {shown:?}"
        );
    }
}
