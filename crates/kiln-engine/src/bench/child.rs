//! One cell in its own process: its request written, its output read as it comes, its
//! wall-clock limit enforced, its record returned whatever happens to it.

use std::fs::File;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Instant;

use anyhow::{Context, Result};
use kiln_contract::{Calibration, CellId, DevicePeak, Record, Repeat, Status, Warmup};
use kiln_report::fields::{human_seconds, obtained_text};
use kiln_report::units::percent;

use super::config::{PlannedCell, RunConfig};
use super::interrupt::interrupted;
use super::limits::{Limits, WatchPhase, timeout_reason};
use super::noise;
use super::progress::{Display, Position};
use super::watch::{Watched, Watching, watch};
use crate::datasets::export_data;
use crate::runners::Runner;
use crate::supervise::{Ended, Stderr, Supervised};
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
        .find(|l| kiln_contract::says_out_of_memory(l))
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

/// The record of a cell stopped at its first step's own limit (its warm-up cap, and room for
/// the step under way: the runner stops a warm-up at its cap, but only between steps): not
/// steady, as the runner says of a warm-up that ran past its cap, with the step's time so far
/// as its warm-up, so that the row does not depend on whether the step ended a minute before
/// the limit or after it. Compiling, tuning or hung, Kiln cannot tell from outside: the log's
/// last lines are kept. `None` for any other end.
fn first_step_overran(
    id: &CellId,
    seen: &Watched,
    warmup_cap_seconds: f64,
    detail: &str,
) -> Option<Record> {
    let overrun = seen
        .timed_out
        .filter(|o| !o.whole && seen.clock.phase == WatchPhase::FirstStep)?;
    let step = seen.clock.elapsed();
    let mut r = Record::not_run(
        id,
        Status::NotSteady,
        format!(
            "not steady: its first step had not ended at its limit of {} (a warm-up cap of {} \
             and room for the step under way), where a JIT backend compiles and autotunes its \
             kernels: stopped there, with no step or epoch time to report; stderr: {detail}",
            human_seconds(overrun.limit.as_secs_f64()),
            human_seconds(warmup_cap_seconds)
        ),
    );
    r.warmup = Some(Warmup {
        steady: false,
        steps: 0,
        seconds: step,
        process_seconds: Some(seen.clock.total()),
        epoch: 1,
        cap_seconds: warmup_cap_seconds,
        step_seconds: Vec::new(),
        late_compiles: 0,
        late_compile_seconds: 0.0,
        late_compile_steps: Vec::new(),
        peak_rss_bytes: None,
    });
    Some(r)
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
    let suffix = run.suffix();
    let log = out
        .join("logs")
        .join(format!("{}{suffix}.stderr", cell.id.stem()));
    let mut request = cell.request(cfg)?;
    request.calibrate_only = run.calibrate_only;
    request.given_peak = run.given_peak.clone();
    if runner.needs_data_file {
        request.data_file = Some(export_data(&request, out)?);
    }
    let request_path = super::rundir::write_request(out, &request, &suffix)?;
    let revision = crate::workspace::revision();
    let mut cmd = runner.command();
    cmd.arg("--cell").arg(&request_path);
    if let Some(commit) = &revision.0 {
        cmd.env("KILN_COMMIT", commit);
    }
    if let Some(dirty) = revision.1 {
        cmd.env("KILN_DIRTY", if dirty { "1" } else { "0" });
    }
    cmd.env("KILN_WORKSPACE", workspace_root());
    let stderr = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let before = Before {
        oom_kills: kiln_machine::process::oom_kills(),
        load_average: kiln_machine::load_average(),
    };
    let mut child = Supervised::spawn(&mut cmd, Stderr::File(stderr))
        .with_context(|| format!("cannot start {}", runner.display()))?;
    // The machine at spawn: the edge of the noise window when nothing later was seen.
    let spawned = noise::sample(Some(child.pid()));
    let started = Instant::now();
    let label = label(position, &cell.id, run);
    display.line(&format!("{label}: starting, data {}", cell.dataset));
    let watching = Watching {
        request: &request,
        label: &label,
        position,
        limits,
        revision: &revision,
    };
    let seen = watch(&mut child, &watching, display);
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
    let failed = Failed {
        status,
        warmup_cap_seconds: request.settings.warmup_cap_seconds,
        log: &log,
        oom_kills_before: before.oom_kills,
        revision: &revision,
    };
    let mut record = record_of(&cell.id, &seen, failed);
    if !run.calibrate_only {
        let mut n = noise_of(&seen, spawned);
        n.load_average_start = before.load_average;
        add_run(&mut record, run, cfg, n, parent_max_rss);
    }
    // A GPU backend's first step compiles and autotunes its kernels: said apart, as timed.
    let first_step = match (&record.runtime, record.first_step_seconds) {
        (Some(_), Some(s)) => format!("; first step {} (kernels)", time::short(s)),
        _ => String::new(),
    };
    display.line(&format!(
        "{label}: {} [{} wall{first_step}]",
        summary(&record),
        time::short(started.elapsed().as_secs_f64())
    ));
    Ok(Some(record))
}

