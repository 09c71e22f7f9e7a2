//! Mixed precision on tiny inputs: amp trains about as f32 does, and an overflow makes the
//! scaler skip the step and back off.

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use burn::tensor::FloatDType;
use kiln_core::DeviceData;
use kiln_core::amp::LossScaler;
use kiln_core::models::ModelKind;
use kiln_core::{Net, Trainer};
use kiln_data::Geometry;

fn setup() -> (Device, DeviceData, Tensor<1, Int>) {
    let device = Device::flex();
    device.seed(3);
    let device = device.autodiff();
    let data = kiln_data::synthetic(Geometry::MNIST, 16, 8, 5);
    let on_device = DeviceData::upload(&data, &device, None);
    let indices = Tensor::<1, Int>::from_data(
        TensorData::new((0..16i64).collect::<Vec<_>>(), [16]),
        &device,
    );
    (device, on_device, indices)
}

fn scalar(t: Tensor<1>) -> f32 {
    t.cast(FloatDType::F32)
        .into_data()
        .iter::<f32>()
        .next()
        .unwrap()
}

fn weights<M: Module>(model: &M) -> Vec<f32> {
    struct All(Vec<f32>);
    impl ModuleVisitor for All {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            self.0.extend(p.val().into_data().iter::<f32>());
        }
    }
    let mut all = All(Vec::new());
    model.visit(&mut all);
    all.0
}

/// Losses of `steps` steps on one fixed batch.
fn losses(mut trainer: Trainer<Net>, data: &DeviceData, idx: &Tensor<1, Int>) -> Vec<f32> {
    (0..8)
        .map(|_| scalar(trainer.step(data, idx.clone())))
        .collect()
}

#[test]
fn amp_lowers_the_loss_about_as_f32_does() {
    let (device, data, idx) = setup();
    let model = cnn(&device);
    let f32_losses = losses(Trainer::new(model.clone(), &device, 1e-3), &data, &idx);
    for dtype in [FloatDType::F16, FloatDType::BF16] {
        let trainer =
            Trainer::new(model.clone(), &device, 1e-3).with_amp(dtype, Some(LossScaler::default()));
        let amp = losses(trainer, &data, &idx);
        let (first, last) = (amp[0], amp[amp.len() - 1]);
        assert!(last < 0.7 * first, "{dtype:?}: {amp:?}");
        let reference = f32_losses[f32_losses.len() - 1];
        // Same start (same weights); after 8 steps the low-precision forward and backward may
        // drift, but not far: within a quarter of the f32 loss.
        assert!(
            (amp[0] - f32_losses[0]).abs() < 0.05 * f32_losses[0],
            "{dtype:?}: first loss {} vs f32 {}",
            amp[0],
            f32_losses[0]
        );
        assert!(
            (last - reference).abs() <= 0.25 * reference + 0.05,
            "{dtype:?}: {amp:?} vs f32 {f32_losses:?}"
        );
    }
}

#[test]
fn an_overflow_skips_the_step_and_backs_off_the_scale() {
    let (device, data, idx) = setup();
    let model = cnn(&device);
    let before = weights(&model);
    // A scale of 1e30 overflows f16 (max 65,504) in the backward pass.
    let mut trainer = Trainer::new(model, &device, 1e-3)
        .with_amp(FloatDType::F16, Some(LossScaler::new(1e30, 2000)));
    let loss = scalar(trainer.step(&data, idx.clone()));
    assert!(loss.is_finite(), "the reported loss is the unscaled one");
    let summary = trainer.scaler().unwrap().summary();
    assert_eq!((summary.skipped_steps, summary.applied_steps), (1, 0));
    assert_eq!(summary.final_scale, 5e29);
    assert_eq!(
        weights(trainer.model()),
        before,
        "a skipped step changes nothing"
    );

    // A sane scale applies the step.
    let mut trainer = Trainer::new(cnn(&device), &device, 1e-3)
        .with_amp(FloatDType::F16, Some(LossScaler::new(1024.0, 2000)));
    trainer.step(&data, idx);
    let summary = trainer.scaler().unwrap().summary();
    assert_eq!((summary.skipped_steps, summary.applied_steps), (0, 1));
}

/// The MNIST CNN without dropout: a step depends only on the weights and the batch.
fn cnn(device: &Device) -> Net {
    Net::new(ModelKind::MnistCnn, device)
        .unwrap()
        .without_dropout()
}
