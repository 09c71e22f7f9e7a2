//! From what a runner observed to a record: one set of rules for every runner. Runners (Rust
//! and Python) report raw measurements (synced clocks per epoch and per chunk of steps, losses,
//! accuracy, memory readings, loss-scaling counts) and the facts of their device; the
//! statistics, the projection of a budget-cut cell, the scaling to the standard epoch and the
//! record's labels are derived here and nowhere else.

use serde::{Deserialize, Serialize};

use crate::cell::CellRequest;
use crate::schema::{
    Calibration, DataKind, DeviceMemory, EpochSummary, Fingerprint, LoopOverhead, LossScaling,
    Method, Obtained, Record, Runtime, Status, Warmup,
};
use crate::{DeviceKind, Stats};

/// Steady-state steps timed between two synced clock reads (no warm-up step is ever in one).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    pub steps: usize,
    pub samples: usize,
    pub seconds: f64,
}

/// What a cell's training loop measured, before any statistic. A runner writes it (the PyTorch
/// reference in Python too): a field this struct does not have is an error, not a loss.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Measurements {
    /// Samples in one epoch of the data actually trained on.
    pub epoch_samples: usize,
    /// Test samples evaluated after each epoch.
    pub test_samples: usize,
    /// The very first training step, synced (compilation, autotune, caches).
    pub first_step_seconds: Option<f64>,
    /// Every epoch as it ran (times unscaled); the last one `partial` when the budget cut it.
    pub epochs: Vec<EpochSummary>,
    /// Synced chunks of steady-state steps, in order.
    pub chunks: Vec<Chunk>,
    /// The warm-up to steady state (`None` from a runner older than the rule: its first step
    /// was its warm-up).
    #[serde(default)]
    pub warmup: Option<Warmup>,
    /// Why training stopped on a non-finite loss, if it did.
    pub diverged: Option<String>,
    /// Peak device allocator figures, where the backend reports them.
    pub device_memory: Option<DeviceMemory>,
    /// Dynamic loss scaling of an `amp-*` cell.
    pub loss_scaling: Option<LossScaling>,
    /// Resident set size when model, optimizer and data were ready, before the first step.
    #[serde(default)]
    pub rss_baseline_bytes: Option<u64>,
    /// The highest resident set size from the baseline to the end of training.
    #[serde(default)]
    pub rss_peak_bytes: Option<u64>,
    /// True when the peak is from the baseline on; false when it is the whole process's.
    #[serde(default)]
    pub peak_since_baseline: bool,
}

/// The numbers a record reports, derived from [`Measurements`].
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Seconds per standard epoch at steady state (measured or projected).
    pub epoch_seconds: Option<Stats>,
    /// The first epoch (warm-up included), scaled to the standard epoch.
    pub first_epoch_seconds: Option<f64>,
    pub images_per_second: Option<f64>,
    pub test_accuracy: Option<f64>,
    pub obtained: Obtained,
    /// A note on how the time was obtained, when it needs one.
    pub note: Option<String>,
}

