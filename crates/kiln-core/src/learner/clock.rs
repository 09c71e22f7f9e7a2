//! The clocks and counters of one Learner cell: read where Kiln's code runs inside burn-train's
//! loop (its batcher, the model's steps), by the timing rules of Kiln's loop.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use burn::prelude::*;
use burn::tensor::FloatDType;
use burn_train::Interrupter;

use kiln_contract::{Chunk, DeviceMemory, EpochSummary, Event, Progress};

use crate::device::{read_count, read_scalar, sample_device_memory};
use crate::warmup::{WarmupClock, WarmupPhase};

/// A batch on one device, with the cell's clock (burn-train hands it to the model's step).
#[derive(Debug, Clone)]
pub struct Batch {
    pub(super) images: Tensor<4>,
    pub(super) targets: Tensor<1, Int>,
    pub(super) clock: Arc<Clock>,
}

/// What the Learner's loop reports to the cell's sink (from the training thread).
pub(super) enum Message {
    Event(Event),
    Done,
}

/// The clocks and counters of one Learner cell, shared by the batchers and the model's steps.
pub struct Clock {
    pub(super) state: Mutex<ClockState>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

pub(super) struct ClockState {
    pub(super) devices: Vec<Device>,
    pub(super) budget: Option<Duration>,
    pub(super) min_timed_steps: usize,
    pub(super) inject_nan_at_step: Option<usize>,
    pub(super) steps_per_epoch: usize,
    pub(super) chunk_len: usize,
    pub(super) chunk_time: Duration,
    pub(super) interrupter: Interrupter,
    pub(super) events: Sender<Message>,
    pub(super) launched: Instant,
    pub(super) started: Option<Instant>,
    pub(super) last_progress: Instant,
    /// Start of the current epoch's timing (its first batch), while it trains.
    pub(super) epoch_start: Option<Instant>,
    pub(super) epoch: usize,
    /// Training batches handed out in this epoch, and their samples.
    pub(super) calls: usize,
    pub(super) samples: usize,
    pub(super) steps_done: usize,
    pub(super) mark: Instant,
    pub(super) chunk_steps: usize,
    pub(super) chunk_samples: usize,
    pub(super) warmup: WarmupClock,
    pub(super) chunks: Vec<Chunk>,
    /// Per-device sums of each step's mean loss × its samples, on the devices.
    pub(super) loss_sums: Vec<Tensor<1>>,
    /// Correct test predictions of the current validation, on the device.
    pub(super) hits: Option<Tensor<1, Int>>,
    pub(super) in_validation: bool,
    /// Set when the budget or a non-finite loss stopped the loop.
    pub(super) stopped: bool,
    pub(super) partial: bool,
    pub(super) epochs: Vec<EpochSummary>,
    /// The epoch whose validation has not been read yet.
    pub(super) pending: Option<EpochSummary>,
    pub(super) device_memory: Option<DeviceMemory>,
    pub(super) setup_seconds: Option<f64>,
    pub(super) test_len: usize,
    pub(super) error: Option<String>,
}

impl Clock {
    pub(super) fn lock(&self) -> MutexGuard<'_, ClockState> {
        // A panic inside burn-train while the lock is held leaves valid counters behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn train_batch(&self, samples: usize) {
        let mut s = self.lock();
        if s.stopped {
            return;
        }
        let n = s.devices.len();
        if s.calls.is_multiple_of(n) {
            s.step_boundary();
        }
        if !s.stopped {
            s.calls += 1;
            s.samples += samples;
            s.chunk_samples += samples;
        }
    }

    pub(super) fn valid_batch(&self) {
        let mut s = self.lock();
        if !s.in_validation && !s.stopped {
            s.end_training_epoch();
            s.in_validation = true;
        }
    }

