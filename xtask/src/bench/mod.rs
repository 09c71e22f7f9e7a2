//! `bench-all` and `bench`: plan the matrix, run one child process per cell, append records as
//! they arrive, fall back to the CPU where asked, write the report.

pub(crate) mod child;
mod config;
mod fallback;
mod interrupt;
mod limits;
mod noise;
pub mod plan;
mod progress;
mod resume;
pub(crate) mod rundir;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_results::read::RESULTS_FILE;
use kiln_results::{
    CellId, CellRequest, ModelKind, Precision, ProbeReport, Record, Status, TrainingLoop,
};

use crate::backends::{self, Backend};
use crate::flags::CommonArgs;
use crate::runners::Runner;
use crate::runners::{Built, build_and_probe, wanted_backends};
use child::{CellRun, run_cell};
pub use config::{PlannedCell, RunConfig};
use config::{config, dataset_for};
use fallback::fallback_reason;
pub use interrupt::{install_interrupt_handler, interrupted};
use limits::wall_clock_limit;
use progress::{Display, Position};
pub use resume::resume;
#[cfg(test)]
use rundir::cell_stem;
use rundir::{append_record, check_out, prepare_out, write_run_file};

/// The order a run's cells run in: each repeat of the whole matrix in turn (A B C A B C ...),
/// so drift over time spreads over every row; `done` lists the (cell, repeat) pairs that
/// already have a record (a resumed run).
pub(super) fn schedule(
    cells: &[PlannedCell],
    repeats: usize,
    done: &[(CellId, usize)],
) -> Vec<(usize, usize)> {
    (1..=repeats.max(1))
        .flat_map(|k| (0..cells.len()).map(move |i| (i, k)))
        .filter(|(i, k)| !done.contains(&(cells[*i].id.clone(), *k)))
        .collect()
}

/// The type a cell's weights live in, which its GEMM peak is measured in
/// ([`Precision::weights`]); planned cells hold validated precisions.
fn weights_type(precision: &str) -> &'static str {
    precision
        .parse::<Precision>()
        .map_or("f32", |p| p.weights().name())
}

