//! The runner binary every backend crate provides: `kiln-<backend> --probe` reports devices;
//! `kiln-<backend> --cell FILE` (what xtask runs) or `kiln-<backend> --model NAME ...` (flags
//! that only build the same request) trains one cell and prints JSON lines (events, then one
//! final record) on standard output. Human-readable notes go to standard error. [`bench`] is the
//! same thing as a library call, for programs that embed one backend crate.

use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use burn::prelude::*;
use burn::tensor::FloatDType;
use clap::Parser;

use kiln_data::{Origin, Request};
use kiln_results::{
    AutotuneLevel, CellRequest, DataKind, DatasetName, DeviceKind, DeviceReport, Event, FloatKind,
    Measurements, ModelKind, Observed, Precision, ProbeReport, Profile, Record, SCHEMA_VERSION,
    Status, TrainingLoop, Vocabulary, parse_duration,
};

#[cfg(feature = "learner")]
use crate::learner;
use crate::models::{BuildModel, Classifier, WithModel};
use crate::protocol::{self, DeviceData, Protocol};
use crate::{BURN_VERSION, CoreError, calibrate, fingerprint, memory};

/// What a thin backend crate tells the runner about its backend.
pub trait Binding {
    /// Kiln's name of the backend (`flex`, `ndarray`, ...).
    fn name(&self) -> &'static str;
    /// Version of the Burn backend crate.
    fn version(&self) -> &'static str;
    /// Every device the backend can see, probed without panicking.
    fn probe(&self) -> Vec<DeviceReport>;
    /// The device `spec` names (`default` for the default one), or why it cannot be used.
    fn device(&self, spec: &str) -> Result<Selected, String>;
    /// Worker threads the backend computes with.
    fn threads(&self) -> usize;
    /// Whether the backend has collective operations (all-reduce) between its devices, so
    /// that burn-train can train data-parallel cells with DDP; without, MultiDevice.
    fn collectives(&self) -> bool {
        false
    }
}

/// A device a binding selected for a cell.
pub struct Selected {
    pub device: Device,
    /// The spec `--probe` lists for it (what `default` resolved to).
    pub spec: String,
    /// Human-readable name (the CPU model, the adapter's name).
    pub name: String,
    pub kind: DeviceKind,
    /// How a GPU runtime is set up (API, driver, fusion, autotune).
    pub runtime: Option<kiln_results::Runtime>,
    /// A device another machine serves: that machine and the link.
    pub remote: Option<kiln_results::Remote>,
}

impl Selected {
    /// The host CPU as the device of a CPU backend.
    pub fn cpu(device: Device) -> Selected {
        Selected {
            device,
            spec: "cpu".into(),
            name: fingerprint::cpu_model(),
            kind: DeviceKind::Cpu,
            runtime: None,
            remote: None,
        }
    }
}

/// Burn's float type for one of Kiln's.
pub fn dtype(kind: FloatKind) -> FloatDType {
    match kind {
        FloatKind::F32 => FloatDType::F32,
        FloatKind::F16 => FloatDType::F16,
        FloatKind::BF16 => FloatDType::BF16,
    }
}

/// The compute type of a mixed-precision mode (`None` for pure modes).
pub fn amp_dtype(precision: Precision) -> Option<FloatDType> {
    precision.is_amp().then(|| dtype(precision.compute()))
}

/// The precisions `device` computes in (an `amp-*` mode needs its compute type).
pub fn supported_precisions(device: &Device) -> Vec<String> {
    Precision::ALL
        .iter()
        .filter(|p| device.supports_dtype(dtype(p.compute())))
        .map(|p| p.name().to_string())
        .collect()
}

/// The probe entry of a backend whose only device is the host CPU.
pub fn cpu_device_report(device: &Device) -> DeviceReport {
    DeviceReport {
        spec: "cpu".into(),
        name: fingerprint::cpu_model(),
        kind: DeviceKind::Cpu,
        available: true,
        reason: None,
        precisions: supported_precisions(device),
        default: true,
        memory_bytes: fingerprint::memory_bytes(),
        runtime: None,
    }
}

