//! The run loop against fake runners: failures, kills, timeouts, fallback, resume.

use std::path::Path;
use std::time::Duration;

use super::config::{RUN_FILE, RunFile};
use super::one::data_parallel_devices;
use super::resume::remaining_cells;
use super::*;
use kiln_results::{AutotuneLevel, CellRequest, DatasetName, Event, FallbackTarget, Profile};

#[test]
fn out_dir_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let fresh = tmp.path().join("new");
    assert!(prepare_out(Some(&fresh)).is_ok());
    // Now it holds logs/: not empty and not a run.
    let err = prepare_out(Some(&fresh)).unwrap_err().to_string();
    assert!(err.contains("not a Kiln run"), "{err}");
    std::fs::write(fresh.join(RUN_FILE), "{}").unwrap();
    let err = prepare_out(Some(&fresh)).unwrap_err().to_string();
    assert!(err.contains("already holds a Kiln run"), "{err}");
    let file = tmp.path().join("f");
    std::fs::write(&file, "x").unwrap();
    assert!(prepare_out(Some(&file)).is_err());
}

fn cfg() -> RunConfig {
    let mut cfg = RunConfig::new(Profile::Quick);
    cfg.cell.epochs = 1;
    cfg.cell.seed = 1;
    cfg.cell.budget_seconds = Some(5.0);
    cfg.batch_sizes = vec![8];
    cfg
}

fn cell(backend: &str) -> PlannedCell {
    PlannedCell {
        id: CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 8,
        },
        dataset: DatasetName::Synthetic,
        dataset_note: None,
        budget_seconds: None,
        autotune: None,
    }
}

/// A built backend whose probe lists one available default device of `kind`.
fn built(name: &str, runner: Runner, spec: &str, kind: kiln_results::DeviceKind) -> Built {
    let report = ProbeReport {
        backend: name.into(),
        backend_version: "0".into(),
        devices: vec![kiln_results::DeviceReport {
            spec: spec.into(),
            name: spec.into(),
            kind,
            available: true,
            reason: None,
            precisions: vec!["f32".into()],
            default: true,
            memory_bytes: None,
            runtime: None,
        }],
    };
    (backends::find(name).unwrap(), runner, report)
}

/// A built backend whose probe lists one available default CPU device.
pub(crate) fn on_cpu(name: &str, runner: Runner) -> Built {
    built(name, runner, "cpu", kiln_results::DeviceKind::Cpu)
}

fn script(dir: &Path, name: &str, body: &str) -> Runner {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    Runner {
        program: path,
        args: Vec::new(),
        env: Vec::new(),
        needs_data_file: false,
    }
}

/// A fake runner that prints a final record of `status` for `backend`'s cell.
fn runner_with(dir: &Path, backend: &str, status: Status, reason: &str) -> Runner {
    let record = Record::not_run(&cell(backend).id, status, reason);
    let event = serde_json::to_string(&Event::Final(Box::new(record))).unwrap();
    let file = dir.join(format!("final-{backend}-{}.json", status.as_str()));
    std::fs::write(&file, event).unwrap();
    script(
        dir,
        &format!("{}-{backend}", status.as_str()),
        &format!("cat {}", file.display()),
    )
}

