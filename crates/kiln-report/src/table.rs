//! The report's tables, computed once from records: one table per model, each cell with its
//! text and, where it is a number, the value to sort by. Markdown, HTML and the terminal are
//! renderers of these; none computes a figure of its own.

use crate::fields::{
    accuracy_cell, device_cell, efficiency_cell, epoch_cell, human_seconds, machine, machine_key,
    memory_cell, obtained_text, pick_baseline, pytorch_reference, reason_text, row_label, row_name,
    run_of, thousands,
};
use crate::warnings::warnings;
use kiln_contract::schema::{Record, Status};
use kiln_contract::stats::ratio_with_uncertainty;

/// What a column shows (renderers pick columns by kind, e.g. the terminal's compact table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Machine,
    /// The run a row comes from, when the table merges several runs.
    Run,
    Device,
    Precision,
    /// Samples per step, when the table holds several batch sizes (`--batch 32,128,512`).
    Batch,
    EpochTime,
    SpeedUp,
    VsPytorch,
    WarmUp,
    /// Training time to `--target-accuracy`.
    TimeToAccuracy,
    Images,
    Gflops,
    Memory,
    Accuracy,
    Obtained,
}

/// One entry of the table (a row's value in one column): its text, and the number it sorts by
/// when it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub text: String,
    pub sort: Option<f64>,
}

impl Entry {
    fn text(text: impl Into<String>) -> Entry {
        Entry {
            text: text.into(),
            sort: None,
        }
    }

    fn number(text: impl Into<String>, value: Option<f64>) -> Entry {
        Entry {
            text: text.into(),
            sort: value,
        }
    }
}

/// One row: a record's cell of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub status: Status,
    /// `backend/device/precision`, with the machine when the table holds several.
    pub label: String,
    /// [`cell_key`]: the cell, whatever the machine.
    pub cell: String,
    /// For a row that is not ok, why (shown in the epoch-time column after its status).
    pub reason: Option<String>,
    pub cells: Vec<Entry>,
}

/// One model's table.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTable {
    pub model: String,
    pub columns: Vec<(Column, String)>,
    pub rows: Vec<Row>,
    /// Warnings on individual rows (`label: warning`).
    pub notes: Vec<String>,
}

impl ModelTable {
    /// The index of column `c`, if the table has it.
    pub fn index(&self, c: Column) -> Option<usize> {
        self.columns.iter().position(|(k, _)| *k == c)
    }
}

/// Machines named by the records, by label, sorted: one per machine key (hardware, then host
/// name); records of cells that never ran name none.
pub fn machines(all: &[Record]) -> Vec<String> {
    let mut keyed: Vec<(String, String)> = all
        .iter()
        .filter(|r| !machine(r).is_empty())
        .map(|r| (machine_key(r), machine(r)))
        .collect();
    keyed.sort();
    keyed.dedup();
    let mut labels: Vec<String> = keyed.into_iter().map(|(_, label)| label).collect();
    labels.sort();
    labels
}

/// Records grouped by model, in the order models first appear.
pub fn by_model(records: &[Record]) -> Vec<(String, Vec<&Record>)> {
    let mut groups: Vec<(String, Vec<&Record>)> = Vec::new();
    for r in records {
        match groups.iter_mut().find(|(m, _)| *m == r.model) {
            Some((_, rows)) => rows.push(r),
            None => groups.push((r.model.clone(), vec![r])),
        }
    }
    groups
}

/// The tables of the timed records (loop-overhead records have their own table), one per
/// model; speed-ups are relative to `baseline` (see [`pick_baseline`]).
pub fn model_tables(all: &[Record], baseline: Option<&str>) -> Vec<ModelTable> {
    let timed: Vec<Record> = all
        .iter()
        .filter(|r| r.loop_overhead.is_none())
        .cloned()
        .collect();
    let records = crate::repeats::combine(&timed);
    let several = machines(all).len() > 1;
    let mut runs: Vec<&str> = records.iter().filter_map(run_of).collect();
    runs.sort();
    runs.dedup();
    let several_runs = runs.len() > 1;
    let records = &records;
    by_model(records)
        .into_iter()
        .map(|(model, rows)| table(model, &rows, baseline, several, several_runs))
        .collect()
}

/// True when `rows` hold more than one batch size (a record of a cell that never ran, written
/// before batch size was a dimension, says 0 and does not count).
pub fn several_batch_sizes(rows: &[&Record]) -> bool {
    let mut batches: Vec<usize> = rows
        .iter()
        .map(|r| r.batch_size)
        .filter(|&b| b > 0)
        .collect();
    batches.sort_unstable();
    batches.dedup();
    batches.len() > 1
}

