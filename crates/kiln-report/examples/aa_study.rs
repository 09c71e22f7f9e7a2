//! An A/A study from one A/B run of a Burn against itself (`--burn 0.22.1 --burn 0.22.1
//! --repeats N`): its passes split in two halves, the first to choose each measure's least
//! change that counts, the second to check it, and the epoch time's false-alarm rate under the
//! sequential rule (`--repeats auto`) at the noise the run measured.
//!
//! ```text
//! cargo run -p kiln-report --example aa_study -- RUN_DIR
//! ```
//!
//! RUN_DIR holds the run's `a-*/` and `b-*/` sides. Markdown on stdout.

use std::path::{Path, PathBuf};

use kiln_contract::schema::{Record, Status};
use kiln_contract::stats::{Look, Sequential, Stats};
use kiln_report::ab::PassRun;

/// Sequences the rate is estimated from, each drawn pair by pair from the measured pairs.
const SEQUENCES: usize = 20_000;

fn main() -> Result<(), String> {
    let run = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: aa_study RUN_DIR (an A/B run of a Burn against itself)")?;
    let a = side(&run, "a-")?;
    let b = side(&run, "b-")?;
    let pairs = pair_up(&a, &b);
    if pairs.len() < 6 {
        return Err(format!(
            "{}: {} pairs; the study splits them in two halves of 3 at least (give --repeats 6 or more)",
            run.display(),
            pairs.len()
        ));
    }
    let half = pairs.len() / 2;
    let (choose, check) = pairs.split_at(half);
    println!("# A/A study: {}\n", run.display());
    println!(
        "{} pairs; passes 1–{half} choose each measure's least change that counts, passes {}–{} \
         check it. In odd passes A ran first, in even ones B.\n",
        pairs.len(),
        half + 1,
        pairs.len()
    );
    println!("## Least changes that count, chosen on one half and checked on the other\n");
    println!(
        "| measure | least now | largest shift of a pair, first half (chosen) | second half: pairs shifted more than the chosen | second half: pairs shifted more than the least now | pairs whose second process was higher |"
    );
    println!("|---|---|---|---|---|---|");
    // Epoch time is the sequential rule's: its false alarms follow.
    for m in &kiln_report::ab::RULES[1..] {
        // Accuracy's least is its floor (points); the others' is in their own unit.
        let least = if m.difference { m.floor } else { m.least };
        let shifts = |ps: &[Pair]| -> Vec<f64> {
            ps.iter()
                .filter_map(|p| Some(((m.value)(&p.b)? - (m.value)(&p.a)?).abs()))
                .collect()
        };
        let chosen = shifts(choose).into_iter().fold(0.0, f64::max);
        let later = shifts(check);
        let over = |least: f64| later.iter().filter(|s| **s > least).count();
        let second_higher = pairs
            .iter()
            .filter_map(|p| {
                let (first, second) = if p.pass % 2 == 1 {
                    (&p.a, &p.b)
                } else {
                    (&p.b, &p.a)
                };
                Some((m.value)(second)? > (m.value)(first)?)
            })
            .collect::<Vec<_>>();
        println!(
            "| {} | {} | {} | {} of {} | {} of {} | {} of {} |",
            m.name,
            least_text(m, least),
            least_text(m, chosen),
            over(chosen),
            later.len(),
            over(least),
            later.len(),
            second_higher.iter().filter(|h| **h).count(),
            second_higher.len()
        );
    }
    println!("\n## The A/B's own verdicts on each half\n");
    for (name, ps) in [("first half", choose), ("second half", check)] {
        let (ra, rb): (Vec<Record>, Vec<Record>) =
            ps.iter().map(|p| (p.a.clone(), p.b.clone())).unzip();
        for rule in [None, Some(&Sequential::KILN)] {
            for row in kiln_report::ab::compare(&ra, &rb, rule) {
                for m in &row.measures {
                    if rule.is_some() && m.look.is_none() {
                        continue;
                    }
                    println!(
                        "- {name}, {}{}: {} ({})",
                        m.name,
                        if rule.is_some() { ", sequential" } else { "" },
                        m.verdict,
                        m.test
                    );
                }
            }
        }
    }
    let logs: Vec<f64> = pairs
        .iter()
        .map(|p| (epoch(&p.b) / epoch(&p.a)).ln())
        .collect();
    let (first_logs, second_logs) = logs.split_at(half);
    println!("\n## Epoch time: the sequential rule's false alarms at this cell's noise\n");
    println!(
        "Pair log ratios: mean {:+.4}, standard deviation {:.4} (first half {:.4}, second {:.4}); \
         drift per process {:+.2}% (a least-squares fit of log time on the place in the order and \
         the side).\n",
        mean(&logs),
        sd(&logs),
        sd(first_logs),
        sd(second_logs),
        drift(&pairs) * 100.0
    );
    println!(
        "| pairs drawn from | as measured: a change called (95% interval) | centred: a change called (95% interval) | median pairs to a verdict (centred) |"
    );
    println!("|---|---|---|---|");
    for (name, from) in [
        ("the first half", first_logs),
        ("the second half", second_logs),
        ("every pair", &logs[..]),
    ] {
        let m = mean(from);
        let centred: Vec<f64> = from.iter().map(|d| d - m).collect();
        let (raw, _) = false_alarms(&Sequential::KILN, from, SEQUENCES);
        let (called, median_n) = false_alarms(&Sequential::KILN, &centred, SEQUENCES);
        println!(
            "| {name} ({} pairs, mean {m:+.4}) | {} | {} | {median_n} |",
            from.len(),
            rate(raw),
            rate(called)
        );
    }
    println!(
        "\n{SEQUENCES} sequences a cell: each draws pairs at random (with replacement) from the \
         measured ones, as `--repeats auto` adds them, until the rule decides or reaches its {} \
         pairs. *As measured* keeps the pairs' mean, as if it were a real difference between \
         the sides; *centred* takes it out (an A/A has none: the same runner on both sides, in a \
         balanced order), so it is the rule's false-alarm rate at this cell's noise. The \
         interval is the simulation's (Wilson's); it does not include the uncertainty of the \
         measured pairs themselves: their spread over {} pairs is known to within about ±{:.0}%.",
        Sequential::KILN.max_pairs,
        logs.len(),
        100.0 / (2.0 * (logs.len() as f64 - 1.0)).sqrt() * 1.96
    );
    Ok(())
}

