//! The wgpu backend for real: on a machine without a GPU, Mesa's lavapipe (a Vulkan driver on
//! the CPU) runs these. Without any adapter they say so and pass, unless KILN_CI=1 (CI installs
//! lavapipe, so there a missing adapter is a failure).

use burn::tensor::Device;
use kiln_core::Binding;
use kiln_core::ModelKind;
use kiln_wgpu::WgpuBinding;

fn device() -> Option<Device> {
    match WgpuBinding.device("default") {
        Ok(selected) => Some(selected.device),
        Err(why) => {
            kiln_contract::testing::skip(
                "kiln-wgpu lavapipe",
                &format!("no wgpu adapter ({why}; apt-get install mesa-vulkan-drivers)"),
            );
            None
        }
    }
}

// One test function: the Vulkan loader must not see instances created and dropped on several
// threads at once, which parallel test threads would do.
#[test]
fn probe_then_every_model_agrees_with_flex() {
    // Agreement does not depend on which kernel autotune picks; on a CPU-emulated adapter a
    // cold `balanced` autotune of every convolution takes many minutes.
    if std::env::var_os("CUBECL_AUTOTUNE_LEVEL").is_none() {
        // SAFETY: the only test of this binary, before any device or thread is started.
        unsafe { std::env::set_var("CUBECL_AUTOTUNE_LEVEL", "minimal") };
    }
    probe_labels_software_adapters_and_never_panics();
    every_model_agrees_with_flex();
}

fn probe_labels_software_adapters_and_never_panics() {
    let devices = WgpuBinding.probe();
    assert!(
        !devices.is_empty(),
        "an adapter, or one entry saying why none"
    );
    for d in &devices {
        if !d.available {
            assert!(d.reason.is_some(), "{d:?}");
        }
        if d.name.to_lowercase().contains("llvmpipe") {
            assert_eq!(d.kind, kiln_contract::DeviceKind::CpuEmulatedGpu, "{d:?}");
            assert!(d.runtime.as_ref().is_some_and(|r| r.cpu_emulated));
            assert!(d.reason.as_deref().is_some_and(|r| r.contains("not a GPU")));
        }
    }
    assert!(devices.iter().filter(|d| d.default).count() <= 1);
    let err = WgpuBinding.device("opengl:cpu").err().unwrap_or_default();
    assert!(err.contains("unknown graphics API"), "{err}");
}

/// Each model: a forward and backward pass on tiny inputs agrees with flex for the same weights
/// and batch (which also checks the step runs and yields finite gradients).
fn every_model_agrees_with_flex() {
    let Some(gpu) = device() else { return };
    for kind in [
        ModelKind::MnistCnn,
        ModelKind::ResNet18Gray,
        ModelKind::ResNet18,
    ] {
        let worst = kiln_core::check::agree(kind, &Device::flex(), &gpu)
            .unwrap_or_else(|e| panic!("wgpu vs flex: {e}"));
        eprintln!("{}: largest relative difference {worst:.2e}", kind.name());
    }
}