/// The device a calibration belongs to: every CPU backend shares the CPU; a GPU is its name
/// (backends spell one GPU's spec differently, `cuda:0`, `vulkan:discrete:0`, but report the same
/// name; identical GPUs of one machine share a peak, as they share a model).
fn device_of(r: &Record) -> String {
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
struct Peaks {
    own: Vec<((String, String, String), kiln_results::Calibration, String)>,
    best: Vec<((String, String), kiln_results::DevicePeak)>,
}

/// Measure, once per run, each backend's GEMM peak on each device and weights type the cells
/// use (fresh: never from an old cache), in its own process; the best on a device is the
/// denominator every backend on it is divided by.
fn calibrate(
    cells: &[PlannedCell],
    built: &[Built],
    cfg: &RunConfig,
    out: &Path,
    display: &mut Display,
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
        let better = kiln_results::DevicePeak {
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
    for ((device, weights), best) in &peaks.best {
        display.line(&format!(
            "kiln: device peak on {device} ({weights}): {:.1} GFLOP/s, reached by {}",
            best.gflops, best.backend
        ));
    }
    Ok(Some(peaks))
}

/// Run planned cells, append their records, render the report. Returns false if any failed or
/// the run was interrupted.
fn execute(cells: Vec<PlannedCell>, built: &[Built], cfg: RunConfig, out: &Path) -> Result<bool> {
    execute_rest(cells, built, cfg, out, &[])
}

/// [`execute`], leaving out the (cell, repeat) pairs in `done`.
fn execute_rest(
    cells: Vec<PlannedCell>,
    built: &[Built],
    cfg: RunConfig,
    out: &Path,
    done: &[(CellId, usize)],
) -> Result<bool> {
    let results = out.join(RESULTS_FILE);
    let repeats = cfg.repeats.max(1);
    let order = schedule(&cells, repeats, done);
    eprintln!(
        "kiln: {} cells{}; results go to {}",
        cells.len(),
        if repeats > 1 {
            format!(
                " x {repeats} runs each, interleaved ({} to run)",
                order.len()
            )
        } else {
            String::new()
        },
        results.display()
    );
    let run_id = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut display = Display::new(order.len());
    let peaks = if cfg.cell.bare || order.is_empty() {
        Some(Peaks::default())
    } else {
        calibrate(&cells, built, &cfg, out, &mut display)?
    };
    let Some(peaks) = peaks else {
        display.finish();
        eprintln!(
            "kiln: interrupted during calibration; finish the run with `cargo xtask bench-all --resume {}`",
            out.display()
        );
        return Ok(false);
    };
    let per_cell_bound = cfg.cell.budget_seconds.map_or(0.0, |b| b + 120.0);
    let probes = probes(built);
    let mut all_ok = true;
    for (i, &(c, k)) in order.iter().enumerate() {
        let cell = &cells[c];
        let position = Position {
            index: i + 1,
            total: order.len(),
            later_seconds: per_cell_bound * (order.len() - i - 1) as f64,
        };
        let waited = cfg.wait_quiet_seconds.map(|max| {
            noise::wait_quiet(Duration::from_secs_f64(max), |m| {
                display.line(&format!("kiln: {m}"))
            })
        });
        let run = cell_run(cell, &peaks, k, repeats, &run_id, waited);
        let runner = runner_of(built, &cell.id.backend).cloned();
        let record = match runner {
            Some(runner) => run_cell(
                &runner,
                cell,
                &cfg,
                out,
                &position,
                &mut display,
                wall_clock_limit(cell.budget_seconds.or(cfg.cell.budget_seconds)),
                &run,
            )?,
            None => Some(Record::not_run(
                &cell.id,
                Status::Skipped,
                backends::find(&cell.id.backend)
                    .ok()
                    .and_then(|b| {
                        crate::runners::runner(b)
                            .err()
                            .or_else(|| backends::unbuildable(b))
                    })
                    .unwrap_or_else(|| "backend not built".into()),
            ))
            .map(|mut r| {
                r.repeat = run.repeat.clone();
                r
            }),
        };
        let Some(record) = record else {
            all_ok = false;
            display.finish();
            eprintln!(
                "kiln: {} of {} cells finished; finish the run with `cargo xtask bench-all --resume {}`",
                i,
                order.len(),
                out.display()
            );
            break;
        };
        append_record(&results, &record)?;
        let fallback = match (&cfg.cell.fallback, fallback_reason(&record)) {
            (Some(_), Some(why)) => plan::fallback_cell(cell, &probes)
                .and_then(|c| runner_of(built, &c.id.backend).map(|r| (c, r)))
                .map(|c| (c, why)),
            _ => None,
        };
        match fallback {
            Some(((fb_cell, fb_runner), why)) => {
                let from = format!("{} {}: {why}", cell.id.backend, cell.id.device);
                display.line(&format!(
                    "kiln: {} falls back to {} {}",
                    cell.id, fb_cell.id.backend, fb_cell.id.device
                ));
                let fb_run = cell_run(&fb_cell, &peaks, k, repeats, &run_id, None);
                let Some(mut fb) = run_cell(
                    fb_runner,
                    &fb_cell,
                    &cfg,
                    out,
                    &position,
                    &mut display,
                    wall_clock_limit(fb_cell.budget_seconds.or(cfg.cell.budget_seconds)),
                    &fb_run,
                )?
                else {
                    all_ok = false;
                    break;
                };
                fb.fallback_from = Some(from.clone());
                fb.reason = Some(match fb.reason.take() {
                    Some(r) => format!("fell back from {from}; {r}"),
                    None => format!("fell back from {from}"),
                });
                all_ok &= fb.status.is_result();
                append_record(&results, &fb)?;
            }
            None => all_ok &= record.status.is_result(),
        }
    }
    display.finish();
    let loaded = kiln_results::read::load(std::slice::from_ref(&results))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let (_, report, html) = crate::report::write_run_report(out, &loaded.records)?;
    println!("\n{}", crate::report::terminal(&loaded.records, Some(out)));
    println!("Report: {}\n        {}", report.display(), html.display());
    eprintln!(
        "kiln: re-render with `cargo xtask report {}` (--html, --csv, --svg)",
        out.display()
    );
    Ok(all_ok)
}

/// What the run adds to the `k`th of `repeats` runs of `cell`: its repeat, its backend's GEMM
/// peak and the device's.
fn cell_run(
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
        repeat: Some(kiln_results::Repeat {
            index: k,
            of: repeats,
            run: run_id.to_string(),
        }),
        calibrate_only: false,
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

/// The runner of the backend called `name`, if it was built.
fn runner_of<'a>(built: &'a [Built], name: &str) -> Option<&'a Runner> {
    built
        .iter()
        .find(|(b, _, _)| b.name == name)
        .map(|(_, r, _)| r)
}

/// The probe reports of the built backends, by name.
fn probes(built: &[Built]) -> Vec<(&str, &ProbeReport)> {
    built.iter().map(|(b, _, p)| (b.name.as_str(), p)).collect()
}

/// The backends to probe besides `wanted`: with `--fallback`, every default backend, so that
/// a CPU device to fall back to is known.
fn with_fallback_backends(
    mut wanted: Vec<&'static Backend>,
    fallback: bool,
) -> Vec<&'static Backend> {
    if fallback {
        for b in backends::all().iter().filter(|b| b.default) {
            if !wanted.iter().any(|w| w.name == b.name) && backends::unbuildable(b).is_none() {
                wanted.push(b);
            }
        }
        wanted.sort_by_key(|b| b.order);
    }
    wanted
}

