//! `cargo xtask explain`: one training step of a model taken apart into its operations. This
//! module holds what every runner and the report share: the operations of each model at the
//! shapes one step runs them ([`sites`], the one list both the Rust runners and the PyTorch
//! reference time), the request and record schema, and the table maths (time per step, share,
//! ratio to PyTorch, the share of the measured step the operations explain, the operations
//! behind each backend's gap to PyTorch).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Fingerprint, ModelKind, Precision, Status};

/// Version of the explain request and record; runners refuse another.
pub const EXPLAIN_VERSION: u32 = 1;

/// One kind of layer, with what fixes its cost.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LayerOp {
    Conv2d {
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        bias: bool,
    },
    MaxPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    BatchNorm {
        channels: usize,
    },
    Relu,
    /// `Dropout2d`: whole channels zeroed (probability in thousandths, so the op stays `Eq`).
    ChannelDropout {
        per_mille: u32,
    },
    /// Max over each channel's plane (`AdaptiveMaxPool2d(1)` + flatten).
    GlobalMaxPool,
    /// Mean over each channel's plane (`AdaptiveAvgPool2d(1)` + flatten).
    GlobalAvgPool,
    Linear {
        in_features: usize,
        out_features: usize,
    },
    /// A residual connection's sum.
    ResidualAdd,
    CrossEntropy,
    /// Adam's update of every trainable parameter.
    Adam {
        parameters: usize,
    },
}

impl LayerOp {
    /// The op's family, as the table's rows name it.
    pub fn family(&self) -> &'static str {
        match self {
            LayerOp::Conv2d { .. } => "conv2d",
            LayerOp::MaxPool2d { .. } => "max pool",
            LayerOp::BatchNorm { .. } => "batch norm",
            LayerOp::Relu => "relu",
            LayerOp::ChannelDropout { .. } => "dropout2d",
            LayerOp::GlobalMaxPool => "global max pool",
            LayerOp::GlobalAvgPool => "global avg pool",
            LayerOp::Linear { .. } => "linear",
            LayerOp::ResidualAdd => "residual add",
            LayerOp::CrossEntropy => "cross-entropy",
            LayerOp::Adam { .. } => "adam",
        }
    }

    /// Trainable parameters the layer holds.
    pub fn parameters(&self) -> usize {
        match *self {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                bias,
                ..
            } => in_channels * out_channels * kernel * kernel + if bias { out_channels } else { 0 },
            LayerOp::BatchNorm { channels } => 2 * channels,
            LayerOp::Linear {
                in_features,
                out_features,
            } => in_features * out_features + out_features,
            _ => 0,
        }
    }

    /// The shape the layer makes of `input`.
    pub fn output(&self, input: &[usize]) -> Vec<usize> {
        let window =
            |side: usize, k: usize, s: usize, p: usize| (side + 2 * p).saturating_sub(k) / s + 1;
        match (*self, input) {
            (
                LayerOp::Conv2d {
                    out_channels,
                    kernel,
                    stride,
                    padding,
                    ..
                },
                &[b, _, h, w],
            ) => vec![
                b,
                out_channels,
                window(h, kernel, stride, padding),
                window(w, kernel, stride, padding),
            ],
            (
                LayerOp::MaxPool2d {
                    kernel,
                    stride,
                    padding,
                },
                &[b, c, h, w],
            ) => vec![
                b,
                c,
                window(h, kernel, stride, padding),
                window(w, kernel, stride, padding),
            ],
            (LayerOp::GlobalMaxPool | LayerOp::GlobalAvgPool, &[b, c, _, _]) => vec![b, c],
            (LayerOp::Linear { out_features, .. }, &[b, _]) => vec![b, out_features],
            (LayerOp::CrossEntropy, _) => vec![1],
            (LayerOp::Adam { .. }, _) => vec![],
            _ => input.to_vec(),
        }
    }

    /// Multiply-adds of the layer's forward pass on `input` (convolutions and linear layers;
    /// the rest is memory-bound and counted as none, as FLOP counts of CNNs do).
    pub fn forward_macs(&self, input: &[usize]) -> u64 {
        let out = self.output(input);
        match (*self, input) {
            (
                LayerOp::Conv2d {
                    in_channels,
                    kernel,
                    ..
                },
                &[_, ..],
            ) => (in_channels * kernel * kernel) as u64 * out.iter().product::<usize>() as u64,
            (
                LayerOp::Linear {
                    in_features,
                    out_features,
                },
                &[b, _],
            ) => (b * in_features * out_features) as u64,
            _ => 0,
        }
    }

    /// The parts of its training step a layer is timed in: its forward pass, then its
    /// backward pass as Burn's autodiff runs it — a convolution's or linear layer's input
    /// gradient and parameter gradients apart (two kernels each), a batch norm's in one
    /// (they share their reductions), a parameter-free layer's input gradient. `input_grad`
    /// is false for the first layer (nothing before it wants a gradient).
    pub fn phases(&self, input_grad: bool) -> Vec<Phase> {
        match self {
            LayerOp::Adam { .. } => vec![Phase::Update],
            LayerOp::Conv2d { .. } | LayerOp::Linear { .. } => {
                let mut p = vec![Phase::Forward];
                if input_grad {
                    p.push(Phase::InputGrad);
                }
                p.push(Phase::ParamGrad);
                p
            }
            LayerOp::BatchNorm { .. } => vec![Phase::Forward, Phase::Backward],
            _ if input_grad => vec![Phase::Forward, Phase::InputGrad],
            _ => vec![Phase::Forward],
        }
    }

    /// A short description with the sizes that matter (`conv2d 64→512 k3`).
    pub fn describe(&self) -> String {
        match *self {
            LayerOp::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                ..
            } => {
                let s = if stride == 1 {
                    String::new()
                } else {
                    format!(" s{stride}")
                };
                format!("conv2d {in_channels}→{out_channels} k{kernel}{s}")
            }
            LayerOp::MaxPool2d { kernel, stride, .. } => format!("max pool k{kernel} s{stride}"),
            LayerOp::BatchNorm { channels } => format!("batch norm {channels}"),
            LayerOp::Linear {
                in_features,
                out_features,
            } => format!("linear {in_features}→{out_features}"),
            LayerOp::ChannelDropout { per_mille } => {
                format!("dropout2d p={}", f64::from(per_mille) / 1000.0)
            }
            LayerOp::Adam { parameters } => format!("adam ({parameters} parameters)"),
            other => other.family().to_string(),
        }
    }
}

