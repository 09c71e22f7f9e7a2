//! Model definitions: shapes, parameter counts (equal to PyTorch's for the same layers), FLOPs,
//! and a few steps on one fixed batch lowering the loss, for every registered model.

use burn::module::Module;
use burn::prelude::*;
use kiln_contract::Vocabulary;
use kiln_contract::explain::training_flops_per_sample;
use kiln_core::DeviceData;
use kiln_core::Trainer;
use kiln_core::models::{Classifier, ModelKind, Net, trainable_parameters};

fn device() -> Device {
    let d = Device::flex();
    d.seed(7);
    d.autodiff()
}

fn net(kind: ModelKind, device: &Device) -> Net {
    Net::new(kind, device).unwrap()
}

#[test]
fn parameter_counts_are_pytorchs() {
    let device = device();
    // PyTorch: sum(p.numel() for p in model.parameters()) for the same definitions;
    // torchvision.models.resnet18(num_classes=10): 11,181,642.
    let cnn = net(ModelKind::MnistCnn, &device);
    assert_eq!(trainable_parameters(&cnn), 831_626);
    assert_eq!(cnn.num_params(), 831_626);
    let rgb = net(ModelKind::ResNet18, &device);
    assert_eq!(trainable_parameters(&rgb), 11_181_642);
    // Burn also counts BatchNorm's running mean and variance (2 x 4,800 values).
    assert_eq!(rgb.num_params(), 11_181_642 + 9_600);
    // The article's variant: first conv 1->64, 7x7, no bias (6,272 fewer weights).
    let gray = net(ModelKind::ResNet18Gray, &device);
    assert_eq!(
        trainable_parameters(&gray),
        11_181_642 - 3 * 64 * 49 + 64 * 49
    );
    // 784*256 + 256 + 256*10 + 10.
    assert_eq!(trainable_parameters(&net(ModelKind::Mlp, &device)), 203_530);
}

#[test]
fn every_model_maps_its_images_to_class_logits() {
    let device = device();
    for &kind in ModelKind::ALL {
        let g = kind.geometry();
        let images = Tensor::<4>::zeros([2, g.channels, g.height, g.width], &device);
        assert_eq!(
            net(kind, &device).forward(images).dims(),
            [2, g.classes],
            "{kind}"
        );
    }
}

#[test]
fn flop_counts_match_the_published_figures() {
    let cnn = training_flops_per_sample(ModelKind::MnistCnn) as f64 / 1e6;
    assert!((cnn - 219.0).abs() < 2.0, "mnist-cnn {cnn} MFLOP");
    let resnet = training_flops_per_sample(ModelKind::ResNet18) as f64 / 1e6;
    assert!((resnet - 220.0).abs() < 10.0, "resnet18 {resnet} MFLOP");
}

fn loss_falls(kind: ModelKind, device: &Device) {
    let g = kind.geometry();
    let mut data = kiln_data::synthetic(g, 16, 4, 3);
    data.test = data.train.clone();
    let on_device = DeviceData::upload(&data, device, None);
    let mut trainer = Trainer::new(net(kind, device), device, 1e-3);
    let batch: Vec<i64> = (0..16).collect();
    let indices = || Tensor::<1, Int>::from_data(TensorData::new(batch.clone(), [16]), device);
    let read = |t: Tensor<1>| t.into_data().iter::<f32>().next().unwrap();
    let first = read(trainer.step(&on_device, indices()));
    let mut last = first;
    for _ in 0..6 {
        last = read(trainer.step(&on_device, indices()));
    }
    assert!(
        last.is_finite() && last < first * 0.8,
        "{kind:?}: loss {first} -> {last}"
    );
}

#[test]
fn a_few_steps_on_a_fixed_batch_lower_the_loss() {
    let device = device();
    for &kind in ModelKind::ALL {
        loss_falls(kind, &device);
    }
}

#[test]
fn dropout_is_off_only_when_asked() {
    let device = device();
    let text = |n: Net| format!("{n}");
    let with = text(net(ModelKind::MnistCnn, &device));
    let without = text(net(ModelKind::MnistCnn, &device).without_dropout());
    assert!(with.contains("prob: 0.1"), "{with}");
    assert!(without.contains("prob: 0"), "{without}");
    assert!(!without.contains("prob: 0.1"), "{without}");
}

