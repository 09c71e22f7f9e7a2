//! A record's warm-up to steady state: the steps before it, the late compiles after it, and
//! the memory the warm-up took apart from training's.

use serde::{Deserialize, Serialize};

/// A cell's warm-up to steady state (compilation, autotune, caches), measured apart from its
/// epochs by the rule of [`crate::TimingRules::is_steady`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Warmup {
    /// Whether the step times settled before the warm-up cap.
    pub steady: bool,
    /// Training steps from the first to the one that made the times steady (or to the cap).
    pub steps: usize,
    /// Synced seconds from the start of the first step to steady state (or to the cap).
    pub seconds: f64,
    /// Seconds from the runner's process start to steady state: what a user waits before
    /// training runs at full speed (device setup and data loading included).
    pub process_seconds: Option<f64>,
    /// The epoch (from 1) in which the times settled: whole epochs after it are timed.
    pub epoch: usize,
    /// The cap it ran under, in seconds.
    pub cap_seconds: f64,
    /// Each warm-up step's synced seconds, in order (the first 200 at most).
    pub step_seconds: Vec<f64>,
    /// Steps after steady state that the late-compile rule caught (a batch shape compiling
    /// the first time it is seen: the epoch's short last batch): their excess over the steady
    /// step is kept out of the chunks and epochs and counted here, with the warm-up.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_compiles: usize,
    /// Their excess seconds, added up.
    #[serde(default, skip_serializing_if = "is_zero_seconds")]
    pub late_compile_seconds: f64,
    /// The first 200 of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_compile_steps: Vec<LateCompile>,
    /// The process's peak resident set size during the warm-up (compiled kernels, autotune's
    /// trial buffers), read at steady state, where the OS then reset the high-water mark: the
    /// record's training memory is then steady state's, this peak apart. `None` where the OS
    /// cannot reset it (the training peak is then the whole training's) or the times never
    /// settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_seconds(s: &f64) -> bool {
    *s == 0.0
}

/// One late compile: the step (from 1, counted over the cell), its epoch, its host seconds and
/// their excess over the steady step.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LateCompile {
    pub step: usize,
    pub epoch: usize,
    pub seconds: f64,
    pub excess_seconds: f64,
}

impl Warmup {
    /// Step times kept in a record.
    pub const KEPT_STEPS: usize = 200;

    /// The warm-up as a user pays it: to steady state, and every late compile after it.
    pub fn total_seconds(&self) -> f64 {
        self.seconds + self.late_compile_seconds
    }
}
