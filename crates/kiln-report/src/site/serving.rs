//! The site's serving page: every inference run (`cargo xtask infer`: a directory holding
//! infer.jsonl; an inference A/B's sides below it) under the machine that measured it, each
//! model's latency chart, table and notes as the run's own infer.html shows them; above them,
//! one row per machine × model × backend × device × precision × Burn for the page's filters and
//! the compare view.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use maud::html;
use serde::Serialize;

use kiln_contract::{Stats, Status};

use super::rows::{Machine, burn_label, machine_index};
use super::runs::RunDir;
use crate::infer::{INFER_FILE, InferRecord, Latency, groups, models, row_cells, succeeded};

/// One inference run: its name on the site (its path under the folder it was found in) and
/// its records.
#[derive(Debug, Clone)]
pub struct ServingRun {
    pub name: String,
    pub records: Vec<InferRecord>,
}

/// The inference runs of `dirs` (found by [`dirs_holding`] with `infer.jsonl`), in their
/// order; a record that does not read refuses the build, naming its file and line.
pub fn read_serving(dirs: &[RunDir]) -> Result<Vec<ServingRun>> {
    dirs.iter()
        .map(|d| {
            let path = d.path.join(INFER_FILE);
            let records = kiln_contract::question::read_records(&path, "an inference record")
                .map_err(anyhow::Error::msg)?;
            Ok(ServingRun {
                name: d.name.clone(),
                records,
            })
        })
        .collect()
}

/// The serving table's figures: the name its URL sorts by, and the column of infer.md it
/// shows (`crate::infer::COLUMNS` after the backend and precision, in that order).
pub const FIGURES: [(&str, &str); 12] = [
    ("p50", "p50, batch 1"),
    ("p90", "p90, batch 1"),
    ("p99", "p99, batch 1"),
    ("p50_8", "p50, batch 8"),
    ("throughput", "Throughput (samples/s)"),
    ("load", "Load"),
    ("first", "First prediction"),
    ("memory", "Memory to serve"),
    ("runner", "Runner"),
    ("agreement", "Top-1 agreement"),
    ("logit", "Largest logit difference"),
    ("accuracy", "Accuracy"),
];

/// One row of the serving table: a backend, device and precision of one model as one
/// inference run measured it, its repeats combined.
#[derive(Serialize, Debug, Clone)]
pub struct ServingRow {
    /// Index into the site's machines.
    pub machine: usize,
    pub model: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
    pub burn: String,
    pub status: String,
    /// [`FIGURES`]' cells as infer.md writes them (a failed row: its status and why).
    pub texts: Vec<String>,
    /// [`FIGURES`]' values by name, where the row has one: medians over its repeats (seconds,
    /// samples per second, bytes, shares; the agreement and logit difference the worst).
    pub values: BTreeMap<&'static str, f64>,
    /// Repeats that measured it.
    pub runs: usize,
    /// The inference run it comes from, and the other runs that measured the same row.
    pub run: String,
    pub also: Vec<String>,
    pub labels: Vec<&'static str>,
}

/// The serving rows of `runs`, their machines added to `machines`: one per machine × model ×
/// backend × device × precision × Burn, the one with the most repeats (then the newest run's),
/// the others named in `also`.
pub fn serving_rows(machines: &mut Vec<Machine>, runs: &[ServingRun]) -> Vec<ServingRow> {
    let mut out: Vec<ServingRow> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for run in runs {
        // A row that never started carries no fingerprint: it is its run's machine's.
        let Some(host) = run.records.iter().find_map(|r| r.fingerprint.as_ref()) else {
            continue;
        };
        for model in models(&run.records) {
            for group in groups(&run.records, model) {
                let fp = group[0].fingerprint.as_ref().unwrap_or(host);
                let m = machine_index(machines, fp, &run.name);
                let row = serving_row(m, &group, &run.name);
                let key = format!(
                    "{}|{}|{}|{}|{}|{}",
                    m, row.model, row.backend, row.device, row.precision, row.burn
                );
                match seen.get(&key) {
                    None => {
                        seen.insert(key, out.len());
                        out.push(row);
                    }
                    Some(&i) if row.runs >= out[i].runs => {
                        let older = std::mem::replace(&mut out[i], row);
                        out[i].also = [older.also, vec![older.run]].concat();
                    }
                    Some(&i) => out[i].also.push(row.run),
                }
            }
        }
    }
    out
}

/// The Burn a record's runner was built with, as the index names a training row's.
fn burn_of(r: &InferRecord) -> String {
    burn_label(r.burn.as_ref(), r.fingerprint.as_ref())
}

