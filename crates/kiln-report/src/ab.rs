//! Burn A against Burn B (`--burn A --burn B`): the same cells, run as alternating processes
//! (A's run k, then B's run k), compared cell by cell. Each measure (epoch time, warm-up,
//! training memory, test accuracy) gets B against A with its 95% interval and a verdict by one
//! stated rule, from the design that ran:
//!
//! - **paired** (every run of each side has its partner, the other side's run of the same
//!   pass): the paired t-test of each B against its A (the logarithm of their ratio; accuracy:
//!   their difference). Drift over the run moves both runs of a pair alike and cancels, so it
//!   is no threshold; a change counts when p < 0.05 and it exceeds the measure's floor (1% for
//!   epoch time, 10% and 0.1 s for the warm-up, 5% and 1 MiB for memory, 1 point of accuracy).
//! - **unpaired** (a side with failed runs, runs merged from two directories): Welch's t over
//!   the two sides, and a change must also exceed the larger of the sides' between-run
//!   variation and the machine's drift.
//!
//! Otherwise the verdict is "no difference beyond the noise", with the smallest change these
//! runs would have shown (80% of the time at the 5% level); a side with fewer than 2 timed runs
//! gets no verdict.
//!
//! - **sequential** (`--repeats auto`: pairs added until the answer is known): the epoch time's
//!   verdict is [`Sequential::look`]'s at the last pair (each look at the error rate split over
//!   every look, so stopping early does not inflate it): B slower or faster, "no change of 3%
//!   either way", or undecided at the most pairs. The other measures keep the paired rule.

use std::fmt::Write as _;

use crate::fields::{human_bytes, human_seconds};
use kiln_contract::schema::{Record, Status};
use kiln_contract::stats::{Look, Sequential, median};

mod compared;
use compared::differences;
pub use compared::{Compared, P_VALUE, compare_pairs, compare_runs};

/// One measure of a cell, A against B.
#[derive(Clone, Debug)]
pub struct Measure {
    pub name: &'static str,
    /// The runs' values on each side.
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    /// A value of the measure as text, in its unit.
    pub text: fn(f64) -> String,
    /// B ÷ A of the means (accuracy: B − A, in points of the share), with its 95% interval.
    pub change: Option<(f64, f64, f64)>,
    pub p: Option<f64>,
    /// The least change that counts (a share; accuracy: points of the share).
    pub threshold: f64,
    /// The test that gave the verdict: `paired t, N pairs` or `Welch's t (unpaired)`.
    pub test: String,
    pub verdict: String,
    /// Where a sequential A/B's epoch time stands (`--repeats auto`); `None` otherwise.
    pub look: Option<Look>,
}

/// One cell, A against B.
#[derive(Clone, Debug)]
pub struct AbRow {
    /// `mnist-cnn · flex/cpu/f32 · batch 128`.
    pub cell: String,
    pub measures: Vec<Measure>,
}

/// A run an A/B compares (a training record, an inference record): the pass it ran in.
pub trait PassRun {
    fn pass(&self) -> Option<usize>;
}

impl PassRun for Record {
    fn pass(&self) -> Option<usize> {
        self.repeat.as_ref().map(|p| p.index)
    }
}

/// What each measure compares: its name, the value a run gives, its floor, and the words for
/// "B higher" and "B lower".
pub struct Rule<R> {
    pub name: &'static str,
    pub value: fn(&R) -> Option<f64>,
    pub floor: f64,
    /// Accuracy compares differences of shares, the rest ratios.
    pub difference: bool,
    /// The least change, in the measure's own unit (seconds, bytes), that counts however
    /// sure: an unchanged Burn built again moved a 0.02 s warm-up by 20% and 7 MiB of memory
    /// by 4% in an A/A study (docs/burn-ab.md). 0: none.
    pub least: f64,
    /// A value as text, in the measure's unit.
    pub text: fn(f64) -> String,
    pub higher: &'static str,
    pub lower: &'static str,
}

