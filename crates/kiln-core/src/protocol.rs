//! The training protocol: one cell, timed honestly.
//!
//! The dataset is uploaded once; each epoch uploads only its shuffled index order and batches
//! are gathered on the device. Clocks are read after a device sync: at epoch boundaries, after
//! the very first step (warm-up), and about ten times per epoch (chunks) so that a cell cut
//! short by its budget can be projected from steady-state steps. Test accuracy is evaluated
//! outside the timed region.

use std::time::{Duration, Instant};

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::FloatDType;

use kiln_data::{Dataset, rng};
use kiln_results::{
    Chunk, DeviceMemory, EpochSummary, Event, LoopOverhead, Measurements, Progress, Start, Stats,
};

use crate::CoreError;
use crate::amp::{self, LossScaler};
use crate::models::Classifier;

/// The knobs of the protocol (the article's: Adam 1e-3, batch 128, 20 epochs).
#[derive(Debug, Clone)]
pub struct Protocol {
    pub epochs: usize,
    pub batch_size: usize,
    /// Training time allowed to the cell; when it runs out the cell stops and is projected.
    pub budget: Option<Duration>,
    pub seed: u64,
    pub learning_rate: f64,
    /// Test samples evaluated after each epoch (all when `None`).
    pub eval_limit: Option<usize>,
    /// Steps timed after the warm-up step before a budget may stop the cell.
    pub min_timed_steps: usize,
    /// Fault injection for tests: the loss of this (1-based) step of the cell is made NaN.
    pub inject_nan_at_step: Option<usize>,
    /// Gradient accumulation: each batch runs as this many micro-batches, one optimizer step.
    pub accum_steps: usize,
    /// Mixed precision: the compute type of forward and backward (f32 master weights, dynamic
    /// loss scaling); `None` computes in the device's float type.
    pub amp: Option<FloatDType>,
}

impl Protocol {
    /// The protocol a cell request asks for.
    pub fn from_request(request: &kiln_results::CellRequest) -> Protocol {
        Protocol {
            epochs: request.epochs,
            batch_size: request.batch_size,
            budget: request.budget(),
            seed: request.seed,
            eval_limit: request.eval_limit,
            inject_nan_at_step: request.inject_nan_at_step,
            accum_steps: request.accum_steps,
            amp: crate::runner::amp_dtype(request.precision),
            ..Protocol::default()
        }
    }
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol {
            epochs: 20,
            batch_size: 128,
            budget: None,
            seed: 42,
            learning_rate: 1e-3,
            eval_limit: None,
            min_timed_steps: 2,
            inject_nan_at_step: None,
            accum_steps: 1,
            amp: None,
        }
    }
}

/// Receives the events of a running cell (the runner prints them as JSON lines).
pub trait Sink {
    /// Called for each event, in order.
    fn event(&mut self, event: &Event);
}

impl<F: FnMut(&Event)> Sink for F {
    fn event(&mut self, event: &Event) {
        self(event)
    }
}

/// The dataset as device tensors, uploaded once.
pub struct DeviceData {
    train_x: Tensor<4>,
    train_y: Tensor<1, Int>,
    test_x: Tensor<4>,
    test_y: Tensor<1, Int>,
    pub train_len: usize,
    pub test_len: usize,
}

impl DeviceData {
    /// Upload `data` (train split to `device`, test split to its non-autodiff twin).
    pub fn upload(data: &Dataset, device: &Device, eval_limit: Option<usize>) -> DeviceData {
        let g = data.geometry;
        let test = data
            .test
            .clone()
            .truncated(eval_limit.unwrap_or(usize::MAX), g);
        let images = |split: &kiln_data::Split, device: &Device| {
            Tensor::<4>::from_data(
                TensorData::new(
                    data.normalized(split),
                    [split.len(), g.channels, g.height, g.width],
                ),
                device,
            )
        };
        let labels = |split: &kiln_data::Split, device: &Device| {
            let values: Vec<i64> = split.labels.iter().map(|&l| i64::from(l)).collect();
            Tensor::<1, Int>::from_data(TensorData::new(values, [split.len()]), device)
        };
        let eval_device = device.clone().without_autodiff();
        DeviceData {
            train_x: images(&data.train, device),
            train_y: labels(&data.train, device),
            test_x: images(&test, &eval_device),
            test_y: labels(&test, &eval_device),
            train_len: data.train.len(),
            test_len: test.len(),
        }
    }
}

