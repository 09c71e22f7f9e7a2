//! What the two run profiles mean, and duration parsing, shared by xtask and the runners.

use std::time::Duration;

use crate::vocab::{ModelKind, Profile, Vocabulary};

impl Profile {
    /// `Quick` when `quick` is set (the `--quick` flag), else `Full`.
    pub fn from_quick(quick: bool) -> Profile {
        if quick { Profile::Quick } else { Profile::Full }
    }

    /// Epochs per cell.
    pub fn epochs(self) -> usize {
        match self {
            Profile::Quick => 3,
            Profile::Full => 20,
        }
    }

    /// Independent runs of each cell (`--repeats`): the full profile repeats so that every
    /// row has a spread between runs; the quick one runs once and says "single run".
    pub fn repeats(self) -> usize {
        match self {
            Profile::Quick => 1,
            Profile::Full => 3,
        }
    }

    /// Batch size (the article's).
    pub fn batch_size(self) -> usize {
        128
    }

    /// Per-cell training budget.
    pub fn budget(self) -> Option<Duration> {
        match self {
            Profile::Quick => Some(Duration::from_secs(200)),
            Profile::Full => Some(Duration::from_secs(20 * 60)),
        }
    }

    /// Models `bench-all` runs by default.
    pub fn models(self) -> &'static [ModelKind] {
        match self {
            Profile::Quick => &[ModelKind::MnistCnn],
            Profile::Full => ModelKind::ALL,
        }
    }

    /// Training budget of a cell on a CPU-emulated GPU adapter (lavapipe takes seconds per
    /// step) when no `--budget` is given: enough for the warm-up step and a few timed steps.
    pub fn emulated_budget(self) -> Duration {
        match self {
            Profile::Quick => Duration::from_secs(30),
            Profile::Full => Duration::from_secs(120),
        }
    }

    /// Samples of a synthetic set (train, test).
    pub fn synthetic_sizes(self, standard_epoch: usize) -> (usize, usize) {
        match self {
            Profile::Quick => (8_000, 2_000),
            Profile::Full => (standard_epoch, 10_000),
        }
    }
}

/// Parse `90`, `90s`, `5m`, `1h`, `1m30s` or `none` (no budget).
pub fn parse_duration(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bad = || format!("invalid duration {text:?}: use seconds (90), 90s, 5m, 1h, 1m30s or none");
    if let Ok(secs) = t.parse::<f64>() {
        return (secs.is_finite() && secs > 0.0)
            .then(|| Some(Duration::from_secs_f64(secs)))
            .ok_or_else(bad);
    }
    let mut total = 0.0;
    let mut number = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        number.clear();
        total += value
            * match c {
                's' => 1.0,
                'm' => 60.0,
                'h' => 3600.0,
                _ => return Err(bad()),
            };
    }
    if !number.is_empty() || total <= 0.0 || !total.is_finite() {
        return Err(bad());
    }
    Ok(Some(Duration::from_secs_f64(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("1m30s").unwrap(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("2h").unwrap(),
            Some(Duration::from_secs(7200))
        );
        assert_eq!(parse_duration("none").unwrap(), None);
        for bad in ["", "0", "-5", "5x", "m", "5m3", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
