//! The protocol's constants that every runner (Rust and Python) and every record share: when a
//! runner reads its clocks, and Adam's learning rate unless the user sets another.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Adam's learning rate unless `--lr` says otherwise: the article's 1e-3.
pub const LEARNING_RATE: f64 = 1e-3;

/// The seed of initialisation, shuffling and synthetic data unless `--seed` says otherwise.
pub const SEED: u64 = 42;

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
    /// Steps timed after steady state before the budget may stop a cell.
    pub min_timed_steps: usize,
    /// Steady state: the median of the last this-many synced step times ...
    #[serde(default = "steady_window")]
    pub steady_window: usize,
    /// ... is within this share of the median of the window before it ...
    #[serde(default = "steady_tolerance")]
    pub steady_tolerance: f64,
    /// ... and no step of the last window took more than this many times its median (a step
    /// that compiles or autotunes a kernel does).
    #[serde(default = "steady_spike")]
    pub steady_spike: f64,
    /// After steady state, a step whose host time is over this many times the steady step
    /// (the larger of the synced steady median and the running median of steady steps) ...
    #[serde(default = "late_factor")]
    pub late_factor: f64,
    /// ... and longer than it by over this many seconds is a late compile (a batch shape seen
    /// for the first time): its excess is kept out of the chunk and epoch it fell in.
    #[serde(default = "late_floor_seconds")]
    pub late_floor_seconds: f64,
}

fn steady_window() -> usize {
    TimingRules::KILN.steady_window
}

fn steady_tolerance() -> f64 {
    TimingRules::KILN.steady_tolerance
}

fn steady_spike() -> f64 {
    TimingRules::KILN.steady_spike
}

fn late_factor() -> f64 {
    TimingRules::KILN.late_factor
}

fn late_floor_seconds() -> f64 {
    TimingRules::KILN.late_floor_seconds
}

impl TimingRules {
    /// Kiln's rules: ten chunks an epoch, a twelfth of the budget, two timed steps; steady
    /// when the median of the last 3 step times is within 10% of the 3 before and none of the
    /// last 3 took over 3 times their median; after that, a step over 5 times the steady step
    /// and 50 ms longer than it is a late compile.
    pub const KILN: TimingRules = TimingRules {
        chunks_per_epoch: 10,
        chunks_per_budget: 12,
        min_timed_steps: 2,
        steady_window: 3,
        steady_tolerance: 0.10,
        steady_spike: 3.0,
        late_factor: 5.0,
        late_floor_seconds: 0.05,
    };

    /// Steady after the second step whatever the times: for tests, which assert behaviour and
    /// must not depend on how fast a machine runs (like records made before the steady-state
    /// rule, whose first step was their warm-up).
    pub const SETTLE_AT_ONCE: TimingRules = TimingRules {
        steady_window: 1,
        steady_tolerance: 1e9,
        steady_spike: 1e9,
        ..TimingRules::KILN
    };

    /// Whether the synced step times `steps` (every warm-up step so far, in order) have
    /// settled: the rule every runner applies after each warm-up step (the PyTorch reference's
    /// `steady` in warmup.py is the same rule; a test runs both on the same series).
    pub fn is_steady(&self, steps: &[f64]) -> bool {
        let k = self.steady_window.max(1);
        if steps.len() < 2 * k {
            return false;
        }
        let last = &steps[steps.len() - k..];
        let before = &steps[steps.len() - 2 * k..steps.len() - k];
        let median = |v: &[f64]| crate::stats::median(v).unwrap_or(f64::NAN);
        let (m_last, m_before) = (median(last), median(before));
        if !(m_last.is_finite() && m_before > 0.0) {
            return false;
        }
        let settled = (m_last - m_before).abs() <= self.steady_tolerance * m_before;
        let no_spike = last.iter().all(|&s| s <= self.steady_spike * m_last);
        settled && no_spike
    }

    /// The excess over `reference` seconds (the steady step) of a step after steady state
    /// that took `seconds`, when it is a late compile by the rule; `None` otherwise.
    pub fn late_compile(&self, seconds: f64, reference: f64) -> Option<f64> {
        let excess = seconds - reference;
        (seconds > self.late_factor * reference && excess > self.late_floor_seconds)
            .then_some(excess)
    }

    /// Steps in one chunk of an epoch of `steps_per_epoch` steps.
    pub fn chunk_steps(&self, steps_per_epoch: usize) -> usize {
        (steps_per_epoch / self.chunks_per_epoch.max(1)).max(1)
    }

    /// The longest a chunk runs under `budget` (none without a budget).
    pub fn chunk_time(&self, budget: Option<Duration>) -> Option<Duration> {
        budget.map(|b| b / self.chunks_per_budget.max(1))
    }
}

/// Whether a steady cell's `budget` has run out, by the rule every loop shares (Kiln's, the
/// Learner's clock, warmup.py's `budget_spent`): the seconds of steady-state training timed in
/// the closed chunks (their steps and seconds) and the `open` one (late compiles apart) reach
/// it, with at least `min_timed_steps` steps timed. Evaluation and late compiles never count.
pub fn budget_spent(
    budget: Option<Duration>,
    min_timed_steps: usize,
    chunks: impl IntoIterator<Item = (usize, f64)>,
    open: (usize, f64),
) -> bool {
    let (steps, seconds) = chunks
        .into_iter()
        .fold(open, |(n, s), (steps, seconds)| (n + steps, s + seconds));
    budget.is_some_and(|b| seconds >= b.as_secs_f64() && steps >= min_timed_steps)
}

impl Default for TimingRules {
    fn default() -> Self {
        TimingRules::KILN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_steady_once_two_windows_agree_without_a_spike() {
        let rules = TimingRules::KILN;
        // A compile-heavy first step, then a settled backend.
        let compiling = [54.0, 0.9, 0.11, 0.10, 0.10, 0.11, 0.10];
        assert!(!rules.is_steady(&compiling[..5]));
        assert!(
            !rules.is_steady(&compiling[..6]),
            "the first window holds 0.9"
        );
        assert!(rules.is_steady(&compiling));
        // Too few steps to compare two windows.
        assert!(!rules.is_steady(&[0.1; 5]));
        assert!(rules.is_steady(&[0.1; 6]));
        // Still getting faster by more than 10% a window.
        assert!(!rules.is_steady(&[2.0, 2.0, 2.0, 1.5, 1.5, 1.5]));
        // A spike in the last window (a kernel compiled on this step) is not steady.
        assert!(!rules.is_steady(&[0.1, 0.1, 0.1, 0.1, 0.1, 0.5]));
        // Alternating slow and fast steps never settle.
        let alternating: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 1.0 } else { 0.01 })
            .collect();
        assert!(!(6..=40).any(|n| rules.is_steady(&alternating[..n])));
    }

    #[test]
    fn a_late_compile_is_far_beyond_the_steady_step_by_both_measures() {
        let rules = TimingRules::KILN;
        // A new batch shape compiling for 3.6 s against a 0.2 ms step.
        assert!((rules.late_compile(3.6, 0.0002).unwrap() - 3.5998).abs() < 1e-9);
        // A CPU step jittering to 4 times its median is no compile.
        assert_eq!(rules.late_compile(2.8, 0.7), None);
        // Nor is a tiny step six times a tinier one (under the 50 ms floor).
        assert_eq!(rules.late_compile(0.006, 0.001), None);
        assert!(rules.late_compile(4.0, 0.7).is_some());
    }
}
