//! The flex runner binary as users and xtask run it: probe, a tiny real cell, bad input.

use std::path::Path;
use std::process::Command;

use kiln_results::{DataKind, Event, Method, ProbeReport, Record, Status};

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln-flex"))
}

fn final_record(stdout: &[u8]) -> Record {
    let text = String::from_utf8_lossy(stdout);
    let events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect();
    let finals: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Final(_)))
        .collect();
    assert_eq!(finals.len(), 1, "exactly one final record");
    match finals[0] {
        Event::Final(r) => (**r).clone(),
        _ => unreachable!(),
    }
}

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
    let out = runner()
        .args([
            "--model",
            "mnist-cnn",
            "--quick",
            "--epochs",
            "2",
            "--batch",
            "64",
        ])
        .args([
            "--train-limit",
            "192",
            "--eval-limit",
            "128",
            "--budget",
            "none",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = final_record(&out.stdout);
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
fn unknown_model_and_zero_values_are_usage_errors() {
    for args in [
        vec!["--model", "lenet"],
        vec!["--model", "mnist-cnn", "--epochs", "0"],
        vec!["--model", "mnist-cnn", "--batch", "0"],
        vec!["--model", "mnist-cnn", "--budget", "soon"],
    ] {
        let out = runner().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "no record for a usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
    }
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
    let out = runner()
        .args([
            "--model",
            "mnist-cnn",
            "--dataset",
            "fashion-mnist",
            "--data-dir",
        ])
        .arg(dir)
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
    let out = runner()
        .args(["--model", "resnet18", "--dataset", "cifar-10", "--data-dir"])
        .arg(tmp.path())
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
