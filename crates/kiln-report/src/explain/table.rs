//! The explain tables: time per op family, share of the step, ratio to PyTorch, and the ops
//! behind each backend's gap to PyTorch, as Markdown.

use kiln_contract::explain::{ExplainRecord, decomposition_note};
use kiln_contract::explain::{Phase, Site};
use kiln_contract::{ModelKind, Status};

/// The row of the op-family table an op belongs to (`conv2d · weight grad`).
pub fn family_row(site: &Site, phase: Phase) -> String {
    format!("{} · {phase}", site.op.family())
}

/// One row of the op × backend table.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyRow {
    pub label: String,
    /// Seconds per step in each record's column (`None`: the record has no such op).
    pub seconds: Vec<Option<f64>>,
}

/// An op's share of a backend's gap to the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct GapItem {
    pub label: String,
    /// This backend's seconds per step minus the reference's.
    pub extra_seconds: f64,
    /// `extra_seconds` as a share of the whole gap of the ops' sums.
    pub share_of_gap: f64,
}

/// The op × backend table of one model and batch.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainTable {
    pub model: ModelKind,
    pub batch: usize,
    pub columns: Vec<String>,
    pub rows: Vec<FamilyRow>,
    /// Each column's sum of ops per step.
    pub totals: Vec<f64>,
    /// Each column's measured step.
    pub steps: Vec<Option<f64>>,
    /// The column the ratios divide by (the PyTorch reference), if one ran.
    pub reference: Option<usize>,
    /// Each non-reference column's three largest op-level contributions to its gap.
    pub gaps: Vec<Vec<GapItem>>,
}

impl ExplainTable {
    /// The table of the ok records of one model and batch (in their order).
    pub fn new(records: &[&ExplainRecord]) -> Option<ExplainTable> {
        let first = records.first()?;
        let mut rows: Vec<FamilyRow> = Vec::new();
        for (column, record) in records.iter().enumerate() {
            for op in &record.ops {
                let Some(site) = record.sites.get(op.site) else {
                    continue;
                };
                let label = family_row(site, op.phase);
                let index = match rows.iter().position(|r| r.label == label) {
                    Some(i) => i,
                    None => {
                        rows.push(FamilyRow {
                            label,
                            seconds: vec![None; records.len()],
                        });
                        rows.len() - 1
                    }
                };
                let cell = &mut rows[index].seconds[column];
                *cell = Some(cell.unwrap_or(0.0) + record.per_step(op));
            }
        }
        let reference = records.iter().position(|r| r.backend == "pytorch");
        let gaps = records
            .iter()
            .enumerate()
            .map(|(i, r)| match reference {
                Some(j) if j != i => gap_items(r, records[j]),
                _ => Vec::new(),
            })
            .collect();
        Some(ExplainTable {
            model: first.model,
            batch: first.batch,
            columns: records.iter().map(|r| r.column()).collect(),
            rows,
            totals: records.iter().map(|r| r.ops_total()).collect(),
            steps: records
                .iter()
                .map(|r| r.step.map(|s| s.median_seconds))
                .collect(),
            reference,
            gaps,
        })
    }

    /// Column `column`'s sum of ops against its measured step (1.0 = all of it explained).
    pub fn explained(&self, column: usize) -> Option<f64> {
        let step = self.steps.get(column).copied().flatten()?;
        (step > 0.0).then(|| self.totals[column] / step)
    }

    /// The rows ordered by their largest time in any column, largest first.
    pub fn rows_by_weight(&self) -> Vec<&FamilyRow> {
        let mut rows: Vec<&FamilyRow> = self.rows.iter().collect();
        let weight = |r: &FamilyRow| r.seconds.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
        rows.sort_by(|a, b| weight(b).total_cmp(&weight(a)));
        rows
    }
}

/// The three ops (site and phase) that add most to `record`'s time over `reference`'s.
fn gap_items(record: &ExplainRecord, reference: &ExplainRecord) -> Vec<GapItem> {
    let find = |r: &ExplainRecord, site: &Site, phase: Phase| {
        r.ops
            .iter()
            .find(|o| o.phase == phase && r.sites.get(o.site) == Some(site))
            .map(|o| r.per_step(o))
    };
    let gap = record.ops_total() - reference.ops_total();
    let mut items: Vec<GapItem> = record
        .ops
        .iter()
        .filter_map(|op| {
            let site = record.sites.get(op.site)?;
            let theirs = find(reference, site, op.phase).unwrap_or(0.0);
            let extra = record.per_step(op) - theirs;
            Some(GapItem {
                label: record.op_label(op),
                extra_seconds: extra,
                share_of_gap: if gap.abs() > 0.0 { extra / gap } else { 0.0 },
            })
        })
        .collect();
    items.sort_by(|a, b| b.extra_seconds.total_cmp(&a.extra_seconds));
    items.truncate(3);
    items
}

