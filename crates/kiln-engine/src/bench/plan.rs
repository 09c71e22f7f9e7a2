//! Planning the matrix: which cells run and which are recorded as skipped, and the CPU cell a
//! failed one falls back to. Pure functions over the configuration and the probes' reports, so
//! every rule is unit-tested without building or running anything.

use kiln_contract::{
    AutotuneLevel, CellId, DatasetName, DeviceKind, DeviceReport, ModelKind, Precision,
    ProbeReport, Profile, Record, Status, TrainingLoop,
};

use super::config::PlannedCell;

/// What `bench-all` was asked for, resolved.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// Each model with the dataset it trains on (and why, when that is a fallback).
    pub models: Vec<(ModelKind, (DatasetName, Option<String>))>,
    pub precisions: Vec<Precision>,
    /// Batch sizes, each a cell of its own (innermost: a device's sweep runs together).
    pub batch_sizes: Vec<usize>,
    /// The backends whose cells are planned, by name.
    pub backends: Vec<String>,
    /// True when the user named the backends (`--backends`): a CPU-emulated adapter then runs.
    pub backends_named: bool,
    /// A cell for every available device, not only each backend's default one.
    pub all_devices: bool,
    /// `--fallback` given: cells that cannot run are planned anyway, and fall back when they fail.
    pub fallback: bool,
    /// `--budget` given: an emulated adapter keeps it instead of its short correctness budget.
    pub budget_given: bool,
    /// `--autotune` given: an emulated adapter keeps it instead of `minimal`.
    pub autotune_given: bool,
    pub profile: Profile,
    /// The training loops every cell runs through (`--loop`); the PyTorch reference runs its
    /// own loop only.
    pub loops: Vec<TrainingLoop>,
}

/// The cells to run and the records of the cells that will not.
#[derive(Debug, Default)]
pub struct Plan {
    pub cells: Vec<PlannedCell>,
    pub skipped: Vec<Record>,
}

/// Plan the matrix over the probe reports (one per built backend, by backend name).
pub fn plan(matrix: &Matrix, probes: &[(&str, &ProbeReport)]) -> Plan {
    let mut plan = Plan::default();
    for (model, dataset) in &matrix.models {
        for (backend, report) in probes
            .iter()
            .filter(|(name, _)| matrix.backends.iter().any(|w| w == name))
        {
            for device in chosen_devices(matrix, report) {
                for &precision in &matrix.precisions {
                    for &batch in &matrix.batch_sizes {
                        for &training_loop in &matrix.loops {
                            if training_loop != TrainingLoop::Kiln && *backend == "pytorch" {
                                continue;
                            }
                            let id = CellId::new(*model, backend, &device.spec, precision, batch)
                                .with_loop(training_loop);
                            match skip_reason(matrix, backend, device, precision) {
                                Some(why) => {
                                    plan.skipped
                                        .push(Record::not_run(&id, Status::Skipped, why))
                                }
                                None => plan.cells.push(planned(matrix, id, dataset, device.kind)),
                            }
                        }
                    }
                }
            }
        }
    }
    plan
}

/// The devices of a backend that get a cell (run or skipped): the default device, every
/// available one with `--all-devices`; an unavailable device only when the backend has no
/// usable device at all, or when `--fallback` is to run its cell on the CPU.
fn chosen_devices<'a>(matrix: &Matrix, report: &'a ProbeReport) -> Vec<&'a DeviceReport> {
    let none_usable = !report.devices.iter().any(|d| d.available);
    report
        .devices
        .iter()
        .filter(|d| {
            if d.available {
                d.default || matrix.all_devices
            } else {
                none_usable || (d.default && matrix.fallback)
            }
        })
        .collect()
}

