//! One layer of a model at its real shapes, built with Burn's own modules, and the activations
//! of any rank it takes and makes.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;

use kiln_results::explain::LayerOp;

use crate::CoreError;
use crate::models::ChannelDropout;

/// An activation of any rank a layer takes or makes.
#[derive(Clone)]
pub(super) enum Act {
    D1(Tensor<1>),
    D2(Tensor<2>),
    D4(Tensor<4>),
}

impl Act {
    pub(super) fn random(shape: &[usize], device: &Device) -> Result<Act, CoreError> {
        let d = Distribution::Default;
        Ok(match *shape {
            [a] => Act::D1(Tensor::random([a], d, device)),
            [a, b] => Act::D2(Tensor::random([a, b], d, device)),
            [a, b, c, e] => Act::D4(Tensor::random([a, b, c, e], d, device)),
            _ => {
                return Err(CoreError::Config(format!(
                    "no activation of shape {shape:?}"
                )));
            }
        })
    }

    pub(super) fn dims(&self) -> Vec<usize> {
        match self {
            Act::D1(t) => t.dims().to_vec(),
            Act::D2(t) => t.dims().to_vec(),
            Act::D4(t) => t.dims().to_vec(),
        }
    }

    pub(super) fn require_grad(self) -> Act {
        match self {
            Act::D1(t) => Act::D1(t.require_grad()),
            Act::D2(t) => Act::D2(t.require_grad()),
            Act::D4(t) => Act::D4(t.require_grad()),
        }
    }

    pub(super) fn d4(self) -> Result<Tensor<4>, CoreError> {
        match self {
            Act::D4(t) => Ok(t),
            _ => Err(CoreError::Config("this layer takes a 4-d input".into())),
        }
    }

    pub(super) fn d2(self) -> Result<Tensor<2>, CoreError> {
        match self {
            Act::D2(t) => Ok(t),
            _ => Err(CoreError::Config("this layer takes a 2-d input".into())),
        }
    }

    /// Backpropagate from this activation (the gradients are dropped: the work is the point).
    pub(super) fn backward(&self) {
        match self {
            Act::D1(t) => drop(t.backward()),
            Act::D2(t) => drop(t.backward()),
            Act::D4(t) => drop(t.backward()),
        }
    }
}

/// One layer built with Burn's modules.
#[derive(Clone)]
pub(super) enum Layer {
    Conv(Conv2d),
    MaxPool(MaxPool2d),
    BatchNorm(BatchNorm),
    Relu,
    Dropout(ChannelDropout),
    GlobalMax,
    GlobalAvg(AdaptiveAvgPool2d),
    Linear(Linear),
    Add,
    // Boxed: with the remote device in Burn's device type, it is the largest variant by far.
    CrossEntropy(Box<CrossEntropyLoss>),
}

impl Layer {
    pub(super) fn build(op: LayerOp, device: &Device) -> Result<Layer, CoreError> {
        let pad = |p: usize| PaddingConfig2d::Explicit(p, p, p, p);
        Ok(match op {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                padding,
                bias,
            } => Layer::Conv(
                Conv2dConfig::new([in_channels, out_channels], [kernel, kernel])
                    .with_stride([stride, stride])
                    .with_padding(pad(padding))
                    .with_bias(bias)
                    .init(device),
            ),
            LayerOp::MaxPool2d {
                kernel,
                stride,
                padding,
            } => Layer::MaxPool(
                MaxPool2dConfig::new([kernel, kernel])
                    .with_strides([stride, stride])
                    .with_padding(pad(padding))
                    .init(),
            ),
            LayerOp::BatchNorm { channels } => {
                Layer::BatchNorm(BatchNormConfig::new(channels).init(device))
            }
            LayerOp::Relu => Layer::Relu,
            LayerOp::ChannelDropout { per_mille } => {
                Layer::Dropout(ChannelDropout::new(f64::from(per_mille) / 1000.0))
            }
            LayerOp::GlobalMaxPool => Layer::GlobalMax,
            LayerOp::GlobalAvgPool => Layer::GlobalAvg(AdaptiveAvgPool2dConfig::new([1, 1]).init()),
            LayerOp::Linear {
                in_features,
                out_features,
            } => Layer::Linear(LinearConfig::new(in_features, out_features).init(device)),
            LayerOp::ResidualAdd => Layer::Add,
            LayerOp::CrossEntropy => {
                Layer::CrossEntropy(Box::new(CrossEntropyLossConfig::new().init(device)))
            }
            LayerOp::Adam { .. } => {
                return Err(CoreError::Config("the optimizer is not a layer".into()));
            }
        })
    }

    /// The same layer with its parameters frozen (no gradient wanted).
    pub(super) fn frozen(&self) -> Layer {
        match self {
            Layer::Conv(m) => Layer::Conv(m.clone().no_grad()),
            Layer::BatchNorm(m) => Layer::BatchNorm(m.clone().no_grad()),
            Layer::Linear(m) => Layer::Linear(m.clone().no_grad()),
            other => other.clone(),
        }
    }

    /// The layer's forward pass as the models run it; `other` is a residual sum's second
    /// operand, `targets` the loss's labels.
    pub(super) fn forward(
        &self,
        x: Act,
        other: &Act,
        targets: &Tensor<1, Int>,
    ) -> Result<Act, CoreError> {
        Ok(match self {
            Layer::Conv(m) => Act::D4(m.forward(x.d4()?)),
            Layer::MaxPool(m) => Act::D4(m.forward(x.d4()?)),
            Layer::BatchNorm(m) => Act::D4(m.forward(x.d4()?)),
            Layer::Relu => match x {
                Act::D2(t) => Act::D2(relu(t)),
                Act::D4(t) => Act::D4(relu(t)),
                Act::D1(t) => Act::D1(relu(t)),
            },
            Layer::Dropout(m) => Act::D4(m.forward(x.d4()?)),
            Layer::GlobalMax => {
                let x = x.d4()?;
                let [b, c, h, w] = x.dims();
                Act::D2(x.reshape([b, c, h * w]).max_dim(2).reshape([b, c]))
            }
            Layer::GlobalAvg(m) => {
                let x = x.d4()?;
                let [b, c, _, _] = x.dims();
                Act::D2(m.forward(x).reshape([b, c]))
            }
            Layer::Linear(m) => Act::D2(m.forward(x.d2()?)),
            Layer::Add => Act::D4(x.d4()? + other.clone().d4()?),
            Layer::CrossEntropy(m) => Act::D1(m.forward(x.d2()?, targets.clone())),
        })
    }
}