/// The rules: nothing is timed before the step times are steady (`m.warmup`); whole epochs
/// that began at steady state are timed and scaled to the standard epoch; a cell with none
/// (cut by its budget, or fewer epochs asked for) is projected from its steady-state chunks;
/// a cell that never settled, or diverged, reports no time.
pub fn summarize(
    m: &Measurements,
    standard_epoch: usize,
    _epochs_requested: usize,
    budget_seconds: Option<f64>,
) -> Summary {
    let scale = standard_epoch as f64 / m.epoch_samples.max(1) as f64;
    let mut s = Summary {
        epoch_seconds: None,
        first_epoch_seconds: None,
        images_per_second: None,
        test_accuracy: m.epochs.last().and_then(|e| e.test_accuracy),
        obtained: Obtained {
            method: Method::None,
            epochs: 0,
            steps: 0,
            chunks: 0,
            epoch_samples: m.epoch_samples,
            standard_epoch_samples: standard_epoch,
            budget_seconds,
            budget_exhausted: m.epochs.last().is_some_and(|e| e.partial),
        },
        note: None,
    };
    if m.diverged.is_some() {
        return s;
    }
    let whole: Vec<&EpochSummary> = m.epochs.iter().filter(|e| !e.partial).collect();
    s.first_epoch_seconds = whole
        .first()
        .filter(|e| e.epoch == 1)
        .map(|e| e.seconds * scale);
    if let Some(w) = m.warmup.as_ref().filter(|w| !w.steady) {
        if too_short_to_judge(w)
            && let Some(per_epoch) = unjudged_epoch_seconds(m, w, standard_epoch)
        {
            s.epoch_seconds = Stats::from_samples(&[per_epoch]);
            s.images_per_second = Some(standard_epoch as f64 / per_epoch);
            s.obtained.method = Method::Unjudged;
            s.obtained.steps = w.steps;
            s.note = Some(too_short_note(w));
        } else {
            s.note = Some(not_steady_note(w));
        }
        return s;
    }
    // Epochs that began at steady state (a runner without the rule: after its first epoch).
    let settled_in = m.warmup.as_ref().map_or(1, |w| w.epoch);
    let timed: Vec<&&EpochSummary> = whole.iter().filter(|e| e.epoch > settled_in).collect();
    if !timed.is_empty() {
        let samples: Vec<f64> = timed.iter().map(|e| e.seconds * scale).collect();
        s.epoch_seconds = Stats::from_samples(&samples);
        s.obtained.method = Method::Measured;
        s.obtained.epochs = timed.len();
        s.obtained.steps = timed.iter().map(|e| e.steps).sum();
    } else {
        let per_epoch: Vec<f64> = m
            .chunks
            .iter()
            .filter(|c| c.samples > 0)
            .map(|c| c.seconds / c.samples as f64 * standard_epoch as f64)
            .collect();
        s.obtained.steps = m.chunks.iter().map(|c| c.steps).sum();
        s.obtained.chunks = per_epoch.len();
        if let Some(stats) = Stats::from_samples(&per_epoch) {
            s.epoch_seconds = Some(stats);
            s.obtained.method = Method::Projected;
        }
    }
    s.images_per_second = s
        .epoch_seconds
        .as_ref()
        .map(|e| standard_epoch as f64 / e.median);
    s
}

/// Whether a warm-up that never settled ended (training ran out of steps) before the
/// steady-state rule could judge it: fewer steps than its two windows, inside the cap. Such a
/// cell is not called unsteady; what it timed is reported, labelled
/// ([`Method::Unjudged`]).
pub fn too_short_to_judge(w: &Warmup) -> bool {
    !w.steady && w.steps < 2 * crate::TimingRules::KILN.steady_window && w.seconds < w.cap_seconds
}

/// A too-short cell's epoch time: the mean of its synced steps after the first (the first
/// alone when there is no other), scaled to the standard epoch by the samples one step
/// trained.
fn unjudged_epoch_seconds(m: &Measurements, w: &Warmup, standard_epoch: usize) -> Option<f64> {
    let steps: usize = m.epochs.iter().map(|e| e.steps).sum();
    let samples: usize = m.epochs.iter().map(|e| e.samples).sum();
    let times = match w.step_seconds.get(1..) {
        Some(rest) if !rest.is_empty() => rest,
        _ => &w.step_seconds[..],
    };
    let per_step = times.iter().sum::<f64>() / times.len().max(1) as f64;
    (steps > 0 && samples > 0 && per_step > 0.0)
        .then(|| per_step * standard_epoch as f64 / (samples as f64 / steps as f64))
}

/// What a too-short cell's time is, for its record's reason.
pub fn too_short_note(w: &Warmup) -> String {
    let window = crate::TimingRules::KILN.steady_window;
    format!(
        "too short to judge: training ended after {} step{} ({:.1} s), before the steady-state \
         rule's {} (two windows of {window}): its time is the mean of the steps after the \
         first, scaled, and was never checked steady (train longer, or with more samples, for \
         a judged time)",
        w.steps,
        if w.steps == 1 { "" } else { "s" },
        w.seconds,
        2 * window,
    )
}

