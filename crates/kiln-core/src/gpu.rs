//! A GPU backend reached through a vendor driver library that its runtime loads when the first
//! device opens (CubeCL CUDA through `libcuda.so.1`, CubeCL HIP through `libamdhip64.so`): the
//! probe and device selection such a backend crate shares. The crate names the backend, the
//! driver and how to enumerate its devices; before any of that runs, the driver library is
//! looked for here, so a machine without it gets a reason instead of a panic. Built without its
//! Burn feature, the crate passes no enumerator and its probe says how to build it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::Device;
use kiln_contract::{DeviceKind, DeviceReport, Runtime};

use crate::device::{Binding, Selected, supported_precisions};

/// Lists Burn's devices of a backend, each with its name where the runtime reports one.
pub type Enumerate = fn() -> Vec<(Device, Option<String>)>;

/// A driver-loaded GPU backend, as its crate declares it.
pub struct DriverGpu {
    /// Kiln's name of the backend and the prefix of its device specs (`cuda` → `cuda:0`).
    pub name: &'static str,
    /// What the devices are called where they have no name (`CUDA GPU`).
    pub device_noun: &'static str,
    /// The driver library the runtime loads (`libcuda.so.1`).
    pub driver: &'static str,
    /// What to install when it is missing (`the NVIDIA driver`).
    pub install: &'static str,
    /// How to get a runner with the backend in it, where this build has none.
    pub build_hint: &'static str,
    /// Burn's devices of the backend, in order, each with its name where the runtime reports
    /// one (`Device::identity`, which exists only in builds with a CubeCL backend); `None` when
    /// built without its Burn feature.
    pub enumerate: Option<Enumerate>,
    /// The backend's runtime report (API, fusion, autotune).
    pub runtime: fn() -> Runtime,
    /// Whether the runtime has collectives (all-reduce) between its devices, so that
    /// data-parallel cells train with burn-train's DDP (CubeCL CUDA, through NCCL).
    pub collectives: bool,
}

impl DriverGpu {
    /// Why no device can open here, when the driver library cannot be loaded.
    pub fn driver_missing(&self) -> Option<String> {
        if cfg!(not(unix)) {
            return Some(format!(
                "Kiln looks for the {} driver on Linux only",
                self.name
            ));
        }
        kiln_machine::driver_missing(self.name, self.driver, self.install, "")
    }

    /// The device index a spec names: `default` is device 0.
    pub fn parse_spec(&self, spec: &str) -> Result<usize, String> {
        if spec == "default" {
            return Ok(0);
        }
        spec.strip_prefix(self.name)
            .and_then(|s| s.strip_prefix(':'))
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| {
                format!(
                    "{spec:?} is not a {} device; give {n}:N ({n}:0, {n}:1, ...)",
                    self.name,
                    n = self.name
                )
            })
    }

    fn unavailable(&self, why: String) -> DeviceReport {
        DeviceReport {
            spec: format!("{}:0", self.name),
            name: self.device_noun.into(),
            kind: DeviceKind::DiscreteGpu,
            available: false,
            reason: Some(why),
            precisions: Vec::new(),
            default: true,
            memory_bytes: None,
            runtime: None,
        }
    }

    /// The devices the driver lists, or why there are none to use: the driver is missing, this
    /// build lacks the backend, or enumerating panicked (runtimes panic where a driver is broken
    /// rather than absent).
    fn devices(&self) -> Result<Vec<(Device, Option<String>)>, String> {
        if let Some(why) = self.driver_missing() {
            return Err(why);
        }
        let Some(enumerate) = self.enumerate else {
            return Err(format!(
                "built without Burn's {} backend: {}",
                self.name, self.build_hint
            ));
        };
        catch_unwind(AssertUnwindSafe(enumerate)).map_err(|p| {
            format!(
                "the {} driver is installed but listing its devices failed: {}",
                self.name,
                crate::device::panic_text(p.as_ref())
            )
        })
    }

    fn device_name(&self, name: &Option<String>, index: usize) -> String {
        name.clone()
            .unwrap_or_else(|| format!("{} {index}", self.device_noun))
    }
}

