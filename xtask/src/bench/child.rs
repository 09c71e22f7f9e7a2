//! One cell in its own process: its request written, its output read as it comes, its
//! wall-clock limit enforced, its record returned whatever happens to it.

use std::fs::File;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kiln_report::cells::{human_seconds, obtained_text};
use kiln_results::{Calibration, CellId, DevicePeak, Event, Record, Repeat, Status};

use super::config::{PlannedCell, RunConfig};
use super::interrupt::interrupted;
use super::limits::{Limits, Phase, PhaseClock, timeout_reason};
use super::noise;
use super::progress::{Display, Position};
use super::rundir::cell_stem;
use crate::datasets::export_data;
use crate::runners::Runner;
use crate::supervise::{Ended, Out, Stderr, Supervised};
use crate::time;
use crate::workspace::{fingerprint_here, workspace_root};

/// Lines drivers print on every start that say nothing about a failure (Mesa without a
/// desktop session); they never stand as a cell's reason.
const HARMLESS: &[&str] = &["XDG_RUNTIME_DIR is invalid or not set"];

/// The last `lines` non-empty lines of a log that are not known-harmless driver warnings,
/// joined with ` | `.
pub fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !HARMLESS.iter().any(|h| l.contains(h)))
        .collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// The first line of a log that says the runner ran out of memory (a backtrace may follow it,
/// so it is looked for in the whole log, not its tail).
pub(super) fn out_of_memory_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .find(|l| kiln_results::says_out_of_memory(l))
        .map(|l| l.trim().to_string())
}

/// The record of a cell whose runner ended without one: out of memory when its log says so
/// (`oom_line`) or when the kernel's out-of-memory killer killed it (`oom_killed`: the runner
/// died by SIGKILL while the kernel's count of such kills went up), else failed.
/// `killed_by_us`: xtask killed it (its wall-clock limit); `why` is what xtask saw, `detail`
/// the log's last lines.
pub(super) fn record_without_final(
    id: &CellId,
    killed_by_us: bool,
    (oom_line, oom_killed): (Option<String>, bool),
    why: String,
    detail: String,
) -> Record {
    if let Some(line) = oom_line.filter(|_| !killed_by_us) {
        return Record::not_run(
            id,
            Status::OutOfMemory,
            format!("batch {} did not fit: {line}", id.batch_size),
        );
    }
    if !killed_by_us && oom_killed {
        return Record::not_run(
            id,
            Status::OutOfMemory,
            format!(
                "batch {} did not fit: the kernel's out-of-memory killer ended the runner \
                 ({why}; /proc/vmstat's oom_kill went up); stderr: {detail}",
                id.batch_size
            ),
        );
    }
    Record::not_run(id, Status::Failed, format!("{why}; stderr: {detail}"))
}

/// What a run adds to a cell's request and record: which repeat it is, the GEMM peaks measured
/// at the run's start, how long it waited for a quiet machine.
#[derive(Debug, Clone, Default)]
pub(super) struct CellRun {
    pub repeat: Option<Repeat>,
    /// Only measure the backend's GEMM peak (the run's calibration).
    pub calibrate_only: bool,
    /// That calibration is the one at the run's end (its drift).
    pub at_end: bool,
    /// This backend's own GEMM peak on the device, from the run's calibration.
    pub given_peak: Option<Calibration>,
    /// The best peak of any backend on the device: the shared denominator.
    pub device_peak: Option<DevicePeak>,
    /// `--wait-quiet`: seconds waited, and whether the machine was quiet then.
    pub waited: Option<(f64, Option<bool>)>,
}

impl CellRun {
    /// What names this run of the cell's files apart from its other runs.
    fn suffix(&self) -> String {
        match (&self.repeat, self.calibrate_only) {
            (_, true) if self.at_end => "-gemm-end".into(),
            (_, true) => "-gemm".into(),
            (Some(r), false) if r.of > 1 => format!("-r{}", r.index),
            _ => String::new(),
        }
    }
}

