//! One cell on a binding's device: what is known before it trains, training it (Kiln's loop,
//! burn-train's Learner, or the loop-overhead measurement) and the record it ends with.

use std::time::Instant;

use burn::prelude::*;

use kiln_contract::{
    CellRequest, DataKind, DeviceKind, Event, FloatKind, Measurements, Observed, Profile, Record,
    Status, TrainingLoop,
};
use kiln_data::{Origin, Request};

use crate::data::DeviceData;
use crate::device::{Binding, dtype, open_device, supported_precisions};
#[cfg(feature = "learner")]
use crate::learner;
use crate::models::Net;
use crate::protocol::Protocol;
use crate::sink;
use kiln_machine::process as memory;

use crate::{BURN_VERSION, CoreError, calibrate, kiln_loop};

/// Everything about a cell that is known before it trains, and what it learns as it goes.
pub(super) struct Cell<'a> {
    pub(super) request: &'a CellRequest,
    /// The device spec as resolved (`default` becomes the backend's default device).
    pub(super) device: String,
    pub(super) device_name: String,
    pub(super) dataset: String,
    pub(super) data_note: Option<String>,
    pub(super) started_at: u64,
    pub(super) started: Instant,
    pub(super) args: Vec<String>,
    pub(super) threads: usize,
    pub(super) device_kind: Option<DeviceKind>,
    pub(super) runtime: Option<kiln_contract::Runtime>,
    pub(super) remote: Option<kiln_contract::Remote>,
    pub(super) backend_version: String,
    pub(super) flops_per_sample: Option<u64>,
    pub(super) peak: Option<kiln_contract::Calibration>,
    pub(super) data: DataKind,
}

impl Cell<'_> {
    /// What this runner observed of the cell so far.
    pub(super) fn observed(
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
            process_threads: memory::thread_count(),
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
    pub(super) fn record(
        &self,
        status: Status,
        reason: Option<String>,
        measurements: Option<Measurements>,
    ) -> Record {
        self.observed(status, reason, measurements).into_record(
            self.request,
            kiln_machine::collect(self.threads, BURN_VERSION),
        )
    }
}

/// One cell, as its phases: open its device (and a data-parallel cell's others), measure the
/// GEMM peak, load its data, train it through the loop it asked for. A device or precision the
/// binding cannot run is the cell's record (skipped), not an error.
pub(super) fn run_cell(
    binding: &dyn Binding,
    cell: &mut Cell,
    sink: &mut dyn FnMut(&Event),
) -> Result<Record, CoreError> {
    let request = cell.request;
    let (device, first_spec) = match open_first(binding, cell)? {
        Ok(opened) => opened,
        Err(skipped) => return Ok(skipped),
    };
    // Calibrate before seeding, so the model's initialisation never depends on the cache.
    calibrate_peak(binding, cell, &device);
    if request.calibrate_only {
        return Ok(cell.record(Status::Ok, Some("GEMM calibration only".into()), None));
    }
    cell.flops_per_sample = Some(kiln_contract::explain::training_flops_per_sample(
        request.model,
    ));
    device.seed(request.settings.seed);
    let device = device.autodiff();
    if request.replay.is_some() {
        // Kiln's loop replays every cell, a Learner cell's too (its record says so).
        let dataset = load_data(cell)?;
        let protocol = Protocol::from_request(request);
        return train_kiln(binding.name(), cell, &device, &dataset, &protocol, sink);
    }
    let (devices, specs) = match open_others(binding, request, device.clone(), first_spec)? {
        Ok(opened) => opened,
        Err(why) => return Ok(cell.record(Status::Skipped, Some(why), None)),
    };
    if devices.len() > 1 {
        cell.device = specs.join(",");
    }
    let dataset = load_data(cell)?;
    let protocol = Protocol::from_request(request);
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
        let on = Devices {
            binding,
            devices: &devices,
            specs,
        };
        return train_learner(cell, on, &dataset, &protocol, sink);
    }
    train_kiln(binding.name(), cell, &device, &dataset, &protocol, sink)
}

