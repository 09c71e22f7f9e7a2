//! What the site shows, as data: the machines (named by their fingerprint), the runs, and one
//! row per machine × model × backend × device × precision × Burn × loop, each with its figures
//! as numbers (to sort, filter and compare) and as the reports write them (to read), the labels
//! a reader must see (projected, single run, not steady, synthetic data, ...) and its source run.

use std::collections::HashMap;

use serde::Serialize;

use kiln_contract::Fingerprint;
use kiln_contract::fingerprint::machine_label;
use kiln_contract::schema::{DataKind, Method, Record, Status};

use super::runs::RunRecords;
use crate::fields::{epoch_cell, low_confidence, machine, pytorch_reference, reason_text};
use crate::table::warmup_cell;
use crate::units::{human_bytes, human_seconds, percent};

/// A machine, from the first record that names it.
#[derive(Serialize, Debug, Clone)]
pub struct Machine {
    pub key: String,
    /// Its name in a table: `EPYC f25m17 · 2 cores`, `Xeon f6m207 · 16 cores · NVIDIA H200`.
    pub short: String,
    /// Its name in URLs and in its page's file name.
    pub id: String,
    pub label: String,
    /// Its page, relative to the site's root.
    pub page: String,
    pub vendor: String,
    /// `AMD family 25`, `Intel family 6`: what the family filter offers.
    pub family: String,
    pub isa: Vec<String>,
    pub gpu: Option<String>,
    pub cores: usize,
    pub memory_bytes: Option<u64>,
    pub os: String,
    pub runs: Vec<String>,
}

/// One row: a cell as one run measured it.
#[derive(Serialize, Debug, Clone)]
pub struct SiteRow {
    /// Index into the machines.
    pub machine: usize,
    pub model: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
    pub burn: String,
    /// Built against a published Burn (or none: the PyTorch reference), not a checkout: what
    /// the index shows by default.
    pub release: bool,
    #[serde(rename = "loop")]
    pub training_loop: String,
    pub batch: usize,
    pub status: String,
    /// Seconds per epoch (the median; between runs where the row combines repeats).
    pub epoch: Option<f64>,
    /// The 95% interval for the next run's epoch time, where the row has runs to give one.
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// That interval as the reports write it (`159 s–175 s`), `–` without one.
    pub interval_text: String,
    pub epoch_text: String,
    /// Epoch time over PyTorch's, same machine, run, device, precision and batch.
    pub vs_pytorch: Option<f64>,
    pub warmup: Option<f64>,
    pub warmup_text: String,
    pub memory: Option<u64>,
    pub memory_text: String,
    pub accuracy: Option<f64>,
    pub accuracy_text: String,
    /// Timed runs behind the epoch time (1: a single run).
    pub runs: usize,
    pub date: String,
    /// The run directory's name: the row's source.
    pub run: String,
    /// Other runs that measured the same cell on the same machine and Burn (the machine's
    /// page lists their rows).
    pub also: Vec<String>,
    pub labels: Vec<&'static str>,
}

/// What [`site_rows`] gives: the machines, the rows, each run's rows, and the simulated rows
/// (replayed, or a GPU kit's dry run), which are no measurement and appear only on their own
/// page, labelled.
pub type SiteRows = (Vec<Machine>, Vec<SiteRow>, Vec<Vec<SiteRow>>, Vec<SiteRow>);

/// The machines and the rows of `runs`: every run's rows (repeats combined), then one row per
/// key, the best measured (timed before not, measured before projected, a release build
/// before CI's opt-level 0, more runs, newer). Replayed records and dry runs are kept apart.
pub fn site_rows(runs: &[RunRecords]) -> SiteRows {
    let mut machines: Vec<Machine> = Vec::new();
    let mut per_run = Vec::new();
    let mut simulated = Vec::new();
    for run in runs {
        let combined = crate::repeats::combine(&run.records);
        let (sim, refs): (Vec<&Record>, Vec<&Record>) = combined
            .iter()
            .filter(|r| r.loop_overhead.is_none())
            .partition(|r| run.simulated.is_some() || r.replay.is_some());
        for r in sim {
            let m = machine_index(&mut machines, &r.fingerprint, "");
            let mut row = row(r, r, m, &run.name, None);
            row.labels = vec![match r.replay {
                Some(_) => super::runs::REPLAYED,
                None => super::runs::DRY_RUN,
            }];
            simulated.push(row);
        }
        // A cell that never started carries no fingerprint: it is its run's machine's.
        let host = refs.iter().find(|r| !machine(r).is_empty()).copied();
        let rows: Vec<SiteRow> = refs
            .iter()
            .map(|r| {
                let who = if machine(r).is_empty() {
                    host.unwrap_or(r)
                } else {
                    r
                };
                let m = machine_index(&mut machines, &who.fingerprint, &run.name);
                row(r, who, m, &run.name, pytorch_reference(&refs, r))
            })
            .collect();
        per_run.push(rows);
    }
    let mut rows = collapse(per_run.iter().flatten());
    pytorch_elsewhere(&mut rows);
    (machines, rows, per_run, simulated)
}

