//! `--verify` on two CPU backends: the same weights and batches give the same losses and final
//! weights within the f32 thresholds, and a backend with a wrong gradient op fails.

mod common;

use std::path::Path;

use burn::prelude::*;
use common::{Cpu, FLEX};
use kiln_contract::{DatasetName, Precision, Status};
use kiln_core::models::{ModelKind, Net};
use kiln_core::verify::{load_weights, verify, weights_of};
use kiln_report::verify::{
    Fault, VERIFY_VERSION, Verdict, VerifyRecord, VerifyRequest, Weights, compare,
};

#[allow(deprecated)] // ndarray is deprecated upstream; it stays in Kiln's matrix.
fn ndarray() -> Device {
    Device::ndarray()
}

fn request(dir: &Path, backend: &str, model: ModelKind, reference: bool) -> VerifyRequest {
    VerifyRequest {
        kiln_verify: VERIFY_VERSION,
        model,
        backend: backend.into(),
        device: "cpu".into(),
        precision: Precision::F32,
        steps: 8,
        batch: 8,
        seed: 7,
        dataset: DatasetName::Synthetic,
        data_dir: None,
        data_file: None,
        weights_in: (!reference).then(|| dir.join("init.safetensors")),
        init_out: reference.then(|| dir.join("init.safetensors")),
        final_out: dir.join(format!("{backend}.safetensors")),
        fault: None,
        learning_rate: kiln_contract::protocol::LEARNING_RATE,
    }
}

fn run(binding: &Cpu, request: &VerifyRequest) -> (VerifyRecord, Weights) {
    let record = verify(binding, request);
    assert_eq!(record.status, Status::Ok, "{:?}", record.reason);
    assert_eq!(record.losses.len(), request.steps);
    let weights = Weights::read(&request.final_out).expect("final weights written");
    (record, weights)
}

#[test]
fn two_backends_agree_and_a_wrong_gradient_op_fails() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (reference, reference_weights) = run(
        &FLEX,
        &request(dir.path(), "flex", ModelKind::MnistCnn, true),
    );
    // Training moved the weights and the loss.
    let init = Weights::read(&dir.path().join("init.safetensors")).expect("initial weights");
    assert_ne!(init, reference_weights);
    assert_eq!(init.tensors[0].name, "conv1.weight");
    assert_eq!(
        init.tensors.len(),
        8,
        "conv1, conv2, fc1, fc2: weight and bias"
    );

    let nd = Cpu("ndarray", ndarray);
    let (record, weights) = run(
        &nd,
        &request(dir.path(), "ndarray", ModelKind::MnistCnn, false),
    );
    let d = compare(
        &reference,
        &reference_weights,
        &record,
        Some(&weights),
        None,
    );
    assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
    assert!(record.losses.iter().all(Option::is_some));

    // A "backend" whose first convolution's weight gradient has the wrong sign.
    let fake = Cpu("fake", Device::flex);
    let mut wrong = request(dir.path(), "fake", ModelKind::MnistCnn, false);
    wrong.fault = Some(Fault::WrongWeightGradient);
    let (record, weights) = run(&fake, &wrong);
    let d = compare(
        &reference,
        &reference_weights,
        &record,
        Some(&weights),
        None,
    );
    assert_eq!(d.verdict, Verdict::Deviates, "{d:?}");
    assert_eq!(d.weights_worst.as_deref(), Some("conv1.weight"), "{d:?}");
    // The first loss comes before any update: the fault shows only after it.
    assert_eq!(record.losses[0], reference.losses[0]);
}

fn resnet(device: &Device) -> Net {
    Net::new(ModelKind::ResNet18, device).unwrap()
}

#[test]
fn weights_round_trip_and_a_mismatch_names_the_tensor() {
    let device = Device::flex().autodiff();
    let cnn = || Net::new(ModelKind::MnistCnn, &device).unwrap();
    let (a, b) = (cnn(), cnn());
    let wa = weights_of(&a);
    assert_ne!(wa, weights_of(&b));
    let loaded = load_weights(b, &wa).expect("same shapes");
    assert_eq!(weights_of(&loaded), wa);
    // Named as the description names the layers, a residual block's too.
    let names: Vec<String> = weights_of(&resnet(&device))
        .tensors
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names[..3], ["conv1.weight", "bn1.gamma", "bn1.beta"]);
    assert!(
        names.iter().any(|n| n == "layer2.0.downsample.conv.weight"),
        "{names:?}"
    );
    assert_eq!(names.last().map(String::as_str), Some("fc.bias"));

    let resnet = Net::new(ModelKind::ResNet18Gray, &device).unwrap();
    let e = load_weights(resnet, &wa)
        .expect_err("other shapes")
        .to_string();
    assert!(e.contains("conv1.weight"), "{e}");
}

#[test]
fn too_few_samples_and_a_missing_weights_file_are_clear_errors() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut big = request(dir.path(), "flex", ModelKind::MnistCnn, true);
    big.steps = 100_000;
    let r = verify(&FLEX, &big);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.reason.as_deref().unwrap_or("").contains("lower --steps"),
        "{r:?}"
    );

    let missing = request(dir.path(), "flex", ModelKind::MnistCnn, false);
    let r = verify(&FLEX, &missing);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .contains("init.safetensors"),
        "{r:?}"
    );
}