/// Why a cell that never settled has no time: its warm-up and its last step times.
pub fn not_steady_note(w: &Warmup) -> String {
    let last: Vec<String> = w
        .step_seconds
        .iter()
        .rev()
        .take(6)
        .rev()
        .map(|t| format!("{t:.3}"))
        .collect();
    format!(
        "not steady: step times had not settled after {} steps and {:.1} s of warm-up (cap {:.0} \
         s; last step times {} s): no epoch time is reported",
        w.steps,
        w.seconds,
        w.cap_seconds,
        last.join(", ")
    )
}

/// The training time until the first epoch whose test accuracy reached `target` (the epochs'
/// own times, warm-up included, evaluation excluded), or how far it got.
pub fn time_to_accuracy(epochs: &[EpochSummary], target: f64) -> crate::TimeToAccuracy {
    let evaluated: Vec<&EpochSummary> = epochs
        .iter()
        .filter(|e| e.test_accuracy.is_some())
        .collect();
    let reached = evaluated
        .iter()
        .position(|e| e.test_accuracy.is_some_and(|a| a >= target));
    crate::TimeToAccuracy {
        target,
        seconds: reached.map(|i| evaluated[..=i].iter().map(|e| e.seconds).sum()),
        epoch: reached.map(|i| evaluated[i].epoch),
        epochs_evaluated: evaluated.len(),
        best: evaluated
            .iter()
            .filter_map(|e| e.test_accuracy)
            .reduce(f64::max),
        budget_exhausted: reached.is_none() && epochs.last().is_some_and(|e| e.partial),
    }
}

/// Everything a runner reports about a cell it ran (or could not run): the facts of its device
/// and data, and its measurements. [`Observed::into_record`] turns it into the cell's record.
/// A field this struct does not have (a misspelt key from the Python runner) is an error.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// `ok` when the cell trained (or `--bare` measured), else why not.
    pub status: Status,
    pub reason: Option<String>,
    /// The device spec as resolved (`default` becomes the backend's default device).
    pub device: String,
    pub device_name: String,
    pub device_kind: Option<DeviceKind>,
    pub runtime: Option<Runtime>,
    /// Memory of the device, for GPU devices that report it.
    #[serde(default)]
    pub device_memory_bytes: Option<u64>,
    /// Version of the backend the runner computed with (Burn's, or `torch X`).
    pub backend_version: String,
    /// Worker threads the backend computed with.
    pub threads: usize,
    /// The dataset trained on (empty when the cell failed before loading it).
    pub dataset: String,
    pub data: DataKind,
    /// Notes on how the cell ran (a dataset fallback, ...), kept in the record's reason.
    #[serde(default)]
    pub notes: Vec<String>,
    pub flops_per_sample: Option<u64>,
    pub peak: Option<Calibration>,
    /// Peak resident set size of the runner process.
    pub peak_memory_bytes: Option<u64>,
    /// The runner process's threads when the cell ended (`Record::process_threads`).
    #[serde(default)]
    pub process_threads: Option<usize>,
    /// Seconds since the Unix epoch when the cell started.
    pub started_at: u64,
    pub wall_seconds: f64,
    /// The runner's command-line arguments.
    pub args: Vec<String>,
    pub measurements: Option<Measurements>,
    pub loop_overhead: Option<LoopOverhead>,
    /// A data-parallel cell's devices and strategy.
    #[serde(default)]
    pub data_parallel: Option<crate::DataParallel>,
    /// A remote device's server and link.
    #[serde(default)]
    pub remote: Option<crate::Remote>,
}

