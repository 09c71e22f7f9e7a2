//! What every model is: a network from a batch of images to class logits, and (with the
//! `learner` feature) what burn-train needs of it.

use burn::module::Module;
use burn::prelude::*;

/// A network that maps a batch of images `[b, c, h, w]` to class logits `[b, classes]`, and,
/// with the `learner` feature, that burn-train can train (its steps are in `crate::learner`).
pub trait Classifier: Module + Sized + 'static + std::fmt::Display + LearnerSteps {
    /// Logits for `images`.
    fn forward(&self, images: Tensor<4>) -> Tensor<2>;
}

/// burn-train's training and inference steps, where the runner is built with burn-train.
#[cfg(feature = "learner")]
pub trait LearnerSteps:
    burn_train::TrainStep<
        Input = crate::learner::clock::Batch,
        Output = burn_train::ClassificationOutput,
    > + burn_train::InferenceStep<
        Input = crate::learner::clock::Batch,
        Output = burn_train::ClassificationOutput,
    >
{
}

#[cfg(feature = "learner")]
impl<T> LearnerSteps for T where
    T: burn_train::TrainStep<
            Input = crate::learner::clock::Batch,
            Output = burn_train::ClassificationOutput,
        > + burn_train::InferenceStep<
            Input = crate::learner::clock::Batch,
            Output = burn_train::ClassificationOutput,
        >
{
}

/// Without burn-train, nothing beyond the forward pass is asked of a model.
#[cfg(not(feature = "learner"))]
pub trait LearnerSteps {}

#[cfg(not(feature = "learner"))]
impl<T> LearnerSteps for T {}
