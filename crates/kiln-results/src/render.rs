//! Tables derived from records: Markdown (the report) and CSV.

use std::fmt::Write as _;

use crate::schema::{DataKind, Method, Record, Status};
use crate::stats::Stats;
use crate::table::{Column, machine_lines, model_tables};

/// A row label as users write it for `--baseline`: `backend/device/precision`, and the loop
/// when it is not Kiln's (`flex/cpu/f32 (learner loop)`).
pub fn row_label(r: &Record) -> String {
    let label = format!("{}/{}/{}", r.backend, r.device, r.precision);
    match r.training_loop {
        Some(l) => format!("{label} ({l} loop)"),
        None => label,
    }
}

/// The ok row of `all` that is `r`'s cell on the same machine trained through `training_loop`
/// on `device` (`None`: Kiln's loop).
fn same_cell_with<'a>(
    all: &'a [Record],
    r: &Record,
    device: &str,
    training_loop: Option<crate::TrainingLoop>,
) -> Option<&'a Record> {
    all.iter().find(|o| {
        o.status == Status::Ok
            && o.epoch_seconds.is_some()
            && o.model == r.model
            && o.backend == r.backend
            && o.device == device
            && o.precision == r.precision
            && o.batch_size == r.batch_size
            && o.training_loop == training_loop
            && o.data_parallel.is_none()
            && machine_key(o) == machine_key(r)
    })
}

/// A table derived from several records (the Learner against Kiln's loop, data-parallel
/// scaling): its title, a sentence on what it shows, its header and its rows, rendered the
/// same way in Markdown and HTML.
pub struct Section {
    pub title: &'static str,
    pub about: &'static str,
    pub header: &'static [&'static str],
    pub rows: Vec<Vec<String>>,
}

impl Section {
    /// The section as Markdown (nothing when it has no rows).
    pub fn markdown(&self) -> String {
        if self.rows.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "### {}\n\n{}\n\n| {} |\n|{}\n",
            self.title,
            self.about,
            self.header.join(" | "),
            "---|".repeat(self.header.len())
        );
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| c.replace('|', "/")).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
        out
    }
}

/// burn-train's Learner against Kiln's loop on the same cells: time per epoch and the ratio.
pub fn learner_section(records: &[Record]) -> Section {
    // Repeats of a cell are one row, their spread between runs the ratio's uncertainty.
    let all = &crate::repeats::combine(records);
    let mut rows = Vec::new();
    for r in all.iter().filter(|r| {
        r.training_loop == Some(crate::TrainingLoop::Learner)
            && r.data_parallel.is_none()
            && r.status == Status::Ok
    }) {
        let Some(kiln) = same_cell_with(all, r, &r.device, None) else {
            continue;
        };
        let (Some(learner_epoch), Some(kiln_epoch), Some((_, ratio))) = (
            r.epoch_seconds.as_ref(),
            kiln.epoch_seconds.as_ref(),
            crate::table::epoch_ratio(r, kiln),
        ) else {
            continue;
        };
        let runs = |x: &Record, e: &Stats| match &x.between_runs {
            Some(_) if e.n > 1 => format!(
                " ({}–{}, {} runs)",
                human_seconds(e.min),
                human_seconds(e.max),
                e.n
            ),
            _ => " (single run)".into(),
        };
        rows.push(vec![
            r.model.clone(),
            format!("{} / {}", r.backend, r.device),
            r.precision.clone(),
            format!(
                "{}{}",
                human_seconds(kiln_epoch.median),
                runs(kiln, kiln_epoch)
            ),
            format!(
                "{}{}",
                human_seconds(learner_epoch.median),
                runs(r, learner_epoch)
            ),
            ratio,
        ]);
    }
    Section {
        title: "burn-train's Learner against Kiln's loop",
        about: "Median seconds per standard epoch of the same cell (model, device, precision, \
                batch); the Learner's include its dataloader (a host-to-device copy per batch), \
                its loss and accuracy metrics and its event processing; validation is outside \
                both.",
        header: &[
            "Model",
            "Backend / device",
            "Precision",
            "Kiln loop (s/epoch)",
            "Learner (s/epoch)",
            "Learner ÷ Kiln",
        ],
        rows,
    }
}

/// Data-parallel cells against the same cell on their first device alone: throughput and
/// scaling efficiency (throughput on N devices ÷ (N × throughput on one)).
pub fn scaling_section(records: &[Record]) -> Section {
    let all = &crate::repeats::combine(records);
    let mut rows = Vec::new();
    for r in all.iter().filter(|r| r.status == Status::Ok) {
        let (Some(dp), Some(ips)) = (&r.data_parallel, r.images_per_second) else {
            continue;
        };
        let first = dp.devices.first().map(String::as_str).unwrap_or_default();
        // The same loop on one device is the like-for-like baseline; Kiln's loop otherwise.
        let single = same_cell_with(all, r, first, r.training_loop)
            .or_else(|| same_cell_with(all, r, first, None));
        let n = dp.devices.len() as f64;
        let (baseline, speedup, efficiency) = match single.and_then(|s| {
            s.images_per_second.map(|one| {
                let name = s.training_loop.map_or("kiln", |l| l.name());
                (
                    format!("{one:.1} ({name} loop)"),
                    ips / one,
                    ips / (n * one),
                )
            })
        }) {
            Some((b, s, e)) => (b, format!("{s:.2}x"), format!("{:.0}%", e * 100.0)),
            None => ("no single-device row".into(), "–".into(), "–".into()),
        };
        rows.push(vec![
            r.model.clone(),
            r.backend.clone(),
            dp.devices.join(", "),
            dp.strategy.clone(),
            dp.global_batch_size.to_string(),
            format!("{ips:.1}"),
            baseline,
            speedup,
            efficiency,
        ]);
    }
    Section {
        title: "Data-parallel scaling",
        about: "Throughput of cells trained on several devices through burn-train, against the \
                same cell on the first device alone; scaling efficiency = images/s on N devices \
                ÷ (N × images/s on one).",
        header: &[
            "Model",
            "Backend",
            "Devices",
            "Strategy",
            "Global batch",
            "images/s",
            "One device (images/s)",
            "Speed-up",
            "Scaling efficiency",
        ],
        rows,
    }
}

