//! Kiln's models as burn-train models (their training and inference steps on Kiln's batches,
//! reporting to the cell's clock), and burn-train's renderer kept silent.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::FloatDType;
use burn_train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn_train::metric::MetricDefinition;
use burn_train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};
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

/// burn-train's renderer, silent: the runner's standard output is its JSON lines, and Kiln
/// reports progress itself (burn-train's terminal dashboard, `tui`, is not built).
pub(super) struct Silent;

impl MetricsRendererTraining for Silent {
    fn update_train(&mut self, _: MetricState) {}
    fn update_valid(&mut self, _: MetricState) {}
}

impl MetricsRendererEvaluation for Silent {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
}

impl TrainingProgressLogger for Silent {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _: usize) {}
    fn start_split(&mut self, _: &str, _: usize) {}
    fn update_split(&mut self, _: usize) {}
    fn end_split(&mut self) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _: String) {}
}

impl EvaluationProgressLogger for Silent {
    fn start_global_progress(&mut self, _: usize) {}
    fn start_test(&mut self, _: &str, _: usize) {}
    fn update_test_progress(&mut self, _: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _: String) {}
}

impl MetricsRenderer for Silent {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, _: MetricDefinition) {}
}