/// `cargo xtask bench-all`; with `plan_only`, the run directory gets `run.json` and a request
/// per cell (`cells/*.json`) and nothing runs.
pub fn bench_all(
    common: &CommonArgs,
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
    all_devices: bool,
    plan_only: bool,
    remote: bool,
) -> Result<bool> {
    let (profile, cfg) = config(common, false)?;
    let models = models.unwrap_or_else(|| profile.models().to_vec());
    let backends_named = backend_names.is_some();
    let mut wanted = wanted_backends(backend_names.as_deref())?;
    // `--device remote:...` adds the remote backend; its probe reports those devices.
    if remote && !wanted.iter().any(|b| b.name == "remote") {
        wanted.push(backends::find("remote")?);
    }
    let matrix = plan::Matrix {
        models: models
            .iter()
            .map(|&m| dataset_for(m, common).map(|d| (m, d)))
            .collect::<Result<_>>()?,
        precisions: precisions.unwrap_or_else(|| vec![Precision::F32]),
        batch_sizes: cfg.batch_sizes.clone(),
        backends: wanted.iter().map(|b| b.name.clone()).collect(),
        backends_named,
        all_devices,
        fallback: cfg.cell.fallback.is_some(),
        budget_given: common.budget.is_some(),
        autotune_given: common.autotune.is_some(),
        profile,
        loops: cfg.loops.clone(),
    };
    let out = check_out(common.out.as_deref())?;
    let built = build_and_probe(
        &with_fallback_backends(wanted, cfg.cell.fallback.is_some()),
        cfg.loops.contains(&TrainingLoop::Learner),
    )?;
    let plan::Plan { cells, skipped } = plan::plan(&matrix, &probes(&built));
    for (_, (_, note)) in &matrix.models {
        if let Some(note) = note {
            eprintln!("kiln: {note}");
        }
    }
    let out = prepare_out(Some(&out))?;
    if plan_only {
        write_run_file(&out, &cfg, &cells)?;
        for cell in &cells {
            let path = rundir::write_request(&out, &cell.request(&cfg)?, "")?;
            println!("run     {}  ({})", cell.id, path.display());
        }
        for r in &skipped {
            println!(
                "skip    {}: {}",
                r.cell(),
                r.reason.clone().unwrap_or_default()
            );
        }
        eprintln!(
            "kiln: planned {} cells ({} skipped) in {}; run one with `cargo xtask bench --cell \
             FILE`, or all with `cargo xtask bench-all --resume {}`",
            cells.len(),
            skipped.len(),
            out.display(),
            out.display()
        );
        return Ok(true);
    }
    for r in &skipped {
        eprintln!(
            "kiln: skipping {}: {}",
            r.cell(),
            r.reason.clone().unwrap_or_default()
        );
        append_record(&out.join(RESULTS_FILE), r)?;
    }
    if cells.is_empty() {
        bail!(
            "no cell to run: every backend was unavailable or skipped (see `cargo xtask doctor`)"
        );
    }
    write_run_file(&out, &cfg, &cells)?;
    execute(cells, &built, cfg, &out)
}

