//! One query as an application makes it: a request prepared before the clock uploaded,
//! predicted, its logits read back (the sync).

use burn::prelude::*;

use crate::CoreError;
use crate::models::{Classifier, Net};

/// Read a tensor back to the host: the sync that ends a query.
pub(super) fn read_back(t: Tensor<2>) -> Result<Vec<f32>, CoreError> {
    let data = t
        .try_into_data()
        .map_err(|e| CoreError::Device(format!("cannot read the logits back: {e}")))?;
    Ok(data.iter::<f32>().collect())
}

/// One query: a request (prepared before the clock) uploaded, predicted, read back.
pub(super) fn query(
    model: &Net,
    request: &TensorData,
    device: &Device,
) -> Result<Vec<f32>, CoreError> {
    read_back(model.forward(Tensor::<4>::from_data(request.clone(), device)))
}
