//! Summary statistics of repeated timings.

use serde::{Deserialize, Serialize};

/// Median, extremes and spread of a set of samples (seconds, usually).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single sample.
    pub stddev: f64,
    pub n: usize,
    /// The least half-width of the prediction interval, as a share of the mean: how far the
    /// machine itself drifted over the run (its GEMM peak at the run's start against its end,
    /// `drift.json`). Three runs that happen to agree do not bound a fourth closer than that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<f64>,
}

impl Stats {
    /// Summarise `samples`; `None` when there are none or any is not finite.
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = median_of_sorted(&sorted)?;
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            (sorted.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Stats {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stddev,
            n,
            floor: None,
        })
    }

    /// Coefficient of variation (stddev / mean); 0 when the mean is 0.
    pub fn cv(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.stddev / self.mean
        }
    }

    /// The 95% prediction interval for one more sample: where the median of a new run falls,
    /// when the samples are runs' medians (Student's t over them: mean ± t₀.₉₇₅,ₙ₋₁ · s ·
    /// √(1 + 1/n)). `None` for a single sample: one run bounds no other. It is wide from few
    /// runs (three runs: ± 5 standard deviations) and narrows with more.
    pub fn prediction_interval(&self) -> Option<(f64, f64)> {
        let half = self.prediction_half_width()?;
        Some((self.mean - half, self.mean + half))
    }

    /// Half the width of [`Stats::prediction_interval`].
    pub fn prediction_half_width(&self) -> Option<f64> {
        if self.n < 2 {
            return None;
        }
        let t = T975.get(self.n - 2).copied().unwrap_or(1.96);
        let drift = self.floor.unwrap_or(0.0) * self.mean.abs();
        Some((t * self.stddev * (1.0 + 1.0 / self.n as f64).sqrt()).max(drift))
    }

    /// The same statistics with every value multiplied by `factor` (a change of unit or scale).
    pub fn scaled(&self, factor: f64) -> Stats {
        Stats {
            median: self.median * factor,
            min: self.min * factor,
            max: self.max * factor,
            mean: self.mean * factor,
            stddev: self.stddev * factor,
            n: self.n,
            floor: self.floor,
        }
    }
}

/// The level of every interval Kiln states: the next run's median falls inside with this
/// probability ([`Stats::prediction_interval`]).
pub const PREDICTION_LEVEL: f64 = 0.95;

/// Student's t, two-sided 95% (the 0.975 quantile), for 1 to 30 degrees of freedom; past 30
/// the normal's 1.96 is within 4% of it.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The median of `values` (NaN sorts last); `None` for none. Kiln's one median: every
/// statistic, interval and timing takes it from here.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    median_of_sorted(&sorted)
}

/// The median of values already sorted (the mean of the two middle ones for an even count);
/// `None` for none.
pub fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The `p`th percentile (0 to 100) of values already sorted, as MLPerf's loadgen indexes it
/// (`sorted[count × p]`, 0-based, `results.cc`) and onnxruntime's perf test likewise
/// (`total × 0.99`): the value at index ⌊n·p/100⌋, the last for p = 100; `None` for none. On
/// 100 values p90 is the 91st (nearest rank would take the 90th).
pub fn percentile_of_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    let index = ((p / 100.0) * n as f64).floor() as usize;
    sorted.get(index.min(n.checked_sub(1)?)).copied()
}

/// `a / b` (of the medians) with the half-width of its 95% interval for the next runs,
/// propagated from both sides' prediction intervals (first-order, independent errors); a side
/// of one sample adds nothing (the caller says "single run").
pub fn ratio_with_uncertainty(a: &Stats, b: &Stats) -> (f64, f64) {
    let ratio = a.median / b.median;
    let relative = |s: &Stats| match s.prediction_half_width() {
        Some(h) if s.mean != 0.0 => h / s.mean,
        _ => 0.0,
    };
    (
        ratio,
        ratio * (relative(a).powi(2) + relative(b).powi(2)).sqrt(),
    )
}

