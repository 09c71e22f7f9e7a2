//! The protocol's constants that every runner (Rust and Python) and every record share: when a
//! runner reads its clocks, and Adam's learning rate unless the user sets another.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Adam's learning rate unless `--lr` says otherwise: the article's 1e-3.
pub const LEARNING_RATE: f64 = 1e-3;

pub(crate) fn default_learning_rate() -> f64 {
    LEARNING_RATE
}

/// The protocol's timing rules: when a runner reads its synced clocks. Every runner takes them
/// from its request (the PyTorch reference too), so they are written once, here.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TimingRules {
    /// A chunk of steady-state steps closes after an epoch's steps divided by this (at least
    /// one step), so that a cell cut short by its budget can be projected.
    pub chunks_per_epoch: usize,
    /// A chunk also closes after the budget divided by this: a slow cell still gets chunks.
    pub chunks_per_budget: u32,
    /// Steps timed after the warm-up step before the budget may stop a cell.
    pub min_timed_steps: usize,
}

impl TimingRules {
    /// Kiln's rules: ten chunks an epoch, a twelfth of the budget, two timed steps.
    pub const KILN: TimingRules = TimingRules {
        chunks_per_epoch: 10,
        chunks_per_budget: 12,
        min_timed_steps: 2,
    };

    /// Steps in one chunk of an epoch of `steps_per_epoch` steps.
    pub fn chunk_steps(&self, steps_per_epoch: usize) -> usize {
        (steps_per_epoch / self.chunks_per_epoch.max(1)).max(1)
    }

    /// The longest a chunk runs under `budget` (none without a budget).
    pub fn chunk_time(&self, budget: Option<Duration>) -> Option<Duration> {
        budget.map(|b| b / self.chunks_per_budget.max(1))
    }
}

impl Default for TimingRules {
    fn default() -> Self {
        TimingRules::KILN
    }
}
