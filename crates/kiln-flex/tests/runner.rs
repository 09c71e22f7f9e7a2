//! The flex runner binary as users and xtask run it: probe, a tiny real cell, bad input.

mod common;

use std::path::Path;
use std::process::Command;

use common::{final_record, runner};

use kiln_contract::{
    CellRequest, DataKind, DatasetName, Method, ModelKind, ProbeReport, Profile, Record, Status,
};

#[test]
fn probe_reports_the_cpu() {
    let out = runner().arg("--probe").output().unwrap();
    assert!(out.status.success());
    let report: ProbeReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.backend, "flex");
    assert_eq!(report.devices.len(), 1);
    let cpu = &report.devices[0];
    assert!(cpu.available && cpu.default && cpu.spec == "cpu");
    assert!(cpu.precisions.contains(&"f32".to_string()));
}

#[test]
fn a_tiny_cell_on_the_embedded_sample_produces_a_complete_record() {
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.settings.epochs = 2;
    request.batch_size = 64;
    request.settings.train_limit = Some(192);
    request.settings.eval_limit = Some(128);
    request.settings.budget_seconds = None;
    let (out, r) = run_request(&request);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r.status, Status::Ok);
    assert_eq!((r.device.as_str(), r.precision.as_str()), ("cpu", "f32"));
    assert_eq!(r.data, DataKind::Real);
    assert_eq!(r.dataset, "fashion-mnist-sample");
    assert_eq!(r.obtained.method, Method::Measured);
    assert_eq!(r.obtained.epoch_samples, 192);
    assert_eq!(r.obtained.standard_epoch_samples, 60_000);
    assert_eq!(r.train_samples, 192);
    assert_eq!(r.test_samples, 128);
    assert_eq!(r.epochs.len(), 2);
    assert!(r.epoch_seconds.is_some() && r.first_epoch_seconds.is_some());
    assert!(r.peak_memory_bytes.is_some_and(|b| b > 1 << 20));
    assert!(r.test_accuracy.is_some());
    assert!(!r.fingerprint.cpu_model.is_empty());
    assert_eq!(r.fingerprint.burn_version, "0.22.1");
}

#[test]
fn an_unknown_model_or_a_zero_value_in_a_request_is_a_usage_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let good = serde_json::to_value(tiny_request()).unwrap();
    for (field, value, words) in [
        ("model", serde_json::json!("lenet"), "lenet"),
        ("epochs", serde_json::json!(0), "--epochs"),
        ("batch_size", serde_json::json!(0), "--batch"),
        ("budget_seconds", serde_json::json!(-1.0), "--budget"),
        ("epoch", serde_json::json!(3), "epoch"),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        let path = tmp.path().join(format!("{field}.json"));
        std::fs::write(&path, bad.to_string()).unwrap();
        let out = runner().arg("--cell").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{field}");
        assert!(out.stdout.is_empty(), "no record for a usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error") && err.contains(&format!("{field}.json")) && err.contains(words),
            "{field}: {err}"
        );
    }
    // Without --probe, --cell, --explain or --verify there is nothing to do.
    let out = runner().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn a_corrupt_dataset_file_fails_the_cell_with_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Fashion-MNIST's four files, the training images with a wrong magic number.
    let mut images = kiln_data::idx::encode(&[2, 28, 28], &[0; 2 * 784]);
    images[3] = 9;
    write(dir, "train-images-idx3-ubyte", &images);
    write(
        dir,
        "train-labels-idx1-ubyte",
        &kiln_data::idx::encode(&[2], &[1, 2]),
    );
    write(
        dir,
        "t10k-images-idx3-ubyte",
        &kiln_data::idx::encode(&[1, 28, 28], &[0; 784]),
    );
    write(
        dir,
        "t10k-labels-idx1-ubyte",
        &kiln_data::idx::encode(&[1], &[3]),
    );
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.dataset = Some(DatasetName::FashionMnist);
    request.settings.data_dir = Some(dir.to_path_buf());
    let path = dir.join("cell.json");
    request.write(&path).unwrap();
    let out = runner()
        .arg("--cell")
        .arg(&path)
        .env("KILN_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r = final_record(&out.stdout);
    assert_eq!(r.status, Status::Failed);
    let reason = r.reason.unwrap();
    assert!(reason.contains("train-images-idx3-ubyte"), "{reason}");
}

