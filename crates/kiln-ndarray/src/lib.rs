//! Kiln's binding of Burn's `ndarray` backend (deprecated upstream since Burn 0.22, kept in the
//! matrix because users still run it and want to know what they lose).

use burn::tensor::Device;
use kiln_contract::DeviceReport;
use kiln_core::Binding;
use kiln_core::device::{Selected, cpu_device_report};

/// The ndarray backend: one device, the host CPU.
pub struct NdarrayBinding;

// The one place Kiln names the deprecated ndarray device.
#[allow(deprecated)]
fn ndarray_device() -> Device {
    Device::ndarray()
}

impl Binding for NdarrayBinding {
    fn name(&self) -> &'static str {
        "ndarray"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        vec![cpu_device_report(&ndarray_device())]
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        match spec {
            "default" | "cpu" => Ok(Selected::cpu(ndarray_device())),
            other => Err(format!(
                "ndarray has one device, `cpu`; {other:?} is not one"
            )),
        }
    }

    fn threads(&self) -> usize {
        kiln_core::device::rayon_threads()
    }
}
