//! What a runner prints on its standard output: one JSON line per event, the last one its
//! record (a Rust runner's) or what it observed (the PyTorch reference's).

use serde::{Deserialize, Serialize};

use crate::observe::Observed;
use crate::schema::{EpochSummary, Record};

/// One line of a runner's standard output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The cell has loaded its data and is about to train.
    Start(Start),
    /// Periodic progress while training (no device sync is implied).
    Progress(Progress),
    /// One finished epoch, as measured.
    Epoch(EpochSummary),
    /// The cell's final record; exactly one per cell (Rust runners).
    Final(Box<Record>),
    /// What a runner that leaves the record to Kiln observed (the PyTorch reference): xtask
    /// turns it into the final record with [`Observed::into_record`].
    Observed(Box<Observed>),
}

/// What a cell announces once its data is on the device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Start {
    pub model: String,
    pub backend: String,
    pub device: String,
    pub device_name: String,
    pub precision: String,
    pub dataset: String,
    pub train_samples: usize,
    pub test_samples: usize,
    pub steps_per_epoch: usize,
    pub epochs: usize,
    pub budget_seconds: Option<f64>,
}

/// A progress tick: where training is and how long it will probably take.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Progress {
    pub epoch: usize,
    pub step: usize,
    pub steps_per_epoch: usize,
    pub elapsed_seconds: f64,
    /// Estimated seconds left in this cell's training, bounded by its budget.
    pub eta_seconds: Option<f64>,
}