/// Run one cell in its own process and return its record (a failed one if it produced none),
/// or `None` when Ctrl-C interrupted it.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_cell(
    runner: &Runner,
    cell: &PlannedCell,
    cfg: &RunConfig,
    out: &Path,
    position: &Position,
    display: &mut Display,
    limits: Limits,
    run: &CellRun,
) -> Result<Option<Record>> {
    let id = &cell.id;
    let suffix = run.suffix();
    let log = out
        .join("logs")
        .join(format!("{}{suffix}.stderr", cell_stem(id)));
    let mut request = cell.request(cfg)?;
    request.calibrate_only = run.calibrate_only;
    request.given_peak = run.given_peak.clone();
    if runner.needs_data_file {
        request.data_file = Some(export_data(&request, out)?);
    }
    let request_path = super::rundir::write_request(out, &request, &suffix)?;
    let mut cmd = runner.command();
    cmd.arg("--cell").arg(&request_path);
    let (commit, dirty) = crate::workspace::revision();
    if let Some(commit) = &commit {
        cmd.env("KILN_COMMIT", commit);
    }
    if let Some(dirty) = dirty {
        cmd.env("KILN_DIRTY", if dirty { "1" } else { "0" });
    }
    cmd.env("KILN_WORKSPACE", workspace_root());
    let stderr = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let oom_kills_before = kiln_machine::process::oom_kills();
    let mut child = Supervised::spawn(&mut cmd, Stderr::File(stderr))
        .with_context(|| format!("cannot start {}", runner.display()))?;
    let pid = child.pid();
    let load_average_start = kiln_machine::load_average();
    // Samples of the machine at the edges of the windows a cell's noise can be measured over:
    // spawn, start of training, end of the warm-up epoch, the last epoch, the final record.
    let spawned = noise::sample(Some(pid));
    let (mut trained_from, mut warm_until, mut last_epoch, mut ended) = (None, None, None, None);

    let started = Instant::now();
    let label = format!(
        "[{}/{}] {} {} {} ({}, batch {}){}",
        position.index,
        position.total,
        id.backend,
        id.device,
        id.model,
        id.precision,
        id.batch_size,
        match (&run.repeat, run.calibrate_only) {
            (_, true) if run.at_end => " GEMM calibration at the run's end".to_string(),
            (_, true) => " GEMM calibration".to_string(),
            (Some(r), false) if r.of > 1 => format!(" run {}/{}", r.index, r.of),
            _ => String::new(),
        }
    );
    display.line(&format!("{label}: starting, data {}", cell.dataset));
    let mut final_record = None;
    let mut unparsed = Vec::new();
    let mut timed_out = false;
    let mut clock = PhaseClock::new();
    loop {
        match child.next(Duration::from_millis(500)) {
            Out::Line(line) => match serde_json::from_str::<Event>(&line) {
                Ok(Event::Final(record)) => {
                    ended = noise::sample(Some(pid));
                    final_record = Some(*record);
                }
                // A runner that leaves its record to Kiln (the PyTorch reference).
                Ok(Event::Observed(observed)) => {
                    ended = noise::sample(Some(pid));
                    final_record = Some(observed_record(*observed, &request, &commit, dirty));
                }
                Ok(Event::Start(s)) => {
                    clock.enter(Phase::FirstStep);
                    trained_from = noise::sample(Some(pid));
                    display.line(&format!(
                        "{label}: {} train / {} test samples, {} steps per epoch, {} epochs, \
                         budget {}",
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
                Ok(Event::Epoch(e)) => {
                    clock.enter(Phase::Training);
                    if e.epoch == 1 {
                        warm_until = noise::sample(Some(pid));
                    } else {
                        last_epoch = noise::sample(Some(pid));
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
                        e.test_accuracy
                            .map(|a| format!("{:.1}%", a * 100.0))
                            .unwrap_or_else(|| "–".into())
                    ))
                }
                Ok(Event::Progress(p)) => {
                    clock.enter(Phase::Training);
                    let eta = p.eta_seconds.unwrap_or(0.0);
                    let done = (p.epoch.saturating_sub(1) * p.steps_per_epoch + p.step) as u64;
                    display.status(
                        done,
                        &label,
                        &format!(
                            "epoch {} step {}/{} · {} elapsed · ETA {}",
                            p.epoch,
                            p.step,
                            p.steps_per_epoch,
                            time::short(p.elapsed_seconds),
                            time::short(eta),
                        ),
                        &format!("run ETA ≤{}", time::short(eta + position.later_seconds)),
                    )
                }
                Err(_) => unparsed.push(line),
            },
            Out::Closed => break,
            Out::Quiet => {
                if interrupted() {
                    child.kill();
                    break;
                }
                if clock.elapsed() > limits.of(clock.phase).as_secs_f64() {
                    child.kill();
                    timed_out = true;
                    break;
                }
                if clock.phase == Phase::FirstStep {
                    display.status(
                        0,
                        &label,
                        &format!(
                            "first step · {} (a GPU backend compiles and autotunes its \
                             kernels in it)",
                            time::short(clock.elapsed())
                        ),
                        "",
                    );
                }
            }
        }
    }
    let Ended {
        status,
        max_rss: parent_max_rss,
    } = child.finish(None)?;
    // Killed by us or not, a child reaped without a deadline has a status.
    let status = status.context("the runner's exit status")?;
    display.finish_cell();
    if interrupted() {
        display.line(&format!("{label}: interrupted, not recorded"));
        return Ok(None);
    }
    let record = match final_record {
        Some(r) => r,
        None => {
            let why = if timed_out {
                timeout_reason(
                    limits.of(clock.phase).as_secs_f64(),
                    &clock.done,
                    (clock.phase, clock.elapsed()),
                )
            } else {
                format!("the runner exited ({status}) without a final record")
            };
            let mut detail = tail_of(&log, 5);
            if !unparsed.is_empty() {
                detail = format!(
                    "{detail} | unparsable output: {}",
                    unparsed.last().cloned().unwrap_or_default()
                );
            }
            let oom_killed = sigkill(status)
                && matches!((oom_kills_before, kiln_machine::process::oom_kills()), (Some(a), Some(b)) if b > a);
            let oom = (out_of_memory_line(&log), oom_killed);
            let mut r = record_without_final(id, timed_out, oom, why, detail);
            // Which machine it failed (or ran out of memory) on matters as much as the reason.
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            r.fingerprint = fingerprint_here(threads, "", &commit, dirty);
            r
        }
    };
    let mut record = record;
    // Whatever the runner (Rust, Python) called a failure that says "out of memory" is a
    // result at this batch size.
    if record.status == Status::Failed
        && record
            .reason
            .as_deref()
            .is_some_and(kiln_results::says_out_of_memory)
    {
        record.status = Status::OutOfMemory;
    }
    // The window the record's time comes from: the timed epochs (after the warm-up epoch) when
    // there were any, else the training, else the whole cell.
    let (from, to, window) = match (warm_until, last_epoch) {
        (Some(a), Some(b)) => (Some(a), Some(b), "timed epochs"),
        _ => match trained_from {
            Some(a) => (Some(a), ended, "training"),
            None => (spawned, ended, "whole cell"),
        },
    };
    if !run.calibrate_only {
        let mut n = noise::noise(from.as_ref(), to.as_ref(), window);
        n.load_average_start = load_average_start;
        if let Some((waited, quiet)) = run.waited {
            n.waited_seconds = Some(waited);
            n.quiet_before = quiet;
        }
        record.noise = Some(n);
        record.repeat = run.repeat.clone();
        record.burn = cfg.burn.clone();
        record.device_peak = run.device_peak.clone();
        if parent_max_rss.is_some() {
            record
                .training_memory
                .get_or_insert_with(Default::default)
                .parent_max_rss_bytes = parent_max_rss;
        }
    }
    let summary = match (record.status, &record.epoch_seconds) {
        (Status::Ok, Some(e)) => format!(
            "{} per {}-sample epoch, test accuracy {} ({})",
            human_seconds(e.median),
            record.obtained.standard_epoch_samples,
            record
                .test_accuracy
                .map(|a| format!("{:.1}%", a * 100.0))
                .unwrap_or_else(|| "–".into()),
            obtained_text(&record)
        ),
        (Status::Ok, None) => match &record.loop_overhead {
            Some(o) => format!(
                "Kiln loop {:.1} ms/step, bare loop {:.1} ms/step: overhead {:+.2}% (median of {} rounds of {} steps)",
                o.kiln_step_seconds.median * 1e3,
                o.bare_step_seconds.median * 1e3,
                o.overhead_percent,
                o.rounds,
                o.steps_per_round
            ),
            None => "done".into(),
        },
        (s, _) => format!(
            "{}: {}",
            s.as_str(),
            record.reason.clone().unwrap_or_default()
        ),
    };
    // A GPU backend's first step compiles and autotunes its kernels: said apart, as timed.
    let first_step = match (&record.runtime, record.first_step_seconds) {
        (Some(_), Some(s)) => format!("; first step {} (kernels)", time::short(s)),
        _ => String::new(),
    };
    display.line(&format!(
        "{label}: {summary} [{} wall{first_step}]",
        time::short(started.elapsed().as_secs_f64())
    ));
    Ok(Some(record))
}

/// Whether the runner died by SIGKILL.
fn sigkill(status: ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(9)
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        false
    }
}

/// The record of a cell whose runner reported what it observed instead of a record (the
/// PyTorch reference): the rules of every Rust runner's records, with the fingerprint taken here.
pub fn observed_record(
    mut observed: kiln_results::Observed,
    request: &kiln_results::CellRequest,
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

#[cfg(test)]
mod phase_tests {
    use super::*;

    #[test]
    fn a_timeout_names_the_phase_and_how_long_each_took() {
        let why = timeout_reason(
            1800.0,
            &[(Phase::Starting, 12.0)],
            (Phase::FirstStep, 1801.0),
        );
        assert_eq!(
            why,
            "timed out during the first step (kernel compilation and autotune on GPU backends) \
             after its limit of 30.0 min (start-up (loading data, opening the device) took \
             12.0 s, the first step (kernel compilation and autotune on GPU backends) had run \
             30.0 min)"
        );
    }

    fn id() -> CellId {
        CellId::new(
            kiln_results::ModelKind::MnistCnn,
            "flex",
            "cpu",
            kiln_results::Precision::F32,
            8192,
        )
    }

    #[test]
    fn a_runner_that_ran_out_of_memory_is_a_labelled_result() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("cell.stderr");
        // What a Rust runner prints when an allocation fails (a backtrace follows).
        std::fs::write(
            &log,
            "kiln: embedded:datasets/fashion-mnist-sample (Verified)\n\
             memory allocation of 1384448000 bytes failed\nstack backtrace:\n  0: f\n  1: g\n\
               2: h\n  3: i\n  4: j\n",
        )
        .expect("written");
        let line = out_of_memory_line(&log);
        assert_eq!(
            line.as_deref(),
            Some("memory allocation of 1384448000 bytes failed")
        );
        let why = || "the runner exited (signal: 6) without a final record".to_string();
        let r = record_without_final(&id(), false, (line.clone(), false), why(), "x".into());
        assert_eq!(r.status, Status::OutOfMemory);
        assert_eq!(r.batch_size, 8192);
        assert_eq!(
            r.reason.as_deref(),
            Some("batch 8192 did not fit: memory allocation of 1384448000 bytes failed")
        );
        // The kernel's OOM killer: SIGKILL while /proc/vmstat's count went up.
        let r = record_without_final(&id(), false, (None, true), why(), "x".into());
        assert_eq!(r.status, Status::OutOfMemory);
        assert!(r.reason.unwrap().contains("out-of-memory killer"));
        // Killed by its wall-clock limit, or by anything else: a failure.
        let r = record_without_final(&id(), true, (line, false), why(), "x".into());
        assert_eq!(r.status, Status::Failed);
        let r = record_without_final(&id(), false, (None, false), why(), "x".into());
        assert_eq!(r.status, Status::Failed);
    }

    #[test]
    fn harmless_driver_warnings_never_stand_as_the_reason() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("cell.stderr");
        std::fs::write(
            &log,
            "kiln: opening vulkan:cpu\nthread 'main' panicked: out of memory\n\
             error: XDG_RUNTIME_DIR is invalid or not set in the environment.\n\
             error: XDG_RUNTIME_DIR is invalid or not set in the environment.\n",
        )
        .expect("written");
        assert_eq!(
            tail_of(&log, 3),
            "kiln: opening vulkan:cpu | thread 'main' panicked: out of memory"
        );
    }
}
