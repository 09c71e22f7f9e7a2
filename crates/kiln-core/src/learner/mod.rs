//! `--loop learner`: the protocol trained through burn-train's supervised training (its
//! `Learner`, dataloader, loss and accuracy metrics and event processing), on one device or
//! data-parallel on several, timed by the same rules as Kiln's loop.
//!
//! burn-train owns the loop, so the clocks are read where Kiln's code runs inside it: each
//! time the Learner's dataloader hands a batch to Kiln's batcher, after a sync of every
//! device. A training epoch runs from its first batch to the first batch of its validation;
//! the validation (test accuracy) is outside the timed region, as in Kiln's loop. The very
//! first step is reported apart, chunks of steps let a budget-cut cell be projected, and a
//! cut is made through burn-train's `Interrupter`.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset as BurnDataset, DatasetError};
use burn::prelude::*;
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{ExecutionStrategy, Interrupter, Learner, MultiDeviceOptim, SupervisedTraining};

use kiln_contract::{Event, Measurements};
use kiln_data::Dataset;

pub(crate) mod clock;
mod silent;
mod steps;

use clock::{Batch, Clock, ClockState, Message};
use silent::Silent;

use crate::CoreError;
use crate::device::read_count;
use crate::models::Classifier;
use crate::protocol::Protocol;
use crate::sink::Sink;

/// How burn-train spreads a data-parallel cell over its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One device: burn-train's single-device strategy.
    Single,
    /// `ExecutionStrategy::MultiDevice` with the optimizer on the first device: each device
    /// trains its own batch, the gradients are summed on the first device, one step.
    MultiDevice,
    /// `ExecutionStrategy::DistributedDataParallel`: gradients all-reduced (mean) between the
    /// devices; needs collectives (CubeCL CUDA through NCCL).
    Ddp,
}

impl Strategy {
    /// The strategy for `devices` on a backend that has (`collectives`) or lacks collectives.
    pub fn for_devices(devices: usize, collectives: bool) -> Strategy {
        match (devices, collectives) {
            (0 | 1, _) => Strategy::Single,
            (_, true) => Strategy::Ddp,
            (_, false) => Strategy::MultiDevice,
        }
    }

    /// The name records carry.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Single => "single-device",
            Strategy::MultiDevice => "multi-device",
            Strategy::Ddp => "ddp",
        }
    }
}

/// One training or test sample, as burn-train's dataloader handles them.
#[derive(Debug, Clone)]
pub struct Sample {
    pixels: Vec<f32>,
    label: i64,
}

/// A split of the dataset, normalised once, from which the dataloader copies samples.
struct HostSplit {
    pixels: Vec<f32>,
    labels: Vec<u8>,
    sample_len: usize,
    geometry: kiln_contract::Geometry,
}

impl HostSplit {
    fn new(data: &Dataset, split: &kiln_data::Split) -> HostSplit {
        let g = data.geometry;
        HostSplit {
            pixels: data.normalized(split),
            labels: split.labels.clone(),
            sample_len: g.channels * g.height * g.width,
            geometry: g,
        }
    }

    /// The image shape of `n` samples.
    fn shape(&self, n: usize) -> [usize; 4] {
        let g = self.geometry;
        [n, g.channels, g.height, g.width]
    }
}

impl BurnDataset<Sample> for HostSplit {
    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        let label = *self.labels.get(index).ok_or_else(|| {
            DatasetError::new(std::io::Error::other(format!(
                "sample {index} of a split of {}",
                self.labels.len()
            )))
        })?;
        let start = index * self.sample_len;
        Ok(Sample {
            pixels: self.pixels[start..start + self.sample_len].to_vec(),
            label: i64::from(label),
        })
    }

    fn len(&self) -> usize {
        self.labels.len()
    }
}

/// A split shared by the validation loader and the test of a cut epoch.
struct Shared(Arc<HostSplit>);