/// A part of one layer's work in a training step.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    /// The gradient of the layer's input (a convolution's: a transposed convolution).
    InputGrad,
    /// The gradients of the layer's parameters (with its bias's, where it has one).
    ParamGrad,
    /// Input and parameter gradients together (batch norm).
    Backward,
    /// The optimizer's update.
    Update,
}

impl Phase {
    /// How tables name the phase.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::InputGrad => "input grad",
            Phase::ParamGrad => "weight grad",
            Phase::Backward => "backward",
            Phase::Update => "update",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One layer at the shape one step runs it, with every layer of the model that is the same op
/// at the same shape (they are timed once and counted as many times as they run).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Site {
    pub op: LayerOp,
    /// The input's shape (`[batch, channels, height, width]`, `[batch, features]`; empty for
    /// the optimizer).
    pub input: Vec<usize>,
    /// Whether the step needs the gradient of this layer's input.
    pub input_grad: bool,
    /// The model's layers that run this op at this shape (`layer2.0.conv1`), in order.
    pub layers: Vec<String>,
}

impl Site {
    /// The shape the site produces.
    pub fn output(&self) -> Vec<usize> {
        self.op.output(&self.input)
    }

    /// The op with its input's spatial size (`conv2d 64→512 k3 at 13×13`).
    pub fn describe(&self) -> String {
        match self.input.as_slice() {
            &[_, _, h, w] => format!("{} at {h}×{w}", self.op.describe()),
            _ => self.op.describe(),
        }
    }

    /// The phases it is timed in.
    pub fn phases(&self) -> Vec<Phase> {
        self.op.phases(self.input_grad)
    }
}

/// Walks a model's layers in order, tracking the activation's shape and whether it needs a
/// gradient, and merges layers that are the same op at the same shape.
struct Walk {
    sites: Vec<Site>,
    shape: Vec<usize>,
    grad: bool,
}

impl Walk {
    fn new(input: Vec<usize>) -> Self {
        Walk {
            sites: Vec::new(),
            shape: input,
            grad: false,
        }
    }

    fn layer(&mut self, name: &str, op: LayerOp) {
        let output = op.output(&self.shape);
        let input = std::mem::replace(&mut self.shape, output);
        let input_grad = self.grad;
        self.grad |= op.parameters() > 0;
        match self
            .sites
            .iter_mut()
            .find(|s| s.op == op && s.input == input && s.input_grad == input_grad)
        {
            Some(site) => site.layers.push(name.to_string()),
            None => self.sites.push(Site {
                op,
                input,
                input_grad,
                layers: vec![name.to_string()],
            }),
        }
    }

    fn finish(mut self) -> Vec<Site> {
        self.layer("loss", LayerOp::CrossEntropy);
        let parameters = self
            .sites
            .iter()
            .map(|s| s.op.parameters() * s.layers.len())
            .sum();
        self.sites.push(Site {
            op: LayerOp::Adam { parameters },
            input: Vec::new(),
            input_grad: false,
            layers: vec!["optimizer".into()],
        });
        self.sites
    }
}

fn conv(
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    bias: bool,
) -> LayerOp {
    LayerOp::Conv2d {
        in_channels: cin,
        out_channels: cout,
        kernel,
        stride,
        padding,
        bias,
    }
}

