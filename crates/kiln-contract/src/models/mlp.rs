//! The smallest model: a 2-layer perceptron on the flattened image, Linear(784→256) → ReLU →
//! Linear(256→10). It trains an epoch in seconds on a CPU, so a first run or a CI smoke cell
//! finishes quickly, and it runs only matrix products (no convolution).

use super::layer::{Layer, Model};
use super::op::LayerOp;
use crate::Geometry;

pub const MODEL: Model = Model {
    geometry: Geometry::MNIST,
    layers,
};

/// The hidden layer's width.
const HIDDEN: usize = 256;

fn layers(g: Geometry) -> Vec<Layer> {
    vec![
        Layer::Flatten,
        Layer::op("fc1", LayerOp::linear(g.pixels(), HIDDEN)),
        Layer::op("relu", LayerOp::Relu),
        Layer::op("fc2", LayerOp::linear(HIDDEN, g.classes)),
    ]
}
