//! Kiln's binding of Burn's CubeCL HIP backend (`burn`'s `rocm` feature): one device per AMD
//! GPU the HIP runtime lists, `rocm:N`.
//!
//! cubecl-hip-sys resolves every HIP function from `libamdhip64.so` and `libhiprtc.so` when it
//! is first called, so nothing of ROCm is needed to build it. Built without the `rocm` feature
//! (the workspace's default build), the crate still compiles and its probe says how to build it.

use kiln_core::gpu::DriverGpu;

/// The ROCm backend: every GPU the HIP runtime lists.
pub const ROCM: DriverGpu = DriverGpu {
    name: "rocm",
    device_noun: "ROCm GPU",
    driver: "libamdhip64.so",
    install: "ROCm's HIP runtime",
    build_hint: "xtask builds kiln-rocm with Burn's ROCm backend (its `rocm` feature, in \
                 target/rocm) where ROCm's HIP runtime is installed; KILN_BUILD_ROCM=1 builds it \
                 anyway",
    enumerate: ENUMERATE,
    runtime,
    // CubeCL HIP has no collectives in Burn 0.22.1: data-parallel cells use MultiDevice.
    collectives: false,
};

#[cfg(feature = "rocm")]
const ENUMERATE: Option<kiln_core::gpu::Enumerate> = Some(|| {
    burn::tensor::Device::enumerate(burn::tensor::DeviceType::Rocm)
        .into_iter()
        .map(|d| {
            let name = d.identity().map(|id| id.name);
            (d, name)
        })
        .collect()
});
#[cfg(not(feature = "rocm"))]
const ENUMERATE: Option<kiln_core::gpu::Enumerate> = None;

fn runtime() -> kiln_contract::Runtime {
    // Fusion as Burn was built: on by its default features.
    #[cfg(feature = "rocm")]
    let fused = kiln_core::cubecl::fused::<burn::backend::Rocm>();
    #[cfg(not(feature = "rocm"))]
    let fused = true;
    kiln_core::cubecl::runtime("hip", "", false, fused)
}

#[cfg(test)]
mod tests {
    use kiln_core::Binding;

    use super::*;

    #[test]
    fn the_probe_never_panics_and_names_a_missing_runtime() {
        let devices = ROCM.probe();
        assert!(!devices.is_empty());
        for d in devices.iter().filter(|d| !d.available) {
            assert!(!d.reason.as_deref().unwrap_or_default().is_empty(), "{d:?}");
        }
        if ROCM.driver_missing().is_some() {
            let why = devices[0].reason.as_deref().unwrap_or_default();
            assert!(why.contains("libamdhip64.so"), "{why}");
        }
    }
}
