//! Kiln's binding of Burn's `flex` backend: pure-Rust CPU execution (SIMD and rayon threads).

use burn::tensor::Device;
use kiln_contract::DeviceReport;
use kiln_core::Binding;
use kiln_core::device::{Selected, cpu_device_report};

/// The flex backend: one device, the host CPU.
pub struct FlexBinding;

impl Binding for FlexBinding {
    fn name(&self) -> &'static str {
        "flex"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        vec![cpu_device_report(&Device::flex())]
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        match spec {
            "default" | "cpu" => Ok(Selected::cpu(Device::flex())),
            other => Err(format!("flex has one device, `cpu`; {other:?} is not one")),
        }
    }

    fn threads(&self) -> usize {
        kiln_core::device::rayon_threads()
    }
}
