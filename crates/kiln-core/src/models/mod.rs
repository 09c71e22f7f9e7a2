//! The benchmark's models, written once for any Burn device.

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Initializer, Linear, LinearConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;

mod classifier;
mod mlp;

pub use classifier::Classifier;
pub use kiln_results::ModelKind;
pub use mlp::Mlp;

/// Work to do with a freshly built model whose concrete type depends on its [`ModelKind`].
pub trait WithModel {
    /// What the work returns.
    type Output;
    /// Do the work with `model`.
    fn run<M: Classifier>(self, model: M) -> Self::Output;
}

/// Building a network from its [`ModelKind`].
pub trait BuildModel {
    /// Build this kind of model on `device` and hand it to `work`.
    fn build<W: WithModel>(self, device: &Device, work: W) -> W::Output;
    /// The same network with every dropout off, so that a training step depends only on the
    /// weights and the batch (`verify`, the agreement checks).
    fn build_without_dropout<W: WithModel>(self, device: &Device, work: W) -> W::Output;
}

impl BuildModel for ModelKind {
    fn build<W: WithModel>(self, device: &Device, work: W) -> W::Output {
        build_model(self, device, MnistCnn::DROPOUT, work)
    }

    fn build_without_dropout<W: WithModel>(self, device: &Device, work: W) -> W::Output {
        build_model(self, device, 0.0, work)
    }
}

/// The one place a kind becomes a network (`dropout`: the MNIST CNN's channel dropout).
fn build_model<W: WithModel>(kind: ModelKind, device: &Device, dropout: f64, work: W) -> W::Output {
    match kind {
        ModelKind::MnistCnn => work.run(MnistCnn::with_dropout(device, dropout)),
        ModelKind::ResNet18 => work.run(ResNet::resnet18(3, 10, device)),
        ModelKind::ResNet18Gray => work.run(ResNet::resnet18(1, 10, device)),
        ModelKind::Mlp => {
            let g = kind.geometry();
            work.run(Mlp::new(g.pixels(), g.classes, device))
        }
    }
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

/// The article's MNIST CNN: Conv(1→64,k3) → MaxPool2 → Conv(64→512,k3) → MaxPool2 →
/// Dropout2d(0.1) → AdaptiveMaxPool(1x1) → Flatten → Linear(512→1024) → ReLU → Linear(1024→10).
#[derive(Module, Debug)]
pub struct MnistCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    dropout: ChannelDropout,
    fc1: Linear,
    fc2: Linear,
}

impl MnistCnn {
    /// The article's channel-dropout probability.
    pub const DROPOUT: f64 = 0.1;

    /// A freshly initialised network (PyTorch's default init: uniform ±1/sqrt(fan_in)).
    pub fn new(device: &Device) -> Self {
        Self::with_dropout(device, Self::DROPOUT)
    }

    /// The same network with another channel-dropout probability (0 makes it deterministic).
    pub fn with_dropout(device: &Device, prob: f64) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 64], [3, 3]).init(device),
            conv2: Conv2dConfig::new([64, 512], [3, 3]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            dropout: ChannelDropout::new(prob),
            fc1: LinearConfig::new(512, 1024).init(device),
            fc2: LinearConfig::new(1024, 10).init(device),
        }
    }
}

impl Classifier for MnistCnn {
    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(self.conv1.forward(images));
        let x = self.pool.forward(self.conv2.forward(x));
        let x = self.dropout.forward(x);
        let [b, c, h, w] = x.dims();
        // Burn 0.22 has no AdaptiveMaxPool2d; a max over the flattened plane is the 1x1 case.
        let x: Tensor<2> = x.reshape([b, c, h * w]).max_dim(2).reshape([b, c]);
        self.fc2.forward(relu(self.fc1.forward(x)))
    }
}