/// The flags that train a cell: each one only sets a field of the [`CellRequest`] it builds.
const CELL_FLAGS: &[&str] = &[
    "model",
    "device",
    "api",
    "precision",
    "autotune",
    "no_autotune_cache",
    "epochs",
    "batch",
    "budget",
    "seed",
    "dataset",
    "data_dir",
    "synthetic",
    "quick",
    "eval_limit",
    "train_limit",
    "no_calibrate",
    "cached_calibration",
    "accum_steps",
    "inject_nan_at_step",
    "bare",
    "target_accuracy",
    "training_loop",
    "devices",
];

#[derive(Parser, Debug)]
#[command(
    about = "Kiln runner: trains one benchmark cell on this backend and prints JSON lines",
    after_help = "Run by `cargo xtask bench` with --cell; can be run directly. See the README."
)]
struct Args {
    /// Print this backend's devices as JSON and exit.
    #[arg(long)]
    probe: bool,
    /// The whole cell as a JSON request (what xtask writes); no other cell flag may be given.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS)]
    cell: Option<PathBuf>,
    /// Time every operation of one training step alone (what `cargo xtask explain` writes as
    /// an explain request) and print the record as one JSON line.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS, conflicts_with = "cell")]
    explain: Option<PathBuf>,
    /// Train K steps from given weights on the first K batches and print the losses (what
    /// `cargo xtask verify` writes as a verify request) as one JSON line.
    #[arg(long, value_name = "FILE", conflicts_with_all = CELL_FLAGS, conflicts_with_all = ["cell", "explain"])]
    verify: Option<PathBuf>,
    /// Model: mnist-cnn, resnet18 or resnet18-gray.
    #[arg(long)]
    model: Option<ModelKind>,
    /// Device spec from --probe (`default` picks the backend's default device).
    #[arg(long)]
    device: Option<String>,
    /// Graphics API of a GPU backend (wgpu: vulkan, metal, dx12, webgpu); prefixes --device.
    #[arg(long)]
    api: Option<String>,
    /// f32, f16, bf16 (pure), amp-f16 or amp-bf16 (mixed, with dynamic loss scaling).
    #[arg(long)]
    precision: Option<Precision>,
    /// CubeCL autotune level (minimal, balanced, extensive, full) for GPU backends.
    #[arg(long)]
    autotune: Option<AutotuneLevel>,
    /// Neither read nor write CubeCL's on-disk autotune cache (a cold-cache cell).
    #[arg(long)]
    no_autotune_cache: bool,
    /// Epochs (default: 20, or 3 with --quick).
    #[arg(long)]
    epochs: Option<usize>,
    /// Batch size (default 128).
    #[arg(long)]
    batch: Option<usize>,
    /// Training time budget of the cell: 90s, 5m, 1h or none (default: 20m, or 200s with --quick).
    #[arg(long)]
    budget: Option<String>,
    /// Seed of initialisation, shuffling and synthetic data (default 42).
    #[arg(long)]
    seed: Option<u64>,
    /// Dataset: mnist, fashion-mnist, fashion-mnist-sample, cifar-10, synthetic, or your own
    /// files in --data-dir: idx (IDX image/label pairs) or image-folder (a folder per class).
    #[arg(long)]
    dataset: Option<DatasetName>,
    /// Directory holding dataset files (directly or in a subfolder named after the dataset).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Train on generated data of the model's input shape.
    #[arg(long)]
    synthetic: bool,
    /// Quick profile: embedded sample, 3 epochs, 200 s budget.
    #[arg(long)]
    quick: bool,
    /// Evaluate at most this many test samples after each epoch.
    #[arg(long)]
    eval_limit: Option<usize>,
    /// Train on at most this many training samples (smoke runs and tests).
    #[arg(long)]
    train_limit: Option<usize>,
    /// Skip the GEMM calibration (no efficiency figures in the record).
    #[arg(long)]
    no_calibrate: bool,
    /// Use the device's GEMM peak from the calibration cache when it holds one (by default it
    /// is measured afresh).
    #[arg(long)]
    cached_calibration: bool,
    /// Gradient accumulation: run each batch as N micro-batches (N must divide the batch).
    #[arg(long)]
    accum_steps: Option<usize>,
    /// Fault injection (tests): make the loss of this step NaN.
    #[arg(long, hide = true)]
    inject_nan_at_step: Option<usize>,
    /// Measure the Kiln loop against a bare loop of the same steps instead of a full cell.
    #[arg(long)]
    bare: bool,
    /// Record the training time until the test accuracy first reaches A (0.8 for 80%).
    #[arg(long, value_name = "A")]
    target_accuracy: Option<f64>,
    /// Training loop: kiln (Kiln's own, the default) or learner (burn-train's Learner).
    #[arg(long = "loop", value_name = "LOOP")]
    training_loop: Option<TrainingLoop>,
    /// Train the cell data-parallel on these devices (specs from --probe, comma-separated;
    /// the first holds the optimizer); implies --loop learner.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SPECS",
        conflicts_with = "device"
    )]
    devices: Option<Vec<String>>,
}