/// Every operation of one training step of `model` at batch size `batch`, in the order the
/// step runs them, as kiln-core's `models.rs` (and the PyTorch reference's models) build the
/// network. Tests in kiln-core check this list against the model's own layers and parameters.
pub fn sites(model: ModelKind, batch: usize) -> Vec<Site> {
    let g = model.geometry();
    let mut walk = Walk::new(vec![batch, g.channels, g.height, g.width]);
    match model {
        ModelKind::MnistCnn => {
            let pool = LayerOp::MaxPool2d {
                kernel: 2,
                stride: 2,
                padding: 0,
            };
            walk.layer("conv1", conv(1, 64, 3, 1, 0, true));
            walk.layer("pool1", pool);
            walk.layer("conv2", conv(64, 512, 3, 1, 0, true));
            walk.layer("pool2", pool);
            walk.layer("dropout", LayerOp::ChannelDropout { per_mille: 100 });
            walk.layer("global max pool", LayerOp::GlobalMaxPool);
            walk.layer(
                "fc1",
                LayerOp::Linear {
                    in_features: 512,
                    out_features: 1024,
                },
            );
            walk.layer("relu", LayerOp::Relu);
            walk.layer(
                "fc2",
                LayerOp::Linear {
                    in_features: 1024,
                    out_features: g.classes,
                },
            );
        }
        ModelKind::ResNet18 | ModelKind::ResNet18Gray => {
            walk.layer("conv1", conv(g.channels, 64, 7, 2, 3, false));
            walk.layer("bn1", LayerOp::BatchNorm { channels: 64 });
            walk.layer("relu", LayerOp::Relu);
            walk.layer(
                "maxpool",
                LayerOp::MaxPool2d {
                    kernel: 3,
                    stride: 2,
                    padding: 1,
                },
            );
            let mut inplanes = 64;
            for (stage, (planes, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
                .into_iter()
                .enumerate()
            {
                for block in 0..2 {
                    let name = format!("layer{}.{block}", stage + 1);
                    let stride = if block == 0 { stride } else { 1 };
                    let (block_input, block_grad) = (walk.shape.clone(), walk.grad);
                    walk.layer(
                        &format!("{name}.conv1"),
                        conv(inplanes, planes, 3, stride, 1, false),
                    );
                    walk.layer(
                        &format!("{name}.bn1"),
                        LayerOp::BatchNorm { channels: planes },
                    );
                    walk.layer(&format!("{name}.relu1"), LayerOp::Relu);
                    walk.layer(
                        &format!("{name}.conv2"),
                        conv(planes, planes, 3, 1, 1, false),
                    );
                    walk.layer(
                        &format!("{name}.bn2"),
                        LayerOp::BatchNorm { channels: planes },
                    );
                    if stride != 1 || inplanes != planes {
                        let main = std::mem::replace(&mut walk.shape, block_input);
                        walk.grad = block_grad;
                        walk.layer(
                            &format!("{name}.downsample.conv"),
                            conv(inplanes, planes, 1, stride, 0, false),
                        );
                        walk.layer(
                            &format!("{name}.downsample.bn"),
                            LayerOp::BatchNorm { channels: planes },
                        );
                        debug_assert_eq!(walk.shape, main);
                        walk.shape = main;
                    }
                    walk.layer(&format!("{name}.add"), LayerOp::ResidualAdd);
                    walk.layer(&format!("{name}.relu2"), LayerOp::Relu);
                    inplanes = planes;
                }
            }
            walk.layer("avgpool", LayerOp::GlobalAvgPool);
            walk.layer(
                "fc",
                LayerOp::Linear {
                    in_features: 512,
                    out_features: g.classes,
                },
            );
        }
    }
    walk.finish()
}

/// Floating-point operations of one training sample (forward + backward = 3 x forward, a
/// multiply-add counted as 2), from the convolutions and linear layers of [`sites`].
pub fn training_flops_per_sample(model: ModelKind) -> u64 {
    let forward_macs: u64 = sites(model, 1)
        .iter()
        .map(|s| s.op.forward_macs(&s.input) * s.layers.len() as u64)
        .sum();
    3 * 2 * forward_macs
}

/// What `cargo xtask explain` asks a runner to time (one backend, device and precision).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExplainRequest {
    pub kiln_explain: u32,
    pub model: ModelKind,
    pub backend: String,
    pub device: String,
    pub precision: Precision,
    pub batch: usize,
    pub seed: u64,
    /// Untimed runs of each op before it is timed.
    pub warmup: usize,
    /// Timed runs of each op (the median is kept); fewer when an op is slow, see `op_seconds`.
    pub repeats: usize,
    /// An op stops repeating once its timed runs took this long (and at least 3 ran).
    pub op_seconds: f64,
    /// The operations, from [`sites`].
    pub sites: Vec<Site>,
}

impl ExplainRequest {
    /// The request for `model` on `backend`'s `device` with the default repeats.
    pub fn new(
        model: ModelKind,
        backend: &str,
        device: &str,
        precision: Precision,
        batch: usize,
    ) -> Self {
        ExplainRequest {
            kiln_explain: EXPLAIN_VERSION,
            model,
            backend: backend.into(),
            device: device.into(),
            precision,
            batch,
            seed: 42,
            warmup: 1,
            repeats: 7,
            op_seconds: 4.0,
            sites: sites(model, batch),
        }
    }

    /// Read a request xtask wrote, with an error naming the file.
    pub fn read(path: &Path) -> Result<ExplainRequest, String> {
        crate::cell::read_request(
            path,
            "an explain request",
            "`cargo xtask explain` writes them",
            ExplainRequest::validate,
        )
    }

    /// Whether the request can be run.
    pub fn validate(&self) -> Result<(), String> {
        if self.kiln_explain != EXPLAIN_VERSION {
            return Err(format!(
                "explain request version {} is not {EXPLAIN_VERSION}; rerun `cargo xtask explain`",
                self.kiln_explain
            ));
        }
        if self.batch == 0 || self.repeats == 0 {
            return Err("batch and repeats must be at least 1".into());
        }
        if self.precision.is_amp() {
            return Err(format!(
                "explain times pure precisions (f32, f16, bf16); {} mixes two types per op, \
                 which isolated ops cannot reproduce",
                self.precision
            ));
        }
        if self.sites.is_empty() {
            return Err("the request lists no operations".into());
        }
        Ok(())
    }
}

/// A timed thing: median of the timed runs, their range, how many ran.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub median_seconds: f64,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub runs: usize,
}

