//! `cargo xtask infer`'s table: one row per backend, device and precision, its repeats
//! combined (the median, and the 95% interval for the next run where there are several), with
//! agreement against the reference row; the request and record are
//! `kiln_contract::infer`'s, re-exported here.

pub use kiln_contract::infer::*;
use kiln_contract::{ModelKind, Status};

/// The file of inference records in a run directory.
pub const INFER_FILE: &str = "infer.jsonl";

pub use crate::units::latency_text;

mod clients;
mod csv_rows;
mod rows;
use crate::units::{human_bytes, human_seconds};
pub use clients::{CLIENTS_COLUMNS, clients_csv, clients_lines, clients_table};
#[cfg(test)]
use csv_rows::CSV_COLUMNS;
pub use csv_rows::csv;
use rows::combined;
pub use rows::{groups, models, succeeded};

/// Kiln's own overhead is under this share of the row's smallest p50, or the row says so.
pub const OVERHEAD_SHARE: f64 = 0.02;

/// Top-1 agreement with the reference below this marks a row as disagreeing (not ranked): at
/// most one sample in a thousand may differ (2 of 2,000; none of 500).
pub const AGREEMENT: f64 = 0.999;

/// Whether a row's agreement with the reference fails it: top-1 under [`AGREEMENT`], or a logit
/// that is not a number. `cargo xtask infer` then exits 1.
pub fn disagrees(a: &kiln_contract::infer::Agreement) -> bool {
    a.top1 < AGREEMENT || !a.max_logit_difference.is_finite()
}

/// The table's columns.
pub const COLUMNS: [&str; 14] = [
    "Backend / device",
    "Precision",
    "p50, batch 1",
    "p90, batch 1",
    "p99, batch 1",
    "p50, batch 8",
    "Throughput (samples/s)",
    "Load",
    "First prediction",
    "Memory to serve",
    "Runner",
    "Top-1 agreement",
    "Largest logit difference",
    "Accuracy",
];

/// `model`'s table: one line of [`COLUMNS`] per row, and the notes under it. A row that
/// disagrees with the reference says **disagrees** in its agreement cell.
pub fn table_of(records: &[InferRecord], model: ModelKind) -> (Vec<Vec<String>>, Vec<String>) {
    let (mut lines, mut notes) = (Vec::new(), Vec::new());
    for group in groups(records, model) {
        let (first, ok) = (group[0], succeeded(&group));
        let name = format!("{} / {}", first.backend, first.device);
        if ok.is_empty() {
            let mut line = vec![
                name,
                first.precision.to_string(),
                first.status.as_str().to_uppercase(),
            ];
            line.resize(COLUMNS.len(), String::new());
            lines.push(line);
            notes.push(format!(
                "{}: {}",
                first.label(),
                first.reason.as_deref().unwrap_or("no reason given")
            ));
            continue;
        }
        let mut line = vec![name, first.precision.to_string()];
        line.extend(row_cells(first, &ok));
        lines.push(line);
        notes.extend(row_notes(first, &ok));
    }
    (lines, notes)
}

/// A row's cells after its name and precision ([`COLUMNS`] from the third), its repeats (`ok`)
/// combined.
pub fn row_cells(first: &InferRecord, ok: &[&InferRecord]) -> Vec<String> {
    let of = |f: &dyn Fn(&InferRecord) -> Option<f64>| -> Vec<f64> {
        ok.iter().filter_map(|r| f(r)).collect()
    };
    let p = |batch: usize, q: fn(&Latency) -> f64| {
        combined(&of(&|r| r.latency_at(batch).map(q)), latency_text)
    };
    let throughput = combined(
        &of(&|r| r.throughput.as_ref().map(|t| t.samples_per_second)),
        |v| format!("{v:.0}"),
    );
    let batch = ok[0].throughput.as_ref().map_or(0, |t| t.batch);
    let caches = ok[0]
        .first_prediction
        .as_ref()
        .and_then(|f| f.caches.clone())
        .map_or(String::new(), |c| format!(", caches {c}"));
    let agreement = ok
        .iter()
        .filter_map(|r| r.agreement.as_ref())
        .min_by(|a, b| a.top1.total_cmp(&b.top1));
    let (top1, logit, accuracy) = match agreement {
        Some(a) if a.reference == first.label() => (
            "reference".to_string(),
            "–".to_string(),
            crate::units::percent(a.accuracy),
        ),
        Some(a) => (
            format!(
                "{:.2}%{}",
                a.top1 * 100.0,
                if disagrees(a) { " **disagrees**" } else { "" }
            ),
            format!("{:.2e}", a.max_logit_difference),
            crate::units::percent(a.accuracy),
        ),
        None => ("–".into(), "–".into(), "–".into()),
    };
    vec![
        p(1, |l| l.p50_seconds),
        p(1, |l| l.p90_seconds),
        p(1, |l| l.p99_seconds),
        p(8, |l| l.p50_seconds),
        format!("{throughput} (batch {batch})"),
        combined(
            &of(&|r| r.first_prediction.as_ref().map(|f| f.ready_seconds)),
            human_seconds,
        ),
        combined(
            &of(&|r| r.first_prediction.as_ref().map(|f| f.seconds)),
            human_seconds,
        ) + &caches,
        combined(
            &of(&|r| r.memory.as_ref().map(|m| m.serving_bytes() as f64)),
            |b| human_bytes(b as u64),
        ),
        ok[0].binary_bytes.map_or("–".into(), human_bytes),
        top1,
        logit,
        accuracy,
    ]
}

