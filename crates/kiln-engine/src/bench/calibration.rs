//! A run's GEMM calibrations: each backend's peak on each device at the run's start (the
//! denominator of every "% of peak"), and again at its end in a run with repeats (the
//! machine's drift, the floor of every interval).

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use kiln_contract::drift::{DRIFT_FILE, Recalibration, RunDrift};
use kiln_contract::{Precision, Record, Status};

use super::child::{CellRun, run_cell};
use super::config::{PlannedCell, RunConfig};
use super::limits;
use super::progress::{Display, Position};
use crate::runners::Built;
use crate::runners::runner_of;

/// The type a cell's weights live in, which its GEMM peak is measured in
/// ([`Precision::weights`]); planned cells hold validated precisions.
pub(super) fn weights_type(precision: &str) -> &'static str {
    precision
        .parse::<Precision>()
        .map_or("f32", |p| p.weights().name())
}

/// The device a calibration belongs to: every CPU backend shares the CPU; a GPU is its name
/// (backends spell one GPU's spec differently, `cuda:0`, `vulkan:discrete:0`, but report the same
/// name; identical GPUs of one machine share a peak, as they share a model).
pub(super) fn device_of(r: &Record) -> String {
    // A remote device is another machine's, whatever its kind.
    if let Some(remote) = &r.remote {
        return format!("{} on {}", remote.device_name, remote.fingerprint.hostname);
    }
    match r.device_kind {
        Some(k) if !k.is_gpu() => "cpu".into(),
        _ => r.device_name.clone(),
    }
}

/// A run's GEMM peaks: each backend's own, by (backend, device spec, weights type), and the
/// best on each device, by (device, weights type).
#[derive(Default)]
pub(super) struct Peaks {
    pub(super) own: Vec<((String, String, String), kiln_contract::Calibration, String)>,
    pub(super) best: Vec<((String, String), kiln_contract::DevicePeak)>,
}

/// Measure, once per run, each backend's GEMM peak on each device and weights type the cells
/// use (fresh: never from an old cache), in its own process; the best on a device is the
/// denominator every backend on it is divided by.
pub(super) fn calibrate(
    cells: &[PlannedCell],
    built: &[Built],
    cfg: &RunConfig,
    out: &Path,
    display: &mut Display,
    at_end: bool,
) -> Result<Option<Peaks>> {
    let mut peaks = Peaks::default();
    let mut wanted: Vec<&PlannedCell> = Vec::new();
    for c in cells {
        let same = |w: &&PlannedCell| {
            w.id.backend == c.id.backend
                && w.id.device == c.id.device
                && weights_type(&w.id.precision) == weights_type(&c.id.precision)
        };
        let data_parallel = c.id.device.contains(',');
        if !data_parallel && !wanted.iter().any(same) && runner_of(built, &c.id.backend).is_some() {
            wanted.push(c);
        }
    }
    for (i, cell) in wanted.iter().enumerate() {
        let Some(runner) = runner_of(built, &cell.id.backend) else {
            continue;
        };
        let position = Position {
            index: i + 1,
            total: wanted.len(),
            later_seconds: 0.0,
        };
        let run = CellRun {
            calibrate_only: true,
            at_end,
            ..CellRun::default()
        };
        let Some(r) = run_cell(
            runner,
            cell,
            cfg,
            out,
            &position,
            display,
            limits::Limits::all(Duration::from_secs(300)),
            &run,
        )?
        else {
            return Ok(None);
        };
        let Some(peak) = r.peak.clone().filter(|_| r.status == Status::Ok) else {
            continue;
        };
        let device = device_of(&r);
        let weights = weights_type(&cell.id.precision).to_string();
        peaks.own.push((
            (
                cell.id.backend.clone(),
                cell.id.device.clone(),
                weights.clone(),
            ),
            peak.clone(),
            device.clone(),
        ));
        let key = (device, weights);
        let better = kiln_contract::DevicePeak {
            gflops: peak.gflops,
            backend: cell.id.backend.clone(),
            matrix: peak.matrix,
        };
        match peaks.best.iter_mut().find(|(k, _)| *k == key) {
            Some((_, best)) if best.gflops >= peak.gflops => {}
            Some((_, best)) => *best = better,
            None => peaks.best.push((key, better)),
        }
    }
    for ((device, weights), best) in peaks.best.iter().filter(|_| !at_end) {
        display.line(&format!(
            "kiln: device peak on {device} ({weights}): {} GFLOP/s, reached by {}",
            kiln_report::units::gflops_text(best.gflops),
            best.backend
        ));
    }
    Ok(Some(peaks))
}

/// A run with repeats measures each backend's GEMM peak again at its end: how far the machine
/// drifted (`drift.json`) is the floor of every interval for the next run. Skipped, with a
/// line, when a calibration fails or is interrupted (the intervals then have no floor).
pub(super) fn measure_drift(
    cells: &[PlannedCell],
    built: &[Built],
    cfg: &RunConfig,
    out: &Path,
    display: &mut Display,
    start: &Peaks,
) -> Result<()> {
    let Some(end) = calibrate(cells, built, cfg, out, display, true)? else {
        display.line("kiln: interrupted during the run's last calibration; no drift floor");
        return Ok(());
    };
    let calibrations: Vec<Recalibration> = start
        .own
        .iter()
        .filter_map(|((backend, device, weights), first, _)| {
            let last = end
                .own
                .iter()
                .find(|(k, _, _)| (&k.0, &k.1, &k.2) == (backend, device, weights))?;
            Some(Recalibration {
                backend: backend.clone(),
                device: device.clone(),
                weights: weights.clone(),
                start_gflops: first.gflops,
                end_gflops: last.1.gflops,
            })
        })
        .collect();
    let Some(drift) = RunDrift::of(calibrations) else {
        display.line("kiln: no backend's GEMM peak was measured again; no drift floor");
        return Ok(());
    };
    let text = serde_json::to_string_pretty(&drift)?;
    std::fs::write(out.join(DRIFT_FILE), text)?;
    display.line(&format!(
        "kiln: the machine drifted {:.1}% over the run (GEMM peaks at its start and end, {DRIFT_FILE}): \
         no interval for the next run is narrower",
        drift.share * 100.0
    ));
    Ok(())
}

/// What the run adds to the `k`th of `repeats` runs of `cell`: its repeat, its backend's GEMM
/// peak and the device's.
pub(super) fn cell_run(
    cell: &PlannedCell,
    peaks: &Peaks,
    k: usize,
    repeats: usize,
    run_id: &str,
    waited: Option<(f64, Option<bool>)>,
) -> CellRun {
    let weights = weights_type(&cell.id.precision).to_string();
    let own = peaks
        .own
        .iter()
        .find(|((b, d, w), _, _)| *b == cell.id.backend && *d == cell.id.device && *w == weights);
    CellRun {
        repeat: Some(kiln_contract::Repeat {
            index: k,
            of: repeats,
            run: run_id.to_string(),
        }),
        calibrate_only: false,
        at_end: false,
        given_peak: own.map(|(_, c, _)| c.clone()),
        device_peak: own.and_then(|(_, _, device)| {
            peaks
                .best
                .iter()
                .find(|((d, w), _)| d == device && *w == weights)
                .map(|(_, p)| p.clone())
        }),
        waited,
    }
}
