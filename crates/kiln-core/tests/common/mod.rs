//! What the integration tests share: CPU backends bound the way their crates bind them.

use burn::prelude::*;
use kiln_contract::DeviceReport;
use kiln_core::device::{Binding, Selected};

/// A CPU backend: its name and the function that gives its device.
pub struct Cpu(pub &'static str, pub fn() -> Device);

/// The flex backend, as kiln-flex binds it.
pub const FLEX: Cpu = Cpu("flex", Device::flex);

impl Binding for Cpu {
    fn name(&self) -> &'static str {
        self.0
    }
    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }
    fn probe(&self) -> Vec<DeviceReport> {
        Vec::new()
    }
    fn device(&self, spec: &str) -> Result<Selected, String> {
        match spec {
            "cpu" | "default" => Ok(Selected::cpu((self.1)())),
            other => Err(format!("no device {other}")),
        }
    }
    fn threads(&self) -> usize {
        1
    }
}
