//! The training protocol's knobs for one cell (from its request) and its optimizer. How a cell
//! is timed is the loops' (`kiln_loop.rs`, `learner/`, their warm-up in `warmup.rs`): clocks
//! read after a device sync, after every warm-up step until the step times are steady, then at
//! epoch boundaries and about ten times per epoch (chunks), test accuracy evaluated outside the
//! timed region. The data it trains on is `data.rs`'s, the events it reports `sink.rs`'s.

use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::tensor::FloatDType;

/// The knobs of the protocol (the article's: Adam 1e-3, batch 128, 20 epochs).
#[derive(Debug, Clone)]
pub struct Protocol {
    /// The run's settings (epochs, budget, seed, learning rate, eval limit, accumulation).
    pub settings: kiln_contract::CellSettings,
    pub batch_size: usize,
    /// When the clocks are read (chunks, the budget's minimum of timed steps).
    pub timing: kiln_contract::TimingRules,
    /// Fault injection for tests: the loss of this (1-based) step of the cell is made NaN.
    pub inject_nan_at_step: Option<usize>,
    /// Fault injection for tests: bytes leaked after each epoch (kept, touched, never freed).
    pub inject_leak_bytes_per_epoch: Option<u64>,
    /// Mixed precision: the compute type of forward and backward (f32 master weights); `None`
    /// computes in the device's float type.
    pub amp: Option<FloatDType>,
    /// Loss scaling of a mixed-precision cell (`--loss-scaling`; its precision's default).
    pub loss_scaling: Option<kiln_contract::LossScalingMode>,
    /// Fault injection for tests: slow warm-up steps.
    pub inject_slow_steps: Option<kiln_contract::SlowSteps>,
    /// A replayed cell: its steps take these times instead of training.
    pub replay: Option<kiln_contract::replay::Replay>,
}

impl Protocol {
    /// The protocol a cell request asks for.
    pub fn from_request(request: &kiln_contract::CellRequest) -> Protocol {
        Protocol {
            settings: request.settings.clone(),
            batch_size: request.batch_size,
            inject_nan_at_step: request.inject_nan_at_step,
            inject_leak_bytes_per_epoch: request.inject_leak_bytes_per_epoch,
            amp: crate::device::amp_dtype(request.precision),
            loss_scaling: request.settings.loss_scaling_for(request.precision),
            inject_slow_steps: request.inject_slow_steps,
            timing: request.timing,
            replay: request.replay.clone(),
        }
    }
}

impl Default for Protocol {
    /// The full profile's settings (their one home is `CellSettings::new`) at its batch size,
    /// without a budget, in the device's own type, with no fault injected.
    fn default() -> Self {
        let profile = kiln_contract::Profile::Full;
        let mut settings = kiln_contract::CellSettings::new(profile);
        settings.budget_seconds = None;
        Protocol {
            settings,
            batch_size: profile.batch_size(),
            timing: kiln_contract::TimingRules::KILN,
            inject_nan_at_step: None,
            inject_leak_bytes_per_epoch: None,
            amp: None,
            loss_scaling: None,
            inject_slow_steps: None,
            replay: None,
        }
    }
}

/// The protocol's optimizer: Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8; Burn's
/// default eps is 1e-5).
pub fn adam() -> ModuleOptimizer {
    AdamConfig::new().with_epsilon(1e-8).init()
}
