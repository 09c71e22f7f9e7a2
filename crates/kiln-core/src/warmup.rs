//! Warm-up to steady state, shared by Kiln's loop and the Learner's clock: every step before
//! steady state is synced and its time kept; the protocol's rule
//! ([`kiln_contract::TimingRules::is_steady`]) says when the times have settled; from then on
//! the loops time chunks and epochs, and the budget counts. A cell whose times do not settle
//! within the warm-up cap stops, `not steady`. After steady state every step is still checked
//! (by its host time, no sync): one far beyond the steady step is a late compile
//! ([`TimingRules::late_compile`]), its excess kept out of the timed chunk and counted here.

use std::time::{Duration, Instant};

use kiln_contract::{LateCompile, SlowSteps, TimingRules, Warmup};

/// Where a cell's warm-up stands after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WarmupPhase {
    /// Still warming up: this step is not timed.
    Warming,
    /// This step made the times steady: the next one is the first timed step.
    Settled,
    /// The cap ran out before the times settled: stop the cell.
    OverCap,
}

/// The warm-up clock of one cell.
#[derive(Debug)]
pub(crate) struct WarmupClock {
    rules: TimingRules,
    cap: Duration,
    slow: Option<SlowSteps>,
    first_step: Option<Instant>,
    step_seconds: Vec<f64>,
    steady_at: Option<Instant>,
    epoch: usize,
    seconds: f64,
    /// The process's age when the clock was made (read once, before training) and that
    /// instant: the age at steady state is derived from them, with no read during warm-up.
    born: (Option<f64>, Instant),
    process_seconds: Option<f64>,
    /// The synced steady step: the median of the window that made the times steady.
    steady_step: f64,
    /// The host times of the latest steps after steady state (not late compiles).
    recent: std::collections::VecDeque<f64>,
    late: Vec<LateCompile>,
    late_count: usize,
    late_seconds: f64,
    /// The warm-up's peak resident set, read at steady state before the mark was reset.
    peak_rss: Option<u64>,
}

/// Steady steps whose running median the late-compile rule compares with.
const RECENT_STEPS: usize = 15;

impl WarmupClock {
    pub(crate) fn new(rules: TimingRules, cap: Duration, slow: Option<SlowSteps>) -> Self {
        WarmupClock {
            rules,
            cap,
            slow,
            first_step: None,
            step_seconds: Vec::new(),
            steady_at: None,
            epoch: 0,
            seconds: 0.0,
            born: (kiln_machine::process::age_seconds(), Instant::now()),
            process_seconds: None,
            steady_step: 0.0,
            recent: std::collections::VecDeque::new(),
            late: Vec::new(),
            late_count: 0,
            late_seconds: 0.0,
            peak_rss: None,
        }
    }

    /// Whether steady state was reached (every later step is timed).
    pub(crate) fn settled(&self) -> bool {
        self.steady_at.is_some()
    }

    /// Treat the times as steady from `now` (the loop-overhead measurement warms up on its
    /// own and compares whole sub-epochs).
    pub(crate) fn assume_steady(&mut self, now: Instant) {
        self.steady_at.get_or_insert(now);
    }

    /// The injected delay of step `step` (1-based), slept by the loop inside the step.
    pub(crate) fn inject(&self, step: usize) {
        if let Some(delay) = self.slow.and_then(|s| s.delay(step)) {
            std::thread::sleep(delay);
        }
    }

    /// Mark the start of the first step (the warm-up's clock starts here).
    pub(crate) fn first_step_starts(&mut self, at: Instant) {
        self.first_step.get_or_insert(at);
    }