fn conv(channels: [usize; 2], kernel: usize, stride: usize, pad: usize, device: &Device) -> Conv2d {
    // torchvision initialises convolutions with kaiming_normal_(mode="fan_out", relu).
    Conv2dConfig::new(channels, [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .with_initializer(Initializer::KaimingNormal {
            gain: 2f64.sqrt(),
            fan_out_only: true,
        })
        .init(device)
}

/// torchvision's `BasicBlock`.
#[derive(Module, Debug)]
pub struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm,
    conv2: Conv2d,
    bn2: BatchNorm,
    downsample: Option<(Conv2d, BatchNorm)>,
}

impl BasicBlock {
    fn new(inplanes: usize, planes: usize, stride: usize, device: &Device) -> Self {
        let downsample = (stride != 1 || inplanes != planes).then(|| {
            (
                conv([inplanes, planes], 1, stride, 0, device),
                BatchNormConfig::new(planes).init(device),
            )
        });
        Self {
            conv1: conv([inplanes, planes], 3, stride, 1, device),
            bn1: BatchNormConfig::new(planes).init(device),
            conv2: conv([planes, planes], 3, 1, 1, device),
            bn2: BatchNormConfig::new(planes).init(device),
            downsample,
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let identity = match &self.downsample {
            Some((conv, bn)) => bn.forward(conv.forward(x.clone())),
            None => x.clone(),
        };
        let out = relu(self.bn1.forward(self.conv1.forward(x)));
        let out = self.bn2.forward(self.conv2.forward(out));
        relu(out + identity)
    }
}

/// ResNet18 in torchvision's topology (BasicBlock, [2, 2, 2, 2]) with a 10-class head.
#[derive(Module, Debug)]
pub struct ResNet {
    conv1: Conv2d,
    bn1: BatchNorm,
    maxpool: MaxPool2d,
    blocks: Vec<BasicBlock>,
    avgpool: AdaptiveAvgPool2d,
    fc: Linear,
}

impl ResNet {
    /// ResNet18 for `in_channels`-channel images and `classes` classes.
    pub fn resnet18(in_channels: usize, classes: usize, device: &Device) -> Self {
        let mut blocks = Vec::new();
        let mut inplanes = 64;
        for (planes, stride) in [(64, 1), (128, 2), (256, 2), (512, 2)] {
            blocks.push(BasicBlock::new(inplanes, planes, stride, device));
            blocks.push(BasicBlock::new(planes, planes, 1, device));
            inplanes = planes;
        }
        Self {
            conv1: conv([in_channels, 64], 7, 2, 3, device),
            bn1: BatchNormConfig::new(64).init(device),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            blocks,
            avgpool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            fc: LinearConfig::new(512, classes).init(device),
        }
    }
}

impl Classifier for ResNet {
    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let mut x = relu(self.bn1.forward(self.conv1.forward(images)));
        x = self.maxpool.forward(x);
        for block in &self.blocks {
            x = block.forward(x);
        }
        let [b, c, _, _] = x.dims();
        let x: Tensor<2> = self.avgpool.forward(x).reshape([b, c]);
        self.fc.forward(x)
    }
}

/// Trainable parameters of a model on an autodiff device: what PyTorch's `parameters()` counts
/// (BatchNorm's running statistics are state, not parameters; Burn's `num_params` counts them).
pub fn trainable_parameters<M: Module>(model: &M) -> usize {
    struct Count(usize);
    impl burn::module::ModuleVisitor for Count {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val();
            if value.is_require_grad() {
                self.0 += value.shape().num_elements();
            }
        }
    }
    let mut count = Count(0);
    model.visit(&mut count);
    count.0
}

/// Floating-point operations of one training sample (forward + backward = 3 x forward, with a
/// multiply-add counted as 2), from the shapes of the model's convolutions and linear layers
/// (the op list `cargo xtask explain` times).
pub fn training_flops_per_sample(kind: ModelKind) -> u64 {
    kiln_results::explain::training_flops_per_sample(kind)
}
