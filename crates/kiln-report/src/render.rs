//! The report's tables from records: Markdown (the report), JSON and CSV.

use std::fmt::Write as _;

use crate::fields::*;
use crate::machines::machine_lines;
use crate::sections::{learner_section, scaling_section};
use crate::table::{Column, model_tables};
use kiln_contract::schema::Record;

/// The loop-overhead measurements (`bench --bare`) as a small table.
fn overhead_table(records: &[&Record]) -> String {
    let mut out = String::from(
        "### Kiln loop overhead\n\n| Model | Backend / device | Precision | Kiln loop (ms/step) | Bare loop (ms/step) | Overhead |\n|---|---|---|---|---|---|\n",
    );
    for r in records {
        if let Some(o) = &r.loop_overhead {
            let _ = writeln!(
                out,
                "| {} | {} / {} | {} | {:.1} ({:.1}–{:.1}) | {:.1} ({:.1}–{:.1}) | {:+.2}% (median of {} rounds of {} steps) |",
                r.model,
                r.backend,
                r.device,
                r.precision,
                o.kiln_step_seconds.median * 1e3,
                o.kiln_step_seconds.min * 1e3,
                o.kiln_step_seconds.max * 1e3,
                o.bare_step_seconds.median * 1e3,
                o.bare_step_seconds.min * 1e3,
                o.bare_step_seconds.max * 1e3,
                o.overhead_percent,
                o.rounds,
                o.steps_per_round
            );
        }
    }
    out.push('\n');
    out
}

