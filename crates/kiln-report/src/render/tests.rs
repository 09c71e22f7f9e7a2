use super::*;
use kiln_contract::schema::Status;
use kiln_contract::stats::Stats;

/// Rows of fields of CSV text (quoted fields may hold commas, quotes and newlines).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes())
        .records()
        .filter_map(Result::ok)
        .map(|r| r.iter().map(str::to_string).collect())
        .collect()
}
use super::tests_support::timed;

#[test]
fn a_row_trained_at_another_learning_rate_says_so() {
    let mut r = crate::fields::tests_support::timed("flex", 10.0);
    assert!(!markdown(std::slice::from_ref(&r), None).contains("learning rate"));
    r.learning_rate = 0.01;
    let md = markdown(&[r], None);
    assert!(md.contains("learning rate 0.01 (`--lr`)"), "{md}");
    assert!(csv(&[crate::fields::tests_support::timed("flex", 1.0)]).contains(",0.001,"));
}

#[test]
fn speedup_is_relative_to_the_flex_row_by_default() {
    let records = vec![timed("ndarray", 100.0), timed("flex", 10.0)];
    let md = markdown(&records, None);
    assert!(md.contains("Speed-up vs flex/cpu/f32"), "{md}");
    assert!(
        md.contains(
            "| ndarray / cpu | f32 | 100 s (single run; within it 90.0 s–110 s, CV 10.0%) \
             | 0.10× (single run)"
        ),
        "{md}"
    );
    assert!(md.contains("8,000-sample epochs scaled to 60,000"), "{md}");
    let md = markdown(&records, Some("ndarray"));
    assert!(
        md.contains(
            "| flex / cpu | f32 | 10.0 s (single run; within it 9.00 s–11.0 s, CV 10.0%) \
             | 10.00× (single run)"
        ),
        "{md}"
    );
}

#[test]
fn the_pytorch_column_divides_by_the_reference_on_the_same_device_and_precision() {
    let torch = timed("pytorch", 100.0);
    let tch = timed("tch", 130.0);
    let mut emulated = timed("wgpu", 400.0);
    emulated.device_kind = Some(kiln_contract::DeviceKind::CpuEmulatedGpu);
    let md = markdown(&[torch, tch, emulated.clone()], None);
    assert!(md.contains("Time ÷ PyTorch's"), "{md}");
    assert!(md.contains("| 1.30× (single run) |"), "{md}");
    assert!(md.contains("1 (reference)"), "{md}");
    assert!(md.contains("[CPU-emulated, not a GPU]"), "{md}");
    assert!(md.contains("not a GPU result"), "{md}");
    // Without a PyTorch row there is no such column.
    let md = markdown(&[emulated], None);
    assert!(!md.contains("PyTorch"), "{md}");
}

#[test]
fn several_batch_sizes_add_a_batch_column_and_compare_each_with_pytorch_at_its_batch() {
    let at = |backend: &str, batch: usize, median: f64| {
        let mut r = timed(backend, median);
        r.batch_size = batch;
        r
    };
    // As xtask records a runner that died without a record.
    let mut id = at("tch", 512, 1.0).cell();
    id.batch_size = 512;
    let oom = Record::not_run(
        &id,
        Status::OutOfMemory,
        "batch 512 did not fit: CUDA out of memory",
    );
    let records = [
        at("pytorch", 32, 100.0),
        at("tch", 32, 150.0),
        at("pytorch", 512, 50.0),
        oom,
    ];
    let md = markdown(&records, None);
    assert!(md.contains("| Precision | Batch |"), "{md}");
    // tch at batch 32 against PyTorch at batch 32, not at 512.
    assert!(md.contains("| 1.50× (single run) |"), "{md}");
    assert!(
        md.contains("**out of memory**: batch 512 did not fit"),
        "{md}"
    );
    assert!(md.contains("Images/s by batch size"), "{md}");
    assert!(md.contains("32 (512: out of memory)"), "{md}");
    assert!(!md.contains("SYNTHETIC data ()"), "{md}");
    // The speed-up baseline is flex at the protocol's batch, wherever it is listed.
    let md = markdown(&[at("flex", 32, 10.0), at("flex", 128, 20.0)], None);
    assert!(md.contains("Speed-up vs flex/cpu/f32 @ batch 128"), "{md}");
    // One batch size: no such column.
    let md = markdown(&[timed("flex", 1.0)], None);
    assert!(!md.contains("| Batch |"), "{md}");
}

