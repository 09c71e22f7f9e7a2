//! The operations of each model at the shapes one training step runs them: the one model
//! description that every record's FLOPs and `explain`'s tables (Rust runners and the PyTorch
//! reference alike) are computed from.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Geometry, ModelKind};

/// One kind of layer, with what fixes its cost.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LayerOp {
    Conv2d {
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        bias: bool,
    },
    MaxPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    BatchNorm {
        channels: usize,
    },
    Relu,
    /// `Dropout2d`: whole channels zeroed (probability in thousandths, so the op stays `Eq`).
    ChannelDropout {
        per_mille: u32,
    },
    /// Max over each channel's plane (`AdaptiveMaxPool2d(1)` + flatten).
    GlobalMaxPool,
    /// Mean over each channel's plane (`AdaptiveAvgPool2d(1)` + flatten).
    GlobalAvgPool,
    Linear {
        in_features: usize,
        out_features: usize,
    },
    /// A residual connection's sum.
    ResidualAdd,
    CrossEntropy,
    /// Adam's update of every trainable parameter.
    Adam {
        parameters: usize,
    },
}

impl LayerOp {
    /// The op's family, as the table's rows name it.
    pub fn family(&self) -> &'static str {
        match self {
            LayerOp::Conv2d { .. } => "conv2d",
            LayerOp::MaxPool2d { .. } => "max pool",
            LayerOp::BatchNorm { .. } => "batch norm",
            LayerOp::Relu => "relu",
            LayerOp::ChannelDropout { .. } => "dropout2d",
            LayerOp::GlobalMaxPool => "global max pool",
            LayerOp::GlobalAvgPool => "global avg pool",
            LayerOp::Linear { .. } => "linear",
            LayerOp::ResidualAdd => "residual add",
            LayerOp::CrossEntropy => "cross-entropy",
            LayerOp::Adam { .. } => "adam",
        }
    }

    /// Trainable parameters the layer holds.
    pub fn parameters(&self) -> usize {
        match *self {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                bias,
                ..
            } => in_channels * out_channels * kernel * kernel + if bias { out_channels } else { 0 },
            LayerOp::BatchNorm { channels } => 2 * channels,
            LayerOp::Linear {
                in_features,
                out_features,
            } => in_features * out_features + out_features,
            _ => 0,
        }
    }

    /// The shape the layer makes of `input`.
    pub fn output(&self, input: &[usize]) -> Vec<usize> {
        let window =
            |side: usize, k: usize, s: usize, p: usize| (side + 2 * p).saturating_sub(k) / s + 1;
        match (*self, input) {
            (
                LayerOp::Conv2d {
                    out_channels,
                    kernel,
                    stride,
                    padding,
                    ..
                },
                &[b, _, h, w],
            ) => vec![
                b,
                out_channels,
                window(h, kernel, stride, padding),
                window(w, kernel, stride, padding),
            ],
            (
                LayerOp::MaxPool2d {
                    kernel,
                    stride,
                    padding,
                },
                &[b, c, h, w],
            ) => vec![
                b,
                c,
                window(h, kernel, stride, padding),
                window(w, kernel, stride, padding),
            ],
            (LayerOp::GlobalMaxPool | LayerOp::GlobalAvgPool, &[b, c, _, _]) => vec![b, c],
            (LayerOp::Linear { out_features, .. }, &[b, _]) => vec![b, out_features],
            (LayerOp::CrossEntropy, _) => vec![1],
            (LayerOp::Adam { .. }, _) => vec![],
            _ => input.to_vec(),
        }
    }

    /// Multiply-adds of the layer's forward pass on `input` (convolutions and linear layers;
    /// the rest is memory-bound and counted as none, as FLOP counts of CNNs do).
    pub fn forward_macs(&self, input: &[usize]) -> u64 {
        let out = self.output(input);
        match (*self, input) {
            (
                LayerOp::Conv2d {
                    in_channels,
                    kernel,
                    ..
                },
                &[_, ..],
            ) => (in_channels * kernel * kernel) as u64 * out.iter().product::<usize>() as u64,
            (
                LayerOp::Linear {
                    in_features,
                    out_features,
                },
                &[b, _],
            ) => (b * in_features * out_features) as u64,
            _ => 0,
        }
    }

    /// The parts of its training step a layer is timed in: its forward pass, then its
    /// backward pass as Burn's autodiff runs it — a convolution's or linear layer's input
    /// gradient and parameter gradients apart (two kernels each), a batch norm's in one
    /// (they share their reductions), a parameter-free layer's input gradient. `input_grad`
    /// is false for the first layer (nothing before it wants a gradient).
    pub fn phases(&self, input_grad: bool) -> Vec<Phase> {
        match self {
            LayerOp::Adam { .. } => vec![Phase::Update],
            LayerOp::Conv2d { .. } | LayerOp::Linear { .. } => {
                let mut p = vec![Phase::Forward];
                if input_grad {
                    p.push(Phase::InputGrad);
                }
                p.push(Phase::ParamGrad);
                p
            }
            LayerOp::BatchNorm { .. } => vec![Phase::Forward, Phase::Backward],
            _ if input_grad => vec![Phase::Forward, Phase::InputGrad],
            _ => vec![Phase::Forward],
        }
    }

    /// A short description with the sizes that matter (`conv2d 64→512 k3`).
    pub fn describe(&self) -> String {
        match *self {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                ..
            } => {
                let s = if stride == 1 {
                    String::new()
                } else {
                    format!(" s{stride}")
                };
                format!("conv2d {in_channels}→{out_channels} k{kernel}{s}")
            }
            LayerOp::MaxPool2d { kernel, stride, .. } => format!("max pool k{kernel} s{stride}"),
            LayerOp::BatchNorm { channels } => format!("batch norm {channels}"),
            LayerOp::Linear {
                in_features,
                out_features,
            } => format!("linear {in_features}→{out_features}"),
            LayerOp::ChannelDropout { per_mille } => {
                format!("dropout2d p={}", f64::from(per_mille) / 1000.0)
            }
            LayerOp::Adam { parameters } => format!("adam ({parameters} parameters)"),
            other => other.family().to_string(),
        }
    }
}