/// Welch's t-test of two samples (each at least 2 values): the difference of the means
/// (`b − a`), its 95% confidence interval, and the two-sided p-value, the probability of a
/// difference at least this large if both came from one distribution. `None` when a side has
/// fewer than 2 values.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    let (sa, sb) = (Stats::from_samples(a)?, Stats::from_samples(b)?);
    if sa.n < 2 || sb.n < 2 {
        return None;
    }
    let (va, vb) = (
        sa.stddev.powi(2) / sa.n as f64,
        sb.stddev.powi(2) / sb.n as f64,
    );
    let difference = sb.mean - sa.mean;
    let se = (va + vb).sqrt();
    if se == 0.0 {
        // Identical runs on each side: any difference is exact.
        let p = if difference == 0.0 { 1.0 } else { 0.0 };
        return Some(Welch {
            difference,
            half_width: 0.0,
            p,
            df: f64::INFINITY,
        });
    }
    let df = (va + vb).powi(2) / (va.powi(2) / (sa.n - 1) as f64 + vb.powi(2) / (sb.n - 1) as f64);
    let t = difference / se;
    // The conservative t: the table's value at the whole degrees of freedom below `df`.
    let t975 = T975
        .get((df.floor() as usize).max(1) - 1)
        .copied()
        .unwrap_or(1.96);
    Some(Welch {
        difference,
        half_width: t975 * se,
        p: incomplete_beta(df / 2.0, 0.5, df / (df + t * t)),
        df,
    })
}

/// The paired t-test of differences `d` (each B run less the A run it was paired with, or the
/// logarithms of their ratios): their mean with its 95% interval, the two-sided p that the mean
/// is 0, and the smallest mean these pairs would have found at the 5% level 80% of the time
/// (`(t_0.975 + 0.84) × se`, the normal's 80% point for power). `None` under 2 pairs.
pub fn paired(d: &[f64]) -> Option<Paired> {
    let s = Stats::from_samples(d)?;
    if s.n < 2 {
        return None;
    }
    let df = (s.n - 1) as f64;
    let se = s.stddev / (s.n as f64).sqrt();
    let t975 = T975.get(s.n - 2).copied().unwrap_or(1.96);
    let p = if se == 0.0 {
        if s.mean == 0.0 { 1.0 } else { 0.0 }
    } else {
        let t = s.mean / se;
        incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    };
    Some(Paired {
        mean: s.mean,
        half_width: t975 * se,
        p,
        detectable: (t975 + 0.84) * se,
        n: s.n,
    })
}

/// Where a sequence of paired log-differences stands under [`Sequential`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// The mean differs from 0 at this look's level (and by more than the floor): `true` when
    /// it is above.
    Changed(bool),
    /// The mean lies within the band at this look's level (two one-sided tests): no change
    /// beyond the band.
    Within,
    /// Neither yet.
    Undecided,
}

/// A stopping rule for pairs added one at a time until the answer is known (`--repeats
/// auto`): after each pair from the `min_pairs`th to the `max_pairs`th, a look; each look
/// tests at `alpha` / (the number of looks) (Bonferroni's split of the error rate over every
/// look the rule may take), so that the chance of calling a change where there is none stays
/// under `alpha` however early the pairs stop, and the same for calling "within the band"
/// where the change is outside it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sequential {
    pub min_pairs: usize,
    pub max_pairs: usize,
    /// The error rate over all looks, for each kind of error.
    pub alpha: f64,
    /// The band "no change" means: within `band` either way (a share; on log ratios, within ln(1 + band) of 0).
    pub band: f64,
    /// A change smaller than this (a share) is not called one, however sure.
    pub floor: f64,
}

impl Sequential {
    /// Kiln's default for epoch times: 3 to 16 pairs, 5% errors, "no change" within 3% either way,
    /// changes over 1%.
    pub const KILN: Sequential = Sequential {
        min_pairs: 3,
        max_pairs: 16,
        alpha: 0.05,
        band: 0.03,
        floor: 0.01,
    };

    /// The level each look tests at.
    pub fn alpha_per_look(&self) -> f64 {
        self.alpha / (self.max_pairs + 1).saturating_sub(self.min_pairs).max(1) as f64
    }