#[test]
fn failed_rows_show_status_and_reason_without_time() {
    let mut r = timed("flex", 10.0);
    r.status = Status::Diverged;
    r.reason = Some("loss became NaN in epoch 1".into());
    let md = markdown(&[r], None);
    assert!(md.contains("**diverged**: loss became NaN"), "{md}");
    assert!(!md.contains("10.0 s"), "{md}");
}

#[test]
fn csv_has_a_header_and_one_row_per_record() {
    let text = csv(&[timed("flex", 10.0), timed("ndarray", 20.0)]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    let columns = lines[0].split(',').count();
    assert!(lines[1..].iter().all(|l| l.split(',').count() == columns));
}

fn on(host: &str, backend: &str, median: f64) -> Record {
    let mut r = timed(backend, median);
    r.fingerprint.hostname = host.into();
    r.fingerprint.cpu_model = format!("{host} cpu");
    r.fingerprint.logical_cores = 2;
    r
}

/// Three runs of one cell whose medians are 0.9, 1 and 1.1 times `median`.
fn runs(host: &str, backend: &str, median: f64) -> Vec<Record> {
    [0.9, 1.0, 1.1]
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut r = on(host, backend, median * f);
            r.repeat = Some(kiln_contract::Repeat {
                index: i + 1,
                of: 3,
                run: "run".into(),
            });
            r
        })
        .collect()
}

#[test]
fn two_machines_merge_into_one_table_with_propagated_uncertainty() {
    let records = [
        runs("laptop", "flex", 10.0),
        runs("laptop", "ndarray", 100.0),
        runs("gpu-box", "flex", 4.0),
    ]
    .concat();
    let md = markdown(&records, None);
    assert!(md.contains("| Machine | Backend / device |"), "{md}");
    assert!(
        md.contains("Speed-up vs laptop cpu, 2 cores · laptop:flex/cpu/f32"),
        "{md}"
    );
    // 10 / 4 = 2.5; each side's runs have a 10% standard deviation, so a 95% interval for
    // the next run of ± 4.303 · 10% · √(4/3) = 49.7%: 2.5 · √2 · 0.497 = 1.76.
    assert!(
        md.contains(
            "| gpu-box cpu, 2 cores · gpu-box | flex / cpu | f32 | 4.00 s (next run \
             2.01 s–5.99 s; 3 runs) | 2.50× ± 1.76 |"
        ),
        "{md}"
    );
    assert!(
        md.contains(
            "| laptop cpu, 2 cores · laptop | ndarray / cpu | f32 | 100 s (next run \
             50.3 s–150 s; 3 runs) | 0.10× ± 0.07 |"
        ),
        "{md}"
    );
    assert!(
        md.contains("Machine laptop cpu, 2 cores · laptop: laptop cpu")
            && md.contains("Machine gpu-box cpu, 2 cores · gpu-box: gpu-box cpu"),
        "{md}"
    );
    let md = markdown(&records, Some("gpu-box cpu, 2 cores · gpu-box:flex"));
    assert!(
        md.contains(
            "| laptop cpu, 2 cores · laptop | flex / cpu | f32 | 10.0 s (next run \
             5.03 s–15.0 s; 3 runs) | 0.40× ± 0.28 |"
        ),
        "{md}"
    );
}

#[test]
fn two_cpus_named_vm_are_two_machines_each_named_by_its_cpu() {
    let mut epyc = on("vm", "flex", 10.0);
    epyc.fingerprint.cpu_model = "AMD EPYC".into();
    epyc.fingerprint.cpu = Some(kiln_contract::CpuIdentity {
        vendor: Some("AuthenticAMD".into()),
        family: Some(26),
        model: Some(2),
        ..Default::default()
    });
    let mut xeon = on("vm", "flex", 12.0);
    xeon.fingerprint.cpu_model = "Intel(R) Xeon(R) Processor".into();
    xeon.fingerprint.cpu = Some(kiln_contract::CpuIdentity {
        vendor: Some("GenuineIntel".into()),
        family: Some(6),
        model: Some(143),
        isa: vec!["avx512-bf16".into(), "amx-bf16".into()],
        ..Default::default()
    });
    let md = markdown(&[epyc, xeon], None);
    assert!(
        md.contains("| AMD EPYC (family 26 model 2), 2 cores · vm | flex / cpu |"),
        "{md}"
    );
    assert!(
        md.contains("| Intel(R) Xeon(R) Processor (family 6 model 143), 2 cores · vm |"),
        "{md}"
    );
    assert!(md.contains("ISA avx512-bf16 amx-bf16"), "{md}");
}