#[test]
fn an_unavailable_device_falls_back_to_a_cpu_record_labelled_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let gpu_cell = PlannedCell {
        id: CellId {
            device: "vulkan:discrete:0".into(),
            ..cell("wgpu").id
        },
        ..cell("wgpu")
    };
    let unavailable = runner_with(
        tmp.path(),
        "wgpu",
        Status::Skipped,
        "device vulkan:discrete:0 unavailable: no adapter",
    );
    let runners = vec![
        built(
            "wgpu",
            unavailable,
            "vulkan:discrete:0",
            kiln_results::DeviceKind::DiscreteGpu,
        ),
        on_cpu("flex", fine_runner(tmp.path(), "flex")),
    ];
    for fallback in [None, Some(FallbackTarget::Cpu)] {
        let out = tmp.path().join(format!("run-{}", fallback.is_some()));
        prepare_out(Some(&out)).unwrap();
        let mut config = cfg();
        config.cell.fallback = fallback;
        execute(vec![gpu_cell.clone()], &runners, config, &out).unwrap();
        let records = kiln_report::read::load(std::slice::from_ref(&out))
            .unwrap()
            .records;
        // The unavailable cell is always recorded with its reason.
        assert_eq!(records[0].status, Status::Skipped);
        assert_eq!(records[0].backend, "wgpu");
        if fallback.is_none() {
            assert_eq!(records.len(), 1, "no fallback without the flag");
            continue;
        }
        assert_eq!(records.len(), 2);
        let fb = &records[1];
        assert_eq!((fb.backend.as_str(), fb.status), ("flex", Status::Ok));
        let from = fb.fallback_from.as_deref().unwrap();
        assert!(
            from.starts_with("wgpu vulkan:discrete:0: ") && from.contains("no adapter"),
            "{from}"
        );
        assert!(
            fb.reason
                .as_deref()
                .unwrap()
                .starts_with("fell back from wgpu")
        );
    }
    // A divergence or crash is a result, not a reason to fall back.
    let diverged = Record::not_run(&gpu_cell.id, Status::Diverged, "loss NaN");
    assert!(fallback_reason(&diverged).is_none());
    let crashed = Record::not_run(&gpu_cell.id, Status::Failed, "signal: 9");
    assert!(fallback_reason(&crashed).is_none());
    let op = Record::not_run(&gpu_cell.id, Status::Failed, "UnsupportedDType(BF16)");
    assert!(fallback_reason(&op).is_some());
}

/// A fake runner that prints an ok final record for `backend`'s cell.
fn fine_runner(dir: &Path, backend: &str) -> Runner {
    let good = Record::not_run(&cell(backend).id, Status::Ok, "");
    let event = serde_json::to_string(&Event::Final(Box::new(good))).unwrap();
    let file = dir.join(format!("final-{backend}.json"));
    std::fs::write(&file, event).unwrap();
    script(
        dir,
        &format!("fine-{backend}"),
        &format!("cat {}", file.display()),
    )
}

#[test]
fn a_failing_runner_becomes_a_failed_record_and_the_matrix_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let crash = script(
        tmp.path(),
        "crash",
        "echo 'not json'\necho 'boom: out of cheese' >&2\nexit 3",
    );
    let fine = fine_runner(tmp.path(), "ndarray");
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    write_run_file(&out, &cfg(), &[cell("flex"), cell("ndarray")]).unwrap();
    let runners = vec![on_cpu("flex", crash), on_cpu("ndarray", fine)];
    let all_ok = execute(vec![cell("flex"), cell("ndarray")], &runners, cfg(), &out).unwrap();
    assert!(!all_ok);
    let loaded = kiln_report::read::load(std::slice::from_ref(&out)).unwrap();
    assert_eq!(loaded.records.len(), 2);
    let failed = &loaded.records[0];
    assert_eq!(failed.status, Status::Failed);
    let reason = failed.reason.clone().unwrap();
    assert!(
        reason.contains("without a final record") && reason.contains("out of cheese"),
        "{reason}"
    );
    assert!(reason.contains("unparsable output: not json"), "{reason}");
    assert_eq!(loaded.records[1].status, Status::Ok);
    assert!(out.join("report.md").is_file() && out.join(RUN_FILE).is_file());
}

#[test]
fn a_runner_killed_mid_cell_leaves_earlier_cells_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let fine = fine_runner(tmp.path(), "flex");
    // Starts its cell, prints a progress line, then dies by SIGKILL mid-cell.
    let killed = script(
        tmp.path(),
        "killed",
        "echo '{\"event\":\"progress\",\"epoch\":1,\"step\":1,\"steps_per_epoch\":9,\"elapsed_seconds\":0.1,\"eta_seconds\":null}'\nkill -9 $$",
    );
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let runners = vec![on_cpu("flex", fine), on_cpu("ndarray", killed)];
    execute(vec![cell("flex"), cell("ndarray")], &runners, cfg(), &out).unwrap();
    let text = std::fs::read_to_string(out.join(RESULTS_FILE)).unwrap();
    assert!(text.ends_with('\n'), "every record is a whole line");
    let loaded = kiln_report::read::load(std::slice::from_ref(&out)).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.records[0].status, Status::Ok);
    let killed = &loaded.records[1];
    assert_eq!(killed.status, Status::Failed);
    // The record names the machine it failed on.
    assert!(killed.fingerprint.logical_cores > 0);
    assert!(!killed.fingerprint.cpu_model.is_empty());
    assert!(
        killed.reason.as_deref().unwrap_or("").contains("signal: 9"),
        "{:?}",
        killed.reason
    );
}

