//! Kiln's binding of Burn's CubeCL CUDA backend (`burn`'s `cuda` feature): one device per
//! NVIDIA GPU the driver lists, `cuda:N`.
//!
//! CubeCL CUDA reaches the GPU through cudarc, which loads the driver (`libcuda.so.1`) and
//! NVRTC when the first device opens; nothing of CUDA is needed to build it. Built without the
//! `cuda` feature (the workspace's default build), the crate still compiles and its probe says
//! how to build it.

use kiln_core::gpu::DriverGpu;

/// The CUDA backend: every GPU the NVIDIA driver lists.
pub const CUDA: DriverGpu = DriverGpu {
    name: "cuda",
    device_noun: "CUDA GPU",
    driver: "libcuda.so.1",
    install: "the NVIDIA driver",
    build_hint: "xtask builds kiln-cuda with Burn's CUDA backend (its `cuda` feature, in \
                 target/cuda) where an NVIDIA driver is installed; KILN_BUILD_CUDA=1 builds it \
                 anyway",
    enumerate: ENUMERATE,
    runtime,
    // CubeCL CUDA all-reduces through NCCL (loaded at run time, like the driver).
    collectives: true,
};

#[cfg(feature = "cuda")]
const ENUMERATE: Option<kiln_core::gpu::Enumerate> = Some(|| {
    burn::tensor::Device::enumerate(burn::tensor::DeviceType::Cuda)
        .into_iter()
        .map(|d| {
            let name = d.identity().map(|id| id.name);
            (d, name)
        })
        .collect()
});
#[cfg(not(feature = "cuda"))]
const ENUMERATE: Option<kiln_core::gpu::Enumerate> = None;

fn runtime() -> kiln_contract::Runtime {
    // Fusion as Burn was built: on by its default features.
    #[cfg(feature = "cuda")]
    let fused = kiln_core::cubecl::fused::<burn::backend::Cuda>();
    #[cfg(not(feature = "cuda"))]
    let fused = true;
    kiln_core::cubecl::runtime("cuda", "", false, fused)
}

#[cfg(test)]
mod tests {
    use kiln_core::Binding;

    use super::*;

    #[test]
    fn the_probe_never_panics_and_says_why_a_device_is_unavailable() {
        let devices = CUDA.probe();
        assert!(!devices.is_empty());
        for d in devices.iter().filter(|d| !d.available) {
            assert!(!d.reason.as_deref().unwrap_or_default().is_empty(), "{d:?}");
        }
        // Without a driver (every CI machine of this project) the reason names it.
        if CUDA.driver_missing().is_some() {
            let why = devices[0].reason.as_deref().unwrap_or_default();
            assert!(why.contains("libcuda.so.1"), "{why}");
        }
    }
}