    /// A warm-up step of `seconds` (synced) ended at `now`, in epoch `epoch` (from 1).
    pub(crate) fn step(&mut self, seconds: f64, now: Instant, epoch: usize) -> WarmupPhase {
        if self.settled() {
            return WarmupPhase::Settled;
        }
        self.step_seconds.push(seconds);
        let start = *self.first_step.get_or_insert(now);
        self.seconds = (now - start).as_secs_f64();
        self.epoch = epoch;
        let (age, at) = self.born;
        self.process_seconds = age.map(|a| a + (now - at).as_secs_f64());
        if self.rules.is_steady(&self.step_seconds) {
            self.steady_at = Some(now);
            let window = self.rules.steady_window.max(1);
            let last = &self.step_seconds[self.step_seconds.len() - window..];
            self.steady_step = kiln_contract::stats::median(last).unwrap_or(0.0);
            // The warm-up's peak apart: from here on the high-water mark is steady state's.
            let peak = kiln_machine::process::peak_rss_bytes();
            self.peak_rss = peak.filter(|_| kiln_machine::process::reset_peak());
            WarmupPhase::Settled
        } else if now - start >= self.cap {
            WarmupPhase::OverCap
        } else {
            WarmupPhase::Warming
        }
    }

    /// A step after steady state took `seconds` on the host (step `step` of the cell, in
    /// epoch `epoch`): its excess over the steady step when the rule calls it a late compile
    /// (counted here; the loop keeps it out of its chunk), else 0.
    pub(crate) fn timed_step(&mut self, seconds: f64, step: usize, epoch: usize) -> f64 {
        let running = kiln_contract::stats::median(self.recent.make_contiguous()).unwrap_or(0.0);
        let reference = self.steady_step.max(running);
        match self.rules.late_compile(seconds, reference) {
            Some(excess) => {
                self.late_count += 1;
                self.late_seconds += excess;
                if self.late.len() < Warmup::KEPT_STEPS {
                    self.late.push(LateCompile {
                        step,
                        epoch,
                        seconds,
                        excess_seconds: excess,
                    });
                }
                excess
            }
            None => {
                if self.recent.len() == RECENT_STEPS {
                    self.recent.pop_front();
                }
                self.recent.push_back(seconds);
                0.0
            }
        }
    }

    /// The first warm-up step's synced seconds (compilation, autotune, caches).
    pub(crate) fn first_step_seconds(&self) -> Option<f64> {
        self.step_seconds.first().copied()
    }

    /// The record's figure (`None` before any step).
    pub(crate) fn summary(&self) -> Option<Warmup> {
        (!self.step_seconds.is_empty()).then(|| Warmup {
            steady: self.settled(),
            steps: self.step_seconds.len(),
            seconds: self.seconds,
            process_seconds: self.process_seconds,
            epoch: self.epoch,
            cap_seconds: self.cap.as_secs_f64(),
            step_seconds: self
                .step_seconds
                .iter()
                .take(Warmup::KEPT_STEPS)
                .copied()
                .collect(),
            late_compiles: self.late_count,
            late_compile_seconds: self.late_seconds,
            late_compile_steps: self.late.clone(),
            peak_rss_bytes: self.peak_rss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_settles_by_the_rule_and_stops_at_its_cap() {
        let t0 = Instant::now();
        let mut clock = WarmupClock::new(TimingRules::KILN, Duration::from_secs(60), None);
        clock.first_step_starts(t0);
        let times = [5.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1];
        let mut at = t0;
        let mut phases = Vec::new();
        for t in times {
            at += Duration::from_secs_f64(t);
            phases.push(clock.step(t, at, 1));
        }
        // Steps 5-7 against 2-4 (medians 0.1 and 0.1): steady at the seventh step; a step
        // after that is timed, not kept.
        assert_eq!(
            phases
                .iter()
                .filter(|p| **p == WarmupPhase::Warming)
                .count(),
            6
        );
        assert_eq!(phases[6], WarmupPhase::Settled);
        let w = clock.summary().unwrap();
        assert!(
            w.steady && w.steps == 7 && (w.seconds - 6.5).abs() < 1e-6,
            "{w:?}"
        );

        let mut clock = WarmupClock::new(TimingRules::KILN, Duration::from_secs(3), None);
        clock.first_step_starts(t0);
        let mut at = t0;
        let mut last = WarmupPhase::Warming;
        for i in 0..100 {
            let t = if i % 2 == 0 { 1.0 } else { 0.01 };
            at += Duration::from_secs_f64(t);
            last = clock.step(t, at, 1);
            if last != WarmupPhase::Warming {
                break;
            }
        }
        assert_eq!(last, WarmupPhase::OverCap);
        assert!(!clock.summary().unwrap().steady);
    }
}
