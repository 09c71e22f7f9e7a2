//! `cargo xtask explain`'s op list against the networks built from the same descriptions, and
//! the executor on tiny shapes: every op of every model timed in every phase, with the shape
//! the op list says.

mod common;

use burn::prelude::*;
use common::FLEX;
use kiln_contract::explain::{ExplainRequest, LayerOp, Phase, sites};
use kiln_contract::{Precision, Status, Vocabulary};
use kiln_core::explain::explain;
use kiln_core::models::{ModelKind, Net, trainable_parameters};

/// The model's trainable parameters, built as every runner builds it.
fn parameters(kind: ModelKind) -> usize {
    trainable_parameters(&Net::new(kind, &device()).unwrap())
}

fn device() -> Device {
    let d = Device::flex();
    d.seed(3);
    d.autodiff()
}

#[test]
fn the_op_list_holds_the_parameters_of_each_network() {
    for &kind in ModelKind::ALL {
        let list = sites(kind, 2);
        let built = parameters(kind);
        let Some(LayerOp::Adam { parameters: listed }) = list.last().map(|s| s.op) else {
            panic!("{kind}: the optimizer must close the op list");
        };
        assert_eq!(
            listed, built,
            "{kind}: the op list's layers hold {listed} parameters, the network built from the \
             same description {built}: a LayerOp's parameter count (kiln-contract models/op.rs) \
             and its Burn layer (kiln-core models/layer.rs) disagree"
        );
    }
}

fn tiny(model: ModelKind) -> ExplainRequest {
    let mut r = ExplainRequest::new(model, "flex", "cpu", Precision::F32, 2);
    r.warmup = 0;
    r.repeats = 1;
    r
}

#[test]
fn every_op_of_each_model_is_timed_in_every_phase() {
    for &model in ModelKind::ALL {
        let request = tiny(model);
        let record = explain(&FLEX, &request);
        assert_eq!(record.status, Status::Ok, "{model}: {:?}", record.reason);
        for (index, site) in request.sites.iter().enumerate() {
            for phase in site.phases() {
                let op = record
                    .ops
                    .iter()
                    .find(|o| o.site == index && o.phase == phase)
                    .unwrap_or_else(|| panic!("{model}: {} {phase} not timed", site.describe()));
                assert!(op.timing.median_seconds >= 0.0 && op.timing.runs == 1);
            }
        }
        let step = record.step.expect("the whole step is timed");
        assert!(step.median_seconds > 0.0);
        assert!(record.explained().is_some_and(f64::is_finite));
        // The first conv's input is the images: no input gradient is timed for it.
        assert!(
            !record
                .ops
                .iter()
                .any(|o| o.site == 0 && o.phase == Phase::InputGrad)
        );
    }
}

#[test]
fn a_wrong_shape_in_the_op_list_fails_with_the_op_named() {
    let mut request = tiny(ModelKind::MnistCnn);
    // conv2 given 32 channels where it takes 64.
    request.sites[2].input = vec![2, 32, 13, 13];
    request.sites.truncate(3);
    let record = explain(&FLEX, &request);
    assert_eq!(record.status, Status::Failed);
    let reason = record.reason.unwrap_or_default();
    assert!(
        reason.starts_with("device error: conv2d 64→512 k3 at 13×13"),
        "{reason}"
    );
}

#[test]
fn another_backend_or_an_unknown_device_is_refused() {
    let mut request = tiny(ModelKind::MnistCnn);
    request.backend = "tch".into();
    let record = explain(&FLEX, &request);
    assert_eq!(record.status, Status::Failed);
    assert!(record.reason.unwrap_or_default().contains("\"tch\""));
    let mut request = tiny(ModelKind::MnistCnn);
    request.device = "cuda:3".into();
    let record = explain(&FLEX, &request);
    assert_eq!(record.status, Status::Skipped);
    assert!(record.reason.unwrap_or_default().contains("cuda:3"));
}