/// The measures a training A/B compares, epoch time first (the one the sequential rule decides).
pub const RULES: [Rule<Record>; 4] = [
    Rule {
        name: "epoch time",
        value: |r| r.epoch_seconds.as_ref().map(|s| s.median),
        floor: 0.01,
        difference: false,
        least: 0.0,
        text: human_seconds,
        higher: "slower",
        lower: "faster",
    },
    Rule {
        name: "warm-up to steady state",
        // Records older than the steady-state rule: their first step.
        value: |r| {
            r.warmup
                .as_ref()
                .map(|w| w.seconds)
                .or(r.first_step_seconds)
        },
        floor: 0.10,
        difference: false,
        least: 0.1,
        text: human_seconds,
        higher: "slower to start",
        lower: "faster to start",
    },
    Rule {
        name: "training memory",
        value: |r| r.training_bytes().map(|b| b as f64),
        floor: 0.05,
        difference: false,
        least: 1048576.0,
        text: memory_text,
        higher: "needs more memory",
        lower: "needs less memory",
    },
    Rule {
        name: "test accuracy",
        value: |r| r.test_accuracy,
        floor: 0.01,
        difference: true,
        least: 0.0,
        text: |v| format!("{:.1}%", v * 100.0),
        higher: "learns more",
        lower: "learns less",
    },
];

/// The key that pairs a cell of A with the same cell of B.
fn key(r: &Record) -> String {
    format!(
        "{} · {}/{}/{} · batch {}{}",
        r.model,
        r.backend,
        r.device,
        r.precision,
        r.batch_size,
        match r.training_loop {
            Some(l) if l != kiln_contract::TrainingLoop::Kiln => format!(" · {l} loop"),
            _ => String::new(),
        }
    )
}

/// The cells both sides timed, in A's order, each measure compared; the epoch time by
/// `sequential`'s rule where the runs were added until decided (`--repeats auto`).
pub fn compare(a: &[Record], b: &[Record], sequential: Option<&Sequential>) -> Vec<AbRow> {
    let timed = |r: &Record| r.status == Status::Ok && r.epoch_seconds.is_some();
    let rows = shared_rows(a, b, timed, key);
    // Every cell's epoch time is one test of the run: the error rate is split over them.
    let sequential = sequential.map(|s| s.over(rows.len()));
    let sequential = sequential.as_ref();
    rows.into_iter()
        .map(|(k, ra, rb)| {
            let drift = ra
                .iter()
                .chain(&rb)
                .filter_map(|r| r.run_drift)
                .fold(0.0, f64::max);
            // A run cut by the budget trained fewer steps: its accuracy is no other run's peer.
            let cut = ra.iter().chain(&rb).any(|r| r.obtained.budget_exhausted);
            let measures = RULES
                .iter()
                .filter_map(|rule| {
                    // The sequential rule decides the epoch time, the measure the run stops on.
                    let seq = sequential.filter(|_| rule.name == RULES[0].name);
                    let mut m = measure(rule, &ra, &rb, drift, seq)?;
                    // Accuracy is the one measure compared as a difference (`difference`).
                    if cut && rule.difference {
                        m.change = None;
                        m.p = None;
                        m.verdict = "not compared: runs cut by the budget trained fewer steps \
                                     than the others"
                            .into();
                    }
                    Some(m)
                })
                .collect();
            AbRow { cell: k, measures }
        })
        .collect()
}