impl Args {
    /// The request these flags describe (validated).
    fn request(&self, backend: &str) -> Result<CellRequest, String> {
        let model = self.model.ok_or_else(|| {
            format!(
                "--model is required (one of {}), or --cell FILE",
                ModelKind::names()
            )
        })?;
        let mut r = CellRequest::new(model, backend, Profile::from_quick(self.quick));
        let device = match &self.devices {
            Some(list) => list.first().cloned().unwrap_or_else(|| "default".into()),
            None => self.device.clone().unwrap_or_else(|| "default".into()),
        };
        r.device = match &self.api {
            Some(api) if device == "default" => api.clone(),
            Some(api) => format!("{api}:{device}"),
            None => device,
        };
        if let Some(p) = self.precision {
            r.precision = p;
        }
        if let Some(text) = &self.budget {
            r.budget_seconds = parse_duration(text)
                .map_err(|e| format!("--budget: {e}"))?
                .map(|b| b.as_secs_f64());
        }
        r.epochs = self.epochs.unwrap_or(r.epochs);
        r.batch_size = self.batch.unwrap_or(r.batch_size);
        r.seed = self.seed.unwrap_or(r.seed);
        r.accum_steps = self.accum_steps.unwrap_or(r.accum_steps);
        r.dataset = if self.synthetic {
            Some(DatasetName::Synthetic)
        } else {
            self.dataset
        };
        r.data_dir = self.data_dir.clone();
        r.eval_limit = self.eval_limit;
        r.train_limit = self.train_limit;
        r.autotune = self.autotune;
        r.autotune_cache = !self.no_autotune_cache;
        r.calibrate = !self.no_calibrate;
        r.recalibrate = !self.cached_calibration;
        r.bare = self.bare;
        r.target_accuracy = self.target_accuracy;
        r.inject_nan_at_step = self.inject_nan_at_step;
        r.devices = self.devices.clone().unwrap_or_default();
        r.training_loop = self.training_loop.unwrap_or(if r.devices.is_empty() {
            TrainingLoop::Kiln
        } else {
            TrainingLoop::Learner
        });
        r.validate()?;
        Ok(r)
    }
}

fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(event) {
        // A closed pipe means the parent is gone; there is nobody left to tell.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Everything about a cell that is known before it trains, and what it learns as it goes.
struct Cell<'a> {
    request: &'a CellRequest,
    /// The device spec as resolved (`default` becomes the backend's default device).
    device: String,
    device_name: String,
    dataset: String,
    data_note: Option<String>,
    started_at: u64,
    started: Instant,
    args: Vec<String>,
    threads: usize,
    device_kind: Option<DeviceKind>,
    runtime: Option<kiln_results::Runtime>,
    remote: Option<kiln_results::Remote>,
    backend_version: String,
    flops_per_sample: Option<u64>,
    peak: Option<kiln_results::Calibration>,
    data: DataKind,
}

impl Cell<'_> {
    /// What this runner observed of the cell so far.
    fn observed(
        &self,
        status: Status,
        reason: Option<String>,
        measurements: Option<Measurements>,
    ) -> Observed {
        Observed {
            status,
            reason,
            device: self.device.clone(),
            device_name: self.device_name.clone(),
            device_kind: self.device_kind,
            runtime: self.runtime.clone(),
            device_memory_bytes: None,
            backend_version: self.backend_version.clone(),
            threads: self.threads,
            dataset: self.dataset.clone(),
            data: self.data,
            notes: self.data_note.iter().cloned().collect(),
            flops_per_sample: self.flops_per_sample,
            peak: self.peak.clone(),
            peak_memory_bytes: memory::peak_rss_bytes(),
            started_at: self.started_at,
            wall_seconds: self.started.elapsed().as_secs_f64(),
            args: self.args.clone(),
            measurements,
            loop_overhead: None,
            data_parallel: None,
            remote: self.remote.clone(),
        }
    }

    /// The cell's record, by the rules every runner's records follow.
    fn record(
        &self,
        status: Status,
        reason: Option<String>,
        measurements: Option<Measurements>,
    ) -> Record {
        self.observed(status, reason, measurements).into_record(
            self.request,
            fingerprint::collect(self.threads, BURN_VERSION),
        )
    }
}