/// A part of one layer's work in a training step.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    /// The gradient of the layer's input (a convolution's: a transposed convolution).
    InputGrad,
    /// The gradients of the layer's parameters (with its bias's, where it has one).
    ParamGrad,
    /// Input and parameter gradients together (batch norm).
    Backward,
    /// The optimizer's update.
    Update,
}

impl Phase {
    /// How tables name the phase.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::InputGrad => "input grad",
            Phase::ParamGrad => "weight grad",
            Phase::Backward => "backward",
            Phase::Update => "update",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One layer at the shape one step runs it, with every layer of the model that is the same op
/// at the same shape (they are timed once and counted as many times as they run).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Site {
    pub op: LayerOp,
    /// The input's shape (`[batch, channels, height, width]`, `[batch, features]`; empty for
    /// the optimizer).
    pub input: Vec<usize>,
    /// Whether the step needs the gradient of this layer's input.
    pub input_grad: bool,
    /// The model's layers that run this op at this shape (`layer2.0.conv1`), in order.
    pub layers: Vec<String>,
}

impl Site {
    /// The shape the site produces.
    pub fn output(&self) -> Vec<usize> {
        self.op.output(&self.input)
    }

    /// The op with its input's spatial size (`conv2d 64→512 k3 at 13×13`).
    pub fn describe(&self) -> String {
        match self.input.as_slice() {
            &[_, _, h, w] => format!("{} at {h}×{w}", self.op.describe()),
            _ => self.op.describe(),
        }
    }

    /// The phases it is timed in.
    pub fn phases(&self) -> Vec<Phase> {
        self.op.phases(self.input_grad)
    }
}

/// Walks a model's layers in order, tracking the activation's shape and whether it needs a
/// gradient, and merges layers that are the same op at the same shape.
struct Walk {
    sites: Vec<Site>,
    shape: Vec<usize>,
    grad: bool,
}

impl Walk {
    fn new(input: Vec<usize>) -> Self {
        Walk {
            sites: Vec::new(),
            shape: input,
            grad: false,
        }
    }

    fn layer(&mut self, name: &str, op: LayerOp) {
        let output = op.output(&self.shape);
        let input = std::mem::replace(&mut self.shape, output);
        let input_grad = self.grad;
        self.grad |= op.parameters() > 0;
        match self
            .sites
            .iter_mut()
            .find(|s| s.op == op && s.input == input && s.input_grad == input_grad)
        {
            Some(site) => site.layers.push(name.to_string()),
            None => self.sites.push(Site {
                op,
                input,
                input_grad,
                layers: vec![name.to_string()],
            }),
        }
    }

    fn finish(mut self) -> Vec<Site> {
        self.layer("loss", LayerOp::CrossEntropy);
        let parameters = self
            .sites
            .iter()
            .map(|s| s.op.parameters() * s.layers.len())
            .sum();
        self.sites.push(Site {
            op: LayerOp::Adam { parameters },
            input: Vec::new(),
            input_grad: false,
            layers: vec!["optimizer".into()],
        });
        self.sites
    }
}

fn conv(
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    bias: bool,
) -> LayerOp {
    LayerOp::Conv2d {
        in_channels: cin,
        out_channels: cout,
        kernel,
        stride,
        padding,
        bias,
    }
}