/// Every model's parameters as the PyTorch reference builds them (its `models.Net`, from the
/// same description): names, shapes in Burn's layout, in Burn's order.
fn pytorch_layout(python: &std::ffi::OsStr) -> serde_json::Value {
    let package = kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../../pytorch/kiln_torch");
    let script = "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport models\n\
                  print(json.dumps({n: [[k, list(p.t().shape if t else p.shape)] \
                  for k, p, t in models.Net(n).names] for n in models.models()}))";
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&package)
        .output()
        .expect("the Python in KILN_TORCH_PYTHON runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

#[test]
fn the_pytorch_reference_builds_every_model_with_burns_parameters() {
    let Some(python) = std::env::var_os("KILN_TORCH_PYTHON") else {
        kiln_contract::testing::skip(
            "the PyTorch reference's models",
            "no Python with torch (run `cargo xtask test` after `cargo xtask setup-libtorch`)",
        );
        return;
    };
    let torch = pytorch_layout(&python);
    let device = device();
    for &kind in ModelKind::ALL {
        let burn: Vec<(String, Vec<usize>)> = kiln_core::verify::weights_of(&net(kind, &device))
            .tensors
            .into_iter()
            .map(|t| (t.name, t.shape))
            .collect();
        let theirs: Vec<(String, Vec<usize>)> =
            serde_json::from_value(torch[kind.name()].clone()).expect("name and shape pairs");
        assert_eq!(burn, theirs, "{kind}: Burn's parameters, then PyTorch's");
    }
}

/// The reference's explain and verify build its training loop (`cell.Cell`) the way a cell
/// does: every argument `Cell` reads is in `cell.step_args` (what explain.py and verify.py pass)
/// and in a cell request (what `__main__.py` passes, by the request's own key names, with its
/// optional keys' defaults), so a new setting read by the loop fails here, not at run time.
#[test]
fn the_reference_builds_its_loop_alike_for_cells_explain_and_verify() {
    let Some(python) = std::env::var_os("KILN_TORCH_PYTHON") else {
        kiln_contract::testing::skip(
            "the PyTorch reference's loop arguments",
            "no Python with torch (run `cargo xtask test` after `cargo xtask setup-libtorch`)",
        );
        return;
    };
    let package = kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../../pytorch/kiln_torch");
    let request = serde_json::to_value(kiln_contract::CellRequest::new(
        ModelKind::Mlp,
        "pytorch",
        kiln_contract::Profile::Quick,
    ))
    .unwrap();
    let keys: Vec<&String> = request.as_object().unwrap().keys().collect();
    let script = "import ast, inspect, json, sys\nsys.path.insert(0, sys.argv[1])\nimport cell\n\
                  read = sorted({n.attr for n in ast.walk(ast.parse(inspect.getsource(cell.Cell)))\n\
                  \x20   if isinstance(n, ast.Attribute) and (getattr(n.value, 'id', None) == 'args'\n\
                  \x20   or getattr(n.value, 'attr', None) == 'args')})\n\
                  step = vars(cell.step_args({'precision': 'f32', 'learning_rate': 0.001, 'seed': 42}, 16))\n\
                  given = set(json.loads(sys.argv[2])) | {'calibrate_only', 'given_peak', \
                  'loss_scaling', 'inject_slow_steps'}\n\
                  print(json.dumps({'read': read, 'not_in_step_args': [k for k in read if k not in step],\n\
                  \x20   'not_in_request': [k for k in read if k not in given]}))";
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .arg(&package)
        .arg(serde_json::to_string(&keys).unwrap())
        .output()
        .expect("the Python in KILN_TORCH_PYTHON runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert!(
        found["read"].as_array().unwrap().len() >= 8,
        "Cell reads too few arguments to be the loop: {found}"
    );
    assert_eq!(found["not_in_step_args"], serde_json::json!([]), "{found}");
    assert_eq!(found["not_in_request"], serde_json::json!([]), "{found}");
}
