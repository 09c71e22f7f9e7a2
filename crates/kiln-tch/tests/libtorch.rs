//! The tch backend for real on libtorch's CPU device (`cargo xtask test` runs these with the
//! `libtorch` feature once `cargo xtask setup-libtorch` has run).
#![cfg(feature = "libtorch")]

use burn::tensor::Device;
use kiln_core::{Binding, ModelKind};
use kiln_tch::TchBinding;

#[test]
fn probe_reports_a_usable_cpu_and_reasons_for_the_rest() {
    let devices = TchBinding.probe();
    let cpu = devices.iter().find(|d| d.spec == "cpu").expect("cpu entry");
    assert!(cpu.available && cpu.default);
    assert!(cpu.precisions.contains(&"f32".to_string()));
    for d in devices.iter().filter(|d| !d.available) {
        assert!(d.reason.is_some(), "{d:?}");
    }
    let err = TchBinding.device("cuda:x").err().unwrap_or_default();
    assert!(err.contains("no device"), "{err}");
}

/// Each model: a forward and backward pass agrees with flex for the same weights and batch.
#[test]
fn every_model_agrees_with_flex() {
    let cpu = TchBinding.device("cpu").expect("libtorch CPU").device;
    for kind in [
        ModelKind::MnistCnn,
        ModelKind::ResNet18Gray,
        ModelKind::ResNet18,
    ] {
        let worst = kiln_core::check::agree(kind, &Device::flex(), &cpu)
            .unwrap_or_else(|e| panic!("tch vs flex: {e}"));
        eprintln!("{}: largest relative difference {worst:.2e}", kind.name());
    }
}
