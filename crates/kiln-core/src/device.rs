//! The device side of a runner: what a backend crate tells Kiln about its backend
//! ([`Binding`]), the device it selected, Burn's float types for Kiln's precisions, opening
//! a device for a one-shot request (`explain`, `verify`) with its failures caught, and what
//! the loops read from a device (a sync, its memory pool, a scalar).

use std::panic::AssertUnwindSafe;

use burn::prelude::*;
use burn::tensor::FloatDType;
use kiln_contract::{
    DeviceKind, DeviceMemory, DeviceReport, FloatKind, Precision, Status, Vocabulary,
};

use crate::CoreError;

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
    pub runtime: Option<kiln_contract::Runtime>,
    /// A device another machine serves: that machine and the link.
    pub remote: Option<kiln_contract::Remote>,
}

impl Selected {
    /// The host CPU as the device of a CPU backend.
    pub fn cpu(device: Device) -> Selected {
        Selected {
            device,
            spec: "cpu".into(),
            name: kiln_machine::cpu_model(),
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
        name: kiln_machine::cpu_model(),
        kind: DeviceKind::Cpu,
        available: true,
        reason: None,
        precisions: supported_precisions(device),
        default: true,
        memory_bytes: kiln_machine::memory_bytes(),
        runtime: None,
    }
}

/// Run a one-shot request (`explain`, `verify`) for `backend` on `binding`: its own check
/// (`valid`) and the backend's name first, then `work`, which returns `Some(why)` when it found
/// the device or precision unusable. The record's status and reason: ok; skipped with why;
/// failed with the error or the panic inside the backend.
pub fn one_shot(
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
pub fn open_device(
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
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
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

/// Wait for `device`'s queued work.
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