impl Observed {
    /// The record of the cell `request` describes, with this machine's `fingerprint`.
    pub fn into_record(self, request: &CellRequest, mut fingerprint: Fingerprint) -> Record {
        let mut id = request.id();
        id.device = self.device;
        let mut r = Record::not_run(&id, self.status, "");
        r.device_name = self.device_name;
        r.batch_size = request.batch_size;
        r.accum_steps = request.settings.accum_steps;
        r.micro_batch_size = request.batch_size / request.settings.accum_steps.max(1);
        r.epochs_requested = request.settings.epochs;
        r.seed = request.settings.seed;
        r.learning_rate = request.settings.learning_rate;
        r.settings = Some(request.settings.clone());
        r.dataset = self.dataset;
        r.data = self.data;
        fingerprint.backend_version = self.backend_version;
        // A remote GPU is the server's: its fingerprint is in `remote`, not this machine's.
        if self.device_kind.is_some_and(DeviceKind::is_gpu) && self.remote.is_none() {
            fingerprint.gpu_name = Some(r.device_name.clone());
            fingerprint.gpu_driver = self.runtime.as_ref().and_then(|rt| rt.driver.clone());
            fingerprint.gpu_memory_bytes = self.device_memory_bytes;
            fingerprint.gpu_compute_capability = self
                .runtime
                .as_ref()
                .and_then(|rt| rt.compute_capability.clone());
        }
        r.fingerprint = fingerprint;
        r.device_kind = self.device_kind;
        r.runtime = self.runtime;
        r.flops_per_sample = self.flops_per_sample;
        r.peak = self.peak;
        r.peak_memory_bytes = self.peak_memory_bytes;
        r.process_threads = self.process_threads;
        r.started_at = self.started_at;
        r.wall_seconds = self.wall_seconds;
        r.args = self.args;
        r.loop_overhead = self.loop_overhead;
        r.data_parallel = self.data_parallel;
        r.remote = self.remote;
        r.obtained.budget_seconds = request.settings.budget_seconds;
        r.replay = request.replay.clone();
        let mut notes = Vec::new();
        if r.replay.is_some() && request.training_loop == crate::TrainingLoop::Learner {
            notes.push("replayed through Kiln's loop with the Learner cell's times".to_string());
        }
        notes.extend(self.reason);
        if let Some(m) = self.measurements {
            let standard_epoch = request.model.standard_epoch();
            let s = summarize(
                &m,
                standard_epoch,
                request.settings.epochs,
                request.settings.budget_seconds,
            );
            if let Some(why) = &m.diverged {
                r.status = Status::Diverged;
                notes.insert(0, why.clone());
            } else if s.obtained.method != Method::Unjudged
                && m.warmup.as_ref().is_some_and(|w| !w.steady)
                && r.status == Status::Ok
            {
                r.status = Status::NotSteady;
            }
            notes.extend(s.note);
            r.epoch_seconds = s.epoch_seconds;
            r.first_epoch_seconds = s.first_epoch_seconds;
            r.first_step_seconds = m.first_step_seconds;
            r.warmup = m.warmup.clone();
            r.images_per_second = s.images_per_second;
            r.achieved_gflops = s
                .images_per_second
                .zip(r.flops_per_sample)
                .map(|(ips, flops)| ips * flops as f64 / 1e9);
            r.device_memory = m.device_memory;
            r.test_accuracy = s.test_accuracy;
            r.test_samples = m.test_samples;
            r.train_samples = m.epoch_samples;
            r.obtained = s.obtained;
            r.time_to_accuracy = request
                .settings
                .target_accuracy
                .filter(|_| m.diverged.is_none())
                .map(|target| time_to_accuracy(&m.epochs, target));
            r.epochs = m.epochs;
            r.loss_scaling = m.loss_scaling;
            if m.rss_baseline_bytes.is_some() || m.rss_peak_bytes.is_some() {
                r.training_memory = Some(crate::TrainingMemory {
                    baseline_bytes: m.rss_baseline_bytes,
                    peak_bytes: m.rss_peak_bytes,
                    peak_since_baseline: m.peak_since_baseline,
                    parent_max_rss_bytes: None,
                });
            }
        }
        notes.extend(self.notes);
        r.reason = (!notes.is_empty()).then(|| notes.join("; "));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelKind, Profile};

    fn epoch(n: usize, seconds: f64, partial: bool) -> EpochSummary {
        EpochSummary {
            epoch: n,
            seconds,
            steps: 3,
            samples: 96,
            partial,
            mean_loss: 1.0,
            test_accuracy: Some(0.5),
            rss_bytes: None,
        }
    }