/// Milliseconds with a precision that suits them.
pub fn ms(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// The Markdown of one table: op × backend (time per step, share, ratio to PyTorch), the sums
/// against the measured steps, and each backend's three largest contributions to its gap.
pub fn markdown(table: &ExplainTable) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### {} — one training step at batch {}, op by op\n",
        table.model, table.batch
    );
    let _ = write!(out, "| Op |");
    for c in &table.columns {
        let _ = write!(out, " {c} |");
    }
    let _ = write!(out, "\n|---|");
    for _ in &table.columns {
        let _ = write!(out, "---:|");
    }
    out.push('\n');
    for row in table.rows_by_weight() {
        let _ = write!(out, "| {} |", row.label);
        for (i, cell) in row.seconds.iter().enumerate() {
            let text = cell.map_or("—".to_string(), |s| cell_text(table, &row.seconds, i, s));
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    let _ = write!(out, "| **sum of ops** |");
    for t in &table.totals {
        let _ = write!(out, " **{}** |", ms(*t));
    }
    let _ = write!(out, "\n| measured step |");
    for s in &table.steps {
        let _ = write!(out, " {} |", s.map_or("not measured".into(), ms));
    }
    let _ = write!(out, "\n| explained |");
    let mut notes = Vec::new();
    for column in 0..table.columns.len() {
        let explained = table.explained(column);
        let outside = explained.and_then(|e| decomposition_note(&table.columns[column], e));
        let text = explained.map_or("—".into(), |e| {
            format!(
                "{:.0}%{}",
                100.0 * e,
                if outside.is_some() { " ⚠" } else { "" }
            )
        });
        notes.extend(outside);
        let _ = write!(out, " {text} |");
    }
    out.push_str("\n\n");
    for note in notes {
        let _ = writeln!(out, "⚠ {note}.\n");
    }
    out.push_str(&gaps_text(table));
    out
}

/// A cell: time per step, share of the column's sum, ratio to the reference's same op.
fn cell_text(table: &ExplainTable, seconds: &[Option<f64>], i: usize, s: f64) -> String {
    let share = if table.totals[i] > 0.0 {
        format!(" ({:.0}%)", 100.0 * s / table.totals[i])
    } else {
        String::new()
    };
    let ratio = match table.reference {
        Some(r) if r != i => match seconds[r] {
            Some(theirs) if theirs > 0.0 => format!(", {:.2}×", s / theirs),
            _ => String::new(),
        },
        _ => String::new(),
    };
    format!("{}{share}{ratio}", ms(s))
}

/// What the cells say, and where each backend's time over the reference goes (the three
/// ops that add most).
fn gaps_text(table: &ExplainTable) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if let Some(r) = table.reference {
        let reference = &table.columns[r];
        let _ = writeln!(
            out,
            "Each cell: time per step (share of the column's sum of ops, ratio to {reference}'s \
             same op). Where each backend's time over {reference} goes (the three ops that add \
             most):\n"
        );
        for (i, items) in table.gaps.iter().enumerate() {
            if i == r || items.is_empty() {
                continue;
            }
            let gap = table.totals[i] - table.totals[r];
            let head = if gap > 0.0 {
                format!(
                    "- **{}**: {} more per step than {reference} in the sum of ops",
                    table.columns[i],
                    ms(gap)
                )
            } else {
                format!(
                    "- **{}**: {} less per step than {reference} in the sum of ops; the ops \
                     where it is slower",
                    table.columns[i],
                    ms(-gap)
                )
            };
            let parts: Vec<String> = items
                .iter()
                .filter(|g| g.extra_seconds > 0.0)
                .map(|g| {
                    if gap > 0.0 {
                        format!(
                            "{} (+{}, {:.0}% of the gap)",
                            g.label,
                            ms(g.extra_seconds),
                            100.0 * g.share_of_gap
                        )
                    } else {
                        format!("{} (+{})", g.label, ms(g.extra_seconds))
                    }
                })
                .collect();
            let _ = writeln!(out, "{head}: {}.", parts.join("; "));
        }
        out.push('\n');
    } else {
        out.push_str(
            "Each cell: time per step (share of the column's sum of ops). No PyTorch reference \
             ran, so no ratios.\n\n",
        );
    }
    out
}

/// The (model, batch) pairs of `records`, in the order they first appear.
pub fn groups(records: &[ExplainRecord]) -> Vec<(ModelKind, usize)> {
    let mut groups = Vec::new();
    for r in records {
        if !groups.contains(&(r.model, r.batch)) {
            groups.push((r.model, r.batch));
        }
    }
    groups
}

/// The table of the ok records of one model and batch (none when no record is ok).
pub fn table_of(records: &[ExplainRecord], model: ModelKind, batch: usize) -> Option<ExplainTable> {
    let ok: Vec<&ExplainRecord> = records
        .iter()
        .filter(|r| r.model == model && r.batch == batch && r.status == Status::Ok)
        .collect();
    ExplainTable::new(&ok)
}

/// The whole Markdown report of a set of explain records: one table per model and batch, and
/// the records that did not run, with their reasons.
pub fn report(records: &[ExplainRecord]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (model, batch) in groups(records) {
        if let Some(table) = table_of(records, model, batch) {
            out.push_str(&markdown(&table));
        }
        for r in records
            .iter()
            .filter(|r| r.model == model && r.batch == batch && r.status != Status::Ok)
        {
            let _ = writeln!(
                out,
                "- {} {}: {} — {}",
                model,
                r.column(),
                r.status.as_str(),
                r.reason.as_deref().unwrap_or("no reason given")
            );
        }
    }
    if let Some(r) = records.iter().find(|r| r.fingerprint.is_some()) {
        let machine = r
            .fingerprint
            .as_ref()
            .map(kiln_contract::fingerprint::machine_label)
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "\nMachine: {machine}. Each op timed alone in Burn's profiling window (wall clock \
             between device syncs on CPU backends; PyTorch between syncs), after {} warm-up \
             run(s), median of up to {} runs; see docs/explain.md for what isolated timings \
             leave out.",
            r.warmup, r.repeats
        );
    }
    out
}
