//! burn-train's renderer kept silent: the runner's standard output is its JSON lines, and Kiln
//! reports progress itself (burn-train's terminal dashboard, `tui`, is not built). The one
//! adapter between Burn 0.22 and 0.23 here: 0.23's progress loggers take burn-train's `Progress`
//! (`total: Option<usize>`) where 0.22's took item counts, and their `end_*` take it too.

#[cfg(burn_0_23)]
use burn::data::dataloader::Progress;
use burn_train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn_train::metric::MetricDefinition;
use burn_train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

/// A renderer that renders nothing.
pub(super) struct Silent;

impl MetricsRendererTraining for Silent {
    fn update_train(&mut self, _: MetricState) {}
    fn update_valid(&mut self, _: MetricState) {}
}

impl MetricsRendererEvaluation for Silent {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
}

impl TrainingProgressLogger for Silent {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn start_split(&mut self, _: &str, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn update_split(&mut self, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn end_split(&mut self) {}
    #[cfg(burn_0_23)]
    fn start_split(&mut self, _: &str, _: &Progress) {}
    #[cfg(burn_0_23)]
    fn update_split(&mut self, _: &Progress) {}
    #[cfg(burn_0_23)]
    fn end_split(&mut self, _: &Progress) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _: String) {}
}

impl EvaluationProgressLogger for Silent {
    fn start_global_progress(&mut self, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn start_test(&mut self, _: &str, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn update_test_progress(&mut self, _: usize) {}
    #[cfg(not(burn_0_23))]
    fn end_test(&mut self) {}
    #[cfg(burn_0_23)]
    fn start_test(&mut self, _: &str, _: &Progress) {}
    #[cfg(burn_0_23)]
    fn update_test_progress(&mut self, _: &Progress) {}
    #[cfg(burn_0_23)]
    fn end_test(&mut self, _: &Progress) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _: String) {}
}

impl MetricsRenderer for Silent {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, _: MetricDefinition) {}
}
