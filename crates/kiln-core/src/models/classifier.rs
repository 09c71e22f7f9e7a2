//! What every model is: a network from a batch of images to class logits.

use burn::module::{Module, ModuleDisplay};
use burn::prelude::*;

/// A network that maps a batch of images `[b, c, h, w]` to class logits `[b, classes]`. With
/// the `learner` feature burn-train trains any of them through `learner::steps::Learned`.
pub trait Classifier: Module + ModuleDisplay + Sized + 'static + std::fmt::Display {
    /// Logits for `images`.
    fn forward(&self, images: Tensor<4>) -> Tensor<2>;
}