/// Write a plan without probing, as `bench-all --plan-only` writes one (`run.json` and a request
/// per cell in `dir`, which must be new or empty): `cells` as (model, backend, device, precision,
/// loop; a data-parallel cell's device is its list, `cuda:0,cuda:1`)
/// under the run configuration `common` gives, each with its own `budget` when given.
/// `bench-all --resume DIR` runs it; the GPU kit plans a machine it is not built on this way.
pub fn write_plan(
    dir: &Path,
    common: &CommonArgs,
    cells: &[(ModelKind, &str, &str, Precision, TrainingLoop)],
    budget: Option<Duration>,
) -> Result<Vec<PlannedCell>> {
    let (_, cfg) = config(common, false)?;
    let mut planned = Vec::new();
    for &(model, backend, device, precision, training_loop) in cells {
        let (dataset, dataset_note) = dataset_for(model, common)?;
        for &batch in &cfg.batch_sizes {
            planned.push(PlannedCell {
                id: CellId::new(model, backend, device, precision, batch).with_loop(training_loop),
                dataset,
                dataset_note: dataset_note.clone(),
                budget_seconds: budget.map(|b| b.as_secs_f64()),
                autotune: None,
            });
        }
    }
    let dir = prepare_out(Some(dir))?;
    write_run_file(&dir, &cfg, &planned)?;
    for cell in &planned {
        rundir::write_request(&dir, &cell.request(&cfg)?, "")?;
    }
    Ok(planned)
}

/// `cargo xtask bench --cell FILE`: run the cell a request file describes (one that
/// `bench-all --plan-only` or a run directory's `cells/` holds, or one written by hand).
pub fn bench_request(path: &Path, out: Option<&Path>) -> Result<bool> {
    let request = CellRequest::read(path).map_err(anyhow::Error::msg)?;
    let cfg = RunConfig::of_request(&request);
    let cell = PlannedCell::of_request(&request)?;
    // Everything the request says must reach the runner: compare with the request this run
    // will give it.
    let mut carried = cell.request(&cfg)?;
    carried.dataset_note.clone_from(&request.dataset_note);
    let mut given = request.clone();
    given.dataset = carried.dataset;
    given.data_file = None;
    let differences = request_differences(&given, &carried);
    if !differences.is_empty() {
        bail!(
            "{}: `bench --cell` cannot carry {} (set by hand?); run the runner itself with \
             `--cell {}` instead",
            path.display(),
            differences.join(", "),
            path.display()
        );
    }
    let b = backends::find(&request.backend)?;
    if let Some(why) = backends::unbuildable(b) {
        bail!("backend {} cannot run here: {why}", b.name);
    }
    let out = check_out(out)?;
    let built = build_and_probe(
        &with_fallback_backends(vec![b], cfg.cell.fallback.is_some()),
        request.training_loop == TrainingLoop::Learner,
    )?;
    let out = prepare_out(Some(&out))?;
    write_run_file(&out, &cfg, std::slice::from_ref(&cell))?;
    execute(vec![cell], &built, cfg, &out)
}

/// The fields in which two requests differ, by name.
fn request_differences(a: &CellRequest, b: &CellRequest) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(a).unwrap_or_default(),
        serde_json::to_value(b).unwrap_or_default(),
    );
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => a
            .iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| format!("{k} = {v}"))
            .collect(),
        _ => vec!["an unreadable request".into()],
    }
}

