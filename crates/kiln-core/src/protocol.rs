//! The training protocol: one cell, timed honestly.
//!
//! The dataset is uploaded once; each epoch uploads only its shuffled index order and batches
//! are gathered on the device. Clocks are read after a device sync: after every warm-up step
//! until the step times are steady (`warmup.rs`), then at epoch boundaries and about ten times
//! per epoch (chunks) so that a cell cut short by its budget can be projected from steady-state
//! steps. Test accuracy is evaluated outside the timed region.

use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::FloatDType;

use kiln_contract::{DeviceMemory, Event, Start};
use kiln_data::Dataset;

use crate::CoreError;

/// The knobs of the protocol (the article's: Adam 1e-3, batch 128, 20 epochs).
#[derive(Debug, Clone)]
pub struct Protocol {
    /// The run's settings (epochs, budget, seed, learning rate, eval limit, accumulation).
    pub settings: kiln_contract::CellSettings,
    pub batch_size: usize,
    /// When the clocks are read (chunks, the budget's minimum of timed steps).
    pub timing: kiln_contract::TimingRules,
    /// Fault injection for tests: the loss of this (1-based) step of the cell is made NaN.
    pub inject_nan_at_step: Option<usize>,
    /// Fault injection for tests: bytes leaked after each epoch (kept, touched, never freed).
    pub inject_leak_bytes_per_epoch: Option<u64>,
    /// Mixed precision: the compute type of forward and backward (f32 master weights); `None`
    /// computes in the device's float type.
    pub amp: Option<FloatDType>,
    /// Loss scaling of a mixed-precision cell (`--loss-scaling`; its precision's default).
    pub loss_scaling: Option<kiln_contract::LossScalingMode>,
    /// Fault injection for tests: slow warm-up steps.
    pub inject_slow_steps: Option<kiln_contract::SlowSteps>,
    /// A replayed cell: its steps take these times instead of training.
    pub replay: Option<kiln_contract::replay::Replay>,
}

impl Protocol {
    /// The protocol a cell request asks for.
    pub fn from_request(request: &kiln_contract::CellRequest) -> Protocol {
        Protocol {
            settings: request.settings.clone(),
            batch_size: request.batch_size,
            inject_nan_at_step: request.inject_nan_at_step,
            inject_leak_bytes_per_epoch: request.inject_leak_bytes_per_epoch,
            amp: crate::device::amp_dtype(request.precision),
            loss_scaling: request.settings.loss_scaling_for(request.precision),
            inject_slow_steps: request.inject_slow_steps,
            timing: request.timing,
            replay: request.replay.clone(),
        }
    }
}

impl Default for Protocol {
    /// A request's defaults (their one home is `CellRequest::new`, the full profile's), without
    /// a budget.
    fn default() -> Self {
        let mut request = kiln_contract::CellRequest::new(
            kiln_contract::ModelKind::MnistCnn,
            "",
            kiln_contract::Profile::Full,
        );
        request.settings.budget_seconds = None;
        Protocol::from_request(&request)
    }
}

/// Receives the events of a running cell (the runner prints them as JSON lines).
pub trait Sink {
    /// Called for each event, in order.
    fn event(&mut self, event: &Event);
}

impl<F: FnMut(&Event)> Sink for F {
    fn event(&mut self, event: &Event) {
        self(event)
    }
}

/// The dataset as device tensors, uploaded once.
pub struct DeviceData {
    pub(crate) train_x: Tensor<4>,
    pub(crate) train_y: Tensor<1, Int>,
    pub(crate) test_x: Tensor<4>,
    pub(crate) test_y: Tensor<1, Int>,
    pub train_len: usize,
    pub test_len: usize,
}

impl DeviceData {
    /// Upload `data` (train split to `device`, test split to its non-autodiff twin).
    pub fn upload(data: &Dataset, device: &Device, eval_limit: Option<usize>) -> DeviceData {
        let g = data.geometry;
        let test = data
            .test
            .clone()
            .truncated(eval_limit.unwrap_or(usize::MAX), g);
        let images = |split: &kiln_data::Split, device: &Device| {
            Tensor::<4>::from_data(
                TensorData::new(
                    data.normalized(split),
                    [split.len(), g.channels, g.height, g.width],
                ),
                device,
            )
        };
        let labels = |split: &kiln_data::Split, device: &Device| {
            let values: Vec<i64> = split.labels.iter().map(|&l| i64::from(l)).collect();
            Tensor::<1, Int>::from_data(TensorData::new(values, [split.len()]), device)
        };
        let eval_device = device.clone().without_autodiff();
        DeviceData {
            train_x: images(&data.train, device),
            train_y: labels(&data.train, device),
            test_x: images(&test, &eval_device),
            test_y: labels(&test, &eval_device),
            train_len: data.train.len(),
            test_len: test.len(),
        }
    }
}

/// The protocol's optimizer: Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8; Burn's
/// default eps is 1e-5).
pub fn adam() -> ModuleOptimizer {
    AdamConfig::new().with_epsilon(1e-8).init()
}

pub(crate) fn sync(device: &Device) -> Result<(), CoreError> {
    device
        .sync()
        .map_err(|e| CoreError::Device(format!("device sync failed: {e}")))
}

/// Fold `device`'s memory pool usage now into the peaks in `peak` (devices that report one).
pub(crate) fn sample_device_memory(device: &Device, peak: &mut Option<DeviceMemory>) {
    if let Some(usage) = device.memory_pool_usage() {
        let peak = peak.get_or_insert(DeviceMemory {
            peak_in_use_bytes: 0,
            peak_reserved_bytes: 0,
        });
        peak.peak_in_use_bytes = peak.peak_in_use_bytes.max(usage.bytes_in_use);
        peak.peak_reserved_bytes = peak.peak_reserved_bytes.max(usage.bytes_reserved);
    }
}

/// The count a one-element integer tensor holds (correct predictions).
pub(crate) fn read_count(t: Tensor<1, Int>) -> Result<i64, CoreError> {
    let data = t
        .try_into_data()
        .map_err(|e| CoreError::Device(format!("reading test accuracy: {e}")))?;
    Ok(data.iter::<i64>().next().unwrap_or(0))
}

pub(crate) fn read_scalar(t: Tensor<1>) -> Result<f64, CoreError> {
    let data = t
        .cast(FloatDType::F32)
        .try_into_data()
        .map_err(|e| CoreError::Device(format!("reading the loss: {e}")))?;
    Ok(data.iter::<f32>().next().map(f64::from).unwrap_or(f64::NAN))
}

/// The `Start` event of a cell.
pub fn start_event(
    model: &str,
    identity: (&str, &str, &str, &str),
    dataset: &Dataset,
    (train_samples, test_samples, steps_per_epoch): (usize, usize, usize),
    protocol: &Protocol,
) -> Event {
    let (backend, device, device_name, precision) = identity;
    Event::Start(Start {
        model: model.into(),
        backend: backend.into(),
        device: device.into(),
        device_name: device_name.into(),
        precision: precision.into(),
        dataset: dataset.name.clone(),
        train_samples,
        test_samples,
        steps_per_epoch,
        epochs: protocol.settings.epochs,
        budget_seconds: protocol.settings.budget_seconds,
    })
}
