//! Mixed precision: what PyTorch's autocast and GradScaler do, for any Burn device.
//!
//! The optimizer owns f32 master weights. Each step the weights are cast to the compute type
//! *inside* the autodiff graph, so the forward and backward passes run in f16 or bf16 and the
//! gradients flow back through the cast into f32 master gradients. The loss (computed in f32
//! from low-precision logits) is multiplied by a scale before the backward pass so small f16
//! gradients do not flush to zero; the gradients are divided by it again, and a step whose
//! gradients overflowed (inf or NaN) is skipped and the scale halved. After `growth_interval`
//! clean steps the scale doubles. Defaults are GradScaler's: 2^16, x2, x0.5, 2000 steps.
//!
//! Batch-norm running statistics are buffers, not parameters: they live in the compute type
//! (one copy shared by the training and evaluation models), and evaluation runs in the compute
//! type as well, as it does under autocast.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::FloatDType;

use kiln_contract::LossScaling;

/// Casts every float tensor of a module to one type; on tracked parameters the cast is part of
/// the autodiff graph, so gradients reach the original (master) parameters.
pub struct CastTo(pub FloatDType);

impl ModuleMapper for CastTo {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        param.map(|t| t.cast(dtype))
    }
}

/// `model` with its weights cast to `dtype` in the graph (the master copy is untouched).
pub fn cast_model<M: Module>(model: &M, dtype: FloatDType) -> M {
    model.clone().map(&mut CastTo(dtype))
}

/// Divides every gradient of a module by the loss scale and sums them all into one scalar:
/// the sum is finite exactly when no gradient holds an inf or a NaN.
struct Unscale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for Unscale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            let g = g.mul_scalar(self.factor);
            let sum = g.clone().cast(FloatDType::F32).sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + sum,
                None => sum,
            });
            self.grads.register(param.id, g);
        }
    }
}

/// Unscale `grads` of `model` in place by `1 / scale`; returns the device scalar whose
/// finiteness tells whether the step may be applied (`None` when there are no gradients).
pub fn unscale<M: Module>(model: &M, grads: &mut GradientsParams, scale: f64) -> Option<Tensor<1>> {
    let mut visitor = Unscale {
        grads,
        factor: 1.0 / scale,
        total: None,
    };
    model.visit(&mut visitor);
    visitor.total
}

/// Dynamic loss scale with GradScaler's policy.
#[derive(Debug, Clone)]
pub struct LossScaler {
    initial: f64,
    scale: f64,
    growth_interval: usize,
    clean_steps: usize,
    skipped: usize,
    applied: usize,
}

impl Default for LossScaler {
    fn default() -> Self {
        LossScaler::new(65_536.0, 2000)
    }
}

impl LossScaler {
    /// A scaler starting at `scale` that doubles after `growth_interval` clean steps.
    pub fn new(scale: f64, growth_interval: usize) -> Self {
        LossScaler {
            initial: scale,
            scale,
            growth_interval: growth_interval.max(1),
            clean_steps: 0,
            skipped: 0,
            applied: 0,
        }
    }

    /// The factor the loss is multiplied by now.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Record one step: `finite` says whether its unscaled gradients were all finite. Returns
    /// true when the optimizer step is to be applied.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.applied += 1;
            self.clean_steps += 1;
            if self.clean_steps >= self.growth_interval {
                self.scale *= 2.0;
                self.clean_steps = 0;
            }
        } else {
            self.skipped += 1;
            self.clean_steps = 0;
            // Never below one: a scale under 1 would amplify underflow instead of preventing it.
            self.scale = (self.scale * 0.5).max(1.0);
        }
        finite
    }

    /// What the record says about the scaling.
    pub fn summary(&self) -> LossScaling {
        LossScaling {
            mode: kiln_contract::LossScalingMode::Dynamic,
            initial_scale: self.initial,
            final_scale: self.scale,
            skipped_steps: self.skipped,
            applied_steps: self.applied,
            growth_interval: self.growth_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaler_backs_off_on_overflow_and_grows_after_clean_steps() {
        let mut s = LossScaler::new(1024.0, 3);
        assert!(!s.update(false));
        assert_eq!(s.scale(), 512.0);
        assert!(s.update(true) && s.update(true));
        assert_eq!(s.scale(), 512.0);
        assert!(s.update(true));
        assert_eq!(s.scale(), 1024.0);
        let sum = s.summary();
        assert_eq!((sum.skipped_steps, sum.applied_steps), (1, 3));
        assert_eq!((sum.initial_scale, sum.final_scale), (1024.0, 1024.0));
        let mut tiny = LossScaler::new(1.0, 10);
        tiny.update(false);
        assert_eq!(tiny.scale(), 1.0);
    }
}
