//! The site's pages, written with maud (every value escaped): the index and the compare view
//! (their rows drawn by `site.js` from `data.js`, so filters, sorting and the view's state in
//! the URL need no server), and one static page per machine with its fingerprint, its runs'
//! rows and their charts.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::rows::{Machine, SiteRow};
use super::runs::RunRecords;

/// A page: its title, its body, and the path up to the site's root (`""` or `"../"`).
fn layout(title: &str, page: &str, up: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Kiln results" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href={ (up) "site.css" };
            }
            body data-page=(page) {
                nav {
                    a href={ (up) "index.html" } { "All results" }
                    a href={ (up) "compare.html" } { "Compare" }
                    a href={ (up) "machines.html" } { "Machines" }
                    a href={ (up) "serving.html" } { "Serving" }
                    a href={ (up) "simulated.html" } { "Simulated" }
                }
                (body)
            }
        }
    }
    .into_string()
}

/// Rows the index draws until the reader asks for all: a filter change then redraws in well
/// under 0.1 s with 10,000 rows (docs/site.md, the scale benchmark).
pub const ROWS_DRAWN: usize = 100;

/// The filters the index offers, by the name its URL uses, with their labels.
pub const FILTERS: [(&str, &str); 10] = [
    ("vendor", "CPU vendor"),
    ("family", "CPU family"),
    ("isa", "Instruction set"),
    ("gpu", "GPU"),
    ("backend", "Backend"),
    ("model", "Model"),
    ("precision", "Precision"),
    ("burn", "Burn"),
    ("loop", "Loop"),
    ("runs", "Runs"),
];

/// The index's columns: the name its URL sorts by, and the header.
pub const COLUMNS: [(&str, &str); 16] = [
    ("machine", "Machine"),
    ("model", "Model"),
    ("backend", "Backend"),
    ("device", "Device"),
    ("precision", "Prec."),
    ("burn", "Burn"),
    ("epoch", "Epoch time"),
    ("interval", "Next run (95%)"),
    ("vs_pytorch", "× PyTorch"),
    ("warmup", "Warm-up"),
    ("memory", "Training memory"),
    ("accuracy", "Accuracy"),
    ("runs", "Runs"),
    ("date", "Date"),
    ("run", "Source run"),
    ("labels", "Labels"),
];

fn scripts(up: &str) -> Markup {
    html! {
        script src={ (up) "data.js" } {}
        script src={ (up) "site.js" } {}
    }
}

pub fn index(rows: usize, machines: usize, runs: usize) -> String {
    let body = html! {
        h1 { "Kiln results" }
        p.sub {
            (rows) " rows from " (runs) " runs on " (machines) " machines. Epoch times are per "
            "standard epoch; a row is labelled when its time is projected, from a single run, "
            "not steady, on synthetic data or from a build that is not a release build."
        }
        (filter_form(&FILTERS))
        p #shown {}
        div.scroll {
            table #results {
                thead { tr { @for (name, label) in COLUMNS { th data-col=(name) { (label) } } } }
                tbody {}
            }
        }
        p #more {}
        noscript { "The table needs JavaScript; the machine pages do not." }
        (scripts(""))
    };
    layout("All results", "index", "", body)
}

pub fn compare() -> String {
    let body = html! {
        h1 { "Compare" }
        p.sub {
            "Two machines, or two Burns on one machine: each cell either side measured, side by "
            "side, with B's epoch time over A's."
        }
        form #sides {
            @for side in ["a", "b"] {
                label { "Side " (side.to_uppercase()) " " select name=(side) {} }
            }
        }
        p #shown {}
        div.scroll {
            table #compare {
                thead { tr {
                    th { "Model" } th { "Backend" } th { "Device" } th { "Prec." } th { "Loop" }
                    th { "A: epoch time" } th { "B: epoch time" } th { "B ÷ A" }
                    th { "A: accuracy" } th { "B: accuracy" }
                } }
                tbody {}
            }
        }
        h2 { "Serving" }
        p.sub { "The same sides' inference rows: B's p50 at batch 1 and throughput over A's." }
        div.scroll {
            table #compare-serving {
                thead { tr {
                    th { "Model" } th { "Backend" } th { "Device" } th { "Prec." }
                    th { "A: p50, batch 1" } th { "B: p50, batch 1" } th { "B ÷ A" }
                    th { "A: throughput" } th { "B: throughput" } th { "B ÷ A" }
                } }
                tbody {}
            }
        }
        (scripts(""))
    };
    layout("Compare", "compare", "", body)
}

pub fn machine_list(machines: &[Machine]) -> String {
    let body = html! {
        h1 { "Machines" }
        ul.machines {
            @for m in machines {
                li { a href=(m.page) { (m.label) } " · " (m.runs.len()) " runs"
                     @if let Some(g) = &m.gpu { " · " (g) } }
            }
        }
    };
    layout("Machines", "machines", "", body)
}

/// The inference runs' page: `rows` serving rows (`super::serving`) under the index's filters
/// but the loop (site.js draws them), then each run's own tables.
pub fn serving(runs: &[super::serving::ServingRun], rows: usize) -> String {
    let filters: Vec<(&str, &str)> = FILTERS.into_iter().filter(|(n, _)| *n != "loop").collect();
    let body = html! {
        h1 { "Serving" }
        p.sub {
            "Which backend crate to embed: every inference run, the same weights on every "
            "backend, latency percentiles of one-sample queries after steady state, throughput, "
            "the first prediction from process start and agreement with PyTorch "
            "(docs/inference.md says how to read them). " (rows) " rows from " (runs.len())
            " runs; a row is labelled when it rests on a single run, disagrees with the "
            "reference or never settled."
        }
        (filter_form(&filters))
        p #shown {}
        div.scroll {
            table #serving {
                thead { tr { @for (name, label) in serving_columns() {
                    th data-col=(name) { (label) }
                } } }
                tbody {}
            }
        }
        p #more {}
        (super::serving::runs_markup(runs))
        (scripts(""))
    };
    layout("Serving", "serving", "", body)
}

