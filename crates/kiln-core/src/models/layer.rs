//! One layer of a network built with Burn's modules from its description
//! (`kiln_contract::models::Layer`), and the activations of any rank layers take and make.

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Initializer, Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;

use kiln_contract::models::{self as described, Init, LayerOp};

use crate::CoreError;

/// An activation of any rank a layer takes or makes.
#[derive(Clone, Debug)]
pub enum Act {
    D1(Tensor<1>),
    D2(Tensor<2>),
    D4(Tensor<4>),
}

impl Act {
    /// Random values of `shape` (rank 1, 2 or 4).
    pub fn random(shape: &[usize], device: &Device) -> Result<Act, CoreError> {
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

    /// Its shape.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Act::D1(t) => t.dims().to_vec(),
            Act::D2(t) => t.dims().to_vec(),
            Act::D4(t) => t.dims().to_vec(),
        }
    }

    /// The same values, tracked by autodiff.
    pub fn require_grad(self) -> Act {
        match self {
            Act::D1(t) => Act::D1(t.require_grad()),
            Act::D2(t) => Act::D2(t.require_grad()),
            Act::D4(t) => Act::D4(t.require_grad()),
        }
    }

    /// As `[batch, c, h, w]` (a `[batch, f]` one as `[batch, f, 1, 1]`). A model's description
    /// is walked shape by shape before it is built, so its layers get the rank they take;
    /// the reshapes only keep this total.
    pub fn d4(self) -> Tensor<4> {
        match self {
            Act::D4(t) => t,
            Act::D2(t) => t.unsqueeze_dims(&[2, 3]),
            Act::D1(t) => t.unsqueeze_dims(&[1, 2, 3]),
        }
    }

    /// As `[batch, features]` (a 4-d one flattened).
    pub fn d2(self) -> Tensor<2> {
        match self {
            Act::D2(t) => t,
            Act::D4(t) => t.flatten(1, 3),
            Act::D1(t) => t.unsqueeze_dim(1),
        }
    }

    /// Backpropagate from this activation (the gradients are dropped: the work is the point).
    pub fn backward(&self) {
        match self {
            Act::D1(t) => drop(t.backward()),
            Act::D2(t) => drop(t.backward()),
            Act::D4(t) => drop(t.backward()),
        }
    }
}

/// A layer without parameters.
#[derive(Debug, Clone, Copy)]
pub enum Pure {
    Relu,
    /// Max over each channel's plane, flattened.
    GlobalMax,
    Flatten,
}

/// [`Pure`] as a module (Burn's enum modules take one module per variant).
#[derive(Module, Debug)]
pub struct Stateless {
    #[module(skip)]
    op: Pure,
}

/// One layer of a network: what a description's `Op` or `Flatten` builds.
#[derive(Module, Debug)]
pub enum Layer {
    Conv(Conv2d),
    Linear(Linear),
    BatchNorm(BatchNorm),
    MaxPool(MaxPool2d),
    GlobalAvg(AdaptiveAvgPool2d),
    Dropout(ChannelDropout),
    Stateless(Stateless),
}

/// One entry of a network's list: a layer, or a residual block of layers. Two types, not one
/// recursive one: Burn 0.23's `#[derive(Module)]` bounds every field's type, so a module that
/// holds a list of itself overflows the trait solver (E0275, docs/burn-0.23-breaks.md). Kiln's
/// networks nest one level (ResNet's blocks), which this says in types.
// A network holds a few tens of blocks: the largest variant's size costs nothing worth a
// `Box` in every layer's path.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Block {
    Layer(Layer),
    Residual(Residual),
}

/// `main(x) + shortcut(x)`; an empty shortcut is the identity.
#[derive(Module, Debug)]
pub struct Residual {
    main: Vec<Layer>,
    shortcut: Vec<Layer>,
}

impl Block {
    /// The blocks `described` lists, built on `device` in that order (so a fixed seed gives
    /// the same weights for the same description).
    pub fn build_all(
        described: &[described::Layer],
        device: &Device,
    ) -> Result<Vec<Block>, CoreError> {
        described
            .iter()
            .map(|l| {
                Ok(match l {
                    described::Layer::Residual { main, shortcut, .. } => {
                        Block::Residual(Residual {
                            main: Layer::build_all(main, device)?,
                            shortcut: Layer::build_all(shortcut, device)?,
                        })
                    }
                    other => Block::Layer(Layer::build(other, device)?),
                })
            })
            .collect()
    }

    /// The same block with every channel dropout off.
    pub fn without_dropout(self) -> Block {
        match self {
            Block::Layer(l) => Block::Layer(l.without_dropout()),
            Block::Residual(r) => Block::Residual(Residual {
                main: r.main.into_iter().map(Layer::without_dropout).collect(),
                shortcut: r.shortcut.into_iter().map(Layer::without_dropout).collect(),
            }),
        }
    }

    /// The block's forward pass.
    pub fn forward(&self, x: Act) -> Act {
        match self {
            Block::Layer(l) => l.forward(x),
            Block::Residual(r) => {
                // The shortcut first, as torchvision's BasicBlock computes its identity.
                let shortcut = forward_all(&r.shortcut, x.clone()).d4();
                Act::D4(forward_all(&r.main, x).d4() + shortcut)
            }
        }
    }
}

