//! The GPU kit's plan: which cells `run.sh` runs, in which order, each with its warm-up cap and
//! budget, and the time the whole plan is given.

use std::time::Duration;

use kiln_results::{ModelKind, Precision, TrainingLoop};

use crate::bench::PlanEntry;

/// A kit cell: its coordinates, its warm-up cap and its training budget from steady state.
const fn cell(
    model: ModelKind,
    backend: &'static str,
    device: &'static str,
    precision: Precision,
    training_loop: TrainingLoop,
    (warmup_cap, budget): (u64, u64),
) -> PlanEntry {
    PlanEntry {
        model,
        backend,
        device,
        precision,
        training_loop,
        budget: Some(Duration::from_secs(budget)),
        warmup_cap: Some(Duration::from_secs(warmup_cap)),
    }
}

use ModelKind::{MnistCnn, ResNet18};
use Precision::{AmpBF16, BF16, F32};
use TrainingLoop::{Kiln, Learner};

/// The cells `run.sh` runs, in this order, most important first: f32 on each backend and
/// model (the article's question, answered even if the run is cut), then bf16 and amp-bf16 on
/// CUDA for Burn and PyTorch (WGSL has no bf16: wgpu's rows are f32 only), then burn-train's
/// Learner on one GPU and data-parallel on two (skipped on a one-GPU machine). Each has a
/// warm-up cap (the first CUDA cell compiles with cold caches; later ones reuse the run's
/// caches) and a training budget from steady state, in seconds.
pub const CELLS: &[PlanEntry] = &[
    cell(MnistCnn, "cuda", "cuda:0", F32, Kiln, (65, 4)),
    cell(MnistCnn, "pytorch", "cuda:0", F32, Kiln, (8, 3)),
    cell(MnistCnn, "wgpu", "vulkan:discrete:0", F32, Kiln, (30, 4)),
    cell(ResNet18, "cuda", "cuda:0", F32, Kiln, (55, 5)),
    cell(ResNet18, "pytorch", "cuda:0", F32, Kiln, (8, 4)),
    cell(ResNet18, "wgpu", "vulkan:discrete:0", F32, Kiln, (30, 4)),
    cell(MnistCnn, "cuda", "cuda:0", BF16, Kiln, (15, 2)),
    cell(MnistCnn, "pytorch", "cuda:0", BF16, Kiln, (4, 2)),
    cell(MnistCnn, "cuda", "cuda:0", AmpBF16, Kiln, (15, 2)),
    cell(MnistCnn, "pytorch", "cuda:0", AmpBF16, Kiln, (4, 2)),
    cell(ResNet18, "cuda", "cuda:0", BF16, Kiln, (15, 2)),
    cell(ResNet18, "pytorch", "cuda:0", BF16, Kiln, (4, 2)),
    cell(ResNet18, "cuda", "cuda:0", AmpBF16, Kiln, (15, 2)),
    cell(ResNet18, "pytorch", "cuda:0", AmpBF16, Kiln, (4, 2)),
    cell(MnistCnn, "cuda", "cuda:0", F32, Learner, (8, 2)),
    cell(MnistCnn, "cuda", "cuda:0,cuda:1", F32, Learner, (8, 2)),
];

/// What a cell takes beside its warm-up and budget: starting the runner, loading the data,
/// opening the device, evaluating and writing the record.
pub const CELL_OVERHEAD: Duration = Duration::from_secs(6);

/// The `explain` step after the matrix (cuda against PyTorch, op by op, on both models), and
/// the time it is given.
pub const EXPLAIN: (&str, &str, Duration) = (
    "cuda,pytorch",
    "mnist-cnn,resnet18",
    Duration::from_secs(45),
);

/// The wall time the whole kit is planned for: every cell at its cap, then explain.
pub const PLANNED_TOTAL: Duration = Duration::from_secs(8 * 60);

/// A cell's time cap: its warm-up cap, its budget and the overhead.
pub fn time_cap(c: &PlanEntry) -> Duration {
    c.warmup_cap.unwrap_or_default() + c.budget.unwrap_or_default() + CELL_OVERHEAD
}

/// The kit's plan as `cargo xtask gpu-kit --plan-only` prints it: each cell in order with its
/// caps, explain, and the total against [`PLANNED_TOTAL`].
pub fn plan_text() -> String {
    let mut text = String::from(
        "The GPU kit's plan, in the order run.sh runs it (seconds: warm-up cap + budget from \
         steady state + start-up and evaluation = time cap):\n",
    );
    let mut total = Duration::ZERO;
    for (i, c) in CELLS.iter().enumerate() {
        let cap = time_cap(c);
        total += cap;
        text.push_str(&format!(
            "{:>3}. {:<9} {:<8} {:<18} {:<8} {:<7} {:>3} + {:>2} + {} = {:>3} s\n",
            i + 1,
            c.model.to_string(),
            c.backend,
            c.device,
            c.precision.to_string(),
            c.training_loop.to_string(),
            c.warmup_cap.unwrap_or_default().as_secs(),
            c.budget.unwrap_or_default().as_secs(),
            CELL_OVERHEAD.as_secs(),
            cap.as_secs()
        ));
    }
    total += EXPLAIN.2;
    text.push_str(&format!(
        "{:>3}. explain --backends {} --model {} = {} s\ntotal {} s of the {} s planned ({})\n",
        CELLS.len() + 1,
        EXPLAIN.0,
        EXPLAIN.1,
        EXPLAIN.2.as_secs(),
        total.as_secs(),
        PLANNED_TOTAL.as_secs(),
        if total <= PLANNED_TOTAL {
            "within"
        } else {
            "OVER"
        }
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kit's plan fits its 8 minutes at every cap, and its first cells are f32 on every
    /// backend and model, so a cut run still answers the main question.
    #[test]
    fn the_plan_fits_its_time_and_runs_the_main_question_first() {
        let total: Duration = CELLS.iter().map(time_cap).sum::<Duration>() + EXPLAIN.2;
        assert!(total <= PLANNED_TOTAL, "{total:?}");
        let first: Vec<_> = CELLS
            .iter()
            .take_while(|c| c.precision == Precision::F32 && c.training_loop == TrainingLoop::Kiln)
            .map(|c| (c.model, c.backend))
            .collect();
        for model in [ModelKind::MnistCnn, ModelKind::ResNet18] {
            for backend in ["cuda", "pytorch", "wgpu"] {
                assert!(
                    first.contains(&(model, backend)),
                    "{model} {backend}: {first:?}"
                );
            }
        }
        assert!(plan_text().contains("within"));
        // Every cell warms up under a cap and trains under a budget of its own.
        assert!(
            CELLS
                .iter()
                .all(|c| c.warmup_cap.is_some() && c.budget.is_some())
        );
    }
}