#[test]
fn two_runs_on_one_machine_get_a_run_column_and_their_own_reference() {
    let run = |name: &str, backend: &str, median: f64| {
        let mut r = on("vm", backend, median);
        r.repeat = Some(kiln_contract::Repeat {
            index: 1,
            of: 1,
            run: name.into(),
        });
        r
    };
    let records = [
        run("first", "tch", 200.0),
        run("first", "pytorch", 100.0),
        run("second", "tch", 200.0),
        run("second", "pytorch", 200.0),
    ];
    let md = markdown(&records, None);
    assert!(md.contains("| Run |"), "{md}");
    assert!(md.contains("| first | tch / cpu | f32 |"), "{md}");
    // Each tch row is divided by the PyTorch row of its own run.
    assert!(md.contains("| 2.00× (single run) |"), "{md}");
    assert!(md.contains("| 1.00× (single run) |"), "{md}");
    // One run: no such column.
    assert!(!markdown(&records[..2], None).contains("| Run |"));
}

#[test]
fn time_to_accuracy_is_a_column_and_not_reaching_it_is_a_labelled_result() {
    let tta = |seconds: Option<f64>| kiln_contract::TimeToAccuracy {
        target: 0.8,
        seconds,
        epoch: seconds.map(|_| 2),
        epochs_evaluated: 3,
        best: Some(if seconds.is_some() { 0.83 } else { 0.625 }),
        budget_exhausted: seconds.is_none(),
    };
    let mut fast = timed("flex", 10.0);
    fast.time_to_accuracy = Some(tta(Some(41.0)));
    let mut slow = timed("ndarray", 100.0);
    slow.time_to_accuracy = Some(tta(None));
    let md = markdown(&[fast, slow], None);
    assert!(md.contains("Time to 80% test accuracy"), "{md}");
    assert!(md.contains("| 41.0 s (epoch 2) |"), "{md}");
    assert!(
        md.contains("| not reached in 3 epochs, budget exhausted (best 62.5%) |"),
        "{md}"
    );
    // Without a target, no such column.
    assert!(!markdown(&[timed("flex", 10.0)], None).contains("Time to"));
}

#[test]
fn a_learner_row_is_its_own_row_and_is_compared_with_kilns_loop() {
    let kiln = super::tests_support::timed("flex", 10.0);
    let mut learner = super::tests_support::timed("flex", 12.5);
    learner.training_loop = Some(kiln_contract::TrainingLoop::Learner);
    assert_eq!(row_label(&learner), "flex/cpu/f32 (learner loop)");
    assert_ne!(kiln.cell(), learner.cell());
    let md = markdown(&[kiln.clone(), learner.clone()], None);
    assert!(
        md.contains("### burn-train's Learner against Kiln's loop"),
        "{md}"
    );
    assert!(
        md.contains("| 10.0 s (single run) | 12.5 s (single run) | 1.25× (single run) |"),
        "{md}"
    );
    // In the model's table the two rows are told apart by their loop.
    assert!(md.contains("| flex / cpu [learner loop] |"), "{md}");
    // Without the Kiln-loop row there is nothing to compare with: no table.
    assert!(!markdown(&[learner.clone()], None).contains("Learner against"));
    // Repeats are one row each, and the ratio carries their spread between runs.
    let repeated = |r: &Record, k: usize, median: f64| {
        let mut r = r.clone();
        r.epoch_seconds = Stats::from_samples(&[median * 0.99, median, median * 1.01]);
        r.repeat = Some(kiln_contract::Repeat {
            index: k,
            of: 2,
            run: "run".into(),
        });
        r
    };
    let runs = [
        repeated(&kiln, 1, 10.0),
        repeated(&learner, 1, 12.0),
        repeated(&kiln, 2, 11.0),
        repeated(&learner, 2, 13.0),
    ];
    let section = learner_section(&runs);
    assert_eq!(section.rows.len(), 1, "{:?}", section.rows);
    assert!(section.rows[0][5].contains(" ± "), "{:?}", section.rows);
    assert!(section.rows[0][3].contains("2 runs"), "{:?}", section.rows);
}

#[test]
fn a_remote_row_is_labelled_with_its_link() {
    let mut r = Record::not_run(
        &kiln_contract::CellId::new(
            kiln_contract::ModelKind::MnistCnn,
            "remote",
            "remote:ws://127.0.0.1:3000",
            kiln_contract::Precision::F32,
            128,
        ),
        Status::Ok,
        "",
    );
    r.device_name = "flex cpu (EPYC) on gpu-box".into();
    r.remote = Some(kiln_contract::Remote {
        url: "ws://127.0.0.1:3000".into(),
        index: 0,
        backend: "flex".into(),
        device: "cpu".into(),
        device_name: "EPYC".into(),
        fingerprint: kiln_contract::Fingerprint::default(),
        rtt_seconds: 0.000_25,
        sync_seconds: 0.0012,
    });
    assert_eq!(
        device_cell(&r),
        "remote:ws://127.0.0.1:3000 (flex cpu (EPYC) on gpu-box) [remote: RTT 0.25 ms, sync \
         1.20 ms]"
    );
    // The server is one of the report's machines, once however many rows it served.
    if let Some(remote) = r.remote.as_mut() {
        remote.fingerprint.hostname = "gpu-box".into();
        remote.fingerprint.cpu_model = "EPYC".into();
    }
    let lines = machine_lines(&[r.clone(), r]);
    let servers: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("Remote server gpu-box at ws://127.0.0.1:3000: flex cpu"))
        .collect();
    assert_eq!(servers.len(), 1, "{lines:?}");
}