impl Layer {
    /// The layers of a residual block's branch, built on `device` in order.
    fn build_all(described: &[described::Layer], device: &Device) -> Result<Vec<Layer>, CoreError> {
        described.iter().map(|l| Layer::build(l, device)).collect()
    }

    fn build(described: &described::Layer, device: &Device) -> Result<Layer, CoreError> {
        Ok(match described {
            described::Layer::Op { op, init, .. } => Layer::of(*op, *init, device)?,
            described::Layer::Flatten => Layer::Stateless(Stateless { op: Pure::Flatten }),
            described::Layer::Residual { .. } => {
                return Err(CoreError::Config(
                    "a residual block inside a residual block: Kiln's networks nest one level"
                        .into(),
                ));
            }
        })
    }

    /// The layer computing `op`, its weights started by `init`; an error for what is not a
    /// layer of a network (the residual sum, the loss, the optimizer).
    pub fn of(op: LayerOp, init: Init, device: &Device) -> Result<Layer, CoreError> {
        let pad = |p: usize| PaddingConfig2d::Explicit(p, p, p, p);
        let pure = |op| Layer::Stateless(Stateless { op });
        Ok(match op {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                padding,
                bias,
            } => {
                let config = Conv2dConfig::new([in_channels, out_channels], [kernel, kernel])
                    .with_stride([stride, stride])
                    .with_padding(pad(padding))
                    .with_bias(bias);
                let config = match init {
                    Init::Default => config,
                    Init::KaimingFanOut => config.with_initializer(Initializer::KaimingNormal {
                        gain: 2f64.sqrt(),
                        fan_out_only: true,
                    }),
                };
                Layer::Conv(config.init(device))
            }
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
            LayerOp::Relu => pure(Pure::Relu),
            LayerOp::ChannelDropout { per_mille } => {
                Layer::Dropout(ChannelDropout::new(f64::from(per_mille) / 1000.0))
            }
            LayerOp::GlobalMaxPool => pure(Pure::GlobalMax),
            LayerOp::GlobalAvgPool => Layer::GlobalAvg(AdaptiveAvgPool2dConfig::new([1, 1]).init()),
            LayerOp::Linear {
                in_features,
                out_features,
            } => Layer::Linear(LinearConfig::new(in_features, out_features).init(device)),
            LayerOp::ResidualAdd | LayerOp::CrossEntropy | LayerOp::Adam { .. } => {
                return Err(CoreError::Config(format!(
                    "{} is not a layer a network is built of",
                    op.describe()
                )));
            }
        })
    }

    /// The same layer with every channel dropout off.
    pub fn without_dropout(self) -> Layer {
        match self {
            Layer::Dropout(_) => Layer::Dropout(ChannelDropout::new(0.0)),
            other => other,
        }
    }

    /// The layer's forward pass.
    pub fn forward(&self, x: Act) -> Act {
        match self {
            Layer::Conv(m) => Act::D4(m.forward(x.d4())),
            Layer::Linear(m) => Act::D2(m.forward(x.d2())),
            Layer::BatchNorm(m) => Act::D4(m.forward(x.d4())),
            Layer::MaxPool(m) => Act::D4(m.forward(x.d4())),
            Layer::GlobalAvg(m) => Act::D2(Act::D4(m.forward(x.d4())).d2()),
            Layer::Dropout(m) => Act::D4(m.forward(x.d4())),
            Layer::Stateless(s) => s.op.forward(x),
        }
    }
}

impl Pure {
    fn forward(self, x: Act) -> Act {
        match (self, x) {
            (Pure::Relu, Act::D1(t)) => Act::D1(relu(t)),
            (Pure::Relu, Act::D2(t)) => Act::D2(relu(t)),
            (Pure::Relu, Act::D4(t)) => Act::D4(relu(t)),
            (Pure::GlobalMax, x) => {
                let x = x.d4();
                let [b, c, h, w] = x.dims();
                // Burn 0.22 has no AdaptiveMaxPool2d; a max over the flattened plane is the
                // 1x1 case.
                Act::D2(x.reshape([b, c, h * w]).max_dim(2).reshape([b, c]))
            }
            (Pure::Flatten, x) => Act::D2(x.d2()),
        }
    }
}

/// `layers` applied in order.
fn forward_all(layers: &[Layer], x: Act) -> Act {
    layers.iter().fold(x, |x, layer| layer.forward(x))
}

/// `Dropout2d`: zeroes whole channels with probability `prob` while training.
#[derive(Module, Debug)]
pub struct ChannelDropout {
    pub prob: f64,
    pub training: Param<burn::module::Flag>,
}

impl ChannelDropout {
    /// A channel dropout that drops with probability `prob`.
    pub fn new(prob: f64) -> Self {
        Self {
            prob,
            training: Param::from_bool(true),
        }
    }

    /// Apply the dropout (identity outside training or without autodiff).
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        if !self.training.is_enabled() || !x.device().is_autodiff() || self.prob == 0.0 {
            return x;
        }
        let [b, c, _, _] = x.dims();
        let keep = 1.0 - self.prob;
        // The mask in the input's own type: under mixed precision the input is f16 or bf16.
        let mask = Tensor::<4>::random(
            [b, c, 1, 1],
            Distribution::Bernoulli(keep),
            (&x.device(), x.dtype()),
        );
        x * mask / keep
    }
}
