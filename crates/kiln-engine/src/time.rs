//! Time as users write it and read it: UTC stamps for run directories, durations on the
//! command line (humantime), short durations in progress lines.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYYMMDD-HHMMSS` in UTC, for run directory names.
pub fn stamp(unix: u64) -> String {
    let at = UNIX_EPOCH + std::time::Duration::from_secs(unix);
    // `YYYY-MM-DDTHH:MM:SSZ` without its separators.
    let rfc3339 = humantime::format_rfc3339_seconds(at).to_string();
    let digits: String = rfc3339.chars().filter(char::is_ascii_digit).collect();
    format!("{}-{}", &digits[..8], &digits[8..])
}

/// A duration a user gives: seconds (`90`, `0.5`) or humantime's form (`90s`, `5m`, `1h30m`,
/// `1h 30m`); `none` is no limit. Zero is refused.
pub fn parse_duration(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bad = |why: String| {
        format!("invalid duration {text:?} ({why}): use seconds (90), 90s, 5m, 1h, 1m30s or none")
    };
    let d = match t.parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs).map_err(|e| bad(e.to_string()))?,
        Err(_) => humantime::parse_duration(t).map_err(|e| bad(e.to_string()))?,
    };
    if d.is_zero() {
        return Err(bad("zero".into()));
    }
    Ok(Some(d))
}

/// `--budget`: a time limit per cell, or none (`none`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget(pub Option<Duration>);

/// `--budget`'s value parser.
pub fn parse_budget(text: &str) -> Result<Budget, String> {
    parse_duration(text).map(Budget)
}

/// `--wait-quiet`'s value parser: a bound is needed.
pub fn parse_bound(text: &str) -> Result<Duration, String> {
    parse_duration(text)?.ok_or_else(|| "give a bound (e.g. 2m), not none".to_string())
}

/// `--warmup-cap`'s value parser: a bound, in seconds (the setting's unit).
pub fn parse_bound_seconds(text: &str) -> Result<f64, String> {
    parse_bound(text).map(|d| d.as_secs_f64())
}

/// `1m05s`-style durations for progress lines.
pub fn short(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps() {
        assert_eq!(super::stamp(0), "19700101-000000");
        assert_eq!(super::stamp(1_796_039_302), "20261130-114822");
        assert_eq!(super::short(65.0), "1m05s");
    }

    #[test]
    fn durations() {
        use super::parse_duration as p;
        use std::time::Duration;
        assert_eq!(p("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(p("0.5").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(p("1m30s").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(p("1h 30m").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(p("2h").unwrap(), Some(Duration::from_secs(7200)));
        assert_eq!(p("none").unwrap(), None);
        for bad in ["", "0", "0s", "-5", "5x", "m", "5m3", "nan", "1e300"] {
            let err = p(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
        assert!(super::parse_bound("none").is_err());
    }
}
