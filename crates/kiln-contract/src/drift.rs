//! How far the machine itself drifted over a run: each backend's GEMM peak measured again at
//! the run's end (runs with repeats) against its start. xtask writes `drift.json` in the run
//! directory; the reader attaches its share to each record of that run, and a row's interval
//! for the next run is never narrower than it (`Stats::floor`).

use serde::{Deserialize, Serialize};

/// The run directory's drift file.
pub const DRIFT_FILE: &str = "drift.json";

/// One backend's GEMM peak at the run's start and end.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Recalibration {
    pub backend: String,
    pub device: String,
    pub weights: String,
    pub start_gflops: f64,
    pub end_gflops: f64,
}

impl Recalibration {
    /// How far the peak moved, as a share of the start's.
    pub fn change(&self) -> f64 {
        (self.end_gflops / self.start_gflops - 1.0).abs()
    }
}

/// `drift.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunDrift {
    pub calibrations: Vec<Recalibration>,
    /// The largest change: the floor of every interval of the run.
    pub share: f64,
}

impl RunDrift {
    /// The drift of `calibrations`; `None` when there is none, or a peak is not positive.
    pub fn of(calibrations: Vec<Recalibration>) -> Option<RunDrift> {
        let valid = calibrations
            .iter()
            .all(|c| c.start_gflops > 0.0 && c.end_gflops > 0.0);
        let share = calibrations
            .iter()
            .map(Recalibration::change)
            .reduce(f64::max)
            .filter(|s| valid && s.is_finite())?;
        Some(RunDrift {
            calibrations,
            share,
        })
    }
}