#[test]
fn a_missing_dataset_names_where_kiln_looked() {
    let tmp = tempfile::tempdir().unwrap();
    let mut request = CellRequest::new(ModelKind::ResNet18, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.dataset = Some(DatasetName::Cifar10);
    request.settings.data_dir = Some(tmp.path().to_path_buf());
    let path = tmp.path().join("cell.json");
    request.write(&path).unwrap();
    let out = runner()
        .arg("--cell")
        .arg(&path)
        .env("KILN_DATA_DIR", tmp.path())
        .output()
        .unwrap();
    let r = final_record(&out.stdout);
    assert_eq!(r.status, Status::Failed);
    let reason = r.reason.unwrap();
    assert!(
        reason.contains("--data-dir") && reason.contains("fetch-data cifar-10"),
        "{reason}"
    );
}

/// A tiny synthetic cell as a request: 32 samples, batch 8, one epoch, no calibration.
fn tiny_request() -> kiln_contract::CellRequest {
    let mut r = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    r.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    r.settings.epochs = 1;
    r.batch_size = 8;
    r.settings.budget_seconds = None;
    r.dataset = Some(DatasetName::Synthetic);
    r.settings.train_limit = Some(32);
    r.settings.eval_limit = Some(16);
    r.calibrate = false;
    r
}

fn run_request(r: &kiln_contract::CellRequest) -> (std::process::Output, Record) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    r.write(&path).unwrap();
    let out = runner().arg("--cell").arg(&path).output().unwrap();
    let record = final_record(&out.stdout);
    (out, record)
}

