//! The run loop against fake runners: failures, kills, timeouts, fallback, resume.

use std::path::Path;
use std::time::Duration;

use super::child::run_cell;
use super::config::RunConfig;
use super::config::{RUN_FILE, RunFile};
use super::execute::*;
use super::fallback::fallback_reason;
use super::one::data_parallel_devices;
use super::progress::{Display, Position};
use super::resume::remaining_cells;
use super::*;
use crate::runners::{Built, Runner};
use crate::testing::{built, on_cpu};
use kiln_contract::{AutotuneLevel, CellRequest, DatasetName, Event, FallbackTarget, Profile};
use kiln_contract::{ProbeReport, Record, Status};

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
        replay: None,
        planned_seconds: None,
        not_planned: None,
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
        warmup_cap_seconds: None,
    }
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
        replay: None,
        planned_seconds: None,
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
            kiln_contract::DeviceKind::DiscreteGpu,
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
fn a_runner_past_a_limit_is_killed_not_steady_in_its_first_step_else_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let start = serde_json::to_string(&Event::Start(kiln_contract::Start {
        model: "mnist-cnn".into(),
        backend: "flex".into(),
        device: "cpu".into(),
        device_name: "cpu".into(),
        precision: "f32".into(),
        dataset: "synthetic".into(),
        train_samples: 8,
        test_samples: 8,
        steps_per_epoch: 1,
        epochs: 1,
        budget_seconds: None,
    }))
    .unwrap();
    // Starts training, then its first step never ends.
    let stuck = script(
        tmp.path(),
        "stuck",
        &format!("echo '{start}'\necho 'tuning a kernel' >&2\nsleep 30"),
    );
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let mut config = cfg();
    config.cell.budget_seconds = None;
    let mut display = Display::new(1);
    let position = Position {
        index: 1,
        total: 1,
        later_seconds: 0.0,
    };
    let mut limits = super::limits::Limits::all(Duration::from_secs(30));
    limits.first_step = Duration::from_millis(600);
    let run = |runner: &Runner, limits, display: &mut Display| {
        run_cell(
            runner,
            &cell("flex"),
            &config,
            &out,
            &position,
            display,
            limits,
            &super::child::CellRun::default(),
        )
        .unwrap()
        .expect("a timed-out cell is recorded")
    };
    let record = run(&stuck, limits, &mut display);
    assert_eq!(record.status, Status::NotSteady);
    assert!(record.status.is_result());
    let reason = record.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("not steady: its first step had not ended")
            && reason.contains("tuning a kernel"),
        "{reason}"
    );
    let warmup = record.warmup.expect("the step so far is its warm-up");
    assert!(!warmup.steady && warmup.steps == 0 && warmup.seconds >= 0.6);
    assert_eq!(warmup.cap_seconds, config.cell.warmup_cap_seconds);
    // The whole cell's limit, in the first step, is not the step's own: failed.
    let mut whole = limits;
    (whole.first_step, whole.whole) = (Duration::from_secs(30), Some(Duration::from_millis(600)));
    let record = run(&stuck, whole, &mut display);
    assert_eq!(record.status, Status::Failed, "{:?}", record.reason);
    // Nor is a start-up that never ends.
    let silent = script(tmp.path(), "silent", "sleep 30");
    let record = run(
        &silent,
        super::limits::Limits::all(Duration::from_millis(600)),
        &mut display,
    );
    assert_eq!(record.status, Status::Failed, "{:?}", record.reason);
    assert!(record.reason.unwrap().contains("timed out during start-up"));
}

