//! Tables derived from several records: burn-train's Learner against Kiln's loop, and
//! data-parallel scaling; rendered the same way in Markdown and HTML.

use std::fmt::Write as _;

use crate::fields::{human_seconds, machine_key};
use kiln_contract::schema::{Record, Status};
use kiln_contract::stats::Stats;

/// The ok row of `all` that is `r`'s cell on the same machine trained through `training_loop`
/// on `device` (`None`: Kiln's loop).
fn same_cell_with<'a>(
    all: &'a [Record],
    r: &Record,
    device: &str,
    training_loop: Option<kiln_contract::TrainingLoop>,
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
        r.training_loop == Some(kiln_contract::TrainingLoop::Learner)
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