impl Timing {
    /// The timing of `samples` (seconds); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Timing> {
        let finite: Vec<f64> = samples.iter().copied().filter(|s| s.is_finite()).collect();
        let stats = crate::Stats::from_samples(&finite)?;
        Some(Timing {
            median_seconds: stats.median,
            min_seconds: stats.min,
            max_seconds: stats.max,
            runs: stats.n,
        })
    }
}

/// One op of one site in one phase, timed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OpTiming {
    /// Index of the site in the request's (and record's) `sites`.
    pub site: usize,
    pub phase: Phase,
    pub timing: Timing,
}

/// What a runner measured for one explain request; xtask adds the fingerprint.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExplainRecord {
    pub kiln_explain: u32,
    pub model: ModelKind,
    pub backend: String,
    pub backend_version: String,
    pub device: String,
    pub device_name: String,
    pub precision: Precision,
    pub batch: usize,
    pub threads: usize,
    pub warmup: usize,
    pub repeats: usize,
    pub status: Status,
    #[serde(default)]
    pub reason: Option<String>,
    pub sites: Vec<Site>,
    #[serde(default)]
    pub ops: Vec<OpTiming>,
    /// The whole training step (forward, loss, backward, update) on the same shapes.
    #[serde(default)]
    pub step: Option<Timing>,
    /// How the runner timed (what its backward times include or leave out).
    #[serde(default)]
    pub notes: Vec<String>,
    pub wall_seconds: f64,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
}

impl ExplainRecord {
    /// A record of `request` with nothing timed yet.
    pub fn start(request: &ExplainRequest, backend_version: &str, threads: usize) -> Self {
        ExplainRecord {
            kiln_explain: EXPLAIN_VERSION,
            model: request.model,
            backend: request.backend.clone(),
            backend_version: backend_version.into(),
            device: request.device.clone(),
            device_name: request.device.clone(),
            precision: request.precision,
            batch: request.batch,
            threads,
            warmup: request.warmup,
            repeats: request.repeats,
            status: Status::Failed,
            reason: None,
            sites: request.sites.clone(),
            ops: Vec::new(),
            step: None,
            notes: Vec::new(),
            wall_seconds: 0.0,
            fingerprint: None,
        }
    }

    /// Seconds per step of one timed op: its median times how many layers run it.
    pub fn per_step(&self, op: &OpTiming) -> f64 {
        let count = self.sites.get(op.site).map_or(1, |s| s.layers.len());
        op.timing.median_seconds * count as f64
    }

    /// The sum of every op's time per step.
    pub fn ops_total(&self) -> f64 {
        self.ops.iter().map(|o| self.per_step(o)).sum()
    }

    /// The sum of the ops against the measured step (1.0 = all of it explained).
    pub fn explained(&self) -> Option<f64> {
        let step = self.step?.median_seconds;
        (step > 0.0 && !self.ops.is_empty()).then(|| self.ops_total() / step)
    }

    /// The band of "explained" (sum of ops ÷ measured step) inside which the ops timed alone are
    /// read as a decomposition of the step (docs/explain.md).
    pub const BAND: (f64, f64) = (0.70, 1.30);

    /// Why the ops do not decompose the step, when the explained share is outside [`Self::BAND`]:
    /// one line for the table and the record, with what can still be read from them.
    pub fn outside_band(&self) -> Option<String> {
        decomposition_note(&self.column(), self.explained()?)
    }

    /// How tables name the record's column.
    pub fn column(&self) -> String {
        let device = if self.device == "cpu" || self.device == "default" {
            String::new()
        } else {
            format!(" {}", self.device)
        };
        let precision = if self.precision == Precision::F32 {
            String::new()
        } else {
            format!(" {}", self.precision)
        };
        format!("{}{device}{precision}", self.backend)
    }

