//! A replayed device (`kiln_contract::replay`): Kiln's loop runs as it does on a GPU, but each
//! step takes the time a profile measured instead of training. It behaves like an asynchronous
//! device: a step's compile (the first step, a batch shape not seen before) blocks the host,
//! as a JIT compile does; its compute is queued and only a sync waits for it, so the loop's own
//! host work overlaps it as it does on a GPU.

use std::time::{Duration, Instant};

use kiln_contract::replay::{Replay, StepTimes};

/// The device a replayed cell runs on: its queue and the shapes it has compiled.
#[derive(Debug)]
pub(crate) struct ReplayDevice {
    times: StepTimes,
    full_batch: usize,
    /// When the queued work is done.
    ready_at: Instant,
    /// Training and evaluation batch sizes compiled so far (evaluation's compile apart).
    trained: Vec<usize>,
    evaluated: Vec<usize>,
    /// Training steps taken.
    steps: u32,
}

impl ReplayDevice {
    pub(crate) fn new(replay: &Replay, full_batch: usize) -> Self {
        ReplayDevice {
            times: replay.times,
            full_batch: full_batch.max(1),
            ready_at: Instant::now(),
            trained: Vec::new(),
            evaluated: Vec::new(),
            steps: 0,
        }
    }

    /// The compute of a batch of `batch` samples at `share` of a training step's cost.
    fn queue(&mut self, batch: usize, share: f64) {
        let compute = self.times.steady_step_s * share * batch as f64 / self.full_batch as f64;
        self.ready_at = self.ready_at.max(Instant::now()) + Duration::from_secs_f64(compute);
    }

    /// The host seconds the next training step of `batch` samples compiles for, counting it
    /// taken: the first step's compile, a settling step's (the profile's steps 2, 3, ...) and
    /// a new batch shape's add up.
    fn compile_s(&mut self, batch: usize) -> f64 {
        let t = &self.times;
        let settling = match t.settling {
            Some(s) if self.steps >= 1 && self.steps <= s.steps => {
                (s.step_s - t.steady_step_s).max(0.0)
            }
            _ => 0.0,
        };
        let compile = if self.trained.is_empty() {
            // The measured first step holds its own compute: compile for the rest of it.
            (t.first_step_s - t.steady_step_s).max(0.0)
        } else if !self.trained.contains(&batch) {
            t.new_shape_s
        } else {
            0.0
        } + settling;
        if !self.trained.contains(&batch) {
            self.trained.push(batch);
        }
        self.steps += 1;
        compile
    }

    /// One training step of `batch` samples: its compile on the host, then its compute queued.
    pub(crate) fn step(&mut self, batch: usize) {
        let compile = self.compile_s(batch);
        wait(Duration::from_secs_f64(compile));
        self.queue(batch, 1.0);
    }

    /// Evaluate `samples` in batches of `batch` (a forward pass: a third of a step's cost),
    /// compiling each new shape first; returns when done.
    pub(crate) fn evaluate(&mut self, samples: usize, batch: usize) {
        let batch = batch.max(1);
        let mut start = 0;
        while start < samples {
            let n = batch.min(samples - start);
            if !self.evaluated.contains(&n) {
                self.evaluated.push(n);
                wait(Duration::from_secs_f64(self.times.eval_compile_s()));
            }
            self.queue(n, 1.0 / 3.0);
            start += n;
        }
        self.sync();
    }

    /// Wait until the queued work is done.
    pub(crate) fn sync(&self) {
        wait(self.ready_at.saturating_duration_since(Instant::now()));
    }
}

/// Wait `d`: sleep most of it, then spin, so that a step of a fraction of a millisecond (a
/// GPU's, scaled) is as long as the profile says and not a timer's resolution longer.
fn wait(d: Duration) {
    let until = Instant::now() + d;
    if d > Duration::from_millis(2) {
        std::thread::sleep(d - Duration::from_millis(1));
    }
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(first: f64, new_shape: f64, steady: f64) -> Replay {
        Replay {
            profile: "test".into(),
            device: None,
            scale: 1.0,
            times: StepTimes {
                first_step_s: first,
                new_shape_s: new_shape,
                steady_step_s: steady,
                eval_new_shape_s: Some(0.0),
                settling: None,
            },
            listed: true,
        }
    }

    /// A wait never returns early: each step lasts at least what the profile says (how much
    /// longer depends on the machine's load, and is not asserted).
    #[test]
    fn steps_last_at_least_the_profiles_times() {
        let mut d = ReplayDevice::new(&replay(0.05, 0.03, 0.002), 128);
        let mut timed = |batch| {
            let t = Instant::now();
            d.step(batch);
            d.sync();
            t.elapsed().as_secs_f64()
        };
        assert!(timed(128) >= 0.05);
        assert!(timed(128) >= 0.002);
        assert!(timed(64) >= 0.03 + 0.001, "a new shape compiles");
        let again = timed(64);
        assert!(again >= 0.001);
    }

    /// A profile's settling steps (steps 2, 3, ... still compiling) take their time beyond a
    /// steady step's, on top of a new shape's compile, and the steps after them are steady.
    #[test]
    fn settling_steps_compile_then_steps_are_steady() {
        let mut r = replay(0.5, 0.25, 0.01);
        r.times.settling = Some(kiln_contract::replay::Settling {
            steps: 2,
            step_s: 0.11,
        });
        let mut d = ReplayDevice::new(&r, 128);
        let compiles: Vec<f64> = [128, 128, 64, 128, 64]
            .iter()
            .map(|&b| (d.compile_s(b) * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(compiles, [0.49, 0.1, 0.35, 0.0, 0.0]);
    }

    /// Compute is queued: the host goes on until a sync, as with a GPU.
    #[test]
    fn steps_queue_until_a_sync() {
        let mut d = ReplayDevice::new(&replay(0.0, 0.0, 0.2), 128);
        let t = Instant::now();
        for _ in 0..5 {
            d.step(128);
        }
        let queued = d.ready_at.saturating_duration_since(t);
        assert!(queued >= Duration::from_secs(1), "{queued:?}");
        d.sync();
        assert!(t.elapsed() >= Duration::from_secs(1));
    }
}