/// Every operation of one training step of `model` at batch size `batch`, in the order the
/// step runs them, as kiln-core's `models.rs` (and the PyTorch reference's models) build the
/// network. Tests in kiln-core check this list against the model's own layers and parameters.
pub fn sites(model: ModelKind, batch: usize) -> Vec<Site> {
    let g = model.geometry();
    let mut walk = Walk::new(vec![batch, g.channels, g.height, g.width]);
    match model {
        ModelKind::MnistCnn => mnist_cnn(&mut walk, g),
        ModelKind::ResNet18 | ModelKind::ResNet18Gray => resnet18(&mut walk, g),
        ModelKind::Mlp => mlp(&mut walk, g),
    }
    walk.finish()
}

/// The article's MNIST CNN (kiln-core `models/mod.rs`, `MnistCnn`).
fn mnist_cnn(walk: &mut Walk, g: Geometry) {
    let pool = LayerOp::MaxPool2d {
        kernel: 2,
        stride: 2,
        padding: 0,
    };
    walk.layer("conv1", conv(1, 64, 3, 1, 0, true));
    walk.layer("pool1", pool);
    walk.layer("conv2", conv(64, 512, 3, 1, 0, true));
    walk.layer("pool2", pool);
    walk.layer("dropout", LayerOp::ChannelDropout { per_mille: 100 });
    walk.layer("global max pool", LayerOp::GlobalMaxPool);
    walk.layer(
        "fc1",
        LayerOp::Linear {
            in_features: 512,
            out_features: 1024,
        },
    );
    walk.layer("relu", LayerOp::Relu);
    walk.layer(
        "fc2",
        LayerOp::Linear {
            in_features: 1024,
            out_features: g.classes,
        },
    );
}

/// torchvision's ResNet18 topology (kiln-core `models/mod.rs`, `ResNet`).
fn resnet18(walk: &mut Walk, g: Geometry) {
    walk.layer("conv1", conv(g.channels, 64, 7, 2, 3, false));
    walk.layer("bn1", LayerOp::BatchNorm { channels: 64 });
    walk.layer("relu", LayerOp::Relu);
    walk.layer(
        "maxpool",
        LayerOp::MaxPool2d {
            kernel: 3,
            stride: 2,
            padding: 1,
        },
    );
    let mut inplanes = 64;
    for (stage, (planes, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..2 {
            let name = format!("layer{}.{block}", stage + 1);
            let stride = if block == 0 { stride } else { 1 };
            let (block_input, block_grad) = (walk.shape.clone(), walk.grad);
            walk.layer(
                &format!("{name}.conv1"),
                conv(inplanes, planes, 3, stride, 1, false),
            );
            walk.layer(
                &format!("{name}.bn1"),
                LayerOp::BatchNorm { channels: planes },
            );
            walk.layer(&format!("{name}.relu1"), LayerOp::Relu);
            walk.layer(
                &format!("{name}.conv2"),
                conv(planes, planes, 3, 1, 1, false),
            );
            walk.layer(
                &format!("{name}.bn2"),
                LayerOp::BatchNorm { channels: planes },
            );
            if stride != 1 || inplanes != planes {
                let main = std::mem::replace(&mut walk.shape, block_input);
                walk.grad = block_grad;
                walk.layer(
                    &format!("{name}.downsample.conv"),
                    conv(inplanes, planes, 1, stride, 0, false),
                );
                walk.layer(
                    &format!("{name}.downsample.bn"),
                    LayerOp::BatchNorm { channels: planes },
                );
                debug_assert_eq!(walk.shape, main);
                walk.shape = main;
            }
            walk.layer(&format!("{name}.add"), LayerOp::ResidualAdd);
            walk.layer(&format!("{name}.relu2"), LayerOp::Relu);
            inplanes = planes;
        }
    }
    walk.layer("avgpool", LayerOp::GlobalAvgPool);
    walk.layer(
        "fc",
        LayerOp::Linear {
            in_features: 512,
            out_features: g.classes,
        },
    );
}

/// The 2-layer perceptron (kiln-core `models/mlp.rs`): the image flattened (a reshape, no
/// op), Linear(pixels→256), ReLU, Linear(256→classes).
fn mlp(walk: &mut Walk, g: Geometry) {
    let batch = walk.shape[0];
    walk.shape = vec![batch, g.pixels()];
    walk.layer(
        "fc1",
        LayerOp::Linear {
            in_features: g.pixels(),
            out_features: 256,
        },
    );
    walk.layer("relu", LayerOp::Relu);
    walk.layer(
        "fc2",
        LayerOp::Linear {
            in_features: 256,
            out_features: g.classes,
        },
    );
}

/// Floating-point operations of one training sample (forward + backward = 3 x forward, a
/// multiply-add counted as 2), from the convolutions and linear layers of [`sites`].
pub fn training_flops_per_sample(model: ModelKind) -> u64 {
    let forward_macs: u64 = sites(model, 1)
        .iter()
        .map(|s| s.op.forward_macs(&s.input) * s.layers.len() as u64)
        .sum();
    3 * 2 * forward_macs
}
