//! The table of one-sample latency with several clients at once (`infer --clients`): a line per
//! row and client count, its repeats combined as the main table's are, with the queries served
//! per second beside the percentiles; and its CSV, a line per record and client count.

use kiln_contract::ModelKind;
use kiln_contract::infer::{Concurrent, InferRecord};

use super::rows::{combined, groups, succeeded};
use crate::units::latency_text;

/// The clients table's columns.
pub const CLIENTS_COLUMNS: [&str; 7] = [
    "Backend / device",
    "Precision",
    "Clients",
    "p50",
    "p90",
    "p99",
    "Queries/s",
];

/// `model`'s lines of [`CLIENTS_COLUMNS`]: every row that measured clients, each client count
/// it measured in increasing order.
pub fn clients_lines(records: &[InferRecord], model: ModelKind) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for group in groups(records, model) {
        let ok = succeeded(&group);
        let mut counts: Vec<usize> = ok
            .iter()
            .flat_map(|r| r.concurrent.iter().map(|c| c.clients))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        for n in counts {
            let of = |f: fn(&Concurrent) -> f64| -> Vec<f64> {
                ok.iter().filter_map(|r| r.with_clients(n).map(f)).collect()
            };
            lines.push(vec![
                format!("{} / {}", group[0].backend, group[0].device),
                group[0].precision.to_string(),
                n.to_string(),
                combined(&of(|c| c.latency.p50_seconds), latency_text),
                combined(&of(|c| c.latency.p90_seconds), latency_text),
                combined(&of(|c| c.latency.p99_seconds), latency_text),
                combined(&of(|c| c.queries_per_second), |v| format!("{v:.0}")),
            ]);
        }
    }
    lines
}

/// One client on a thread of its own this much slower (p50, median over the runs) than the
/// batch-1 series on the runner's main thread is worth a note: the clients table's figures
/// then carry what a thread costs that backend (PyTorch's OpenMP kernels called from a
/// Python thread, for one), not only what sharing costs.
pub const ONE_CLIENT_SLOWER: f64 = 1.25;

/// The note of [`ONE_CLIENT_SLOWER`] for a row (`ok`: its runs that succeeded), if it applies.
pub(super) fn one_client_note(label: &str, ok: &[&InferRecord]) -> Option<String> {
    let median = |f: &dyn Fn(&InferRecord) -> Option<f64>| {
        kiln_contract::stats::median(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    let main = median(&|r| r.latency_at(1).map(|l| l.p50_seconds))?;
    let one = median(&|r| r.with_clients(1).map(|c| c.latency.p50_seconds))?;
    (one > ONE_CLIENT_SLOWER * main).then(|| {
        format!(
            "{label}: one client on a thread of its own answers at {} p50, {:.1}× the {} of \
             the batch-1 series on the runner's main thread: the clients table carries what \
             a thread costs this backend",
            latency_text(one),
            one / main,
            latency_text(main)
        )
    })
}

/// The Markdown of [`clients_lines`] under its heading, or nothing where no row measured them.
pub fn clients_table(records: &[InferRecord], model: ModelKind) -> String {
    let lines = clients_lines(records, model);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n#### {model}: clients at once, batch 1\n\n| {} |\n|{}\n",
        CLIENTS_COLUMNS.join(" | "),
        "---|".repeat(CLIENTS_COLUMNS.len())
    );
    for line in lines {
        out += &format!("| {} |\n", line.join(" | "));
    }
    out
}

/// `infer-clients.csv`: a line per record and client count, numbers unrounded (seconds,
/// queries per second).
pub fn clients_csv(records: &[InferRecord]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    let _ = out.write_record([
        "model",
        "backend",
        "device",
        "precision",
        "repeat",
        "clients",
        "queries",
        "p50_seconds",
        "p90_seconds",
        "p95_seconds",
        "p99_seconds",
        "max_seconds",
        "mean_seconds",
        "queries_per_second",
    ]);
    let number = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in records {
        for c in &r.concurrent {
            let l = &c.latency;
            // Writing to memory cannot fail.
            let _ = out.write_record([
                r.model.to_string(),
                r.backend.clone(),
                r.device.clone(),
                r.precision.to_string(),
                r.repeat.map_or(String::new(), |k| k.to_string()),
                c.clients.to_string(),
                l.queries.to_string(),
                l.p50_seconds.to_string(),
                l.p90_seconds.to_string(),
                number(l.p95_seconds),
                l.p99_seconds.to_string(),
                l.max_seconds.to_string(),
                number(l.mean_seconds),
                c.queries_per_second.to_string(),
            ]);
        }
    }
    out.into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}
