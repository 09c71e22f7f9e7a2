//! The flex runner's `--infer FILE` as `cargo xtask infer` runs it: a complete record from
//! given weights, logits that are the model's own, and bad weights named in the error.

mod common;

use std::path::{Path, PathBuf};

use burn::prelude::*;
use common::runner;
use kiln_contract::infer::{INFER_VERSION, InferRecord, InferRequest, read_logits};
use kiln_contract::{DatasetName, ModelKind, Precision, Status, TimingRules};
use kiln_core::Classifier;

fn request(dir: &Path, weights: PathBuf) -> InferRequest {
    InferRequest {
        kiln_infer: INFER_VERSION,
        model: ModelKind::Mlp,
        backend: "flex".into(),
        device: "cpu".into(),
        precision: Precision::F32,
        weights,
        dataset: DatasetName::FashionMnistSample,
        data_dir: None,
        data_file: None,
        samples: 64,
        logits_out: dir.join("logits.safetensors"),
        latency_batches: vec![1, 8],
        queries: InferRequest::MIN_QUERIES,
        series_seconds: 0.2,
        clients: vec![1, 3],
        throughput_batch: 32,
        throughput_seconds: 0.1,
        warmup_cap_seconds: 5.0,
        timing: TimingRules::SETTLE_AT_ONCE,
        spawned_at_unix_us: None,
        cold_caches: false,
        seed: 7,
    }
}

fn run(dir: &Path, request: &InferRequest) -> InferRecord {
    let path = dir.join("request.json");
    std::fs::write(&path, serde_json::to_string(request).unwrap()).unwrap();
    let out = runner().arg("--infer").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "no record ({e}): {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Freshly initialised weights of `model`, written to `dir`, and the network they are.
fn weights(dir: &Path, model: ModelKind) -> (PathBuf, kiln_core::Net) {
    let device = Device::flex().autodiff();
    let net = kiln_core::Net::new(model, &device).unwrap();
    let path = dir.join(format!("{model}.safetensors"));
    kiln_core::verify::weights_of(&net).write(&path).unwrap();
    (path, net)
}

/// Every figure is there and in order (the clients-at-once series too), and the logits file holds exactly what the same
/// weights predict in this process for the same samples.
#[test]
fn inference_from_given_weights_is_complete_and_predicts_as_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, net) = weights(tmp.path(), ModelKind::Mlp);
    let q = request(tmp.path(), path);
    let r = run(tmp.path(), &q);
    assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
    for batch in [1, 8] {
        let l = r.latency_at(batch).unwrap();
        assert!(l.queries >= InferRequest::MIN_QUERIES, "{l:?}");
        assert!(
            0.0 < l.p50_seconds
                && l.p50_seconds <= l.p90_seconds
                && l.p90_seconds <= l.p99_seconds
                && l.p99_seconds <= l.max_seconds,
            "{l:?}"
        );
    }
    let first = r.first_prediction.as_ref().unwrap();
    assert!(0.0 < first.ready_seconds && first.ready_seconds <= first.seconds);
    assert!(r.throughput.as_ref().unwrap().samples_per_second > 0.0);
    assert!(r.overhead.is_some() && r.memory.is_some());
    // Each client count asked: every client's timed queries, at least the fewest each.
    let counts: Vec<usize> = r.concurrent.iter().map(|c| c.clients).collect();
    assert_eq!(counts, [1, 3]);
    for c in &r.concurrent {
        let l = &c.latency;
        assert!(l.queries >= c.clients * InferRequest::MIN_QUERIES, "{c:?}");
        assert!(
            c.queries_per_second > 0.0 && l.p50_seconds <= l.p99_seconds,
            "{c:?}"
        );
    }

    let (logits, classes) = read_logits(r.logits.as_ref().unwrap()).unwrap();
    assert_eq!((logits.len(), classes), (64 * 10, 10));
    let data = kiln_data::load(&kiln_data::Request {
        name: q.dataset,
        geometry: q.model.geometry(),
        data_dir: None,
        seed: q.seed,
        synthetic_sizes: (64, 64),
    })
    .unwrap();
    let test = data.test.clone().truncated(64, data.geometry);
    let g = data.geometry;
    let x = Tensor::<4>::from_data(
        TensorData::new(data.normalized(&test), [64, g.channels, g.height, g.width]),
        &Device::flex(),
    );
    let here: Vec<f32> = net.valid().forward(x).into_data().iter::<f32>().collect();
    let largest = logits
        .iter()
        .zip(&here)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(largest < 1e-4, "the runner's logits differ by {largest}");
}

/// A weights file that is not safetensors, and one of another model, fail naming the file and
/// the tensor.
#[test]
fn bad_weights_fail_naming_the_file_and_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let corrupt = tmp.path().join("corrupt.safetensors");
    std::fs::write(&corrupt, b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":").unwrap();
    let r = run(tmp.path(), &request(tmp.path(), corrupt));
    assert_eq!(r.status, Status::Failed);
    let why = r.reason.unwrap_or_default();
    assert!(why.contains("corrupt.safetensors"), "{why}");

    let (other, _) = weights(tmp.path(), ModelKind::MnistCnn);
    let r = run(tmp.path(), &request(tmp.path(), other));
    assert_eq!(r.status, Status::Failed);
    let why = r.reason.unwrap_or_default();
    assert!(why.contains("conv1.weight"), "{why}");
}