/// The Markdown report: one table per model, shaped like the article's, plus notes.
pub fn markdown(all: &[Record], baseline: Option<&str>) -> String {
    let mut out = String::new();
    let overheads: Vec<&Record> = all.iter().filter(|r| r.loop_overhead.is_some()).collect();
    if !overheads.is_empty() {
        out.push_str(&overhead_table(&overheads));
    }
    out.push_str(&learner_section(all).markdown());
    out.push_str(&scaling_section(all).markdown());
    let cell = |text: &str| text.replace('|', "/");
    let curves = crate::batch::batch_curves(all);
    for t in model_tables(all, baseline) {
        let _ = writeln!(out, "### {}\n", t.model);
        let titles: Vec<&str> = t.columns.iter().map(|(_, title)| title.as_str()).collect();
        let _ = writeln!(out, "| {} |", titles.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(titles.len()));
        let epoch = t.index(Column::EpochTime);
        for row in &t.rows {
            let cells: Vec<String> = row
                .cells
                .iter()
                .enumerate()
                .map(|(i, c)| match (&row.reason, Some(i) == epoch) {
                    (Some(reason), true) => {
                        format!("**{}**: {}", row.status.as_str(), cell(reason))
                    }
                    _ => cell(&c.text),
                })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
        for note in &t.notes {
            let _ = writeln!(out, "- {note}");
        }
        let _ = writeln!(out);
        if let Some((_, c)) = curves.iter().find(|(m, _)| *m == t.model) {
            out.push_str(&crate::batch::markdown(c));
        }
    }
    for line in machine_lines(all) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The records as one pretty JSON array (the merged data behind a report).
pub fn json(records: &[Record]) -> String {
    serde_json::to_string_pretty(records).unwrap_or_else(|_| "[]".into())
}

/// One CSV row per record, numbers unrounded (written by the `csv` crate).
pub fn csv(records: &[Record]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    // The header is the columns' names, whatever the record.
    let none = kiln_contract::CellId {
        training_loop: None,
        model: String::new(),
        backend: String::new(),
        device: String::new(),
        precision: String::new(),
        batch_size: 0,
    };
    let header = columns(&Record::not_run(&none, kiln_contract::Status::Skipped, ""));
    let _ = out.write_record(header.iter().map(|(name, _)| name));
    for r in records {
        // Writing to memory cannot fail.
        let _ = out.write_record(columns(r).iter().map(|(_, value)| value));
    }
    out.into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// One record's CSV columns, each its name beside its value: a new column is one line in one
/// of the groups below (the CSV keeps their order).
fn columns(r: &Record) -> Vec<(&'static str, String)> {
    [
        identity_and_time(r),
        throughput_memory_and_data(r),
        run_and_noise(r),
        machine_and_accuracy_target(r),
    ]
    .concat()
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn optu(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn optn(v: Option<u32>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The cell, its status, its epoch time and warm-up.
fn identity_and_time(r: &Record) -> Vec<(&'static str, String)> {
    let e = r.epoch_seconds.as_ref();
    vec![
        ("machine", machine(r)),
        ("model", r.model.clone()),
        ("backend", r.backend.clone()),
        ("device", r.device.clone()),
        ("device_name", r.device_name.clone()),
        ("precision", r.precision.clone()),
        ("status", r.status.as_str().into()),
        ("epoch_seconds_median", opt(e.map(|e| e.median))),
        ("epoch_seconds_min", opt(e.map(|e| e.min))),
        ("epoch_seconds_max", opt(e.map(|e| e.max))),
        ("epoch_seconds_stddev", opt(e.map(|e| e.stddev))),
        ("epoch_seconds_cv", opt(e.map(|e| e.cv()))),
        (
            "epochs_timed",
            e.map(|e| e.n.to_string()).unwrap_or_default(),
        ),
        ("first_epoch_seconds", opt(r.first_epoch_seconds)),
        ("first_step_seconds", opt(r.first_step_seconds)),
        (
            "warmup_steady",
            r.warmup
                .as_ref()
                .map(|w| w.steady.to_string())
                .unwrap_or_default(),
        ),
        ("warmup_seconds", opt(r.warmup.as_ref().map(|w| w.seconds))),
        (
            "warmup_steps",
            r.warmup
                .as_ref()
                .map(|w| w.steps.to_string())
                .unwrap_or_default(),
        ),
        (
            "warmup_process_seconds",
            opt(r.warmup.as_ref().and_then(|w| w.process_seconds)),
        ),
    ]
}

/// Throughput, memory, accuracy, how the time was obtained, the data and the settings.
fn throughput_memory_and_data(r: &Record) -> Vec<(&'static str, String)> {
    vec![
        ("images_per_second", opt(r.images_per_second)),
        ("peak_memory_bytes", optu(r.peak_memory_bytes)),
        ("process_threads", optu(r.process_threads.map(|n| n as u64))),
        (
            "device_peak_in_use_bytes",
            optu(r.device_memory.as_ref().map(|d| d.peak_in_use_bytes)),
        ),
        (
            "device_peak_reserved_bytes",
            optu(r.device_memory.as_ref().map(|d| d.peak_reserved_bytes)),
        ),
        ("test_accuracy", opt(r.test_accuracy)),
        ("test_samples", r.test_samples.to_string()),
        ("method", format!("{:?}", r.obtained.method).to_lowercase()),
        ("timed_steps", r.obtained.steps.to_string()),
        ("epoch_samples", r.obtained.epoch_samples.to_string()),
        (
            "standard_epoch_samples",
            r.obtained.standard_epoch_samples.to_string(),
        ),
        ("data", format!("{:?}", r.data).to_lowercase()),
        ("dataset", r.dataset.clone()),
        ("batch_size", r.batch_size.to_string()),
        ("seed", r.seed.to_string()),
        ("learning_rate", r.learning_rate.to_string()),
        ("cpu_model", r.fingerprint.cpu_model.clone()),
        ("threads", r.fingerprint.threads.to_string()),
        ("kiln_commit", r.fingerprint.kiln_commit.clone()),
        ("flops_per_sample", optu(r.flops_per_sample)),
        ("achieved_gflops", opt(r.achieved_gflops)),
        ("peak_gflops", opt(r.peak.as_ref().map(|p| p.gflops))),
        (
            "device_kind",
            r.device_kind.map(|k| k.to_string()).unwrap_or_default(),
        ),
        ("fallback_from", r.fallback_from.clone().unwrap_or_default()),
        (
            "amp_skipped_steps",
            r.loss_scaling
                .as_ref()
                .map(|l| l.skipped_steps.to_string())
                .unwrap_or_default(),
        ),
        (
            "amp_final_scale",
            opt(r.loss_scaling.as_ref().map(|l| l.final_scale)),
        ),
    ]
}

/// The repeat, the training memory, the device peak, the noise.
fn run_and_noise(r: &Record) -> Vec<(&'static str, String)> {
    vec![
        (
            "repeat",
            r.repeat
                .as_ref()
                .map(|p| p.index.to_string())
                .unwrap_or_default(),
        ),
        (
            "repeats",
            r.repeat
                .as_ref()
                .map(|p| p.of.to_string())
                .unwrap_or_default(),
        ),
        (
            "run",
            r.repeat.as_ref().map(|p| p.run.clone()).unwrap_or_default(),
        ),
        ("training_memory_bytes", optu(r.training_bytes())),
        (
            "memory_growth_bytes_per_epoch",
            opt(kiln_contract::memory::memory_growth(&r.epochs).map(|g| g.bytes_per_epoch)),
        ),
        (
            "rss_baseline_bytes",
            optu(r.training_memory.as_ref().and_then(|m| m.baseline_bytes)),
        ),
        (
            "rss_peak_training_bytes",
            optu(r.training_memory.as_ref().and_then(|m| m.peak_bytes)),
        ),
        (
            "parent_max_rss_bytes",
            optu(
                r.training_memory
                    .as_ref()
                    .and_then(|m| m.parent_max_rss_bytes),
            ),
        ),
        (
            "device_peak_gflops",
            opt(r.device_peak.as_ref().map(|p| p.gflops)),
        ),
        (
            "device_peak_backend",
            r.device_peak
                .as_ref()
                .map(|p| p.backend.clone())
                .unwrap_or_default(),
        ),
        ("projection_chunks", r.obtained.chunks.to_string()),
        (
            "other_cpu_share",
            opt(r
                .noise
                .as_ref()
                .and_then(|n| n.other_cpu_share)
                .map(|s| s.max(0.0))),
        ),
        (
            "other_cpu_share_resolution",
            opt(r.noise.as_ref().and_then(kiln_contract::Noise::resolution)),
        ),
        (
            "steal_share",
            opt(r.noise.as_ref().and_then(|n| n.steal_share)),
        ),
        (
            "load_average_start",
            opt(r.noise.as_ref().and_then(|n| n.load_average_start)),
        ),
        (
            "busy",
            r.noise
                .as_ref()
                .map(|n| n.busy().to_string())
                .unwrap_or_default(),
        ),
    ]
}

/// The CPU, the machine key, time to accuracy and the reason.
fn machine_and_accuracy_target(r: &Record) -> Vec<(&'static str, String)> {
    let cpu = r.fingerprint.cpu.as_ref();
    vec![
        (
            "cpu_vendor",
            cpu.and_then(|c| c.vendor.clone()).unwrap_or_default(),
        ),
        ("cpu_family", optn(cpu.and_then(|c| c.family))),
        ("cpu_model_number", optn(cpu.and_then(|c| c.model))),
        ("cpu_stepping", optn(cpu.and_then(|c| c.stepping))),
        ("isa", cpu.map(|c| c.isa.join(" ")).unwrap_or_default()),
        ("machine_key", machine_key(r)),
        (
            "target_accuracy",
            opt(r.time_to_accuracy.as_ref().map(|t| t.target)),
        ),
        (
            "time_to_accuracy_seconds",
            opt(r.time_to_accuracy.as_ref().and_then(|t| t.seconds)),
        ),
        (
            "time_to_accuracy_epoch",
            r.time_to_accuracy
                .as_ref()
                .and_then(|t| t.epoch)
                .map(|e| e.to_string())
                .unwrap_or_default(),
        ),
        ("reason", r.reason.clone().unwrap_or_default()),
    ]
}

#[cfg(test)]
mod tests;