#[test]
fn a_runner_past_its_wall_clock_limit_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let hang = script(tmp.path(), "hang", "sleep 30");
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let mut config = cfg();
    config.cell.budget_seconds = None;
    // Exercise the limit directly with a tiny one.
    let mut display = Display::new(1);
    let position = Position {
        index: 1,
        total: 1,
        later_seconds: 0.0,
    };
    let record = run_cell(
        &hang,
        &cell("flex"),
        &config,
        &out,
        &position,
        &mut display,
        super::limits::Limits::all(Duration::from_millis(300)),
        &super::child::CellRun::default(),
    )
    .unwrap()
    .expect("a timed-out cell is recorded");
    assert_eq!(record.status, Status::Failed);
    assert!(record.reason.unwrap().contains("timed out"));
}

fn common() -> CommonArgs {
    CommonArgs {
        training_loop: None,
        token: None,
        quick: false,
        out: None,
        epochs: None,
        batch: None,
        budget: None,
        seed: None,
        data_dir: None,
        synthetic: false,
        dataset: None,
        eval_limit: None,
        train_limit: None,
        accum_steps: None,
        learning_rate: None,
        fallback: None,
        autotune: None,
        no_autotune_cache: false,
        repeats: None,
        wait_quiet: None,
        target_accuracy: None,
    }
}

#[test]
fn resume_runs_only_cells_without_a_final_record_and_refuses_other_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let mut stored = cfg();
    stored.cell.epochs = 3;
    write_run_file(&out, &stored, &[cell("flex"), cell("ndarray")]).unwrap();
    append_record(
        &out.join(RESULTS_FILE),
        &Record::not_run(&cell("flex").id, Status::Ok, ""),
    )
    .unwrap();
    let run: RunFile =
        serde_json::from_str(&std::fs::read_to_string(out.join(RUN_FILE)).unwrap()).unwrap();
    let left = remaining_cells(&run, &out).unwrap();
    assert_eq!(left, vec![cell("ndarray")]);

    let mut other = common();
    other.quick = true;
    other.epochs = Some(5);
    let err = resume(&out, &other, &[], None, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("epochs: run has 3, flags give 5"), "{err}");
    let err = resume(&out, &common(), &[], Some(vec!["flex".into()]), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--backends: run has flex,ndarray, flags give flex"),
        "{err}"
    );
    // Every flag that shapes a cell is compared, the runtime ones included.
    let mut runtime = common();
    runtime.fallback = Some(FallbackTarget::Cpu);
    runtime.autotune = Some(AutotuneLevel::Full);
    runtime.no_autotune_cache = true;
    let err = resume(&out, &runtime, &[], None, None, None)
        .unwrap_err()
        .to_string();
    for field in ["fallback", "autotune", "autotune_cache"] {
        assert!(err.contains(&format!("{field}: run has")), "{field}: {err}");
    }
    // A flag resume cannot apply is refused by its name, the Learner loop compared.
    let given = ["all_devices".to_string(), "remote".to_string()];
    let err = resume(&out, &common(), &given, None, None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--all-devices: --resume cannot apply it"),
        "{err}"
    );
    assert!(err.contains("--device: --resume cannot apply it"), "{err}");
    let mut learner = common();
    learner.training_loop = Some(vec![kiln_results::TrainingLoop::Learner]);
    let err = resume(&out, &learner, &[], None, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("loops: run has"), "{err}");
    let err = resume(&tmp.path().join("nope"), &common(), &[], None, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a Kiln run directory"), "{err}");
}

