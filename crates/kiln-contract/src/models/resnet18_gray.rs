//! The article's ResNet18 variant for 1-channel MNIST-sized images: torchvision's topology
//! whose first convolution is Conv2d(1→64, k7, stride 2, padding 3, no bias).

use super::layer::Model;
use crate::Geometry;

pub const MODEL: Model = Model {
    geometry: Geometry::MNIST,
    layers: super::resnet18::layers,
};