    fn measured(epochs: Vec<EpochSummary>, chunks: Vec<Chunk>) -> Measurements {
        Measurements {
            epoch_samples: 96,
            test_samples: 32,
            first_step_seconds: Some(2.0),
            epochs,
            chunks,
            warmup: None,
            diverged: None,
            device_memory: None,
            loss_scaling: None,
            rss_baseline_bytes: Some(100 << 20),
            rss_peak_bytes: Some(140 << 20),
            peak_since_baseline: true,
        }
    }

    fn observed_on(device: &str, kind: DeviceKind, m: Measurements) -> Observed {
        Observed {
            data_parallel: None,
            remote: None,
            status: Status::Ok,
            reason: None,
            device: device.into(),
            device_name: "a device".into(),
            device_kind: Some(kind),
            runtime: None,
            device_memory_bytes: None,
            backend_version: "0.22.1".into(),
            threads: 2,
            dataset: "synthetic".into(),
            data: DataKind::Synthetic,
            notes: vec![],
            flops_per_sample: Some(1_000),
            peak: None,
            peak_memory_bytes: Some(1 << 20),
            process_threads: Some(4),
            started_at: 1,
            wall_seconds: 2.0,
            args: vec![],
            measurements: Some(m),
            loop_overhead: None,
        }
    }

