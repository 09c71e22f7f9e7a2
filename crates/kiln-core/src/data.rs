//! The dataset on the device: uploaded once; each epoch uploads only its shuffled index order,
//! and batches are gathered on the device.

use burn::prelude::*;
use kiln_data::Dataset;

/// The dataset as device tensors, uploaded once.
pub struct DeviceData {
    pub(crate) train_x: Tensor<4>,
    pub(crate) train_y: Tensor<1, Int>,
    pub(crate) test_x: Tensor<4>,
    pub(crate) test_y: Tensor<1, Int>,
    pub train_len: usize,
    pub test_len: usize,
}

impl DeviceData {
    /// Upload `data` (train split to `device`, test split to its non-autodiff twin).
    pub fn upload(data: &Dataset, device: &Device, eval_limit: Option<usize>) -> DeviceData {
        let g = data.geometry;
        let test = data
            .test
            .clone()
            .truncated(eval_limit.unwrap_or(usize::MAX), g);
        let images = |split: &kiln_data::Split, device: &Device| {
            Tensor::<4>::from_data(
                TensorData::new(
                    data.normalized(split),
                    [split.len(), g.channels, g.height, g.width],
                ),
                device,
            )
        };
        let labels = |split: &kiln_data::Split, device: &Device| {
            let values: Vec<i64> = split.labels.iter().map(|&l| i64::from(l)).collect();
            Tensor::<1, Int>::from_data(TensorData::new(values, [split.len()]), device)
        };
        let eval_device = device.clone().without_autodiff();
        DeviceData {
            train_x: images(&data.train, device),
            train_y: labels(&data.train, device),
            test_x: images(&test, &eval_device),
            test_y: labels(&test, &eval_device),
            train_len: data.train.len(),
            test_len: test.len(),
        }
    }
}
