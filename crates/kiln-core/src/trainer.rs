//! The model, its optimizer and its loss, one training step at a time: what Kiln's loop,
//! `explain` and `verify` all train with.

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::CoreError;
use crate::amp::{self, LossScaler};
use crate::data::DeviceData;
use crate::device::{read_count, read_scalar};
use crate::models::Classifier;
use crate::protocol::adam;

/// The model, its optimizer and its loss: one training step at a time.
pub struct Trainer<M: Classifier> {
    model: Option<M>,
    optim: ModuleOptimizer,
    loss: CrossEntropyLoss,
    learning_rate: f64,
    accum_steps: usize,
    /// Mixed precision: the compute type, and the loss scaler unless scaling is off.
    amp: Option<(FloatDType, Option<LossScaler>)>,
    /// Optimizer steps applied (what an unscaled amp cell's record counts).
    applied: usize,
}

impl<M: Classifier> Trainer<M> {
    /// A trainer with [`adam`].
    pub fn new(model: M, device: &Device, learning_rate: f64) -> Self {
        Trainer {
            model: Some(model),
            optim: adam(),
            loss: CrossEntropyLossConfig::new().init(device),
            learning_rate,
            accum_steps: 1,
            amp: None,
            applied: 0,
        }
    }

    /// Train in mixed precision: forward and backward in `dtype`, f32 master weights and
    /// optimizer state, loss scaled by `scaler`.
    pub fn with_amp(mut self, dtype: FloatDType, scaler: Option<LossScaler>) -> Self {
        self.amp = Some((dtype, scaler));
        self
    }

    /// The loss scaler of a mixed-precision trainer.
    pub fn scaler(&self) -> Option<&LossScaler> {
        self.amp.as_ref().and_then(|(_, s)| s.as_ref())
    }

    /// What a mixed-precision cell's record says of its loss scaling (`None` outside amp).
    pub fn loss_scaling(&self) -> Option<kiln_contract::LossScaling> {
        let (_, scaler) = self.amp.as_ref()?;
        Some(match scaler {
            Some(s) => s.summary(),
            None => kiln_contract::LossScaling {
                mode: kiln_contract::LossScalingMode::None,
                initial_scale: 1.0,
                final_scale: 1.0,
                skipped_steps: 0,
                applied_steps: self.applied,
                growth_interval: 0,
            },
        })
    }

    /// The model the forward pass runs (the master model cast in the graph under amp), and the
    /// input type it takes.
    fn compute_model(&self, model: &M) -> (Option<M>, Option<FloatDType>) {
        match &self.amp {
            Some((dtype, _)) => (Some(amp::cast_model(model, *dtype)), Some(*dtype)),
            None => (None, None),
        }
    }

    /// Run each batch as `steps` micro-batches whose gradients are summed before one update.
    pub fn with_accumulation(mut self, steps: usize) -> Self {
        self.accum_steps = steps.max(1);
        self
    }