    /// The op a timing is of, with its phase (`conv2d 64→512 k3 at 13×13 · weight grad`).
    pub fn op_label(&self, op: &OpTiming) -> String {
        match self.sites.get(op.site) {
            Some(site) => format!("{} · {}", site.describe(), op.phase),
            None => format!("op #{} · {}", op.site, op.phase),
        }
    }
}

/// The note for a column whose ops explain `share` of its measured step, when that is outside
/// [`ExplainRecord::BAND`].
pub fn decomposition_note(column: &str, share: f64) -> Option<String> {
    let (low, high) = ExplainRecord::BAND;
    let band = format!("{:.0}–{:.0}%", 100.0 * low, 100.0 * high);
    if share > high {
        Some(format!(
            "{column}: its ops timed alone add up to {:.0}% of the measured step, above {band}: \
             here they are no decomposition of the step (alone, each op pays for cold caches, \
             its own synchronisation and thread start-up, which the step overlaps); its shares \
             overstate, but the ratios between backends for the same op still compare like with \
             like",
            100.0 * share
        ))
    } else if share < low {
        Some(format!(
            "{column}: its ops timed alone add up to only {:.0}% of the measured step, below \
             {band}: the step spends time outside them (data gathering, allocation, \
             synchronisation, or ops fused differently); read the ratios between backends for \
             the same op, not the shares",
            100.0 * share
        ))
    } else {
        None
    }
}

/// The row of the op-family table an op belongs to (`conv2d · weight grad`).
pub fn family_row(site: &Site, phase: Phase) -> String {
    format!("{} · {phase}", site.op.family())
}

/// One row of the op × backend table.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyRow {
    pub label: String,
    /// Seconds per step in each record's column (`None`: the record has no such op).
    pub seconds: Vec<Option<f64>>,
}

/// An op's share of a backend's gap to the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct GapItem {
    pub label: String,
    /// This backend's seconds per step minus the reference's.
    pub extra_seconds: f64,
    /// `extra_seconds` as a share of the whole gap of the ops' sums.
    pub share_of_gap: f64,
}

/// The op × backend table of one model and batch.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainTable {
    pub model: ModelKind,
    pub batch: usize,
    pub columns: Vec<String>,
    pub rows: Vec<FamilyRow>,
    /// Each column's sum of ops per step.
    pub totals: Vec<f64>,
    /// Each column's measured step.
    pub steps: Vec<Option<f64>>,
    /// The column the ratios divide by (the PyTorch reference), if one ran.
    pub reference: Option<usize>,
    /// Each non-reference column's three largest op-level contributions to its gap.
    pub gaps: Vec<Vec<GapItem>>,
}

impl ExplainTable {
    /// The table of the ok records of one model and batch (in their order).
    pub fn new(records: &[&ExplainRecord]) -> Option<ExplainTable> {
        let first = records.first()?;
        let mut rows: Vec<FamilyRow> = Vec::new();
        for (column, record) in records.iter().enumerate() {
            for op in &record.ops {
                let Some(site) = record.sites.get(op.site) else {
                    continue;
                };
                let label = family_row(site, op.phase);
                let index = match rows.iter().position(|r| r.label == label) {
                    Some(i) => i,
                    None => {
                        rows.push(FamilyRow {
                            label,
                            seconds: vec![None; records.len()],
                        });
                        rows.len() - 1
                    }
                };
                let cell = &mut rows[index].seconds[column];
                *cell = Some(cell.unwrap_or(0.0) + record.per_step(op));
            }
        }
        let reference = records.iter().position(|r| r.backend == "pytorch");
        let gaps = records
            .iter()
            .enumerate()
            .map(|(i, r)| match reference {
                Some(j) if j != i => gap_items(r, records[j]),
                _ => Vec::new(),
            })
            .collect();
        Some(ExplainTable {
            model: first.model,
            batch: first.batch,
            columns: records.iter().map(|r| r.column()).collect(),
            rows,
            totals: records.iter().map(|r| r.ops_total()).collect(),
            steps: records
                .iter()
                .map(|r| r.step.map(|s| s.median_seconds))
                .collect(),
            reference,
            gaps,
        })
    }

    /// Column `column`'s sum of ops against its measured step (1.0 = all of it explained).
    pub fn explained(&self, column: usize) -> Option<f64> {
        let step = self.steps.get(column).copied().flatten()?;
        (step > 0.0).then(|| self.totals[column] / step)
    }

    /// The rows ordered by their largest time in any column, largest first.
    pub fn rows_by_weight(&self) -> Vec<&FamilyRow> {
        let mut rows: Vec<&FamilyRow> = self.rows.iter().collect();
        let weight = |r: &FamilyRow| r.seconds.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
        rows.sort_by(|a, b| weight(b).total_cmp(&weight(a)));
        rows
    }
}