#[test]
fn records_are_appended_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(RESULTS_FILE);
    let id = CellId {
        training_loop: None,
        model: "mnist-cnn".into(),
        backend: "flex".into(),
        device: "cpu".into(),
        precision: "f32".into(),
        batch_size: 128,
    };
    for _ in 0..3 {
        append_record(&path, &Record::not_run(&id, Status::Skipped, "x")).unwrap();
    }
    let loaded = kiln_report::read::load(&[tmp.path().to_path_buf()]).unwrap();
    assert_eq!(loaded.records.len(), 3);
    assert!(loaded.warnings.is_empty());
}

#[test]
fn a_request_bench_cannot_carry_whole_is_refused_before_any_build() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    let mut r = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    r.dataset = Some(DatasetName::Synthetic);
    r.recalibrate = false;
    r.write(&path).unwrap();
    let err = bench_request(&path, Some(&tmp.path().join("run")))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("recalibrate = false") && err.contains("cell.json"),
        "{err}"
    );
    assert!(!tmp.path().join("run").exists(), "nothing was created");

    // Beside --cell, a cell-shaping flag is refused by name; --out alone is fine.
    let ids = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let err = cell_only(&ids(&["cell", "epochs", "fallback", "training_loop"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--epochs, --fallback, --loop"), "{err}");
    assert!(cell_only(&ids(&["cell", "out", "token"])).is_ok());
}

#[test]
fn repeats_run_round_robin_and_a_resume_runs_only_the_missing_ones() {
    let cells = vec![cell("flex"), cell("ndarray")];
    assert_eq!(
        schedule(&cells, 2, &[]),
        vec![(0, 1), (1, 1), (0, 2), (1, 2)],
        "A B A B, not A A B B"
    );
    let done = vec![
        (cells[0].id.clone(), 1),
        (cells[1].id.clone(), 1),
        (cells[0].id.clone(), 2),
    ];
    assert_eq!(schedule(&cells, 2, &done), vec![(1, 2)]);

    let tmp = tempfile::tempdir().unwrap();
    let runners = vec![
        on_cpu("flex", fine_runner(tmp.path(), "flex")),
        on_cpu("ndarray", fine_runner(tmp.path(), "ndarray")),
    ];
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let config = RunConfig {
        repeats: 2,
        ..cfg()
    };
    assert!(execute(cells, &runners, config, &out).unwrap());
    let records = kiln_report::read::load(std::slice::from_ref(&out))
        .unwrap()
        .records;
    let order: Vec<(String, usize)> = records
        .iter()
        .map(|r| (r.backend.clone(), r.repeat.as_ref().unwrap().index))
        .collect();
    assert_eq!(
        order,
        vec![
            ("flex".into(), 1),
            ("ndarray".into(), 1),
            ("flex".into(), 2),
            ("ndarray".into(), 2)
        ]
    );
    assert!(
        records
            .iter()
            .all(|r| r.repeat.as_ref().unwrap().run == "run")
    );
    // Each run keeps its own log; every record says how busy the machine was.
    assert!(
        out.join("logs/mnist-cnn-flex-cpu-f32-b8-r2.stderr")
            .is_file()
    );
    assert!(records.iter().all(|r| r.noise.is_some()));
}

/// A fake runner whose every record (calibration or cell) reports a GEMM peak of `gflops` on
/// the CPU.
fn calibrated_runner(dir: &Path, backend: &str, gflops: f64) -> Runner {
    let mut r = Record::not_run(&cell(backend).id, Status::Ok, "");
    r.device_kind = Some(kiln_results::DeviceKind::Cpu);
    r.peak = Some(kiln_results::Calibration {
        gflops,
        matrix: 1024,
        reps: 5,
        cached: false,
    });
    let event = serde_json::to_string(&Event::Final(Box::new(r))).unwrap();
    let file = dir.join(format!("peak-{backend}.json"));
    std::fs::write(&file, event).unwrap();
    script(
        dir,
        &format!("peak-{backend}"),
        &format!("cat {}", file.display()),
    )
}

#[test]
fn every_backend_on_a_device_is_divided_by_the_best_peak_measured_at_the_runs_start() {
    let tmp = tempfile::tempdir().unwrap();
    let runners = vec![
        on_cpu("flex", calibrated_runner(tmp.path(), "flex", 100.0)),
        on_cpu("ndarray", calibrated_runner(tmp.path(), "ndarray", 50.0)),
    ];
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    execute(vec![cell("flex"), cell("ndarray")], &runners, cfg(), &out).unwrap();
    let records = kiln_report::read::load(std::slice::from_ref(&out))
        .unwrap()
        .records;
    for r in &records {
        let shared = r.device_peak.as_ref().expect("a shared device peak");
        assert_eq!((shared.gflops, shared.backend.as_str()), (100.0, "flex"));
    }
    // Each backend's own peak reaches its cells in their requests, measured once per run.
    let request = CellRequest::read(&out.join("cells/mnist-cnn-ndarray-cpu-f32-b8.json")).unwrap();
    assert_eq!(request.given_peak.map(|p| p.gflops), Some(50.0));
    let calibration =
        CellRequest::read(&out.join("cells/mnist-cnn-ndarray-cpu-f32-b8-gemm.json")).unwrap();
    assert!(calibration.calibrate_only && calibration.recalibrate);
}

#[test]
fn data_parallel_takes_the_first_n_available_devices_or_says_how_many_there_are() {
    let device = |spec: &str, available: bool| kiln_results::DeviceReport {
        spec: spec.into(),
        name: spec.into(),
        kind: kiln_results::DeviceKind::DiscreteGpu,
        available,
        reason: None,
        precisions: vec!["f32".into()],
        default: spec == "cuda:0",
        memory_bytes: None,
        runtime: None,
    };
    let report = ProbeReport {
        backend: "cuda".into(),
        backend_version: "0".into(),
        devices: vec![
            device("cuda:0", true),
            device("cuda:1", false),
            device("cuda:2", true),
        ],
    };
    let got = data_parallel_devices("cuda", None, Some(2), Some(&report)).unwrap();
    assert_eq!(got, Some(vec!["cuda:0".to_string(), "cuda:2".to_string()]));
    let err = data_parallel_devices("cuda", None, Some(3), Some(&report))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("2 available device(s)") && err.contains("--devices"),
        "{err}"
    );
    let err = data_parallel_devices("cuda", None, Some(1), Some(&report))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 2"), "{err}");
    // --devices as given.
    let given = Some(vec!["cpu".to_string(), "cpu".to_string()]);
    assert_eq!(
        data_parallel_devices("flex", given.clone(), None, None).unwrap(),
        given
    );
}

#[test]
fn a_remote_device_implies_the_remote_backend_and_no_other() {
    let spec = Some("remote:ws://gpu:3000#1");
    assert_eq!(one_backend(None, spec).unwrap(), "remote");
    assert_eq!(one_backend(Some("remote".into()), spec).unwrap(), "remote");
    let err = one_backend(Some("flex".into()), spec)
        .unwrap_err()
        .to_string();
    assert!(err.contains("drop --backend"), "{err}");
    assert_eq!(
        one_backend(Some("flex".into()), Some("cpu")).unwrap(),
        "flex"
    );
    assert!(one_backend(None, Some("cpu")).is_err());
    // A remote spec names its cell's files without `:`, `/` or `#`.
    let id = CellId::new(
        ModelKind::MnistCnn,
        "remote",
        "remote:ws://gpu:3000#1",
        Precision::F32,
        128,
    );
    assert_eq!(
        cell_stem(&id),
        "mnist-cnn-remote-remote_ws___gpu_3000_1-f32-b128"
    );
}

#[test]
fn a_token_never_reaches_run_json() {
    let args = [
        "xtask",
        "bench-all",
        "--token",
        "s3",
        "--quick",
        "--token=s4",
    ];
    assert_eq!(
        rundir::redacted(args.iter().map(|a| a.to_string())),
        [
            "xtask",
            "bench-all",
            "--token",
            "<redacted>",
            "--quick",
            "--token=<redacted>"
        ]
    );
}

#[test]
fn the_learning_rate_goes_from_the_flag_to_every_request_and_a_bad_one_is_refused() {
    let mut flags = common();
    flags.quick = true;
    let (_, default) = config::config(&flags, false).unwrap();
    assert_eq!(default.cell.learning_rate, kiln_results::LEARNING_RATE);
    flags.learning_rate = Some(0.01);
    let (_, cfg) = config::config(&flags, false).unwrap();
    let request = cell("flex").request(&cfg).unwrap();
    assert_eq!(request.settings.learning_rate, 0.01);
    assert!(request.validate().is_ok());
    let observed: kiln_results::Record =
        kiln_results::Record::not_run(&request.id(), Status::Skipped, "not run");
    assert_eq!(observed.learning_rate, kiln_results::LEARNING_RATE);
    for bad in [0.0, -1.0, f64::NAN] {
        let mut r = request.clone();
        r.settings.learning_rate = bad;
        let why = r.validate().unwrap_err();
        assert!(why.contains("--lr"), "{why}");
    }
}

/// Every setting of a cell has a flag, mapped in one place (`RunConfig::apply`, which
/// bench-all, bench and `--resume` share): a setting added to `CellSettings` without a flag
/// that sets it fails here.
#[test]
fn every_cell_setting_is_set_by_a_flag_in_one_mapping() {
    let data = tempfile::tempdir().unwrap();
    let mut flags = common();
    flags.quick = true;
    flags.epochs = Some(7);
    flags.budget = Some(crate::time::Budget(Some(std::time::Duration::from_secs(
        90,
    ))));
    flags.seed = Some(7);
    flags.data_dir = Some(data.path().to_path_buf());
    flags.eval_limit = Some(7);
    flags.train_limit = Some(7);
    flags.accum_steps = Some(2);
    flags.learning_rate = Some(0.007);
    flags.fallback = Some(FallbackTarget::Cpu);
    flags.autotune = Some(AutotuneLevel::Full);
    flags.no_autotune_cache = true;
    flags.target_accuracy = Some(crate::flags::TargetAccuracy::Share(0.7));
    let defaults = serde_json::to_value(RunConfig::new(Profile::Full).cell).unwrap();
    let (_, set) = config::config(&flags, true).unwrap();
    let set = serde_json::to_value(&set.cell).unwrap();
    let keys = defaults.as_object().unwrap();
    assert!(keys.len() >= 14, "{keys:?}");
    for (key, default) in keys {
        assert_ne!(&set[key], default, "{key}: no flag sets it");
    }
    // And a resumed run applies the same mapping: each of those flags is compared.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    write_run_file(&out, &RunConfig::new(Profile::Full), &[cell("flex")]).unwrap();
    let err = resume(&out, &flags, &[], None, None, None)
        .unwrap_err()
        .to_string();
    for key in keys.keys().filter(|k| *k != "bare") {
        assert!(err.contains(&format!("{key}: run has")), "{key}: {err}");
    }
}

/// A run with repeats measures the GEMM peak again at its end; the change is the floor of its
/// intervals, kept in drift.json and attached to every record read from the run.
#[test]
fn a_run_with_repeats_measures_its_drift_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let first = calibrated_runner(tmp.path(), "flex", 100.0);
    std::fs::create_dir_all(tmp.path().join("later")).unwrap();
    let later = calibrated_runner(&tmp.path().join("later"), "flex", 96.0);
    let calls = tmp.path().join("calls");
    // The first call (the run's start calibration) reports 100 GFLOP/s, every later one 96.
    let runner = script(
        tmp.path(),
        "drifting",
        &format!(
            "if [ -e {calls} ]; then exec {later}; else touch {calls}; exec {first}; fi",
            calls = calls.display(),
            later = later.program.display(),
            first = first.program.display()
        ),
    );
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let mut config = cfg();
    config.repeats = 2;
    execute(vec![cell("flex")], &[on_cpu("flex", runner)], config, &out).unwrap();
    let drift: kiln_results::drift::RunDrift = serde_json::from_str(
        &std::fs::read_to_string(out.join(kiln_results::drift::DRIFT_FILE)).unwrap(),
    )
    .unwrap();
    assert!((drift.share - 0.04).abs() < 1e-9, "{drift:?}");
    assert!(
        out.join("logs/mnist-cnn-flex-cpu-f32-b8-gemm-end.stderr")
            .is_file()
    );
    let records = kiln_report::read::load(std::slice::from_ref(&out))
        .unwrap()
        .records;
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.run_drift == Some(drift.share)));
    // A run without repeats does not calibrate twice.
    let single = tmp.path().join("single");
    prepare_out(Some(&single)).unwrap();
    let runner = calibrated_runner(tmp.path(), "flex", 100.0);
    execute(
        vec![cell("flex")],
        &[on_cpu("flex", runner)],
        cfg(),
        &single,
    )
    .unwrap();
    assert!(!single.join(kiln_results::drift::DRIFT_FILE).exists());
}