/// The Markdown table of `model`'s rows, with the notes under it.
pub fn table(records: &[InferRecord], model: ModelKind) -> String {
    let (lines, notes) = table_of(records, model);
    let mut out = format!(
        "### {model}\n\n| {} |\n|{}\n",
        COLUMNS.join(" | "),
        "---|".repeat(COLUMNS.len())
    );
    for line in lines {
        out += &format!("| {} |\n", line.join(" | "));
    }
    for note in notes {
        out += &format!("\n- {note}");
    }
    out + "\n" + &clients_table(records, model)
}

/// `infer.html`: the method, then per model its latency chart and its table, with the notes;
/// written with maud's templates (escaped by construction).
pub fn html(records: &[InferRecord], method: &str) -> String {
    let page = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "cargo xtask infer" }
                style { "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
                         td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}" }
            }
            body {
                h1 { "cargo xtask infer" }
                p { (method) }
                (sections(records, "h2"))
            }
        }
    };
    page.into_string()
}

/// Each model of `records`: its name (as heading `level`), latency chart, table and notes; the
/// run's infer.html and the results site's serving page both show them so.
pub fn sections(records: &[InferRecord], level: &str) -> maud::Markup {
    let heading = |text: String| match level {
        "h2" => maud::html! { h2 { (text) } },
        _ => maud::html! { h3 { (text) } },
    };
    maud::html! {
        @for model in &models(records) {
            @let (lines, notes) = table_of(records, *model);
            (heading(model.to_string()))
            @if let Ok(Some(svg)) = crate::chart::latency_chart(records, *model) {
                (maud::PreEscaped(svg))
            }
            table {
                tr { @for c in COLUMNS { th { (c) } } }
                @for line in &lines {
                    tr { @for cell in line { td { (cell.replace("**", "")) } } }
                }
            }
            ul { @for n in &notes { li { (n) } } }
            @let clients = clients_lines(records, *model);
            @if !clients.is_empty() {
                table {
                    caption { "Clients at once, batch 1" }
                    tr { @for c in CLIENTS_COLUMNS { th { (c) } } }
                    @for line in &clients {
                        tr { @for cell in line { td { (cell) } } }
                    }
                }
            }
        }
    }
}

