//! What a planned run learns from its own earlier cells: a warm-up that came close to its
//! planned cap, or ran into it, says the device warms up slower than the profile the plan came
//! from (a different GPU, driver or cache state), so the later cells of the same backend and
//! device get caps raised by what was measured, and the time the plan gives them grows with
//! their caps (docs/gpu.md, "The plan"). Only cells with a planned cap (the GPU kit's, and its
//! replay) learn or are changed.

use kiln_contract::Record;
use kiln_report::fields::human_seconds;

use super::config::PlannedCell;

/// A warm-up that used more than this share of its cap counts as close to it: the later caps
/// of its backend and device keep this share of headroom over what it measured.
const CLOSE: f64 = 0.8;

/// The least factor a warm-up that ran into its cap without settling raises the later caps by:
/// its true length is unknown, only that it is longer than the cap (or than the step that
/// overran it).
const PAST_CAP: f64 = 2.0;

/// The factors learned so far, by backend and device.
#[derive(Debug, Default)]
pub(super) struct Lessons(Vec<Taught>);

/// What one backend and device's earlier cells taught: the factor their later caps take, and
/// whether a warm-up ran past its cap (else it came close).
#[derive(Debug)]
struct Taught {
    backend: String,
    device: String,
    factor: f64,
    past_cap: bool,
}

impl Lessons {
    /// Learn from `record`, the end of `cell` as it ran (with the cap it ran under).
    pub(super) fn learn(&mut self, cell: &PlannedCell, record: &Record) {
        let (Some(cap), Some(w)) = (cell.warmup_cap_seconds, record.warmup.as_ref()) else {
            return;
        };
        let factor = if !w.steady {
            // At least doubled; more where one step alone ran far past the cap.
            PAST_CAP.max(w.seconds / (CLOSE * cap))
        } else if w.seconds > CLOSE * cap {
            w.seconds / (CLOSE * cap)
        } else {
            return;
        };
        let past_cap = !w.steady;
        match self
            .0
            .iter_mut()
            .find(|t| t.backend == cell.id.backend && t.device == cell.id.device)
        {
            Some(t) => {
                t.factor = t.factor.max(factor);
                t.past_cap |= past_cap;
            }
            None => self.0.push(Taught {
                backend: cell.id.backend.clone(),
                device: cell.id.device.clone(),
                factor,
                past_cap,
            }),
        }
    }

    /// `cell` with its cap and planned time raised by what its backend and device's earlier
    /// cells measured, and the note its record carries; `None` when nothing was learned.
    pub(super) fn raise(&self, cell: &PlannedCell) -> Option<(PlannedCell, String)> {
        let cap = cell.warmup_cap_seconds?;
        let taught = self
            .0
            .iter()
            .find(|t| t.backend == cell.id.backend && t.device == cell.id.device)?;
        let factor = taught.factor;
        let mut raised = cell.clone();
        raised.warmup_cap_seconds = Some(cap * factor);
        raised.planned_seconds = cell.planned_seconds.map(|p| p + cap * (factor - 1.0));
        let note = format!(
            "warm-up cap raised {factor:.2}x from the plan's {} to {}: an earlier {} {} cell \
             of this run warmed up {}",
            human_seconds(cap),
            human_seconds(cap * factor),
            cell.id.backend,
            cell.id.device,
            if taught.past_cap {
                "past its cap"
            } else {
                "close to its cap"
            }
        );
        Some((raised, note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{CellId, DatasetName, Status, Warmup};

    fn cell(backend: &str, model: &str, cap: f64) -> PlannedCell {
        PlannedCell {
            id: CellId {
                training_loop: None,
                model: model.into(),
                backend: backend.into(),
                device: "cuda:0".into(),
                precision: "f32".into(),
                batch_size: 128,
            },
            dataset: DatasetName::Synthetic,
            dataset_note: None,
            budget_seconds: Some(4.0),
            autotune: None,
            warmup_cap_seconds: Some(cap),
            replay: None,
            planned_seconds: Some(cap + 10.0),
            not_planned: None,
        }
    }

    fn record(cell: &PlannedCell, steady: bool, seconds: f64) -> Record {
        let mut r = Record::not_run(&cell.id, Status::Ok, "test");
        r.warmup = Some(Warmup {
            steady,
            steps: 10,
            seconds,
            process_seconds: None,
            epoch: 1,
            cap_seconds: cell.warmup_cap_seconds.unwrap_or_default(),
            step_seconds: Vec::new(),
            late_compiles: 0,
            late_compile_seconds: 0.0,
            late_compile_steps: Vec::new(),
            peak_rss_bytes: None,
        });
        r
    }

    /// A warm-up far within its cap teaches nothing; one close to it raises the later caps of
    /// the same backend and device, and their planned time with them; one that never settled
    /// doubles them; other backends are left alone.
    #[test]
    fn earlier_cells_raise_the_caps_of_their_backend_and_device() {
        let mut learned = Lessons::default();
        let first = cell("cuda", "mnist-cnn", 20.0);
        learned.learn(&first, &record(&first, true, 10.0));
        assert!(learned.raise(&cell("cuda", "resnet18", 50.0)).is_none());

        learned.learn(&first, &record(&first, true, 19.0));
        let (raised, note) = learned.raise(&cell("cuda", "resnet18", 50.0)).unwrap();
        let factor = 19.0 / 16.0;
        assert!((raised.warmup_cap_seconds.unwrap() - 50.0 * factor).abs() < 1e-9);
        assert!((raised.planned_seconds.unwrap() - (60.0 + 50.0 * (factor - 1.0))).abs() < 1e-9);
        assert!(note.contains("close to its cap"), "{note}");
        assert!(learned.raise(&cell("wgpu", "resnet18", 50.0)).is_none());

        learned.learn(&first, &record(&first, false, 20.0));
        let (raised, note) = learned.raise(&cell("cuda", "resnet18", 50.0)).unwrap();
        assert_eq!(raised.warmup_cap_seconds, Some(100.0));
        assert!(note.contains("past its cap"), "{note}");

        // A cell without a planned cap neither learns nor changes.
        let mut plain = cell("cuda", "mnist-cnn", 1.0);
        plain.warmup_cap_seconds = None;
        assert!(learned.raise(&plain).is_none());
    }
}