/// The serving table's columns: the name its URL sorts by, and the header; where and what as
/// the index names them, then the inference table's figures.
pub fn serving_columns() -> Vec<(&'static str, &'static str)> {
    let mut columns = COLUMNS[..6].to_vec();
    columns.extend(super::serving::FIGURES);
    columns.extend([
        ("runs", "Runs"),
        ("run", "Source run"),
        ("labels", "Labels"),
    ]);
    columns
}

/// The form of `filters`, filled by site.js from the rows it filters.
fn filter_form(filters: &[(&str, &str)]) -> Markup {
    html! {
        form #filters {
            @for (name, label) in filters {
                @if *name == "burn" {
                    // Release Burns by default (a checkout's rows are a developer's A/B).
                    label { (label) " " select name=(name) {
                        option value="" { "releases" } option value="all" { "all" }
                    } }
                } @else {
                    label { (label) " " select name=(name) { option value="" { "all" } } }
                }
            }
            button type="reset" #clear { "Clear" }
        }
    }
}

fn row_table(rows: &[SiteRow]) -> Markup {
    html! {
        div.scroll { table {
            thead { tr {
                th { "Model" } th { "Backend / device / precision" } th { "Burn" } th { "Loop" }
                th { "Batch" } th { "Epoch time" } th { "Warm-up" } th { "Training memory" }
                th { "Accuracy" } th { "Labels" }
            } }
            tbody { @for r in rows {
                tr class=(r.status.replace(' ', "-")) {
                    td { (r.model) } td { (r.backend) " / " (r.device) " / " (r.precision) }
                    td { (r.burn) } td { (r.training_loop) } td.num { (r.batch) }
                    td { (r.epoch_text) } td { (r.warmup_text) } td.num { (r.memory_text) }
                    td.num { (r.accuracy_text) }
                    td { @for l in &r.labels { span.label { (l) } " " } }
                }
            } }
        } }
    }
}

/// The simulated rows' page: replayed records (`gpu-kit --replay`: step times from a GPU's
/// profile, run on a CPU) and GPU kits' dry runs, each with its machine and run, none of them a
/// measurement; the other pages never show them.
pub fn simulated(machines: &[Machine], rows: &[SiteRow]) -> String {
    let body = html! {
        h1 { "Simulated rows" }
        p.sub {
            "Not measurements: a replayed row followed a GPU's measured step times on a CPU "
            "(cargo xtask gpu-kit --replay), a dry run is a GPU kit run on a machine without its "
            "GPU. They check Kiln's planning and records; \"All results\", Compare and the "
            "machine pages leave them out."
        }
        @if rows.is_empty() {
            p { "None." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th { "Kind" } th { "Ran on" } th { "Run" } th { "Model" }
                    th { "Backend / device / precision" } th { "Epoch time" } th { "Status" }
                } }
                tbody { @for r in rows {
                    tr {
                        td { @for l in &r.labels { span.label { "simulated: " (l) } " " } }
                        td { (machines.get(r.machine).map_or("", |m| m.short.as_str())) }
                        td { (r.run) } td { (r.model) }
                        td { (r.backend) " / " (r.device) " / " (r.precision) }
                        td { (r.epoch_text) } td { (r.status) }
                    }
                } }
            } }
        }
    };
    layout("Simulated rows", "simulated", "", body)
}

/// The machine's GPU with its driver, as `nvidia-smi` gave them where a record kept them.
fn gpu_line(m: &Machine, records: &[kiln_contract::Record]) -> Option<String> {
    let gpu = m.gpu.as_ref()?;
    let smi = records
        .iter()
        .find_map(|r| r.fingerprint.nvidia_smi.as_ref());
    Some(match smi {
        Some(s) => format!(
            "GPU: {gpu} (driver {}, CUDA {})",
            s.driver_version.as_deref().unwrap_or("?"),
            s.cuda_version.as_deref().unwrap_or("?")
        ),
        None => format!("GPU: {gpu}"),
    })
}

/// A machine's page: its fingerprint, then each of its runs with its rows and charts.
pub fn machine(m: &Machine, runs: &[(RunRecords, Vec<SiteRow>)]) -> String {
    let records: Vec<_> = runs
        .iter()
        .flat_map(|(run, _)| run.records.iter())
        .cloned()
        .collect();
    let body = html! {
        h1 { (m.label) }
        h2 { "Fingerprint" }
        ul.fingerprint {
            @for line in crate::machines::machine_lines(&records) { li { (line) } }
            @if let Some(gpu) = gpu_line(m, &records) { li { (gpu) } }
        }
        @if !m.isa.is_empty() { p { "Instruction sets: " (m.isa.join(", ")) } }
        h2 { "Runs" }
        @for (run, rows) in runs {
            section id={ "run-" (run.name) } {
                h3 { (run.name) }
                (row_table(rows))
                @for (model, svg) in crate::chart::charts(&run.records, None).unwrap_or_default() {
                    figure.chart { (PreEscaped(svg)) figcaption { (model) ": epoch time per backend" } }
                }
            }
        }
    };
    layout(&m.label, "machine", "../", body)
}