/// Why a cell is recorded as skipped instead of run, if it is.
fn skip_reason(
    matrix: &Matrix,
    backend: &str,
    device: &DeviceReport,
    precision: Precision,
) -> Option<String> {
    // A software GPU on the CPU (lavapipe) is a correctness row whose cold start (autotuning
    // every convolution on the CPU) takes tens of minutes: it runs only when asked for by name
    // or with --all-devices.
    if device.kind.is_cpu_emulated() && !(matrix.backends_named || matrix.all_devices) {
        return Some(format!(
            "{} is a CPU-emulated adapter (a correctness row, not a GPU; its first step \
             autotunes on the CPU for minutes): run it with `--backends {backend}` or \
             `--all-devices`",
            device.name
        ));
    }
    if matrix.fallback {
        // The runner reports why it cannot run, and the run falls back to a CPU cell.
        return None;
    }
    if !device.available {
        let why = device.reason.as_deref().unwrap_or("unavailable");
        return Some(format!("device unavailable: {why}"));
    }
    if !device.precisions.iter().any(|p| p == precision.name()) {
        return Some(format!(
            "{backend} {} does not support {precision} (supported: {})",
            device.spec,
            device.precisions.join(", ")
        ));
    }
    None
}

/// A planned cell; on a CPU-emulated adapter it gets a short budget and minimal autotune
/// unless the user set them.
pub fn planned(
    matrix: &Matrix,
    id: CellId,
    dataset: &(DatasetName, Option<String>),
    kind: DeviceKind,
) -> PlannedCell {
    let emulated = kind.is_cpu_emulated();
    PlannedCell {
        replay: None,
        planned_seconds: None,
        not_planned: None,
        id,
        dataset: dataset.0,
        dataset_note: dataset.1.clone(),
        budget_seconds: (emulated && !matrix.budget_given)
            .then(|| matrix.profile.emulated_budget().as_secs_f64()),
        autotune: (emulated && !matrix.autotune_given).then_some(AutotuneLevel::Minimal),
        warmup_cap_seconds: None,
    }
}