/// The index of the machine `fp` names in `machines` (added if new), with `run` among its runs
/// (an empty `run`: none, for a simulated row, which its machine's page does not list).
pub fn machine_index(machines: &mut Vec<Machine>, fp: &Fingerprint, run: &str) -> usize {
    let key = kiln_contract::fingerprint::machine_key(fp);
    let i = match machines.iter().position(|m| m.key == key) {
        Some(i) => i,
        None => {
            let mut id = super::name::slug(&machine_label(fp));
            if id.is_empty() {
                id = "unknown-machine".into();
            }
            let base = id.clone();
            for n in 2.. {
                if !machines.iter().any(|m| m.id == id) {
                    break;
                }
                id = format!("{base}-{n}");
            }
            machines.push(new_machine(fp, key, id));
            machines.len() - 1
        }
    };
    if !run.is_empty() && !machines[i].runs.iter().any(|x| x == run) {
        machines[i].runs.push(run.to_string());
    }
    i
}

fn new_machine(f: &Fingerprint, key: String, id: String) -> Machine {
    let cpu = f.cpu.clone().unwrap_or_default();
    let vendor = super::name::vendor_name(f);
    let family = cpu
        .family
        .map_or_else(|| vendor.clone(), |n| format!("{vendor} family {n}"));
    let mut short = format!("{} · {} cores", super::name::cpu_short(f), f.logical_cores);
    if let Some(gpu) = &f.gpu_name {
        short = format!("{short} · {gpu}");
    }
    Machine {
        short,
        page: format!("machines/{id}.html"),
        id,
        label: machine_label(f),
        key,
        vendor,
        family,
        isa: cpu.isa,
        gpu: f.gpu_name.clone(),
        cores: f.logical_cores,
        memory_bytes: f.memory_bytes,
        os: f.os.clone(),
        runs: Vec::new(),
    }
}

/// The labels a row's figures carry, as the reports write them.
fn labels(r: &Record, runs: usize) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut add = |yes: bool, label| {
        if yes {
            out.push(label)
        }
    };
    add(r.obtained.method == Method::Projected, "projected");
    add(r.obtained.method == Method::Unjudged, "too short to judge");
    add(low_confidence(r), "low confidence");
    add(r.epoch_seconds.is_some() && runs < 2, "single run");
    let steady = r.warmup.as_ref().is_none_or(|w| w.steady);
    add(r.status == Status::NotSteady || !steady, "not steady");
    add(r.data == DataKind::Synthetic, "synthetic data");
    add(r.data == DataKind::Custom, "custom data");
    add(
        r.fingerprint.opt_level.as_deref() == Some("0"),
        "opt-level 0",
    );
    add(r.noise.as_ref().is_some_and(|n| n.busy()), "busy machine");
    let emulated = r
        .device_kind
        .is_some_and(kiln_contract::DeviceKind::is_cpu_emulated);
    add(emulated, "CPU-emulated");
    out
}