/// The three ops (site and phase) that add most to `record`'s time over `reference`'s.
fn gap_items(record: &ExplainRecord, reference: &ExplainRecord) -> Vec<GapItem> {
    let find = |r: &ExplainRecord, site: &Site, phase: Phase| {
        r.ops
            .iter()
            .find(|o| o.phase == phase && r.sites.get(o.site) == Some(site))
            .map(|o| r.per_step(o))
    };
    let gap = record.ops_total() - reference.ops_total();
    let mut items: Vec<GapItem> = record
        .ops
        .iter()
        .filter_map(|op| {
            let site = record.sites.get(op.site)?;
            let theirs = find(reference, site, op.phase).unwrap_or(0.0);
            let extra = record.per_step(op) - theirs;
            Some(GapItem {
                label: record.op_label(op),
                extra_seconds: extra,
                share_of_gap: if gap.abs() > 0.0 { extra / gap } else { 0.0 },
            })
        })
        .collect();
    items.sort_by(|a, b| b.extra_seconds.total_cmp(&a.extra_seconds));
    items.truncate(3);
    items
}

/// Milliseconds with a precision that suits them.
pub fn ms(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// The Markdown of one table: op × backend (time per step, share, ratio to PyTorch), the sums
/// against the measured steps, and each backend's three largest contributions to its gap.
pub fn markdown(table: &ExplainTable) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### {} — one training step at batch {}, op by op\n",
        table.model, table.batch
    );
    let _ = write!(out, "| Op |");
    for c in &table.columns {
        let _ = write!(out, " {c} |");
    }
    let _ = write!(out, "\n|---|");
    for _ in &table.columns {
        let _ = write!(out, "---:|");
    }
    out.push('\n');
    for row in table.rows_by_weight() {
        let _ = write!(out, "| {} |", row.label);
        for (i, cell) in row.seconds.iter().enumerate() {
            let text = match cell {
                None => "—".to_string(),
                Some(s) => {
                    let share = if table.totals[i] > 0.0 {
                        format!(" ({:.0}%)", 100.0 * s / table.totals[i])
                    } else {
                        String::new()
                    };
                    let ratio = match table.reference {
                        Some(r) if r != i => match row.seconds[r] {
                            Some(theirs) if theirs > 0.0 => format!(", {:.2}×", s / theirs),
                            _ => String::new(),
                        },
                        _ => String::new(),
                    };
                    format!("{}{share}{ratio}", ms(*s))
                }
            };
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    let _ = write!(out, "| **sum of ops** |");
    for t in &table.totals {
        let _ = write!(out, " **{}** |", ms(*t));
    }
    let _ = write!(out, "\n| measured step |");
    for s in &table.steps {
        let _ = write!(out, " {} |", s.map_or("not measured".into(), ms));
    }
    let _ = write!(out, "\n| explained |");
    let mut notes = Vec::new();
    for column in 0..table.columns.len() {
        let explained = table.explained(column);
        let outside = explained.and_then(|e| decomposition_note(&table.columns[column], e));
        let text = explained.map_or("—".into(), |e| {
            format!(
                "{:.0}%{}",
                100.0 * e,
                if outside.is_some() { " ⚠" } else { "" }
            )
        });
        notes.extend(outside);
        let _ = write!(out, " {text} |");
    }
    out.push_str("\n\n");
    for note in notes {
        let _ = writeln!(out, "⚠ {note}.\n");
    }
    if let Some(r) = table.reference {
        let reference = &table.columns[r];
        let _ = writeln!(
            out,
            "Each cell: time per step (share of the column's sum of ops, ratio to {reference}'s \
             same op). Where each backend's time over {reference} goes (the three ops that add \
             most):\n"
        );
        for (i, items) in table.gaps.iter().enumerate() {
            if i == r || items.is_empty() {
                continue;
            }
            let gap = table.totals[i] - table.totals[r];
            let head = if gap > 0.0 {
                format!(
                    "- **{}**: {} more per step than {reference} in the sum of ops",
                    table.columns[i],
                    ms(gap)
                )
            } else {
                format!(
                    "- **{}**: {} less per step than {reference} in the sum of ops; the ops \
                     where it is slower",
                    table.columns[i],
                    ms(-gap)
                )
            };
            let parts: Vec<String> = items
                .iter()
                .filter(|g| g.extra_seconds > 0.0)
                .map(|g| {
                    if gap > 0.0 {
                        format!(
                            "{} (+{}, {:.0}% of the gap)",
                            g.label,
                            ms(g.extra_seconds),
                            100.0 * g.share_of_gap
                        )
                    } else {
                        format!("{} (+{})", g.label, ms(g.extra_seconds))
                    }
                })
                .collect();
            let _ = writeln!(out, "{head}: {}.", parts.join("; "));
        }
        out.push('\n');
    } else {
        out.push_str(
            "Each cell: time per step (share of the column's sum of ops). No PyTorch reference \
             ran, so no ratios.\n\n",
        );
    }
    out
}

/// The explain records of a file (`explain.jsonl`), with an error naming the file and line.
pub fn read_records(path: &Path) -> Result<Vec<ExplainRecord>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not an explain record ({e})", path.display(), i + 1))
        })
        .collect()
}

/// The (model, batch) pairs of `records`, in the order they first appear.
pub fn groups(records: &[ExplainRecord]) -> Vec<(ModelKind, usize)> {
    let mut groups = Vec::new();
    for r in records {
        if !groups.contains(&(r.model, r.batch)) {
            groups.push((r.model, r.batch));
        }
    }
    groups
}