#[test]
fn a_cell_request_file_runs_the_cell_it_describes() {
    let mut r = tiny_request();
    r.settings.seed = 7;
    let (out, record) = run_request(&r);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(record.status, Status::Ok, "{:?}", record.reason);
    assert_eq!(record.seed, 7);
    assert_eq!(record.batch_size, 8);
    assert_eq!(record.train_samples, 32);
    assert_eq!(record.dataset, "synthetic");

    // A request that breaks a rule is refused before any work, naming the file and the rule.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.json");
    let mut bad = tiny_request();
    bad.settings.accum_steps = 3;
    bad.write(&path).unwrap();
    let out = runner().arg("--cell").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json") && err.contains("--accum-steps 3"),
        "{err}"
    );

    // --cell is the whole request: another cell flag beside it is a usage error.
    let out = runner()
        .arg("--cell")
        .arg(&path)
        .args(["--epochs", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn every_precision_trains_with_and_without_gradient_accumulation() {
    use kiln_contract::{Precision, Vocabulary};
    for &precision in Precision::ALL {
        for accum in [1, 2, 4] {
            let mut r = tiny_request();
            r.precision = precision;
            r.settings.accum_steps = accum;
            let (out, record) = run_request(&r);
            let what = format!(
                "{precision} x accum {accum}: {:?}; stderr: {}",
                record.reason,
                String::from_utf8_lossy(&out.stderr)
            );
            // Pure f16 may diverge (a result, recorded as such); nothing may fail.
            let fine = if precision == Precision::F16 {
                matches!(record.status, Status::Ok | Status::Diverged)
            } else {
                record.status == Status::Ok
            };
            assert!(fine, "{what}");
            assert_eq!(record.accum_steps, accum, "{what}");
            assert_eq!(record.micro_batch_size, 8 / accum, "{what}");
            if precision.is_amp() {
                let scaling = record
                    .loss_scaling
                    .as_ref()
                    .expect("amp records loss scaling");
                assert!(scaling.applied_steps + scaling.skipped_steps >= 4, "{what}");
            }
        }
    }
}

#[test]
fn the_users_own_idx_pair_trains_and_is_labelled_custom() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pixels: Vec<u8> = (0..48 * 784).map(|i| (i % 253) as u8).collect();
    let labels: Vec<u8> = (0..48).map(|i| (i % 10) as u8).collect();
    write(
        dir,
        "train-images-idx3-ubyte",
        &kiln_data::idx::encode(&[48, 28, 28], &pixels),
    );
    write(
        dir,
        "train-labels-idx1-ubyte",
        &kiln_data::idx::encode(&[48], &labels),
    );
    write(
        dir,
        "test-images-idx3-ubyte",
        &kiln_data::idx::encode(&[16, 28, 28], &pixels[..16 * 784]),
    );
    write(
        dir,
        "test-labels-idx1-ubyte",
        &kiln_data::idx::encode(&[16], &labels[..16]),
    );
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.dataset = Some(DatasetName::Idx);
    request.settings.data_dir = Some(dir.to_path_buf());
    request.settings.epochs = 1;
    request.batch_size = 16;
    request.calibrate = false;
    let (_, r) = run_request(&request);
    assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
    assert_eq!(r.data, DataKind::Custom);
    assert_eq!(r.dataset, "idx");
    assert_eq!((r.train_samples, r.test_samples), (48, 16));
    let said = r.reason.clone().unwrap_or_default();
    assert!(
        said.contains("custom IDX data") && said.contains("sha256"),
        "{said}"
    );
    // A malformed pair fails the cell with the file and the problem named.
    write(
        dir,
        "test-labels-idx1-ubyte",
        &kiln_data::idx::encode(&[15], &labels[..15]),
    );
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.dataset = Some(DatasetName::Idx);
    request.settings.data_dir = Some(dir.to_path_buf());
    let (_, r) = run_request(&request);
    assert_eq!(r.status, Status::Failed);
    let reason = r.reason.unwrap_or_default();
    assert!(
        reason.contains("test-labels-idx1-ubyte") && reason.contains("15 labels for 16 images"),
        "{reason}"
    );
}

/// A batch too large for the memory the process may use: the runner dies with a line xtask
/// recognises as out of memory (`cargo xtask bench-all --batch ...` records it as a result).
#[cfg(target_os = "linux")]
#[test]
fn a_batch_that_does_not_fit_dies_with_an_out_of_memory_line() {
    // 1.5 GiB of address space: the runner starts, one 8192-sample batch of activations does
    // not fit.
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    request.settings.epochs = 1;
    request.batch_size = 8192;
    request.settings.budget_seconds = None;
    request.settings.eval_limit = Some(128);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    request.write(&path).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1500000; exec {} --cell {}",
            env!("CARGO_BIN_EXE_kiln-flex"),
            path.display()
        ))
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(kiln_contract::says_out_of_memory),
        "no out-of-memory line in:\n{stderr}"
    );
}

#[test]
fn a_leak_of_every_epoch_shows_in_the_memory_per_epoch_and_is_flagged() {
    let mut r = tiny_request();
    r.settings.epochs = 5;
    let (out, steady) = run_request(&r);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(steady.epochs.len(), 5);
    assert!(steady.epochs.iter().all(|e| e.rss_bytes.is_some()));
    r.inject_leak_bytes_per_epoch = Some(64 << 20);
    let (out, leaking) = run_request(&r);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let growth = kiln_contract::memory_growth(&leaking.epochs).expect("the leak is flagged");
    assert!(
        growth.bytes_per_epoch >= (60 << 20) as f64,
        "{growth:?} from {:?}",
        leaking
            .epochs
            .iter()
            .map(|e| e.rss_bytes)
            .collect::<Vec<_>>()
    );
    let warnings = kiln_report::warnings::warnings(&leaking);
    assert!(
        warnings.iter().any(|w| w.starts_with("memory grows")),
        "{warnings:?}"
    );
    assert!(
        kiln_contract::memory_growth(&steady.epochs).is_none(),
        "{:?}",
        steady
            .epochs
            .iter()
            .map(|e| e.rss_bytes)
            .collect::<Vec<_>>()
    );
}