fn run_cell(
    binding: &dyn Binding,
    cell: &mut Cell,
    sink: &mut dyn FnMut(&Event),
) -> Result<Record, CoreError> {
    let request = cell.request;
    let kind = request.model;
    let precision = request.precision;
    let selected = match binding.device(&request.device) {
        Ok(found) => found,
        Err(why) => {
            return Ok(cell.record(
                Status::Skipped,
                Some(format!("device {} unavailable: {why}", request.device)),
                None,
            ));
        }
    };
    let mut device = selected.device;
    cell.device_name = selected.name;
    // Until every device of a data-parallel cell is open, the cell is the list it asked for.
    let first_spec = selected.spec;
    cell.device = if request.devices.is_empty() {
        first_spec.clone()
    } else {
        request.devices.join(",")
    };
    cell.device_kind = Some(selected.kind);
    cell.runtime = selected.runtime;
    cell.remote = selected.remote;
    if !device.supports_dtype(dtype(precision.compute())) {
        return Ok(cell.record(
            Status::Skipped,
            Some(format!(
                "{} does not support {precision} on this device (supported: {})",
                binding.name(),
                supported_precisions(&device).join(", ")
            )),
            None,
        ));
    }
    // The weights' type (pure f16/bf16 cells); f32 and amp keep f32 weights.
    if precision.weights() != FloatKind::F32 {
        device
            .configure(dtype(precision.weights()))
            .map_err(|e| CoreError::Device(format!("cannot use {precision}: {e:?}")))?;
    }
    // Calibrate before seeding, so the model's initialisation never depends on the cache.
    if let Some(given) = &request.given_peak {
        cell.peak = Some(given.clone());
    } else if request.calibrate || request.calibrate_only {
        let key = format!(
            "{}|{}|{}|{} threads|{precision}",
            binding.name(),
            cell.device,
            cell.device_name,
            cell.threads,
        );
        match calibrate::peak(&device, &key, request.recalibrate) {
            Ok(c) => {
                eprintln!(
                    "kiln: GEMM peak {:.1} GFLOP/s ({}x{}{})",
                    c.gflops,
                    c.matrix,
                    c.matrix,
                    if c.cached { ", cached" } else { "" }
                );
                cell.peak = Some(c);
            }
            Err(e) => eprintln!("kiln: GEMM calibration failed, no efficiency figures: {e}"),
        }
    }
    if request.calibrate_only {
        return Ok(cell.record(Status::Ok, Some("GEMM calibration only".into()), None));
    }
    cell.flops_per_sample = Some(crate::models::training_flops_per_sample(kind));
    device.seed(request.seed);
    let device = device.autodiff();
    // A data-parallel cell's other devices, set up as the first one.
    let mut devices = vec![device.clone()];
    let mut specs = vec![first_spec];
    for spec in request.devices.iter().skip(1) {
        match open_device(binding, spec, precision, request.seed)? {
            Ok((d, resolved, _)) => {
                devices.push(d);
                specs.push(resolved);
            }
            Err(why) => return Ok(cell.record(Status::Skipped, Some(why), None)),
        }
    }
    if devices.len() > 1 {
        cell.device = specs.join(",");
    }

    let geometry = kind.geometry();
    let quick = request.profile == Profile::Quick;
    let (dataset_name, note) = match request.dataset {
        Some(name) => (name, request.dataset_note.clone()),
        None => kiln_data::default_dataset(geometry, quick, request.data_dir.as_deref())?,
    };
    let mut dataset = kiln_data::load(&Request {
        name: dataset_name,
        geometry,
        data_dir: request.data_dir.clone(),
        seed: request.seed,
        synthetic_sizes: request.profile.synthetic_sizes(kind.standard_epoch()),
    })?;
    if let Some(n) = request.train_limit {
        dataset.train = dataset.train.truncated(n, geometry);
    }
    cell.dataset = dataset.name.clone();
    cell.data_note = dataset.note.clone().or(note);
    cell.data = match dataset.origin {
        Origin::Real => DataKind::Real,
        Origin::Custom => DataKind::Custom,
        Origin::Synthetic => DataKind::Synthetic,
    };
    for (path, verdict) in &dataset.files {
        eprintln!("kiln: {} ({verdict:?})", path.display());
    }

    let protocol = Protocol::from_request(request);
    let precision_name = precision.to_string();
    let identity = (
        binding.name(),
        cell.device.as_str(),
        cell.device_name.as_str(),
        precision_name.as_str(),
    );
    #[cfg(not(feature = "learner"))]
    if request.training_loop == TrainingLoop::Learner {
        return Err(CoreError::Config(format!(
            "this {} runner was built without burn-train's Learner; `cargo xtask bench --loop \
             learner` builds it with it (cargo's `learner` feature of the backend crate)",
            binding.name()
        )));
    }
    #[cfg(feature = "learner")]
    if request.training_loop == TrainingLoop::Learner {
        let test_len = dataset
            .test
            .len()
            .min(protocol.eval_limit.unwrap_or(usize::MAX));
        let train_len = dataset.train.len();
        let steps = train_len
            .div_ceil(devices.len())
            .div_ceil(protocol.batch_size);
        sink(&protocol::start_event(
            kind.name(),
            identity,
            &dataset,
            (train_len, test_len, steps),
            &protocol,
        ));
        let strategy = learner::Strategy::for_devices(devices.len(), binding.collectives());
        let (measurements, setup) = kind.build(
            &device,
            LearnerTrain {
                devices: &devices,
                strategy,
                data: &dataset,
                protocol: &protocol,
                sink: &mut |e: &Event| sink(e),
            },
        )?;
        let mut observed = cell.observed(Status::Ok, None, Some(measurements));
        if let Some(s) = setup {
            observed.notes.push(format!(
                "burn-train's set-up before its first batch took {s:.2} s (in no epoch)"
            ));
        }
        if devices.len() > 1 {
            observed.data_parallel = Some(kiln_results::DataParallel {
                devices: specs,
                strategy: strategy.name().into(),
                global_batch_size: protocol.batch_size * devices.len(),
            });
        }
        return Ok(observed.into_record(request, fingerprint::collect(cell.threads, BURN_VERSION)));
    }
    let data = DeviceData::upload(&dataset, &device, protocol.eval_limit);
    sink(&protocol::start_event(
        kind.name(),
        identity,
        &dataset,
        (
            data.train_len,
            data.test_len,
            data.train_len.div_ceil(protocol.batch_size),
        ),
        &protocol,
    ));

    let record = if request.bare {
        let (rounds, steps) = if quick { (3, 10) } else { (5, 20) };
        let overhead = kind.build(
            &device,
            Overhead {
                device: &device,
                data: &data,
                protocol: &protocol,
                rounds,
                steps,
            },
        )?;
        let mut observed = cell.observed(
            Status::Ok,
            Some("loop-overhead measurement (--bare): no epoch time".into()),
            None,
        );
        observed.loop_overhead = Some(overhead);
        let mut r = observed.into_record(request, fingerprint::collect(cell.threads, BURN_VERSION));
        r.train_samples = data.train_len;
        r
    } else {
        let mut events = |e: &Event| sink(e);
        let measurements = kind.build(
            &device,
            Train {
                device: &device,
                data: &data,
                protocol: &protocol,
                sink: &mut events,
            },
        )?;
        cell.record(Status::Ok, None, Some(measurements))
    };
    Ok(record)
}