/// The CPU cell that replaces `cell`, chosen by the device kinds the probes report: the same
/// backend's available CPU device when the cell was not on it already, else the default CPU
/// device of the first other backend (in table order) that has one.
pub fn fallback_cell(cell: &PlannedCell, probes: &[(&str, &ProbeReport)]) -> Option<PlannedCell> {
    let cpu = |report: &ProbeReport, default_only: bool| {
        report
            .devices
            .iter()
            .find(|d| d.kind == DeviceKind::Cpu && d.available && (d.default || !default_only))
            .map(|d| d.spec.clone())
    };
    let same = probes
        .iter()
        .find(|(name, _)| *name == cell.id.backend)
        .and_then(|(name, report)| cpu(report, false).map(|spec| (*name, spec)))
        .filter(|(_, spec)| *spec != cell.id.device);
    let (backend, device) = same.or_else(|| {
        probes
            .iter()
            .filter(|(name, _)| *name != cell.id.backend)
            .find_map(|(name, report)| cpu(report, true).map(|spec| (*name, spec)))
    })?;
    let mut id = cell.id.clone();
    id.backend = backend.to_string();
    id.device = device;
    Some(PlannedCell {
        replay: None,
        planned_seconds: None,
        not_planned: None,
        id,
        dataset: cell.dataset,
        dataset_note: cell.dataset_note.clone(),
        budget_seconds: None,
        autotune: None,
        warmup_cap_seconds: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(spec: &str, kind: DeviceKind, available: bool, default: bool) -> DeviceReport {
        DeviceReport {
            spec: spec.into(),
            name: format!("{spec} name"),
            kind,
            available,
            reason: (!available).then(|| format!("{spec} is missing")),
            precisions: vec!["f32".into(), "bf16".into()],
            default,
            memory_bytes: None,
            runtime: None,
        }
    }

    fn report(backend: &str, devices: Vec<DeviceReport>) -> ProbeReport {
        ProbeReport {
            backend: backend.into(),
            backend_version: "0".into(),
            devices,
        }
    }

    fn matrix(backends: &[&str]) -> Matrix {
        Matrix {
            models: vec![(ModelKind::MnistCnn, (DatasetName::FashionMnistSample, None))],
            precisions: vec![Precision::F32],
            batch_sizes: vec![128],
            backends: backends.iter().map(|b| b.to_string()).collect(),
            backends_named: false,
            all_devices: false,
            fallback: false,
            budget_given: false,
            autotune_given: false,
            profile: Profile::Quick,
            loops: vec![TrainingLoop::Kiln],
        }
    }

    fn cpu_only(name: &str) -> ProbeReport {
        report(name, vec![device("cpu", DeviceKind::Cpu, true, true)])
    }

    fn gpu_machine() -> ProbeReport {
        report(
            "wgpu",
            vec![
                device("vulkan:discrete:0", DeviceKind::DiscreteGpu, true, true),
                device(
                    "vulkan:integrated:0",
                    DeviceKind::IntegratedGpu,
                    true,
                    false,
                ),
                device("vulkan:cpu", DeviceKind::CpuEmulatedGpu, true, false),
            ],
        )
    }

    fn ids(cells: &[PlannedCell]) -> Vec<String> {
        cells
            .iter()
            .map(|c| {
                format!(
                    "{}/{}/{}/{}",
                    c.id.model, c.id.backend, c.id.device, c.id.precision
                )
            })
            .collect()
    }

    #[test]
    fn the_matrix_is_models_by_backends_by_default_devices_by_precisions() {
        let (flex, wgpu) = (cpu_only("flex"), gpu_machine());
        let mut m = matrix(&["flex", "wgpu"]);
        m.models
            .push((ModelKind::ResNet18, (DatasetName::Synthetic, None)));
        m.precisions = vec![Precision::F32, Precision::BF16];
        let p = plan(&m, &[("flex", &flex), ("wgpu", &wgpu)]);
        assert_eq!(p.cells.len(), 2 * 2 * 2, "{:?}", ids(&p.cells));
        assert!(p.skipped.is_empty());
        assert!(ids(&p.cells).contains(&"resnet18/wgpu/vulkan:discrete:0/bf16".to_string()));
        assert_eq!(p.cells[0].dataset, DatasetName::FashionMnistSample);
        // A probed backend that was not asked for plans nothing.
        let p = plan(&matrix(&["flex"]), &[("flex", &flex), ("wgpu", &wgpu)]);
        assert_eq!(ids(&p.cells), vec!["mnist-cnn/flex/cpu/f32"]);
    }

    #[test]
    fn the_learner_loop_is_a_cell_of_its_own_beside_kilns_but_not_for_pytorch() {
        let (flex, pytorch) = (cpu_only("flex"), cpu_only("pytorch"));
        let mut m = matrix(&["flex", "pytorch"]);
        m.loops = crate::bench::config::loops(Some(&[TrainingLoop::Learner]));
        assert_eq!(m.loops, vec![TrainingLoop::Kiln, TrainingLoop::Learner]);
        let p = plan(&m, &[("flex", &flex), ("pytorch", &pytorch)]);
        let loops: Vec<(String, Option<TrainingLoop>)> = p
            .cells
            .iter()
            .map(|c| (c.id.backend.clone(), c.id.training_loop))
            .collect();
        assert_eq!(
            loops,
            vec![
                ("flex".into(), None),
                ("flex".into(), Some(TrainingLoop::Learner)),
                ("pytorch".into(), None),
            ]
        );
        let cfg = tests_cfg();
        let learner = p.cells[1].request(&cfg).unwrap();
        assert_eq!(learner.training_loop, TrainingLoop::Learner);
        assert!(learner.devices.is_empty());
        // A data-parallel cell's device list reaches its request.
        let mut dp = p.cells[1].clone();
        dp.id.device = "cpu,cpu".into();
        let r = dp.request(&cfg).unwrap();
        assert_eq!((r.device.as_str(), r.devices.len()), ("cpu", 2));
        assert_eq!(r.id(), dp.id);
        // Kiln's loop cannot take several devices: the rule is the request's.
        dp.id.training_loop = None;
        let err = dp.request(&cfg).unwrap_err().to_string();
        assert!(err.contains("needs --loop learner"), "{err}");
    }

    #[test]
    fn each_batch_size_is_a_cell_and_a_device_sweeps_its_batches_together() {
        let (flex, tch) = (cpu_only("flex"), cpu_only("tch"));
        let mut m = matrix(&["flex", "tch"]);
        m.batch_sizes = vec![32, 128, 512];
        let p = plan(&m, &[("flex", &flex), ("tch", &tch)]);
        let got: Vec<(String, usize)> = p
            .cells
            .iter()
            .map(|c| (c.id.backend.clone(), c.id.batch_size))
            .collect();
        let want: Vec<(String, usize)> = ["flex", "tch"]
            .iter()
            .flat_map(|b| [32, 128, 512].map(|n| (b.to_string(), n)))
            .collect();
        assert_eq!(got, want);
        // Every request carries its own batch size.
        let cfg = crate::bench::config::RunConfig::of_request(
            &p.cells[0].request(&tests_cfg()).expect("a request"),
        );
        assert_eq!(cfg.batch_sizes, vec![32]);
        assert_eq!(p.cells[2].request(&tests_cfg()).unwrap().batch_size, 512);
    }

    fn tests_cfg() -> crate::bench::config::RunConfig {
        let common = <crate::options::CommonArgs as clap::FromArgMatches>::from_arg_matches(
            &<crate::options::CommonArgs as clap::Args>::augment_args(clap::Command::new("t"))
                .get_matches_from(["t", "--quick", "--batch", "32,128,512"]),
        )
        .expect("flags");
        crate::bench::config::config(&common, false)
            .expect("a config")
            .1
    }

    #[test]
    fn a_batch_list_is_parsed_in_order_and_refuses_repeats() {
        assert_eq!(tests_cfg().batch_sizes, vec![32, 128, 512]);
        let err = crate::bench::config::batch_sizes(Some(&[32, 64, 32]), Profile::Quick)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--batch lists 32 twice"), "{err}");
        assert_eq!(
            crate::bench::config::batch_sizes(None, Profile::Full).unwrap(),
            vec![128]
        );
        // A run file of an older Kiln holds one batch size as a number.
        let old: crate::bench::config::RunConfig = serde_json::from_value(serde_json::json!({
            "profile": "quick", "epochs": 1, "batch_size": 64, "budget_seconds": null,
            "seed": 1, "data_dir": null, "eval_limit": null, "train_limit": null, "bare": false
        }))
        .expect("an old run file's configuration");
        assert_eq!(old.batch_sizes, vec![64]);
    }

    #[test]
    fn all_devices_adds_every_available_device() {
        let wgpu = gpu_machine();
        let mut m = matrix(&["wgpu"]);
        m.all_devices = true;
        let p = plan(&m, &[("wgpu", &wgpu)]);
        assert_eq!(p.cells.len(), 3, "{:?}", ids(&p.cells));
    }

    #[test]
    fn an_emulated_adapter_is_skipped_unless_asked_for_and_then_runs_short() {
        let lavapipe = report(
            "wgpu",
            vec![device("vulkan:cpu", DeviceKind::CpuEmulatedGpu, true, true)],
        );
        let p = plan(&matrix(&["wgpu"]), &[("wgpu", &lavapipe)]);
        assert!(p.cells.is_empty());
        let reason = p.skipped[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("--backends wgpu"), "{reason}");

        let mut named = matrix(&["wgpu"]);
        named.backends_named = true;
        let p = plan(&named, &[("wgpu", &lavapipe)]);
        assert_eq!(p.cells.len(), 1);
        assert_eq!(p.cells[0].budget_seconds, Some(30.0));
        assert_eq!(p.cells[0].autotune, Some(AutotuneLevel::Minimal));

        // The user's own budget and autotune level win.
        named.budget_given = true;
        named.autotune_given = true;
        let p = plan(&named, &[("wgpu", &lavapipe)]);
        assert_eq!(
            (p.cells[0].budget_seconds, p.cells[0].autotune),
            (None, None)
        );
    }

    #[test]
    fn unusable_devices_and_precisions_are_skipped_with_their_reason() {
        let none = report(
            "wgpu",
            vec![device("none", DeviceKind::OtherGpu, false, false)],
        );
        let p = plan(&matrix(&["wgpu"]), &[("wgpu", &none)]);
        assert!(p.cells.is_empty());
        let reason = p.skipped[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("none is missing"), "{reason}");

        let flex = cpu_only("flex");
        let mut m = matrix(&["flex"]);
        m.precisions = vec![Precision::AmpF16];
        let p = plan(&m, &[("flex", &flex)]);
        let reason = p.skipped[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("does not support amp-f16"), "{reason}");

        // A backend with an unavailable default GPU but a usable CPU: the GPU is not planned.
        let tch = report(
            "tch",
            vec![
                device("cpu", DeviceKind::Cpu, true, false),
                device("cuda:0", DeviceKind::DiscreteGpu, false, true),
            ],
        );
        let p = plan(&matrix(&["tch"]), &[("tch", &tch)]);
        assert!(p.cells.is_empty() && p.skipped.is_empty());
    }

    #[test]
    fn with_fallback_cells_that_cannot_run_are_planned_to_fall_back() {
        let tch = report(
            "tch",
            vec![
                device("cpu", DeviceKind::Cpu, true, false),
                device("cuda:0", DeviceKind::DiscreteGpu, false, true),
            ],
        );
        let mut m = matrix(&["tch"]);
        m.fallback = true;
        m.precisions = vec![Precision::AmpF16];
        let p = plan(&m, &[("tch", &tch)]);
        assert_eq!(ids(&p.cells), vec!["mnist-cnn/tch/cuda:0/amp-f16"]);
    }

    #[test]
    fn fallback_goes_to_a_cpu_device_by_kind_not_by_backend_name() {
        let tch = report(
            "tch",
            vec![
                device("cpu", DeviceKind::Cpu, true, false),
                device("cuda:0", DeviceKind::DiscreteGpu, true, true),
            ],
        );
        let (newcpu, wgpu) = (cpu_only("newcpu"), gpu_machine());
        let probes = [("newcpu", &newcpu), ("wgpu", &wgpu), ("tch", &tch)];
        let cell = |backend: &str, device: &str| PlannedCell {
            replay: None,
            planned_seconds: None,
            not_planned: None,
            id: CellId {
                training_loop: None,
                model: "mnist-cnn".into(),
                backend: backend.into(),
                device: device.into(),
                precision: "f32".into(),
                batch_size: 128,
            },
            dataset: DatasetName::Synthetic,
            dataset_note: None,
            budget_seconds: Some(30.0),
            autotune: Some(AutotuneLevel::Minimal),
            warmup_cap_seconds: None,
        };
        // The same backend's CPU device.
        let fb = fallback_cell(&cell("tch", "cuda:0"), &probes).unwrap();
        assert_eq!(
            (fb.id.backend.as_str(), fb.id.device.as_str()),
            ("tch", "cpu")
        );
        assert_eq!((fb.budget_seconds, fb.autotune), (None, None));
        // A GPU backend whose only CPU-side device is emulated: the first backend with a CPU.
        let fb = fallback_cell(&cell("wgpu", "vulkan:discrete:0"), &probes).unwrap();
        assert_eq!(fb.id.backend, "newcpu");
        // Already on its backend's CPU: another backend's CPU.
        let fb = fallback_cell(&cell("tch", "cpu"), &probes).unwrap();
        assert_eq!(fb.id.backend, "newcpu");
        // Nowhere else to go.
        assert!(fallback_cell(&cell("newcpu", "cpu"), &[("newcpu", &newcpu)]).is_none());
    }
}
