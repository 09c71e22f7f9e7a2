//! The article's MNIST CNN: Conv(1→64,k3) → MaxPool2 → Conv(64→512,k3) → MaxPool2 →
//! Dropout2d(0.1) → AdaptiveMaxPool(1×1) → Flatten → Linear(512→1024) → ReLU → Linear(1024→10).
//! Cross-entropy and Adam, as every model.

use super::layer::{Layer, Model};
use super::op::LayerOp;
use crate::Geometry;

pub const MODEL: Model = Model {
    geometry: Geometry::MNIST,
    layers,
};

fn layers(g: Geometry) -> Vec<Layer> {
    let conv = |in_channels, out_channels| LayerOp::Conv2d {
        in_channels,
        out_channels,
        kernel: 3,
        stride: 1,
        padding: 0,
        bias: true,
    };
    let pool = LayerOp::MaxPool2d {
        kernel: 2,
        stride: 2,
        padding: 0,
    };
    vec![
        Layer::op("conv1", conv(g.channels, 64)),
        Layer::op("pool1", pool),
        Layer::op("conv2", conv(64, 512)),
        Layer::op("pool2", pool),
        Layer::op("dropout", LayerOp::ChannelDropout { per_mille: 100 }),
        Layer::op("global max pool", LayerOp::GlobalMaxPool),
        Layer::op("fc1", LayerOp::linear(512, 1024)),
        Layer::op("relu", LayerOp::Relu),
        Layer::op("fc2", LayerOp::linear(1024, g.classes)),
    ]
}
