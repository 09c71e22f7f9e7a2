//! `kiln-<backend> --explain FILE`: every operation of one training step timed alone, the way
//! Burn's autodiff runs it, on the cell's device, precision and threads.
//!
//! Each layer of [`kiln_contract::explain::sites`] is built at its real shapes with Burn's own
//! modules. Its forward pass runs on the autodiff device (recording the graph, as in training);
//! its backward pass is one `backward()` through that layer alone, with exactly the leaves
//! tracked whose gradients the phase asks for: the input only (a convolution's input gradient:
//! Burn's `conv2d_x_backward`, a transposed convolution), the parameters only (its weight and
//! bias gradients), or both (batch norm). `backward()` seeds the output's gradient with ones; that
//! fill is timed on its own and taken off each backward sample. Adam's update is timed on the
//! real model with gradients of the parameters' shapes. The whole step (the protocol's
//! `Trainer::step`) is timed on the same shapes, so the sum of the ops can be checked against it.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use burn::module::{ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::{Distribution, ProfileOptions};

use kiln_contract::explain::{
    ExplainRecord, ExplainRequest, LayerOp, OpTiming, Phase, Site, Timing,
};

use crate::data::DeviceData;
use crate::device::{Binding, one_shot, open_device, panic_text};
use crate::models::{Act, Net};
use crate::protocol;
use crate::trainer::Trainer;
use crate::{BURN_VERSION, CoreError};

mod layers;

use layers::OpLayer;

/// Repeats a measurement by the request's rules: warm-up runs (at least `warmup`, then until
/// the times are steady by `rules`, within the cap), then timed runs until `repeats` ran or
/// (after at least 3) `op_seconds` were spent.
struct Timer<'a> {
    device: &'a Device,
    warmup: usize,
    rules: kiln_contract::TimingRules,
    cap_runs: usize,
    repeats: usize,
    op_seconds: f64,
}

impl Timer<'_> {
    fn sync(&self) -> Result<(), CoreError> {
        self.device
            .sync()
            .map_err(|e| CoreError::Device(format!("device sync failed: {e}")))
    }

    /// Time `run` after `prepare` (untimed) each time, after a device sync, in a profiling
    /// window of Burn's: warm-up runs first, by the rule, then the timed ones.
    fn measure<P: Send, T: Send + 'static>(
        &self,
        mut prepare: impl FnMut() -> Result<P, CoreError>,
        mut run: impl FnMut(P) -> Result<T, CoreError> + Send,
    ) -> Result<Vec<f64>, CoreError> {
        let mut warm = Vec::new();
        while warm.len() < self.warmup
            || !(self.rules.is_steady(&warm)
                || warm.len() >= self.cap_runs
                || warm.iter().sum::<f64>() >= 10.0 * self.op_seconds)
        {
            warm.push(self.once(&mut prepare, &mut run)?);
        }
        let mut samples = Vec::new();
        let mut spent = 0.0;
        while samples.len() < self.repeats && (samples.len() < 3 || spent < self.op_seconds) {
            let seconds = self.once(&mut prepare, &mut run)?;
            samples.push(seconds);
            spent += seconds;
        }
        Ok(samples)
    }

    /// One run of `run` on what `prepare` made: its seconds.
    fn once<P: Send, T: Send + 'static>(
        &self,
        prepare: &mut impl FnMut() -> Result<P, CoreError>,
        run: &mut (impl FnMut(P) -> Result<T, CoreError> + Send),
    ) -> Result<f64, CoreError> {
        let input = prepare()?;
        self.sync()?;
        // Burn's profiling window: device time where the backend has a device clock
        // (CubeCL), wall-clock time between two syncs elsewhere (flex, ndarray, LibTorch);
        // flushed, so a lazy backend's queued work falls inside it.
        let (output, duration) = self
            .device
            .profile_with(ProfileOptions::default().flush(), || run(input))
            .map_err(|e| CoreError::Device(format!("profiling window failed: {e}")))?;
        let output = output?;
        // No measurement is not a zero (Burn's docs): it fails the op instead.
        let seconds = futures_lite::future::block_on(duration.resolve())
            .map(|ticks| ticks.duration().as_secs_f64())
            .ok_or_else(|| CoreError::Device("the profiling window measured nothing".into()))?;
        // Dropped after the clock: freeing the output is not the op's work.
        drop(output);
        Ok(seconds)
    }
}