/// What `cargo xtask bench` runs: one cell.
pub struct OneCell<'a> {
    pub backend: &'a str,
    pub device: Option<String>,
    /// Graphics API (wgpu): prefixes the device spec.
    pub api: Option<String>,
    pub model: ModelKind,
    pub precision: Precision,
    pub bare: bool,
    /// A data-parallel cell's devices (`--devices`).
    pub devices: Option<Vec<String>>,
    /// `--data-parallel N`: the backend's first N available devices.
    pub data_parallel: Option<usize>,
}

/// The devices of a data-parallel cell: `--devices` as given, or the first `n` available
/// devices of the backend's probe (`--data-parallel N`).
fn data_parallel_devices(
    backend: &str,
    devices: Option<Vec<String>>,
    n: Option<usize>,
    report: Option<&ProbeReport>,
) -> Result<Option<Vec<String>>> {
    let Some(n) = n else {
        return Ok(devices);
    };
    if n < 2 {
        bail!("--data-parallel {n}: a data-parallel cell needs at least 2 devices");
    }
    let report = report.context("the runner was not built")?;
    let available: Vec<String> = report
        .devices
        .iter()
        .filter(|d| d.available)
        .map(|d| d.spec.clone())
        .collect();
    if available.len() < n {
        bail!(
            "--data-parallel {n}: {backend} has {} available device(s) here ({}); name them \
             with --devices A,B (the same device twice runs two workers on it)",
            available.len(),
            available.join(", ")
        );
    }
    Ok(Some(available.into_iter().take(n).collect()))
}

/// The backend of `bench`: `--backend`, or `remote` for a remote device.
pub fn one_backend(backend: Option<String>, device: Option<&str>) -> Result<String> {
    let remote = device.is_some_and(|d| d.starts_with("remote:"));
    match backend {
        Some(b) if remote && b != "remote" => bail!(
            "--device {}: a remote device trains on the remote backend (Burn's remote client), \
             not on {b}: drop --backend, or give --backend remote",
            device.unwrap_or_default()
        ),
        Some(b) => Ok(b),
        None if remote => Ok("remote".into()),
        None => bail!("`bench` needs --backend (or a remote:ws://HOST:PORT --device)"),
    }
}