/// The machine a record comes from, named by its hardware (see
/// [`crate::fingerprint::machine_label`]).
pub fn machine(r: &Record) -> String {
    crate::fingerprint::machine_label(&r.fingerprint)
}

/// The key of the machine a record comes from: its hardware, the host name only as a
/// tie-breaker (see [`crate::fingerprint::machine_key`]).
pub fn machine_key(r: &Record) -> String {
    crate::fingerprint::machine_key(&r.fingerprint)
}

/// The row label with its machine: `machine:backend/device/precision`.
pub fn machine_label(r: &Record) -> String {
    format!("{}:{}", machine(r), row_label(r))
}

/// A row's name in a table or chart: `backend/device/precision`, with its machine when the
/// records come from several.
pub fn row_name(r: &Record, several_machines: bool) -> String {
    if several_machines {
        machine_label(r)
    } else {
        row_label(r)
    }
}

/// The baseline of one model's table: the row matching `wanted` (a prefix of
/// `backend/device/precision`, or of `machine:backend/device/precision`), else the first ok
/// `flex` f32 row (the CPU row, as in the article; at the protocol's batch 128 when there are
/// several batch sizes), else the first ok row.
pub fn pick_baseline<'a>(rows: &[&'a Record], wanted: Option<&str>) -> Option<&'a Record> {
    let ok = |r: &&&'a Record| r.status == Status::Ok && r.epoch_seconds.is_some();
    if let Some(wanted) = wanted {
        return rows
            .iter()
            .filter(ok)
            .find(|r| row_label(r).starts_with(wanted) || machine_label(r).starts_with(wanted))
            .copied();
    }
    // At several batch sizes, the protocol's batch is the baseline's.
    let flex = |r: &&&'a Record| r.backend == "flex" && r.precision == "f32";
    let protocol = crate::Profile::Full.batch_size();
    rows.iter()
        .filter(ok)
        .filter(flex)
        .find(|r| r.batch_size == protocol)
        .or_else(|| rows.iter().filter(ok).find(flex))
        .or_else(|| rows.iter().find(ok))
        .copied()
}

/// The PyTorch reference row for `r`: an ok `pytorch` record of the same model on the same
/// machine, device, precision and batch size, and of the same run when both records say their
/// run.
pub fn pytorch_reference<'a>(rows: &[&'a Record], r: &Record) -> Option<&'a Record> {
    rows.iter()
        .find(|p| {
            p.backend == "pytorch"
                && p.status == Status::Ok
                && p.epoch_seconds.is_some()
                && p.device == r.device
                && p.precision == r.precision
                && p.batch_size == r.batch_size
                && machine_key(p) == machine_key(r)
                && match (crate::table::run_of(p), crate::table::run_of(r)) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        })
        .copied()
}

/// The device column: spec, name, and what kind of device it really is when that matters.
pub(crate) fn device_cell(r: &Record) -> String {
    let mut device = if r.device_name.is_empty() || r.device_name == r.device {
        r.device.clone()
    } else {
        format!("{} ({})", r.device, r.device_name)
    };
    if r.device_kind
        .is_some_and(crate::DeviceKind::is_cpu_emulated)
    {
        device.push_str(" [CPU-emulated, not a GPU]");
    }
    if let Some(from) = &r.fallback_from {
        let short = from.split(':').take(2).collect::<Vec<_>>().join(":");
        let _ = write!(device, " [fallback from {short}]");
    }
    if let Some(l) = r.training_loop {
        let _ = write!(device, " [{l} loop]");
    }
    if let Some(dp) = &r.data_parallel {
        let _ = write!(
            device,
            " [{} over {} devices]",
            dp.strategy,
            dp.devices.len()
        );
    }
    if let Some(remote) = &r.remote {
        let _ = write!(
            device,
            " [remote: RTT {:.2} ms, sync {:.2} ms]",
            remote.rtt_seconds * 1e3,
            remote.sync_seconds * 1e3
        );
    }
    device
}

/// Bytes as MiB or GiB.
pub fn human_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