    /// Gradients of the batch `indices` (the mean loss over the whole batch), computed in
    /// `accum_steps` micro-batches, each weighted by its share of the batch so their sum is the
    /// full batch's gradient. Returns them with the batch's mean loss (on the device).
    pub fn gradients(
        &self,
        model: &M,
        data: &DeviceData,
        indices: Tensor<1, Int>,
    ) -> (GradientsParams, Tensor<1>) {
        let [len] = indices.dims();
        let micro = len.div_ceil(self.accum_steps).max(1);
        let scale = self.scaler().map(LossScaler::scale);
        let scaled = |loss: &Tensor<1>| match scale {
            Some(s) => loss.clone().mul_scalar(s),
            None => loss.clone(),
        };
        // Mean loss of `part` weighted by its share of the batch, in f32 (as autocast does).
        // Under amp the cast of the master model is part of each micro-batch's own graph: a
        // backward pass consumes the graph it runs through, so a cast shared by two
        // micro-batches would be gone for the second one.
        let micro_loss = |part: Tensor<1, Int>, share: f64| {
            let (cast, input_dtype) = self.compute_model(model);
            let forward_model = cast.as_ref().unwrap_or(model);
            let mut x = data.train_x.clone().select(0, part.clone());
            if let Some(dtype) = input_dtype {
                x = x.cast(dtype);
            }
            let y = data.train_y.clone().select(0, part);
            let logits = forward_model.forward(x).cast(FloatDType::F32);
            self.loss.forward(logits, y).mul_scalar(share)
        };
        if micro >= len {
            let loss = micro_loss(indices, 1.0);
            return (
                GradientsParams::from_grads(scaled(&loss).backward(), model),
                loss.detach(),
            );
        }
        let mut accumulator = GradientsAccumulator::<M>::new();
        let mut total: Option<Tensor<1>> = None;
        let mut start = 0;
        while start < len {
            let end = (start + micro).min(len);
            let part = indices.clone().slice(start..end);
            let share = (end - start) as f64 / len as f64;
            let loss = micro_loss(part, share);
            let grads = GradientsParams::from_grads(scaled(&loss).backward(), model);
            accumulator.accumulate(model, grads);
            let loss = loss.detach();
            total = Some(match total {
                Some(t) => t + loss,
                None => loss,
            });
            start = end;
        }
        let total = total.expect("a batch has at least one micro-batch");
        (accumulator.grads(), total)
    }

    /// The model as it is now.
    pub fn model(&self) -> &M {
        self.model
            .as_ref()
            .expect("the model is only taken out during a step")
    }

    /// Forward, loss, backward and Adam update on the samples `indices` of the training set.
    /// Returns the batch's mean loss (still on the device).
    pub fn step(&mut self, data: &DeviceData, indices: Tensor<1, Int>) -> Tensor<1> {
        self.step_with(data, indices, |_, _| {})
    }

    /// [`Trainer::step`] with `edit` applied to the gradients before the update (how `verify`'s
    /// tests inject a wrong gradient).
    pub fn step_with(
        &mut self,
        data: &DeviceData,
        indices: Tensor<1, Int>,
        edit: impl FnOnce(&M, &mut GradientsParams),
    ) -> Tensor<1> {
        let model = self
            .model
            .take()
            .expect("the model is only taken out during a step");
        let (mut grads, loss) = self.gradients(&model, data, indices);
        edit(&model, &mut grads);
        let apply = match &mut self.amp {
            None | Some((_, None)) => true,
            Some((_, Some(scaler))) => {
                // One scalar read per step: the step may only be applied if no gradient
                // overflowed (GradScaler reads its inf flag the same way).
                let finite = amp::unscale(&model, &mut grads, scaler.scale())
                    .map(|total| read_scalar(total).is_ok_and(f64::is_finite))
                    .unwrap_or(true);
                scaler.update(finite)
            }
        };
        self.model = Some(if apply {
            self.applied += 1;
            self.optim.step(self.learning_rate, model, grads)
        } else {
            model
        });
        loss
    }

    /// Fraction of the (possibly truncated) test set classified correctly, in batches of `batch`.
    pub fn test_accuracy(&self, data: &DeviceData, batch: usize) -> Result<f64, CoreError> {
        if data.test_len == 0 {
            return Ok(0.0);
        }
        let model = self.model().valid();
        // Under amp, evaluation runs in the compute type, as under autocast.
        let input_dtype = self.amp.as_ref().map(|(d, _)| *d);
        let model = match input_dtype {
            Some(dtype) => amp::cast_model(&model, dtype),
            None => model,
        };
        let mut correct: Option<Tensor<1, Int>> = None;
        let mut start = 0;
        while start < data.test_len {
            let end = (start + batch).min(data.test_len);
            let mut x = data.test_x.clone().slice(start..end);
            if let Some(dtype) = input_dtype {
                x = x.cast(dtype);
            }
            let y = data.test_y.clone().slice(start..end);
            let predicted = model.forward(x).argmax(1).reshape([end - start]);
            let hits = predicted.equal(y).int().sum();
            correct = Some(match correct {
                Some(c) => c + hits,
                None => hits,
            });
            start = end;
        }
        let correct = correct.map_or(Ok(0i64), read_count)?;
        Ok(correct as f64 / data.test_len as f64)
    }
}