/// The rows both sides have among the runs they `keep`, in A's order: each row's `key` with
/// its runs on A and on B.
pub fn shared_rows<'a, R>(
    a: &'a [R],
    b: &'a [R],
    keep: impl Fn(&R) -> bool,
    key: impl Fn(&R) -> String,
) -> Vec<(String, Vec<&'a R>, Vec<&'a R>)> {
    let mut keys: Vec<String> = Vec::new();
    for r in a.iter().filter(|r| keep(r)) {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    let side = |rs: &'a [R], k: &str| -> Vec<&'a R> {
        rs.iter().filter(|r| keep(r) && key(r) == k).collect()
    };
    keys.into_iter()
        .map(|k| (side(a, &k), side(b, &k), k))
        .filter(|(_, rb, _)| !rb.is_empty())
        .map(|(ra, rb, k)| (k, ra, rb))
        .collect()
}

/// One measure of the same row, B's runs against A's, by `rule`: paired where every run has its
/// partner of the same pass, else unpaired (a change must then exceed `drift` too); the epoch
/// time of a sequential A/B by `sequential`'s rule.
pub fn measure<R: PassRun>(
    rule: &Rule<R>,
    a: &[&R],
    b: &[&R],
    drift: f64,
    sequential: Option<&Sequential>,
) -> Option<Measure> {
    let values = |rs: &[&R]| -> Vec<f64> { rs.iter().filter_map(|r| (rule.value)(r)).collect() };
    let (va, vb) = (values(a), values(b));
    if va.is_empty() || vb.is_empty() {
        return None;
    }
    let paired = pairs(rule, a, b);
    let (c, test) = match &paired {
        Some((p, unpaired)) => (
            compare_pairs(p, rule.floor, rule.difference),
            format!("paired t, {} pairs{}", p.len(), without_partner(*unpaired)),
        ),
        None => (
            compare_runs(&va, &vb, rule.floor, rule.difference, drift),
            "Welch's t (unpaired)".to_string(),
        ),
    };
    // A sure change too small to matter (under the rule's least, in its unit) does not count.
    let shift = match (median(&va), median(&vb)) {
        (Some(x), Some(y)) => (y - x).abs(),
        _ => 0.0,
    };
    let small = c.moved.is_some() && shift < rule.least;
    let verdict = match (c.moved.filter(|_| !small), c.detectable) {
        (None, _) if small => format!(
            "no difference that counts (the medians {} apart, under the {} a change must reach)",
            (rule.text)(shift),
            (rule.text)(rule.least)
        ),
        (None, _) if c.p.is_none() => {
            "no verdict: a side has a single run (give --repeats 3 or more)".to_string()
        }
        (None, Some(d)) if rule.difference => format!(
            "no difference beyond the noise (a change over {:.1} points would have shown)",
            d * 100.0
        ),
        (None, Some(d)) => format!(
            "no difference beyond the noise (a change over {:.1}% would have shown)",
            d * 100.0
        ),
        (None, None) => "no difference beyond the noise".to_string(),
        (Some(true), _) => format!("B {}", rule.higher),
        (Some(false), _) => format!("B {}", rule.lower),
    };
    let mut m = Measure {
        name: rule.name,
        text: rule.text,
        a: va,
        b: vb,
        change: c.change,
        p: c.p,
        threshold: c.threshold,
        test,
        verdict,
        look: None,
    };
    if let (Some(seq), Some((p, unpaired))) = (sequential, &paired) {
        judge_sequentially(&mut m, rule, seq, p);
        m.test.push_str(&without_partner(*unpaired));
    }
    Some(m)
}

/// `; 1 run without a partner left out`, or nothing when every run has its partner.
fn without_partner(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => "; 1 run without a partner left out".into(),
        n => format!("; {n} runs without a partner left out"),
    }
}

/// A measure's verdict by `seq` over its `pairs` (unpaired runs keep Welch's): the first look
/// that decided (a cell decided early stays decided while others take more pairs), else
/// undecided with the smallest change these pairs would have called at the rule's own level.
fn judge_sequentially<R>(m: &mut Measure, rule: &Rule<R>, seq: &Sequential, p: &[(f64, f64)]) {
    let d = differences(p, rule.difference);
    let (look, at) = seq.first_decision(&d);
    m.test = format!(
        "sequential paired t, {} pairs (each look at {:.4}, {} looks at most)",
        p.len(),
        seq.alpha_per_look(),
        (seq.max_pairs + 1).saturating_sub(seq.min_pairs)
    );
    let when = if at < p.len() {
        format!(" (decided after {at} pairs)")
    } else {
        String::new()
    };
    m.verdict = match look {
        Look::Changed(true) => format!("B {}{when}", rule.higher),
        Look::Changed(false) => format!("B {}{when}", rule.lower),
        Look::Within => format!("no change of {:.0}% either way{when}", seq.band * 100.0),
        Look::Undecided => match seq.detectable(&d) {
            Some(x) => format!(
                "undecided after {} pairs (a change over {:.1}% would have shown at this \
                 rule's level)",
                p.len(),
                x * 100.0
            ),
            None => format!("undecided after {} pairs", p.len()),
        },
    };
    m.look = Some(look);
}