/// A whole cell under the protocol, for any model.
struct Train<'a> {
    device: &'a Device,
    data: &'a DeviceData,
    protocol: &'a Protocol,
    sink: &'a mut dyn protocol::Sink,
}

impl WithModel for Train<'_> {
    type Output = Result<Measurements, CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        protocol::train(model, self.device, self.data, self.protocol, self.sink)
    }
}

/// A whole cell through burn-train (`--loop learner`), for any model.
#[cfg(feature = "learner")]
struct LearnerTrain<'a> {
    devices: &'a [Device],
    strategy: learner::Strategy,
    data: &'a kiln_data::Dataset,
    protocol: &'a Protocol,
    sink: &'a mut dyn protocol::Sink,
}

#[cfg(feature = "learner")]
impl WithModel for LearnerTrain<'_> {
    type Output = Result<(Measurements, Option<f64>), CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        learner::train(
            model,
            self.devices,
            self.strategy,
            self.data,
            self.protocol,
            self.sink,
        )
    }
}

/// The loop-overhead measurement (`--bare`), for any model.
struct Overhead<'a> {
    device: &'a Device,
    data: &'a DeviceData,
    protocol: &'a Protocol,
    rounds: usize,
    steps: usize,
}

impl WithModel for Overhead<'_> {
    type Output = Result<kiln_results::LoopOverhead, CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        protocol::loop_overhead(
            model,
            self.device,
            self.data,
            self.protocol,
            self.rounds,
            self.steps,
        )
    }
}