/// What a row's reader must know: Kiln's overhead beyond its share of the smallest p50, a
/// series whose warm-up never settled, a row that disagrees with the reference.
fn row_notes(first: &InferRecord, ok: &[&InferRecord]) -> Vec<String> {
    let mut notes = Vec::new();
    let label = first.label();
    let smallest_p50 = ok
        .iter()
        .flat_map(|r| r.latency.iter().map(|l| l.p50_seconds))
        .fold(f64::INFINITY, f64::min);
    // The median over the runs, as every other figure of a repeated row.
    let overhead = kiln_contract::stats::median(
        &ok.iter()
            .filter_map(|r| r.overhead.as_ref().map(|o| o.p50_seconds))
            .collect::<Vec<_>>(),
    )
    .unwrap_or(0.0);
    if overhead > OVERHEAD_SHARE * smallest_p50 {
        notes.push(format!(
            "{label}: Kiln's own cost per query (upload and read-back, no model) is {} at p50, \
             {:.1}% of its smallest p50: its latencies carry it",
            latency_text(overhead),
            overhead / smallest_p50 * 100.0
        ));
    }
    for r in ok {
        for l in r.latency.iter().filter(|l| !l.steady) {
            notes.push(format!(
                "{label}: batch {} never settled in its warm-up ({} queries, {}); timed anyway",
                l.batch,
                l.warmup_queries,
                human_seconds(l.warmup_seconds)
            ));
        }
        let unsettled = r.throughput.as_ref().filter(|t| t.steady == Some(false));
        if let Some(t) = unsettled {
            notes.push(format!(
                "{label}: throughput's batches never settled in its warm-up ({} batches of {}, \
                 {}); timed anyway",
                t.warmup_batches.unwrap_or_default(),
                t.batch,
                human_seconds(t.warmup_seconds.unwrap_or_default())
            ));
        }
    }
    notes.extend(clients::one_client_note(&label, ok));
    let threads = ok.iter().filter_map(|r| r.process_threads).max();
    let cpus = first
        .fingerprint
        .as_ref()
        .map_or(first.threads, |f| f.logical_cores);
    if let Some(note) = threads.and_then(|t| crate::warnings::threads_note(t, cpus)) {
        notes.push(format!("{label}: {note}"));
    }
    if let Some(a) = ok
        .iter()
        .filter_map(|r| r.agreement.as_ref())
        .find(|a| disagrees(a))
    {
        notes.push(format!(
            "{label}: disagrees with {}: {:.2}% of {} top-1 classes agree (under {:.1}%), logits \
             differ by up to {:.3}; not ranked",
            a.reference,
            a.top1 * 100.0,
            a.samples,
            AGREEMENT * 100.0,
            a.max_logit_difference
        ));
    }
    notes
}

impl crate::ab::PassRun for InferRecord {
    fn pass(&self) -> Option<usize> {
        self.repeat
    }
}

/// The least change of the first prediction that counts in an inference A/B, seconds.
pub const FIRST_PREDICTION_LEAST: f64 = 0.02;

/// What an inference A/B compares, each with its floor: the measures an embedding application
/// pays (the tail and the first prediction are noisier than the median, so their floors are
/// wider).
const AB_RULES: [crate::ab::Rule<InferRecord>; 4] = [
    crate::ab::Rule {
        name: "latency p50, batch 1",
        value: |r| r.latency_at(1).map(|l| l.p50_seconds),
        floor: 0.03,
        difference: false,
        least: 0.0,
        text: latency_text,
        higher: "slower",
        lower: "faster",
    },
    crate::ab::Rule {
        name: "latency p99, batch 1",
        value: |r| r.latency_at(1).map(|l| l.p99_seconds),
        floor: 0.10,
        difference: false,
        least: 0.0,
        text: latency_text,
        higher: "slower in the tail",
        lower: "faster in the tail",
    },
    crate::ab::Rule {
        name: "throughput",
        value: |r| r.throughput.as_ref().map(|t| t.samples_per_second),
        floor: 0.03,
        difference: false,
        least: 0.0,
        text: |v| format!("{v:.0} samples/s"),
        higher: "serves more",
        lower: "serves less",
    },
    crate::ab::Rule {
        name: "first prediction",
        value: |r| r.first_prediction.as_ref().map(|f| f.seconds),
        floor: 0.10,
        difference: false,
        // An A/A (two builds of the same Burn sources, 10 pairs) read flex's 6 ms start 1 ms
        // faster in B with p 0.04: a repeatable difference between builds, not a change.
        least: FIRST_PREDICTION_LEAST,
        text: latency_text,
        higher: "slower to first answer",
        lower: "faster to first answer",
    },
];

/// Burn A's inference rows against Burn B's (`infer --burn A --burn B`): every row both sides
/// measured (model, backend, device, precision), each measure by kiln_report::ab's rule, B's
/// run of each pass paired with A's.
pub fn compare(a: &[InferRecord], b: &[InferRecord]) -> Vec<crate::ab::AbRow> {
    let ok = |r: &InferRecord| r.status == Status::Ok;
    let key = |r: &InferRecord| format!("{} · {}", r.model, r.label());
    crate::ab::shared_rows(a, b, ok, key)
        .into_iter()
        .map(|(k, ra, rb)| {
            let measures = AB_RULES
                .iter()
                .filter_map(|rule| crate::ab::measure(rule, &ra, &rb, 0.0, None))
                .collect();
            crate::ab::AbRow { cell: k, measures }
        })
        .collect()
}