/// What the machine said before the runner started.
struct Before {
    oom_kills: Option<u64>,
    load_average: Option<f64>,
}

/// How a cell is named on the terminal: `[3/8] flex cpu mnist-cnn (f32, batch 128) run 2/3`.
fn label(position: &Position, id: &CellId, run: &CellRun) -> String {
    format!(
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
    )
}

/// How a runner without a record ended, to say why.
struct Failed<'a> {
    status: ExitStatus,
    /// The warm-up cap the cell ran under.
    warmup_cap_seconds: f64,
    log: &'a Path,
    oom_kills_before: Option<u64>,
    revision: &'a (Option<String>, Option<bool>),
}

/// The cell's record: the runner's, else one that says why there is none; a failure whose
/// reason says "out of memory" is that result at this batch size.
fn record_of(id: &CellId, seen: &Watched, failed: Failed) -> Record {
    let mut record = match &seen.record {
        Some(r) => r.clone(),
        None => {
            let why = if let Some(overrun) = seen.timed_out {
                timeout_reason(
                    overrun.limit.as_secs_f64(),
                    &seen.clock.done,
                    (seen.clock.phase, seen.clock.elapsed()),
                )
            } else {
                format!(
                    "the runner exited ({}) without a final record",
                    failed.status
                )
            };
            let mut detail = tail_of(failed.log, 5);
            if let Some(last) = seen.unparsed.last() {
                detail = format!("{detail} | unparsable output: {last}");
            }
            let oom_killed = sigkill(failed.status)
                && matches!((failed.oom_kills_before, kiln_machine::process::oom_kills()), (Some(a), Some(b)) if b > a);
            let oom = (out_of_memory_line(failed.log), oom_killed);
            let mut r = match first_step_overran(id, seen, failed.warmup_cap_seconds, &detail) {
                Some(not_steady) => not_steady,
                None => record_without_final(id, seen.timed_out.is_some(), oom, why, detail),
            };
            // Which machine it failed (or ran out of memory) on matters as much as the reason.
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let (commit, dirty) = failed.revision;
            r.fingerprint = fingerprint_here(threads, "", commit, *dirty);
            r
        }
    };
    if record.status == Status::Failed
        && record
            .reason
            .as_deref()
            .is_some_and(kiln_contract::says_out_of_memory)
    {
        record.status = Status::OutOfMemory;
    }
    record
}

/// Other processes' share of the machine over the window the record's time comes from: the
/// timed epochs (after the warm-up epoch) when there were any, else the training, else the
/// whole cell.
fn noise_of(seen: &Watched, spawned: Option<noise::CpuSample>) -> kiln_contract::Noise {
    let (from, to, window) = match (&seen.warm_until, &seen.last_epoch) {
        (Some(a), Some(b)) => (Some(a), Some(b), "timed epochs"),
        _ => match &seen.trained_from {
            Some(a) => (Some(a), seen.ended.as_ref(), "training"),
            None => (spawned.as_ref(), seen.ended.as_ref(), "whole cell"),
        },
    };
    noise::noise(from, to, window)
}

/// What the run adds to a cell's record: its noise, which repeat, the Burn it was built
/// against, the device's peak, the parent's view of the runner's memory.
fn add_run(
    record: &mut Record,
    run: &CellRun,
    cfg: &RunConfig,
    mut noise: kiln_contract::Noise,
    parent_max_rss: Option<u64>,
) {
    if let Some((waited, quiet)) = run.waited {
        noise.waited_seconds = Some(waited);
        noise.quiet_before = quiet;
    }
    record.noise = Some(noise);
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

/// A record in one line: its epoch time and accuracy, the loop overhead, or its status.
fn summary(record: &Record) -> String {
    match (record.status, &record.epoch_seconds) {
        (Status::Ok, Some(e)) => format!(
            "{} per {}-sample epoch, test accuracy {} ({})",
            human_seconds(e.median),
            record.obtained.standard_epoch_samples,
            percent(record.test_accuracy),
            obtained_text(record)
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
    }
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

#[cfg(test)]
mod phase_tests {
    use super::*;

    #[test]
    fn a_timeout_names_the_phase_and_how_long_each_took() {
        let why = timeout_reason(
            1800.0,
            &[(WatchPhase::Starting, 12.0)],
            (WatchPhase::FirstStep, 1801.0),
        );
        assert_eq!(
            why,
            "timed out during the first step (kernel compilation and autotune on JIT backends) \
             after its limit of 30.0 min (start-up (loading data, opening the device) took \
             12.0 s, the first step (kernel compilation and autotune on JIT backends) had run \
             30.0 min)"
        );
    }

    fn id() -> CellId {
        CellId::new(
            kiln_contract::ModelKind::MnistCnn,
            "flex",
            "cpu",
            kiln_contract::Precision::F32,
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
