//! The verify request a runner reads, the record it writes and the weights file.

use std::fmt;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::{CellId, DatasetName, Fingerprint, ModelKind, Precision, Status};

/// Version of the verify request and record; runners refuse another.
pub const VERIFY_VERSION: u32 = 1;

/// A fault a test injects to see verify fail (never set by `cargo xtask verify` itself).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The first parameter's gradient (the first convolution's weights) comes back with its
    /// sign flipped, as from a backend whose convolution weight-gradient kernel is wrong.
    WrongWeightGradient,
}

/// One backend/device/precision's part of a verify run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// [`VERIFY_VERSION`].
    pub kiln_verify: u32,
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    /// Training steps (K); step `i` trains on training samples `[i*batch, (i+1)*batch)`.
    pub steps: usize,
    pub batch: usize,
    /// Seed of the initial weights (used only without `weights_in`) and of synthetic data.
    pub seed: u64,
    pub dataset: DatasetName,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The data exported by xtask, for runners that do not read datasets themselves.
    #[serde(default)]
    pub data_file: Option<PathBuf>,
    /// Start from these weights; `None`: initialise with `seed` and write them to `init_out`.
    #[serde(default)]
    pub weights_in: Option<PathBuf>,
    #[serde(default)]
    pub init_out: Option<PathBuf>,
    /// Where the weights after the last step go.
    pub final_out: PathBuf,
    /// Tests only: a fault to inject.
    #[serde(default)]
    pub fault: Option<Fault>,
    /// Adam's learning rate (the protocol's unless given).
    #[serde(default = "crate::protocol::default_learning_rate")]
    pub learning_rate: f64,
}

impl VerifyRequest {
    /// Read and validate a request file.
    pub fn read(path: &Path) -> Result<VerifyRequest, String> {
        crate::cell::read_request(
            path,
            "a verify request",
            "`cargo xtask verify` writes them",
            VerifyRequest::validate,
        )
    }

    /// The row's coordinates, as a cell's (model, backend, device, precision).
    pub fn id(&self) -> CellId {
        CellId::new(
            self.model,
            &self.backend,
            &self.device,
            self.precision,
            self.batch,
        )
    }

    /// Whether the request can be run.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_verify != VERIFY_VERSION {
            return Err(format!(
                "verify request version {} is not {VERIFY_VERSION}; rerun `cargo xtask verify`",
                self.kiln_verify
            ));
        }
        if self.steps == 0 || self.batch == 0 {
            return Err(format!(
                "--steps and --batch must be at least 1 (got {} and {})",
                self.steps, self.batch
            ));
        }
        if !self.dataset.fits(self.model.geometry()) {
            return Err(format!(
                "dataset {} does not fit model {}",
                self.dataset, self.model
            ));
        }
        if self.weights_in.is_none() && self.init_out.is_none() {
            return Err("give weights_in (start from them) or init_out (write the start)".into());
        }
        Ok(())
    }

    /// The training samples the run needs.
    pub fn samples(&self) -> usize {
        self.steps * self.batch
    }
}

/// What one runner did with a verify request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct VerifyRecord {
    pub kiln_verify: u32,
    pub model: ModelKind,
    pub backend: String,
    pub backend_version: String,
    pub device: String,
    pub device_name: String,
    pub precision: Precision,
    pub steps: usize,
    pub batch: usize,
    /// Worker threads the backend computed with.
    #[serde(default)]
    pub threads: usize,
    pub status: Status,
    #[serde(default)]
    pub reason: Option<String>,
    /// Each step's mean batch loss (before its update), `None` where it was not finite.
    #[serde(default)]
    pub losses: Vec<Option<f64>>,
    /// The weights after the last step (`final_out`), when written.
    #[serde(default)]
    pub final_weights: Option<PathBuf>,
    #[serde(default)]
    pub fault: Option<Fault>,
    /// What the runner did to make the run deterministic (dropout) and anything else to know.
    #[serde(default)]
    pub notes: Vec<String>,
    pub wall_seconds: f64,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    /// How the run compares with the reference (`cargo xtask verify` sets it; a runner never
    /// does), and why in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_reason: Option<String>,
}

