//! `cargo xtask bench`: one cell, from flags or from a request file.

use std::path::Path;

use anyhow::{Context, Result, bail};
use kiln_contract::{CellId, CellRequest, ModelKind, Precision, ProbeReport, TrainingLoop};

use super::config::{PlannedCell, RunConfig, config, dataset_for};
use super::execute::{execute, with_fallback_backends};
use super::plan;
use super::rundir::{check_out, prepare_out, write_run_file};
use crate::backends;
use crate::options::CommonArgs;
use crate::runners::build_and_probe;

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
pub(super) fn data_parallel_devices(
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
    super::config::no_auto(&cfg, "bench without --burn")?;
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
    let out = check_out(common.out.get())?;
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
    let spec = device_spec(first.or(one.device), one.api, report);
    // Without --fallback an unusable device or precision is an error before any work; with
    // it, the runner records why and the CPU fallback runs.
    if cfg.cell.fallback.is_none() {
        let mut specs = vec![spec.clone()];
        specs.extend(devices.iter().flatten().skip(1).cloned());
        let report = report.context("the runner was not built")?;
        check_devices(&specs, report, backend, precision)?;
    }
    let kind = report
        .and_then(|r| r.devices.iter().find(|d| d.spec == spec))
        .map_or(kiln_contract::DeviceKind::Cpu, |d| d.kind);
    let matrix = plan::Matrix {
        models: vec![(model, (dataset, None))],
        precisions: vec![precision],
        batch_sizes: cfg.batch_sizes.clone(),
        backends: vec![backend.to_string()],
        backends_named: true,
        all_devices: false,
        fallback: cfg.cell.fallback.is_some(),
        budget_given: common.settings.budget_seconds.is_some(),
        autotune_given: common.settings.autotune.is_some(),
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

/// The device a cell runs on: the one given (with its API), else the API's best device, else
/// the backend's default.
fn device_spec(given: Option<String>, api: Option<String>, report: Option<&ProbeReport>) -> String {
    match (given, api, report) {
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
    }
}

/// An error naming the first of `specs` that the probe says is missing, unavailable or
/// without `precision`.
fn check_devices(
    specs: &[String],
    report: &ProbeReport,
    backend: &str,
    precision: Precision,
) -> Result<()> {
    for spec in specs {
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
    Ok(())
}

/// With `bench --cell FILE` the file is the whole cell: any flag given beside it other than
/// `--out` and `--token` is refused by name.
pub fn cell_only(given: &super::resume::Given) -> Result<()> {
    let extra: Vec<String> = given
        .iter()
        .filter(|(id, _)| !matches!(id.as_str(), "cell" | "out" | "token"))
        .map(|(_, name)| name.clone())
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