/// Each B run's value beside its partner's, A's run of the same pass, and how many runs of
/// either side had no partner (a failed or interrupted run drops its own pair, not the
/// others); `None` when a run names no pass or a pass twice (runs merged from two directories:
/// compared unpaired), or there are fewer than 2 pairs.
fn pairs<R: PassRun>(rule: &Rule<R>, a: &[&R], b: &[&R]) -> Option<(Vec<(f64, f64)>, usize)> {
    let passes = |rs: &[&R]| -> Option<Vec<usize>> {
        let mut ks: Vec<usize> = rs.iter().map(|r| r.pass()).collect::<Option<_>>()?;
        let n = ks.len();
        ks.sort_unstable();
        ks.dedup();
        (ks.len() == n).then_some(ks)
    };
    passes(a)?;
    passes(b)?;
    let mut out = Vec::new();
    for (ra, rb) in partners(a, b) {
        if let (Some(va), Some(vb)) = ((rule.value)(ra), (rule.value)(rb)) {
            out.push((va, vb));
        }
    }
    let unpaired = a.len() + b.len() - 2 * out.len();
    (out.len() >= 2).then_some((out, unpaired))
}

/// Each B run beside its partner, A's run of the same pass, in B's order; a run that names no
/// pass, or whose pass the other side lacks, is left out.
pub fn partners<'r, R: PassRun>(a: &[&'r R], b: &[&'r R]) -> Vec<(&'r R, &'r R)> {
    b.iter()
        .filter_map(|rb| {
            let k = rb.pass()?;
            let ra = a.iter().find(|ra| ra.pass() == Some(k))?;
            Some((*ra, *rb))
        })
        .collect()
}

/// Bytes as text; small amounts (the A/A study's shifts) with their fraction of a MiB.
fn memory_text(v: f64) -> String {
    if v < 10.0 * 1048576.0 {
        format!("{:.2} MiB", v / 1048576.0)
    } else {
        human_bytes(v as u64)
    }
}

/// A measure's B against A with its interval, as the tables and the run's progress print it:
/// `1.046× (1.025–1.067)`, accuracy in points.
pub fn change_text(m: &Measure) -> String {
    match (m.change, m.name) {
        (Some((d, lo, hi)), "test accuracy") => format!(
            "{:+.1} points ({:+.1} to {:+.1})",
            d * 100.0,
            lo * 100.0,
            hi * 100.0
        ),
        (Some((r, lo, hi)), _) => format!("{r:.3}× ({lo:.3}–{hi:.3})"),
        (None, _) => "–".into(),
    }
}