/// A fake runner of `side` that notes each call in `order` and reports an epoch of `epoch` s.
fn side_runner(dir: &Path, side: &str, epoch: f64, order: &Path) -> Runner {
    let mut r = Record::not_run(&cell("flex").id, Status::Ok, "");
    r.reason = None;
    r.epoch_seconds = kiln_results::Stats::from_samples(&[epoch]);
    r.test_accuracy = Some(0.8);
    let event = serde_json::to_string(&Event::Final(Box::new(r))).unwrap();
    let file = dir.join(format!("side-{side}.json"));
    std::fs::write(&file, event).unwrap();
    script(
        dir,
        &format!("side-{side}"),
        &format!("echo {side} >> {}; cat {}", order.display(), file.display()),
    )
}

/// An A/B run alternates the Burns pass by pass (A B A B), each into its own directory with
/// its Burn in every record, and ab.md gives the verdict.
#[test]
fn an_ab_run_alternates_its_burns_and_compares_them() {
    let tmp = tempfile::tempdir().unwrap();
    let order = tmp.path().join("order");
    let a_built = [on_cpu("flex", side_runner(tmp.path(), "A", 100.0, &order))];
    let b_built = [on_cpu("flex", side_runner(tmp.path(), "B", 120.0, &order))];
    let out = tmp.path().join("ab");
    let mut dirs = Vec::new();
    let mut cfgs = Vec::new();
    for (letter, spec) in [("a", "0.22.1"), ("b", "path:/src/burn")] {
        let dir = prepare_out(Some(&out.join(letter))).unwrap();
        let mut c = cfg();
        c.repeats = 2;
        c.burn = Some(kiln_results::BurnBuild {
            spec: spec.into(),
            version: "0.22.1".into(),
            path: spec.strip_prefix("path:").map(str::to_string),
            revision: None,
            dirty: None,
        });
        dirs.push(dir);
        cfgs.push(c);
    }
    let sides: Vec<(&[Built], &Path, &RunConfig)> = vec![
        (&a_built[..], dirs[0].as_path(), &cfgs[0]),
        (&b_built[..], dirs[1].as_path(), &cfgs[1]),
    ];
    assert!(ab::run_passes(&[cell("flex")], &sides, 2).unwrap());
    // Each pass: the side's calibration, then its cell.
    let calls = std::fs::read_to_string(&order).unwrap().replace('\n', "");
    assert_eq!(calls, "AABBAABB");
    let b = kiln_report::read::load(std::slice::from_ref(&dirs[1]))
        .unwrap()
        .records;
    assert_eq!(b.len(), 2);
    assert!(
        b.iter()
            .all(|r| r.burn.as_ref().is_some_and(|x| x.spec == "path:/src/burn"))
    );
    let text = ab::write_ab(&out, &dirs).unwrap();
    assert!(
        text.contains("A = 0.22.1, B = path:/src/burn (0.22.1, not a git checkout)"),
        "{text}"
    );
    assert!(
        text.contains("| epoch time |") && text.contains("| B slower |"),
        "{text}"
    );
    assert!(out.join(ab::AB_FILE).is_file());
    // A run left with one Burn (the other could not be built) says there is nothing to compare.
    let alone = ab::write_ab(&out, &dirs[..1]).unwrap();
    assert!(
        alone.contains("Only Burn 0.22.1 could be built: nothing to compare"),
        "{alone}"
    );
}

#[test]
fn a_burn_that_is_no_version_or_checkout_is_refused_by_its_flag() {
    use clap::Parser;
    let Err(err) = crate::flags::Cli::try_parse_from(["xtask", "bench-all", "--burn", "latest"])
    else {
        panic!("--burn latest was taken");
    };
    let err = err.to_string();
    assert!(
        err.contains("--burn") && err.contains("path:../burn"),
        "{err}"
    );
}