/// A row's name in tables, notes and charts: [`row_name`], and with several batch sizes its
/// batch (`flex/cpu/f32 @ batch 512`).
pub fn row_title(r: &Record, several_machines: bool, several_batches: bool) -> String {
    let name = row_name(r, several_machines);
    if several_batches {
        format!("{name} @ batch {}", r.batch_size)
    } else {
        name
    }
}

/// A row's cell, whatever the machine: `model/backend/device/precision@batch` (what the HTML
/// report links a row's log by).
pub fn cell_key(r: &Record) -> String {
    format!("{}/{}@{}", r.model, row_label(r), r.batch_size)
}

fn table(
    model: String,
    rows: &[&Record],
    baseline: Option<&str>,
    several: bool,
    several_runs: bool,
) -> ModelTable {
    let base = pick_baseline(rows, baseline);
    let several_batches = several_batch_sizes(rows);
    let label = |r: &Record| row_title(r, several, several_batches);
    let base_label = base.map(&label).unwrap_or_else(|| "baseline".into());
    let columns = columns(rows, &base_label, several, several_runs);
    let out_rows = rows
        .iter()
        .map(|r| {
            let ok = r.status == Status::Ok && r.epoch_seconds.is_some();
            let cells = columns
                .iter()
                .map(|(c, _)| cell(*c, r, rows, base, ok))
                .collect();
            Row {
                status: r.status,
                label: label(r),
                cell: cell_key(r),
                reason: (!ok).then(|| reason_text(r)),
                cells,
            }
        })
        .collect();
    let notes = rows
        .iter()
        .flat_map(|r| {
            warnings(r)
                .into_iter()
                .map(move |w| format!("{}: {w}", label(r)))
        })
        .collect();
    ModelTable {
        model,
        columns,
        rows: out_rows,
        notes,
    }
}

/// A table's columns and titles (machine, run, PyTorch ratio, time to accuracy where apt).
fn columns(
    rows: &[&Record],
    base_label: &str,
    several: bool,
    several_runs: bool,
) -> Vec<(Column, String)> {
    let standard = rows
        .iter()
        .map(|r| r.obtained.standard_epoch_samples)
        .find(|&n| n > 0)
        .unwrap_or(0);
    let with_torch = rows.iter().any(|r| pytorch_reference(rows, r).is_some());
    let several_batches = several_batch_sizes(rows);
    let mut columns = Vec::new();
    if several {
        columns.push((Column::Machine, "Machine".to_string()));
    }
    if several_runs {
        columns.push((Column::Run, "Run".to_string()));
    }
    columns.push((Column::Device, "Backend / device".into()));
    columns.push((Column::Precision, "Precision".into()));
    if several_batches {
        columns.push((Column::Batch, "Batch".into()));
    }
    columns.push((
        Column::EpochTime,
        if standard > 0 {
            format!(
                "Epoch time ({}-sample epoch; median over runs, 95% interval for the next run)",
                thousands(standard)
            )
        } else {
            // No row ran: there is no epoch to name.
            "Epoch time (median over runs, 95% interval for the next run)".into()
        },
    ));
    columns.push((Column::SpeedUp, format!("Speed-up vs {base_label}")));
    if with_torch {
        columns.push((
            Column::VsPytorch,
            "Time ÷ PyTorch's (same device and precision)".into(),
        ));
    }
    if let Some(target) = rows
        .iter()
        .find_map(|r| r.time_to_accuracy.as_ref().map(|t| t.target))
    {
        columns.push((
            Column::TimeToAccuracy,
            format!(
                "Time to {:.0}% test accuracy (training, warm-up included, unscaled)",
                target * 100.0
            ),
        ));
    }
    columns.extend(
        [
            (
                Column::WarmUp,
                "Warm-up to steady state (compile, autotune; apart from epoch time)",
            ),
            (Column::Images, "Images/s"),
            (Column::Gflops, "GFLOP/s (% of device peak)"),
            (Column::Memory, "Training memory (total RSS)"),
            (Column::Accuracy, "Test accuracy"),
            (Column::Obtained, "Obtained"),
        ]
        .map(|(c, title)| (c, title.to_string())),
    );
    columns
}