impl BurnDataset<Sample> for Shared {
    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        self.0.get(index)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Fraction of `split` that `model` classifies correctly, in batches of `batch` on `device`.
fn accuracy<M: Classifier>(
    model: &M,
    split: &HostSplit,
    device: &Device,
    batch: usize,
) -> Result<f64, CoreError> {
    let n = split.labels.len();
    if n == 0 {
        return Ok(0.0);
    }
    let len = split.sample_len;
    let mut correct = 0i64;
    let mut start = 0;
    while start < n {
        let end = (start + batch).min(n);
        let x = Tensor::<4>::from_data(
            TensorData::new(
                split.pixels[start * len..end * len].to_vec(),
                split.shape(end - start),
            ),
            device,
        );
        let labels: Vec<i64> = split.labels[start..end]
            .iter()
            .map(|&l| i64::from(l))
            .collect();
        let y = Tensor::<1, Int>::from_data(TensorData::new(labels, [end - start]), device);
        let hits = model
            .forward(x)
            .argmax(1)
            .reshape([end - start])
            .equal(y)
            .int()
            .sum();
        correct += read_count(hits)?;
        start = end;
    }
    Ok(correct as f64 / n as f64)
}

/// Which loader a batcher serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Train,
    Valid,
}

/// Builds batches on the dataloader's device, and reads the cell's clock before each.
struct KilnBatcher {
    clock: Arc<Clock>,
    role: Role,
    shape: [usize; 3],
}