    /// Add a training step's mean loss (weighted by its samples) to its device's sum.
    pub(super) fn record_loss(&self, loss: &Tensor<1>, samples: usize) {
        let mut s = self.lock();
        if s.stopped {
            return;
        }
        let mut loss = loss
            .clone()
            .detach()
            .cast(FloatDType::F32)
            .mul_scalar(samples as f64);
        if s.inject_nan_at_step == Some(s.steps_done + 1) {
            loss = loss.mul_scalar(f64::NAN);
        }
        let device = loss.device();
        match s.loss_sums.iter().position(|t| t.device() == device) {
            Some(i) => {
                let sum = s.loss_sums[i].clone();
                s.loss_sums[i] = sum + loss;
            }
            None => s.loss_sums.push(loss),
        }
    }

    pub(super) fn record_hits(&self, hits: Tensor<1, Int>) {
        let mut s = self.lock();
        s.hits = Some(match s.hits.take() {
            Some(h) => h + hits,
            None => hits,
        });
    }
}

impl ClockState {
    pub(super) fn sync(&mut self) {
        let failed = self.devices.iter().find_map(|d| d.sync().err());
        if let Some(e) = failed {
            self.fail(format!("device sync failed: {e}"));
        }
    }

    pub(super) fn fail(&mut self, why: String) {
        if self.error.is_none() {
            self.error = Some(why.clone());
        }
        self.stopped = true;
        self.interrupter.stop(Some(&why));
    }

    pub(super) fn sample_device_memory(&mut self) {
        if let Some(device) = self.devices.first() {
            sample_device_memory(device, &mut self.device_memory);
        }
    }

    /// The sum of the devices' loss sums (one read each), which are emptied when `take`: at
    /// an epoch's end; at a chunk's end they are only looked at, as Kiln's loop does.
    pub(super) fn loss_total(&mut self, take: bool) -> f64 {
        let sums = if take {
            std::mem::take(&mut self.loss_sums)
        } else {
            self.loss_sums.clone()
        };
        let mut total = 0.0;
        for t in sums {
            match read_scalar(t) {
                Ok(v) => total += v,
                Err(e) => {
                    self.fail(e.to_string());
                    return f64::NAN;
                }
            }
        }
        total
    }

    /// The start of a training step (all its devices' batches are about to be built): the
    /// previous step, its optimizer update and its events are done.
    pub(super) fn step_boundary(&mut self) {
        if self.in_validation || self.epoch_start.is_none() {
            // A new epoch: read the previous validation first (outside the timed region).
            self.finish_validation();
            self.sync();
            let now = Instant::now();
            if self.started.is_none() {
                self.started = Some(now);
                self.setup_seconds = Some((now - self.launched).as_secs_f64());
                self.warmup.first_step_starts(now);
            }
            self.epoch_start = Some(now);
            self.mark = now;
            self.in_validation = false;
            self.calls = 0;
            self.samples = 0;
            self.chunk_steps = 0;
            self.chunk_samples = 0;
            self.epoch += 1;
            return;
        }
        self.steps_done += 1;
        self.warmup.inject(self.steps_done);
        self.sync();
        let now = Instant::now();
        if !self.warmup.settled() {
            self.warmup_step(now);
            return;
        }
        self.chunk_steps += 1;
        let started = self.started.unwrap_or(now);
        // The budget counts timed steady-state training (validation apart), as Kiln's loop's.
        let over_budget = kiln_contract::protocol::budget_spent(
            self.budget,
            self.min_timed_steps,
            self.chunks.iter().map(|c| (c.steps, c.seconds)),
            (self.chunk_steps, (now - self.mark).as_secs_f64()),
        );
        if self.chunk_steps >= self.chunk_len || now - self.mark >= self.chunk_time || over_budget {
            self.close_chunk(now);
            let loss = self.loss_total(false);
            if !loss.is_finite() {
                self.partial = true;
                self.stop_epoch(now, "the training loss is not finite");
                return;
            }
        }
        if over_budget {
            self.partial = true;
            self.stop_epoch(now, "the time budget ran out");
            return;
        }
        if now - self.last_progress >= Duration::from_secs(2) {
            self.last_progress = now;
            let step = self.calls.div_ceil(self.devices.len());
            let per_step = self
                .chunks
                .last()
                .map(|c| c.seconds / c.steps.max(1) as f64);
            let _ = self.events.send(Message::Event(Event::Progress(Progress {
                epoch: self.epoch,
                step,
                steps_per_epoch: self.steps_per_epoch,
                elapsed_seconds: (now - started).as_secs_f64(),
                eta_seconds: per_step.map(|p| {
                    let left = self.steps_per_epoch.saturating_sub(step) as f64 * p;
                    match self.budget {
                        Some(b) => {
                            left.min((b.as_secs_f64() - (now - started).as_secs_f64()).max(0.0) + p)
                        }
                        None => left,
                    }
                }),
            })));
        }
    }

