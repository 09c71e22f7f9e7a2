//! What a smoke run (CI's, or a user's own) expects of its records: every named backend has a
//! row that trained, with a finite positive epoch time, accuracy above chance and memory
//! measured (`cargo xtask report RUN --expect flex,tch`).

use kiln_contract::{Record, Status};

/// Test accuracy a row must beat: chance on the ten classes of every dataset Kiln trains on.
pub const CHANCE: f64 = 0.1;

/// The problems of `records` against `backends` (empty: every backend has a plausible row);
/// each names the backend, the row and the value.
pub fn expect(records: &[Record], backends: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for backend in backends {
        let rows: Vec<&Record> = records.iter().filter(|r| &r.backend == backend).collect();
        if rows.is_empty() {
            problems.push(format!("{backend}: no row in the run"));
        }
        for r in rows {
            let row = format!("{} {}", crate::fields::row_label(r), r.model);
            if r.status != Status::Ok {
                problems.push(format!(
                    "{row}: {} ({})",
                    r.status.as_str(),
                    r.reason.as_deref().unwrap_or("no reason given")
                ));
                continue;
            }
            match r.epoch_seconds.as_ref().map(|e| e.median) {
                Some(t) if t.is_finite() && t > 0.0 => {}
                t => problems.push(format!("{row}: epoch time {t:?} is not a positive number")),
            }
            match r.test_accuracy {
                Some(a) if a > CHANCE => {}
                a => problems.push(format!(
                    "{row}: test accuracy {a:?} is not above chance ({CHANCE})"
                )),
            }
            if r.training_bytes().or(r.peak_memory_bytes).unwrap_or(0) == 0 {
                problems.push(format!("{row}: no memory measured"));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{CellId, Stats};

    fn row(backend: &str) -> Record {
        let id = CellId {
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 16,
            training_loop: None,
        };
        let mut r = Record::not_run(&id, Status::Ok, "");
        r.epoch_seconds = Stats::from_samples(&[12.0]);
        r.test_accuracy = Some(0.6);
        r.peak_memory_bytes = Some(100 << 20);
        r
    }

    #[test]
    fn each_expected_backend_needs_a_plausible_row() {
        let good = vec![row("flex"), row("tch")];
        assert!(expect(&good, &["flex".into(), "tch".into()]).is_empty());
        let missing = expect(&good, &["ndarray".into()]);
        assert_eq!(missing, ["ndarray: no row in the run"]);
        let mut bad = good.clone();
        bad[0].test_accuracy = Some(0.08);
        bad[1].status = Status::NotSteady;
        bad[1].reason = Some("not steady: ...".into());
        let problems = expect(&bad, &["flex".into(), "tch".into()]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("above chance") && problems[0].starts_with("flex/cpu/f32"));
        assert!(problems[1].contains("not steady"));
        let mut nan = good.clone();
        nan[0].epoch_seconds = Stats::from_samples(&[f64::NAN]);
        nan[0].peak_memory_bytes = None;
        let problems = expect(&nan, &["flex".into()]);
        assert!(
            problems.iter().any(|p| p.contains("epoch time")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("memory")),
            "{problems:?}"
        );
    }
}
