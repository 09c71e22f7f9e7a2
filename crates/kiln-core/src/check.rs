//! Correctness checks every backend crate runs in its tests: one training step of each model
//! on tiny inputs, and agreement with a reference backend for the same initial weights and the
//! same batch.

use burn::module::{ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::GradientsParams;
use burn::prelude::*;

use crate::models::{Classifier, ModelKind, Net};

struct Collect<'a> {
    grads: &'a GradientsParams,
    out: Vec<Vec<f32>>,
}

impl ModuleVisitor for Collect<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.out.push(g.into_data().iter::<f32>().collect());
        }
    }
}

/// Loss and every parameter's gradient (in visiting order) of one forward and backward pass.
pub fn loss_and_grads<M: Classifier>(
    model: &M,
    x: Tensor<4>,
    y: Tensor<1, Int>,
) -> (f32, Vec<Vec<f32>>) {
    let loss = CrossEntropyLossConfig::new()
        .init(&x.device())
        .forward(model.forward(x), y);
    let value = loss
        .clone()
        .into_data()
        .iter::<f32>()
        .next()
        .unwrap_or(f32::NAN);
    let grads = GradientsParams::from_grads(loss.backward(), model);
    let mut collector = Collect {
        grads: &grads,
        out: Vec::new(),
    };
    model.visit(&mut collector);
    (value, collector.out)
}

/// A tiny, learnable batch of `n` images for `kind` on `device`.
pub fn batch(kind: ModelKind, n: usize, device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
    let g = kind.geometry();
    let data = kiln_data::synthetic(g, n, 1, 2);
    let pixels = data.normalized(&data.train);
    let labels: Vec<i64> = data.train.labels.iter().map(|&l| i64::from(l)).collect();
    (
        Tensor::<4>::from_data(
            TensorData::new(pixels, [n, g.channels, g.height, g.width]),
            device,
        ),
        Tensor::<1, Int>::from_data(TensorData::new(labels, [n]), device),
    )
}

/// How far two backends' results may drift apart: relative to the largest magnitude.
///
/// Both compute in f32, but convolutions and reductions sum in different orders (and GPU
/// drivers may fuse multiply-adds), so values differ by a few f32 roundings per accumulated
/// term: relative ~1e-6 to 1e-4 over sums of a few thousand terms. 1e-2 of the largest gradient
/// of a tensor is far above that noise and far below any real bug (a wrong layer, stride or
/// sign changes values by order 1).
pub const TOLERANCE: f32 = 1e-2;

/// Run `kind` on `reference` and on `other` from the same initial weights and batch (no
/// dropout) and compare loss and gradients. Returns the largest relative difference seen.
pub fn agree(kind: ModelKind, reference: &Device, other: &Device) -> Result<f32, String> {
    reference.seed(11);
    let a = reference.clone().autodiff();
    let b = other.clone().autodiff();
    let model = Net::new(kind, &a)
        .map_err(|e| format!("{}: {e}", kind.name()))?
        .without_dropout();
    let twin = model.clone().fork(&b);
    compare(kind, &model, &twin, &a, &b)
}

fn compare<M: Classifier>(
    kind: ModelKind,
    model: &M,
    twin: &M,
    a: &Device,
    b: &Device,
) -> Result<f32, String> {
    let (x, y) = batch(kind, 4, a);
    let (loss_a, grads_a) = loss_and_grads(model, x, y);
    let (x, y) = batch(kind, 4, b);
    let (loss_b, grads_b) = loss_and_grads(twin, x, y);
    if !loss_a.is_finite() || !loss_b.is_finite() {
        return Err(format!("{}: loss {loss_a} vs {loss_b}", kind.name()));
    }
    let mut worst_rel = (loss_a - loss_b).abs() / loss_a.abs().max(1e-6);
    if worst_rel > TOLERANCE {
        return Err(format!("{}: loss {loss_a} vs {loss_b}", kind.name()));
    }
    if grads_a.is_empty() || grads_a.len() != grads_b.len() {
        return Err(format!(
            "{}: {} gradients vs {}",
            kind.name(),
            grads_a.len(),
            grads_b.len()
        ));
    }
    for (i, (ga, gb)) in grads_a.iter().zip(&grads_b).enumerate() {
        let scale = ga.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = ga
            .iter()
            .zip(gb)
            .fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        if !worst.is_finite() || worst > TOLERANCE * scale + 1e-6 {
            return Err(format!(
                "{}: gradient {i} differs by {worst} at scale {scale}",
                kind.name()
            ));
        }
        if scale > 0.0 {
            worst_rel = worst_rel.max(worst / scale);
        }
    }
    Ok(worst_rel)
}
