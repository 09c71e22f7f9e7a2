//! One cell on a binding's device: what is known before it trains, training it (Kiln's loop,
//! burn-train's Learner, or the loop-overhead measurement) and the record it ends with.

use std::time::Instant;

use burn::prelude::*;

use kiln_data::{Origin, Request};
use kiln_results::{
    CellRequest, DataKind, DeviceKind, Event, FloatKind, Measurements, Observed, Profile, Record,
    Status, TrainingLoop,
};

use crate::device::{Binding, dtype, open_device, supported_precisions};
#[cfg(feature = "learner")]
use crate::learner;
use crate::models::{BuildModel, Classifier, WithModel};
use crate::protocol::{self, DeviceData, Protocol};
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
    pub(super) runtime: Option<kiln_results::Runtime>,
    pub(super) remote: Option<kiln_results::Remote>,
    pub(super) backend_version: String,
    pub(super) flops_per_sample: Option<u64>,
    pub(super) peak: Option<kiln_results::Calibration>,
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

pub(super) fn run_cell(
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
    device.seed(request.settings.seed);
    let device = device.autodiff();
    // A data-parallel cell's other devices, set up as the first one.
    let mut devices = vec![device.clone()];
    let mut specs = vec![first_spec];
    for spec in request.devices.iter().skip(1) {
        match open_device(binding, spec, precision, request.settings.seed)? {
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
            .min(protocol.settings.eval_limit.unwrap_or(usize::MAX));
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
        return Ok(observed.into_record(request, kiln_machine::collect(cell.threads, BURN_VERSION)));
    }
    let data = DeviceData::upload(&dataset, &device, protocol.settings.eval_limit);
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

    let record = if request.settings.bare {
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
        let mut r =
            observed.into_record(request, kiln_machine::collect(cell.threads, BURN_VERSION));
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
    pub(super) device: &'a Device,
    pub(super) data: &'a DeviceData,
    pub(super) protocol: &'a Protocol,
    pub(super) sink: &'a mut dyn protocol::Sink,
}

impl WithModel for Train<'_> {
    type Output = Result<Measurements, CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        kiln_loop::train(model, self.device, self.data, self.protocol, self.sink)
    }
}

/// A whole cell through burn-train (`--loop learner`), for any model.
#[cfg(feature = "learner")]
struct LearnerTrain<'a> {
    pub(super) devices: &'a [Device],
    pub(super) strategy: learner::Strategy,
    pub(super) data: &'a kiln_data::Dataset,
    pub(super) protocol: &'a Protocol,
    pub(super) sink: &'a mut dyn protocol::Sink,
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
    pub(super) device: &'a Device,
    pub(super) data: &'a DeviceData,
    pub(super) protocol: &'a Protocol,
    pub(super) rounds: usize,
    pub(super) steps: usize,
}

impl WithModel for Overhead<'_> {
    type Output = Result<kiln_results::LoopOverhead, CoreError>;
    fn run<M: Classifier>(self, model: M) -> Self::Output {
        kiln_loop::loop_overhead(
            model,
            self.device,
            self.data,
            self.protocol,
            self.rounds,
            self.steps,
        )
    }
}
