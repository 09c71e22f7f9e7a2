//! Kiln's binding of Burn's CubeCL CUDA backend (`burn`'s `cuda` feature): one device per
//! NVIDIA GPU the driver lists, `cuda:N`.
//!
//! CubeCL CUDA reaches the GPU through cudarc, which loads the driver (`libcuda.so.1`) and
//! NVRTC when the first device opens; nothing of CUDA is needed to build it. Before touching
//! CubeCL the probe looks for the driver itself, so on a machine without one it says so instead
//! of panicking. Built without the `cuda` feature (the workspace's default build), the crate
//! still compiles and its probe says how to build it.

use kiln_core::Binding;
use kiln_core::runner::Selected;
use kiln_results::{DeviceKind, DeviceReport};

/// The CUDA driver library cudarc loads.
pub const DRIVER: &str = "libcuda.so.1";

/// How to get a runner with CUDA in it; printed where this build has none.
pub const BUILD_HINT: &str = "xtask builds kiln-cuda with Burn's CUDA backend (its `cuda` \
     feature, in target/cuda) where an NVIDIA driver is installed; KILN_BUILD_CUDA=1 builds it \
     anyway";

/// The CUDA backend: every GPU the NVIDIA driver lists.
pub struct CudaBinding;

/// Why no CUDA device can open here, when the driver library cannot be loaded.
pub fn driver_missing() -> Option<String> {
    if cfg!(not(unix)) {
        return Some("Kiln looks for the CUDA driver on Linux only".into());
    }
    (!kiln_results::fingerprint::library_loads(DRIVER))
        .then(|| format!("no CUDA driver ({DRIVER} not found: install the NVIDIA driver)"))
}

/// The device index a spec names: `default` is `cuda:0`.
pub fn parse_spec(spec: &str) -> Result<usize, String> {
    if spec == "default" {
        return Ok(0);
    }
    spec.strip_prefix("cuda:")
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| format!("{spec:?} is not a CUDA device; give cuda:N (cuda:0, cuda:1, ...)"))
}

/// The probe entry of a CUDA device that cannot be used, and why.
fn unavailable(spec: &str, why: String) -> DeviceReport {
    DeviceReport {
        spec: spec.into(),
        name: "CUDA GPU".into(),
        kind: DeviceKind::DiscreteGpu,
        available: false,
        reason: Some(why),
        precisions: Vec::new(),
        default: true,
        memory_bytes: None,
        runtime: None,
    }
}

#[cfg(feature = "cuda")]
mod linked {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use burn::tensor::{Device, DeviceType};
    use kiln_core::runner::{Selected, supported_precisions};
    use kiln_results::{DeviceKind, DeviceReport, Runtime};

    use super::{driver_missing, unavailable};

    /// Burn's default features compile CubeCL backends with kernel fusion.
    const FUSION: bool = true;

    fn runtime() -> Runtime {
        kiln_core::cubecl::runtime("cuda", "", false, FUSION)
    }

    /// The CUDA devices the driver lists, in order (none when enumerating panicked: cudarc
    /// panics where the driver is broken rather than absent).
    fn devices() -> Result<Vec<Device>, String> {
        catch_unwind(AssertUnwindSafe(|| {
            Device::enumerate(DeviceType::Cuda).into_iter().collect()
        }))
        .map_err(|p| {
            format!(
                "the CUDA driver is installed but listing its devices failed: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into())
            )
        })
    }

    fn name(device: &Device, index: usize) -> String {
        device
            .identity()
            .map(|id| id.name)
            .unwrap_or_else(|| format!("CUDA device {index}"))
    }

    pub fn probe() -> Vec<DeviceReport> {
        if let Some(why) = driver_missing() {
            return vec![unavailable("cuda:0", why)];
        }
        let devices = match devices() {
            Ok(d) if d.is_empty() => {
                return vec![unavailable(
                    "cuda:0",
                    "the CUDA driver lists no device".into(),
                )];
            }
            Ok(d) => d,
            Err(why) => return vec![unavailable("cuda:0", why)],
        };
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| DeviceReport {
                spec: format!("cuda:{i}"),
                name: name(d, i),
                kind: DeviceKind::DiscreteGpu,
                available: true,
                reason: None,
                precisions: supported_precisions(d),
                default: i == 0,
                memory_bytes: None,
                runtime: Some(runtime()),
            })
            .collect()
    }

    pub fn select(spec: &str) -> Result<Selected, String> {
        let index = super::parse_spec(spec)?;
        if let Some(why) = driver_missing() {
            return Err(why);
        }
        let devices = devices()?;
        let device = devices.get(index).cloned().ok_or_else(|| {
            format!(
                "no CUDA device {index}: the driver lists {} (cuda:0 to cuda:{})",
                devices.len(),
                devices.len().saturating_sub(1)
            )
        })?;
        Ok(Selected {
            name: name(&device, index),
            device,
            spec: format!("cuda:{index}"),
            kind: DeviceKind::DiscreteGpu,
            runtime: Some(runtime()),
        })
    }
}

impl Binding for CudaBinding {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        #[cfg(feature = "cuda")]
        {
            linked::probe()
        }
        #[cfg(not(feature = "cuda"))]
        {
            let why = match driver_missing() {
                Some(why) => why,
                None => format!("built without Burn's CUDA backend: {BUILD_HINT}"),
            };
            vec![unavailable("cuda:0", why)]
        }
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        #[cfg(feature = "cuda")]
        {
            linked::select(spec)
        }
        #[cfg(not(feature = "cuda"))]
        {
            parse_spec(spec)?;
            Err(format!(
                "kiln-cuda was built without Burn's CUDA backend ({spec}): {BUILD_HINT}"
            ))
        }
    }

    fn threads(&self) -> usize {
        // The host thread that feeds the GPU; the work itself runs on the device.
        1
    }
}

/// True when this build has Burn's CUDA backend.
pub const LINKED: bool = cfg!(feature = "cuda");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_reject_clearly() {
        assert_eq!(parse_spec("default"), Ok(0));
        assert_eq!(parse_spec("cuda:3"), Ok(3));
        let err = parse_spec("gpu0").unwrap_err();
        assert!(err.contains("cuda:N"), "{err}");
    }

    #[test]
    fn the_probe_never_panics_and_says_why_a_device_is_unavailable() {
        let devices = CudaBinding.probe();
        assert!(!devices.is_empty());
        for d in devices.iter().filter(|d| !d.available) {
            let why = d.reason.as_deref().unwrap_or_default();
            assert!(!why.is_empty(), "{d:?}");
        }
        // Without a driver (every CI machine of this project) the reason names it.
        if driver_missing().is_some() {
            assert!(
                devices[0]
                    .reason
                    .as_deref()
                    .unwrap_or_default()
                    .contains(DRIVER),
                "{devices:?}"
            );
        }
    }
}