/// The table of the ok records of one model and batch (none when no record is ok).
pub fn table_of(records: &[ExplainRecord], model: ModelKind, batch: usize) -> Option<ExplainTable> {
    let ok: Vec<&ExplainRecord> = records
        .iter()
        .filter(|r| r.model == model && r.batch == batch && r.status == Status::Ok)
        .collect();
    ExplainTable::new(&ok)
}

/// The whole Markdown report of a set of explain records: one table per model and batch, and
/// the records that did not run, with their reasons.
pub fn report(records: &[ExplainRecord]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (model, batch) in groups(records) {
        if let Some(table) = table_of(records, model, batch) {
            out.push_str(&markdown(&table));
        }
        for r in records
            .iter()
            .filter(|r| r.model == model && r.batch == batch && r.status != Status::Ok)
        {
            let _ = writeln!(
                out,
                "- {} {}: {} — {}",
                model,
                r.column(),
                r.status.as_str(),
                r.reason.as_deref().unwrap_or("no reason given")
            );
        }
    }
    if let Some(r) = records.iter().find(|r| r.fingerprint.is_some()) {
        let machine = r
            .fingerprint
            .as_ref()
            .map(crate::fingerprint::machine_label)
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "\nMachine: {machine}. Each op timed alone in Burn's profiling window (wall clock \
             between device syncs on CPU backends; PyTorch between syncs), after {} warm-up \
             run(s), median of up to {} runs; see docs/explain.md for what isolated timings \
             leave out.",
            r.warmup, r.repeats
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(s: f64) -> Timing {
        Timing {
            median_seconds: s,
            min_seconds: s,
            max_seconds: s,
            runs: 3,
        }
    }

    fn record(backend: &str, per_op: &[(usize, Phase, f64)], step: f64) -> ExplainRecord {
        let request = ExplainRequest::new(ModelKind::MnistCnn, backend, "cpu", Precision::F32, 128);
        let mut r = ExplainRecord::start(&request, "test", 2);
        r.status = Status::Ok;
        r.ops = per_op
            .iter()
            .map(|&(site, phase, s)| OpTiming {
                site,
                phase,
                timing: timing(s),
            })
            .collect();
        r.step = Some(timing(step));
        r
    }

    #[test]
    fn mnist_cnn_sites_follow_the_layers_and_their_shapes() {
        let s = sites(ModelKind::MnistCnn, 128);
        let names: Vec<&str> = s.iter().map(|s| s.layers[0].as_str()).collect();
        assert_eq!(
            names,
            [
                "conv1",
                "pool1",
                "conv2",
                "pool2",
                "dropout",
                "global max pool",
                "fc1",
                "relu",
                "fc2",
                "loss",
                "optimizer"
            ]
        );
        assert_eq!(s[0].input, [128, 1, 28, 28]);
        assert!(!s[0].input_grad, "the images need no gradient");
        assert_eq!(s[0].phases(), [Phase::Forward, Phase::ParamGrad]);
        assert_eq!(s[2].input, [128, 64, 13, 13]);
        assert_eq!(s[2].output(), [128, 512, 11, 11]);
        assert_eq!(s[5].output(), [128, 512]);
        assert_eq!(s[8].output(), [128, 10]);
        assert_eq!(
            s[10].op,
            LayerOp::Adam {
                parameters: 640 + 295_424 + 525_312 + 10_250
            }
        );
    }

    #[test]
    fn resnet18_merges_identical_layers_and_keeps_every_one() {
        let s = sites(ModelKind::ResNet18, 4);
        let layers: usize = s.iter().map(|s| s.layers.len()).sum();
        // conv1 bn1 relu maxpool; 8 blocks of 7 layers, 3 with a 2-layer downsample; avgpool
        // fc loss optimizer.
        assert_eq!(layers, 4 + 8 * 7 + 3 * 2 + 4);
        let stage1_conv = s
            .iter()
            .find(|s| s.layers[0] == "layer1.0.conv1")
            .expect("layer1's first conv");
        assert_eq!(stage1_conv.layers.len(), 4, "{:?}", stage1_conv.layers);
        assert_eq!(stage1_conv.input, [4, 64, 8, 8]);
        let fc = s.iter().find(|s| s.layers[0] == "fc").expect("fc");
        assert_eq!(fc.input, [4, 512]);
        let down = s
            .iter()
            .find(|s| s.layers[0] == "layer2.0.downsample.conv")
            .expect("downsample");
        assert_eq!(down.input, [4, 64, 8, 8]);
        assert_eq!(down.output(), [4, 128, 4, 4]);
        let Some(LayerOp::Adam { parameters }) = s.last().map(|s| s.op) else {
            panic!("the optimizer comes last");
        };
        assert_eq!(
            parameters, 11_181_642,
            "torchvision's resnet18 with 10 classes"
        );
    }

    #[test]
    fn flops_follow_the_sites() {
        // The values of the layer-by-layer formula this replaced (219 MFLOP for the CNN, as
        // the design card says).
        assert_eq!(training_flops_per_sample(ModelKind::MnistCnn), 219_649_536);
        assert_eq!(training_flops_per_sample(ModelKind::ResNet18), 222_099_456);
        assert_eq!(
            training_flops_per_sample(ModelKind::ResNet18Gray),
            198_065_664
        );
    }

    #[test]
    fn table_sums_shares_ratios_and_gaps() {
        // Site 2 is conv2, site 6 fc1.
        let torch = record(
            "pytorch",
            &[
                (2, Phase::Forward, 0.010),
                (2, Phase::ParamGrad, 0.020),
                (6, Phase::Forward, 0.002),
            ],
            0.040,
        );
        let flex = record(
            "flex",
            &[
                (2, Phase::Forward, 0.015),
                (2, Phase::ParamGrad, 0.060),
                (6, Phase::Forward, 0.001),
            ],
            0.080,
        );
        let t = ExplainTable::new(&[&flex, &torch]).expect("a table");
        assert_eq!(t.reference, Some(1));
        assert!((t.totals[0] - 0.076).abs() < 1e-12);
        assert!((t.totals[1] - 0.032).abs() < 1e-12);
        assert!((flex.explained().unwrap() - 0.95).abs() < 1e-12);
        let weight = t
            .rows
            .iter()
            .find(|r| r.label == "conv2d · weight grad")
            .expect("row");
        assert_eq!(weight.seconds, [Some(0.060), Some(0.020)]);
        let gaps = &t.gaps[0];
        assert_eq!(gaps[0].label, "conv2d 64→512 k3 at 13×13 · weight grad");
        assert!((gaps[0].extra_seconds - 0.040).abs() < 1e-12);
        assert!((gaps[0].share_of_gap - 0.040 / 0.044).abs() < 1e-12);
        assert!(gaps[2].extra_seconds < 0.0, "fc1 forward is faster on flex");
        let md = markdown(&t);
        assert!(md.contains("60.0 ms (79%), 3.00×"), "{md}");
        assert!(md.contains("| explained | 95% | 80% |"), "{md}");
        assert!(md.contains("(+40.0 ms, 91% of the gap)"), "{md}");
        assert!(t.gaps[1].is_empty(), "the reference has no gap to itself");
    }

    #[test]
    fn a_decomposition_outside_its_band_says_so_in_the_table_and_the_record() {
        // 0.070 s of ops against a 0.050 s step: 140% explained.
        let over = record(
            "flex",
            &[(2, Phase::Forward, 0.030), (2, Phase::ParamGrad, 0.040)],
            0.050,
        );
        let note = over.outside_band().expect("140% is outside the band");
        assert!(note.contains("140%") && note.contains("70–130%"), "{note}");
        assert!(note.contains("ratios between backends"), "{note}");
        let md = markdown(&ExplainTable::new(&[&over]).expect("a table"));
        assert!(md.contains("| explained | 140% ⚠ |"), "{md}");
        assert!(
            md.contains("⚠ flex: its ops timed alone add up to 140%"),
            "{md}"
        );
        // 60%: below the band; 95%: inside, no note.
        let under = record("tch", &[(2, Phase::Forward, 0.030)], 0.050);
        assert!(under.outside_band().unwrap().contains("only 60%"));
        let inside = record("tch", &[(2, Phase::Forward, 0.0475)], 0.050);
        assert_eq!(inside.outside_band(), None);
        assert!(!markdown(&ExplainTable::new(&[&inside]).unwrap()).contains('⚠'));
    }

    #[test]
    fn an_op_that_runs_in_several_layers_counts_each_time() {
        let request = ExplainRequest::new(ModelKind::ResNet18, "flex", "cpu", Precision::F32, 2);
        let site = request
            .sites
            .iter()
            .position(|s| s.layers.len() == 4 && matches!(s.op, LayerOp::Conv2d { .. }))
            .expect("a conv run by 4 layers");
        let mut r = ExplainRecord::start(&request, "test", 2);
        r.ops = vec![OpTiming {
            site,
            phase: Phase::Forward,
            timing: timing(0.5),
        }];
        assert!((r.ops_total() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn requests_refuse_amp_and_other_versions() {
        let mut r = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::AmpBF16, 8);
        assert!(r.validate().unwrap_err().contains("amp-bf16"));
        r.precision = Precision::F32;
        assert!(r.validate().is_ok());
        r.kiln_explain = 99;
        assert!(r.validate().unwrap_err().contains("version 99"));
    }

    #[test]
    fn a_bad_request_file_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("kiln-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("bad.json");
        std::fs::write(&path, "{\"kiln_explain\": 1}").expect("written");
        let e = ExplainRequest::read(&path).unwrap_err();
        assert!(
            e.contains("bad.json: not an explain request") && e.contains("cargo xtask explain"),
            "{e}"
        );
        let e = ExplainRequest::read(&dir.join("missing.json")).unwrap_err();
        assert!(e.starts_with("cannot read an explain request from"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