/// `infer-ab.md`'s section for one pair of Burns.
pub fn ab_markdown(rows: &[crate::ab::AbRow], a_label: &str, b_label: &str) -> String {
    let mut out = format!("## Inference, Burn A/B\n\nA = {a_label}, B = {b_label}.\n\n");
    if rows.is_empty() {
        out.push_str("No row was measured ok by both Burns: nothing to compare.\n");
        return out;
    }
    out.push_str(&crate::ab::table(rows, "Row"));
    out.push_str(&format!(
        "\nA and B ran as alternating processes from the same weights, one pass each in turn \
         (since 2026-12-07 in a balanced order: pass 1 A then B, pass 2 B then A, ...); each B \
         is compared with A's run of the same pass (the paired t-test of their log ratio), so drift over the run cancels. A change counts when p < 0.05 and \
         it exceeds the measure's floor: 3% for the median latency and throughput, 10% for the \
         99th percentile and the first prediction, which must also move by {:.0} ms at least. A \
         \"no difference\" says the smallest change \
         the pairs would have shown 80% of the time; with a single pass there is no verdict \
         (give --repeats 3 or more).\n",
        FIRST_PREDICTION_LEAST * 1e3
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::Precision;

    fn record(backend: &str, p50: f64, top1: f64) -> InferRecord {
        let request = InferRequest {
            kiln_infer: INFER_VERSION,
            model: ModelKind::Mlp,
            backend: backend.into(),
            device: "cpu".into(),
            precision: Precision::F32,
            weights: "w".into(),
            dataset: kiln_contract::DatasetName::Synthetic,
            data_dir: None,
            data_file: None,
            samples: 100,
            logits_out: "l".into(),
            latency_batches: vec![1, 8],
            queries: 1000,
            series_seconds: 10.0,
            clients: vec![1, 2],
            throughput_batch: 256,
            throughput_seconds: 3.0,
            warmup_cap_seconds: 60.0,
            timing: kiln_contract::TimingRules::KILN,
            spawned_at_unix_us: None,
            cold_caches: false,
            seed: 1,
        };
        let mut r = InferRecord::start(&request, "0.22.1");
        r.status = Status::Ok;
        r.latency = vec![Latency::of(1, &[p50; 30], (10, 0.1, true)).unwrap()];
        r.overhead = Latency::of(1, &[p50 / 10.0; 30], (10, 0.1, true));
        r.agreement = Some(Agreement {
            reference: "pytorch cpu f32".into(),
            samples: 100,
            top1,
            max_logit_difference: 1e-5,
            accuracy: Some(0.8),
        });
        r
    }

    /// The clients table has a line per row and client count, in increasing order, its repeats
    /// combined; a row that measured none has no line, and a run without clients no table.
    #[test]
    fn clients_at_once_have_a_line_per_row_and_count() {
        let with = |r: &mut InferRecord, n: usize, p50: f64, qps: f64| {
            r.concurrent.push(Concurrent {
                clients: n,
                queries_per_second: qps,
                latency: Latency::of(1, &[p50; 30], (20, 0.1, true)).unwrap(),
            })
        };
        let mut records = vec![
            record("flex", 20e-6, 1.0),
            record("flex", 22e-6, 1.0),
            record("tch", 30e-6, 1.0),
        ];
        assert_eq!(clients_table(&records, ModelKind::Mlp), "");
        for (r, qps) in records.iter_mut().take(2).zip([40_000.0, 44_000.0]) {
            with(r, 2, 25e-6, qps);
            with(r, 1, 20e-6, qps / 2.0);
        }
        let lines = clients_lines(&records, ModelKind::Mlp);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!((&*lines[0][2], &*lines[1][2]), ("1", "2"));
        assert!(lines[1][6].starts_with("42000 ("), "{lines:?}");
        let t = table(&records, ModelKind::Mlp);
        assert!(t.contains("clients at once, batch 1"), "{t}");
        assert!(!t.contains("| tch / cpu | f32 | 1 |"), "{t}");
        let csv = clients_csv(&records);
        assert_eq!(csv.lines().count(), 5, "a header and four lines: {csv}");
        assert!(!t.contains("one client on a thread"), "{t}");
        with(&mut records[2], 1, 90e-6, 11_000.0);
        let t = table(&records, ModelKind::Mlp);
        assert!(
            t.contains(
                "tch cpu f32: one client on a thread of its own answers at 90.0 µs p50, 3.0×"
            ),
            "{t}"
        );
    }

    /// Repeats combine into one row with an interval; a row under the agreement bar and one
    /// whose overhead is over its share of p50 say so under the table.
    #[test]
    fn rows_combine_repeats_and_name_what_to_distrust() {
        let mut records = vec![
            record("flex", 20e-6, 1.0),
            record("flex", 22e-6, 1.0),
            record("burn-cpu", 1e-3, 0.95),
        ];
        for r in &mut records {
            r.threads = 2;
            r.process_threads = Some(if r.backend == "flex" { 3 } else { 10 });
        }
        let t = table(&records, ModelKind::Mlp);
        assert!(
            t.contains("burn-cpu cpu f32: the runner had 10 threads for 2 CPUs"),
            "{t}"
        );
        assert!(!t.contains("flex cpu f32: the runner had"), "{t}");
        assert_eq!(t.matches("| flex / cpu |").count(), 1, "{t}");
        assert!(t.contains("21.0 µs ("), "{t}");
        assert!(t.contains("95.00% **disagrees**"), "{t}");
        assert!(
            t.contains("burn-cpu cpu f32: disagrees with pytorch cpu f32"),
            "{t}"
        );
        assert!(t.contains("flex cpu f32: Kiln's own cost per query"), "{t}");

        let page = html(&records, "how it was measured");
        assert!(
            page.contains("<svg") && page.contains("p99"),
            "a latency chart"
        );
        assert!(page.contains("<td>95.00% disagrees</td>"), "{page}");
        assert_eq!(page.matches("<tr>").count(), 3, "a header and two rows");

        let csv = csv(&records);
        let mut rows = ::csv::Reader::from_reader(csv.as_bytes());
        assert_eq!(rows.headers().unwrap().len(), CSV_COLUMNS.len());
        let rows: Vec<_> = rows.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(&rows[2][1], "burn-cpu");
        assert_eq!(rows[0][6].parse::<f64>().unwrap(), 20e-6);
        assert_eq!(&rows[2][25], "0.95");
    }

    /// Burn B's rows against A's, pass by pass: a p50 10% higher in every pass is "B slower",
    /// the same runs twice are no difference, and a single pass gets no verdict.
    #[test]
    fn an_inference_ab_reads_its_pairs() {
        let runs = |p50: &[f64]| -> Vec<InferRecord> {
            p50.iter()
                .enumerate()
                .map(|(i, &p)| {
                    let mut r = record("flex", p, 1.0);
                    r.repeat = Some(i + 1);
                    r
                })
                .collect()
        };
        let a = runs(&[1.00e-3, 1.02e-3, 0.98e-3, 1.05e-3]);
        let slower: Vec<f64> = [1.00e-3, 1.02e-3, 0.98e-3, 1.05e-3]
            .iter()
            .zip([1.10, 1.11, 1.09, 1.10])
            .map(|(p, f)| p * f)
            .collect();
        let verdict = |rows: &[crate::ab::AbRow]| rows[0].measures[0].verdict.clone();
        let rows = compare(&a, &runs(&slower));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].measures[0].name, "latency p50, batch 1");
        assert_eq!(verdict(&rows), "B slower", "{rows:?}");
        assert!(verdict(&compare(&a, &a)).starts_with("no difference"));
        assert!(verdict(&compare(&a[..1], &runs(&slower)[..1])).starts_with("no verdict"));
        let text = ab_markdown(&rows, "0.22.1", "path:../burn");
        assert!(
            text.contains("| mlp · flex cpu f32 | latency p50, batch 1 | 1.01 ms (4 runs)"),
            "{text}"
        );
        // A first prediction 1 ms faster in every pass (what two builds of the same sources
        // showed) is sure but too small to count; 100 ms slower counts.
        let started = |records: &mut [InferRecord], seconds: &[f64]| {
            for (r, &s) in records.iter_mut().zip(seconds) {
                r.first_prediction = Some(FirstPrediction {
                    ready_seconds: s / 2.0,
                    seconds: s,
                    caches: None,
                });
            }
        };
        let starts = [0.0064, 0.0066, 0.0061, 0.0063];
        let (mut a, mut b) = (a.clone(), runs(&slower));
        started(&mut a, &starts);
        started(&mut b, &starts.map(|s| s - 0.001));
        let first = |rows: &[crate::ab::AbRow]| {
            let m = rows[0]
                .measures
                .iter()
                .find(|m| m.name == "first prediction");
            m.unwrap().verdict.clone()
        };
        assert!(first(&compare(&a, &b)).starts_with("no difference that counts"));
        started(&mut b, &starts.map(|s| s + 0.1));
        assert_eq!(first(&compare(&a, &b)), "B slower to first answer");
        // A row only one side measured is not compared.
        let mut other = runs(&slower);
        other.iter_mut().for_each(|r| r.backend = "ndarray".into());
        assert!(compare(&a, &other).is_empty());
    }
}