/// The cell's device, resolved and set up for its precision (`Err`: the skipped record when
/// the binding has no such device or it cannot run the precision), and its spec.
#[allow(clippy::type_complexity)]
fn open_first(
    binding: &dyn Binding,
    cell: &mut Cell,
) -> Result<Result<(Device, String), Record>, CoreError> {
    let request = cell.request;
    let precision = request.precision;
    // A replayed cell runs on this binding's own device, named as the device it replays.
    let spec = match request.replay {
        Some(_) => "default",
        None => request.device.as_str(),
    };
    let selected = match binding.device(spec) {
        Ok(found) => found,
        Err(why) => {
            return Ok(Err(cell.record(
                Status::Skipped,
                Some(format!("device {} unavailable: {why}", request.device)),
                None,
            )));
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
    if let Some(rt) = cell
        .runtime
        .as_mut()
        .filter(|rt| rt.autotune_cache.is_some())
    {
        // Keyed as its record will be (`runner::main` notes the cell ran under the same key).
        let key = crate::cubecl::cell_key(
            &request.model.to_string(),
            &request.backend,
            &cell.device,
            &precision.to_string(),
            request.batch_size,
        );
        rt.autotune_cache = Some(crate::cubecl::cache_state_for(&key).to_string());
    }
    cell.remote = selected.remote;
    if let Some(replay) = &request.replay {
        cell.device = request.device.clone();
        cell.device_name = format!(
            "replay of {} on {} ({}, scale {})",
            replay.device.as_deref().unwrap_or("a device"),
            binding.name(),
            replay.profile,
            replay.scale
        );
    }
    if !device.supports_dtype(dtype(precision.compute())) {
        return Ok(Err(cell.record(
            Status::Skipped,
            Some(format!(
                "{} does not support {precision} on this device (supported: {})",
                binding.name(),
                supported_precisions(&device).join(", ")
            )),
            None,
        )));
    }
    // The weights' type (pure f16/bf16 cells); f32 and amp keep f32 weights.
    if precision.weights() != FloatKind::F32 {
        device
            .configure(dtype(precision.weights()))
            .map_err(|e| CoreError::Device(format!("cannot use {precision}: {e:?}")))?;
    }
    Ok(Ok((device, first_spec)))
}

/// The device's GEMM peak: the run's (given), else measured (or cached) when asked.
fn calibrate_peak(binding: &dyn Binding, cell: &mut Cell, device: &Device) {
    let request = cell.request;
    if let Some(given) = &request.given_peak {
        cell.peak = Some(given.clone());
        return;
    }
    if !(request.calibrate || request.calibrate_only) {
        return;
    }
    let key = format!(
        "{}|{}|{}|{} threads|{}",
        binding.name(),
        cell.device,
        cell.device_name,
        cell.threads,
        request.precision
    );
    match calibrate::peak(device, &key, request.recalibrate) {
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

/// A data-parallel cell's devices, the first one included, set up as the first one, with
/// their specs (`Err`: why one cannot open).
#[allow(clippy::type_complexity)]
fn open_others(
    binding: &dyn Binding,
    request: &CellRequest,
    first: Device,
    first_spec: String,
) -> Result<Result<(Vec<Device>, Vec<String>), String>, CoreError> {
    let mut devices = vec![first];
    let mut specs = vec![first_spec];
    for spec in request.devices.iter().skip(1) {
        match open_device(binding, spec, request.precision, request.settings.seed)? {
            Ok((d, resolved, _)) => {
                devices.push(d);
                specs.push(resolved);
            }
            Err(why) => return Ok(Err(why)),
        }
    }
    Ok(Ok((devices, specs)))
}

/// The cell's dataset, loaded (or generated) and cut to its train limit; the cell notes what
/// it is.
fn load_data(cell: &mut Cell) -> Result<kiln_data::Dataset, CoreError> {
    let request = cell.request;
    let kind = request.model;
    let geometry = kind.geometry();
    let quick = request.settings.profile == Profile::Quick;
    let (dataset_name, note) = match request.dataset {
        Some(name) => (name, request.dataset_note.clone()),
        None => kiln_data::default_dataset(geometry, quick, request.settings.data_dir.as_deref())?,
    };
    let mut dataset = kiln_data::load(&Request {
        name: dataset_name,
        geometry,
        data_dir: request.settings.data_dir.clone(),
        seed: request.settings.seed,
        synthetic_sizes: request
            .settings
            .profile
            .synthetic_sizes(kind.standard_epoch()),
    })?;
    if let Some(n) = request.settings.train_limit {
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
    Ok(dataset)
}

/// The cell's start event: who trains what, on how many samples and steps (`sizes`: train and
/// test samples, steps per epoch).
fn start_event(
    backend: &str,
    cell: &Cell,
    dataset: &kiln_data::Dataset,
    sizes: (usize, usize, usize),
    protocol: &Protocol,
) -> Event {
    let precision = cell.request.precision.to_string();
    let identity = (
        backend,
        cell.device.as_str(),
        cell.device_name.as_str(),
        precision.as_str(),
    );
    sink::start_event(
        cell.request.model.name(),
        identity,
        dataset,
        sizes,
        protocol,
    )
}

/// The devices a cell trains on, and the binding that opened them.
#[cfg(feature = "learner")]
struct Devices<'a> {
    binding: &'a dyn Binding,
    devices: &'a [Device],
    specs: Vec<String>,
}

/// The cell through burn-train's Learner (`--loop learner`), on one device or several.
#[cfg(feature = "learner")]
fn train_learner(
    cell: &Cell,
    on: Devices,
    dataset: &kiln_data::Dataset,
    protocol: &Protocol,
    sink: &mut dyn FnMut(&Event),
) -> Result<Record, CoreError> {
    let request = cell.request;
    let kind = request.model;
    let devices = on.devices;
    let test_len = dataset
        .test
        .len()
        .min(protocol.settings.eval_limit.unwrap_or(usize::MAX));
    let train_len = dataset.train.len();
    let steps = train_len
        .div_ceil(devices.len())
        .div_ceil(protocol.batch_size);
    sink(&start_event(
        on.binding.name(),
        cell,
        dataset,
        (train_len, test_len, steps),
        protocol,
    ));
    let strategy = learner::Strategy::for_devices(devices.len(), on.binding.collectives());
    let (measurements, setup) = learner::train(
        Net::new(kind, &devices[0])?,
        devices,
        strategy,
        dataset,
        protocol,
        &mut |e: &Event| sink(e),
    )?;
    let mut observed = cell.observed(Status::Ok, None, Some(measurements));
    if let Some(s) = setup {
        observed.notes.push(format!(
            "burn-train's set-up before its first batch took {s:.2} s (in no epoch)"
        ));
    }
    if devices.len() > 1 {
        observed.data_parallel = Some(kiln_contract::DataParallel {
            devices: on.specs,
            strategy: strategy.name().into(),
            global_batch_size: protocol.batch_size * devices.len(),
        });
    }
    Ok(observed.into_record(request, kiln_machine::collect(cell.threads, BURN_VERSION)))
}

/// The cell through Kiln's loop: timed epochs, or the loop-overhead measurement (`--bare`).
fn train_kiln(
    backend: &str,
    cell: &Cell,
    device: &Device,
    dataset: &kiln_data::Dataset,
    protocol: &Protocol,
    sink: &mut dyn FnMut(&Event),
) -> Result<Record, CoreError> {
    let request = cell.request;
    let kind = request.model;
    let data = DeviceData::upload(dataset, device, protocol.settings.eval_limit);
    sink(&start_event(
        backend,
        cell,
        dataset,
        (
            data.train_len,
            data.test_len,
            data.train_len.div_ceil(protocol.batch_size),
        ),
        protocol,
    ));
    if !request.settings.bare {
        let mut events = |e: &Event| sink(e);
        let model = Net::new(kind, device)?;
        let measurements = kiln_loop::train(model, device, &data, protocol, &mut events)?;
        return Ok(cell.record(Status::Ok, None, Some(measurements)));
    }
    let quick = request.settings.profile == Profile::Quick;
    let (rounds, steps) = if quick { (3, 10) } else { (5, 20) };
    let model = Net::new(kind, device)?;
    let overhead = kiln_loop::loop_overhead(model, device, &data, protocol, rounds, steps)?;
    let mut observed = cell.observed(
        Status::Ok,
        Some("loop-overhead measurement (--bare): no epoch time".into()),
        None,
    );
    observed.loop_overhead = Some(overhead);
    let mut r = observed.into_record(request, kiln_machine::collect(cell.threads, BURN_VERSION));
    r.train_samples = data.train_len;
    Ok(r)
}
