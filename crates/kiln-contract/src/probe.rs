//! What a runner says about its backend's devices (`kiln-<backend> --probe`).

use serde::{Deserialize, Serialize};

/// One device a backend can see.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceReport {
    /// What `--device` takes to select it (`cpu`, `cuda:0`, ...).
    pub spec: String,
    /// Human-readable name (the CPU model, the adapter's name).
    pub name: String,
    pub kind: crate::DeviceKind,
    pub available: bool,
    /// Why it is not available, or a note on what it is.
    pub reason: Option<String>,
    /// Precisions the device computes in (`f32`, `f16`, `bf16`).
    pub precisions: Vec<String>,
    /// True for the device `bench-all` uses by default.
    pub default: bool,
    /// Memory the device offers, where it can be read (host RAM for CPU devices).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Graphics or compute API and driver, for GPU devices.
    #[serde(default)]
    pub runtime: Option<crate::Runtime>,
}

/// A backend's answer to `--probe`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProbeReport {
    pub backend: String,
    /// Version of the Burn backend crate.
    pub backend_version: String,
    pub devices: Vec<DeviceReport>,
}
