//! Two CPU backends, same weights, same batch: the same loss and gradients within the
//! tolerance `kiln_core::check::TOLERANCE` justifies.

use burn::prelude::*;
use kiln_core::ModelKind;
use kiln_core::check::agree;

#[test]
#[allow(deprecated)] // ndarray is deprecated upstream; it stays in Kiln's matrix.
fn flex_and_ndarray_agree_on_loss_and_gradients() {
    let worst = agree(ModelKind::MnistCnn, &Device::flex(), &Device::ndarray()).unwrap();
    // f32 on two CPU backends: far tighter than the tolerance.
    assert!(worst < 1e-3, "relative difference {worst}");
}
