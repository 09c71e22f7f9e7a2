//! The benchmark's models as Burn networks, built for any Burn device from each model's one
//! description (`kiln_contract::models`: a file per model, one registration line), so that a
//! new model needs nothing here.

use burn::module::{Module, Param};
use burn::prelude::*;

mod classifier;
mod layer;

pub use classifier::Classifier;
pub use kiln_contract::ModelKind;
pub use layer::{Act, Block, ChannelDropout, Layer};

/// A model's network: its layers, built from its description.
#[derive(Module, Debug)]
pub struct Net {
    layers: Vec<Block>,
    #[module(skip)]
    kind: ModelKind,
}

impl Net {
    /// A freshly initialised `kind` on `device` (its layers' weights drawn in the order the
    /// description lists them).
    pub fn new(kind: ModelKind, device: &Device) -> Result<Net, crate::CoreError> {
        Ok(Net {
            layers: Block::build_all(&kind.layers(), device)?,
            kind,
        })
    }

    /// The same network with every dropout off, so that a training step depends only on the
    /// weights and the batch (`verify`, the agreement checks).
    pub fn without_dropout(self) -> Net {
        Net {
            layers: self
                .layers
                .into_iter()
                .map(Block::without_dropout)
                .collect(),
            kind: self.kind,
        }
    }

    /// The model it is.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }
}

/// The name a model's description (`described`, its [`ModelKind::layers`]) gives the
/// parameter at Burn's module path in its [`Net`] (`layers.4.Residual.main.0.Conv.weight` is
/// `layer1.0.conv1.weight`, `layers.0.Layer.Conv.weight` is `conv1.weight`), as the PyTorch
/// reference names it too; the path itself where it does not follow the description.
pub fn parameter_name(described: &[kiln_contract::models::Layer], path: &[String]) -> String {
    described_name(described, path).unwrap_or_else(|| path.join("."))
}

/// `path`: the list's field (`layers`, `main`, `shortcut`), the index in it, the variants
/// (`Layer`, `Conv`: names in CamelCase), then the parameter's path in that layer.
fn described_name(layers: &[kiln_contract::models::Layer], path: &[String]) -> Option<String> {
    use kiln_contract::models::Layer as Described;
    let (index, rest) = path.get(1..)?.split_first()?;
    let variant = |s: &String| s.starts_with(|c: char| c.is_ascii_uppercase());
    let rest: Vec<String> = rest.iter().skip_while(|s| variant(s)).cloned().collect();
    match layers.get(index.parse::<usize>().ok()?)? {
        Described::Op { name, .. } => Some(format!("{name}.{}", rest.join("."))),
        Described::Residual { main, shortcut, .. } => match rest.first()?.as_str() {
            "main" => described_name(main, &rest),
            "shortcut" => described_name(shortcut, &rest),
            _ => None,
        },
        Described::Flatten => None,
    }
}

impl Classifier for Net {
    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.layers
            .iter()
            .fold(Act::D4(images), |x, block| block.forward(x))
            .d2()
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
