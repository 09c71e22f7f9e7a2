//! B against A over plain numbers, the two tests an A/B verdict rests on: the paired t-test of
//! each B against its A, and Welch's t over two sides' runs where they do not pair.

use kiln_contract::stats::{Stats, welch};

/// Two-sided p-value under which a difference is not taken for noise.
pub const P_VALUE: f64 = 0.05;

/// What the paired tests test, per pair of (A, B) values: the log of B ÷ A (a `difference`:
/// B − A).
pub(super) fn differences(pairs: &[(f64, f64)], difference: bool) -> Vec<f64> {
    pairs
        .iter()
        .map(|&(a, b)| if difference { b - a } else { (b / a).ln() })
        .collect()
}

/// B against A over `pairs` of (A, B) values: the paired t-test of their log ratios (a
/// `difference`: of B − A); a change counts when it is significant and over `floor`.
pub fn compare_pairs(pairs: &[(f64, f64)], floor: f64, difference: bool) -> Compared {
    let Some(t) = kiln_contract::stats::paired(&differences(pairs, difference)) else {
        return Compared {
            change: None,
            p: None,
            threshold: floor,
            moved: None,
            detectable: None,
        };
    };
    let (lo, hi) = (t.mean - t.half_width, t.mean + t.half_width);
    let (change, size, detectable) = if difference {
        ((t.mean, lo, hi), t.mean, t.detectable)
    } else {
        (
            (t.mean.exp(), lo.exp(), hi.exp()),
            t.mean.exp() - 1.0,
            t.detectable.exp() - 1.0,
        )
    };
    Compared {
        change: Some(change),
        p: Some(t.p),
        threshold: floor,
        moved: (t.p < P_VALUE && size.abs() > floor).then_some(size > 0.0),
        detectable: Some(detectable.max(floor)),
    }
}

/// B's runs against A's runs of one measure, by the rule of this module.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compared {
    /// B ÷ A of the means (a difference: B − A), with its 95% interval.
    pub change: Option<(f64, f64, f64)>,
    /// Welch's two-sided p; `None` when a side has a single run.
    pub p: Option<f64>,
    /// The least change that counts.
    pub threshold: f64,
    /// `Some(true)`: B higher beyond the noise; `Some(false)`: lower; `None`: no difference
    /// beyond the noise (or no verdict).
    pub moved: Option<bool>,
    /// The smallest change these runs would have shown (a share; a difference: points), where
    /// the test can say (paired runs).
    pub detectable: Option<f64>,
}

/// Compare `b`'s runs with `a`'s: as a ratio of the means, or as a `difference` (shares whose
/// spread is in points already); the threshold is the largest of `floor`, the sides' spread and
/// `drift` (ratios only).
pub fn compare_runs(a: &[f64], b: &[f64], floor: f64, difference: bool, drift: f64) -> Compared {
    let spread = if difference {
        let sd = |v: &[f64]| Stats::from_samples(v).map_or(0.0, |s| s.stddev);
        sd(a).max(sd(b))
    } else {
        let cv = |v: &[f64]| Stats::from_samples(v).map_or(0.0, |s| s.cv());
        cv(a).max(cv(b)).max(drift)
    };
    let threshold = floor.max(spread);
    let Some(w) = welch(a, b) else {
        return Compared {
            change: None,
            p: None,
            threshold,
            moved: None,
            detectable: None,
        };
    };
    let mean_a = a.iter().sum::<f64>() / a.len() as f64;
    let (change, low, high, size) = if difference {
        let d = w.difference;
        (d, d - w.half_width, d + w.half_width, d)
    } else {
        let r = 1.0 + w.difference / mean_a;
        (
            r,
            r - w.half_width / mean_a,
            r + w.half_width / mean_a,
            r - 1.0,
        )
    };
    Compared {
        change: Some((change, low, high)),
        p: Some(w.p),
        threshold,
        moved: (w.p < P_VALUE && size.abs() > threshold).then_some(size > 0.0),
        detectable: None,
    }
}