fn timing(samples: &[f64]) -> Result<Timing, CoreError> {
    Timing::of(samples).ok_or_else(|| CoreError::Device("no timed run finished".into()))
}

/// Time one site in every phase it has.
fn time_site(
    site: &Site,
    index: usize,
    timer: &Timer,
    device: &Device,
    classes: usize,
) -> Result<Vec<OpTiming>, CoreError> {
    let layer = OpLayer::build(site.op, device)?;
    // Built apart: a clone shares the lazily initialised parameters, and freezing it would
    // freeze them in `layer` too.
    let frozen = OpLayer::build(site.op, device)?.frozen();
    let output_shape = site.output();
    let batch = site.input.first().copied().unwrap_or(1);
    let labels: Vec<i64> = (0..batch).map(|i| (i % classes) as i64).collect();
    let targets = Tensor::<1, Int>::from_data(TensorData::new(labels, [batch]), device);
    // Fresh inputs for every run, as a step's are: a kernel's speed can depend on the tensors
    // it is given (libtorch's 64→512 convolution ran at one of two speeds here, the same one
    // for every run of a reused input), so one input for all runs would fix that draw.
    let fresh = |tracked: bool| -> Result<(Act, Act), CoreError> {
        let x = Act::random(&site.input, device)?;
        let x = if tracked { x.require_grad() } else { x };
        // The residual sum's other branch needs a gradient too.
        let other = match site.op {
            LayerOp::ResidualAdd => Act::random(&site.input, device)?.require_grad(),
            _ => x.clone(),
        };
        Ok((x, other))
    };
    // What `backward()` spends seeding the output's gradient (a fill with ones of its shape),
    // taken off every backward sample.
    let elements: usize = output_shape.iter().product();
    let seed = median(&timer.measure(|| Ok(()), |()| Ok(Tensor::<1>::ones([elements], device)))?);
    // The op list and Burn's layer must agree on the shape (a wrong list fails here).
    let (x, other) = fresh(false)?;
    let made = layer.forward(x, &other, &targets)?.dims();
    if made != output_shape {
        return Err(CoreError::Config(format!(
            "{}: the op list says {output_shape:?}, Burn's layer makes {made:?}",
            site.describe()
        )));
    }
    let mut timings = Vec::new();
    for phase in site.phases() {
        let (net, tracked) = match phase {
            Phase::Forward => (&layer, site.input_grad),
            Phase::InputGrad => (&frozen, true),
            Phase::ParamGrad => (&layer, false),
            Phase::Backward => (&layer, true),
            Phase::Update => continue,
        };
        let samples = if phase == Phase::Forward {
            timer.measure(
                || fresh(tracked),
                |(x, other)| net.forward(x, &other, &targets),
            )?
        } else {
            timer
                .measure(
                    || {
                        let (x, other) = fresh(tracked)?;
                        net.forward(x, &other, &targets)
                    },
                    |y| {
                        y.backward();
                        Ok(())
                    },
                )?
                .into_iter()
                .map(|s| (s - seed).max(0.0))
                .collect()
        };
        timings.push(OpTiming {
            site: index,
            phase,
            timing: timing(&samples)?,
        });
    }
    Ok(timings)
}

fn median(samples: &[f64]) -> f64 {
    kiln_contract::stats::median(samples).unwrap_or(0.0)
}

/// Gradients of every trainable parameter's shape, as a backward pass would hand Adam.
struct FakeGradients {
    grads: GradientsParams,
    device: Device,
}

impl ModuleVisitor for FakeGradients {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        if value.is_require_grad() {
            let grad = Tensor::<D>::random(value.shape(), Distribution::Default, &self.device);
            self.grads.register(param.id, grad);
        }
    }
}

/// Distinct batches the whole-step timing cycles through.
const STEP_BATCHES: usize = 4;

