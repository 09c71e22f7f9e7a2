//! One operation of a training step at its real shapes: a layer as the networks build it
//! (`crate::models::Layer`), a residual sum, or the loss.

use burn::module::Module;
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::prelude::*;

use kiln_contract::explain::LayerOp;
use kiln_contract::models::Init;

use crate::CoreError;
use crate::models::{self, Act};

/// One operation built with Burn's modules.
#[derive(Clone)]
pub(super) enum OpLayer {
    // Boxed, as the loss: with the remote device in Burn's device type, both are hundreds of
    // bytes.
    Net(Box<models::Layer>),
    Add,
    CrossEntropy(Box<CrossEntropyLoss>),
}

impl OpLayer {
    pub(super) fn build(op: LayerOp, device: &Device) -> Result<OpLayer, CoreError> {
        Ok(match op {
            LayerOp::ResidualAdd => OpLayer::Add,
            LayerOp::CrossEntropy => {
                OpLayer::CrossEntropy(Box::new(CrossEntropyLossConfig::new().init(device)))
            }
            op => OpLayer::Net(Box::new(models::Layer::of(op, Init::Default, device)?)),
        })
    }

    /// The same layer with its parameters frozen (no gradient wanted).
    pub(super) fn frozen(&self) -> OpLayer {
        match self {
            OpLayer::Net(m) => OpLayer::Net(Box::new(m.as_ref().clone().no_grad())),
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
            OpLayer::Net(m) => m.forward(x),
            OpLayer::Add => Act::D4(x.d4() + other.clone().d4()),
            OpLayer::CrossEntropy(m) => Act::D1(m.forward(x.d2(), targets.clone())),
        })
    }
}
