//! Model definitions: shapes, parameter counts (equal to PyTorch's for the same layers), FLOPs,
//! and a few steps on one fixed batch lowering the loss.

use burn::module::Module;
use burn::prelude::*;
use kiln_core::models::Mlp;
use kiln_core::models::{Classifier, ModelKind, trainable_parameters, training_flops_per_sample};
use kiln_core::protocol::DeviceData;
use kiln_core::{MnistCnn, ResNet, Trainer};

fn device() -> Device {
    let d = Device::flex();
    d.seed(7);
    d.autodiff()
}

#[test]
fn mnist_cnn_shape_and_parameter_count() {
    let device = device();
    let model = MnistCnn::new(&device);
    // PyTorch: sum(p.numel() for p in model.parameters()) for the same definition.
    assert_eq!(trainable_parameters(&model), 831_626);
    assert_eq!(model.num_params(), 831_626);
    let logits = model.forward(Tensor::<4>::zeros([4, 1, 28, 28], &device));
    assert_eq!(logits.dims(), [4, 10]);
}

#[test]
fn resnet18_shapes_and_parameter_counts() {
    let device = device();
    // torchvision.models.resnet18(num_classes=10): 11,181,642 parameters.
    let rgb = ResNet::resnet18(3, 10, &device);
    assert_eq!(trainable_parameters(&rgb), 11_181_642);
    // Burn also counts BatchNorm's running mean and variance (2 x 4,800 values).
    assert_eq!(rgb.num_params(), 11_181_642 + 9_600);
    assert_eq!(
        rgb.forward(Tensor::<4>::zeros([2, 3, 32, 32], &device))
            .dims(),
        [2, 10]
    );
    // The article's variant: first conv 1->64, 7x7, no bias (6,272 fewer weights).
    let gray = ResNet::resnet18(1, 10, &device);
    assert_eq!(
        trainable_parameters(&gray),
        11_181_642 - 3 * 64 * 49 + 64 * 49
    );
    assert_eq!(
        gray.forward(Tensor::<4>::zeros([2, 1, 28, 28], &device))
            .dims(),
        [2, 10]
    );
}

#[test]
fn flop_counts_match_the_published_figures() {
    let cnn = training_flops_per_sample(ModelKind::MnistCnn) as f64 / 1e6;
    assert!((cnn - 219.0).abs() < 2.0, "mnist-cnn {cnn} MFLOP");
    let resnet = training_flops_per_sample(ModelKind::ResNet18) as f64 / 1e6;
    assert!((resnet - 220.0).abs() < 10.0, "resnet18 {resnet} MFLOP");
}

fn loss_falls<M: Classifier>(model: M, kind: ModelKind, device: &Device) {
    let g = kind.geometry();
    let mut data = kiln_data::synthetic(g, 16, 4, 3);
    data.test = data.train.clone();
    let on_device = DeviceData::upload(&data, device, None);
    let mut trainer = Trainer::new(model, device, 1e-3);
    let batch: Vec<i64> = (0..16).collect();
    let indices = || Tensor::<1, Int>::from_data(TensorData::new(batch.clone(), [16]), device);
    let read = |t: Tensor<1>| t.into_data().iter::<f32>().next().unwrap();
    let first = read(trainer.step(&on_device, indices()));
    let mut last = first;
    for _ in 0..6 {
        last = read(trainer.step(&on_device, indices()));
    }
    assert!(
        last.is_finite() && last < first * 0.8,
        "{kind:?}: loss {first} -> {last}"
    );
}

#[test]
fn a_few_steps_on_a_fixed_batch_lower_the_loss() {
    let device = device();
    loss_falls(MnistCnn::new(&device), ModelKind::MnistCnn, &device);
    loss_falls(
        ResNet::resnet18(3, 10, &device),
        ModelKind::ResNet18,
        &device,
    );
    loss_falls(
        ResNet::resnet18(1, 10, &device),
        ModelKind::ResNet18Gray,
        &device,
    );
    loss_falls(Mlp::new(784, 10, &device), ModelKind::Mlp, &device);
}
