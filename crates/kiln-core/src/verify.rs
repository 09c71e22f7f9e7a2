//! `kiln-<backend> --verify FILE`: train a model for K steps from given initial weights on the
//! first K batches of the training set, in order, with dropout off, and report every step's loss
//! and the final weights (what `cargo xtask verify` compares across backends).

use std::time::Instant;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;

use kiln_contract::Profile;
use kiln_contract::verify::{Fault, NamedTensor, VerifyRecord, VerifyRequest, Weights};
use kiln_data::Request;

use crate::amp::LossScaler;
use crate::data::DeviceData;
use crate::device::read_scalar;
use crate::device::{Binding, amp_dtype, one_shot, open_device};
use crate::models::{Net, parameter_name};
use crate::trainer::Trainer;
use crate::{BURN_VERSION, CoreError};

/// The trainable parameters of `model`, named as its description names them
/// ([`parameter_name`]), in visiting order.
pub fn weights_of(model: &Net) -> Weights {
    struct Collect {
        described: Vec<kiln_contract::models::Layer>,
        path: Vec<String>,
        out: Vec<NamedTensor>,
    }
    impl ModuleVisitor for Collect {
        fn enter_module(&mut self, name: &str, _container: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val();
            if !value.is_require_grad() {
                return;
            }
            self.out.push(NamedTensor {
                name: parameter_name(&self.described, &self.path),
                shape: value.shape().to_vec(),
                values: value.into_data().iter::<f32>().collect(),
            });
        }
    }
    let mut c = Collect {
        described: model.kind().layers(),
        path: Vec::new(),
        out: Vec::new(),
    };
    model.visit(&mut c);
    Weights { tensors: c.out }
}

/// `model` with its trainable parameters replaced, in visiting order, by `weights` (each
/// cast to the type the parameter had). A count or shape that differs is an error naming the
/// tensor.
pub fn load_weights(model: Net, weights: &Weights) -> Result<Net, CoreError> {
    struct Load<'a> {
        described: Vec<kiln_contract::models::Layer>,
        weights: &'a Weights,
        next: usize,
        path: Vec<String>,
        error: Option<String>,
    }
    impl ModuleMapper for Load<'_> {
        fn enter_module(&mut self, name: &str, _container: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container: &str) {
            self.path.pop();
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if self.error.is_some() || !param.val().is_require_grad() {
                return param;
            }
            let here = parameter_name(&self.described, &self.path);
            let Some(t) = self.weights.tensors.get(self.next) else {
                self.error = Some(format!(
                    "the weights file has {} tensors; the model has more (from {here})",
                    self.weights.tensors.len()
                ));
                return param;
            };
            self.next += 1;
            let value = param.val();
            if value.shape().to_vec() != t.shape {
                self.error = Some(format!(
                    "tensor {} ({}) has shape {:?}; the model's {here} is {:?}",
                    self.next - 1,
                    t.name,
                    t.shape,
                    value.shape().to_vec()
                ));
                return param;
            }
            let (device, dtype) = (value.device(), value.dtype());
            let data = TensorData::new(t.values.clone(), t.shape.clone());
            param.map(|_| Tensor::<D>::from_data(data, (&device, dtype)).require_grad())
        }
    }
    let mut load = Load {
        described: model.kind().layers(),
        weights,
        next: 0,
        path: Vec::new(),
        error: None,
    };
    let model = model.map(&mut load);
    if let Some(e) = load.error {
        return Err(CoreError::Config(e));
    }
    if load.next != weights.tensors.len() {
        return Err(CoreError::Config(format!(
            "the weights file has {} tensors; the model has {}",
            weights.tensors.len(),
            load.next
        )));
    }
    Ok(model)
}

/// Flip the sign of the first gradient `model` visits.
fn flip_first_gradient<M: Module>(model: &M, grads: &mut GradientsParams) {
    struct Flip<'a> {
        grads: &'a mut GradientsParams,
        done: bool,
    }
    impl ModuleVisitor for Flip<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.done {
                return;
            }
            if let Some(g) = self.grads.remove::<D>(param.id) {
                self.grads.register(param.id, g.neg());
                self.done = true;
            }
        }
    }
    model.visit(&mut Flip { grads, done: false });
}

