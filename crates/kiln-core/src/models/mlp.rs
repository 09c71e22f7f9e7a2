//! The smallest model: a 2-layer perceptron on flattened images, Linear(784→256) → ReLU →
//! Linear(256→10). It trains an epoch in seconds on a CPU, so a first run or a CI smoke cell
//! finishes quickly, and it exercises only matrix products (no convolution).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;

use super::classifier::Classifier;

/// The hidden layer's width.
pub const HIDDEN: usize = 256;

/// Linear(pixels→256) → ReLU → Linear(256→classes), PyTorch's default init (uniform
/// ±1/sqrt(fan_in)).
#[derive(Module, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    /// A freshly initialised network for images of `pixels` values and `classes` classes.
    pub fn new(pixels: usize, classes: usize, device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(pixels, HIDDEN).init(device),
            fc2: LinearConfig::new(HIDDEN, classes).init(device),
        }
    }
}

impl Classifier for Mlp {
    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let [b, c, h, w] = images.dims();
        let x: Tensor<2> = images.reshape([b, c * h * w]);
        self.fc2.forward(relu(self.fc1.forward(x)))
    }
}