    /// The same rule with its error rate split over `n` comparisons (Bonferroni's split: the
    /// cells of one A/B), so that the chance of any false call among them stays under `alpha`.
    pub fn over(&self, n: usize) -> Sequential {
        Sequential {
            alpha: self.alpha / n.max(1) as f64,
            ..*self
        }
    }

    /// Where the pairs `d` stand, the first decided look kept: a cell decided at pair k stays
    /// decided while other cells take more pairs (its later looks are not taken). The look and
    /// the number of pairs it was taken at.
    pub fn first_decision(&self, d: &[f64]) -> (Look, usize) {
        for k in self.min_pairs.max(2)..=d.len().min(self.max_pairs) {
            let look = self.look(&d[..k]);
            if look != Look::Undecided {
                return (look, k);
            }
        }
        (Look::Undecided, d.len())
    }

    /// The smallest change (a share) that the pairs `d` would have called 80% of the time at
    /// this rule's level per look: `(t + 0.84) × se` with `t` Student's two-sided quantile at
    /// that level, and never under the floor. `None` under 2 pairs.
    pub fn detectable(&self, d: &[f64]) -> Option<f64> {
        let s = Stats::from_samples(d).filter(|s| s.n >= 2)?;
        let df = (s.n - 1) as f64;
        let se = s.stddev / (s.n as f64).sqrt();
        let level = self.alpha_per_look();
        // Bisection on t for a two-sided tail of `level`.
        let (mut lo, mut hi) = (0.0_f64, 1000.0_f64);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if 2.0 * one_sided_p(mid, 1.0, df) > level {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(((hi + 0.84) * se).exp_m1().max(self.floor))
    }

    /// Where the log-differences `d` (one per pair, in order) stand.
    pub fn look(&self, d: &[f64]) -> Look {
        let Some(s) = Stats::from_samples(d).filter(|s| s.n >= self.min_pairs.max(2)) else {
            return Look::Undecided;
        };
        let df = (s.n - 1) as f64;
        let se = s.stddev / (s.n as f64).sqrt();
        let level = self.alpha_per_look();
        // One-sided p that the mean is at most `null` (above: at least).
        let upper_p = |null: f64| one_sided_p(s.mean - null, se, df);
        let lower_p = |null: f64| one_sided_p(null - s.mean, se, df);
        let floor = (1.0 + self.floor).ln();
        if 2.0 * upper_p(0.0).min(lower_p(0.0)) < level && s.mean.abs() > floor {
            return Look::Changed(s.mean > 0.0);
        }
        let band = (1.0 + self.band).ln();
        if upper_p(-band) < level && lower_p(band) < level {
            return Look::Within;
        }
        Look::Undecided
    }
}

/// The one-sided p of Student's t that a mean `excess` above its null (with standard error
/// `se`, `df` degrees of freedom) came from the null.
fn one_sided_p(excess: f64, se: f64, df: f64) -> f64 {
    if se == 0.0 {
        return if excess > 0.0 { 0.0 } else { 1.0 };
    }
    let t = excess / se;
    let tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    if t > 0.0 { tail } else { 1.0 - tail }
}

/// [`paired`]'s result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    pub mean: f64,
    /// Half-width of the mean's 95% confidence interval.
    pub half_width: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// The smallest mean detected 80% of the time at the 5% level, with this spread and n.
    pub detectable: f64,
    pub n: usize,
}

/// [`welch`]'s result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Welch {
    /// Mean of b minus mean of a.
    pub difference: f64,
    /// Half-width of the difference's 95% confidence interval.
    pub half_width: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
}

