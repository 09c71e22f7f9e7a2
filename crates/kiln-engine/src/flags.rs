//! The flags several commands share, each defined once as a small clap `Args` that every
//! command taking it flattens (`--backends`, `--models`, `--precisions`, `--batch`, `--quick`,
//! `--reference`, `--device`, `--plan-only`). One definition, one type: a command that takes
//! one of what `bench-all` takes several of asks for it through `one`, which refuses more by
//! name; each command's default is said in the one help text. The run's own options are
//! [`crate::options`]'s; the flags a runner or the remote server parses too, kiln-contract's
//! `flags`.

use clap::Args;
use kiln_contract::{ModelKind, Precision};

/// At most one of the values a shared list flag took: `bench`, `explain` and the like take one
/// of what `bench-all` takes several of.
fn at_most_one<T: Clone>(
    values: Option<&[T]>,
    command: &str,
    flag: &str,
) -> anyhow::Result<Option<T>> {
    match values {
        None | Some([]) => Ok(None),
        Some([one]) => Ok(Some(one.clone())),
        Some(many) => anyhow::bail!(
            "{command} takes one {flag}, not {} (bench-all takes several)",
            many.len()
        ),
    }
}

/// `--backends`, one definition for bench-all, explain, verify, infer and gpu-kit.
#[derive(Args, Debug, Clone, Default)]
pub struct BackendsArg {
    /// Backends, comma-separated (default: every buildable default backend; gpu-kit: cuda,wgpu,
    /// the runners it builds and carries, one left out skipped there with that reason).
    /// verify and infer also take a CPU-emulated adapter such as lavapipe.
    #[arg(long, value_delimiter = ',')]
    pub backends: Option<Vec<String>>,
}

/// `--models` (or `--model`), one definition for bench-all, bench, explain, verify and infer.
#[derive(Args, Debug, Clone, Default)]
pub struct ModelsArg {
    /// Models, comma-separated: mnist-cnn, resnet18, resnet18-gray, mlp (default: mnist-cnn;
    /// bench-all without --quick: the article's three). bench takes one, and needs it unless
    /// --cell gives the cell.
    #[arg(long = "models", visible_alias = "model", value_delimiter = ',')]
    pub models: Option<Vec<ModelKind>>,
}

impl ModelsArg {
    /// The models given, else the MNIST CNN.
    pub fn or_default(&self) -> Vec<ModelKind> {
        self.models
            .clone()
            .unwrap_or_else(|| vec![ModelKind::MnistCnn])
    }

    /// The one model of a command that takes one.
    pub fn one(&self, command: &str) -> anyhow::Result<Option<ModelKind>> {
        at_most_one(self.models.as_deref(), command, "--model")
    }
}

/// `--precisions` (or `--precision`), one definition for bench-all, bench, explain, verify and
/// infer.
#[derive(Args, Debug, Clone, Default)]
pub struct PrecisionsArg {
    /// Precisions, comma-separated: f32, f16, bf16 (pure) or amp-f16, amp-bf16 (mixed
    /// precision with loss scaling, a training mode). Default: f32 (verify: every precision
    /// each device supports). bench and explain take one, explain and infer pure ones only.
    #[arg(
        long = "precisions",
        visible_alias = "precision",
        value_delimiter = ','
    )]
    pub precisions: Option<Vec<Precision>>,
}

impl PrecisionsArg {
    /// The precisions given, else f32.
    pub fn or_f32(&self) -> Vec<Precision> {
        self.precisions
            .clone()
            .unwrap_or_else(|| vec![Precision::F32])
    }

    /// The one precision of a command that takes one: the one given, else f32.
    pub fn one(&self, command: &str) -> anyhow::Result<Precision> {
        Ok(
            at_most_one(self.precisions.as_deref(), command, "--precision")?
                .unwrap_or(Precision::F32),
        )
    }
}

/// `--batch`, one definition for bench-all, bench, explain and verify.
#[derive(Args, Debug, Clone, Default)]
pub struct BatchArg {
    /// Batch size (default: 128, the protocol's; verify: 32, or 16 with --quick). bench-all and
    /// bench take several, comma-separated (`32,128,512`: each a cell of the matrix, with
    /// images/s drawn against batch size).
    #[arg(long, value_delimiter = ',')]
    pub batch: Option<Vec<usize>>,
}

impl BatchArg {
    /// The one batch size of a command that takes one: the one given, else `default`.
    pub fn one(&self, command: &str, default: usize) -> anyhow::Result<usize> {
        Ok(at_most_one(self.batch.as_deref(), command, "--batch")?.unwrap_or(default))
    }
}

/// `--quick`, one definition for bench-all, bench and verify.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct QuickArg {
    /// Quick profile. bench-all and bench: the embedded Fashion-MNIST sample, 3 epochs, 200 s
    /// per cell; verify: fewer, smaller steps (8 of batch 16), a check in a few minutes.
    #[arg(long)]
    pub quick: bool,
}

/// `--reference`, one definition for verify and infer.
#[derive(Args, Debug, Clone, Default)]
pub struct ReferenceArg {
    /// The backend every row is compared with: BACKEND or BACKEND:PRECISION (default: verify
    /// flex:f32; infer pytorch, else --train-on's backend).
    #[arg(long, value_name = "BACKEND[:PRECISION]")]
    pub reference: Option<String>,
}

impl ReferenceArg {
    /// The reference given, else the command's `default`.
    pub fn or<'a>(&'a self, default: &'a str) -> &'a str {
        self.reference.as_deref().unwrap_or(default)
    }
}

/// `--device`, one definition for bench-all and bench.
#[derive(Args, Debug, Clone, Default)]
pub struct DeviceArg {
    /// Devices, comma-separated (specs from `cargo xtask doctor`); one another machine serves
    /// is remote:ws://HOST:PORT[#INDEX] (what `serve` hosts there; docs/remote.md). bench: its
    /// cell's one device (default: the backend's default device). bench-all: remote devices
    /// added to the matrix (it picks local ones itself; --all-devices for every one).
    #[arg(long, value_delimiter = ',', value_name = "SPECS")]
    pub device: Vec<String>,
}

impl DeviceArg {
    /// The one device of a command that takes one.
    pub fn one(&self, command: &str) -> anyhow::Result<Option<String>> {
        at_most_one(Some(&self.device), command, "--device")
    }
}

/// `--plan-only`, one definition for bench-all and gpu-kit.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct PlanOnlyArg {
    /// Plan only: print the plan (every cell in the order it runs; gpu-kit: with its time cap)
    /// and run nothing. bench-all also writes run.json and one request per cell (cells/*.json)
    /// into the run directory, for `--resume DIR` to run later.
    #[arg(long)]
    pub plan_only: bool,
}
