//! The operations of each model at the shapes one training step runs them, walked from the
//! model's one description (`crate::models`): what every record's FLOPs and `explain`'s tables
//! (Rust runners and the PyTorch reference alike) are computed from.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ModelKind;
use crate::models::Layer;
pub use crate::models::LayerOp;

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

    /// The parts of its training step the site is timed in: its forward pass, then its
    /// backward pass as Burn's autodiff runs it — a convolution's or linear layer's input
    /// gradient and parameter gradients apart (two kernels each), a batch norm's in one
    /// (they share their reductions), a parameter-free layer's input gradient. The first
    /// layer has no input gradient (nothing before it wants one).
    pub fn phases(&self) -> Vec<Phase> {
        match self.op {
            LayerOp::Adam { .. } => vec![Phase::Update],
            LayerOp::Conv2d { .. } | LayerOp::Linear { .. } => {
                let mut p = vec![Phase::Forward];
                if self.input_grad {
                    p.push(Phase::InputGrad);
                }
                p.push(Phase::ParamGrad);
                p
            }
            LayerOp::BatchNorm { .. } => vec![Phase::Forward, Phase::Backward],
            _ if self.input_grad => vec![Phase::Forward, Phase::InputGrad],
            _ => vec![Phase::Forward],
        }
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

    /// Walk `layers`: a residual block's main path, then its shortcut from the block's input
    /// (none: the identity), then their sum, named `BLOCK.add`.
    fn layers(&mut self, layers: &[Layer]) {
        for layer in layers {
            match layer {
                Layer::Op { name, op, .. } => self.layer(name, *op),
                Layer::Flatten => {
                    let batch = self.shape.first().copied().unwrap_or(1);
                    let features = self.shape.iter().skip(1).product();
                    self.shape = vec![batch, features];
                }
                Layer::Residual {
                    name,
                    main,
                    shortcut,
                } => {
                    let (input, grad) = (self.shape.clone(), self.grad);
                    self.layers(main);
                    if !shortcut.is_empty() {
                        let main = std::mem::replace(&mut self.shape, input);
                        self.grad = grad;
                        self.layers(shortcut);
                        self.shape = main;
                    }
                    self.layer(&format!("{name}.add"), LayerOp::ResidualAdd);
                }
            }
        }
    }
}

/// Every operation of one training step of `model` at batch size `batch`, in the order the
/// step runs them: the model's layers as its description lists them (what kiln-core and the
/// PyTorch reference build), then the loss and the optimizer.
pub fn sites(model: ModelKind, batch: usize) -> Vec<Site> {
    let g = model.geometry();
    let mut walk = Walk::new(vec![batch, g.channels, g.height, g.width]);
    walk.layers(&model.layers());
    walk.finish()
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