/// One pass: A's and B's run of the cell.
struct Pair {
    pass: usize,
    a: Record,
    b: Record,
}

/// A least change as text: accuracy's in points, the others' in their unit.
fn least_text(m: &kiln_report::ab::Rule<Record>, v: f64) -> String {
    if m.difference {
        format!("{:.2} points", v * 100.0)
    } else {
        (m.text)(v)
    }
}

fn epoch(r: &Record) -> f64 {
    r.epoch_seconds.as_ref().map_or(f64::NAN, |s| s.median)
}

/// The timed records of the side whose directory in `run` starts with `prefix`.
fn side(run: &Path, prefix: &str) -> Result<Vec<Record>, String> {
    let entries = std::fs::read_dir(run).map_err(|e| format!("{}: {e}", run.display()))?;
    let dir = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .ok_or_else(|| {
            format!(
                "{}: no {prefix}* side (an A/B run directory?)",
                run.display()
            )
        })?;
    let loaded = kiln_report::read::load(&[dir]).map_err(|e| e.to_string())?;
    Ok(loaded
        .records
        .into_iter()
        .filter(|r| r.status == Status::Ok && r.epoch_seconds.is_some())
        .collect())
}

/// Each pass both sides timed, in pass order (the A/B's own pairing, `ab::partners`).
fn pair_up(a: &[Record], b: &[Record]) -> Vec<Pair> {
    let (a, b): (Vec<&Record>, Vec<&Record>) = (a.iter().collect(), b.iter().collect());
    let mut pairs: Vec<Pair> = kiln_report::ab::partners(&a, &b)
        .into_iter()
        .filter_map(|(ra, rb)| {
            Some(Pair {
                pass: rb.pass()?,
                a: ra.clone(),
                b: rb.clone(),
            })
        })
        .collect();
    pairs.sort_by_key(|p| p.pass);
    pairs
}

fn mean(x: &[f64]) -> f64 {
    Stats::from_samples(x).map_or(f64::NAN, |s| s.mean)
}

fn sd(x: &[f64]) -> f64 {
    Stats::from_samples(x).map_or(f64::NAN, |s| s.stddev)
}

/// Drift per process: the slope of log epoch time on each run's place in the run order (two a
/// pass, A first in odd passes), with B's offset fitted beside it.
fn drift(pairs: &[Pair]) -> f64 {
    // Columns: 1, place, is B.
    let mut rows = Vec::new();
    for p in pairs {
        let base = 2.0 * (p.pass as f64 - 1.0);
        let (pa, pb) = if p.pass % 2 == 1 {
            (base, base + 1.0)
        } else {
            (base + 1.0, base)
        };
        rows.push(([1.0, pa, 0.0], epoch(&p.a).ln()));
        rows.push(([1.0, pb, 1.0], epoch(&p.b).ln()));
    }
    let mut xtx = [[0.0; 3]; 3];
    let mut xty = [0.0; 3];
    for (x, y) in &rows {
        for i in 0..3 {
            xty[i] += x[i] * y;
            for j in 0..3 {
                xtx[i][j] += x[i] * x[j];
            }
        }
    }
    solve3(xtx, xty)[1]
}

/// Solve the 3×3 system `m x = v` (Gaussian elimination with partial pivoting).
fn solve3(mut m: [[f64; 3]; 3], mut v: [f64; 3]) -> [f64; 3] {
    for col in 0..3 {
        let pivot = (col..3)
            .max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))
            .unwrap_or(col);
        m.swap(col, pivot);
        v.swap(col, pivot);
        let pivot_row = m[col];
        for row in col + 1..3 {
            let f = m[row][col] / pivot_row[col];
            for (x, p) in m[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            v[row] -= f * v[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let rest: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (v[row] - rest) / m[row][row];
    }
    x
}

/// Of `n` sequences drawn from `from`, how many the rule ended with a change, and the median
/// number of pairs the sequences took.
fn false_alarms(rule: &Sequential, from: &[f64], n: usize) -> (usize, usize) {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut draw = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        from[(state % from.len() as u64) as usize]
    };
    let mut called = 0;
    let mut lengths = Vec::with_capacity(n);
    for _ in 0..n {
        // The A/B's own reading of a sequence: its first decided look, else undecided.
        let d: Vec<f64> = (0..rule.max_pairs).map(|_| draw()).collect();
        let (look, at) = rule.first_decision(&d);
        if matches!(look, Look::Changed(_)) {
            called += 1;
        }
        lengths.push(at);
    }
    lengths.sort_unstable();
    (called, lengths[n / 2])
}

/// `k` of the study's sequences as a rate with its interval.
fn rate(k: usize) -> String {
    let (lo, hi) = wilson(k, SEQUENCES);
    format!(
        "{:.2}% ({:.2}–{:.2}%)",
        k as f64 / SEQUENCES as f64 * 100.0,
        lo * 100.0,
        hi * 100.0
    )
}

/// Wilson's 95% interval for `k` of `n`.
fn wilson(k: usize, n: usize) -> (f64, f64) {
    let (z, n) = (1.96, n as f64);
    let p = k as f64 / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    (centre - half, centre + half)
}
