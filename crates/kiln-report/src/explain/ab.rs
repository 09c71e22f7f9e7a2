//! `explain --burn A --burn B`: each Burn's op-by-op table side by side, and the operations
//! whose time moved beyond their noise. Each Burn ran `explain` several times, alternating; an
//! op's runs are its cost per step in each of them (the mean over all its timed calls, times
//! the layers that run it: a change that slows one call in four moves the mean, not the
//! median), compared paired over the passes (B's pass k against A's pass k), else by Welch's
//! t-test. An op is named as moved when its p is under 5% split over the ops compared
//! (Bonferroni's: the chance of naming any op that did not move stays under 5%) and its change
//! is a share of A's measured step that counts: at least [`MIN_STEP_SHARE`], and at least a
//! quarter of the step's own change where the step moved.

use std::fmt::Write as _;

use crate::ab::{Compared, P_VALUE, compare_pairs, compare_runs};
use kiln_contract::explain::ExplainRecord;
use kiln_contract::{ModelKind, Status};

/// The least change, as a share of A's measured step, for an op to be named as moved: a
/// microsecond op that doubles explains nothing of the step.
pub const MIN_STEP_SHARE: f64 = 0.005;

/// The share of the step's own change an op must account for to be named, where the step moved.
pub const SHARE_OF_MOVE: f64 = 0.25;

/// One op (or the whole step), A's runs against B's.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRow {
    /// `conv2d 1→32 k3 at 28×28 · weight grad`, or `measured step`.
    pub op: String,
    /// Seconds per step in each run.
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub compared: Compared,
    /// B's mean minus A's, as a share of A's measured step.
    pub of_step: Option<f64>,
    /// Each side's median per step over its runs of the op's median call (beside `a` and `b`,
    /// the cost over all calls): where the two part, some calls cost more than others.
    pub medians: (Option<f64>, Option<f64>),
    /// Significant at the level of this comparison (the 5% split over the ops), whatever its
    /// size.
    pub significant: bool,
}

/// What an op's change must pass to be named: the test's level, and the least share of A's
/// step it must be.
#[derive(Clone, Copy, Debug)]
struct Threshold {
    level: f64,
    share: f64,
}

impl OpRow {
    fn of(op: String, a: Vec<f64>, b: Vec<f64>, step_a: Option<f64>, bar: Threshold) -> OpRow {
        // The passes alternated: paired where both sides have every pass, so drift between
        // passes cancels; Welch's over the runs where they do not. No floor on the op's own
        // change: what counts is its share of the step (`bar.share`).
        let mut compared = if a.len() == b.len() && a.len() > 1 {
            let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
            compare_pairs(&pairs, 0.0, false)
        } else {
            compare_runs(&a, &b, 0.0, false, 0.0)
        };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let of_step = step_a
            .filter(|s| *s > 0.0)
            .map(|s| (mean(&b) - mean(&a)) / s);
        let significant = compared.p.is_some_and(|p| p < bar.level);
        let material = of_step.is_none_or(|s| s.abs() >= bar.share);
        if !(significant && material) {
            compared.moved = None;
        }
        OpRow {
            op,
            a,
            b,
            compared,
            of_step,
            medians: (None, None),
            significant,
        }
    }

    /// `B slower`, `B faster` or `no difference beyond the noise` (`no verdict` for single
    /// runs); a change beyond the noise too small a share of the step says so.
    pub fn verdict(&self) -> &'static str {
        match (self.compared.moved, self.compared.p) {
            (Some(true), _) => "B slower",
            (Some(false), _) => "B faster",
            (None, None) => "no verdict: a single run each",
            (None, Some(_)) if self.significant => "changed, too small a share of the step",
            (None, Some(_)) => "no difference beyond the noise",
        }
    }
}

/// One model on one backend column, A against B.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnAb {
    pub model: ModelKind,
    pub column: String,
    pub batch: usize,
    pub step: Option<OpRow>,
    pub ops: Vec<OpRow>,
}

impl ColumnAb {
    /// The ops that moved beyond their noise.
    pub fn moved(&self) -> impl Iterator<Item = &OpRow> {
        self.ops.iter().filter(|o| o.compared.moved.is_some())
    }

    /// The ops not yet decided: under 5% alone but not at the split level, with a change that
    /// is a share of the step that counts. More passes tell whether they moved.
    pub fn pending(&self) -> impl Iterator<Item = &OpRow> {
        self.ops.iter().filter(|o| {
            o.compared.moved.is_none()
                && o.compared.p.is_some_and(|p| p < P_VALUE)
                && o.of_step.is_some_and(|s| s.abs() >= MIN_STEP_SHARE)
        })
    }