fn serving_row(machine: usize, group: &[&InferRecord], run: &str) -> ServingRow {
    let (first, ok) = (group[0], succeeded(group));
    let burn = burn_of(first);
    let median = |f: &dyn Fn(&InferRecord) -> Option<f64>| {
        let v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
        Stats::from_samples(&v).map(|s| s.median)
    };
    let at = |batch: usize, q: fn(&Latency) -> f64| median(&|r| r.latency_at(batch).map(q));
    let agreement = ok
        .iter()
        .filter_map(|r| r.agreement.as_ref())
        .min_by(|a, b| a.top1.total_cmp(&b.top1));
    let values = [
        at(1, |l| l.p50_seconds),
        at(1, |l| l.p90_seconds),
        at(1, |l| l.p99_seconds),
        at(8, |l| l.p50_seconds),
        median(&|r| r.throughput.as_ref().map(|t| t.samples_per_second)),
        median(&|r| r.first_prediction.as_ref().map(|f| f.ready_seconds)),
        median(&|r| r.first_prediction.as_ref().map(|f| f.seconds)),
        median(&|r| r.memory.as_ref().map(|m| m.serving_bytes() as f64)),
        ok.first().and_then(|r| r.binary_bytes).map(|b| b as f64),
        agreement.map(|a| a.top1),
        agreement.map(|a| a.max_logit_difference),
        agreement.and_then(|a| a.accuracy),
    ];
    let mut labels = Vec::new();
    if ok.len() == 1 {
        labels.push("single run");
    }
    if agreement.is_some_and(crate::infer::disagrees) {
        labels.push("disagrees");
    }
    if ok.iter().any(|r| r.latency.iter().any(|l| !l.steady)) {
        labels.push("not steady");
    }
    ServingRow {
        machine,
        model: first.model.to_string(),
        backend: first.backend.clone(),
        device: first.device.clone(),
        precision: first.precision.to_string(),
        burn,
        status: if ok.is_empty() {
            first.status
        } else {
            Status::Ok
        }
        .as_str()
        .to_string(),
        texts: if ok.is_empty() {
            vec![format!(
                "{}: {}",
                first.status.as_str(),
                first.reason.as_deref().unwrap_or("no reason given")
            )]
        } else {
            row_cells(first, &ok)
                .into_iter()
                .map(|t| t.replace("**", ""))
                .collect()
        },
        values: FIGURES
            .iter()
            .zip(values)
            .filter_map(|((name, _), v)| Some((*name, v?)))
            .collect(),
        runs: ok.len(),
        run: run.to_string(),
        also: Vec::new(),
        labels,
    }
}

/// Each run, newest first, under the machine its first record names: per model its latency
/// chart, table and notes.
pub fn runs_markup(runs: &[ServingRun]) -> maud::Markup {
    html! {
        @if runs.is_empty() { p { "No inference run yet (`cargo xtask infer`)." } }
        @for run in runs.iter().rev() {
            section id={ "infer-" (run.name) } {
                h2 { (run.name) }
                @if let Some(fp) = run.records.iter().find_map(|r| r.fingerprint.as_ref()) {
                    p { (kiln_contract::fingerprint::machine_label(fp)) }
                }
                (crate::infer::sections(&run.records, "h3"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::runs::dirs_holding;

    fn committed() -> Vec<ServingRun> {
        let root = kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/results");
        let (dirs, _) = dirs_holding(&[root], INFER_FILE).unwrap();
        read_serving(&dirs).unwrap()
    }

    /// The committed inference runs are found (an A/B's sides too, not a training run) and
    /// their tables shown under their machine.
    #[test]
    fn the_serving_page_shows_every_committed_inference_run() {
        let runs = committed();
        assert!(
            runs.iter().any(|r| r.name.ends_with("-infer-mlp")),
            "{:?}",
            runs.iter().map(|r| &r.name).collect::<Vec<_>>()
        );
        assert!(runs.iter().all(|r| !r.records.is_empty()));
        let page = runs_markup(&runs).into_string();
        assert!(
            page.contains("flex / cpu") && page.contains("pytorch / cpu"),
            "{page}"
        );
        assert!(page.contains("AMD EPYC"), "the machine is named");
        assert!(page.contains("<svg"), "the latency chart is drawn");
    }

    /// infer.md's columns after the backend and precision are the serving table's figures.
    #[test]
    fn the_figures_are_the_inference_tables_columns() {
        let headers: Vec<&str> = FIGURES.iter().map(|(_, h)| *h).collect();
        assert_eq!(headers, crate::infer::COLUMNS[2..]);
    }

    /// One row per machine, model, backend, device, precision and Burn: its figures as numbers
    /// (the medians the table's text shows), the run with the most repeats as its source and
    /// the others in `also`.
    #[test]
    fn serving_rows_are_one_per_cell_with_their_figures_and_sources() {
        let runs = committed();
        let mut machines = Vec::new();
        let rows = serving_rows(&mut machines, &runs);
        let mut keys: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{}|{}|{}|{}|{}|{}",
                    r.machine, r.model, r.backend, r.device, r.precision, r.burn
                )
            })
            .collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), all, "one row per cell");
        assert!(!machines.is_empty() && rows.iter().all(|r| r.machine < machines.len()));
        let flex = rows
            .iter()
            .find(|r| r.model == "mlp" && r.backend == "flex" && r.status == "ok")
            .expect("a flex MLP row");
        assert_eq!(flex.texts.len(), FIGURES.len());
        let p50 = flex.values["p50"];
        let median = crate::infer::latency_text(p50);
        assert!(
            flex.texts[0].starts_with(&median),
            "{} {median}",
            flex.texts[0]
        );
        assert!(flex.values["throughput"] > 0.0 && flex.values["p99"] >= p50);
        // The MLP on flex with Burn 0.22.1 was measured on the row's machine by more than one
        // committed run (an A/B's side among them): one is the source, the others are named.
        let on_machine = |r: &InferRecord| {
            r.fingerprint.as_ref().is_some_and(|f| {
                kiln_contract::fingerprint::machine_key(f) == machines[flex.machine].key
            })
        };
        let sources = runs
            .iter()
            .filter(|run| {
                run.records.iter().any(|r| {
                    r.backend == "flex"
                        && r.model.to_string() == "mlp"
                        && burn_of(r) == "0.22.1"
                        && on_machine(r)
                })
            })
            .count();
        assert!(sources >= 2, "{sources}");
        assert_eq!(flex.also.len() + 1, sources, "{flex:?}");
        let pytorch = rows.iter().find(|r| r.backend == "pytorch").unwrap();
        assert_eq!(pytorch.burn, crate::site::rows::NO_BURN);
        assert_eq!(flex.burn, "0.22.1");
    }
}
