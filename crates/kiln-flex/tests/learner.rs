//! `--loop learner` and data-parallel cells on the flex runner: burn-train's Learner trains the
//! protocol, its clocks follow the same rules as Kiln's loop, its records say which loop and
//! which devices made them.

mod common;

use common::{events_and_record, runner};
#[cfg(feature = "learner")]
use kiln_contract::Method;
use kiln_contract::TrainingLoop;
use kiln_contract::{CellRequest, DatasetName, Event, ModelKind, Profile, Record, Status};

/// A tiny synthetic Learner cell: 64 samples, batch 8, two epochs, no calibration.
fn tiny() -> CellRequest {
    let mut r = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    r.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    r.settings.epochs = 2;
    r.batch_size = 8;
    r.settings.budget_seconds = None;
    r.dataset = Some(DatasetName::Synthetic);
    r.settings.train_limit = Some(64);
    r.settings.eval_limit = Some(24);
    r.calibrate = false;
    r.training_loop = TrainingLoop::Learner;
    r
}

fn run(r: &CellRequest) -> (std::process::Output, Vec<Event>, Record) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    r.write(&path).unwrap();
    let out = runner().arg("--cell").arg(&path).output().unwrap();
    let (events, record) = events_and_record(&out.stdout);
    (out, events, record)
}

/// A runner built without burn-train (the default build) says so and how to get it, as a
/// record that names the cause, instead of training another loop.
#[cfg(not(feature = "learner"))]
#[test]
fn a_runner_without_the_learner_says_how_to_build_it() {
    let (_, _, r) = run(&tiny());
    assert_eq!(r.status, Status::Failed, "{:?}", r.reason);
    let why = r.reason.unwrap_or_default();
    assert!(
        why.contains("built without burn-train") && why.contains("--loop learner"),
        "{why}"
    );
}

#[cfg(feature = "learner")]
#[test]
fn the_learner_trains_the_cell_and_its_record_says_so() {
    let (out, events, r) = run(&tiny());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(r.status, Status::Ok, "{:?}; {stderr}", r.reason);
    assert_eq!(r.training_loop, Some(TrainingLoop::Learner));
    assert_eq!(r.cell().training_loop, Some(TrainingLoop::Learner));
    assert!(r.data_parallel.is_none());
    assert_eq!(r.obtained.method, Method::Measured);
    // Every step of both epochs is counted: 64 samples in batches of 8.
    assert_eq!(r.epochs.len(), 2);
    for e in &r.epochs {
        assert_eq!((e.steps, e.samples), (8, 64), "{e:?}");
        assert!(e.seconds > 0.0 && e.mean_loss.is_finite(), "{e:?}");
        let a = e.test_accuracy.expect("each epoch is validated");
        assert!((0.0..=1.0).contains(&a));
    }
    assert_eq!(r.test_samples, 24);
    assert!(r.first_step_seconds.is_some_and(|s| s > 0.0));
    assert!(r.epoch_seconds.is_some() && r.images_per_second.is_some());
    // The first step is apart; the chunks hold the other steps of the timed epochs.
    let reason = r.reason.clone().unwrap_or_default();
    assert!(reason.contains("burn-train's set-up"), "{reason}");
    // Each epoch was reported as it ended, and burn-train printed nothing on stdout (every
    // line parsed as an event).
    let epochs = events
        .iter()
        .filter(|e| matches!(e, Event::Epoch(_)))
        .count();
    assert_eq!(epochs, 2);
}

#[cfg(feature = "learner")]
#[test]
fn a_budget_cuts_the_learner_and_the_cell_is_projected_and_tested() {
    let mut r = tiny();
    r.settings.epochs = 50;
    r.settings.train_limit = Some(512);
    r.settings.budget_seconds = Some(1.0);
    let (out, _, rec) = run(&r);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rec.status, Status::Ok, "{:?}; {stderr}", rec.reason);
    assert!(rec.obtained.budget_exhausted, "{:?}", rec.obtained);
    assert!(rec.epochs.len() < 50);
    let last = rec.epochs.last().expect("an epoch");
    assert!(last.partial, "{last:?}");
    // burn-train validates no cut epoch: Kiln tests the model it returned.
    assert!(last.test_accuracy.is_some(), "{last:?}");
    assert!(rec.epoch_seconds.is_some());
}

#[cfg(feature = "learner")]
#[test]
fn a_nan_loss_under_the_learner_is_a_diverged_cell() {
    let mut r = tiny();
    r.inject_nan_at_step = Some(3);
    let (_, _, rec) = run(&r);
    assert_eq!(rec.status, Status::Diverged, "{:?}", rec.reason);
    assert!(
        rec.reason
            .as_deref()
            .unwrap_or_default()
            .contains("not finite")
            || rec.reason.as_deref().unwrap_or_default().contains("NaN"),
        "{:?}",
        rec.reason
    );
}

#[cfg(feature = "learner")]
#[test]
fn two_flex_devices_train_one_cell_data_parallel() {
    let mut r = tiny();
    r.device = "cpu".into();
    r.devices = vec!["cpu".into(), "cpu".into()];
    let (out, _, rec) = run(&r);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rec.status, Status::Ok, "{:?}; {stderr}", rec.reason);
    assert_eq!(rec.device, "cpu,cpu");
    let dp = rec.data_parallel.clone().expect("a data-parallel record");
    assert_eq!(dp.devices, vec!["cpu", "cpu"]);
    assert_eq!(dp.strategy, "multi-device");
    assert_eq!(dp.global_batch_size, 16);
    // The two devices split each epoch: 64 samples in 4 steps of 2 batches of 8.
    for e in &rec.epochs {
        assert_eq!((e.steps, e.samples), (4, 64), "{e:?}");
    }
    assert!(rec.images_per_second.is_some());
}

#[test]
fn the_learner_refuses_what_it_cannot_do_before_any_work() {
    use kiln_contract::Precision;
    let tmp = tempfile::tempdir().unwrap();
    type Change = fn(&mut CellRequest);
    let cases: [(Change, &str); 4] = [
        (|r| r.precision = Precision::AmpBF16, "pure precisions"),
        (|r| r.settings.accum_steps = 2, "--accum-steps 2"),
        (
            |r| {
                r.training_loop = TrainingLoop::Kiln;
                r.devices = vec!["cpu".into(), "cpu".into()];
            },
            "needs --loop learner",
        ),
        (|r| r.devices = vec!["cpu".into()], "at least two devices"),
    ];
    for (i, (change, words)) in cases.into_iter().enumerate() {
        let mut r = tiny();
        change(&mut r);
        let path = tmp.path().join(format!("cell{i}.json"));
        r.write(&path).unwrap();
        let out = runner().arg("--cell").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{words}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(words), "{words}: {err}");
    }
}

#[test]
fn a_data_parallel_cell_whose_device_is_missing_is_skipped_as_that_cell() {
    let mut r = tiny();
    r.device = "cpu".into();
    r.devices = vec!["cpu".into(), "gpu9".into()];
    let (_, _, rec) = run(&r);
    assert_eq!(rec.status, Status::Skipped, "{:?}", rec.reason);
    // The record is the data-parallel cell's (its device list), not the one-device cell's.
    assert_eq!(rec.device, "cpu,gpu9");
    assert_eq!(rec.cell(), r.id());
    assert!(rec.reason.unwrap_or_default().contains("gpu9"));
}