/// Run a verify request on `binding`'s device. A panic inside the backend becomes the reason.
pub fn verify(binding: &dyn Binding, request: &VerifyRequest) -> VerifyRecord {
    let started = Instant::now();
    let mut record = VerifyRecord::start(request, binding.version());
    record.threads = binding.threads();
    let (status, reason) = one_shot(binding, &request.backend, request.validate(), || {
        verify_on_device(binding, request, &mut record)
    });
    record.status = status;
    record.reason = reason;
    record.wall_seconds = started.elapsed().as_secs_f64();
    record
}

fn verify_on_device(
    binding: &dyn Binding,
    request: &VerifyRequest,
    record: &mut VerifyRecord,
) -> Result<Option<String>, CoreError> {
    let (device, spec, name) =
        match open_device(binding, &request.device, request.precision, request.seed)? {
            Ok(d) => d,
            Err(why) => return Ok(Some(why)),
        };
    record.device = spec;
    record.device_name = name;

    let kind = request.model;
    let geometry = kind.geometry();
    let mut dataset = kiln_data::load(&Request {
        name: request.dataset,
        geometry,
        data_dir: request.data_dir.clone(),
        seed: request.seed,
        // The quick profile's sizes: what xtask exports for the PyTorch reference.
        synthetic_sizes: Profile::Quick.synthetic_sizes(kind.standard_epoch()),
    })?;
    let samples = request.samples();
    if dataset.train.len() < samples {
        return Err(CoreError::Config(format!(
            "{} steps of batch {} need {samples} training samples; {} has {}: lower --steps \
             or --batch",
            request.steps,
            request.batch,
            dataset.name,
            dataset.train.len()
        )));
    }
    dataset.train = dataset.train.truncated(samples, geometry);
    let data = DeviceData::upload(&dataset, &device, Some(1));
    record.notes.push(format!(
        "Burn {BURN_VERSION}; data {} (the first {samples} training samples, in order)",
        dataset.name
    ));

    record.notes.push("dropout off".into());
    let model = Net::new(kind, &device)?.without_dropout();
    train_steps(model, &device, &data, request, record)
}

/// K training steps of `model` from the request's initial weights (or from its own, written
/// out for the other runners).
fn train_steps(
    model: Net,
    device: &Device,
    data: &DeviceData,
    request: &VerifyRequest,
    record: &mut VerifyRecord,
) -> Result<Option<String>, CoreError> {
    let model = match &request.weights_in {
        Some(path) => {
            let weights = Weights::read(path).map_err(CoreError::Config)?;
            load_weights(model, &weights)?
        }
        None => {
            let path = request
                .init_out
                .as_ref()
                .ok_or_else(|| CoreError::Config("no init_out to write weights to".into()))?;
            weights_of(&model).write(path).map_err(CoreError::Config)?;
            model
        }
    };
    let mut trainer = Trainer::new(model, device, request.learning_rate);
    if let Some(dtype) = amp_dtype(request.precision) {
        trainer = trainer.with_amp(dtype, Some(LossScaler::default()));
    }
    let flip = request.fault == Some(Fault::WrongWeightGradient);
    if flip {
        record
            .notes
            .push("fault injected: the first gradient's sign is flipped".into());
    }
    for step in 0..request.steps {
        let start = (step * request.batch) as i64;
        let indices = Tensor::<1, Int>::arange(start..start + request.batch as i64, device);
        let loss = trainer.step_with(data, indices, |model, grads| {
            if flip {
                flip_first_gradient(model, grads);
            }
        });
        let loss = read_scalar(loss)?;
        record.losses.push(loss.is_finite().then_some(loss));
    }
    weights_of(trainer.model())
        .write(&request.final_out)
        .map_err(CoreError::Config)?;
    record.final_weights = Some(request.final_out.clone());
    Ok(None)
}
