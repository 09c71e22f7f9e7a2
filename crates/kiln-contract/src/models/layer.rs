//! What a model's description is made of: its input and its layers, each an op
//! ([`LayerOp`]) with its name and how its weights start, a reshape, or a residual block.

use serde::Serialize;

use super::op::LayerOp;
use crate::Geometry;

/// A model: the input it takes and its layers for that input.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// The images and classes it is built for.
    pub geometry: Geometry,
    /// Its layers, in the order the forward pass runs them.
    pub layers: fn(Geometry) -> Vec<Layer>,
}

/// One step of a network's forward pass.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layer {
    /// A layer named as the model names it (`layer2.0.conv1`), with how its weights start.
    Op {
        name: String,
        op: LayerOp,
        init: Init,
    },
    /// `[batch, c, h, w]` to `[batch, c·h·w]`: a reshape, no operation of its own.
    Flatten,
    /// `main(x) + shortcut(x)`, an empty shortcut being the identity; its sum is `NAME.add`.
    Residual {
        name: String,
        main: Vec<Layer>,
        shortcut: Vec<Layer>,
    },
}

/// Whether any of `layers` (nested ones included) is a batch norm, whose running statistics
/// are state, not trainable parameters (a weights file of parameters does not carry them).
pub fn has_batch_norm(layers: &[Layer]) -> bool {
    layers.iter().any(|l| match l {
        Layer::Op { op, .. } => matches!(op, LayerOp::BatchNorm { .. }),
        Layer::Flatten => false,
        Layer::Residual { main, shortcut, .. } => has_batch_norm(main) || has_batch_norm(shortcut),
    })
}

impl Layer {
    /// A layer with its weights started as the frameworks do by default.
    pub fn op(name: impl Into<String>, op: LayerOp) -> Layer {
        Layer::Op {
            name: name.into(),
            op,
            init: Init::Default,
        }
    }

    /// A layer with its weights started by `init`.
    pub fn init(name: impl Into<String>, op: LayerOp, init: Init) -> Layer {
        Layer::Op {
            name: name.into(),
            op,
            init,
        }
    }
}

/// How a layer's weights start.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Init {
    /// PyTorch's defaults, which Burn's configurations follow: a convolution's or linear
    /// layer's weights and bias uniform in ±1/sqrt(fan_in); a batch norm's scale 1, shift 0.
    Default,
    /// torchvision's for ResNet convolutions: `kaiming_normal_(mode="fan_out",
    /// nonlinearity="relu")`.
    KaimingFanOut,
}

#[cfg(test)]
mod batch_norm_tests {
    use super::has_batch_norm;
    use crate::ModelKind;

    /// ResNet18's batch norms sit inside its residual blocks and its stem; the MNIST CNN and
    /// the MLP have none.
    #[test]
    fn batch_norms_are_found_in_nested_blocks_and_only_there() {
        assert!(has_batch_norm(&ModelKind::ResNet18.layers()));
        assert!(!has_batch_norm(&ModelKind::MnistCnn.layers()));
        assert!(!has_batch_norm(&ModelKind::Mlp.layers()));
    }
}
