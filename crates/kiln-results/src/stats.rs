//! Summary statistics of repeated timings.

use serde::{Deserialize, Serialize};

/// Median, extremes and spread of a set of samples (seconds, usually).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single sample.
    pub stddev: f64,
    pub n: usize,
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

    /// The same statistics with every value multiplied by `factor` (a change of unit or scale).
    pub fn scaled(&self, factor: f64) -> Stats {
        Stats {
            median: self.median * factor,
            min: self.min * factor,
            max: self.max * factor,
            mean: self.mean * factor,
            stddev: self.stddev * factor,
            n: self.n,
        }
    }
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

/// `a / b` with its standard deviation propagated from both (first-order, independent errors),
/// as hyperfine reports relative speed.
pub fn ratio_with_uncertainty(a: &Stats, b: &Stats) -> (f64, f64) {
    let ratio = a.median / b.median;
    let rel_a = if a.mean != 0.0 {
        a.stddev / a.mean
    } else {
        0.0
    };
    let rel_b = if b.mean != 0.0 {
        b.stddev / b.mean
    } else {
        0.0
    };
    (ratio, ratio * (rel_a.powi(2) + rel_b.powi(2)).sqrt())
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
    fn empty_or_nan_gives_none() {
        assert!(Stats::from_samples(&[]).is_none());
        assert!(Stats::from_samples(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn ratio_propagates_relative_errors() {
        let a = Stats::from_samples(&[9.0, 10.0, 11.0]).unwrap();
        let b = Stats::from_samples(&[5.0]).unwrap();
        let (r, u) = ratio_with_uncertainty(&a, &b);
        assert!((r - 2.0).abs() < 1e-12);
        assert!((u - 0.2).abs() < 1e-12, "{u}");
    }
}