/// The regularized incomplete beta function I_x(a, b) (Student's t's two-sided tail is
/// I_{df/(df+t²)}(df/2, 1/2)), by its continued fraction (Lentz's method).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(b, a, 1.0 - x);
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp() / a;
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    d = if d.abs() < tiny { tiny } else { d };
    d = 1.0 / d;
    let mut f = d;
    for m in 1..300 {
        let m = m as f64;
        for numerator in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + numerator * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = 1.0 + numerator / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            f *= c * d;
        }
        if (c * d - 1.0).abs() < 1e-12 {
            break;
        }
    }
    front * f
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let series: f64 = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |acc, (i, g)| acc + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_medians() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Stats::from_samples(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!((s.stddev - 1.290_994).abs() < 1e-5);
    }

    #[test]
    fn the_machines_drift_is_the_least_an_interval_can_be() {
        let mut agreeing = Stats::from_samples(&[100.0, 100.1, 99.9]).unwrap();
        let (lo, hi) = agreeing.prediction_interval().unwrap();
        assert!(hi - lo < 1.0, "{lo}–{hi}");
        agreeing.floor = Some(0.03);
        let (lo, hi) = agreeing.prediction_interval().unwrap();
        assert!(
            (lo - 97.0).abs() < 1e-9 && (hi - 103.0).abs() < 1e-9,
            "{lo}–{hi}"
        );
        // A spread wider than the drift keeps its own width; one run still bounds nothing.
        let mut spread = Stats::from_samples(&[90.0, 100.0, 110.0]).unwrap();
        let own = spread.prediction_half_width().unwrap();
        spread.floor = Some(0.03);
        assert_eq!(spread.prediction_half_width(), Some(own));
        let mut one = Stats::from_samples(&[100.0]).unwrap();
        one.floor = Some(0.03);
        assert_eq!(one.prediction_interval(), None);
    }

    #[test]
    fn empty_or_nan_gives_none() {
        assert!(Stats::from_samples(&[]).is_none());
        assert!(Stats::from_samples(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn ratio_propagates_the_prediction_intervals() {
        let a = Stats::from_samples(&[9.0, 10.0, 11.0]).unwrap();
        let b = Stats::from_samples(&[5.0]).unwrap();
        let (r, u) = ratio_with_uncertainty(&a, &b);
        assert!((r - 2.0).abs() < 1e-12);
        // a: s = 1, half-width 4.303 · √(4/3) = 4.969 of a mean of 10; b adds nothing.
        assert!((u - 2.0 * 0.4969).abs() < 1e-3, "{u}");
    }

    #[test]
    fn a_prediction_interval_is_wide_from_few_runs_and_narrows_with_more() {
        assert_eq!(
            Stats::from_samples(&[10.0]).unwrap().prediction_interval(),
            None
        );
        // The README's case: runs at 165, 168 and 168 s; the next run at 170 s lies inside.
        let three = Stats::from_samples(&[165.0, 168.0, 168.0]).unwrap();
        let (lo, hi) = three.prediction_interval().unwrap();
        assert!(
            (lo - 158.4).abs() < 0.1 && (hi - 175.6).abs() < 0.1,
            "{lo} {hi}"
        );
        assert!(lo < 170.0 && 170.0 < hi);
        // The same spread over ten runs: t falls from 4.30 to 2.26.
        let ten = Stats::from_samples(&[
            165.0, 168.0, 168.0, 165.0, 168.0, 168.0, 165.0, 168.0, 168.0, 167.0,
        ])
        .unwrap();
        let h10 = ten.prediction_half_width().unwrap();
        assert!(h10 < three.prediction_half_width().unwrap() / 2.0, "{h10}");
    }

    #[test]
    fn welchs_test_matches_known_values() {
        // ln Γ(5) = ln 24; Γ(0.5) = √π.
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-10);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-10);
        // Student's t with 4 degrees of freedom: two-sided p of t = 2.776 is 0.05.
        assert!((incomplete_beta(2.0, 0.5, 4.0 / (4.0 + 2.776f64.powi(2))) - 0.05).abs() < 1e-3);
        // Two clearly different sets, and two that overlap.
        let w = welch(&[100.0, 101.0, 99.0], &[110.0, 111.0, 109.0]).unwrap();
        assert!((w.difference - 10.0).abs() < 1e-9 && w.p < 0.001, "{w:?}");
        assert!((w.df - 4.0).abs() < 1e-9);
        let w = welch(&[100.0, 104.0, 96.0], &[101.0, 105.0, 97.0]).unwrap();
        assert!(w.p > 0.5 && w.half_width > 1.0, "{w:?}");
        assert_eq!(welch(&[1.0], &[2.0, 3.0]), None);
        let same = welch(&[5.0, 5.0], &[5.0, 5.0]).unwrap();
        assert_eq!(same.p, 1.0);
    }

    /// Deterministic normal draws (an LCG through Box-Muller), so the simulations below are the
    /// same on every machine.
    struct Normal(u64);

    impl Normal {
        fn uniform(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        fn draw(&mut self, mean: f64, sd: f64) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            mean + sd * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// Run the rule as `--repeats auto` does, one pair at a time, on pairs whose log ratio is
    /// normal around `ln(1 + change)` with `sd`; where it stopped and with what.
    fn sequence(rule: &Sequential, rng: &mut Normal, change: f64, sd: f64) -> (Look, usize) {
        let mut d = Vec::new();
        for n in 1..=rule.max_pairs {
            d.push(rng.draw((1.0 + change).ln(), sd));
            if n >= rule.min_pairs {
                let look = rule.look(&d);
                if look != Look::Undecided {
                    return (look, n);
                }
            }
        }
        (Look::Undecided, rule.max_pairs)
    }

    #[test]
    fn the_sequential_rule_holds_its_error_rates_however_early_it_stops() {
        let rule = Sequential::KILN;
        let mut rng = Normal(7);
        // A/A: no change, 2% noise per pair (the maxpool runs' spread). A change is called at
        // most 5% of the time, whichever look it would have come at.
        let runs = 2000;
        let false_changes = (0..runs)
            .filter(|_| matches!(sequence(&rule, &mut rng, 0.0, 0.02).0, Look::Changed(_)))
            .count();
        assert!(
            false_changes as f64 / runs as f64 <= 0.05,
            "{false_changes} of {runs}"
        );
        // A change at the band's edge is called "within the band" at most 5% of the time.
        let false_within = (0..runs)
            .filter(|_| sequence(&rule, &mut rng, 0.03, 0.02).0 == Look::Within)
            .count();
        assert!(
            false_within as f64 / runs as f64 <= 0.05,
            "{false_within} of {runs}"
        );
        // A 4.6% slowdown with that noise is found, mostly well before the most pairs.
        let found: Vec<usize> = (0..200)
            .filter_map(|_| match sequence(&rule, &mut rng, 0.046, 0.02) {
                (Look::Changed(true), n) => Some(n),
                _ => None,
            })
            .collect();
        assert!(found.len() >= 180, "{} of 200", found.len());
        let mut sorted = found.clone();
        sorted.sort_unstable();
        assert!(
            sorted[sorted.len() / 2] <= 8,
            "median pairs {}",
            sorted[sorted.len() / 2]
        );
        // Quiet pairs (0.5% noise, no change) end inside the band.
        assert_eq!(sequence(&rule, &mut rng, 0.0, 0.005).0, Look::Within);
    }

    #[test]
    fn a_decision_stays_made_and_the_detectable_change_is_at_the_rules_level() {
        let rule = Sequential::KILN;
        // Decided "slower" at pair 3; pairs that follow and would undo it are not looked at.
        let d = [0.05, 0.05, 0.05, -0.2, 0.3, -0.1];
        assert_eq!(rule.first_decision(&d), (Look::Changed(true), 3));
        assert_eq!(rule.look(&d), Look::Undecided);
        // The rule's level per look (0.05/14) asks for a larger change than the 5% level does.
        let noisy = [0.02, -0.01, 0.03, 0.0, -0.02, 0.01];
        let at_rule = rule.detectable(&noisy).unwrap();
        let at_5 = paired(&noisy).unwrap().detectable.exp_m1();
        assert!(at_rule > 1.3 * at_5, "{at_rule} against {at_5}");
        // Split over two cells, each look tests at half the level.
        assert!((rule.over(2).alpha_per_look() - rule.alpha_per_look() / 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_look_before_the_first_pairs_or_on_identical_pairs_is_plain() {
        let rule = Sequential::KILN;
        assert_eq!(rule.look(&[0.05, 0.05]), Look::Undecided);
        assert_eq!(rule.look(&[0.05; 3]), Look::Changed(true));
        assert_eq!(rule.look(&[0.0; 3]), Look::Within);
        // A sure change under the 1% floor is no change; it is within the band.
        assert_eq!(rule.look(&[0.005; 4]), Look::Within);
        assert!((rule.alpha_per_look() - 0.05 / 14.0).abs() < 1e-12);
    }
}
