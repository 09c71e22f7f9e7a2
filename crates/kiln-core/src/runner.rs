//! The runner binary every backend crate provides: `kiln-<backend> --probe` reports devices;
//! `kiln-<backend> --model NAME ...` trains one cell and prints JSON lines (events, then one
//! final record) on standard output. Human-readable notes go to standard error.

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
    CellId, DataKind, DeviceReport, Event, ProbeReport, Profile, Record, SCHEMA_VERSION, Status,
    parse_duration,
};

use crate::models::{Classifier, MODEL_NAMES, ModelKind, WithModel};
use crate::protocol::{self, DeviceData, Outcome, Protocol};
use crate::{CoreError, calibrate, fingerprint, memory};

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
}

/// A device a binding selected for a cell.
pub struct Selected {
    pub device: Device,
    /// The spec `--probe` lists for it (what `default` resolved to).
    pub spec: String,
    /// Human-readable name (the CPU model, the adapter's name).
    pub name: String,
    /// `cpu`, `discrete-gpu`, `integrated-gpu`, `virtual-gpu` or `cpu-emulated-gpu`.
    pub kind: String,
    /// How a GPU runtime is set up (API, driver, fusion, autotune).
    pub runtime: Option<kiln_results::Runtime>,
}

impl Selected {
    /// The host CPU as the device of a CPU backend.
    pub fn cpu(device: Device) -> Selected {
        Selected {
            device,
            spec: "cpu".into(),
            name: fingerprint::cpu_model(),
            kind: "cpu".into(),
            runtime: None,
        }
    }
}

/// Float precision of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything in f32.
    F32,
    /// Pure f16: weights, optimizer state, activations and gradients (diverges; kept as a row).
    F16,
    /// Pure bf16.
    BF16,
    /// Mixed precision: f32 master weights and optimizer, f16 forward and backward, dynamic
    /// loss scaling.
    AmpF16,
    /// Mixed precision with bf16 compute.
    AmpBF16,
}

/// Precision names accepted on the command line.
pub const PRECISION_NAMES: &[&str] = &["f32", "f16", "bf16", "amp-f16", "amp-bf16"];

impl Precision {
    /// Parse a command-line name.
    pub fn parse(name: &str) -> Option<Precision> {
        match name {
            "f32" => Some(Precision::F32),
            "f16" => Some(Precision::F16),
            "bf16" => Some(Precision::BF16),
            "amp-f16" => Some(Precision::AmpF16),
            "amp-bf16" => Some(Precision::AmpBF16),
            _ => None,
        }
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::BF16 => "bf16",
            Precision::AmpF16 => "amp-f16",
            Precision::AmpBF16 => "amp-bf16",
        }
    }

    /// Burn's float type the forward and backward passes compute in.
    pub fn dtype(self) -> FloatDType {
        match self {
            Precision::F32 => FloatDType::F32,
            Precision::F16 | Precision::AmpF16 => FloatDType::F16,
            Precision::BF16 | Precision::AmpBF16 => FloatDType::BF16,
        }
    }

    /// The compute type of a mixed-precision mode (`None` for pure modes).
    pub fn amp(self) -> Option<FloatDType> {
        match self {
            Precision::AmpF16 | Precision::AmpBF16 => Some(self.dtype()),
            _ => None,
        }
    }
}

/// The precisions `device` computes in (an `amp-*` mode needs its compute type).
pub fn supported_precisions(device: &Device) -> Vec<String> {
    PRECISION_NAMES
        .iter()
        .filter_map(|n| Precision::parse(n))
        .filter(|p| device.supports_dtype(p.dtype()))
        .map(|p| p.name().to_string())
        .collect()
}