/// The protocol's optimizer: Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8; Burn's
/// default eps is 1e-5).
pub fn adam() -> ModuleOptimizer {
    AdamConfig::new().with_epsilon(1e-8).init()
}

/// The model, its optimizer and its loss: one training step at a time.
pub struct Trainer<M: Classifier> {
    model: Option<M>,
    optim: ModuleOptimizer,
    loss: CrossEntropyLoss,
    learning_rate: f64,
    accum_steps: usize,
    amp: Option<(FloatDType, LossScaler)>,
}

impl<M: Classifier> Trainer<M> {
    /// A trainer with [`adam`].
    pub fn new(model: M, device: &Device, learning_rate: f64) -> Self {
        Trainer {
            model: Some(model),
            optim: adam(),
            loss: CrossEntropyLossConfig::new().init(device),
            learning_rate,
            accum_steps: 1,
            amp: None,
        }
    }

    /// Train in mixed precision: forward and backward in `dtype`, f32 master weights and
    /// optimizer state, loss scaled by `scaler`.
    pub fn with_amp(mut self, dtype: FloatDType, scaler: LossScaler) -> Self {
        self.amp = Some((dtype, scaler));
        self
    }

    /// The loss scaler of a mixed-precision trainer.
    pub fn scaler(&self) -> Option<&LossScaler> {
        self.amp.as_ref().map(|(_, s)| s)
    }

    /// The model the forward pass runs (the master model cast in the graph under amp), and the
    /// input type it takes.
    fn compute_model(&self, model: &M) -> (Option<M>, Option<FloatDType>) {
        match &self.amp {
            Some((dtype, _)) => (Some(amp::cast_model(model, *dtype)), Some(*dtype)),
            None => (None, None),
        }
    }

    /// Run each batch as `steps` micro-batches whose gradients are summed before one update.
    pub fn with_accumulation(mut self, steps: usize) -> Self {
        self.accum_steps = steps.max(1);
        self
    }

    /// Gradients of the batch `indices` (the mean loss over the whole batch), computed in
    /// `accum_steps` micro-batches, each weighted by its share of the batch so their sum is the
    /// full batch's gradient. Returns them with the batch's mean loss (on the device).
    pub fn gradients(
        &self,
        model: &M,
        data: &DeviceData,
        indices: Tensor<1, Int>,
    ) -> (GradientsParams, Tensor<1>) {
        let [len] = indices.dims();
        let micro = len.div_ceil(self.accum_steps).max(1);
        let scale = self.scaler().map(LossScaler::scale);
        let scaled = |loss: &Tensor<1>| match scale {
            Some(s) => loss.clone().mul_scalar(s),
            None => loss.clone(),
        };
        // Mean loss of `part` weighted by its share of the batch, in f32 (as autocast does).
        // Under amp the cast of the master model is part of each micro-batch's own graph: a
        // backward pass consumes the graph it runs through, so a cast shared by two
        // micro-batches would be gone for the second one.
        let micro_loss = |part: Tensor<1, Int>, share: f64| {
            let (cast, input_dtype) = self.compute_model(model);
            let forward_model = cast.as_ref().unwrap_or(model);
            let mut x = data.train_x.clone().select(0, part.clone());
            if let Some(dtype) = input_dtype {
                x = x.cast(dtype);
            }
            let y = data.train_y.clone().select(0, part);
            let logits = forward_model.forward(x).cast(FloatDType::F32);
            self.loss.forward(logits, y).mul_scalar(share)
        };
        if micro >= len {
            let loss = micro_loss(indices, 1.0);
            return (
                GradientsParams::from_grads(scaled(&loss).backward(), model),
                loss.detach(),
            );
        }
        let mut accumulator = GradientsAccumulator::<M>::new();
        let mut total: Option<Tensor<1>> = None;
        let mut start = 0;
        while start < len {
            let end = (start + micro).min(len);
            let part = indices.clone().slice(start..end);
            let share = (end - start) as f64 / len as f64;
            let loss = micro_loss(part, share);
            let grads = GradientsParams::from_grads(scaled(&loss).backward(), model);
            accumulator.accumulate(model, grads);
            let loss = loss.detach();
            total = Some(match total {
                Some(t) => t + loss,
                None => loss,
            });
            start = end;
        }
        let total = total.expect("a batch has at least one micro-batch");
        (accumulator.grads(), total)
    }

