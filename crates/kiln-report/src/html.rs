//! `report.html`: one self-contained page per run (no network at view time): the tables of
//! [`crate::table`] with sortable columns, the charts inline, each cell's log linked, the
//! machines' fingerprints and how every number was obtained. Written with maud's `html!`
//! templates, which escape every value they are given.

use maud::{DOCTYPE, Markup, PreEscaped, html as page};

use crate::fields::human_bytes;
use crate::machines::machine_lines;
use crate::table::{Column, machines, model_tables};
use kiln_contract::schema::{Record, Status};

/// What the page shows besides the records.
#[derive(Debug, Default, Clone)]
pub struct HtmlParts {
    /// The page title (the run directory's name, say).
    pub title: String,
    /// One SVG chart per model: (model, SVG text).
    pub charts: Vec<(String, String)>,
    /// Links to each cell's log: (`model/backend/device/precision`, href).
    pub logs: Vec<(String, String)>,
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1400px; padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; width: 100%; margin: .8rem 0; font-size: 13px; }
th, td { border: 1px solid #d0d0d5; padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f5; cursor: pointer; user-select: none; font-size: 12px; }
.scroll { overflow-x: auto; } td.wide { min-width: 24em; }
th[aria-sort="ascending"]::after { content: " ▲"; } th[aria-sort="descending"]::after { content: " ▼"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td, tr.diverged td { background: #fff0f0; } tr.skipped td { color: #777; background: #fafafa; }
tr.out-of-memory td { background: #fff8e6; }
.status { font-weight: 600; text-transform: uppercase; font-size: 11px; }
.chart svg { max-width: 100%; height: auto; }
ul.notes { color: #444; } code { background: #f2f2f5; padding: 0 .2rem; }
dl.fp { display: grid; grid-template-columns: max-content auto; gap: .1rem 1rem; }
dl.fp dt { color: #555; } dl.fp dd { margin: 0; }
"#;

/// Sorting by clicking a header: numbers by their `data-sort` value, text by its content.
const SCRIPT: &str = r#"
(function () {
  function key(td) {
    var v = td.getAttribute("data-sort");
    return v === null ? td.textContent.trim().toLowerCase() : parseFloat(v);
  }
  function sort(table, col, asc) {
    var heads = table.querySelectorAll("thead th");
    if (col >= heads.length) { return; }
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    heads[col].setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      var xn = typeof x === "number" && !isNaN(x), yn = typeof y === "number" && !isNaN(y);
      if (xn !== yn) { return xn ? -1 : 1; }
      var d = x < y ? -1 : x > y ? 1 : 0;
      return asc ? d : -d;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  tables.forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, col) {
      th.addEventListener("click", function () {
        sort(table, col, th.getAttribute("aria-sort") !== "ascending");
      });
    });
  });
  // A link can open the page sorted: report.html#sort=3 (column 3, from 0), #sort=3-desc.
  var wanted = /^#sort=(\d+)(-desc)?$/.exec(window.location.hash);
  if (wanted) {
    tables.forEach(function (t) { sort(t, parseInt(wanted[1], 10), !wanted[2]); });
  }
  document.body.setAttribute("data-ready", "1");
})();
"#;

/// What the page says about reading it.
const ABOUT: &str = "Click a column header to sort (a link ending in #sort=N opens the page \
     sorted by column N). A row that ran several times shows the median of its runs and a 95% \
     interval for the median of one more run (Student's t over the runs' medians: wide from 3 \
     runs, narrower with more --repeats), and its ratios the interval propagated from both rows; \
     a single run says so. Times are scaled to the standard epoch; a PROJECTED time comes from \
     the steps a cell's budget allowed (≈ and low confidence from fewer than 3 chunks).";

/// How the numbers were obtained, one line each.
const HOW: &[&str] = &[
    "Every cell ran in its own process; the device was synced before each clock read.",
    "The first epoch (compilation, autotune, caches) is the warm-up column and is not in the \
     epoch time.",
    "Test accuracy is evaluated after each epoch, outside the timed region; n is the number of \
     test samples.",
    "Training memory is the runner's peak resident set during training minus its resident set \
     when model, optimizer and data were ready; the whole process's peak is beside it; GPU cells \
     add the device allocator's peaks where the backend reports them.",
    "GFLOP/s is the model's training FLOPs per sample times images per second, as a share of the \
     device's peak: the best GEMM any backend measured on that device at the run's start, one \
     denominator for every backend on it.",
    "Each record carries the share of the CPU other processes used while it was timed; a row \
     above 5% is flagged as measured on a busy machine.",
    "The Obtained column says for each row whether its time was measured or projected, on which \
     data, and how epochs were scaled.",
];

/// The whole page.
pub fn html(all: &[Record], baseline: Option<&str>, parts: &HtmlParts) -> String {
    let title = if parts.title.is_empty() {
        "Kiln report".to_string()
    } else {
        format!("Kiln report: {}", parts.title)
    };
    let machine_count = machines(all).len();
    let curves = crate::batch::batch_curves(all);
    let markup = page! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                p.sub {
                    (all.len()) " records from " (machine_count) " machine"
                    @if machine_count != 1 { "s" } ". " (ABOUT)
                }
                (overhead_section(all))
                (derived_section(&crate::sections::learner_section(all)))
                (derived_section(&crate::sections::scaling_section(all)))
                @for t in model_tables(all, baseline) {
                    (model_section(&t, parts, curves.iter().find(|(m, _)| *m == t.model)))
                }
                (fingerprint_section(all))
                h2 { "How the numbers were obtained" }
                ul.notes { @for line in HOW { li { (line) } } }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    };
    markup.into_string()
}

/// One model's table, its notes, its batch sizes and its charts.
fn model_section(
    t: &crate::table::ModelTable,
    parts: &HtmlParts,
    curves: Option<&(String, Vec<crate::batch::BatchCurve>)>,
) -> Markup {
    let epoch = t.index(Column::EpochTime);
    let wide = t.index(Column::Obtained);
    page! {
        h2 { (t.model) }
        div.scroll { table.sortable {
            thead { tr { @for (_, title) in &t.columns { th { (title) } } th { "Log" } } }
            tbody { @for row in &t.rows {
                tr class=(row.status.as_str().replace(' ', "-")) {
                    @for (i, c) in row.cells.iter().enumerate() {
                        @if let (Some(reason), true) = (&row.reason, Some(i) == epoch) {
                            td { span.status { (row.status.as_str()) } " " (reason) }
                        } @else if let Some(v) = c.sort.filter(|v| v.is_finite()) {
                            td.num data-sort=(v) { (c.text) }
                        } @else if Some(i) == wide {
                            td.wide { (c.text) }
                        } @else {
                            td { (c.text) }
                        }
                    }
                    td { @match parts.logs.iter().find(|(cell, _)| *cell == row.cell) {
                        Some((_, href)) => a href=(href) { "stderr" },
                        None => "–",
                    } }
                }
            } }
        } }
        @if !t.notes.is_empty() { ul.notes { @for n in &t.notes { li { (n) } } } }
        @if let Some((_, c)) = curves { (batch_section(c)) }
        @for (_, svg) in parts.charts.iter().filter(|(m, _)| *m == t.model) {
            // Our own SVG (plotters), inlined so the page needs no other file.
            div.chart { (PreEscaped(inline_svg(svg))) }
        }
    }
}

/// An SVG file's text from its `<svg` element on (no XML declaration inside the page).
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

/// One model's images/s by batch size, the fastest batch and the largest that fit.
fn batch_section(curves: &[crate::batch::BatchCurve]) -> Markup {
    let sizes = crate::batch::sizes(curves);
    page! {
        h3 { "Images/s by batch size" }
        div.scroll { table.sortable {
            thead { tr {
                th { "Backend / device / precision" }
                @for b in &sizes { th { "batch " (b) } }
                th { "Fastest batch" } th { "Largest batch that fit" }
            } }
            tbody { @for c in curves { tr {
                td { (c.label) }
                @for b in &sizes {
                    @match c.points.iter().find(|p| p.batch == *b) {
                        Some(p) => @match p.images_per_second {
                            Some(i) => td.num data-sort=(i) { (format!("{i:.0}")) },
                            None => td { (p.status.as_str()) },
                        },
                        None => td { "–" },
                    }
                }
                td { (c.fastest_text()) } td { (c.fit_text()) }
            } } }
        } }
    }
}

fn derived_section(s: &crate::sections::Section) -> Markup {
    page! {
        @if !s.rows.is_empty() {
            h2 { (s.title) }
            p { (s.about) }
            table.sortable {
                thead { tr { @for h in s.header.iter() { th { (h) } } } }
                tbody { @for row in &s.rows { tr { @for c in row { td { (c) } } } } }
            }
        }
    }
}

fn overhead_section(all: &[Record]) -> Markup {
    let rows: Vec<(&Record, &kiln_contract::LoopOverhead)> = all
        .iter()
        .filter_map(|r| r.loop_overhead.as_ref().map(|o| (r, o)))
        .collect();
    page! {
        @if !rows.is_empty() {
            h2 { "Kiln loop overhead" }
            table.sortable {
                thead { tr {
                    th { "Model" } th { "Backend / device" } th { "Precision" }
                    th { "Kiln loop (ms/step)" } th { "Bare loop (ms/step)" } th { "Overhead" }
                } }
                tbody { @for (r, o) in &rows { tr {
                    td { (r.model) } td { (r.backend) " / " (r.device) } td { (r.precision) }
                    td.num data-sort=(o.kiln_step_seconds.median) {
                        (format!("{:.1}", o.kiln_step_seconds.median * 1e3))
                    }
                    td.num data-sort=(o.bare_step_seconds.median) {
                        (format!("{:.1}", o.bare_step_seconds.median * 1e3))
                    }
                    td.num data-sort=(o.overhead_percent) {
                        (format!("{:+.2}%", o.overhead_percent))
                    }
                } } }
            }
        }
    }
}

/// A machine's label, the backend whose runner reported it, and its (name, value) lines.
type Fingerprinted = (String, String, Vec<(&'static str, String)>);

/// Each machine's fingerprint, once per machine, Burn and backend.
fn fingerprints(all: &[Record]) -> Vec<Fingerprinted> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for r in all.iter().filter(|r| !r.fingerprint.cpu_model.is_empty()) {
        let fp = &r.fingerprint;
        let key = format!(
            "{}|{}|{}",
            kiln_contract::fingerprint::machine_key(fp),
            fp.backend_version,
            r.backend
        );
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
        let cpu = fp.cpu.clone().unwrap_or_default();
        let num = |n: Option<u32>| n.map_or("–".into(), |n| n.to_string());
        let bytes = |b: Option<u64>| b.map_or("–".into(), crate::fields::human_bytes_short);
        let lines = vec![
            ("host", fp.hostname.clone()),
            ("CPU", fp.cpu_model.clone()),
            ("vendor", opt(&cpu.vendor)),
            (
                "family / model / stepping",
                format!(
                    "{} / {} / {}",
                    num(cpu.family),
                    num(cpu.model),
                    num(cpu.stepping)
                ),
            ),
            (
                "instruction sets",
                if cpu.isa.is_empty() {
                    "–".into()
                } else {
                    cpu.isa.join(" ")
                },
            ),
            (
                "caches (L1d, L2, L3)",
                format!(
                    "{}, {}, {}",
                    bytes(cpu.l1d_bytes),
                    bytes(cpu.l2_bytes),
                    bytes(cpu.l3_bytes)
                ),
            ),
            ("logical cores", fp.logical_cores.to_string()),
            ("threads used", fp.threads.to_string()),
            (
                "memory",
                fp.memory_bytes
                    .map(human_bytes)
                    .unwrap_or_else(|| "–".into()),
            ),
            ("OS", fp.os.clone()),
            ("kernel", fp.kernel.clone()),
            ("GPU", opt(&fp.gpu_name)),
            ("GPU driver", opt(&fp.gpu_driver)),
            ("GPU compute capability", opt(&fp.gpu_compute_capability)),
            (
                "nvidia-smi",
                fp.nvidia_smi.as_ref().map_or_else(
                    || "–".into(),
                    |n| {
                        format!(
                            "driver {}, CUDA {}; {}",
                            n.driver_version.as_deref().unwrap_or("?"),
                            n.cuda_version.as_deref().unwrap_or("?"),
                            n.gpus.join("; ")
                        )
                    },
                ),
            ),
            ("backend version", fp.backend_version.clone()),
            ("rustc", opt(&fp.rustc_version)),
            ("opt-level", opt(&fp.opt_level)),
            ("Burn", fp.burn_version.clone()),
            ("Kiln", format!("{} ({})", fp.kiln_version, fp.kiln_commit)),
        ];
        out.push((
            kiln_contract::fingerprint::machine_label(fp),
            r.backend.clone(),
            lines,
        ));
    }
    out
}

fn fingerprint_section(all: &[Record]) -> Markup {
    let lines = machine_lines(all);
    let failed = all
        .iter()
        .filter(|r| matches!(r.status, Status::Failed | Status::Diverged))
        .count();
    page! {
        @if !lines.is_empty() {
            h2 { "Machines" }
            @for line in &lines { p { (line) } }
            @for (label, backend, lines) in fingerprints(all) {
                details {
                    summary { (label) " — " (backend) " runner" }
                    dl.fp { @for (k, v) in &lines { dt { (k) } dd { (v) } } }
                }
            }
            @if failed > 0 {
                p {
                    (failed) " cell" @if failed != 1 { "s" }
                    " failed or diverged: see the rows marked in red and their logs."
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::schema::{CellId, Fingerprint};
    use kiln_contract::stats::Stats;

    fn record(backend: &str, median: f64) -> Record {
        let id = CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 128,
        };
        let mut r = Record::not_run(&id, Status::Ok, "");
        r.reason = None;
        r.epoch_seconds = Stats::from_samples(&[median, median * 1.1]);
        r.obtained.standard_epoch_samples = 60_000;
        r.fingerprint = Fingerprint {
            hostname: "box<1>".into(),
            cpu_model: "A CPU".into(),
            ..Fingerprint::default()
        };
        r
    }

    #[test]
    fn the_page_is_self_contained_sortable_and_escaped() {
        let mut failed = record("ndarray", 1.0);
        failed.status = Status::Failed;
        failed.epoch_seconds = None;
        failed.reason = Some("panicked at <script>alert(1)</script>".into());
        let records = vec![record("flex", 10.0), failed];
        let parts = HtmlParts {
            title: "run & co".into(),
            charts: vec![(
                "mnist-cnn".into(),
                "<?xml version=\"1.0\"?>\n<svg id=\"c\"></svg>".into(),
            )],
            logs: vec![(
                "mnist-cnn/flex/cpu/f32@128".into(),
                "logs/mnist-cnn-flex-cpu-f32-b128.stderr".into(),
            )],
        };
        let page = html(&records, None, &parts);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>Kiln report: run &amp; co</title>"));
        // Nothing is fetched at view time.
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "{page}"
        );
        assert!(page.contains("<table class=\"sortable\">"));
        assert!(
            page.contains("data-sort=\"10.5\""),
            "the median sorts numerically"
        );
        assert!(page.contains("<tr class=\"failed\">"));
        assert!(
            page.contains("panicked at &lt;script&gt;"),
            "reasons are escaped"
        );
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("<div class=\"chart\"><svg id=\"c\"></svg></div>"));
        assert!(!page.contains("<?xml"));
        assert!(page.contains("<a href=\"logs/mnist-cnn-flex-cpu-f32-b128.stderr\">stderr</a>"));
        assert!(page.contains("box&lt;1&gt;"));
        assert_eq!(page.matches("<script>").count(), 1);
    }
}