/// The A/B tables as Markdown: the epoch time table with its verdicts first, then every other
/// measure, and the rule in one paragraph.
pub fn markdown(rows: &[AbRow], a_label: &str, b_label: &str) -> String {
    let mut out = format!("## Burn A/B\n\nA = {a_label}, B = {b_label}.\n\n");
    out.push_str(&table(rows, "Cell"));
    out.push_str(
        "\nA and B ran as alternating processes, one pass each in turn (since 2026-12-07 in a \
         balanced order: A B, B A, ...). Paired runs: each B is compared with A's run of the \
         same pass (the paired t-test of their log ratio); a change counts when p < 0.05 and it exceeds the measure's floor \
         (1% for epoch time, 10% and 0.1 s for the warm-up, 5% and 1 MiB for memory, 1 point of \
         accuracy), and a \
         \"no difference\" says the smallest change the pairs would have shown 80% of the time. \
         Unpaired runs (a side with failed runs): Welch's t-test, and a change must also exceed \
         the larger of the sides' between-run variation and the machine's drift.\n",
    );
    if rows
        .iter()
        .flat_map(|r| &r.measures)
        .any(|m| m.look.is_some())
    {
        out.push_str(
            "\nThe runs were added a pair at a time until every epoch time was decided \
             (`--repeats auto`): after each pair from the third, a paired t-test at 5% split \
             over every look the rule could take (Bonferroni), so stopping early does not raise \
             the error rate; \"B slower\"/\"B faster\" when the change is significant at that \
             look and over 1%, \"no change of 3% either way\" when two one-sided tests at that level \
             put it within 3% either way, else undecided at the most pairs.\n",
        );
    }
    out
}