    /// The model as it is now.
    pub fn model(&self) -> &M {
        self.model
            .as_ref()
            .expect("the model is only taken out during a step")
    }

    /// Forward, loss, backward and Adam update on the samples `indices` of the training set.
    /// Returns the batch's mean loss (still on the device).
    pub fn step(&mut self, data: &DeviceData, indices: Tensor<1, Int>) -> Tensor<1> {
        self.step_with(data, indices, |_, _| {})
    }

    /// [`Trainer::step`] with `edit` applied to the gradients before the update (how `verify`'s
    /// tests inject a wrong gradient).
    pub fn step_with(
        &mut self,
        data: &DeviceData,
        indices: Tensor<1, Int>,
        edit: impl FnOnce(&M, &mut GradientsParams),
    ) -> Tensor<1> {
        let model = self
            .model
            .take()
            .expect("the model is only taken out during a step");
        let (mut grads, loss) = self.gradients(&model, data, indices);
        edit(&model, &mut grads);
        let apply = match &mut self.amp {
            None => true,
            Some((_, scaler)) => {
                // One scalar read per step: the step may only be applied if no gradient
                // overflowed (GradScaler reads its inf flag the same way).
                let finite = amp::unscale(&model, &mut grads, scaler.scale())
                    .map(|total| read_scalar(total).is_ok_and(f64::is_finite))
                    .unwrap_or(true);
                scaler.update(finite)
            }
        };
        self.model = Some(if apply {
            self.optim.step(self.learning_rate, model, grads)
        } else {
            model
        });
        loss
    }

    /// Fraction of the (possibly truncated) test set classified correctly, in batches of `batch`.
    pub fn test_accuracy(&self, data: &DeviceData, batch: usize) -> Result<f64, CoreError> {
        if data.test_len == 0 {
            return Ok(0.0);
        }
        let model = self.model().valid();
        // Under amp, evaluation runs in the compute type, as under autocast.
        let input_dtype = self.amp.as_ref().map(|(d, _)| *d);
        let model = match input_dtype {
            Some(dtype) => amp::cast_model(&model, dtype),
            None => model,
        };
        let mut correct: Option<Tensor<1, Int>> = None;
        let mut start = 0;
        while start < data.test_len {
            let end = (start + batch).min(data.test_len);
            let mut x = data.test_x.clone().slice(start..end);
            if let Some(dtype) = input_dtype {
                x = x.cast(dtype);
            }
            let y = data.test_y.clone().slice(start..end);
            let predicted = model.forward(x).argmax(1).reshape([end - start]);
            let hits = predicted.equal(y).int().sum();
            correct = Some(match correct {
                Some(c) => c + hits,
                None => hits,
            });
            start = end;
        }
        let correct = correct.map_or(Ok(0i64), read_count)?;
        Ok(correct as f64 / data.test_len as f64)
    }
}

/// A budget-cut cell gets at least this many chunks: a chunk closes after a twelfth of the
/// budget even before its steps are done.
pub(crate) const CHUNKS_PER_BUDGET: u32 = 12;

/// The state of a cell while it trains.
struct Run<'a, M: Classifier> {
    device: &'a Device,
    data: &'a DeviceData,
    protocol: &'a Protocol,
    trainer: Trainer<M>,
    started: Instant,
    last_progress: Instant,
    mark: Instant,
    steps_done: usize,
    steps_per_epoch: usize,
    first_step_seconds: Option<f64>,
    chunks: Vec<Chunk>,
    device_memory: Option<DeviceMemory>,
}

fn sync(device: &Device) -> Result<(), CoreError> {
    device
        .sync()
        .map_err(|e| CoreError::Device(format!("device sync failed: {e}")))
}

/// Fold `device`'s memory pool usage now into the peaks in `peak` (devices that report one).
pub(crate) fn sample_device_memory(device: &Device, peak: &mut Option<DeviceMemory>) {
    if let Some(usage) = device.memory_pool_usage() {
        let peak = peak.get_or_insert(DeviceMemory {
            peak_in_use_bytes: 0,
            peak_reserved_bytes: 0,
        });
        peak.peak_in_use_bytes = peak.peak_in_use_bytes.max(usage.bytes_in_use);
        peak.peak_reserved_bytes = peak.peak_reserved_bytes.max(usage.bytes_reserved);
    }
}

