//! The layers a model description is made of ([`LayerOp`]): what each computes and what fixes
//! its cost (its output shape, parameters and multiply-adds).

use serde::{Deserialize, Serialize};

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
    /// A fully connected layer with a bias.
    pub fn linear(in_features: usize, out_features: usize) -> LayerOp {
        LayerOp::Linear {
            in_features,
            out_features,
        }
    }

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