/// Adam's update and the whole training step of `request`'s model, on the real network.
fn update_and_step(
    timer: &Timer,
    device: &Device,
    request: &ExplainRequest,
) -> Result<(Timing, Timing), CoreError> {
    let model = Net::new(request.model, device)?;
    let inner = device.clone().without_autodiff();
    let learning_rate = request.learning_rate;
    let mut optim = protocol::adam();
    let mut slot = Some(model.clone());
    let update = timer.measure(
        || {
            let mut fake = FakeGradients {
                grads: GradientsParams::new(),
                device: inner.clone(),
            };
            // The update keeps every parameter's id, so the original names them all.
            model.visit(&mut fake);
            Ok(fake.grads)
        },
        |grads| {
            let m = slot
                .take()
                .ok_or_else(|| CoreError::Device("the model was lost in a step".into()))?;
            slot = Some(optim.step(learning_rate, m, grads));
            Ok(())
        },
    )?;
    // A new batch every step, as in training: a set of STEP_BATCHES batches, cycled.
    let geometry = request.model.geometry();
    let data = kiln_data::synthetic(geometry, request.batch * STEP_BATCHES, 0, request.seed);
    let data = DeviceData::upload(&data, device, Some(0));
    let mut trainer = Trainer::new(model, device, learning_rate);
    let batch = request.batch as i64;
    let mut next = 0i64;
    let step = timer.measure(
        || {
            let start = next * batch;
            next = (next + 1) % STEP_BATCHES as i64;
            Ok(Tensor::<1, Int>::arange(start..start + batch, device))
        },
        |indices| Ok(trainer.step(&data, indices)),
    )?;
    Ok((timing(&update)?, timing(&step)?))
}

/// Run an explain request on `binding`'s device: every op of one training step timed alone,
/// then the whole step. A panic inside the backend becomes the record's reason.
pub fn explain(binding: &dyn Binding, request: &ExplainRequest) -> ExplainRecord {
    let started = Instant::now();
    let mut record = ExplainRecord::start(request, binding.version(), binding.threads());
    let (status, reason) = one_shot(binding, &request.backend, request.validate(), || {
        explain_on_device(binding, request, &mut record)
    });
    record.status = status;
    record.reason = reason;
    record.wall_seconds = started.elapsed().as_secs_f64();
    record
}

fn explain_on_device(
    binding: &dyn Binding,
    request: &ExplainRequest,
    record: &mut ExplainRecord,
) -> Result<Option<String>, CoreError> {
    let (device, spec, name) =
        match open_device(binding, &request.device, request.precision, request.seed)? {
            Ok(d) => d,
            Err(why) => return Ok(Some(why)),
        };
    record.device = spec;
    record.device_name = name;
    let timer = Timer {
        device: &device,
        warmup: request.warmup,
        rules: request.timing,
        cap_runs: request.warmup_cap_runs,
        repeats: request.repeats,
        op_seconds: request.op_seconds,
    };
    let classes = request.model.geometry().classes;
    for (index, site) in request.sites.iter().enumerate() {
        if let LayerOp::Adam { .. } = site.op {
            continue;
        }
        eprintln!("kiln: timing {}", site.describe());
        // A layer the backend cannot run at this shape fails the record with the op named.
        let timed = std::panic::catch_unwind(AssertUnwindSafe(|| {
            time_site(site, index, &timer, &device, classes)
        }))
        .map_err(|panic| {
            CoreError::Device(format!(
                "{}: the backend panicked: {}",
                site.describe(),
                panic_text(panic.as_ref())
            ))
        })??;
        record.ops.extend(timed);
    }
    eprintln!("kiln: timing Adam's update and the whole step");
    let (update, step) = update_and_step(&timer, &device, request)?;
    if let Some(index) = request
        .sites
        .iter()
        .position(|s| matches!(s.op, LayerOp::Adam { .. }))
    {
        record.ops.push(OpTiming {
            site: index,
            phase: Phase::Update,
            timing: update,
        });
    }
    record.step = Some(step);
    record.notes.push(format!(
        "Burn {BURN_VERSION} autodiff: each backward is one layer's backward() with only the \
         leaves of its phase tracked; the ones-fill that seeds backward() is timed apart and \
         taken off"
    ));
    Ok(None)
}