/// The count a one-element integer tensor holds (correct predictions).
pub(crate) fn read_count(t: Tensor<1, Int>) -> Result<i64, CoreError> {
    let data = t
        .try_into_data()
        .map_err(|e| CoreError::Device(format!("reading test accuracy: {e}")))?;
    Ok(data.iter::<i64>().next().unwrap_or(0))
}

pub(crate) fn read_scalar(t: Tensor<1>) -> Result<f64, CoreError> {
    let data = t
        .cast(FloatDType::F32)
        .try_into_data()
        .map_err(|e| CoreError::Device(format!("reading the loss: {e}")))?;
    Ok(data.iter::<f32>().next().map(f64::from).unwrap_or(f64::NAN))
}

impl<'a, M: Classifier> Run<'a, M> {
    /// A cell about to train `model` on `data` under `protocol`; its clocks start now.
    fn new(model: M, device: &'a Device, data: &'a DeviceData, protocol: &'a Protocol) -> Self {
        let now = Instant::now();
        Run {
            device,
            data,
            protocol,
            trainer: {
                let t = Trainer::new(model, device, protocol.learning_rate)
                    .with_accumulation(protocol.accum_steps);
                match protocol.amp {
                    Some(dtype) => t.with_amp(dtype, LossScaler::default()),
                    None => t,
                }
            },
            started: now,
            last_progress: now,
            mark: now,
            steps_done: 0,
            steps_per_epoch: data.train_len.div_ceil(protocol.batch_size),
            first_step_seconds: None,
            chunks: Vec::new(),
            device_memory: None,
        }
    }

    /// True when the budget has run out and enough steps after the warm-up step were timed;
    /// `open_steps` are the steps of the chunk not closed yet.
    fn budget_exhausted(&self, open_steps: usize) -> bool {
        let timed_steps = self.chunks.iter().map(|c| c.steps).sum::<usize>() + open_steps;
        match self.protocol.budget {
            Some(budget) => {
                self.started.elapsed() >= budget
                    && self.first_step_seconds.is_some()
                    && timed_steps >= self.protocol.min_timed_steps
            }
            None => false,
        }
    }

    fn sample_device_memory(&mut self) {
        sample_device_memory(self.device, &mut self.device_memory);
    }

    /// Sync, then close the chunk that began at `self.mark`.
    fn close_chunk(&mut self, steps: usize, samples: usize) -> Result<(), CoreError> {
        sync(self.device)?;
        let now = Instant::now();
        if steps > 0 {
            self.chunks.push(Chunk {
                steps,
                samples,
                seconds: (now - self.mark).as_secs_f64(),
            });
        }
        self.mark = now;
        self.sample_device_memory();
        Ok(())
    }

    fn eta(&self, epoch: usize, step: usize) -> Option<f64> {
        let per_step = self
            .chunks
            .last()
            .map(|c| c.seconds / c.steps as f64)
            .or_else(|| {
                (self.steps_done > 0)
                    .then(|| self.started.elapsed().as_secs_f64() / self.steps_done as f64)
            })?;
        let total = self.protocol.epochs * self.steps_per_epoch;
        let done = epoch * self.steps_per_epoch + step;
        let mut eta = per_step * total.saturating_sub(done) as f64;
        if let Some(budget) = self.protocol.budget {
            let left = (budget.as_secs_f64() - self.started.elapsed().as_secs_f64()).max(0.0);
            eta = eta.min(left + per_step);
        }
        Some(eta)
    }

