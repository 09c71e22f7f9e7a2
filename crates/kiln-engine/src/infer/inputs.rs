//! What every row of one model reads, made once per run: the PyTorch reference's data file,
//! the weights (given, or trained on `--train-on`'s runner) and the test labels.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use kiln_contract::verify::{VERIFY_VERSION, VerifyRequest};
use kiln_contract::{CellRequest, DatasetName, ModelKind, Precision, Profile, Status};

use crate::options::InferArgs;
use crate::runners::Built;

/// What every row of one model reads, made once per run: the reference's data file (where a
/// runner needs one), the weights, and the labels of the test samples its accuracy is judged by.
pub(super) struct ModelInputs {
    pub model: ModelKind,
    pub dataset: DatasetName,
    pub data_file: Option<PathBuf>,
    pub weights: PathBuf,
    pub labels: Vec<u8>,
}

/// `model`'s [`Inputs`]: the weights are `--weights`, else trained on `--train-on`'s runner of
/// `built`.
pub(super) fn inputs(
    args: &InferArgs,
    built: &[Built],
    asking: &crate::answer::Asking,
    (model, dataset): (ModelKind, DatasetName),
) -> Result<ModelInputs> {
    let data_file = match built.iter().any(|(_, r, _)| r.needs_data_file) {
        true => Some(export(args, model, dataset, asking.out)?),
        false => None,
    };
    let weights = match &args.weights {
        Some(w) => w.clone(),
        None => train(args, built, asking, (model, dataset), data_file.as_ref())?,
    };
    Ok(ModelInputs {
        model,
        dataset,
        data_file,
        weights,
        labels: test_labels(args, model, dataset)?,
    })
}

/// The data file of the PyTorch reference: what the Rust runners load for `model`.
pub(super) fn export(
    args: &InferArgs,
    model: ModelKind,
    dataset: DatasetName,
    out: &Path,
) -> Result<PathBuf> {
    let mut cell = CellRequest::new(model, "pytorch", Profile::Quick);
    cell.dataset = Some(dataset);
    cell.settings.data_dir = args.data.data_dir.clone();
    cell.settings.seed = args.data.seed();
    crate::datasets::export_data(&cell, out)
}

/// Weights for `model`: a short training (verify's run: `--train-steps` steps of batch 64 from
/// seeded initial weights, in sample order) on `--train-on`'s runner, written to weights/.
fn train(
    args: &InferArgs,
    built: &[Built],
    asking: &crate::answer::Asking,
    (model, dataset): (ModelKind, DatasetName),
    data_file: Option<&PathBuf>,
) -> Result<PathBuf> {
    let Some((backend, runner, probe)) = built.iter().find(|(b, _, _)| b.name == args.train_on)
    else {
        bail!("--train-on {}: that backend cannot run here", args.train_on);
    };
    let device = crate::answer::one_device(probe)
        .map_err(|why| anyhow::anyhow!("--train-on {}: {why}", args.train_on))?;
    let weights = asking.out.join("weights");
    let request = VerifyRequest {
        kiln_verify: VERIFY_VERSION,
        model,
        backend: backend.name.clone(),
        device: device.spec.clone(),
        precision: Precision::F32,
        steps: args.train_steps,
        batch: 64,
        seed: args.data.seed(),
        dataset,
        data_dir: args.data.data_dir.clone(),
        data_file: data_file.cloned().filter(|_| runner.needs_data_file),
        weights_in: None,
        init_out: Some(weights.join(format!("{model}-init.safetensors"))),
        final_out: weights.join(format!("{model}.safetensors")),
        fault: None,
        learning_rate: kiln_contract::LEARNING_RATE,
    };
    request
        .validate()
        .map_err(|e| anyhow::anyhow!("--train-steps: {e}"))?;
    eprintln!(
        "kiln: training {model}'s weights on {} ({} steps of batch 64)",
        backend.name, args.train_steps
    );
    let record = asking.row(runner, &request, None, &probe.backend_version);
    match (record.status, record.final_weights) {
        (Status::Ok, Some(path)) => Ok(path),
        (status, _) => bail!(
            "training {model}'s weights on {} {}: {}",
            backend.name,
            status.as_str(),
            record.reason.unwrap_or_default()
        ),
    }
}

/// The labels of the test samples the rows predict, for each row's accuracy.
fn test_labels(args: &InferArgs, model: ModelKind, dataset: DatasetName) -> Result<Vec<u8>> {
    let data = kiln_data::load(&kiln_data::Request {
        name: dataset,
        geometry: model.geometry(),
        data_dir: args.data.data_dir.clone(),
        seed: args.data.seed(),
        synthetic_sizes: Profile::Quick.synthetic_sizes(model.standard_epoch()),
    })?;
    Ok(data
        .test
        .labels
        .iter()
        .take(args.samples)
        .copied()
        .collect())
}