/// Train and time one cell on `binding`'s device as `request` says, sending progress events to
/// `sink`, and return its record: the library form of a runner, for a program that embeds one
/// backend crate. A request that does not validate, a failure and a panic inside the backend
/// all become a record whose status says so; this never panics. CubeCL's autotune settings
/// (`request.autotune`, `request.autotune_cache`) are environment variables read when a
/// device starts: only the runner binary sets them (see [`set_runtime_env`]).
pub fn bench(binding: &dyn Binding, request: &CellRequest, sink: &mut dyn FnMut(&Event)) -> Record {
    bench_with_args(binding, request, Vec::new(), sink)
}

fn bench_with_args(
    binding: &dyn Binding,
    request: &CellRequest,
    args: Vec<String>,
    sink: &mut dyn FnMut(&Event),
) -> Record {
    let mut cell = Cell {
        request,
        // A data-parallel cell is its device list (`cuda:0,cuda:1`), skipped or not.
        device: request.id().device,
        device_name: request.device.clone(),
        dataset: String::new(),
        data_note: None,
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        started: Instant::now(),
        args,
        threads: binding.threads(),
        device_kind: None,
        runtime: None,
        remote: None,
        backend_version: binding.version().into(),
        flops_per_sample: None,
        peak: None,
        data: DataKind::Synthetic,
    };
    if let Err(e) = request.validate() {
        return cell.record(Status::Failed, Some(e), None);
    }
    if request.backend != binding.name() {
        return cell.record(
            Status::Failed,
            Some(format!(
                "the request is for backend {:?}, this is {}",
                request.backend,
                binding.name()
            )),
            None,
        );
    }
    // A panic inside a backend (an unsupported op, an allocation failure) becomes this cell's
    // failed record instead of a silent crash.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| run_cell(binding, &mut cell, sink)));
    match result {
        Ok(Ok(record)) => record,
        Ok(Err(e)) => {
            eprintln!("kiln: {e}");
            let e = e.to_string();
            cell.record(failure_status(&e), Some(e), None)
        }
        Err(panic) => {
            let text = panic_text(panic.as_ref());
            cell.record(
                failure_status(&text),
                Some(format!("the backend panicked: {text}")),
                None,
            )
        }
    }
}

/// A failure's status: out of memory when its text says so (a result at this batch size),
/// else failed.
fn failure_status(text: &str) -> Status {
    if kiln_results::says_out_of_memory(text) {
        Status::OutOfMemory
    } else {
        Status::Failed
    }
}

/// Run a one-shot request (`explain`, `verify`) for `backend` on `binding`: its own check
/// (`valid`) and the backend's name first, then `work`, which returns `Some(why)` when it found
/// the device or precision unusable. The record's status and reason: ok; skipped with why;
/// failed with the error or the panic inside the backend.
pub(crate) fn one_shot(
    binding: &dyn Binding,
    backend: &str,
    valid: Result<(), String>,
    work: impl FnOnce() -> Result<Option<String>, CoreError>,
) -> (Status, Option<String>) {
    if let Err(why) = valid {
        return (Status::Failed, Some(why));
    }
    if backend != binding.name() {
        let why = format!(
            "the request is for backend {backend:?}, this is {}",
            binding.name()
        );
        return (Status::Failed, Some(why));
    }
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(None)) => (Status::Ok, None),
        Ok(Ok(Some(why))) => (Status::Skipped, Some(why)),
        Ok(Err(e)) => (Status::Failed, Some(e.to_string())),
        Err(panic) => (
            Status::Failed,
            Some(format!(
                "the backend panicked: {}",
                panic_text(panic.as_ref())
            )),
        ),
    }
}