    /// Where the measured step moved: the share of its change that the moved ops' changes add
    /// up to (0 when none moved); `None` when the step did not move.
    pub fn accounted(&self) -> Option<f64> {
        let step = self.step.as_ref().filter(|s| s.compared.moved.is_some())?;
        let change = step.of_step.filter(|c| *c != 0.0)?;
        Some(self.moved().filter_map(|o| o.of_step).sum::<f64>() / change)
    }
}

type Key = (ModelKind, String, usize);

fn key(r: &ExplainRecord) -> Key {
    (r.model, r.column(), r.batch)
}

/// Every model and column both sides timed, in A's order, op by op.
pub fn compare(a: &[ExplainRecord], b: &[ExplainRecord]) -> Vec<ColumnAb> {
    let ok = |r: &&ExplainRecord| r.status == Status::Ok && !r.ops.is_empty();
    let mut keys: Vec<Key> = Vec::new();
    for r in a.iter().filter(ok) {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    let mut out = Vec::new();
    for k in keys {
        let ra: Vec<&ExplainRecord> = a.iter().filter(ok).filter(|r| key(r) == k).collect();
        let rb: Vec<&ExplainRecord> = b.iter().filter(ok).filter(|r| key(r) == k).collect();
        if rb.is_empty() {
            continue;
        }
        let steps = |rs: &[&ExplainRecord]| -> Vec<f64> {
            rs.iter()
                .filter_map(|r| r.step.map(|s| s.mean_seconds.unwrap_or(s.median_seconds)))
                .collect()
        };
        let (step_a, step_b) = (steps(&ra), steps(&rb));
        let step_mean_a =
            (!step_a.is_empty()).then(|| step_a.iter().sum::<f64>() / step_a.len() as f64);
        let labels: Vec<String> = ra[0].ops.iter().map(|o| ra[0].op_label(o)).collect();
        let step_bar = Threshold {
            level: P_VALUE,
            share: 0.0,
        };
        let step = (!step_a.is_empty() && !step_b.is_empty()).then(|| {
            OpRow::of(
                "measured step".into(),
                step_a,
                step_b,
                step_mean_a,
                step_bar,
            )
        });
        // Where the step moved, an op must account for a quarter of that move to be named.
        let moved_share = step
            .as_ref()
            .filter(|s| s.compared.moved.is_some())
            .and_then(|s| s.of_step)
            .map_or(0.0, |s| SHARE_OF_MOVE * s.abs());
        let bar = Threshold {
            level: P_VALUE / labels.len().max(1) as f64,
            share: MIN_STEP_SHARE.max(moved_share),
        };
        // An op's cost per step in each run (mean, and median), by its label.
        let per_op = |rs: &[&ExplainRecord], label: &str, mean: bool| -> Vec<f64> {
            rs.iter()
                .filter_map(|r| {
                    let o = r.ops.iter().find(|o| r.op_label(o) == label)?;
                    Some(if mean {
                        r.per_step_mean(o)
                    } else {
                        r.per_step(o)
                    })
                })
                .collect()
        };
        let ops = labels
            .into_iter()
            .filter_map(|label| {
                let (va, vb) = (per_op(&ra, &label, true), per_op(&rb, &label, true));
                let medians = (
                    kiln_contract::stats::median(&per_op(&ra, &label, false)),
                    kiln_contract::stats::median(&per_op(&rb, &label, false)),
                );
                (!va.is_empty() && !vb.is_empty()).then(|| OpRow {
                    medians,
                    ..OpRow::of(label, va, vb, step_mean_a, bar)
                })
            })
            .collect();
        out.push(ColumnAb {
            model: k.0,
            column: k.1,
            batch: k.2,
            step,
            ops,
        });
    }
    out
}

fn ms(v: &[f64]) -> String {
    kiln_contract::stats::median(v).map_or("–".into(), super::table::ms)
}

/// A side's cost per step with its median call's beside it where there is one:
/// `12.40 ms (median 11.90 ms)`.
fn cost(v: &[f64], median: Option<f64>) -> String {
    match median {
        Some(m) => format!("{} (median {})", ms(v), super::table::ms(m)),
        None => ms(v),
    }
}

fn row_text(o: &OpRow) -> String {
    let change = o.compared.change.map_or("–".into(), |(r, lo, hi)| {
        format!("{r:.2}× ({lo:.2}–{hi:.2})")
    });
    format!(
        "| {} | {} | {} | {} | {} | {} | {} |",
        o.op,
        cost(&o.a, o.medians.0),
        cost(&o.b, o.medians.1),
        change,
        o.compared.p.map_or("–".into(), |p| format!("{p:.3}")),
        o.of_step
            .map_or("–".into(), |s| format!("{:+.1}%", 100.0 * s)),
        o.verdict()
    )
}

/// The side-by-side tables as Markdown, the moved ops named first in each.
pub fn markdown(columns: &[ColumnAb], a_label: &str, b_label: &str) -> String {
    let mut out = format!(
        "## Op by op, Burn A against Burn B\n\nA = {a_label}, B = {b_label}. Times are per \
         training step (an op's mean call times the layers that run it, its median call's \
         beside it), the median of each Burn's runs.\n"
    );
    for c in columns {
        let _ = write!(
            out,
            "\n### {} on {} (batch {})\n\n",
            c.model, c.column, c.batch
        );
        if let Some(s) = &c.step {
            let _ = writeln!(
                out,
                "The measured step: A {}, B {}: {}.\n",
                ms(&s.a),
                ms(&s.b),
                s.verdict()
            );
        }
        let moved: Vec<&OpRow> = c.moved().collect();
        let passes = c.step.as_ref().map_or(0, |s| s.a.len().min(s.b.len()));
        match c.accounted() {
            Some(share) if moved.is_empty() => {
                let _ = writeln!(
                    out,
                    "The step moved, and no operation accounts for it after {passes} passes a \
                     side: what moved lies between the ops, or is spread thinner than each \
                     op's noise ({:.0}% of the step's change named).\n",
                    100.0 * share
                );
            }
            Some(share) => {
                let _ = writeln!(
                    out,
                    "The ops named account for {:.0}% of the step's change (after {passes} \
                     passes a side).\n",
                    100.0 * share
                );
            }
            None => {}
        }
        let pending: Vec<&str> = c.pending().map(|o| o.op.as_str()).collect();
        if !pending.is_empty() {
            let _ = writeln!(
                out,
                "Undecided after {passes} passes a side (significant alone, not across the \
                 ops): {}.\n",
                pending.join("; ")
            );
        }
        if moved.is_empty() {
            out.push_str("No operation moved beyond its noise.\n\n");
        } else {
            out.push_str("Moved beyond the noise:\n");
            for o in moved {
                let ratio = o.compared.change.map_or(1.0, |c| c.0);
                let _ = writeln!(
                    out,
                    "- **{}**: {} ({ratio:.2}×), {} of A's step",
                    o.op,
                    o.verdict(),
                    o.of_step
                        .map_or("–".into(), |s| format!("{:+.1}%", 100.0 * s)),
                );
            }
            out.push('\n');
        }
        out.push_str(
            "| Op | A per step | B per step | B ÷ A (95% interval) | p | Change, share of A's \
             step | Verdict |\n|---|---|---|---|---|---|---|\n",
        );
        for o in c.step.iter().chain(&c.ops) {
            out.push_str(&row_text(o));
            out.push('\n');
        }
    }
    let _ = write!(
        out,
        "\nThe runs alternated (A B, B A, ...). An op's cost per step is the mean of its timed \
         calls times the layers that run it (its median call's beside it). An op moved when \
         the paired t-test over its passes (B's pass k against A's pass k; Welch's where a side \
         lacks a pass) gives p under {} split over the ops compared (Bonferroni's) and its \
         change is at least {:.1}% of A's measured step, and at least {:.0}% of the step's own \
         change where the step moved.\n",
        P_VALUE,
        100.0 * MIN_STEP_SHARE,
        100.0 * SHARE_OF_MOVE
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::{ExplainRequest, OpTiming, Phase, Timing};
    use kiln_contract::Precision;

    fn timing(s: f64) -> Timing {
        Timing {
            median_seconds: s,
            mean_seconds: None,
            min_seconds: s,
            max_seconds: s,
            runs: 7,
        }
    }

    /// A flex record whose first op takes `first` and the rest 1 ms each.
    fn run(first: f64, step: f64) -> ExplainRecord {
        let request = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::F32, 64);
        let mut r = ExplainRecord::start(&request, "test", 2);
        r.status = Status::Ok;
        r.ops = (0..3)
            .map(|site| OpTiming {
                site,
                phase: Phase::Forward,
                timing: timing(if site == 0 { first } else { 0.001 }),
            })
            .collect();
        r.step = Some(timing(step));
        r
    }

    #[test]
    fn the_op_that_slowed_is_named_with_its_share_of_the_step() {
        let a = vec![run(0.010, 0.050), run(0.0101, 0.0505), run(0.0099, 0.0495)];
        let b = vec![run(0.020, 0.060), run(0.0202, 0.0605), run(0.0198, 0.0598)];
        let cols = compare(&a, &b);
        assert_eq!(cols.len(), 1);
        let moved: Vec<&OpRow> = cols[0].moved().collect();
        assert_eq!(moved.len(), 1, "{cols:?}");
        assert_eq!(moved[0].verdict(), "B slower");
        // 10 ms more of a 50 ms step.
        assert!((moved[0].of_step.unwrap() - 0.2).abs() < 0.01, "{moved:?}");
        assert_eq!(cols[0].step.as_ref().unwrap().verdict(), "B slower");
        let md = markdown(&cols, "0.22.1", "path:burn");
        assert!(md.contains("Moved beyond the noise:\n- **"), "{md}");
        assert!(md.contains("B slower (2.00×), +20.0% of A's step"), "{md}");
        // The step moved by as much as the op: all of it is accounted for.
        let share = cols[0].accounted().unwrap();
        assert!((share - 1.0).abs() < 0.05, "{share}");
        assert!(
            md.contains("The ops named account for 99% of the step"),
            "{md}"
        );
    }

    #[test]
    fn a_tiny_op_that_changed_is_not_named_as_moved() {
        // The third op: 1 ms against 1.5 ms of a 500 ms step (0.1% of it).
        let tiny = |first: f64, third: f64| {
            let mut r = run(first, 0.5);
            r.ops[2].timing.median_seconds = third;
            r
        };
        let a = vec![
            tiny(0.01, 0.0010),
            tiny(0.0101, 0.00101),
            tiny(0.0099, 0.00099),
        ];
        let b = vec![
            tiny(0.01, 0.0015),
            tiny(0.0101, 0.00151),
            tiny(0.0099, 0.00149),
        ];
        let cols = compare(&a, &b);
        assert_eq!(cols[0].moved().count(), 0, "{cols:?}");
        assert_eq!(
            cols[0].ops[2].verdict(),
            "changed, too small a share of the step"
        );
    }

    #[test]
    fn a_slowdown_of_one_call_in_four_is_named_by_its_mean() {
        // The first op's median call is the same on both sides; on B one call in four takes
        // twice as long, so its mean is 25% higher: 2.5 ms more of a 50 ms step.
        let with_mean = |median: f64, mean: f64, step: f64| {
            let mut r = run(median, step);
            r.ops[0].timing.mean_seconds = Some(mean);
            for o in &mut r.ops[1..] {
                o.timing.mean_seconds = Some(o.timing.median_seconds);
            }
            r
        };
        let a = vec![
            with_mean(0.010, 0.0100, 0.050),
            with_mean(0.010, 0.0101, 0.0505),
            with_mean(0.010, 0.0099, 0.0495),
        ];
        let b = vec![
            with_mean(0.010, 0.0125, 0.0525),
            with_mean(0.010, 0.0126, 0.0531),
            with_mean(0.010, 0.0124, 0.0519),
        ];
        let cols = compare(&a, &b);
        let moved: Vec<&OpRow> = cols[0].moved().collect();
        assert_eq!(moved.len(), 1, "{cols:?}");
        assert_eq!(moved[0].op, cols[0].ops[0].op);
        assert_eq!(moved[0].medians, (Some(0.010), Some(0.010)));
        let md = markdown(&cols, "A", "B");
        assert!(md.contains("12.5 ms (median 10.0 ms)"), "{md}");
    }

    #[test]
    fn the_same_burn_twice_moves_no_op() {
        let a = vec![run(0.010, 0.050), run(0.0104, 0.051), run(0.0097, 0.049)];
        let b = vec![
            run(0.0102, 0.0502),
            run(0.0098, 0.0497),
            run(0.0101, 0.0504),
        ];
        let cols = compare(&a, &b);
        assert_eq!(cols[0].moved().count(), 0, "{cols:?}");
        assert!(markdown(&cols, "A", "B").contains("No operation moved beyond its noise."));
        // A column only one side ran is left out.
        let mut other = run(0.01, 0.05);
        other.backend = "ndarray".into();
        assert!(compare(&[other], &b).is_empty());
    }
}
