//! What the two run profiles mean, and duration parsing, shared by xtask and the runners.

use std::time::Duration;

use crate::ModelKind;
use crate::vocab::Profile;

impl Profile {
    /// `Quick` when `quick` is set (the `--quick` flag), else `Full`.
    pub fn from_quick(quick: bool) -> Profile {
        if quick { Profile::Quick } else { Profile::Full }
    }

    /// Epochs per cell.
    pub fn epochs(self) -> usize {
        match self {
            Profile::Quick => 3,
            Profile::Full => 20,
        }
    }

    /// Independent runs of each cell (`--repeats`): the full profile repeats so that every
    /// row has a spread between runs; the quick one runs once and says "single run".
    pub fn repeats(self) -> usize {
        match self {
            Profile::Quick => 1,
            Profile::Full => 3,
        }
    }

    /// Batch size (the article's).
    pub fn batch_size(self) -> usize {
        128
    }

    /// Per-cell training budget.
    pub fn budget(self) -> Option<Duration> {
        match self {
            Profile::Quick => Some(Duration::from_secs(200)),
            Profile::Full => Some(Duration::from_secs(20 * 60)),
        }
    }

    /// The longest a cell may warm up before its step times are steady (a JIT backend on a
    /// CPU, wgpu on lavapipe, compiles and autotunes for minutes on its first steps).
    pub fn warmup_cap(self) -> Duration {
        match self {
            Profile::Quick => Duration::from_secs(10 * 60),
            Profile::Full => Duration::from_secs(20 * 60),
        }
    }

    /// Models `bench-all` runs by default: the article's. A model registered after them (the
    /// MLP) runs when `--models` names it.
    pub fn models(self) -> &'static [ModelKind] {
        match self {
            Profile::Quick => &[ModelKind::MnistCnn],
            Profile::Full => &[
                ModelKind::MnistCnn,
                ModelKind::ResNet18,
                ModelKind::ResNet18Gray,
            ],
        }
    }

    /// Training budget of a cell on a CPU-emulated GPU adapter (lavapipe takes seconds per
    /// step) when no `--budget` is given: enough for the warm-up step and a few timed steps.
    pub fn emulated_budget(self) -> Duration {
        match self {
            Profile::Quick => Duration::from_secs(30),
            Profile::Full => Duration::from_secs(120),
        }
    }

    /// Samples of a synthetic set (train, test).
    pub fn synthetic_sizes(self, standard_epoch: usize) -> (usize, usize) {
        match self {
            Profile::Quick => (8_000, 2_000),
            Profile::Full => (standard_epoch, 10_000),
        }
    }
}
