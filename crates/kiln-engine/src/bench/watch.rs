//! A cell's runner watched while it runs: its JSON lines read as they come (the record, the
//! progress shown), the machine sampled at the edges of the windows its noise is measured over,
//! its wall-clock limit per phase enforced, Ctrl-C honoured.

use std::time::Duration;

use kiln_contract::{CellRequest, Event, Record};
use kiln_report::fields::human_seconds;
use kiln_report::units::percent;

use super::interrupt::interrupted;
use super::limits::{Limits, Overrun, PhaseClock, WatchPhase};
use super::noise::{self, CpuSample};
use super::progress::{Display, Position};
use crate::supervise::{Out, Supervised};
use crate::time;
use crate::workspace::fingerprint_here;

/// What was seen of a runner until its output closed (or it was killed).
pub(super) struct Watched {
    pub record: Option<Record>,
    /// Output lines that were not events (the last one is quoted when there is no record).
    pub unparsed: Vec<String>,
    /// Killed by its wall-clock limit (this one).
    pub timed_out: Option<Overrun>,
    pub clock: PhaseClock,
    /// The machine at the start of training, the end of the warm-up epoch, the last epoch
    /// and the final record.
    pub trained_from: Option<CpuSample>,
    pub warm_until: Option<CpuSample>,
    pub last_epoch: Option<CpuSample>,
    pub ended: Option<CpuSample>,
}

/// Who a runner's lines are about: the request, how to name the cell and where it stands.
pub(super) struct Watching<'a> {
    pub request: &'a CellRequest,
    pub label: &'a str,
    pub position: &'a Position,
    pub limits: Limits,
    pub revision: &'a (Option<String>, Option<bool>),
}

/// Read `child`'s output until it closes, or kill it at its phase's limit or on Ctrl-C.
pub(super) fn watch(child: &mut Supervised, w: &Watching, display: &mut Display) -> Watched {
    let pid = child.pid();
    let mut seen = Watched {
        record: None,
        unparsed: Vec::new(),
        timed_out: None,
        clock: PhaseClock::new(),
        trained_from: None,
        warm_until: None,
        last_epoch: None,
        ended: None,
    };
    loop {
        match child.next(Duration::from_millis(500)) {
            Out::Line(line) => match serde_json::from_str::<Event>(&line) {
                Ok(event) => on_event(event, pid, w, &mut seen, display),
                Err(_) => seen.unparsed.push(line),
            },
            Out::Closed => break,
            Out::Quiet => {
                if interrupted() {
                    child.kill();
                    break;
                }
                if let Some(overrun) = w.limits.exceeded(&seen.clock) {
                    child.kill();
                    seen.timed_out = Some(overrun);
                    break;
                }
                if seen.clock.phase == WatchPhase::FirstStep {
                    display.status(
                        0,
                        w.label,
                        &format!(
                            "first step · {} (where a JIT backend, CubeCL's on a GPU or \
                             the CPU, compiles and autotunes its kernels)",
                            time::short(seen.clock.elapsed())
                        ),
                        "",
                    );
                }
            }
        }
    }
    seen
}

/// One event of the runner: the record kept, the phase and the machine's samples moved on,
/// progress shown.
fn on_event(event: Event, pid: u32, w: &Watching, seen: &mut Watched, display: &mut Display) {
    let label = w.label;
    match event {
        Event::Final(record) => {
            seen.ended = noise::sample(Some(pid));
            seen.record = Some(*record);
        }
        // A runner that leaves its record to Kiln (the PyTorch reference).
        Event::Observed(observed) => {
            seen.ended = noise::sample(Some(pid));
            let (commit, dirty) = w.revision;
            seen.record = Some(observed_record(*observed, w.request, commit, *dirty));
        }
        Event::Start(s) => {
            seen.clock.enter(WatchPhase::FirstStep);
            seen.trained_from = noise::sample(Some(pid));
            display.line(&format!(
                "{label}: {} train / {} test samples, {} steps per epoch, {} epochs, budget {}",
                s.train_samples,
                s.test_samples,
                s.steps_per_epoch,
                s.epochs,
                s.budget_seconds
                    .map(human_seconds)
                    .unwrap_or_else(|| "none".into())
            ));
            display.start_cell((s.steps_per_epoch * s.epochs) as u64);
        }
        Event::Epoch(e) => {
            seen.clock.enter(WatchPhase::Training);
            if e.epoch == 1 {
                seen.warm_until = noise::sample(Some(pid));
            } else {
                seen.last_epoch = noise::sample(Some(pid));
            }
            display.line(&format!(
                "{label}: epoch {}{}: {} over {} steps, loss {:.4}, test accuracy {}",
                e.epoch,
                if e.partial {
                    " (cut by the budget)"
                } else {
                    ""
                },
                human_seconds(e.seconds),
                e.steps,
                e.mean_loss,
                percent(e.test_accuracy)
            ))
        }
        Event::Progress(p) => {
            seen.clock.enter(WatchPhase::Training);
            let done = (p.epoch.saturating_sub(1) * p.steps_per_epoch + p.step) as u64;
            let later = w.position.later_seconds;
            // No ETA until the steps are steady: a warm-up step's time is not the pace.
            let (eta, run_eta) = match p.eta_seconds {
                Some(eta) => (
                    format!("ETA {}", time::short(eta)),
                    format!("run ETA ≤{}", time::short(eta + later)),
                ),
                None => (
                    "warming up, no ETA yet".into(),
                    format!("run ETA: this cell, then ≤{}", time::short(later)),
                ),
            };
            display.status(
                done,
                label,
                &format!(
                    "epoch {} step {}/{} · {} elapsed · {eta}",
                    p.epoch,
                    p.step,
                    p.steps_per_epoch,
                    time::short(p.elapsed_seconds),
                ),
                &run_eta,
            )
        }
    }
}

/// The record of a cell whose runner reported what it observed instead of a record (the
/// PyTorch reference): the rules of every Rust runner's records, with the fingerprint taken here.
pub fn observed_record(
    mut observed: kiln_contract::Observed,
    request: &kiln_contract::CellRequest,
    commit: &Option<String>,
    dirty: Option<bool>,
) -> Record {
    let fingerprint = fingerprint_here(observed.threads, "", commit, dirty);
    // Its FLOPs come from the one model description the Rust runners and explain use.
    if observed.measurements.is_some() {
        observed.flops_per_sample = Some(kiln_report::explain::training_flops_per_sample(
            request.model,
        ));
    }
    observed.into_record(request, fingerprint)
}