    #[test]
    fn a_misspelt_field_from_a_runner_is_an_error_naming_it() {
        let o = observed_on(
            "cpu",
            DeviceKind::Cpu,
            measured(vec![epoch(1, 1.0, false)], vec![]),
        );
        let line = serde_json::to_string(&crate::Event::Observed(Box::new(o))).unwrap();
        let back: crate::Event = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, crate::Event::Observed(_)));
        for (good, bad) in [
            ("\"wall_seconds\"", "\"wall_secnds\""),
            ("\"rss_peak_bytes\"", "\"rss_peak\""),
        ] {
            let wrong = line.replacen(good, bad, 1);
            assert_ne!(wrong, line);
            let err = serde_json::from_str::<crate::Event>(&wrong)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&bad[1..bad.len() - 1]), "{err}");
        }
    }

    #[test]
    fn whole_epochs_after_the_first_are_measured_and_scaled() {
        let m = measured(
            vec![
                epoch(1, 9.0, false),
                epoch(2, 1.0, false),
                epoch(3, 2.0, false),
            ],
            vec![],
        );
        let s = summarize(&m, 60_000, 3, None);
        assert_eq!(s.obtained.method, Method::Measured);
        assert_eq!((s.obtained.epochs, s.obtained.steps), (2, 6));
        let scale = 60_000.0 / 96.0;
        let e = s.epoch_seconds.unwrap();
        assert_eq!((e.min, e.max, e.n), (scale, 2.0 * scale, 2));
        assert_eq!(s.first_epoch_seconds, Some(9.0 * scale));
        assert_eq!(s.images_per_second, Some(60_000.0 / e.median));
        assert_eq!(s.test_accuracy, Some(0.5));
    }

    fn warmup(steady: bool, epoch: usize) -> Warmup {
        Warmup {
            steady,
            steps: 7,
            seconds: 54.2,
            process_seconds: Some(56.0),
            epoch,
            cap_seconds: 60.0,
            step_seconds: vec![54.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
            late_compiles: 0,
            late_compile_seconds: 0.0,
            late_compile_steps: Vec::new(),
            peak_rss_bytes: None,
        }
    }

    #[test]
    fn one_requested_epoch_is_timed_from_steady_state_only() {
        // The epoch holds the warm-up: only its chunks after steady state are timed.
        let chunk = |seconds| Chunk {
            steps: 2,
            samples: 32,
            seconds,
        };
        let mut m = measured(vec![epoch(1, 60.0, false)], vec![chunk(0.2), chunk(0.2)]);
        m.warmup = Some(warmup(true, 1));
        let s = summarize(&m, 96, 1, None);
        assert_eq!(s.obtained.method, Method::Projected);
        assert!((s.epoch_seconds.unwrap().median - 0.6).abs() < 1e-9);
        // Settled in epoch 2: epoch 2 holds warm-up steps and is not timed whole, epoch 3 is.
        let mut m = measured(
            vec![
                epoch(1, 50.0, false),
                epoch(2, 9.0, false),
                epoch(3, 3.0, false),
            ],
            vec![chunk(0.2)],
        );
        m.warmup = Some(warmup(true, 2));
        let s = summarize(&m, 96, 3, None);
        assert_eq!(s.obtained.method, Method::Measured);
        assert_eq!(s.obtained.epochs, 1);
        assert_eq!(s.epoch_seconds.unwrap().median, 3.0);
    }

    #[test]
    fn a_cell_that_never_settled_has_no_time_and_says_why() {
        let mut m = measured(vec![epoch(1, 60.0, true)], vec![]);
        m.warmup = Some(warmup(false, 1));
        let s = summarize(&m, 96, 3, Some(20.0));
        assert!(s.epoch_seconds.is_none() && s.images_per_second.is_none());
        assert_eq!(s.obtained.method, Method::None);
        let note = s.note.unwrap();
        assert!(
            note.contains("not steady") && note.contains("cap 60 s"),
            "{note}"
        );
        let r = observed_on("cpu", DeviceKind::Cpu, m).into_record(
            &CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick),
            Fingerprint::default(),
        );
        assert_eq!(r.status, Status::NotSteady);
        assert!(r.epoch_seconds.is_none() && r.warmup.is_some_and(|w| !w.steady));
    }

    #[test]
    fn a_run_too_short_to_judge_reports_what_it_timed_labelled() {
        // The flex run: 4 steps of 128 samples (512), 0.766, 0.714, 0.746, 0.750 s.
        let mut m = measured(
            vec![EpochSummary {
                steps: 4,
                samples: 512,
                ..epoch(1, 2.98, false)
            }],
            vec![],
        );
        m.epoch_samples = 512;
        m.warmup = Some(Warmup {
            steps: 4,
            seconds: 2.98,
            step_seconds: vec![0.766, 0.714, 0.746, 0.750],
            ..warmup(false, 1)
        });
        let s = summarize(&m, 60_000, 1, None);
        assert_eq!(s.obtained.method, Method::Unjudged);
        // Steps 2-4 (0.7367 s mean) for 128 samples each, scaled to 60,000 samples.
        let expected = (0.714 + 0.746 + 0.750) / 3.0 * 60_000.0 / 128.0;
        assert!((s.epoch_seconds.as_ref().unwrap().median - expected).abs() < 1e-6);
        assert!(s.note.as_deref().unwrap().starts_with("too short to judge"));
        let r = observed_on("cpu", DeviceKind::Cpu, m.clone()).into_record(
            &CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick),
            Fingerprint::default(),
        );
        assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
        assert!(r.reason.unwrap().contains("too short to judge"));
        // The same steps cut by the warm-up cap are a verdict: not steady.
        m.warmup.as_mut().unwrap().cap_seconds = 2.0;
        assert_eq!(summarize(&m, 60_000, 1, None).obtained.method, Method::None);
        // Six steps give the rule its two windows: unsettled then is not steady.
        let w = m.warmup.as_mut().unwrap();
        w.cap_seconds = 60.0;
        w.steps = 6;
        w.step_seconds = vec![2.0, 2.0, 2.0, 1.0, 1.0, 1.0];
        assert!(!too_short_to_judge(w));
    }

    #[test]
    fn a_budget_cut_cell_is_projected_from_its_chunks() {
        let chunk = |seconds| Chunk {
            steps: 2,
            samples: 64,
            seconds,
        };
        let m = measured(
            vec![epoch(1, 3.0, true)],
            vec![chunk(1.0), chunk(2.0), chunk(3.0)],
        );
        let s = summarize(&m, 60_000, 5, Some(30.0));
        assert_eq!(s.obtained.method, Method::Projected);
        assert!(s.obtained.budget_exhausted);
        assert_eq!(s.obtained.steps, 6);
        assert_eq!(s.first_epoch_seconds, None);
        assert_eq!(s.epoch_seconds.unwrap().median, 2.0 / 64.0 * 60_000.0);
    }

    #[test]
    fn a_diverged_cell_reports_no_time_and_says_why() {
        let mut m = measured(vec![epoch(1, 1.0, false)], vec![]);
        m.diverged = Some("the training loss became NaN in epoch 1".into());
        let s = summarize(&m, 60_000, 3, None);
        assert_eq!((s.epoch_seconds, s.obtained.method), (None, Method::None));

        let request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        let mut observed = observed_on("cpu", DeviceKind::Cpu, m);
        observed.notes = vec!["a note".into()];
        let r = observed.into_record(&request, Fingerprint::default());
        assert_eq!(r.status, Status::Diverged);
        assert_eq!(
            r.reason.as_deref(),
            Some("the training loss became NaN in epoch 1; a note")
        );
        assert_eq!(r.device, "cpu");
        assert_eq!(r.fingerprint.backend_version, "0.22.1");
        assert_eq!(r.fingerprint.gpu_name, None);
    }

    #[test]
    fn time_to_accuracy_sums_the_epochs_until_the_target_or_says_how_far_it_got() {
        let mut epochs = vec![
            epoch(1, 9.0, false),
            epoch(2, 1.0, false),
            epoch(3, 2.0, false),
        ];
        epochs[0].test_accuracy = Some(0.6);
        epochs[1].test_accuracy = Some(0.81);
        epochs[2].test_accuracy = Some(0.79);
        let t = time_to_accuracy(&epochs, 0.8);
        assert_eq!((t.seconds, t.epoch), (Some(10.0), Some(2)));
        let t = time_to_accuracy(&epochs, 0.9);
        assert_eq!((t.seconds, t.best), (None, Some(0.81)));
        assert_eq!(
            t.not_reached().unwrap(),
            "not reached in 3 epochs (best 81.0%)"
        );
        epochs.truncate(1);
        epochs[0].partial = true;
        let t = time_to_accuracy(&epochs, 0.8);
        assert_eq!(
            t.not_reached().unwrap(),
            "not reached in 1 epoch, budget exhausted (best 60.0%)"
        );
        // Through a record: the request asks, the record answers.
        let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
        request.settings.target_accuracy = Some(0.5);
        let m = measured(vec![epoch(1, 3.0, false), epoch(2, 1.0, false)], vec![]);
        let r =
            observed_on("cpu", DeviceKind::Cpu, m).into_record(&request, Fingerprint::default());
        assert_eq!(r.time_to_accuracy.unwrap().seconds, Some(3.0));
    }

    #[test]
    fn a_gpu_cell_names_its_gpu_in_the_fingerprint() {
        let request = CellRequest::new(ModelKind::ResNet18, "pytorch", Profile::Full);
        let mut m = measured(vec![epoch(1, 2.0, false), epoch(2, 1.0, false)], vec![]);
        m.epoch_samples = 500;
        let mut observed = observed_on("cuda:0", DeviceKind::DiscreteGpu, m);
        observed.device_name = "NVIDIA H200".into();
        observed.runtime = Some(Runtime {
            driver: Some("13.0".into()),
            compute_capability: Some("9.0".into()),
            ..Runtime::default()
        });
        observed.device_memory_bytes = Some(140 << 30);
        observed.flops_per_sample = Some(222_000_000);
        let r = observed.into_record(&request, Fingerprint::default());
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.obtained.standard_epoch_samples, 50_000);
        assert_eq!(r.fingerprint.gpu_name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(r.fingerprint.gpu_memory_bytes, Some(140 << 30));
        assert_eq!(r.fingerprint.gpu_compute_capability.as_deref(), Some("9.0"));
        let memory = r.training_memory.as_ref().unwrap();
        assert_eq!(memory.training_bytes(), Some(40 << 20));
        let ips = r.images_per_second.unwrap();
        assert!((r.achieved_gflops.unwrap() - ips * 0.222).abs() < 1e-9);
    }
}