    /// A warm-up step ended at `now` (synced): keep its time apart from every chunk, and stop
    /// the cell when the warm-up cap ran out before the times settled.
    fn warmup_step(&mut self, now: Instant) {
        let seconds = (now - self.mark).as_secs_f64();
        self.mark = now;
        self.chunk_samples = 0;
        self.sample_device_memory();
        if self.warmup.step(seconds, now, self.epoch) == WarmupPhase::OverCap {
            self.partial = true;
            self.stop_epoch(now, "the step times did not settle within the warm-up cap");
        }
    }

    pub(super) fn close_chunk(&mut self, now: Instant) {
        if self.chunk_steps > 0 {
            self.chunks.push(Chunk {
                steps: self.chunk_steps,
                samples: self.chunk_samples,
                seconds: (now - self.mark).as_secs_f64(),
            });
        }
        self.mark = now;
        self.chunk_steps = 0;
        self.chunk_samples = 0;
        self.sample_device_memory();
    }

    /// End the epoch here and tell burn-train to stop (the step it is about to run is not
    /// counted).
    pub(super) fn stop_epoch(&mut self, now: Instant, why: &str) {
        self.close_chunk(now);
        let summary = self.summary(now);
        self.epochs.push(summary);
        self.stopped = true;
        self.interrupter.stop(Some(why));
    }

    pub(super) fn summary(&mut self, now: Instant) -> EpochSummary {
        // At a step boundary every batch handed out belongs to a finished step.
        let steps = self.calls.div_ceil(self.devices.len().max(1));
        let samples = self.samples;
        let loss = self.loss_total(true);
        EpochSummary {
            epoch: self.epoch,
            seconds: self.epoch_start.map_or(0.0, |s| (now - s).as_secs_f64()),
            steps,
            samples,
            partial: self.partial,
            mean_loss: loss / samples.max(1) as f64,
            test_accuracy: None,
            rss_bytes: kiln_machine::process::current_rss_bytes(None),
        }
    }

    /// The first validation batch: the training epoch is over.
    pub(super) fn end_training_epoch(&mut self) {
        self.steps_done += 1;
        self.warmup.inject(self.steps_done);
        self.sync();
        let now = Instant::now();
        if !self.warmup.settled() {
            self.warmup_step(now);
            if self.stopped {
                return;
            }
        } else {
            self.chunk_steps += 1;
            self.close_chunk(now);
        }
        let summary = self.summary(now);
        if !summary.mean_loss.is_finite() {
            self.epochs.push(summary);
            self.stopped = true;
            self.interrupter
                .stop(Some("the training loss is not finite"));
            return;
        }
        self.pending = Some(summary);
        self.hits = None;
    }

    /// Read the test accuracy of the validation that just ran, and report its epoch.
    pub(super) fn finish_validation(&mut self) {
        let Some(mut summary) = self.pending.take() else {
            return;
        };
        let correct = match self.hits.take() {
            Some(h) => match read_count(h) {
                Ok(n) => n,
                Err(e) => {
                    self.fail(e.to_string());
                    0
                }
            },
            None => 0,
        };
        summary.test_accuracy = Some(correct as f64 / self.test_len.max(1) as f64);
        let _ = self
            .events
            .send(Message::Event(Event::Epoch(summary.clone())));
        self.epochs.push(summary);
    }
}