#[test]
fn a_record_built_below_release_opt_level_says_its_times_are_not_release_times() {
    let mut r = super::tests_support::timed("flex", 10.0);
    r.fingerprint.hostname = "ci".into();
    r.fingerprint.cpu_model = "A CPU".into();
    r.fingerprint.opt_level = Some("0".into());
    let lines = machine_lines(std::slice::from_ref(&r));
    assert!(
        lines[0].ends_with("built at opt-level 0: not release times."),
        "{lines:?}"
    );
    r.fingerprint.opt_level = Some("3".into());
    assert!(!machine_lines(&[r])[0].contains("opt-level"));
}

#[test]
fn a_data_parallel_row_shows_its_scaling_against_one_device() {
    let mut one = super::tests_support::timed("flex", 10.0);
    one.training_loop = Some(kiln_contract::TrainingLoop::Learner);
    one.images_per_second = Some(100.0);
    let mut two = one.clone();
    two.device = "cpu,cpu".into();
    two.images_per_second = Some(150.0);
    two.data_parallel = Some(kiln_contract::DataParallel {
        devices: vec!["cpu".into(), "cpu".into()],
        strategy: "multi-device".into(),
        global_batch_size: 256,
    });
    let md = markdown(&[one, two.clone()], None);
    assert!(md.contains("### Data-parallel scaling"), "{md}");
    assert!(
        md.contains(
            "| cpu, cpu | multi-device | 256 | 150.0 | 100.0 (learner loop) | 1.50x | 75% |"
        ),
        "{md}"
    );
    let alone = markdown(&[two], None);
    assert!(alone.contains("no single-device row"), "{alone}");
}

#[test]
fn a_busy_window_flags_its_row() {
    let mut quiet = timed("flex", 10.0);
    quiet.noise = Some(kiln_contract::Noise {
        other_cpu_share: Some(0.01),
        window_seconds: 20.0,
        window: "timed epochs".into(),
        ..Default::default()
    });
    let mut busy = timed("ndarray", 10.0);
    busy.noise = Some(kiln_contract::Noise {
        other_cpu_share: Some(0.48),
        window_seconds: 20.0,
        window: "timed epochs".into(),
        ..Default::default()
    });
    let md = markdown(&[quiet, busy], None);
    assert!(
        md.contains("⚠ busy machine (48% of CPU used by others)"),
        "{md}"
    );
    assert!(
        md.contains("ndarray/cpu/f32: measured on a busy machine"),
        "{md}"
    );
    assert!(!md.contains("flex/cpu/f32: measured on a busy"), "{md}");
}

#[test]
fn json_round_trips() {
    let mut r = on("a", "flex", 3.0);
    r.reason = Some("a \"quoted\", comma\nand newline".into());
    let records = vec![r, on("b", "ndarray", 7.0)];
    let back: Vec<Record> = serde_json::from_str(&json(&records)).unwrap();
    assert_eq!(back, records);
}

#[test]
fn csv_round_trips_through_its_parser() {
    let mut r = on("a", "flex", 3.0);
    r.reason = Some("a \"quoted\", comma\nand newline".into());
    r.achieved_gflops = Some(12.5);
    let records = vec![r.clone(), on("b", "ndarray", 7.0)];
    let rows = parse_csv(&csv(&records));
    assert_eq!(rows.len(), 3);
    let header = &rows[0];
    assert!(rows.iter().all(|row| row.len() == header.len()));
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(rows[1][col("machine")], "a cpu, 2 cores · a");
    assert_eq!(rows[1][col("reason")], r.reason.unwrap());
    assert_eq!(
        rows[1][col("epoch_seconds_median")].parse::<f64>().unwrap(),
        3.0
    );
    assert_eq!(
        rows[1][col("achieved_gflops")].parse::<f64>().unwrap(),
        12.5
    );
    assert_eq!(rows[2][col("backend")], "ndarray");
}