impl Binding for DriverGpu {
    fn name(&self) -> &'static str {
        self.name
    }

    fn version(&self) -> &'static str {
        crate::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        let devices = match self.devices() {
            Ok(d) if d.is_empty() => {
                return vec![self.unavailable(format!("the {} driver lists no device", self.name))];
            }
            Ok(d) => d,
            Err(why) => return vec![self.unavailable(why)],
        };
        devices
            .iter()
            .enumerate()
            .map(|(i, (d, name))| DeviceReport {
                spec: format!("{}:{i}", self.name),
                name: self.device_name(name, i),
                kind: DeviceKind::DiscreteGpu,
                available: true,
                reason: None,
                precisions: supported_precisions(d),
                default: i == 0,
                memory_bytes: None,
                runtime: Some((self.runtime)()),
            })
            .collect()
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        let index = self.parse_spec(spec)?;
        let devices = self.devices()?;
        let (device, name) = devices
            .get(index)
            .cloned()
            .ok_or_else(|| match devices.len() {
                0 => format!("no {} device {index}: the driver lists none", self.name),
                n => format!(
                    "no {} device {index}: the driver lists {n} ({name}:0 to {name}:{})",
                    self.name,
                    n - 1,
                    name = self.name
                ),
            })?;
        Ok(Selected {
            name: self.device_name(&name, index),
            device,
            spec: format!("{}:{index}", self.name),
            kind: DeviceKind::DiscreteGpu,
            runtime: Some((self.runtime)()),
            remote: None,
        })
    }

    fn threads(&self) -> usize {
        // The host thread that feeds the GPU; the work itself runs on the device.
        1
    }

    fn collectives(&self) -> bool {
        self.collectives
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flex_devices() -> Vec<(Device, Option<String>)> {
        vec![(Device::flex(), None)]
    }

    fn runtime() -> Runtime {
        crate::cubecl::runtime("test", "", false, true)
    }

    fn gpu(driver: &'static str, enumerate: Option<Enumerate>) -> DriverGpu {
        DriverGpu {
            name: "fake",
            device_noun: "fake GPU",
            driver,
            install: "the fake driver",
            build_hint: "build it with its `fake` feature",
            enumerate,
            runtime,
            collectives: false,
        }
    }

    /// A library every Linux machine loads, standing in for a vendor driver.
    const PRESENT: &str = "libc.so.6";

    #[test]
    fn specs_parse_and_reject_clearly() {
        let g = gpu(PRESENT, None);
        assert_eq!(g.parse_spec("default"), Ok(0));
        assert_eq!(g.parse_spec("fake:3"), Ok(3));
        for bad in ["gpu0", "fake3", "fake:x", "fakex:1"] {
            let err = g.parse_spec(bad).unwrap_err();
            assert!(err.contains("fake:N"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_missing_driver_is_named_before_the_runtime_is_touched() {
        fn panics() -> Vec<(Device, Option<String>)> {
            panic!("the runtime must not be asked")
        }
        let g = gpu("libkiln-no-such-driver.so.1", Some(panics));
        let probe = g.probe();
        assert_eq!(probe.len(), 1);
        assert!(!probe[0].available);
        let why = probe[0].reason.clone().unwrap();
        assert_eq!(
            why,
            "no FAKE driver (libkiln-no-such-driver.so.1 not found: install the fake driver)"
        );
        assert_eq!(g.device("fake:0").err(), Some(why));
    }

    #[test]
    fn a_build_without_the_backend_says_how_to_build_it() {
        let g = gpu(PRESENT, None);
        let why = g.probe()[0].reason.clone().unwrap();
        assert!(why.contains("built without Burn's fake backend"), "{why}");
        assert!(why.contains("`fake` feature"), "{why}");
        assert!(g.device("default").is_err());
    }

    #[test]
    fn a_panicking_runtime_is_a_reason_not_a_crash() {
        fn broken() -> Vec<(Device, Option<String>)> {
            panic!("driver version mismatch")
        }
        let why = gpu(PRESENT, Some(broken)).probe()[0]
            .reason
            .clone()
            .unwrap();
        assert!(why.contains("listing its devices failed"), "{why}");
        assert!(why.contains("driver version mismatch"), "{why}");
    }

    #[test]
    fn listed_devices_are_numbered_and_selectable() {
        let g = gpu(PRESENT, Some(flex_devices));
        let probe = g.probe();
        assert_eq!(probe.len(), 1);
        assert!(probe[0].available && probe[0].default, "{probe:?}");
        assert_eq!(probe[0].spec, "fake:0");
        assert!(probe[0].precisions.contains(&"f32".to_string()));
        assert_eq!(
            probe[0].name, "fake GPU 0",
            "unnamed devices get the noun and index"
        );
        let selected = g.device("default").unwrap();
        assert_eq!(selected.spec, "fake:0");
        let err = g.device("fake:2").err().unwrap();
        assert_eq!(
            err,
            "no fake device 2: the driver lists 1 (fake:0 to fake:0)"
        );
    }
}