    /// One epoch of the Kiln loop. Returns the summary and whether the budget cut it short.
    fn epoch(
        &mut self,
        epoch: usize,
        sink: &mut dyn Sink,
    ) -> Result<(EpochSummary, bool), CoreError> {
        let n = self.data.train_len;
        let batch = self.protocol.batch_size;
        let order = rng::epoch_permutation(n, self.protocol.seed, epoch);
        let order = Tensor::<1, Int>::from_data(TensorData::new(order, [n]), self.device);
        let chunk_len = (self.steps_per_epoch / 10).max(1);
        // A slow backend closes chunks by time too, so a budget-cut cell still has several
        // chunks to project from (a projection from fewer than 3 is low confidence).
        let chunk_time = self
            .protocol
            .budget
            .map(|b| b / CHUNKS_PER_BUDGET)
            .unwrap_or(Duration::MAX);
        let mut loss_sum = Tensor::<1>::zeros([1], (self.device, FloatDType::F32.into()));

        sync(self.device)?;
        let t0 = Instant::now();
        self.mark = t0;
        let (mut chunk_steps, mut chunk_samples) = (0, 0);
        let (mut steps, mut samples, mut partial) = (0, 0, false);
        for step in 0..self.steps_per_epoch {
            let start = step * batch;
            let end = (start + batch).min(n);
            let mut loss = self
                .trainer
                .step(self.data, order.clone().slice(start..end));
            if self.protocol.inject_nan_at_step == Some(self.steps_done + 1) {
                loss = loss.mul_scalar(f64::NAN);
            }
            loss_sum = loss_sum
                + loss
                    .detach()
                    .cast(FloatDType::F32)
                    .mul_scalar((end - start) as f64);
            steps += 1;
            samples += end - start;
            self.steps_done += 1;

            if self.first_step_seconds.is_none() {
                // The very first step carries compilation, autotune and cache warm-up.
                sync(self.device)?;
                let now = Instant::now();
                self.first_step_seconds = Some((now - t0).as_secs_f64());
                self.mark = now;
                self.sample_device_memory();
                continue;
            }
            chunk_steps += 1;
            chunk_samples += end - start;
            let last = step + 1 == self.steps_per_epoch;
            if (chunk_steps == chunk_len || self.mark.elapsed() >= chunk_time) && !last {
                self.close_chunk(chunk_steps, chunk_samples)?;
                (chunk_steps, chunk_samples) = (0, 0);
                if !read_scalar(loss_sum.clone())?.is_finite() {
                    break;
                }
            }
            if self.last_progress.elapsed() >= Duration::from_secs(2) {
                self.last_progress = Instant::now();
                sink.event(&Event::Progress(Progress {
                    epoch: epoch + 1,
                    step: step + 1,
                    steps_per_epoch: self.steps_per_epoch,
                    elapsed_seconds: self.started.elapsed().as_secs_f64(),
                    eta_seconds: self.eta(epoch, step + 1),
                }));
            }
            if !last && self.budget_exhausted(chunk_steps) {
                partial = true;
                break;
            }
        }
        self.close_chunk(chunk_steps, chunk_samples)?;
        let seconds = (self.mark - t0).as_secs_f64();
        let mean_loss = read_scalar(loss_sum)? / samples.max(1) as f64;
        Ok((
            EpochSummary {
                epoch: epoch + 1,
                seconds,
                steps,
                samples,
                partial,
                mean_loss,
                test_accuracy: None,
            },
            partial,
        ))
    }
}

/// Train `model` under `protocol` on `data` (already on `device`), reporting to `sink`, and
/// return what was measured (`kiln_results::summarize` derives the numbers of a record).
pub fn train<M: Classifier>(
    model: M,
    device: &Device,
    data: &DeviceData,
    protocol: &Protocol,
    sink: &mut dyn Sink,
) -> Result<Measurements, CoreError> {
    if data.train_len == 0 {
        return Err(CoreError::Config("the training split is empty".into()));
    }
    let mut run = Run::new(model, device, data, protocol);
    // Model, optimizer and data are ready: what the runtime holds now is the baseline, and the
    // peak from here on is training's (the high-water mark is reset where the OS allows it).
    let peak_since_baseline = crate::memory::reset_peak();
    let rss_baseline_bytes = crate::memory::current_rss_bytes();
    let mut epochs: Vec<EpochSummary> = Vec::new();
    let mut diverged = None;
    for epoch in 0..protocol.epochs {
        let (mut summary, partial) = run.epoch(epoch, sink)?;
        if !summary.mean_loss.is_finite() {
            diverged = Some(format!(
                "the training loss became {} in epoch {}",
                summary.mean_loss,
                epoch + 1
            ));
            epochs.push(summary);
            break;
        }
        // Evaluation is outside the timed region (the epoch's clock stopped at its last sync).
        summary.test_accuracy = Some(
            run.trainer
                .test_accuracy(data, protocol.batch_size.max(256))?,
        );
        sink.event(&Event::Epoch(summary.clone()));
        epochs.push(summary);
        if partial {
            break;
        }
    }
    Ok(Measurements {
        epoch_samples: data.train_len,
        test_samples: data.test_len,
        first_step_seconds: run.first_step_seconds,
        epochs,
        chunks: run.chunks,
        diverged,
        device_memory: run.device_memory,
        loss_scaling: run.trainer.scaler().map(LossScaler::summary),
        rss_baseline_bytes,
        rss_peak_bytes: crate::memory::peak_rss_bytes(),
        peak_since_baseline,
    })
}

