//! ResNet18 in torchvision's topology (BasicBlock, [2, 2, 2, 2]) with a 10-class head, on
//! 3×32×32 CIFAR-10 images; its convolutions start as torchvision's (Kaiming normal, fan out).

use super::layer::{Init, Layer, Model};
use super::op::LayerOp;
use crate::Geometry;

pub const MODEL: Model = Model {
    geometry: Geometry::CIFAR,
    layers,
};

/// A convolution without bias, started as torchvision starts ResNet's.
fn conv(name: String, channels: [usize; 2], kernel: usize, stride: usize, padding: usize) -> Layer {
    let op = LayerOp::Conv2d {
        in_channels: channels[0],
        out_channels: channels[1],
        kernel,
        stride,
        padding,
        bias: false,
    };
    Layer::init(name, op, Init::KaimingFanOut)
}

fn batch_norm(name: String, channels: usize) -> Layer {
    Layer::op(name, LayerOp::BatchNorm { channels })
}

/// torchvision's `BasicBlock` named `name`, then its closing ReLU.
fn basic_block(name: &str, inplanes: usize, planes: usize, stride: usize) -> [Layer; 2] {
    let shortcut = if stride != 1 || inplanes != planes {
        vec![
            conv(format!("{name}.downsample.conv"), [inplanes, planes], 1, stride, 0),
            batch_norm(format!("{name}.downsample.bn"), planes),
        ]
    } else {
        Vec::new()
    };
    let main = vec![
        conv(format!("{name}.conv1"), [inplanes, planes], 3, stride, 1),
        batch_norm(format!("{name}.bn1"), planes),
        Layer::op(format!("{name}.relu1"), LayerOp::Relu),
        conv(format!("{name}.conv2"), [planes, planes], 3, 1, 1),
        batch_norm(format!("{name}.bn2"), planes),
    ];
    let block = Layer::Residual {
        name: name.to_string(),
        main,
        shortcut,
    };
    [block, Layer::op(format!("{name}.relu2"), LayerOp::Relu)]
}

pub(super) fn layers(g: Geometry) -> Vec<Layer> {
    let mut layers = vec![
        conv("conv1".into(), [g.channels, 64], 7, 2, 3),
        batch_norm("bn1".into(), 64),
        Layer::op("relu", LayerOp::Relu),
        Layer::op(
            "maxpool",
            LayerOp::MaxPool2d {
                kernel: 3,
                stride: 2,
                padding: 1,
            },
        ),
    ];
    let mut inplanes = 64;
    for (stage, (planes, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        layers.extend(basic_block(&format!("layer{}.0", stage + 1), inplanes, planes, stride));
        layers.extend(basic_block(&format!("layer{}.1", stage + 1), planes, planes, 1));
        inplanes = planes;
    }
    layers.push(Layer::op("avgpool", LayerOp::GlobalAvgPool));
    layers.push(Layer::op("fc", LayerOp::linear(512, g.classes)));
    layers
}