impl VerifyRecord {
    /// A record of `request` with nothing done yet (status failed until it succeeds).
    pub fn start(request: &VerifyRequest, backend_version: &str) -> Self {
        VerifyRecord {
            kiln_verify: VERIFY_VERSION,
            model: request.model,
            backend: request.backend.clone(),
            backend_version: backend_version.into(),
            device: request.device.clone(),
            device_name: request.device.clone(),
            precision: request.precision,
            steps: request.steps,
            batch: request.batch,
            threads: 0,
            status: Status::Failed,
            reason: None,
            losses: Vec::new(),
            final_weights: None,
            fault: request.fault,
            notes: Vec::new(),
            wall_seconds: 0.0,
            fingerprint: None,
            verdict: None,
            verdict_reason: None,
        }
    }

    /// The first step whose loss was not finite (1-based), if any.
    pub fn first_non_finite(&self) -> Option<usize> {
        self.losses.iter().position(Option::is_none).map(|i| i + 1)
    }

    /// `backend device precision`, the row's name.
    pub fn label(&self) -> String {
        format!("{} {} {}", self.backend, self.device, self.precision)
    }
}

// ------------------------------------------------------------------------------------ weights

/// One named tensor of f32 values.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// A model's trainable parameters in visiting order (Burn's `Module::visit`, PyTorch's
/// `parameters()`), in Burn's layout: a linear layer's weight is `[in, out]` (PyTorch's
/// transposed). Stored as a safetensors file whose tensor names start with the zero-padded
/// position (`003.conv2.weight`), so the order survives the format's sorted header.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Weights {
    pub tensors: Vec<NamedTensor>,
}

impl Weights {
    /// The safetensors bytes (the `safetensors` crate's format: each tensor F32, named with
    /// its zero-padded position first).
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let bytes: Vec<Vec<u8>> = self
            .tensors
            .iter()
            .map(|t| t.values.iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect();
        let mut views = Vec::with_capacity(self.tensors.len());
        for (i, (t, raw)) in self.tensors.iter().zip(&bytes).enumerate() {
            let view = TensorView::new(Dtype::F32, t.shape.clone(), raw)
                .map_err(|e| format!("tensor {} ({:?}): {e}", t.name, t.shape))?;
            views.push((format!("{i:03}.{}", t.name), view));
        }
        safetensors::serialize(views, None).map_err(|e| format!("cannot encode the weights: {e}"))
    }

    /// Parse safetensors bytes written by [`Weights::to_bytes`] or the PyTorch reference; an
    /// error names the tensor that cannot be read.
    pub fn from_bytes(bytes: &[u8]) -> Result<Weights, String> {
        let file = SafeTensors::deserialize(bytes).map_err(|e| format!("not safetensors: {e}"))?;
        let mut tensors = file.tensors();
        // Keys sort by their zero-padded position.
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::with_capacity(tensors.len());
        for (key, view) in tensors {
            if view.dtype() != Dtype::F32 {
                return Err(format!("tensor {key}: {} (only F32 is read)", view.dtype()));
            }
            let name = match key.split_once('.') {
                Some((pos, rest)) if pos.parse::<usize>().is_ok() => rest.to_string(),
                _ => key.clone(),
            };
            out.push(NamedTensor {
                name,
                shape: view.shape().to_vec(),
                values: view
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            });
        }
        Ok(Weights { tensors: out })
    }

    pub fn write(&self, path: &Path) -> Result<(), String> {
        std::fs::write(path, self.to_bytes()?)
            .map_err(|e| format!("cannot write weights to {}: {e}", path.display()))
    }

    pub fn read(path: &Path) -> Result<Weights, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read weights from {}: {e}", path.display()))?;
        Weights::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// How a row compares with the reference. Only [`Verdict::Deviates`] says that a backend
/// computes another training than the reference: `cargo xtask verify` exits 1 for it alone.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within the precision's pass limits of the reference.
    Pass,
    /// Agrees, but between the pass and warn limits.
    Warn,
    /// Its loss stops being finite, and so does the reference's run in the same precision:
    /// the precision diverges, not the backend.
    DivergesLikeReference,
    /// Beyond the warn limits, or not finite where the reference in its precision stays
    /// finite, or it failed.
    Deviates,
    /// The backend or device cannot run this precision (the probe or the runner says so).
    Unsupported,
}

impl Verdict {
    /// True for the verdicts that say the backend agrees with the reference.
    pub fn agrees(self) -> bool {
        matches!(
            self,
            Verdict::Pass | Verdict::Warn | Verdict::DivergesLikeReference
        )
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::DivergesLikeReference => "diverges, like the reference",
            Verdict::Deviates => "deviates",
            Verdict::Unsupported => "unsupported",
        })
    }
}