/// The probe entry of a backend whose only device is the host CPU.
pub fn cpu_device_report(device: &Device) -> DeviceReport {
    DeviceReport {
        spec: "cpu".into(),
        name: fingerprint::cpu_model(),
        kind: "cpu".into(),
        available: true,
        reason: None,
        precisions: supported_precisions(device),
        default: true,
        memory_bytes: fingerprint::memory_bytes(),
        runtime: None,
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "Kiln runner: trains one benchmark cell on this backend and prints JSON lines",
    after_help = "Run by `cargo xtask bench`; can be run directly. See the README."
)]
struct Args {
    /// Print this backend's devices as JSON and exit.
    #[arg(long)]
    probe: bool,
    /// Model: mnist-cnn, resnet18 or resnet18-gray.
    #[arg(long)]
    model: Option<String>,
    /// Device spec from --probe (`default` picks the backend's default device).
    #[arg(long, default_value = "default")]
    device: String,
    /// Graphics API of a GPU backend (wgpu: vulkan, metal, dx12, webgpu); prefixes --device.
    #[arg(long)]
    api: Option<String>,
    /// f32, f16, bf16 (pure), amp-f16 or amp-bf16 (mixed, with dynamic loss scaling).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// CubeCL autotune level (minimal, balanced, extensive, full) for GPU backends.
    #[arg(long)]
    autotune: Option<String>,
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
    /// Seed of initialisation, shuffling and synthetic data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Dataset: mnist, fashion-mnist, fashion-mnist-sample, cifar-10 or synthetic.
    #[arg(long)]
    dataset: Option<String>,
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
    /// Measure the device's GEMM peak again even if it is cached.
    #[arg(long)]
    recalibrate: bool,
    /// Gradient accumulation: run each batch as N micro-batches (N must divide the batch).
    #[arg(long, default_value_t = 1)]
    accum_steps: usize,
    /// Fault injection (tests): make the loss of this step NaN.
    #[arg(long, hide = true)]
    inject_nan_at_step: Option<usize>,
    /// Measure the Kiln loop against a bare loop of the same steps instead of a full cell.
    #[arg(long)]
    bare: bool,
}

fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(event) {
        // A closed pipe means the parent is gone; there is nobody left to tell.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Everything about a cell that is known before it trains.
struct Cell {
    id: CellId,
    device_name: String,
    protocol: Protocol,
    dataset: String,
    data_note: Option<String>,
    started_at: u64,
    started: Instant,
    args: Vec<String>,
    threads: usize,
    device_kind: Option<String>,
    runtime: Option<kiln_results::Runtime>,
    backend_version: String,
    flops_per_sample: Option<u64>,
    peak: Option<kiln_results::Calibration>,
}

impl Cell {
    fn record(&self, status: Status, reason: Option<String>, outcome: Option<Outcome>) -> Record {
        let mut r = Record::not_run(&self.id, status, "");
        r.reason = reason;
        r.device_name = self.device_name.clone();
        r.batch_size = self.protocol.batch_size;
        r.accum_steps = self.protocol.accum_steps;
        r.micro_batch_size = self.protocol.batch_size / self.protocol.accum_steps.max(1);
        r.epochs_requested = self.protocol.epochs;
        r.seed = self.protocol.seed;
        r.dataset = self.dataset.clone();
        r.fingerprint = fingerprint::collect(self.threads);
        r.fingerprint.backend_version = self.backend_version.clone();
        r.flops_per_sample = self.flops_per_sample;
        r.peak = self.peak.clone();
        r.device_kind = self.device_kind.clone();
        r.runtime = self.runtime.clone();
        if self
            .device_kind
            .as_deref()
            .is_some_and(|k| k.ends_with("gpu"))
        {
            r.fingerprint.gpu_name = Some(self.device_name.clone());
            r.fingerprint.gpu_driver = self.runtime.as_ref().and_then(|rt| rt.driver.clone());
        }
        r.started_at = self.started_at;
        r.wall_seconds = self.started.elapsed().as_secs_f64();
        r.args = self.args.clone();
        r.peak_memory_bytes = memory::peak_rss_bytes();
        r.obtained.budget_seconds = self.protocol.budget.map(|b| b.as_secs_f64());
        if let Some(o) = outcome {
            r.epoch_seconds = o.epoch_seconds;
            r.first_epoch_seconds = o.first_epoch_seconds;
            r.first_step_seconds = o.first_step_seconds;
            r.images_per_second = o.images_per_second;
            r.achieved_gflops = o
                .images_per_second
                .zip(self.flops_per_sample)
                .map(|(ips, flops)| ips * flops as f64 / 1e9);
            r.device_memory = o.device_memory;
            r.test_accuracy = o.test_accuracy;
            r.test_samples = o.test_samples;
            r.train_samples = o.train_samples;
            r.obtained = o.obtained;
            r.epochs = o.epochs;
            r.loss_scaling = o.loss_scaling;
            let notes: Vec<String> = [r.reason.take(), o.note, self.data_note.clone()]
                .into_iter()
                .flatten()
                .collect();
            r.reason = (!notes.is_empty()).then(|| notes.join("; "));
        }
        r
    }
}

fn run_cell(binding: &dyn Binding, args: &Args, cell: &mut Cell) -> Result<Record, CoreError> {
    let kind = args
        .model
        .as_deref()
        .and_then(ModelKind::parse)
        .ok_or_else(|| CoreError::Config("--model is required".into()))?;
    let precision = Precision::parse(&args.precision).ok_or_else(|| {
        CoreError::Config(format!(
            "unknown precision {:?}; known: {}",
            args.precision,
            PRECISION_NAMES.join(", ")
        ))
    })?;
    let selected = match binding.device(&cell.id.device) {
        Ok(found) => found,
        Err(why) => {
            return Ok(cell.record(
                Status::Skipped,
                Some(format!("device {} unavailable: {why}", cell.id.device)),
                None,
            ));
        }
    };
    let mut device = selected.device;
    cell.device_name = selected.name;
    cell.id.device = selected.spec;
    cell.device_kind = Some(selected.kind);
    cell.runtime = selected.runtime;
    if !device.supports_dtype(precision.dtype()) {
        return Ok(cell.record(
            Status::Skipped,
            Some(format!(
                "{} does not support {} on this device (supported: {})",
                binding.name(),
                precision.name(),
                supported_precisions(&device).join(", ")
            )),
            None,
        ));
    }
    if precision != Precision::F32 && precision.amp().is_none() {
        device
            .configure(precision.dtype())
            .map_err(|e| CoreError::Device(format!("cannot use {}: {e:?}", precision.name())))?;
    }
    // Calibrate before seeding, so the model's initialisation never depends on the cache.
    if !args.no_calibrate {
        let key = format!(
            "{}|{}|{}|{} threads|{}",
            binding.name(),
            cell.id.device,
            cell.device_name,
            cell.threads,
            precision.name()
        );
        match calibrate::peak(&device, &key, args.recalibrate) {
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
    cell.flops_per_sample = Some(crate::models::training_flops_per_sample(kind));
    device.seed(args.seed);
    let device = device.autodiff();

    let profile = if args.quick {
        Profile::Quick
    } else {
        Profile::Full
    };
    let geometry = kind.geometry();
    let (dataset_name, note) = match (&args.dataset, args.synthetic) {
        (_, true) => ("synthetic".to_string(), None),
        (Some(name), false) => (name.clone(), None),
        (None, false) => {
            kiln_data::default_dataset(geometry, args.quick, args.data_dir.as_deref())?
        }
    };
    if let Some(g) = kiln_data::geometry_of(&dataset_name)
        && g != geometry
    {
        return Err(CoreError::Config(format!(
            "dataset {dataset_name} has {}x{}x{} images; model {} takes {}x{}x{}",
            g.channels,
            g.height,
            g.width,
            kind.name(),
            geometry.channels,
            geometry.height,
            geometry.width
        )));
    }
    let standard_epoch = if geometry == kiln_data::Geometry::CIFAR {
        50_000
    } else {
        60_000
    };
    let mut dataset = kiln_data::load(&Request {
        name: dataset_name.clone(),
        geometry,
        data_dir: args.data_dir.clone(),
        seed: args.seed,
        synthetic_sizes: profile.synthetic_sizes(standard_epoch),
    })?;
    if let Some(n) = args.train_limit {
        dataset.train = dataset.train.truncated(n, geometry);
    }
    cell.dataset = dataset.name.clone();
    cell.data_note = note;
    for (path, verdict) in &dataset.files {
        eprintln!("kiln: {} ({verdict:?})", path.display());
    }

    let data = DeviceData::upload(&dataset, &device, cell.protocol.eval_limit);
    let id = &cell.id;
    emit(&protocol::start_event(
        kind.name(),
        (&id.backend, &id.device, &cell.device_name, &id.precision),
        &dataset,
        &data,
        &cell.protocol,
    ));

    let mut sink = |e: &Event| emit(e);
    let result = if args.bare {
        let (rounds, steps) = if args.quick { (3, 10) } else { (5, 20) };
        let overhead = kind.build(
            &device,
            Overhead {
                device: &device,
                data: &data,
                protocol: &cell.protocol,
                rounds,
                steps,
            },
        )?;
        let mut r = cell.record(Status::Ok, None, None);
        r.train_samples = data.train_len;
        r.loop_overhead = Some(overhead);
        r.reason = Some("loop-overhead measurement (--bare): no epoch time".into());
        Ok(r)
    } else {
        let outcome = kind.build(
            &device,
            Train {
                device: &device,
                data: &data,
                standard_epoch,
                protocol: &cell.protocol,
                sink: &mut sink,
            },
        )?;
        let status = if outcome.diverged.is_some() {
            Status::Diverged
        } else {
            Status::Ok
        };
        Ok(cell.record(status, outcome.diverged.clone(), Some(outcome)))
    };
    result.map(|mut r: Record| {
        r.data = match dataset.origin {
            Origin::Real => DataKind::Real,
            Origin::Synthetic => DataKind::Synthetic,
        };
        r
    })
}

/// A whole cell under the protocol, for any model.
struct Train<'a> {
    device: &'a Device,
    data: &'a DeviceData,
    standard_epoch: usize,
    protocol: &'a Protocol,
    sink: &'a mut dyn protocol::Sink,
}

impl WithModel for Train<'_> {
    type Output = Result<Outcome, CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        protocol::train(
            model,
            self.device,
            self.data,
            self.standard_epoch,
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
    let usage = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(2)
    };
    let Some(model) = args.model.clone() else {
        return usage(format!(
            "--model is required (one of {})",
            MODEL_NAMES.join(", ")
        ));
    };
    if ModelKind::parse(&model).is_none() {
        return usage(format!(
            "unknown model {model:?}; known: {}",
            MODEL_NAMES.join(", ")
        ));
    }
    let profile = if args.quick {
        Profile::Quick
    } else {
        Profile::Full
    };
    let budget = match &args.budget {
        Some(text) => match parse_duration(text) {
            Ok(b) => b,
            Err(e) => return usage(format!("--budget: {e}")),
        },
        None => profile.budget(),
    };
    let epochs = args.epochs.unwrap_or(profile.epochs());
    let batch_size = args.batch.unwrap_or(profile.batch_size());
    if epochs == 0 {
        return usage("--epochs must be at least 1".into());
    }
    if batch_size == 0 {
        return usage("--batch must be at least 1".into());
    }
    if args.train_limit == Some(0) || args.eval_limit == Some(0) {
        return usage("--train-limit and --eval-limit must be at least 1".into());
    }
    if args.accum_steps == 0 || !batch_size.is_multiple_of(args.accum_steps) {
        return usage(format!(
            "--accum-steps {} must be at least 1 and divide the batch size {batch_size}",
            args.accum_steps
        ));
    }
    if let Err(e) = set_runtime_env(&args) {
        return usage(e);
    }
    let mut cell = Cell {
        id: CellId {
            model: model.clone(),
            backend: binding.name().into(),
            device: match &args.api {
                Some(api) if args.device == "default" => api.clone(),
                Some(api) => format!("{api}:{}", args.device),
                None => args.device.clone(),
            },
            precision: args.precision.clone(),
        },
        device_name: args.device.clone(),
        protocol: Protocol {
            epochs,
            batch_size,
            budget,
            seed: args.seed,
            eval_limit: args.eval_limit,
            inject_nan_at_step: args.inject_nan_at_step,
            accum_steps: args.accum_steps,
            amp: Precision::parse(&args.precision).and_then(Precision::amp),
            ..Protocol::default()
        },
        dataset: String::new(),
        data_note: None,
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        started: Instant::now(),
        args: argv[1..].to_vec(),
        threads: binding.threads(),
        device_kind: None,
        runtime: None,
        backend_version: binding.version().into(),
        flops_per_sample: None,
        peak: None,
    };
    // A panic inside a backend (an unsupported op, an allocation failure) becomes this cell's
    // failed record instead of a silent crash.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| run_cell(binding, &args, &mut cell)));
    let (record, code) = match result {
        Ok(Ok(record)) => (record, ExitCode::SUCCESS),
        Ok(Err(e)) => {
            eprintln!("kiln: {e}");
            (
                cell.record(Status::Failed, Some(e.to_string()), None),
                ExitCode::from(1),
            )
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            (
                cell.record(
                    Status::Failed,
                    Some(format!("the backend panicked: {what}")),
                    None,
                ),
                ExitCode::from(1),
            )
        }
    };
    debug_assert_eq!(record.schema, SCHEMA_VERSION);
    emit(&Event::Final(Box::new(record)));
    code
}

/// Turn the runtime flags into the environment CubeCL reads when a device starts.
fn set_runtime_env(args: &Args) -> Result<(), String> {
    let mut vars = Vec::new();
    if let Some(level) = &args.autotune {
        if !["minimal", "balanced", "extensive", "full"].contains(&level.as_str()) {
            return Err(format!(
                "--autotune {level:?}: use minimal, balanced, extensive or full"
            ));
        }
        vars.push(("CUBECL_AUTOTUNE_LEVEL", level.as_str()));
    }
    if args.no_autotune_cache {
        vars.push(("CUBECL_AUTOTUNE_CACHE", "false"));
    }
    for (key, value) in vars {
        // SAFETY: called from `main` before any device, thread pool or other thread starts,
        // so nothing reads the environment concurrently.
        unsafe { std::env::set_var(key, value) };
    }
    Ok(())
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
