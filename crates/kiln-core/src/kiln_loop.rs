//! Kiln's training loop: one cell under the [`Protocol`], its clocks read after a device sync
//! (see the protocol's module), and the loop-overhead measurement (`--bare`).

use std::time::{Duration, Instant};

use burn::prelude::*;
use burn::tensor::FloatDType;

use kiln_contract::{
    Chunk, DeviceMemory, EpochSummary, Event, LoopOverhead, Measurements, Progress, Stats,
};
use kiln_data::rng;

use crate::CoreError;
use crate::amp::LossScaler;
use crate::data::DeviceData;
use crate::device::{read_scalar, sample_device_memory, sync};
use crate::models::Classifier;
use crate::protocol::Protocol;
use crate::replay::ReplayDevice;
use crate::sink::Sink;
use crate::trainer::Trainer;
use crate::warmup::{WarmupClock, WarmupPhase};

/// A chunk not closed yet: its steps, samples and late compiles' seconds.
type Open = (usize, usize, f64);

/// The state of a cell while it trains.
struct Training<'a, M: Classifier> {
    device: &'a Device,
    data: &'a DeviceData,
    protocol: &'a Protocol,
    trainer: Trainer<M>,
    started: Instant,
    last_progress: Instant,
    mark: Instant,
    steps_done: usize,
    steps_per_epoch: usize,
    warmup: WarmupClock,
    chunks: Vec<Chunk>,
    device_memory: Option<DeviceMemory>,
    /// A replayed cell's device, and the loss its steps report (`gpu-kit --replay`).
    replay: Option<(ReplayDevice, Tensor<1>)>,
}

impl<'a, M: Classifier> Training<'a, M> {
    /// A cell about to train `model` on `data` under `protocol`; its clocks start now.
    fn new(model: M, device: &'a Device, data: &'a DeviceData, protocol: &'a Protocol) -> Self {
        let now = Instant::now();
        Training {
            device,
            data,
            protocol,
            trainer: {
                let t = Trainer::new(model, device, protocol.settings.learning_rate)
                    .with_accumulation(protocol.settings.accum_steps);
                match protocol.amp {
                    Some(dtype) => t.with_amp(
                        dtype,
                        (protocol.loss_scaling != Some(kiln_contract::LossScalingMode::None))
                            .then(LossScaler::default),
                    ),
                    None => t,
                }
            },
            started: now,
            last_progress: now,
            mark: now,
            steps_done: 0,
            steps_per_epoch: data.train_len.div_ceil(protocol.batch_size),
            warmup: WarmupClock::new(
                protocol.timing,
                protocol.settings.warmup_cap(),
                protocol.inject_slow_steps,
            ),
            chunks: Vec::new(),
            device_memory: None,
            replay: protocol.replay.as_ref().map(|r| {
                let loss = (10f32).ln();
                (
                    ReplayDevice::new(r, protocol.batch_size),
                    Tensor::<1>::from_floats([loss], device),
                )
            }),
        }
    }

    /// Wait for the device (and a replayed one) to finish the work queued so far.
    fn sync(&self) -> Result<(), CoreError> {
        if let Some((replay, _)) = &self.replay {
            replay.sync();
        }
        sync(self.device)
    }

    /// One training step on the samples at `range` of the epoch's `order`: its loss.
    fn step(&mut self, order: &Tensor<1, Int>, range: std::ops::Range<usize>) -> Tensor<1> {
        match &mut self.replay {
            Some((replay, loss)) => {
                replay.step(range.len());
                loss.clone()
            }
            None => self.trainer.step(self.data, order.clone().slice(range)),
        }
    }

    /// Test accuracy after an epoch (outside every timed region; a replayed cell's has none).
    fn evaluate(&mut self) -> Result<Option<f64>, CoreError> {
        let batch = self.protocol.batch_size.max(256);
        match &mut self.replay {
            Some((replay, _)) => {
                replay.evaluate(self.data.test_len, batch);
                Ok(None)
            }
            None => self.trainer.test_accuracy(self.data, batch).map(Some),
        }
    }

