//! Kiln's models as burn-train models (their training and inference steps on Kiln's batches,
//! reporting to the cell's clock).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::FloatDType;
use burn_train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use burn::module::Module;

use super::clock::Batch;
use crate::models::Classifier;

/// Any of Kiln's models as burn-train trains it: the protocol's cross-entropy, its loss and
/// logits for the metrics, and (in validation) the count of correct predictions for the
/// record. One wrapper for every model, so a model owes burn-train nothing of its own.
#[derive(Module, Debug)]
pub struct Learned<M: Module> {
    pub net: M,
}

impl<M: Classifier> TrainStep for Learned<M> {
    type Input = Batch;
    type Output = ClassificationOutput;

    fn step(&self, batch: Batch) -> TrainOutput<ClassificationOutput> {
        let [n] = batch.targets.dims();
        let logits = self.net.forward(batch.images).cast(FloatDType::F32);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        batch.clock.record_loss(&loss, n);
        let grads = loss.backward();
        TrainOutput::new(
            self,
            grads,
            ClassificationOutput::new(loss, logits, batch.targets),
        )
    }
}

impl<M: Classifier> InferenceStep for Learned<M> {
    type Input = Batch;
    type Output = ClassificationOutput;

    fn step(&self, batch: Batch) -> ClassificationOutput {
        let [n] = batch.targets.dims();
        let logits = self.net.forward(batch.images).cast(FloatDType::F32);
        let predicted = logits.clone().argmax(1).reshape([n]);
        batch
            .clock
            .record_hits(predicted.equal(batch.targets.clone()).int().sum());
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }
}