fn cell(c: Column, r: &Record, rows: &[&Record], base: Option<&Record>, ok: bool) -> Entry {
    let none = || Entry::text("–");
    match c {
        Column::Machine => Entry::text(machine(r)),
        Column::Run => Entry::text(run_of(r).unwrap_or("–")),
        Column::Device => Entry::text(format!("{} / {}", r.backend, device_cell(r))),
        Column::Precision => Entry::text(r.precision.clone()),
        Column::Batch if r.batch_size == 0 => none(),
        Column::Batch => Entry::number(r.batch_size.to_string(), Some(r.batch_size as f64)),
        Column::EpochTime => match (&r.epoch_seconds, ok) {
            (Some(e), true) => Entry::number(epoch_cell(r), Some(e.median)),
            _ => Entry::text(r.reason.clone().unwrap_or_default()),
        },
        Column::SpeedUp => {
            let (Some(_), true) = (&r.epoch_seconds, ok) else {
                return none();
            };
            match base {
                Some(b) => ratio_cell(b, r),
                None => none(),
            }
        }
        Column::VsPytorch => match (pytorch_reference(rows, r), &r.epoch_seconds) {
            (Some(p), Some(_)) if r.backend != "pytorch" => ratio_cell(r, p),
            (Some(_), Some(_)) => Entry::number("1 (reference)", Some(1.0)),
            _ => none(),
        },
        Column::TimeToAccuracy => match &r.time_to_accuracy {
            Some(t) => match (t.seconds, t.not_reached()) {
                (Some(s), _) => Entry::number(
                    format!(
                        "{}{}",
                        human_seconds(s),
                        t.epoch.map(|e| format!(" (epoch {e})")).unwrap_or_default()
                    ),
                    Some(s),
                ),
                (None, Some(why)) => Entry::number(why, Some(f64::MAX)),
                (None, None) => none(),
            },
            None => none(),
        },
        Column::WarmUp => warmup_cell(r),
        Column::Images if ok => r
            .images_per_second
            .map(|i| Entry::number(format!("{i:.0}"), Some(i)))
            .unwrap_or_else(none),
        Column::Gflops if ok => Entry::number(efficiency_cell(r), r.achieved_gflops),
        Column::Images | Column::Gflops => none(),
        Column::Memory => Entry::number(
            memory_cell(r),
            r.training_bytes().or(r.peak_memory_bytes).map(|b| b as f64),
        ),
        Column::Accuracy => Entry::number(accuracy_cell(r), r.test_accuracy),
        Column::Obtained if r.status == Status::Skipped => Entry::text("not run"),
        Column::Obtained => Entry::text(obtained_text(r)),
    }
}

/// The warm-up to steady state: its time and steps, and the late compiles after it (`not
/// steady after ...` when the cap ran out); a record older than the rule shows its first
/// step.
pub fn warmup_cell(r: &Record) -> Entry {
    match (&r.warmup, r.first_step_seconds) {
        (Some(w), _) if w.steady && w.late_compiles > 0 => Entry::number(
            format!(
                "{} ({} steps) + {} in {} late compile{}",
                human_seconds(w.seconds),
                w.steps,
                human_seconds(w.late_compile_seconds),
                w.late_compiles,
                if w.late_compiles == 1 { "" } else { "s" }
            ),
            Some(w.total_seconds()),
        ),
        (Some(w), _) if w.steady => Entry::number(
            format!("{} ({} steps)", human_seconds(w.seconds), w.steps),
            Some(w.seconds),
        ),
        (Some(w), _) if kiln_contract::observe::too_short_to_judge(w) => Entry::number(
            format!(
                "too short to judge: {} ({} steps)",
                human_seconds(w.seconds),
                w.steps
            ),
            Some(f64::MAX),
        ),
        (Some(w), _) => Entry::number(
            format!(
                "not steady after {} ({} steps)",
                human_seconds(w.seconds),
                w.steps
            ),
            Some(f64::MAX),
        ),
        (None, Some(s)) => Entry::number(format!("first step {}", human_seconds(s)), Some(s)),
        (None, None) => Entry::text("–"),
    }
}

/// `a`'s epoch time over `b`'s, with an uncertainty when both rows have a spread between
/// runs (the spread within one run says nothing about the next run).
fn ratio_cell(a: &Record, b: &Record) -> Entry {
    match epoch_ratio(a, b) {
        Some((ratio, text)) => Entry::number(text, Some(ratio)),
        None => Entry::text("–"),
    }
}

/// `a`'s epoch time over `b`'s and its text: `1.12× ± 0.13` when both rows have a spread
/// between runs, else `1.12× (single run)`.
pub(crate) fn epoch_ratio(a: &Record, b: &Record) -> Option<(f64, String)> {
    let (Some(ea), Some(eb)) = (&a.epoch_seconds, &b.epoch_seconds) else {
        return None;
    };
    let between = |r: &Record, e: &kiln_contract::Stats| r.between_runs.is_some() && e.n > 1;
    Some(if between(a, ea) && between(b, eb) {
        let (ratio, err) = ratio_with_uncertainty(ea, eb);
        (ratio, format!("{ratio:.2}× ± {err:.2}"))
    } else {
        let ratio = ea.median / eb.median;
        (ratio, format!("{ratio:.2}× (single run)"))
    })
}
