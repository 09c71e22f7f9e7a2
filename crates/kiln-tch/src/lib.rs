//! Kiln's binding of Burn's `tch` backend: libtorch's CPU, CUDA and MPS devices (deprecated
//! upstream since Burn 0.22, kept in the matrix because it runs PyTorch's own kernels, which
//! separates Burn's overhead from kernel speed).
//!
//! Built without the `libtorch` feature, the crate still compiles and its probe says why it
//! cannot run and what fixes it; `cargo xtask` enables the feature once libtorch is set up.

use kiln_contract::DeviceReport;
use kiln_core::Binding;
use kiln_core::device::Selected;

/// What makes libtorch available; printed wherever tch is unavailable.
pub const SETUP_HINT: &str = "run `cargo xtask setup-libtorch` (installs torch==2.9.0 from PyPI \
     into a virtual environment), or point LIBTORCH at a libtorch 2.9.0";

/// The tch backend: CPU always, CUDA devices and MPS where libtorch sees them.
pub struct TchBinding;

#[cfg(feature = "libtorch")]
mod linked {
    use burn::tensor::Device;
    use kiln_contract::{DeviceKind, DeviceReport};
    use kiln_core::device::{Selected, cpu_device_report, supported_precisions};

    // The one place Kiln names the deprecated libtorch devices.
    #[allow(deprecated)]
    pub fn device(spec: &str) -> Option<Device> {
        match spec {
            "default" | "cpu" => Some(Device::libtorch()),
            "mps" => Some(Device::libtorch_mps()),
            _ => {
                let index: usize = spec.strip_prefix("cuda:")?.parse().ok()?;
                Some(Device::libtorch_cuda(index))
            }
        }
    }

    /// CUDA devices libtorch sees (0 without a driver or on a CPU-only libtorch).
    fn cuda_count() -> usize {
        if tch::Cuda::is_available() {
            usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
        } else {
            0
        }
    }

    pub fn probe() -> Vec<DeviceReport> {
        let mut out = Vec::new();
        if let Some(cpu) = device("cpu") {
            let mut report = cpu_device_report(&cpu);
            report.default = true;
            out.push(report);
        }
        let cuda = cuda_count();
        for i in 0..cuda {
            let spec = format!("cuda:{i}");
            out.extend(available(&spec, &format!("CUDA device {i}"), "cuda"));
        }
        if cuda == 0 {
            out.push(unavailable(
                "cuda:0",
                "libtorch sees no CUDA device (no NVIDIA driver, or a CPU-only libtorch)",
            ));
        }
        if tch::utils::has_mps() {
            out.extend(available("mps", "Apple GPU (MPS)", "mps"));
        } else {
            out.push(unavailable(
                "mps",
                "libtorch reports no MPS (Metal) device: MPS needs macOS on Apple silicon",
            ));
        }
        out
    }

    /// Kiln's kind of a libtorch GPU device: MPS is Apple's integrated GPU, CUDA a card.
    fn gpu_kind(spec: &str) -> DeviceKind {
        if spec == "mps" {
            DeviceKind::IntegratedGpu
        } else {
            DeviceKind::DiscreteGpu
        }
    }

    /// The report of a GPU device libtorch sees, on `api`.
    fn available(spec: &str, name: &str, api: &str) -> Option<DeviceReport> {
        let d = device(spec)?;
        Some(DeviceReport {
            spec: spec.into(),
            name: name.into(),
            kind: gpu_kind(spec),
            available: true,
            reason: None,
            precisions: supported_precisions(&d),
            default: false,
            memory_bytes: None,
            runtime: Some(kiln_contract::Runtime {
                api: Some(api.into()),
                ..Default::default()
            }),
        })
    }

    fn unavailable(spec: &str, why: &str) -> DeviceReport {
        DeviceReport {
            spec: spec.into(),
            name: spec.into(),
            kind: gpu_kind(spec),
            available: false,
            reason: Some(why.into()),
            precisions: Vec::new(),
            default: false,
            memory_bytes: None,
            runtime: None,
        }
    }

    pub fn select(spec: &str) -> Result<Selected, String> {
        let known = probe();
        let entry = known
            .iter()
            .find(|d| d.spec == spec || (spec == "default" && d.default))
            .ok_or_else(|| {
                let specs: Vec<&str> = known.iter().map(|d| d.spec.as_str()).collect();
                format!(
                    "tch has no device {spec:?}; devices: {} (CUDA as cuda:N)",
                    specs.join(", ")
                )
            })?;
        if !entry.available {
            return Err(entry.reason.clone().unwrap_or_default());
        }
        let d = device(&entry.spec).ok_or_else(|| format!("{spec:?} is not a tch device"))?;
        if entry.spec == "cpu" {
            // The same thread count as the other CPU cells (and the PyTorch reference).
            tch::set_num_threads(i32::try_from(kiln_core::device::rayon_threads()).unwrap_or(1));
            return Ok(Selected::cpu(d));
        }
        Ok(Selected {
            device: d,
            spec: entry.spec.clone(),
            name: entry.name.clone(),
            kind: entry.kind,
            runtime: entry.runtime.clone(),
            remote: None,
        })
    }

    /// Intra-op threads libtorch computes with.
    pub fn threads() -> usize {
        usize::try_from(tch::get_num_threads()).unwrap_or(1)
    }
}

impl Binding for TchBinding {
    fn name(&self) -> &'static str {
        "tch"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        #[cfg(feature = "libtorch")]
        {
            linked::probe()
        }
        #[cfg(not(feature = "libtorch"))]
        {
            vec![DeviceReport {
                spec: "cpu".into(),
                name: "libtorch CPU".into(),
                kind: kiln_contract::DeviceKind::Cpu,
                available: false,
                reason: Some(format!("built without libtorch: {SETUP_HINT}")),
                precisions: Vec::new(),
                default: true,
                memory_bytes: None,
                runtime: None,
            }]
        }
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        #[cfg(feature = "libtorch")]
        {
            linked::select(spec)
        }
        #[cfg(not(feature = "libtorch"))]
        {
            Err(format!(
                "kiln-tch was built without libtorch ({spec}): {SETUP_HINT}"
            ))
        }
    }

    fn threads(&self) -> usize {
        #[cfg(feature = "libtorch")]
        {
            linked::threads()
        }
        #[cfg(not(feature = "libtorch"))]
        {
            1
        }
    }
}

/// True when this build links libtorch.
pub const LINKED: bool = cfg!(feature = "libtorch");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_has_a_default_cpu_entry() {
        let devices = TchBinding.probe();
        let cpu = devices
            .iter()
            .find(|d| d.spec == "cpu")
            .expect("a cpu entry");
        assert!(cpu.default);
        assert_eq!(cpu.available, LINKED, "{cpu:?}");
        if !LINKED {
            assert!(
                cpu.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("setup-libtorch"))
            );
            assert!(TchBinding.device("cpu").is_err());
        }
    }
}
