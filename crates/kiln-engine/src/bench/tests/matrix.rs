//! The matrix's settings against fake runners: calibration, data-parallel and remote devices,
//! the flags' one mapping, drift and A/B runs.

use super::*;

/// A fake runner whose every record (calibration or cell) reports a GEMM peak of `gflops` on
/// the CPU.
fn calibrated_runner(dir: &Path, backend: &str, gflops: f64) -> Runner {
    let mut r = Record::not_run(&cell(backend).id, Status::Ok, "");
    r.device_kind = Some(kiln_contract::DeviceKind::Cpu);
    r.peak = Some(kiln_contract::Calibration {
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
    let device = |spec: &str, available: bool| kiln_contract::DeviceReport {
        spec: spec.into(),
        name: spec.into(),
        kind: kiln_contract::DeviceKind::DiscreteGpu,
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
        id.stem(),
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
    flags.quick.quick = true;
    let (_, default) = config::config(&flags, false).unwrap();
    assert_eq!(default.cell.learning_rate, kiln_contract::LEARNING_RATE);
    flags.settings.learning_rate = Some(0.01);
    let (_, cfg) = config::config(&flags, false).unwrap();
    let request = cell("flex").request(&cfg).unwrap();
    assert_eq!(request.settings.learning_rate, 0.01);
    assert!(request.validate().is_ok());
    let observed: kiln_contract::Record =
        kiln_contract::Record::not_run(&request.id(), Status::Skipped, "not run");
    assert_eq!(observed.learning_rate, kiln_contract::LEARNING_RATE);
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
    flags.quick.quick = true;
    let s = &mut flags.settings;
    s.epochs = Some(7);
    s.budget_seconds = Some(crate::time::Budget(Some(std::time::Duration::from_secs(
        90,
    ))));
    s.data.seed = Some(7);
    s.data.data_dir = Some(data.path().to_path_buf());
    s.eval_limit = Some(7);
    s.train_limit = Some(7);
    s.accum_steps = Some(2);
    s.learning_rate = Some(0.007);
    s.fallback = Some(FallbackTarget::Cpu);
    s.autotune = Some(AutotuneLevel::Full);
    s.autotune_cache = Some(false);
    s.warmup.cold_caches = true;
    s.warmup.warmup_cap_seconds = Some(77.0);
    s.loss_scaling = Some(kiln_contract::LossScalingMode::Dynamic);
    s.target_accuracy = Some(crate::options::TargetAccuracy::Share(0.7));
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

/// `--resume` applies every run option it does not refuse (its list is read from
/// `CommonArgs`): each such flag, given alone, changes the run's configuration through
/// `RunConfig::apply`, so a new flag that the mapping leaves out fails here, by its name.
#[test]
fn every_run_option_resume_applies_changes_the_configuration() {
    use clap::{Args, FromArgMatches};
    let data = tempfile::tempdir().unwrap();
    let data = data.path().display().to_string();
    // A value each flag takes that is not its default; a flag without a value is a switch.
    let samples: &[(&str, &str)] = &[
        ("epochs", "7"),
        ("batch", "64"),
        ("budget_seconds", "90s"),
        ("seed", "7"),
        ("data_dir", &data),
        ("eval_limit", "7"),
        ("accum_steps", "2"),
        ("learning_rate", "0.5"),
        ("train_limit", "7"),
        ("fallback", "cpu"),
        ("autotune", "full"),
        ("warmup_cap_seconds", "7s"),
        ("loss_scaling", "none"),
        ("repeats", "7"),
        ("wait_quiet", "7s"),
        ("target_accuracy", "0.5"),
        ("training_loop", "learner"),
    ];
    let command = CommonArgs::augment_args(clap::Command::new("bench-all"));
    let applied = resume::applied_on_resume();
    let base = RunConfig::new(Profile::Full);
    let mut checked = 0;
    // The token is a secret the run never records: applied, and changing nothing.
    for arg in command.get_arguments().filter(|a| {
        let id = a.get_id().as_str();
        applied.iter().any(|x| x == id) && id != "token"
    }) {
        let id = arg.get_id().as_str();
        let long = format!("--{}", arg.get_long().unwrap());
        let mut line = vec!["bench-all".to_string()];
        let switch = arg.get_num_args().is_some_and(|n| n.max_values() == 0);
        if arg.get_action().takes_values() && !switch {
            let value = samples.iter().find(|(k, _)| *k == id).map(|(_, v)| *v);
            let value = value.unwrap_or_else(|| panic!("{long}: give it a sample value here"));
            line.push(format!("{long}={value}"));
        } else {
            line.push(long.clone());
        }
        let matches = command.clone().try_get_matches_from(&line).unwrap();
        let flags = CommonArgs::from_arg_matches(&matches).unwrap();
        let mut config = base.clone();
        config.apply(&flags).unwrap();
        assert_ne!(config, base, "{long}: RunConfig::apply does not apply it");
        checked += 1;
    }
    assert!(checked >= 18, "{checked} flags");
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
    let drift: kiln_contract::drift::RunDrift = serde_json::from_str(
        &std::fs::read_to_string(out.join(kiln_contract::drift::DRIFT_FILE)).unwrap(),
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
    assert!(!single.join(kiln_contract::drift::DRIFT_FILE).exists());
}

/// A fake runner of `side` that notes each call in `order` and reports an epoch of `epoch` s.
fn side_runner(dir: &Path, side: &str, epoch: f64, order: &Path) -> Runner {
    let mut r = Record::not_run(&cell("flex").id, Status::Ok, "");
    r.reason = None;
    r.epoch_seconds = kiln_contract::Stats::from_samples(&[epoch]);
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

/// An A/B run alternates the Burns pass by pass in a balanced order (A B, then B A: a test
/// that fails if A goes back to running first in every pass), each into its own directory with
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
        c.burn = Some(kiln_contract::BurnBuild {
            spec: spec.into(),
            version: "0.22.1".into(),
            path: spec.strip_prefix("path:").map(str::to_string),
            revision: None,
            dirty: None,
            without: Vec::new(),
        });
        dirs.push(dir);
        cfgs.push(c);
    }
    let sides: Vec<(&[Built], &Path, &RunConfig)> = vec![
        (&a_built[..], dirs[0].as_path(), &cfgs[0]),
        (&b_built[..], dirs[1].as_path(), &cfgs[1]),
    ];
    assert!(ab::run_passes(&[cell("flex")], &sides, 2, None).unwrap());
    // The first pass: the side's calibration, then its cell; later passes only the cell, B
    // first in the second.
    let calls = std::fs::read_to_string(&order).unwrap().replace('\n', "");
    assert_eq!(calls, "AABBBA");
    let b = kiln_report::read::load(std::slice::from_ref(&dirs[1]))
        .unwrap()
        .records;
    assert_eq!(b.len(), 2);
    assert!(
        b.iter()
            .all(|r| r.burn.as_ref().is_some_and(|x| x.spec == "path:/src/burn"))
    );
    let text = ab::write_ab(&out, &dirs, None).unwrap();
    assert!(
        text.contains("A = 0.22.1, B = path:/src/burn (0.22.1, not a git checkout)"),
        "{text}"
    );
    assert!(
        text.contains("| epoch time |") && text.contains("| B slower |"),
        "{text}"
    );
    assert!(out.join(ab::AB_FILE).is_file());
    // A run with one Burn (`--burn` given once) has nothing to compare: no ab.md.
    let one = tmp.path().join("one");
    std::fs::create_dir_all(&one).unwrap();
    let alone = ab::write_ab(&one, &dirs[..1], None).unwrap();
    assert!(
        alone.contains("One Burn in this run (0.22.1): nothing to compare"),
        "{alone}"
    );
    assert!(!one.join(ab::AB_FILE).exists());
}

/// `--repeats auto`: passes stop once every cell is decided (B 20% slower in every pair: after
/// the third pair), not at the most pairs, and ab.md gives the sequential verdict.
#[test]
fn an_auto_ab_run_stops_when_its_cells_are_decided() {
    let tmp = tempfile::tempdir().unwrap();
    let order = tmp.path().join("order");
    let a_built = [on_cpu("flex", side_runner(tmp.path(), "A", 100.0, &order))];
    let b_built = [on_cpu("flex", side_runner(tmp.path(), "B", 120.0, &order))];
    let out = tmp.path().join("ab");
    let rule = kiln_contract::stats::Sequential::KILN;
    let (mut dirs, mut cfgs) = (Vec::new(), Vec::new());
    for letter in ["a", "b"] {
        dirs.push(prepare_out(Some(&out.join(letter))).unwrap());
        let mut c = cfg();
        c.repeats = rule.max_pairs;
        c.sequential = Some(rule);
        cfgs.push(c);
    }
    let sides: Vec<(&[Built], &Path, &RunConfig)> = vec![
        (&a_built[..], dirs[0].as_path(), &cfgs[0]),
        (&b_built[..], dirs[1].as_path(), &cfgs[1]),
    ];
    assert!(ab::run_passes(&[cell("flex")], &sides, rule.max_pairs, Some(&rule)).unwrap());
    let calls = std::fs::read_to_string(&order).unwrap().replace('\n', "");
    let later: String = (2..=rule.min_pairs)
        .map(|k| if k % 2 == 0 { "BA" } else { "AB" })
        .collect();
    assert_eq!(calls, format!("AABB{later}"));
    let text = ab::write_ab(&out, &dirs, Some(&rule)).unwrap();
    assert!(
        text.contains("sequential paired t, 3 pairs") && text.contains("| B slower |"),
        "{text}"
    );
    assert!(text.contains("--repeats auto"), "{text}");
}