    /// Seconds of steady-state training timed so far: the closed chunks, and the open one
    /// (`open_excluded`: its late compiles). Evaluation and late compiles never count.
    fn timed_seconds(&self, open_excluded: f64) -> f64 {
        self.chunks.iter().map(|c| c.seconds).sum::<f64>() + self.open_seconds(open_excluded)
    }

    /// The open chunk's timed seconds, less its late compiles' `excluded` seconds.
    fn open_seconds(&self, excluded: f64) -> f64 {
        self.mark.elapsed().as_secs_f64() - excluded
    }

    /// True when a steady cell's budget has run out ([`kiln_contract::protocol::budget_spent`]); `open`
    /// is the chunk not closed yet: its steps and its late compiles' seconds.
    fn budget_exhausted(&self, (open_steps, open_excluded): (usize, f64)) -> bool {
        self.warmup.settled()
            && kiln_contract::protocol::budget_spent(
                self.protocol.settings.budget(),
                self.protocol.timing.min_timed_steps,
                self.chunks.iter().map(|c| (c.steps, c.seconds)),
                (open_steps, self.open_seconds(open_excluded)),
            )
    }

    /// After a warm-up step: sync, keep its time, and say whether the times have settled.
    fn warmup_step(&mut self, epoch: usize) -> Result<WarmupPhase, CoreError> {
        self.sync()?;
        let now = Instant::now();
        let seconds = (now - self.mark).as_secs_f64();
        self.mark = now;
        self.sample_device_memory();
        Ok(self.warmup.step(seconds, now, epoch + 1))
    }

    /// A progress event every two seconds.
    fn progress(&mut self, epoch: usize, step: usize, sink: &mut dyn Sink) {
        if self.last_progress.elapsed() >= Duration::from_secs(2) {
            self.last_progress = Instant::now();
            sink.event(&Event::Progress(Progress {
                epoch: epoch + 1,
                step,
                steps_per_epoch: self.steps_per_epoch,
                elapsed_seconds: self.started.elapsed().as_secs_f64(),
                eta_seconds: self.eta(epoch, step),
            }));
        }
    }

    fn sample_device_memory(&mut self) {
        sample_device_memory(self.device, &mut self.device_memory);
    }

    /// Sync, then close the chunk that began at `self.mark`, less its late compiles'
    /// `excluded` seconds.
    fn close_chunk(&mut self, (steps, samples, excluded): Open) -> Result<(), CoreError> {
        self.sync()?;
        let now = Instant::now();
        if steps > 0 {
            self.chunks.push(Chunk {
                steps,
                samples,
                seconds: (now - self.mark).as_secs_f64() - excluded,
            });
        }
        self.mark = now;
        self.sample_device_memory();
        Ok(())
    }