/// Bytes as KiB, MiB or GiB, whole (cache sizes).
pub fn human_bytes_short(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

/// Seconds as `12.3 s`, `4.1 min` or `2.0 h`.
pub fn human_seconds(s: f64) -> String {
    if s >= 7200.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 600.0 {
        format!("{:.1} min", s / 60.0)
    } else if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

pub(crate) fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How a record's epoch time was obtained, in words.
pub fn obtained_text(r: &Record) -> String {
    let o = &r.obtained;
    // A record xtask wrote for a runner that ended without one knows nothing of its data.
    if o.method == Method::None && r.dataset.is_empty() {
        return "not timed".into();
    }
    let data = match r.data {
        DataKind::Real => format!("real data ({})", r.dataset),
        DataKind::Synthetic => format!("SYNTHETIC data ({})", r.dataset),
        DataKind::Custom => format!("custom data ({})", r.dataset),
    };
    let scaled = if o.epoch_samples != o.standard_epoch_samples && o.epoch_samples > 0 {
        format!(
            ", {}-sample epochs scaled to {}",
            thousands(o.epoch_samples),
            thousands(o.standard_epoch_samples)
        )
    } else {
        String::new()
    };
    let how = match o.method {
        Method::Measured if r.epochs_requested == 1 => {
            format!("measured over its only epoch, warm-up included{scaled}")
        }
        Method::Measured => format!(
            "measured over {} epoch{} after warm-up{scaled}",
            o.epochs,
            if o.epochs == 1 { "" } else { "s" }
        ),
        Method::Projected => format!(
            "PROJECTED from {} steps (budget {}){scaled}",
            o.steps,
            o.budget_seconds
                .map(human_seconds)
                .unwrap_or_else(|| "none".into())
        ),
        Method::None => "not timed".into(),
    };
    if r.accum_steps > 1 {
        format!(
            "{how}; batch {} as {} micro-batches of {}; {data}",
            r.batch_size, r.accum_steps, r.micro_batch_size
        )
    } else {
        format!("{how}; {data}")
    }
}

/// True when a record's time is a projection from too few chunks to trust.
pub fn low_confidence(r: &Record) -> bool {
    r.obtained.method == Method::Projected && r.obtained.chunks < crate::MIN_CHUNKS
}

/// A row's epoch time: the median and its spread, between runs where the row combines
/// repeats, else within its single run (and said so); a projection from too few chunks is
/// marked as the estimate it is; a row measured on a busy machine is flagged.
pub fn epoch_cell(r: &Record) -> String {
    let Some(s) = &r.epoch_seconds else {
        return "–".into();
    };
    let range = |s: &Stats| {
        format!(
            "{}–{}, CV {:.1}%",
            human_seconds(s.min),
            human_seconds(s.max),
            s.cv() * 100.0
        )
    };
    // Between runs: where the next run's median is expected (95%), not the runs' range.
    let next = |s: &Stats| match s.prediction_interval() {
        Some((lo, hi)) => format!(
            "next run {}–{}",
            human_seconds(lo.max(0.0)),
            human_seconds(hi)
        ),
        None => range(s),
    };
    let mut out = if low_confidence(r) {
        format!(
            "≈ {} ({}, low confidence)",
            human_seconds(s.median),
            chunks_text(r.obtained.chunks)
        )
    } else {
        match &r.between_runs {
            Some(b) if s.n > 1 => {
                let dropped = if b.dropped.is_empty() {
                    String::new()
                } else {
                    format!(", {} outliers dropped", b.dropped.len())
                };
                format!(
                    "{} ({}; {} runs{dropped})",
                    human_seconds(s.median),
                    next(s),
                    s.n
                )
            }
            Some(b) => format!(
                "{} ({} of {} runs timed)",
                human_seconds(s.median),
                b.ok,
                b.runs
            ),
            None if s.n > 1 => format!(
                "{} (single run; within it {})",
                human_seconds(s.median),
                range(s)
            ),
            None => format!("{} (single run)", human_seconds(s.median)),
        }
    };
    if let Some(n) = r.noise.as_ref().filter(|n| n.busy()) {
        let _ = write!(out, " ⚠ busy machine ({})", noise_text(n));
    }
    out
}

/// `1 chunk`, `2 chunks`; records made before Kiln counted chunks hold 0: "chunks not recorded".
fn chunks_text(n: usize) -> String {
    match n {
        0 => "chunks not recorded".into(),
        1 => "1 chunk".into(),
        n => format!("{n} chunks"),
    }
}

/// Other processes' use of the machine during a cell, in words.
pub fn noise_text(n: &crate::Noise) -> String {
    let mut parts = Vec::new();
    match (n.other_cpu_share, n.window_ticks) {
        _ if n.quiet_within_resolution() => parts.push(format!(
            "quiet (others' CPU use below the 1-tick resolution of a {}-tick window)",
            n.window_ticks.unwrap_or(0)
        )),
        // Two significant digits: 48%, 0.5%.
        (Some(s), _) if s >= 0.1 => parts.push(format!("{:.0}% of CPU used by others", s * 100.0)),
        (Some(s), _) => parts.push(format!("{:.1}% of CPU used by others", s * 100.0)),
        (None, _) => parts.push("others' CPU use unknown".into()),
    }
    if let Some(s) = n.steal_share.filter(|&s| s > 0.005) {
        parts.push(format!("{:.0}% stolen by the hypervisor", s * 100.0));
    }
    parts.join(", ")
}

/// Training memory (peak − baseline) as the headline, the process's total RSS beside it; the
/// device allocator's figures for GPU rows.
pub(crate) fn memory_cell(r: &Record) -> String {
    let total = r
        .peak_memory_bytes
        .map(|b| format!("{} RSS", human_bytes(b)));
    let mut out = match (r.training_bytes(), total) {
        (Some(t), Some(total)) => format!("{} ({total})", human_bytes(t)),
        (Some(t), None) => human_bytes(t),
        (None, Some(total)) => format!("– ({total})"),
        (None, None) => "–".into(),
    };
    if let Some(d) = &r.device_memory {
        let _ = write!(
            out,
            "; device {} in use / {} reserved",
            human_bytes(d.peak_in_use_bytes),
            human_bytes(d.peak_reserved_bytes)
        );
    }
    out
}

/// Achieved GFLOP/s as a share of the device's peak: the best GEMM any backend measured on
/// the device at the run's start (the same denominator for every backend on it); records made
/// before Kiln shared the denominator are divided by their own backend's GEMM, and say so.
pub(crate) fn efficiency_cell(r: &Record) -> String {
    match (r.achieved_gflops, &r.device_peak, &r.peak) {
        (Some(a), Some(d), _) if d.gflops > 0.0 => {
            format!("{a:.1} ({:.0}% of {:.0})", a / d.gflops * 100.0, d.gflops)
        }
        (Some(a), None, Some(p)) if p.gflops > 0.0 => format!(
            "{a:.1} ({:.0}% of its own GEMM {:.0})",
            a / p.gflops * 100.0,
            p.gflops
        ),
        (Some(a), _, _) => format!("{a:.1}"),
        _ => "–".into(),
    }
}

pub(crate) fn accuracy_cell(r: &Record) -> String {
    match r.test_accuracy {
        Some(a) => format!("{:.1}% (n={})", a * 100.0, thousands(r.test_samples)),
        None => "–".into(),
    }
}

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

/// Things a reader should know before trusting a row.
pub fn warnings(r: &Record) -> Vec<String> {
    let mut out = Vec::new();
    if r.status != Status::Ok {
        return out;
    }
    if let Some(e) = &r.epoch_seconds {
        if e.n > 1 && e.cv() > 0.10 {
            out.push(format!(
                "high spread between {} (coefficient of variation {:.0}%)",
                if r.between_runs.is_some() {
                    "runs"
                } else {
                    "epochs"
                },
                e.cv() * 100.0
            ));
        }
        if let Some(b) = r.between_runs.as_ref().filter(|b| b.within_cv_max > 0.10) {
            out.push(format!(
                "high spread within a run (coefficient of variation up to {:.0}%)",
                b.within_cv_max * 100.0
            ));
        }
        if let Some(first) = r.first_epoch_seconds
            && first > 2.0 * e.median
        {
            out.push(format!(
                "the warm-up epoch took {:.1}× the median epoch",
                first / e.median
            ));
        }
    }
    if r.obtained.method == Method::Projected {
        out.push(format!(
            "projected from {} timed steps ({}), not measured over a whole epoch{}",
            r.obtained.steps,
            chunks_text(r.obtained.chunks),
            if low_confidence(r) {
                format!(
                    "; fewer than {} chunks: a low-confidence estimate, kept out of the charts",
                    crate::MIN_CHUNKS
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(n) = r.noise.as_ref().filter(|n| n.busy()) {
        out.push(format!(
            "measured on a busy machine: {} over {} ({}); more than {:.0}% flags a row",
            noise_text(n),
            human_seconds(n.window_seconds),
            n.window,
            crate::BUSY_SHARE * 100.0
        ));
    }

    if r.data == DataKind::Synthetic {
        out.push("synthetic data: accuracy means nothing".into());
    }
    if r.device_kind
        .is_some_and(crate::DeviceKind::is_cpu_emulated)
    {
        out.push(
            "a software GPU driver running on the CPU (e.g. Mesa's lavapipe): a correctness row, \
             not a GPU result"
                .into(),
        );
    }
    if let Some(rt) = &r.runtime {
        let mut parts = Vec::new();
        if let Some(f) = rt.fusion {
            parts.push(format!("fusion {}", if f { "on" } else { "off" }));
        }
        if let Some(a) = &rt.autotune {
            parts.push(format!("autotune {a}"));
        }
        if let Some(c) = &rt.autotune_cache {
            parts.push(format!("autotune cache {c} at start"));
        }
        if let Some(s) = r.first_step_seconds {
            parts.push(format!(
                "first step {} (compiling and autotuning kernels; timed apart from the epochs)",
                human_seconds(s)
            ));
        }
        if !parts.is_empty() {
            out.push(parts.join(", "));
        }
    }
    if let Some(ls) = &r.loss_scaling {
        out.push(format!(
            "loss scaling: {} of {} steps skipped on overflow, scale {} → {}",
            ls.skipped_steps,
            ls.skipped_steps + ls.applied_steps,
            ls.initial_scale,
            ls.final_scale
        ));
    }
    out
}

/// The columns of [`csv`].
const CSV_COLUMNS: &[&str] = &[
    "machine",
    "model",
    "backend",
    "device",
    "device_name",
    "precision",
    "status",
    "epoch_seconds_median",
    "epoch_seconds_min",
    "epoch_seconds_max",
    "epoch_seconds_stddev",
    "epoch_seconds_cv",
    "epochs_timed",
    "first_epoch_seconds",
    "first_step_seconds",
    "images_per_second",
    "peak_memory_bytes",
    "device_peak_in_use_bytes",
    "device_peak_reserved_bytes",
    "test_accuracy",
    "test_samples",
    "method",
    "timed_steps",
    "epoch_samples",
    "standard_epoch_samples",
    "data",
    "dataset",
    "batch_size",
    "seed",
    "cpu_model",
    "threads",
    "kiln_commit",
    "flops_per_sample",
    "achieved_gflops",
    "peak_gflops",
    "device_kind",
    "fallback_from",
    "amp_skipped_steps",
    "amp_final_scale",
    "repeat",
    "repeats",
    "run",
    "training_memory_bytes",
    "rss_baseline_bytes",
    "rss_peak_training_bytes",
    "parent_max_rss_bytes",
    "device_peak_gflops",
    "device_peak_backend",
    "projection_chunks",
    "other_cpu_share",
    "other_cpu_share_resolution",
    "steal_share",
    "load_average_start",
    "busy",
    "cpu_vendor",
    "cpu_family",
    "cpu_model_number",
    "cpu_stepping",
    "isa",
    "machine_key",
    "target_accuracy",
    "time_to_accuracy_seconds",
    "time_to_accuracy_epoch",
    "reason",
];

/// One CSV row per record, numbers unrounded (written by the `csv` crate).
pub fn csv(records: &[Record]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    let _ = out.write_record(CSV_COLUMNS);
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let optu = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let optn = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in records {
        let e = r.epoch_seconds.as_ref();
        let cpu = r.fingerprint.cpu.as_ref();
        let fields = [
            machine(r),
            r.model.clone(),
            r.backend.clone(),
            r.device.clone(),
            r.device_name.clone(),
            r.precision.clone(),
            r.status.as_str().into(),
            opt(e.map(|e| e.median)),
            opt(e.map(|e| e.min)),
            opt(e.map(|e| e.max)),
            opt(e.map(|e| e.stddev)),
            opt(e.map(|e| e.cv())),
            e.map(|e| e.n.to_string()).unwrap_or_default(),
            opt(r.first_epoch_seconds),
            opt(r.first_step_seconds),
            opt(r.images_per_second),
            optu(r.peak_memory_bytes),
            optu(r.device_memory.as_ref().map(|d| d.peak_in_use_bytes)),
            optu(r.device_memory.as_ref().map(|d| d.peak_reserved_bytes)),
            opt(r.test_accuracy),
            r.test_samples.to_string(),
            format!("{:?}", r.obtained.method).to_lowercase(),
            r.obtained.steps.to_string(),
            r.obtained.epoch_samples.to_string(),
            r.obtained.standard_epoch_samples.to_string(),
            format!("{:?}", r.data).to_lowercase(),
            r.dataset.clone(),
            r.batch_size.to_string(),
            r.seed.to_string(),
            r.fingerprint.cpu_model.clone(),
            r.fingerprint.threads.to_string(),
            r.fingerprint.kiln_commit.clone(),
            optu(r.flops_per_sample),
            opt(r.achieved_gflops),
            opt(r.peak.as_ref().map(|p| p.gflops)),
            r.device_kind.map(|k| k.to_string()).unwrap_or_default(),
            r.fallback_from.clone().unwrap_or_default(),
            r.loss_scaling
                .as_ref()
                .map(|l| l.skipped_steps.to_string())
                .unwrap_or_default(),
            opt(r.loss_scaling.as_ref().map(|l| l.final_scale)),
            r.repeat
                .as_ref()
                .map(|p| p.index.to_string())
                .unwrap_or_default(),
            r.repeat
                .as_ref()
                .map(|p| p.of.to_string())
                .unwrap_or_default(),
            r.repeat.as_ref().map(|p| p.run.clone()).unwrap_or_default(),
            optu(r.training_bytes()),
            optu(r.training_memory.as_ref().and_then(|m| m.baseline_bytes)),
            optu(r.training_memory.as_ref().and_then(|m| m.peak_bytes)),
            optu(
                r.training_memory
                    .as_ref()
                    .and_then(|m| m.parent_max_rss_bytes),
            ),
            opt(r.device_peak.as_ref().map(|p| p.gflops)),
            r.device_peak
                .as_ref()
                .map(|p| p.backend.clone())
                .unwrap_or_default(),
            r.obtained.chunks.to_string(),
            opt(r.noise.as_ref().and_then(|n| n.other_cpu_share)),
            opt(r.noise.as_ref().and_then(crate::Noise::resolution)),
            opt(r.noise.as_ref().and_then(|n| n.steal_share)),
            opt(r.noise.as_ref().and_then(|n| n.load_average_start)),
            r.noise
                .as_ref()
                .map(|n| n.busy().to_string())
                .unwrap_or_default(),
            cpu.and_then(|c| c.vendor.clone()).unwrap_or_default(),
            optn(cpu.and_then(|c| c.family)),
            optn(cpu.and_then(|c| c.model)),
            optn(cpu.and_then(|c| c.stepping)),
            cpu.map(|c| c.isa.join(" ")).unwrap_or_default(),
            machine_key(r),
            opt(r.time_to_accuracy.as_ref().map(|t| t.target)),
            opt(r.time_to_accuracy.as_ref().and_then(|t| t.seconds)),
            r.time_to_accuracy
                .as_ref()
                .and_then(|t| t.epoch)
                .map(|e| e.to_string())
                .unwrap_or_default(),
            r.reason.clone().unwrap_or_default(),
        ];
        // Writing to memory cannot fail.
        let _ = out.write_record(&fields);
    }
    out.into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Records for tests of the renderers and of what derives rows from records.
#[cfg(test)]
pub(crate) mod tests_support {
    use crate::schema::{CellId, DataKind, Method, Obtained, Record, Status};
    use crate::stats::Stats;

    pub(crate) fn timed(backend: &str, median: f64) -> Record {
        let cell = CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 128,
        };
        let mut r = Record::not_run(&cell, Status::Ok, "");
        r.reason = None;
        r.epoch_seconds = Stats::from_samples(&[median * 0.9, median, median * 1.1]);
        r.obtained = Obtained {
            method: Method::Measured,
            epochs: 3,
            steps: 30,
            chunks: 0,
            epoch_samples: 8000,
            standard_epoch_samples: 60000,
            budget_seconds: None,
            budget_exhausted: false,
        };
        r.data = DataKind::Real;
        r.dataset = "fashion-mnist-sample".into();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of fields of CSV text (quoted fields may hold commas, quotes and newlines).
    fn parse_csv(text: &str) -> Vec<Vec<String>> {
        csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes())
            .records()
            .filter_map(Result::ok)
            .map(|r| r.iter().map(str::to_string).collect())
            .collect()
    }
    use super::tests_support::timed;

    #[test]
    fn speedup_is_relative_to_the_flex_row_by_default() {
        let records = vec![timed("ndarray", 100.0), timed("flex", 10.0)];
        let md = markdown(&records, None);
        assert!(md.contains("Speed-up vs flex/cpu/f32"), "{md}");
        assert!(
            md.contains(
                "| ndarray / cpu | f32 | 100 s (single run; within it 90.0 s–110 s, CV 10.0%) \
                 | 0.10× (single run)"
            ),
            "{md}"
        );
        assert!(md.contains("8,000-sample epochs scaled to 60,000"), "{md}");
        let md = markdown(&records, Some("ndarray"));
        assert!(
            md.contains(
                "| flex / cpu | f32 | 10.0 s (single run; within it 9.00 s–11.0 s, CV 10.0%) \
                 | 10.00× (single run)"
            ),
            "{md}"
        );
    }

    #[test]
    fn the_pytorch_column_divides_by_the_reference_on_the_same_device_and_precision() {
        let torch = timed("pytorch", 100.0);
        let tch = timed("tch", 130.0);
        let mut emulated = timed("wgpu", 400.0);
        emulated.device_kind = Some(crate::DeviceKind::CpuEmulatedGpu);
        let md = markdown(&[torch, tch, emulated.clone()], None);
        assert!(md.contains("Time ÷ PyTorch's"), "{md}");
        assert!(md.contains("| 1.30× (single run) |"), "{md}");
        assert!(md.contains("1 (reference)"), "{md}");
        assert!(md.contains("[CPU-emulated, not a GPU]"), "{md}");
        assert!(md.contains("not a GPU result"), "{md}");
        // Without a PyTorch row there is no such column.
        let md = markdown(&[emulated], None);
        assert!(!md.contains("PyTorch"), "{md}");
    }

    #[test]
    fn several_batch_sizes_add_a_batch_column_and_compare_each_with_pytorch_at_its_batch() {
        let at = |backend: &str, batch: usize, median: f64| {
            let mut r = timed(backend, median);
            r.batch_size = batch;
            r
        };
        // As xtask records a runner that died without a record.
        let mut id = at("tch", 512, 1.0).cell();
        id.batch_size = 512;
        let oom = Record::not_run(
            &id,
            Status::OutOfMemory,
            "batch 512 did not fit: CUDA out of memory",
        );
        let records = [
            at("pytorch", 32, 100.0),
            at("tch", 32, 150.0),
            at("pytorch", 512, 50.0),
            oom,
        ];
        let md = markdown(&records, None);
        assert!(md.contains("| Precision | Batch |"), "{md}");
        // tch at batch 32 against PyTorch at batch 32, not at 512.
        assert!(md.contains("| 1.50× (single run) |"), "{md}");
        assert!(
            md.contains("**out of memory**: batch 512 did not fit"),
            "{md}"
        );
        assert!(md.contains("Images/s by batch size"), "{md}");
        assert!(md.contains("32 (512: out of memory)"), "{md}");
        assert!(!md.contains("SYNTHETIC data ()"), "{md}");
        // The speed-up baseline is flex at the protocol's batch, wherever it is listed.
        let md = markdown(&[at("flex", 32, 10.0), at("flex", 128, 20.0)], None);
        assert!(md.contains("Speed-up vs flex/cpu/f32 @ batch 128"), "{md}");
        // One batch size: no such column.
        let md = markdown(&[timed("flex", 1.0)], None);
        assert!(!md.contains("| Batch |"), "{md}");
    }

    #[test]
    fn failed_rows_show_status_and_reason_without_time() {
        let mut r = timed("flex", 10.0);
        r.status = Status::Diverged;
        r.reason = Some("loss became NaN in epoch 1".into());
        let md = markdown(&[r], None);
        assert!(md.contains("**diverged**: loss became NaN"), "{md}");
        assert!(!md.contains("10.0 s"), "{md}");
    }

    #[test]
    fn csv_has_a_header_and_one_row_per_record() {
        let text = csv(&[timed("flex", 10.0), timed("ndarray", 20.0)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let columns = lines[0].split(',').count();
        assert!(lines[1..].iter().all(|l| l.split(',').count() == columns));
    }

    fn on(host: &str, backend: &str, median: f64) -> Record {
        let mut r = timed(backend, median);
        r.fingerprint.hostname = host.into();
        r.fingerprint.cpu_model = format!("{host} cpu");
        r.fingerprint.logical_cores = 2;
        r
    }

    /// Three runs of one cell whose medians are 0.9, 1 and 1.1 times `median`.
    fn runs(host: &str, backend: &str, median: f64) -> Vec<Record> {
        [0.9, 1.0, 1.1]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut r = on(host, backend, median * f);
                r.repeat = Some(crate::Repeat {
                    index: i + 1,
                    of: 3,
                    run: "run".into(),
                });
                r
            })
            .collect()
    }

    #[test]
    fn two_machines_merge_into_one_table_with_propagated_uncertainty() {
        let records = [
            runs("laptop", "flex", 10.0),
            runs("laptop", "ndarray", 100.0),
            runs("gpu-box", "flex", 4.0),
        ]
        .concat();
        let md = markdown(&records, None);
        assert!(md.contains("| Machine | Backend / device |"), "{md}");
        assert!(
            md.contains("Speed-up vs laptop cpu, 2 cores · laptop:flex/cpu/f32"),
            "{md}"
        );
        // 10 / 4 = 2.5; each side's runs have a 10% standard deviation, so a 95% interval for
        // the next run of ± 4.303 · 10% · √(4/3) = 49.7%: 2.5 · √2 · 0.497 = 1.76.
        assert!(
            md.contains(
                "| gpu-box cpu, 2 cores · gpu-box | flex / cpu | f32 | 4.00 s (next run \
                 2.01 s–5.99 s; 3 runs) | 2.50× ± 1.76 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| laptop cpu, 2 cores · laptop | ndarray / cpu | f32 | 100 s (next run \
                 50.3 s–150 s; 3 runs) | 0.10× ± 0.07 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("Machine laptop cpu, 2 cores · laptop: laptop cpu")
                && md.contains("Machine gpu-box cpu, 2 cores · gpu-box: gpu-box cpu"),
            "{md}"
        );
        let md = markdown(&records, Some("gpu-box cpu, 2 cores · gpu-box:flex"));
        assert!(
            md.contains(
                "| laptop cpu, 2 cores · laptop | flex / cpu | f32 | 10.0 s (next run \
                 5.03 s–15.0 s; 3 runs) | 0.40× ± 0.28 |"
            ),
            "{md}"
        );
    }

    #[test]
    fn two_cpus_named_vm_are_two_machines_each_named_by_its_cpu() {
        let mut epyc = on("vm", "flex", 10.0);
        epyc.fingerprint.cpu_model = "AMD EPYC".into();
        epyc.fingerprint.cpu = Some(crate::CpuIdentity {
            vendor: Some("AuthenticAMD".into()),
            family: Some(26),
            model: Some(2),
            ..Default::default()
        });
        let mut xeon = on("vm", "flex", 12.0);
        xeon.fingerprint.cpu_model = "Intel(R) Xeon(R) Processor".into();
        xeon.fingerprint.cpu = Some(crate::CpuIdentity {
            vendor: Some("GenuineIntel".into()),
            family: Some(6),
            model: Some(143),
            isa: vec!["avx512-bf16".into(), "amx-bf16".into()],
            ..Default::default()
        });
        let md = markdown(&[epyc, xeon], None);
        assert!(
            md.contains("| AMD EPYC (family 26 model 2), 2 cores · vm | flex / cpu |"),
            "{md}"
        );
        assert!(
            md.contains("| Intel(R) Xeon(R) Processor (family 6 model 143), 2 cores · vm |"),
            "{md}"
        );
        assert!(md.contains("ISA avx512-bf16 amx-bf16"), "{md}");
    }

    #[test]
    fn two_runs_on_one_machine_get_a_run_column_and_their_own_reference() {
        let run = |name: &str, backend: &str, median: f64| {
            let mut r = on("vm", backend, median);
            r.repeat = Some(crate::Repeat {
                index: 1,
                of: 1,
                run: name.into(),
            });
            r
        };
        let records = [
            run("first", "tch", 200.0),
            run("first", "pytorch", 100.0),
            run("second", "tch", 200.0),
            run("second", "pytorch", 200.0),
        ];
        let md = markdown(&records, None);
        assert!(md.contains("| Run |"), "{md}");
        assert!(md.contains("| first | tch / cpu | f32 |"), "{md}");
        // Each tch row is divided by the PyTorch row of its own run.
        assert!(md.contains("| 2.00× (single run) |"), "{md}");
        assert!(md.contains("| 1.00× (single run) |"), "{md}");
        // One run: no such column.
        assert!(!markdown(&records[..2], None).contains("| Run |"));
    }

    #[test]
    fn time_to_accuracy_is_a_column_and_not_reaching_it_is_a_labelled_result() {
        let tta = |seconds: Option<f64>| crate::TimeToAccuracy {
            target: 0.8,
            seconds,
            epoch: seconds.map(|_| 2),
            epochs_evaluated: 3,
            best: Some(if seconds.is_some() { 0.83 } else { 0.625 }),
            budget_exhausted: seconds.is_none(),
        };
        let mut fast = timed("flex", 10.0);
        fast.time_to_accuracy = Some(tta(Some(41.0)));
        let mut slow = timed("ndarray", 100.0);
        slow.time_to_accuracy = Some(tta(None));
        let md = markdown(&[fast, slow], None);
        assert!(md.contains("Time to 80% test accuracy"), "{md}");
        assert!(md.contains("| 41.0 s (epoch 2) |"), "{md}");
        assert!(
            md.contains("| not reached in 3 epochs, budget exhausted (best 62.5%) |"),
            "{md}"
        );
        // Without a target, no such column.
        assert!(!markdown(&[timed("flex", 10.0)], None).contains("Time to"));
    }

    #[test]
    fn a_learner_row_is_its_own_row_and_is_compared_with_kilns_loop() {
        let kiln = super::tests_support::timed("flex", 10.0);
        let mut learner = super::tests_support::timed("flex", 12.5);
        learner.training_loop = Some(crate::TrainingLoop::Learner);
        assert_eq!(row_label(&learner), "flex/cpu/f32 (learner loop)");
        assert_ne!(kiln.cell(), learner.cell());
        let md = markdown(&[kiln.clone(), learner.clone()], None);
        assert!(
            md.contains("### burn-train's Learner against Kiln's loop"),
            "{md}"
        );
        assert!(
            md.contains("| 10.0 s (single run) | 12.5 s (single run) | 1.25× (single run) |"),
            "{md}"
        );
        // In the model's table the two rows are told apart by their loop.
        assert!(md.contains("| flex / cpu [learner loop] |"), "{md}");
        // Without the Kiln-loop row there is nothing to compare with: no table.
        assert!(!markdown(&[learner.clone()], None).contains("Learner against"));
        // Repeats are one row each, and the ratio carries their spread between runs.
        let repeated = |r: &Record, k: usize, median: f64| {
            let mut r = r.clone();
            r.epoch_seconds = Stats::from_samples(&[median * 0.99, median, median * 1.01]);
            r.repeat = Some(crate::Repeat {
                index: k,
                of: 2,
                run: "run".into(),
            });
            r
        };
        let runs = [
            repeated(&kiln, 1, 10.0),
            repeated(&learner, 1, 12.0),
            repeated(&kiln, 2, 11.0),
            repeated(&learner, 2, 13.0),
        ];
        let section = learner_section(&runs);
        assert_eq!(section.rows.len(), 1, "{:?}", section.rows);
        assert!(section.rows[0][5].contains(" ± "), "{:?}", section.rows);
        assert!(section.rows[0][3].contains("2 runs"), "{:?}", section.rows);
    }

    #[test]
    fn a_remote_row_is_labelled_with_its_link() {
        let mut r = Record::not_run(
            &crate::CellId::new(
                crate::ModelKind::MnistCnn,
                "remote",
                "remote:ws://127.0.0.1:3000",
                crate::Precision::F32,
                128,
            ),
            Status::Ok,
            "",
        );
        r.device_name = "flex cpu (EPYC) on gpu-box".into();
        r.remote = Some(crate::Remote {
            url: "ws://127.0.0.1:3000".into(),
            index: 0,
            backend: "flex".into(),
            device: "cpu".into(),
            device_name: "EPYC".into(),
            fingerprint: crate::Fingerprint::default(),
            rtt_seconds: 0.000_25,
            sync_seconds: 0.0012,
        });
        assert_eq!(
            device_cell(&r),
            "remote:ws://127.0.0.1:3000 (flex cpu (EPYC) on gpu-box) [remote: RTT 0.25 ms, sync \
             1.20 ms]"
        );
        // The server is one of the report's machines, once however many rows it served.
        if let Some(remote) = r.remote.as_mut() {
            remote.fingerprint.hostname = "gpu-box".into();
            remote.fingerprint.cpu_model = "EPYC".into();
        }
        let lines = machine_lines(&[r.clone(), r]);
        let servers: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("Remote server gpu-box at ws://127.0.0.1:3000: flex cpu"))
            .collect();
        assert_eq!(servers.len(), 1, "{lines:?}");
    }

    #[test]
    fn a_data_parallel_row_shows_its_scaling_against_one_device() {
        let mut one = super::tests_support::timed("flex", 10.0);
        one.training_loop = Some(crate::TrainingLoop::Learner);
        one.images_per_second = Some(100.0);
        let mut two = one.clone();
        two.device = "cpu,cpu".into();
        two.images_per_second = Some(150.0);
        two.data_parallel = Some(crate::DataParallel {
            devices: vec!["cpu".into(), "cpu".into()],
            strategy: "multi-device".into(),
            global_batch_size: 256,
        });
        let md = markdown(&[one, two.clone()], None);
        assert!(md.contains("### Data-parallel scaling"), "{md}");
        assert!(
            md.contains(
                "| cpu, cpu | multi-device | 256 | 150.0 | 100.0 (learner loop) | 1.50x | 75% |"
            ),
            "{md}"
        );
        let alone = markdown(&[two], None);
        assert!(alone.contains("no single-device row"), "{alone}");
    }

    #[test]
    fn a_busy_window_flags_its_row() {
        let mut quiet = timed("flex", 10.0);
        quiet.noise = Some(crate::Noise {
            other_cpu_share: Some(0.01),
            window_seconds: 20.0,
            window: "timed epochs".into(),
            ..Default::default()
        });
        let mut busy = timed("ndarray", 10.0);
        busy.noise = Some(crate::Noise {
            other_cpu_share: Some(0.48),
            window_seconds: 20.0,
            window: "timed epochs".into(),
            ..Default::default()
        });
        let md = markdown(&[quiet, busy], None);
        assert!(
            md.contains("⚠ busy machine (48% of CPU used by others)"),
            "{md}"
        );
        assert!(
            md.contains("ndarray/cpu/f32: measured on a busy machine"),
            "{md}"
        );
        assert!(!md.contains("flex/cpu/f32: measured on a busy"), "{md}");
    }

    #[test]
    fn json_round_trips() {
        let mut r = on("a", "flex", 3.0);
        r.reason = Some("a \"quoted\", comma\nand newline".into());
        let records = vec![r, on("b", "ndarray", 7.0)];
        let back: Vec<Record> = serde_json::from_str(&json(&records)).unwrap();
        assert_eq!(back, records);
    }

    #[test]
    fn csv_round_trips_through_its_parser() {
        let mut r = on("a", "flex", 3.0);
        r.reason = Some("a \"quoted\", comma\nand newline".into());
        r.achieved_gflops = Some(12.5);
        let records = vec![r.clone(), on("b", "ndarray", 7.0)];
        let rows = parse_csv(&csv(&records));
        assert_eq!(rows.len(), 3);
        let header = &rows[0];
        assert!(rows.iter().all(|row| row.len() == header.len()));
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        assert_eq!(rows[1][col("machine")], "a cpu, 2 cores · a");
        assert_eq!(rows[1][col("reason")], r.reason.unwrap());
        assert_eq!(
            rows[1][col("epoch_seconds_median")].parse::<f64>().unwrap(),
            3.0
        );
        assert_eq!(
            rows[1][col("achieved_gflops")].parse::<f64>().unwrap(),
            12.5
        );
        assert_eq!(rows[2][col("backend")], "ndarray");
    }
}
