//! One record's fields as text: its row label and machine, its epoch time with the interval for
//! the next run, memory, efficiency and accuracy, and the warnings a reader should see first.
//! Every table (Markdown, HTML, terminal, CSV) and chart writes a record's values through these.

use std::fmt::Write as _;

use crate::units::gflops_text;
pub(crate) use crate::units::thousands;
pub use crate::units::{human_bytes, human_bytes_short, human_seconds};
use kiln_contract::schema::{DataKind, Method, Record, Status};
use kiln_contract::stats::Stats;

/// when it is not Kiln's (`flex/cpu/f32 (learner loop)`).
pub fn row_label(r: &Record) -> String {
    let label = format!("{}/{}/{}", r.backend, r.device, r.precision);
    match r.training_loop {
        Some(l) => format!("{label} ({l} loop)"),
        None => label,
    }
}

/// The machine a record comes from, named by its hardware (see
/// [`kiln_contract::fingerprint::machine_label`]).
pub fn machine(r: &Record) -> String {
    kiln_contract::fingerprint::machine_label(&r.fingerprint)
}

/// The key of the machine a record comes from: its hardware, the host name only as a
/// tie-breaker (see [`kiln_contract::fingerprint::machine_key`]).
pub fn machine_key(r: &Record) -> String {
    kiln_contract::fingerprint::machine_key(&r.fingerprint)
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
    let protocol = kiln_contract::Profile::Full.batch_size();
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
                && match (run_of(p), run_of(r)) {
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
        .is_some_and(kiln_contract::DeviceKind::is_cpu_emulated)
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
        Method::Unjudged => format!(
            "UNJUDGED: {} steps, too few for the steady-state rule; the mean of the steps after \
             the first{scaled}",
            o.steps
        ),
        Method::None => "not timed".into(),
    };
    let how = match &r.replay {
        Some(p) => format!(
            "REPLAY of {} ({}, scale {}): no training, steps timed as the profile says; {how}",
            p.device.as_deref().unwrap_or("a device"),
            p.profile,
            p.scale
        ),
        None => how,
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

/// True when a record's time is a projection from too few chunks to trust, or from a run too
/// short to judge steady.
pub fn low_confidence(r: &Record) -> bool {
    (r.obtained.method == Method::Projected && r.obtained.chunks < kiln_contract::MIN_CHUNKS)
        || r.obtained.method == Method::Unjudged
}

/// Why a row has no time, as the tables show it after its status: a reason that opens with
/// the status ("not steady: ...") does not say it twice.
pub fn reason_text(r: &Record) -> String {
    let reason = r.reason.clone().unwrap_or_default();
    let said = format!("{}: ", r.status.as_str());
    reason
        .strip_prefix(&said)
        .map(str::to_string)
        .unwrap_or(reason)
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
    // The machine's drift over the run, where it is wider than the runs' own spread, sets it.
    let drift = |s: &Stats| {
        let own = Stats {
            floor: None,
            ..s.clone()
        }
        .prediction_half_width();
        match (s.floor, own, s.prediction_half_width()) {
            (Some(f), Some(own), Some(half)) if half > own => {
                format!(", the machine's drift {:.1}%", f * 100.0)
            }
            _ => String::new(),
        }
    };
    let next = |s: &Stats| match s.prediction_interval() {
        Some((lo, hi)) => format!(
            "next run {}–{}{}",
            human_seconds(lo.max(0.0)),
            human_seconds(hi),
            drift(s)
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
pub(crate) fn chunks_text(n: usize) -> String {
    match n {
        0 => "chunks not recorded".into(),
        1 => "1 chunk".into(),
        n => format!("{n} chunks"),
    }
}

/// Other processes' use of the machine during a cell, in words.
pub fn noise_text(n: &kiln_contract::Noise) -> String {
    let mut parts = Vec::new();
    match (n.other_cpu_share, n.window_ticks) {
        _ if n.quiet_within_resolution() => parts.push(format!(
            "quiet (others' CPU use below the 1-tick resolution of a {}-tick window)",
            n.window_ticks.unwrap_or(0)
        )),
        // Records from before shares were held at 0 can read below it: under the resolution.
        (Some(s), _) if s <= 0.0 => {
            parts.push("quiet (others' CPU use under the CPU counters' resolution)".into())
        }
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
            format!(
                "{a:.1} ({:.0}% of {})",
                a / d.gflops * 100.0,
                gflops_text(d.gflops)
            )
        }
        (Some(a), None, Some(p)) if p.gflops > 0.0 => format!(
            "{a:.1} ({:.0}% of its own GEMM {})",
            a / p.gflops * 100.0,
            gflops_text(p.gflops)
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

/// The run a record belongs to (its run directory's name), where it says.
pub fn run_of(r: &Record) -> Option<&str> {
    r.repeat.as_ref().map(|p| p.run.as_str())
}

/// Records for tests of the renderers and of what derives rows from records.
#[cfg(test)]
pub(crate) mod tests_support {
    use kiln_contract::schema::{CellId, DataKind, Method, Obtained, Record, Status};
    use kiln_contract::stats::Stats;

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
