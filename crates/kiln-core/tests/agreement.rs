//! Two backends, same weights, same batch: the same loss and gradients within float tolerance.
//!
//! Tolerance: both compute in f32 but convolutions and reductions sum in different orders, so
//! results differ by a few units of f32 rounding per accumulated term (relative ~1e-6 to 1e-5
//! over sums of a few thousand terms). 1e-3 relative is far above that noise and far below any
//! real bug (a wrong layer or a sign flip changes the values by order 1).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use kiln_core::MnistCnn;
use kiln_core::models::Classifier;

struct Grads<'a> {
    grads: &'a GradientsParams,
    out: Vec<Vec<f32>>,
}

impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.out.push(g.into_data().iter::<f32>().collect());
        }
    }
}

fn loss_and_grads<M: Classifier>(
    model: &M,
    x: Tensor<4>,
    y: Tensor<1, Int>,
) -> (f32, Vec<Vec<f32>>) {
    let loss = burn::nn::loss::CrossEntropyLossConfig::new()
        .init(&x.device())
        .forward(model.forward(x), y);
    let value = loss.clone().into_data().iter::<f32>().next().unwrap();
    let grads = GradientsParams::from_grads(loss.backward(), model);
    let mut collector = Grads {
        grads: &grads,
        out: Vec::new(),
    };
    model.visit(&mut collector);
    (value, collector.out)
}

#[test]
#[allow(deprecated)] // ndarray is deprecated upstream; it stays in Kiln's matrix.
fn flex_and_ndarray_agree_on_loss_and_gradients() {
    let flex = Device::flex();
    flex.seed(11);
    let flex = flex.autodiff();
    let ndarray = Device::ndarray().autodiff();

    let model = MnistCnn::with_dropout(&flex, 0.0);
    let twin = model.clone().fork(&ndarray);
    let data = kiln_data::synthetic(kiln_data::Geometry::MNIST, 8, 1, 2);
    let pixels = data.normalized(&data.train);
    let labels: Vec<i64> = data.train.labels.iter().map(|&l| i64::from(l)).collect();
    let batch = |device: &Device| {
        (
            Tensor::<4>::from_data(TensorData::new(pixels.clone(), [8, 1, 28, 28]), device),
            Tensor::<1, Int>::from_data(TensorData::new(labels.clone(), [8]), device),
        )
    };
    let (x, y) = batch(&flex);
    let (loss_a, grads_a) = loss_and_grads(&model, x, y);
    let (x, y) = batch(&ndarray);
    let (loss_b, grads_b) = loss_and_grads(&twin, x, y);

    assert!(
        (loss_a - loss_b).abs() <= 1e-3 * loss_a.abs(),
        "loss {loss_a} vs {loss_b}"
    );
    assert_eq!(grads_a.len(), 8, "4 layers x (weight, bias)");
    assert_eq!(grads_a.len(), grads_b.len());
    for (a, b) in grads_a.iter().zip(&grads_b) {
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(
            worst <= 1e-3 * scale + 1e-7,
            "max gradient difference {worst} at scale {scale}"
        );
    }
}