/// Compare the Kiln loop with a bare loop of the same steps (`--bare`): `rounds` alternations of
/// `steps` steps each, after one warm-up step.
pub fn loop_overhead<M: Classifier>(
    model: M,
    device: &Device,
    data: &DeviceData,
    protocol: &Protocol,
    rounds: usize,
    steps: usize,
) -> Result<LoopOverhead, CoreError> {
    let n = data.train_len;
    let batch = protocol.batch_size;
    let mut run = Run::new(model, device, data, protocol);
    let one_epoch = Protocol {
        epochs: 1,
        budget: None,
        ..protocol.clone()
    };
    let mut kiln = Vec::new();
    let mut bare = Vec::new();
    let mut quiet = |_: &Event| {};
    // Each round: the instrumented Kiln epoch loop over a sub-epoch of `steps` steps, then the
    // bare loop over the same steps, both synced at their ends.
    let sub = DeviceData {
        train_x: data.train_x.clone(),
        train_y: data.train_y.clone(),
        test_x: data.test_x.clone(),
        test_y: data.test_y.clone(),
        train_len: (steps * batch).min(n),
        test_len: 0,
    };
    let order = Tensor::<1, Int>::from_data(
        TensorData::new(rng::epoch_permutation(n, protocol.seed, 0), [n]),
        device,
    );
    // Warm-up.
    let _ = run.trainer.step(data, order.clone().slice(0..batch.min(n)));
    sync(device)?;
    let sub_steps = sub.train_len.div_ceil(batch);
    for round in 0..rounds {
        run.data = &sub;
        run.protocol = &one_epoch;
        run.steps_per_epoch = sub_steps;
        run.first_step_seconds = Some(0.0);
        let t = Instant::now();
        run.epoch(round, &mut quiet)?;
        kiln.push(t.elapsed().as_secs_f64() / sub_steps as f64);

        sync(device)?;
        let t = Instant::now();
        for step in 0..sub_steps {
            let start = step * batch;
            let end = (start + batch).min(sub.train_len);
            let _ = run.trainer.step(&sub, order.clone().slice(start..end));
        }
        sync(device)?;
        bare.push(t.elapsed().as_secs_f64() / sub_steps as f64);
    }
    let kiln_stats = Stats::from_samples(&kiln)
        .ok_or_else(|| CoreError::Config("no overhead rounds ran".into()))?;
    let bare_stats = Stats::from_samples(&bare)
        .ok_or_else(|| CoreError::Config("no overhead rounds ran".into()))?;
    Ok(LoopOverhead {
        rounds,
        steps_per_round: sub_steps,
        overhead_percent: (kiln_stats.median / bare_stats.median - 1.0) * 100.0,
        kiln_step_seconds: kiln_stats,
        bare_step_seconds: bare_stats,
    })
}

/// The `Start` event of a cell.
pub fn start_event(
    model: &str,
    identity: (&str, &str, &str, &str),
    dataset: &Dataset,
    (train_samples, test_samples, steps_per_epoch): (usize, usize, usize),
    protocol: &Protocol,
) -> Event {
    let (backend, device, device_name, precision) = identity;
    Event::Start(Start {
        model: model.into(),
        backend: backend.into(),
        device: device.into(),
        device_name: device_name.into(),
        precision: precision.into(),
        dataset: dataset.name.clone(),
        train_samples,
        test_samples,
        steps_per_epoch,
        epochs: protocol.epochs,
        budget_seconds: protocol.budget.map(|b| b.as_secs_f64()),
    })
}