/// `r`'s row; `who` is the record that names its machine, Burn and day (`r` itself, or its
/// run's for a cell that never started).
fn row(r: &Record, who: &Record, machine: usize, run: &str, pytorch: Option<&Record>) -> SiteRow {
    let epoch = r.epoch_seconds.as_ref().map(|s| s.median);
    let runs = match (&r.between_runs, &r.epoch_seconds) {
        (Some(_), Some(s)) => s.n,
        (_, Some(_)) => 1,
        _ => 0,
    };
    let interval = r
        .epoch_seconds
        .as_ref()
        .filter(|_| runs > 1)
        .and_then(|s| s.prediction_interval());
    let warmup = warmup_cell(r);
    let memory = r.training_bytes();
    SiteRow {
        machine,
        model: r.model.clone(),
        backend: r.backend.clone(),
        device: r.device.clone(),
        precision: r.precision.clone(),
        burn: burn(who),
        release: who.burn.as_ref().is_none_or(|b| b.is_release()),
        training_loop: r.training_loop.map_or("kiln".into(), |l| l.to_string()),
        batch: r.batch_size,
        status: r.status.as_str().to_string(),
        epoch,
        low: interval.map(|(low, _)| low.max(0.0)),
        high: interval.map(|(_, high)| high),
        interval_text: interval.map_or("–".into(), |(low, high)| {
            format!("{}–{}", human_seconds(low.max(0.0)), human_seconds(high))
        }),
        epoch_text: match r.status {
            Status::Ok => epoch_cell(r),
            s => format!("{}: {}", s.as_str(), reason_text(r)),
        },
        vs_pytorch: pytorch
            .filter(|p| p.backend != r.backend)
            .and_then(|p| Some(epoch? / p.epoch_seconds.as_ref()?.median)),
        warmup: warmup.sort.filter(|s| *s < f64::MAX),
        warmup_text: warmup.text,
        memory,
        memory_text: memory.map_or("–".into(), human_bytes),
        accuracy: r.test_accuracy,
        accuracy_text: percent(r.test_accuracy),
        runs,
        date: super::name::day(if r.started_at > 0 {
            r.started_at
        } else {
            who.started_at
        }),
        run: run.to_string(),
        also: Vec::new(),
        labels: labels(r, runs),
    }
}

/// The Burn a record's runner was built with: the run's `--burn` where it named one; `–` for
/// a runner without Burn (the PyTorch reference).
fn burn(r: &Record) -> String {
    burn_label(r.burn.as_ref(), Some(&r.fingerprint))
}

/// A record's Burn from its `--burn` build (a checkout by its revision, not the path it had
/// where it ran), else its fingerprint's Burn version; [`NO_BURN`] without either (the PyTorch
/// reference). Training and inference records alike.
pub fn burn_label(build: Option<&kiln_contract::BurnBuild>, fp: Option<&Fingerprint>) -> String {
    match (build, fp) {
        (Some(b), _) => b.public_label(),
        (None, Some(fp)) if !fp.burn_version.is_empty() => fp.burn_version.clone(),
        _ => NO_BURN.into(),
    }
}

/// The Burn of a row whose runner has none (the PyTorch reference).
pub const NO_BURN: &str = "–";

/// One row per machine × model × backend × device × precision × Burn × loop: the best, with
/// the other runs that measured it named in `also`.
fn collapse<'a>(rows: impl Iterator<Item = &'a SiteRow>) -> Vec<SiteRow> {
    let rank = |r: &SiteRow| {
        (
            r.epoch.is_some(),
            !r.labels.contains(&"projected"),
            !r.labels.contains(&"opt-level 0"),
            r.runs,
            r.date.clone(),
        )
    };
    let mut out: Vec<SiteRow> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in rows {
        let key = format!(
            "{}|{}|{}|{}|{}|{}|{}",
            r.machine, r.model, r.backend, r.device, r.precision, r.burn, r.training_loop
        );
        let Some(&i) = seen.get(&key) else {
            seen.insert(key, out.len());
            out.push(r.clone());
            continue;
        };
        let o = &mut out[i];
        let mut also = std::mem::take(&mut o.also);
        if rank(r) > rank(o) {
            also.push(std::mem::replace(o, r.clone()).run);
        } else {
            also.push(r.run.clone());
        }
        also.retain(|x| *x != o.run);
        also.sort();
        also.dedup();
        o.also = also;
    }
    out
}

/// A row whose run has no PyTorch row to compare with takes the PyTorch row of the same
/// machine, model, device, precision and batch from another run.
fn pytorch_elsewhere(rows: &mut [SiteRow]) {
    let key = |r: &SiteRow| {
        format!(
            "{}|{}|{}|{}|{}",
            r.machine, r.model, r.device, r.precision, r.batch
        )
    };
    let mut reference: HashMap<String, f64> = HashMap::new();
    for p in rows.iter().filter(|p| p.backend == "pytorch") {
        if let Some(e) = p.epoch {
            reference.entry(key(p)).or_insert(e);
        }
    }
    for r in rows
        .iter_mut()
        .filter(|r| r.backend != "pytorch" && r.vs_pytorch.is_none())
    {
        r.vs_pytorch = r.epoch.zip(reference.get(&key(r))).map(|(e, p)| e / p);
    }
}