/// The device `spec` names as an autodiff device set up for `precision` (its weights type
/// configured) and seeded with `seed`, with its resolved spec and name; `Ok(Err(why))` when
/// it is unavailable or lacks the precision.
pub(crate) fn open_device(
    binding: &dyn Binding,
    spec: &str,
    precision: Precision,
    seed: u64,
) -> Result<Result<(Device, String, String), String>, CoreError> {
    let selected = match binding.device(spec) {
        Ok(s) => s,
        Err(why) => return Ok(Err(format!("device {spec} unavailable: {why}"))),
    };
    let mut device = selected.device;
    if !device.supports_dtype(dtype(precision.compute())) {
        return Ok(Err(format!(
            "{} does not support {precision} on this device (supported: {})",
            binding.name(),
            supported_precisions(&device).join(", ")
        )));
    }
    if precision.weights() != FloatKind::F32 {
        device
            .configure(dtype(precision.weights()))
            .map_err(|e| CoreError::Device(format!("cannot use {precision}: {e:?}")))?;
    }
    device.seed(seed);
    Ok(Ok((device.autodiff(), selected.spec, selected.name)))
}

/// What a caught panic said (its message, when it carried one).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// The runner's `main`: parse arguments, probe or train, print JSON lines.
pub fn main(binding: &dyn Binding) -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let args = match Args::try_parse_from(&argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    if args.probe {
        let report = ProbeReport {
            backend: binding.name().into(),
            backend_version: binding.version().into(),
            devices: binding.probe(),
        };
        match serde_json::to_string(&report) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("kiln: cannot encode the probe report: {e}");
                return ExitCode::from(1);
            }
        }
        return ExitCode::SUCCESS;
    }
    if let Some(path) = &args.explain {
        return answer(
            path,
            "explain",
            kiln_results::explain::ExplainRequest::read,
            |r| {
                let record = crate::explain::explain(binding, r);
                (serde_json::to_string(&record), record.status)
            },
        );
    }
    if let Some(path) = &args.verify {
        return answer(
            path,
            "verify",
            kiln_results::verify::VerifyRequest::read,
            |r| {
                let record = crate::verify::verify(binding, r);
                (serde_json::to_string(&record), record.status)
            },
        );
    }
    let request = match &args.cell {
        Some(path) => CellRequest::read(path),
        None => args.request(binding.name()),
    };
    let request = match request {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
    };
    set_runtime_env(&request);
    let record = bench_with_args(binding, &request, argv[1..].to_vec(), &mut |e| emit(e));
    debug_assert_eq!(record.schema, SCHEMA_VERSION);
    let failed = record.status == Status::Failed;
    emit(&Event::Final(Box::new(record)));
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `--explain FILE` and `--verify FILE`: read the request with `read`, answer it with `run`
/// and print the record (`what`) as one JSON line; exit 1 when it failed.
fn answer<Q>(
    path: &std::path::Path,
    what: &str,
    read: fn(&std::path::Path) -> Result<Q, String>,
    run: impl FnOnce(&Q) -> (serde_json::Result<String>, Status),
) -> ExitCode {
    let request = match read(path) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
    };
    let (line, status) = run(&request);
    match line {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("kiln: cannot encode the {what} record: {e}");
            return ExitCode::from(1);
        }
    }
    if status == Status::Failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Turn the request's runtime settings into the environment CubeCL reads when a device starts.
/// Only for a process's `main`, before any other thread starts: setting the environment while
/// other threads read it is undefined behaviour.
pub fn set_runtime_env(request: &CellRequest) {
    let mut vars = Vec::new();
    if let Some(level) = request.autotune {
        vars.push(("CUBECL_AUTOTUNE_LEVEL", level.name()));
    }
    if !request.autotune_cache {
        vars.push(("CUBECL_AUTOTUNE_CACHE", "false"));
    }
    for (key, value) in vars {
        // SAFETY: called from `main` before any device, thread pool or other thread starts,
        // so nothing reads the environment concurrently.
        unsafe { std::env::set_var(key, value) };
    }
}

/// Threads a rayon-based CPU backend uses: `RAYON_NUM_THREADS`, else one per logical core.
pub fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}
