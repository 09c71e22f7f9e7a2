//! `cargo xtask explain`'s op list against the models it describes, and the executor on tiny
//! shapes: a model that gains a layer without an op entry fails here.

mod common;

use burn::prelude::*;
use common::FLEX;
use kiln_core::explain::explain;
use kiln_core::models::{BuildModel, Classifier, ModelKind, WithModel, trainable_parameters};
use kiln_results::explain::{ExplainRequest, LayerOp, Phase, sites};
use kiln_results::{Precision, Status, Vocabulary};

/// Module types that only hold other modules (their layers are what the op list names).
const CONTAINERS: &[&str] = &["MnistCnn", "ResNet", "BasicBlock", "Mlp"];

/// The op family each of Burn's layer types is timed as.
fn family_of(module_type: &str) -> Option<&'static str> {
    Some(match module_type {
        "Conv2d" => "conv2d",
        "BatchNorm" => "batch norm",
        "MaxPool2d" => "max pool",
        "Linear" => "linear",
        "AdaptiveAvgPool2d" => "global avg pool",
        "ChannelDropout" => "dropout2d",
        _ => return None,
    })
}

/// Type names in a module's display (`conv1: Conv2d {...}`), containers included.
fn module_types(display: &str) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for (at, _) in display.match_indices('{') {
        let before = display[..at].trim_end();
        let start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[start..];
        if name.chars().next().is_some_and(char::is_uppercase) && !types.iter().any(|t| t == name) {
            types.push(name.to_string());
        }
    }
    types
}

/// The model's trainable parameters and its display (the tree of its modules), built as every
/// runner builds it.
fn built(kind: ModelKind) -> (usize, String) {
    struct Described;
    impl WithModel for Described {
        type Output = (usize, String);
        fn run<M: Classifier>(self, model: M) -> (usize, String) {
            (trainable_parameters(&model), format!("{model}"))
        }
    }
    kind.build(&device(), Described)
}

fn device() -> Device {
    let d = Device::flex();
    d.seed(3);
    d.autodiff()
}

#[test]
fn every_layer_kind_and_parameter_of_each_model_has_an_op() {
    for &kind in ModelKind::ALL {
        let list = sites(kind, 2);
        let (parameters, display) = built(kind);
        let Some(LayerOp::Adam { parameters: listed }) = list.last().map(|s| s.op) else {
            panic!("{kind}: the optimizer must close the op list");
        };
        assert_eq!(
            listed, parameters,
            "{kind}: the op list's layers hold {listed} parameters, the model {parameters}; a \
             layer was added or changed without its op entry (kiln-results explain::sites)"
        );
        let families: Vec<&str> = list.iter().map(|s| s.op.family()).collect();
        let types = module_types(&display);
        assert!(types.iter().any(|t| t == "Linear"), "{kind}: {display}");
        for t in types {
            if CONTAINERS.contains(&t.as_str()) {
                continue;
            }
            let family = family_of(&t).unwrap_or_else(|| {
                panic!(
                    "{kind} has a {t} layer that explain has no op for: add it to \
                     kiln-results explain::LayerOp and sites, and to this test's map"
                )
            });
            assert!(
                families.contains(&family),
                "{kind} has a {t} layer but its op list has no {family}"
            );
        }
    }
}

#[test]
fn a_module_type_the_map_does_not_know_is_found() {
    let types = module_types("Net {\n  conv: Conv2d {ch_in: 1}\n  norm: LayerNorm {d: 4}\n}");
    assert_eq!(types, ["Net", "Conv2d", "LayerNorm"]);
    assert_eq!(family_of("LayerNorm"), None);
}

fn tiny(model: ModelKind) -> ExplainRequest {
    let mut r = ExplainRequest::new(model, "flex", "cpu", Precision::F32, 2);
    r.warmup = 0;
    r.repeats = 1;
    r
}

#[test]
fn every_op_of_each_model_is_timed_in_every_phase() {
    for model in [ModelKind::MnistCnn, ModelKind::ResNet18, ModelKind::Mlp] {
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