/// The rows' measures as one Markdown table, each row named in its first column (`first`).
pub fn table(rows: &[AbRow], first: &str) -> String {
    let mut out = format!(
        "| {first} | Measure | A (median of runs) | B (median of runs) | B vs A (95% interval) | p | Test | Verdict |\n\
         |---|---|---|---|---|---|---|---|\n"
    );
    for row in rows {
        for m in &row.measures {
            let median = |v: &[f64]| kiln_contract::stats::median(v).map_or("–".into(), m.text);
            let change = change_text(m);
            let _ = writeln!(
                out,
                "| {} | {} | {} ({} runs) | {} ({} runs) | {} | {} | {} | {} |",
                row.cell,
                m.name,
                median(&m.a),
                m.a.len(),
                median(&m.b),
                m.b.len(),
                change,
                m.p.map_or("–".into(), |p| format!("{p:.3}")),
                m.test,
                m.verdict
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(backend: &str, epochs: &[f64], accuracy: f64) -> Vec<Record> {
        epochs
            .iter()
            .map(|&e| {
                let mut r = crate::fields::tests_support::timed(backend, e);
                r.test_accuracy = Some(accuracy);
                r.first_step_seconds = Some(1.0);
                r
            })
            .collect()
    }

    fn verdict<'a>(rows: &'a [AbRow], cell: &str, name: &str) -> &'a str {
        &rows
            .iter()
            .find(|r| r.cell.contains(cell))
            .unwrap()
            .measures
            .iter()
            .find(|m| m.name == name)
            .unwrap()
            .verdict
    }

    #[test]
    fn a_slower_backend_is_slower_and_the_others_no_different() {
        let mut a = runs("flex", &[100.0, 101.0, 99.0], 0.82);
        a.extend(runs("ndarray", &[500.0, 505.0, 495.0], 0.80));
        let mut b = runs("flex", &[120.0, 121.0, 119.5], 0.82);
        b.extend(runs("ndarray", &[502.0, 498.0, 503.0], 0.80));
        let rows = compare(&a, &b, None);
        assert_eq!(rows.len(), 2);
        assert_eq!(verdict(&rows, "flex", "epoch time"), "B slower");
        assert_eq!(
            verdict(&rows, "ndarray", "epoch time"),
            "no difference beyond the noise"
        );
        assert_eq!(
            verdict(&rows, "flex", "test accuracy"),
            "no difference beyond the noise"
        );
        let md = markdown(&rows, "0.22.1", "path:burn");
        assert!(
            md.contains("| B slower |") && md.contains("A = 0.22.1, B = path:burn"),
            "{md}"
        );
    }

    #[test]
    fn a_change_inside_the_noise_or_the_threshold_is_no_difference() {
        // 0.5% faster, consistently: significant, but under the 1% floor.
        let a = runs("flex", &[100.0, 100.1, 99.9], 0.8);
        let b = runs("flex", &[99.5, 99.6, 99.4], 0.8);
        let rows = compare(&a, &b, None);
        let m = &rows[0].measures[0];
        assert!(m.p.unwrap() < P_VALUE, "{m:?}");
        assert_eq!(m.verdict, "no difference beyond the noise");
        // 8% faster but runs that spread by 20%: not significant.
        let a = runs("flex", &[80.0, 100.0, 120.0], 0.8);
        let b = runs("flex", &[75.0, 92.0, 110.0], 0.8);
        assert_eq!(
            verdict(&compare(&a, &b, None), "flex", "epoch time"),
            "no difference beyond the noise"
        );
        // The machine's drift raises the threshold: a 3% change under a 5% drift does not count.
        let mut a = runs("flex", &[100.0, 100.1, 99.9], 0.8);
        let b = runs("flex", &[97.0, 97.1, 96.9], 0.8);
        assert_eq!(
            verdict(&compare(&a, &b, None), "flex", "epoch time"),
            "B faster"
        );
        a[0].run_drift = Some(0.05);
        assert_eq!(
            verdict(&compare(&a, &b, None), "flex", "epoch time"),
            "no difference beyond the noise"
        );
    }

    #[test]
    fn accuracy_is_not_compared_where_the_budget_cut_a_side_short() {
        let a = runs("flex", &[10.0, 10.1, 9.9], 0.796);
        let mut b = runs("flex", &[600.0, 610.0, 605.0], 0.782);
        for r in &mut b {
            r.obtained.budget_exhausted = true;
        }
        let rows = compare(&a, &b, None);
        assert_eq!(verdict(&rows, "flex", "epoch time"), "B slower");
        assert!(
            verdict(&rows, "flex", "test accuracy").starts_with("not compared"),
            "{:?}",
            verdict(&rows, "flex", "test accuracy")
        );
        for r in &mut b {
            r.obtained.budget_exhausted = false;
        }
        assert_eq!(
            verdict(&compare(&a, &b, None), "flex", "test accuracy"),
            "B learns less"
        );
    }

    #[test]
    fn a_single_run_gets_no_verdict_and_accuracy_compares_points() {
        let a = runs("flex", &[100.0], 0.8);
        let b = runs("flex", &[130.0], 0.8);
        assert!(verdict(&compare(&a, &b, None), "flex", "epoch time").starts_with("no verdict"));
        let a = runs("flex", &[100.0, 100.0, 100.0], 0.80);
        let mut b = runs("flex", &[100.0, 100.0, 100.0], 0.70);
        b[0].test_accuracy = Some(0.71);
        assert_eq!(
            verdict(&compare(&a, &b, None), "flex", "test accuracy"),
            "B learns less"
        );
        // Cells only one side ran are left out.
        assert!(compare(&a, &runs("ndarray", &[1.0, 2.0], 0.8), None).is_empty());
    }

    /// A sure change smaller than the measure's least (a warm-up of hundredths of a second, as
    /// an unchanged Burn rebuilt showed in the A/A study) does not count.
    #[test]
    fn a_sure_change_under_the_least_that_counts_is_none() {
        let warm = |values: &[f64]| -> Vec<Record> {
            values
                .iter()
                .map(|&w| {
                    let mut r = runs("flex", &[100.0], 0.8).remove(0);
                    r.first_step_seconds = Some(w);
                    r
                })
                .collect()
        };
        let a = warm(&[0.020, 0.021, 0.020, 0.021]);
        let b = warm(&[0.016, 0.0165, 0.016, 0.0165]);
        let rows = compare(&a, &b, None);
        let v = verdict(&rows, "flex", "warm-up to steady state");
        assert!(v.starts_with("no difference that counts"), "{v}");
        // The same shift in seconds is a change.
        let a = warm(&[2.0, 2.1, 2.0, 2.1]);
        let b = warm(&[1.6, 1.65, 1.6, 1.65]);
        let rows = compare(&a, &b, None);
        assert_eq!(
            verdict(&rows, "flex", "warm-up to steady state"),
            "B faster to start"
        );
    }
}