    /// The seconds left, from the last steady chunk's pace; none before the first (a warm-up
    /// step's time is the kernels' compiling, and projected an H200 cell to hours).
    fn eta(&self, epoch: usize, step: usize) -> Option<f64> {
        let per_step = self.chunks.last().map(|c| c.seconds / c.steps as f64)?;
        let total = self.protocol.settings.epochs * self.steps_per_epoch;
        let done = epoch * self.steps_per_epoch + step;
        let mut eta = per_step * total.saturating_sub(done) as f64;
        if let Some(budget) = self.protocol.settings.budget() {
            let left = (budget.as_secs_f64() - self.timed_seconds(0.0)).max(0.0);
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
        let order = rng::epoch_permutation(n, self.protocol.settings.seed, epoch);
        let order = Tensor::<1, Int>::from_data(TensorData::new(order, [n]), self.device);
        let timing = self.protocol.timing;
        let chunk_len = timing.chunk_steps(self.steps_per_epoch);
        // A slow backend closes chunks by time too, so a budget-cut cell still has several
        // chunks to project from (a projection from fewer than 3 is low confidence).
        let chunk_time = timing
            .chunk_time(self.protocol.settings.budget())
            .unwrap_or(Duration::MAX);
        let mut loss_sum = Tensor::<1>::zeros([1], (self.device, FloatDType::F32.into()));

        self.sync()?;
        let t0 = Instant::now();
        self.mark = t0;
        self.warmup.first_step_starts(t0);
        // The open chunk (steps, samples, late-compile seconds) and the epoch's late compiles.
        let mut open: Open = (0, 0, 0.0);
        let mut excluded = 0.0;
        let (mut steps, mut samples, mut partial) = (0, 0, false);
        for step in 0..self.steps_per_epoch {
            let start = step * batch;
            let end = (start + batch).min(n);
            let began = Instant::now();
            let mut loss = self.step(&order, start..end);
            self.warmup.inject(self.steps_done + 1);
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

            if !self.warmup.settled() {
                // Warm-up: each step synced and kept apart, never in a chunk.
                let phase = self.warmup_step(epoch)?;
                self.progress(epoch, step + 1, sink);
                if phase == WarmupPhase::OverCap {
                    partial = true;
                    break;
                }
                continue;
            }
            // Steady: every step is checked for a late compile by its host time (no sync).
            let late =
                self.warmup
                    .timed_step(began.elapsed().as_secs_f64(), self.steps_done, epoch + 1);
            open = (open.0 + 1, open.1 + end - start, open.2 + late);
            excluded += late;
            let last = step + 1 == self.steps_per_epoch;
            if (open.0 == chunk_len || self.mark.elapsed() >= chunk_time) && !last {
                self.close_chunk(open)?;
                open = (0, 0, 0.0);
                if !read_scalar(loss_sum.clone())?.is_finite() {
                    break;
                }
            }
            self.progress(epoch, step + 1, sink);
            if !last && self.budget_exhausted((open.0, open.2)) {
                partial = true;
                break;
            }
        }
        self.close_chunk(open)?;
        let seconds = (self.mark - t0).as_secs_f64() - excluded;
        let mean_loss = read_scalar(loss_sum)? / samples.max(1) as f64;
        if let Some(bytes) = self.protocol.inject_leak_bytes_per_epoch {
            // A leak for the tests: written (so resident) and never freed.
            std::mem::forget(vec![1u8; usize::try_from(bytes).unwrap_or(usize::MAX)]);
        }
        Ok((
            EpochSummary {
                epoch: epoch + 1,
                seconds,
                steps,
                samples,
                partial,
                mean_loss,
                test_accuracy: None,
                rss_bytes: kiln_machine::process::current_rss_bytes(None),
            },
            partial,
        ))
    }
}

/// Train `model` under `protocol` on `data` (already on `device`), reporting to `sink`, and
/// return what was measured (`kiln_contract::summarize` derives the numbers of a record).
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
    let mut run = Training::new(model, device, data, protocol);
    // Model, optimizer and data are ready: what the runtime holds now is the baseline, and the
    // peak from here on is training's (the high-water mark is reset where the OS allows it).
    let peak_since_baseline = kiln_machine::process::reset_peak();
    let rss_baseline_bytes = kiln_machine::process::current_rss_bytes(None);
    let mut epochs: Vec<EpochSummary> = Vec::new();
    let mut diverged = None;
    for epoch in 0..protocol.settings.epochs {
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
        summary.test_accuracy = run.evaluate()?;
        sink.event(&Event::Epoch(summary.clone()));
        epochs.push(summary);
        if partial {
            break;
        }
    }
    Ok(Measurements {
        epoch_samples: data.train_len,
        test_samples: data.test_len,
        first_step_seconds: run.warmup.first_step_seconds(),
        warmup: run.warmup.summary(),
        epochs,
        chunks: run.chunks,
        diverged,
        device_memory: run.device_memory,
        loss_scaling: run.trainer.loss_scaling(),
        rss_baseline_bytes,
        rss_peak_bytes: kiln_machine::process::peak_rss_bytes(),
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
    let mut run = Training::new(model, device, data, protocol);
    let mut one_epoch = protocol.clone();
    one_epoch.settings.epochs = 1;
    one_epoch.settings.budget_seconds = None;
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
        TensorData::new(rng::epoch_permutation(n, protocol.settings.seed, 0), [n]),
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
        run.warmup.assume_steady(Instant::now());
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