/// `cargo xtask bench`: one cell.
pub fn bench_one(common: &CommonArgs, one: OneCell) -> Result<bool> {
    let (_, mut cfg) = config(common, one.bare)?;
    let (backend, model, precision) = (one.backend, one.model, one.precision);
    let b = backends::find(backend)?;
    if let Some(why) = backends::unbuildable(b)
        && cfg.cell.fallback.is_none()
    {
        bail!("backend {backend} cannot run here: {why}");
    }
    let (dataset, note) = dataset_for(model, common)?;
    if let Some(note) = note {
        eprintln!("kiln: {note}");
    }
    let out = check_out(common.out.as_deref())?;
    // Data-parallel cells train through the Learner too.
    let learner = cfg.loops.contains(&TrainingLoop::Learner)
        || one.devices.is_some()
        || one.data_parallel.is_some();
    let built = build_and_probe(
        &with_fallback_backends(vec![b], cfg.cell.fallback.is_some()),
        learner,
    )?;
    let report = built
        .iter()
        .find(|(x, _, _)| x.name == b.name)
        .map(|(_, _, r)| r);
    let devices = data_parallel_devices(backend, one.devices, one.data_parallel, report)?;
    let first = devices.as_ref().and_then(|d| d.first().cloned());
    let spec = match (first.or(one.device), one.api, report) {
        (Some(d), Some(api), _) if !d.starts_with(&format!("{api}:")) => format!("{api}:{d}"),
        (Some(d), _, _) => d,
        (None, Some(api), Some(report)) => report
            .devices
            .iter()
            .filter(|d| d.spec.starts_with(&format!("{api}:")))
            .min_by_key(|d| (!d.available, !d.default))
            .map(|d| d.spec.clone())
            .unwrap_or_else(|| api.clone()),
        (None, _, Some(report)) => report
            .devices
            .iter()
            .find(|d| d.default)
            .map(|d| d.spec.clone())
            .unwrap_or_else(|| "default".into()),
        (None, _, None) => "default".into(),
    };
    // Without --fallback an unusable device or precision is an error before any work; with
    // it, the runner records why and the CPU fallback runs.
    let mut specs = vec![spec.clone()];
    specs.extend(devices.iter().flatten().skip(1).cloned());
    for spec in specs.iter().filter(|_| cfg.cell.fallback.is_none()) {
        let report = report.context("the runner was not built")?;
        match report.devices.iter().find(|d| d.spec == *spec) {
            Some(d) if !d.available => bail!(
                "{backend} device {spec} is unavailable: {} (see `cargo xtask doctor`; \
                 `--fallback cpu` runs the cell on the CPU instead)",
                d.reason.clone().unwrap_or_default()
            ),
            Some(d) if !d.precisions.iter().any(|p| p == precision.name()) => bail!(
                "{backend} {spec} does not support {precision}; it supports {}",
                d.precisions.join(", ")
            ),
            Some(_) => {}
            None => bail!(
                "{backend} has no device {spec:?}; its devices: {}",
                report
                    .devices
                    .iter()
                    .map(|d| d.spec.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    let kind = report
        .and_then(|r| r.devices.iter().find(|d| d.spec == spec))
        .map_or(kiln_results::DeviceKind::Cpu, |d| d.kind);
    let matrix = plan::Matrix {
        models: vec![(model, (dataset, None))],
        precisions: vec![precision],
        batch_sizes: cfg.batch_sizes.clone(),
        backends: vec![backend.to_string()],
        backends_named: true,
        all_devices: false,
        fallback: cfg.cell.fallback.is_some(),
        budget_given: common.budget.is_some(),
        autotune_given: common.autotune.is_some(),
        profile: cfg.cell.profile,
        loops: cfg.loops.clone(),
    };
    // A data-parallel run compares with its first device alone through the same loop
    // (burn-train's), and through Kiln's loop only when asked (`--loop kiln,learner`).
    let mut loops = cfg.loops.clone();
    if devices.is_some() {
        if common.training_loop.is_none() {
            loops = vec![TrainingLoop::Learner];
        }
        cfg.loops = loops.clone();
    }
    // One cell per batch size (`--batch 32,128,512` sweeps the one backend/device), per loop,
    // and the data-parallel one.
    let mut cells: Vec<PlannedCell> = Vec::new();
    for &batch_size in &cfg.batch_sizes {
        let id = CellId::new(model, backend, &spec, precision, batch_size);
        for &training_loop in &loops {
            let id = id.clone().with_loop(training_loop);
            cells.push(plan::planned(&matrix, id, &matrix.models[0].1, kind));
        }
        if let Some(devices) = &devices {
            let id = CellId::new(model, backend, &devices.join(","), precision, batch_size)
                .with_loop(TrainingLoop::Learner);
            cells.push(plan::planned(&matrix, id, &matrix.models[0].1, kind));
        }
    }
    // Each planned request must pass the cell rules before any work.
    for cell in &cells {
        cell.request(&cfg)?;
    }
    let out = prepare_out(Some(&out))?;
    write_run_file(&out, &cfg, &cells)?;
    execute(cells, &built, cfg, &out)
}

/// With `bench --cell FILE` the file is the whole cell: any flag given beside it (`given`, the
/// flags' clap ids, as `main` reads them) other than `--out` and `--token` is refused by name.
pub fn cell_only(given: &[String]) -> Result<()> {
    let extra: Vec<String> = given
        .iter()
        .filter(|id| !matches!(id.as_str(), "cell" | "out" | "token"))
        .map(|id| crate::flags::flag_name("bench", id))
        .collect();
    if !extra.is_empty() {
        bail!(
            "--cell FILE is the whole cell: {} cannot be given with it (edit the file, or use \
             --backend/--model and flags instead)",
            extra.join(", ")
        );
    }
    Ok(())
}