fn common() -> CommonArgs {
    CommonArgs {
        training_loop: None,
        token: Default::default(),
        quick: Default::default(),
        out: Default::default(),
        settings: Default::default(),
        batch: Default::default(),
        synthetic: false,
        dataset: None,
        no_calibration: false,
        repeats: Default::default(),
        wait_quiet: None,
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
    other.quick.quick = true;
    other.settings.epochs = Some(5);
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
    runtime.settings.fallback = Some(FallbackTarget::Cpu);
    runtime.settings.autotune = Some(AutotuneLevel::Full);
    runtime.settings.autotune_cache = Some(false);
    let err = resume(&out, &runtime, &[], None, None, None)
        .unwrap_err()
        .to_string();
    for field in ["fallback", "autotune", "autotune_cache"] {
        assert!(err.contains(&format!("{field}: run has")), "{field}: {err}");
    }
    // A flag resume cannot apply is refused by its name, the Learner loop compared.
    let given = [
        ("all_devices".to_string(), "--all-devices".to_string()),
        ("device".to_string(), "--device".to_string()),
    ];
    let err = resume(&out, &common(), &given, None, None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--all-devices: --resume cannot apply it"),
        "{err}"
    );
    assert!(err.contains("--device: --resume cannot apply it"), "{err}");
    let mut learner = common();
    learner.training_loop = Some(vec![kiln_contract::TrainingLoop::Learner]);
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
    // Each flag's id beside its name, as xtask's command line gives them (`--loop` is
    // `training_loop`).
    let ids = |ids: &[&str]| {
        ids.iter()
            .map(|id| {
                let name = match *id {
                    "training_loop" => "--loop".to_string(),
                    other => format!("--{}", other.replace('_', "-")),
                };
                (id.to_string(), name)
            })
            .collect::<Vec<_>>()
    };
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

mod matrix;

/// A planned cell whose warm-up ran past its cap (a device slower than the plan's) is tried
/// once more under the cap it taught, and only that try's record is kept, saying what the
/// first one did; a later cell of the same backend and device starts with the raised cap.
#[test]
fn a_planned_cell_past_its_cap_is_tried_again_under_the_cap_it_taught() {
    let tmp = tempfile::tempdir().unwrap();
    let planned = |model: &str| {
        let mut c = cell("flex");
        c.id.model = model.into();
        c.warmup_cap_seconds = Some(2.0);
        c.planned_seconds = Some(10.0);
        c
    };
    let warmup = |steady: bool, seconds: f64| {
        serde_json::json!({"steady": steady, "steps": 1, "seconds": seconds,
            "process_seconds": null, "epoch": 1, "cap_seconds": 2.0, "step_seconds": [seconds]})
    };
    let write = |name: &str, status: Status, warmup: serde_json::Value| {
        let mut r =
            serde_json::to_value(Record::not_run(&planned("mnist-cnn").id, status, "")).unwrap();
        r["reason"] = serde_json::Value::Null;
        r["warmup"] = warmup;
        let record: Record = serde_json::from_value(r).unwrap();
        let event = serde_json::to_string(&Event::Final(Box::new(record))).unwrap();
        let path = tmp.path().join(name);
        std::fs::write(&path, event).unwrap();
        path
    };
    let slow = write("slow.json", Status::NotSteady, warmup(false, 3.0));
    let fine = write("fine.json", Status::Ok, warmup(true, 3.0));
    // The first call warms up past its cap; every later one settles.
    let runner = script(
        tmp.path(),
        "flex",
        &format!(
            "if [ -e {m} ]; then cat {fine}; else touch {m}; cat {slow}; fi",
            m = tmp.path().join("called").display(),
            fine = fine.display(),
            slow = slow.display()
        ),
    );
    let cells = vec![planned("mnist-cnn"), planned("mlp")];
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let mut cfg = cfg();
    cfg.time_limit_seconds = Some(600.0);
    // No GEMM calibration: the runner's first call must be the cell's.
    cfg.calibrate = false;
    write_run_file(&out, &cfg, &cells).unwrap();
    execute(cells, &[on_cpu("flex", runner)], cfg, &out).unwrap();
    let loaded = kiln_report::read::load(std::slice::from_ref(&out)).unwrap();
    assert_eq!(loaded.records.len(), 2, "one record a cell");
    let first = &loaded.records[0];
    assert_eq!(first.status, Status::Ok, "{:?}", first.reason);
    let why = first.reason.clone().unwrap_or_default();
    assert!(why.contains("a first try under the plan's 2.00 s"), "{why}");
    assert!(why.contains("warm-up cap raised"), "{why}");
    let later = loaded.records[1].reason.clone().unwrap_or_default();
    assert!(later.contains("warm-up cap raised"), "{later}");
}

/// One --burn is a run against that Burn, not a pair that can never be decided: `auto` with
/// it is refused before anything is built, and the usual repeats stand.
#[test]
fn repeats_auto_needs_two_burns() {
    let mut auto = common();
    auto.repeats.repeats = Some(crate::options::Repeats::Auto);
    let one = [crate::burns::BurnSpec::Version("0.22.1".into())];
    let err = super::ab::bench_ab(&auto, &one, None, None, None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("--burn twice"), "{err}");
}

/// A cell the plan could not fit (the GPU kit's window) is a record, "not planned" with why,
/// status not reached, beside the cells that ran; it needs no runner and starts none.
#[test]
fn a_cell_the_plan_could_not_fit_is_recorded_not_planned_and_never_run() {
    let tmp = tempfile::tempdir().unwrap();
    let fine = fine_runner(tmp.path(), "flex");
    let out = tmp.path().join("run");
    prepare_out(Some(&out)).unwrap();
    let dropped = PlannedCell {
        not_planned: Some("needs 120 s and 30 s of the matrix's 400 s are left".into()),
        ..cell("cuda")
    };
    execute(
        vec![cell("flex"), dropped],
        &[on_cpu("flex", fine)],
        cfg(),
        &out,
    )
    .unwrap();
    let loaded = kiln_report::read::load(std::slice::from_ref(&out)).unwrap();
    let statuses: Vec<Status> = loaded.records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Status::Ok, Status::NotReached]);
    let why = loaded.records[1].reason.as_deref().unwrap_or_default();
    assert_eq!(
        why,
        "not planned: needs 120 s and 30 s of the matrix's 400 s are left"
    );
}