impl Batcher<Sample, Batch> for KilnBatcher {
    fn batch(&self, items: Vec<Sample>, device: &Device) -> Batch {
        match self.role {
            Role::Train => self.clock.train_batch(items.len()),
            Role::Valid => self.clock.valid_batch(),
        }
        let n = items.len();
        let [c, h, w] = self.shape;
        let mut pixels = Vec::with_capacity(n * c * h * w);
        let mut labels = Vec::with_capacity(n);
        for s in items {
            pixels.extend_from_slice(&s.pixels);
            labels.push(s.label);
        }
        Batch {
            images: Tensor::from_data(TensorData::new(pixels, [n, c, h, w]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
            clock: self.clock.clone(),
        }
    }
}

/// Train `model` under `protocol` through burn-train on `devices` (autodiff devices; several
/// for a data-parallel cell, the first holding the optimizer), reporting to `sink`.
pub fn train<M: Classifier>(
    model: M,
    devices: &[Device],
    strategy: Strategy,
    data: &Dataset,
    protocol: &Protocol,
    sink: &mut dyn Sink,
) -> Result<(Measurements, Option<f64>), CoreError> {
    let main = devices
        .first()
        .ok_or_else(|| CoreError::Config("a learner cell needs a device".into()))?
        .clone();
    let g = data.geometry;
    let test = test_split_of(data, protocol)?;
    let (train_len, test_len) = (data.train.len(), test.len());
    let batch = protocol.batch_size;
    let n = devices.len().max(1);
    let steps_per_epoch = train_len.div_ceil(n).div_ceil(batch);
    let interrupter = Interrupter::new();
    let (events, received) = mpsc::channel();
    let clock = new_clock(
        devices,
        protocol,
        (steps_per_epoch, test_len),
        interrupter.clone(),
        events,
    );
    let shape = [g.channels, g.height, g.width];
    let test_split = Arc::new(HostSplit::new(data, &test));
    let loader_train = DataLoaderBuilder::new(KilnBatcher {
        clock: clock.clone(),
        role: Role::Train,
        shape,
    })
    .batch_size(batch)
    .shuffle(protocol.settings.seed)
    .set_device(main.clone())
    .build(HostSplit::new(data, &data.train));
    let loader_valid = DataLoaderBuilder::new(KilnBatcher {
        clock: clock.clone(),
        role: Role::Valid,
        shape,
    })
    .batch_size(batch.max(256))
    .set_device(main.clone().without_autodiff())
    .build(Shared(test_split.clone()));

    // burn-train's default loggers write the metrics and its log there, as for any user.
    let workdir = std::env::temp_dir().join(format!("kiln-learner-{}", std::process::id()));
    let workdir_run = workdir.clone();
    let main_device = main.clone();
    let (epochs, learning_rate) = (protocol.settings.epochs, protocol.settings.learning_rate);
    let all_devices = devices.to_vec();
    // burn-train's training is not `Send`: it is put together on the thread that runs it.
    let launch = move || {
        let execution = execution(strategy, main_device, all_devices);
        let training = SupervisedTraining::new(&workdir_run, loader_train, loader_valid)
            .metrics((LossMetric::new(), AccuracyMetric::new()))
            .num_epochs(epochs)
            .with_training_strategy(execution.into())
            .with_interrupter(interrupter)
            .renderer(Box::new(Silent));
        let model = steps::Learned { net: model };
        training.launch(Learner::new(model, crate::protocol::adam(), learning_rate))
    };

    let peak_since_baseline = kiln_machine::process::reset_peak();
    let rss_baseline_bytes = kiln_machine::process::current_rss_bytes(None);
    // burn-train runs on its own thread so that its events reach the sink (not `Send`) here.
    let outcome = std::thread::scope(|scope| {
        let worker = scope.spawn({
            let clock = clock.clone();
            let test_split = test_split.clone();
            let eval_device = main.clone().without_autodiff();
            move || {
                let result = launch();
                let error = result.error.map(|e| e.to_string());
                finish(&clock, &result.model.net, &test_split, &eval_device, batch);
                error
            }
        });
        pump(&received, &worker, sink);
        match worker.join() {
            Ok(error) => error,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    let _ = std::fs::remove_dir_all(&workdir);
    let mut s = clock.lock();
    if let Some(error) = s.error.take().or(outcome) {
        return Err(CoreError::Device(format!("burn-train stopped: {error}")));
    }
    Ok(measurements(
        &mut s,
        (train_len, test_len),
        rss_baseline_bytes,
        peak_since_baseline,
    ))
}

/// The test split a learner cell validates on (cut to the eval limit); an error when either
/// split is empty.
fn test_split_of(data: &Dataset, protocol: &Protocol) -> Result<kiln_data::Split, CoreError> {
    let g = data.geometry;
    let test = data
        .test
        .clone()
        .truncated(protocol.settings.eval_limit.unwrap_or(usize::MAX), g);
    if data.train.is_empty() {
        return Err(CoreError::Config("the training split is empty".into()));
    }
    // An epoch ends where its validation starts: without a test split the clock could not
    // tell one epoch from the next.
    if test.is_empty() {
        return Err(CoreError::Config(
            "--loop learner needs a test split (this dataset has none): use --loop kiln".into(),
        ));
    }
    Ok(test)
}

/// burn-train's execution strategy for `strategy` over the devices, `main` first.
fn execution(strategy: Strategy, main: Device, all: Vec<Device>) -> ExecutionStrategy {
    match strategy {
        Strategy::Single => ExecutionStrategy::SingleDevice(main),
        Strategy::MultiDevice => {
            ExecutionStrategy::MultiDevice(all, MultiDeviceOptim::OptimMainDevice)
        }
        Strategy::Ddp => ExecutionStrategy::ddp(
            all,
            burn::tensor::distributed::DistributedConfig {
                all_reduce_op: burn::tensor::distributed::ReduceOperation::Mean,
            },
        ),
    }
}

/// The clock burn-train's batcher reads: every device, the protocol's rules and budget, the
/// epoch's steps and the test split's size, the channel its events go through.
fn new_clock(
    devices: &[Device],
    protocol: &Protocol,
    (steps_per_epoch, test_len): (usize, usize),
    interrupter: Interrupter,
    events: mpsc::Sender<Message>,
) -> Arc<Clock> {
    let now = Instant::now();
    Arc::new(Clock {
        state: Mutex::new(ClockState {
            devices: devices.to_vec(),
            budget: protocol.settings.budget(),
            min_timed_steps: protocol.timing.min_timed_steps,
            inject_nan_at_step: protocol.inject_nan_at_step,
            steps_per_epoch,
            chunk_len: protocol.timing.chunk_steps(steps_per_epoch),
            chunk_time: protocol
                .timing
                .chunk_time(protocol.settings.budget())
                .unwrap_or(Duration::MAX),
            interrupter: interrupter.clone(),
            events,
            launched: now,
            started: None,
            last_progress: now,
            epoch_start: None,
            epoch: 0,
            calls: 0,
            samples: 0,
            steps_done: 0,
            mark: now,
            chunk_steps: 0,
            chunk_samples: 0,
            warmup: crate::warmup::WarmupClock::new(
                protocol.timing,
                protocol.settings.warmup_cap(),
                protocol.inject_slow_steps,
            ),
            chunks: Vec::new(),
            loss_sums: Vec::new(),
            hits: None,
            in_validation: false,
            stopped: false,
            partial: false,
            epochs: Vec::new(),
            pending: None,
            device_memory: None,
            setup_seconds: None,
            test_len,
            error: None,
        }),
    })
}

/// On burn-train's thread once it returns: the last validation closed, and the model tested
/// when a cut left its last epoch without a test accuracy; then the end is signalled.
fn finish<M: Classifier>(
    clock: &Clock,
    model: &M,
    test_split: &Arc<HostSplit>,
    eval_device: &Device,
    batch: usize,
) {
    let mut s = clock.lock();
    if s.in_validation {
        // The last epoch's validation ran to its end.
        s.finish_validation();
    }
    // burn-train validates no epoch a cut stopped: test the model it returned.
    let untested = s
        .epochs
        .last()
        .is_some_and(|e| e.test_accuracy.is_none() && e.mean_loss.is_finite());
    if untested && s.error.is_none() {
        match accuracy(model, test_split, eval_device, batch.max(256)) {
            Ok(a) => {
                if let Some(last) = s.epochs.last_mut() {
                    last.test_accuracy = Some(a);
                    let summary = last.clone();
                    let _ = s.events.send(Message::Event(Event::Epoch(summary)));
                }
            }
            Err(e) => s.fail(e.to_string()),
        }
    }
    let _ = s.events.send(Message::Done);
}

/// Hand burn-train's events to `sink` (on this thread: the sink is not `Send`) until it is
/// done.
fn pump<T>(
    received: &mpsc::Receiver<Message>,
    worker: &std::thread::ScopedJoinHandle<'_, T>,
    sink: &mut dyn Sink,
) {
    loop {
        match received.recv_timeout(Duration::from_millis(200)) {
            Ok(Message::Event(e)) => sink.event(&e),
            Ok(Message::Done) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) if worker.is_finished() => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
    while let Ok(Message::Event(e)) = received.try_recv() {
        sink.event(&e);
    }
}

/// What the clock measured, as the record's measurements, and burn-train's set-up time.
fn measurements(
    s: &mut ClockState,
    (train_len, test_len): (usize, usize),
    rss_baseline_bytes: Option<u64>,
    peak_since_baseline: bool,
) -> (Measurements, Option<f64>) {
    let epochs = std::mem::take(&mut s.epochs);
    let diverged = epochs.iter().find(|e| !e.mean_loss.is_finite()).map(|e| {
        format!(
            "the training loss became {} in epoch {}",
            e.mean_loss, e.epoch
        )
    });
    (
        Measurements {
            epoch_samples: train_len,
            test_samples: test_len,
            first_step_seconds: s.warmup.first_step_seconds(),
            warmup: s.warmup.summary(),
            epochs,
            chunks: std::mem::take(&mut s.chunks),
            diverged,
            device_memory: s.device_memory.take(),
            loss_scaling: None,
            rss_baseline_bytes,
            rss_peak_bytes: kiln_machine::process::peak_rss_bytes(),
            peak_since_baseline,
        },
        s.setup_seconds,
    )
}
