//! The benchmark's models, each described once as the layers of its network: one file per
//! model (its input and its layers), registered by one line below. kiln-core builds the Burn
//! network from the description, the PyTorch reference builds its twin from the same
//! description (written for it into the contract file), and every record's FLOPs and
//! `explain`'s sites are walked from it.

use std::fmt;
use std::str::FromStr;

use crate::vocab::{Geometry, UnknownName, Vocabulary, vocabulary};

mod layer;
mod op;

pub use layer::{Init, Layer, Model, has_batch_norm};
pub use op::LayerOp;

/// The registry: `file: Variant = "name",` — the model's file in this folder, its variant of
/// [`ModelKind`] and the name users type. A new model is its file and its line here.
macro_rules! models {
    ($($(#[$doc:meta])* $file:ident: $variant:ident = $text:literal,)+) => {
        $(mod $file;)+

        vocabulary!(
            /// The benchmark's models.
            ModelKind, "model", {
                $($(#[$doc])* $variant = $text,)+
            }
        );

        impl ModelKind {
            /// The model's description: its input and its layers.
            pub fn model(self) -> Model {
                match self {
                    $(ModelKind::$variant => $file::MODEL,)+
                }
            }
        }
    };
}

models! {
    /// The article's small MNIST CNN.
    mnist_cnn: MnistCnn = "mnist-cnn",
    /// torchvision's ResNet18 topology, 3x32x32 input, 10 classes (CIFAR-10).
    resnet18: ResNet18 = "resnet18",
    /// The article's 1-channel ResNet18 variant (MNIST-sized input).
    resnet18_gray: ResNet18Gray = "resnet18-gray",
    /// A 2-layer perceptron, 784-256-10: an epoch in seconds, for a first run or CI.
    mlp: Mlp = "mlp",
}

impl ModelKind {
    /// The input the model takes.
    pub fn geometry(self) -> Geometry {
        self.model().geometry
    }

    /// The model's layers, in the order its forward pass runs them.
    pub fn layers(self) -> Vec<Layer> {
        let model = self.model();
        (model.layers)(model.geometry)
    }

    /// Samples in the standard epoch the model's times are reported for.
    pub fn standard_epoch(self) -> usize {
        self.geometry().standard_epoch()
    }
}

/// Every model's description by name, for the PyTorch reference (the `models` entry of the
/// contract file): its input shape and its layers.
pub fn descriptions() -> serde_json::Value {
    ModelKind::ALL
        .iter()
        .map(|&kind| {
            let g = kind.geometry();
            let value = serde_json::json!({
                "input": [g.channels, g.height, g.width],
                "classes": g.classes,
                "layers": kind.layers(),
            });
            (kind.name().to_string(), value)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}
