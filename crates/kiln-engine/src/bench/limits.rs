//! A running cell's limits: its wall-clock limit from the budget, the phase it is in (as its
//! events tell), and the reason a cell killed at its limit gets, naming the phase.

use std::time::{Duration, Instant};

use kiln_report::fields::human_seconds;

/// Where a running cell is, as its events tell: xtask names the phase a cell was killed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchPhase {
    /// Until the runner's start event: loading data, opening the device.
    Starting,
    /// Until the first progress: the first step, which carries kernel compilation and autotune
    /// on GPU backends.
    FirstStep,
    Training,
}

impl WatchPhase {
    pub(super) fn name(self) -> &'static str {
        match self {
            WatchPhase::Starting => "start-up (loading data, opening the device)",
            WatchPhase::FirstStep => {
                "the first step (kernel compilation and autotune on JIT backends)"
            }
            WatchPhase::Training => "training",
        }
    }
}

/// The phases a cell went through, with how long each took, and the one it is in.
pub(super) struct PhaseClock {
    pub(super) done: Vec<(WatchPhase, f64)>,
    pub(super) phase: WatchPhase,
    pub(super) since: Instant,
}

impl PhaseClock {
    pub(super) fn new() -> Self {
        PhaseClock {
            done: Vec::new(),
            phase: WatchPhase::Starting,
            since: Instant::now(),
        }
    }

    /// Move to `next` (nothing when the cell is in it already).
    pub(super) fn enter(&mut self, next: WatchPhase) {
        if self.phase != next {
            self.done.push((self.phase, self.elapsed()));
            (self.phase, self.since) = (next, Instant::now());
        }
    }

    /// Seconds in the current phase.
    pub(super) fn elapsed(&self) -> f64 {
        self.since.elapsed().as_secs_f64()
    }

    /// Seconds since the cell started.
    pub(super) fn total(&self) -> f64 {
        self.done.iter().map(|(_, s)| s).sum::<f64>() + self.elapsed()
    }
}

/// A cell's wall-clock limits, one per phase, each counted from the phase's start: a first step
/// that compiles and autotunes kernels on the CPU (lavapipe, cold cache: about 9 minutes here)
/// then never eats the time its training is given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Loading data and opening the device.
    pub start_up: Duration,
    /// The first training step.
    pub first_step: Duration,
    /// Everything after it: training, evaluation, the record.
    pub training: Duration,
    /// The whole cell, start to record (a planned cell's: its planned time and a margin,
    /// within what is left of the run's time).
    pub whole: Option<Duration>,
}

impl Limits {
    /// Every phase held to one limit.
    pub fn all(limit: Duration) -> Self {
        Limits {
            start_up: limit,
            first_step: limit,
            training: limit,
            whole: None,
        }
    }

    /// The limit that `clock` ran past, if any: its phase's, or the whole cell's.
    pub(super) fn exceeded(&self, clock: &PhaseClock) -> Option<Overrun> {
        let phase = self.of(clock.phase);
        if clock.elapsed() > phase.as_secs_f64() {
            return Some(Overrun {
                limit: phase,
                whole: false,
            });
        }
        self.whole
            .filter(|w| clock.total() > w.as_secs_f64())
            .map(|limit| Overrun { limit, whole: true })
    }

    pub(super) fn of(&self, phase: WatchPhase) -> Duration {
        match phase {
            WatchPhase::Starting => self.start_up,
            WatchPhase::FirstStep => self.first_step,
            WatchPhase::Training => self.training,
        }
    }
}

/// A limit a cell ran past, and whether it was the whole cell's (else its phase's own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Overrun {
    pub(super) limit: Duration,
    pub(super) whole: bool,
}

/// A cell's wall-clock limits: ten minutes to start, its warm-up cap plus two minutes for the
/// first step (the runner itself stops a warm-up at its cap), and for the rest its warm-up cap
/// and its budget three times over plus ten minutes for evaluating and for the kernels only
/// later steps and evaluation compile (a day without a budget).
pub(super) fn wall_clock_limit(budget_seconds: Option<f64>, warmup_cap_seconds: f64) -> Limits {
    Limits {
        start_up: Duration::from_secs(600),
        first_step: Duration::from_secs_f64(warmup_cap_seconds + 120.0),
        training: Duration::from_secs_f64(
            warmup_cap_seconds + budget_seconds.map_or(24.0 * 3600.0, |b| b * 3.0 + 600.0),
        ),
        whole: None,
    }
}

/// A planned cell's watchdog: its planned seconds and a margin (half again, and 20 s for this
/// machine's start-up), never past what is `left` of the run's time.
pub(super) fn planned_limit(planned_seconds: f64, left: Option<Duration>) -> Duration {
    let own = Duration::from_secs_f64(planned_seconds * 1.5 + 20.0);
    left.map_or(own, |left| own.min(left))
}

/// Why a cell that hit its wall-clock limit failed: the phase it was in, that phase's limit, and
/// how long each phase took.
pub(super) fn timeout_reason(
    limit: f64,
    done: &[(WatchPhase, f64)],
    current: (WatchPhase, f64),
) -> String {
    let mut parts: Vec<String> = done
        .iter()
        .map(|(p, s)| format!("{} took {}", p.name(), human_seconds(*s)))
        .collect();
    parts.push(format!(
        "{} had run {}",
        current.0.name(),
        human_seconds(current.1)
    ));
    format!(
        "timed out during {} after its limit of {} ({})",
        current.0.name(),
        human_seconds(limit),
        parts.join(", ")
    )
}
