//! A cell run several times (`--repeats N`) becomes one row: the median of the runs' medians,
//! with the spread between runs. With five runs or more the fastest and the slowest are dropped
//! first (MLPerf Training's rule). Records without a repeat, or alone in their run, are rows of
//! their own: a single run, whose only spread is within that one process.

use crate::fields::machine_key;
use kiln_contract::schema::{BetweenRuns, Record, Status, Warmup};
use kiln_contract::stats::{Stats, median};

/// From this many timed runs on, the fastest and the slowest are dropped as outliers.
pub const DROP_EXTREMES_FROM: usize = 5;

/// The records with each cell's repeats of one run combined into one record (in the order
/// cells first appear); other records pass through unchanged.
pub fn combine(records: &[Record]) -> Vec<Record> {
    let mut groups: Vec<(String, Vec<&Record>)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let key = match &r.repeat {
            Some(rep) if r.loop_overhead.is_none() => format!(
                "{}|{}|{}|{}|{}|{}|{}|{}",
                rep.run,
                machine_key(r),
                r.cell(),
                r.batch_size,
                r.accum_steps,
                r.fallback_from.is_some(),
                r.dataset,
                rep.of
            ),
            // Not a repeat: a group of its own.
            _ => format!("#{i}"),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.into_iter().map(|(_, g)| combine_group(&g)).collect()
}

/// The warm-up of the median run, whole (its steps and step times belong together); of two
/// middle runs, the shorter.
fn median_warmup(records: &[&&Record]) -> Option<Warmup> {
    let mut warmed: Vec<&Warmup> = records.iter().filter_map(|r| r.warmup.as_ref()).collect();
    warmed.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    warmed
        .get(warmed.len().saturating_sub(1) / 2)
        .map(|w| (*w).clone())
}

fn combine_group(group: &[&Record]) -> Record {
    if group.len() == 1 && group[0].repeat.as_ref().is_none_or(|r| r.of == 1) {
        return group[0].clone();
    }
    let ok: Vec<&Record> = group
        .iter()
        .copied()
        .filter(|r| r.status == Status::Ok && r.epoch_seconds.is_some())
        .collect();
    let Some(first) = ok.first() else {
        // No run was timed: the first record says why.
        let mut r = group[0].clone();
        r.reason = Some(format!(
            "{} of {} runs: {}",
            group.len(),
            group[0].repeat.as_ref().map_or(group.len(), |x| x.of),
            r.reason.unwrap_or_default()
        ));
        return r;
    };
    let mut r = (*first).clone();
    let mut medians: Vec<f64> = ok
        .iter()
        .filter_map(|r| r.epoch_seconds.as_ref().map(|e| e.median))
        .collect();
    medians.sort_by(f64::total_cmp);
    let mut dropped = Vec::new();
    if medians.len() >= DROP_EXTREMES_FROM {
        dropped.push(medians.remove(0));
        dropped.extend(medians.pop());
    }
    let used_records: Vec<&&Record> = ok
        .iter()
        .filter(|r| {
            r.epoch_seconds
                .as_ref()
                .is_some_and(|e| !dropped.contains(&e.median))
        })
        .collect();
    r.epoch_seconds = Stats::from_samples(&medians).map(|mut s| {
        s.floor = group.iter().filter_map(|x| x.run_drift).reduce(f64::max);
        s
    });
    let standard = r.obtained.standard_epoch_samples as f64;
    r.images_per_second = r.epoch_seconds.as_ref().map(|e| standard / e.median);
    r.achieved_gflops = r
        .images_per_second
        .zip(r.flops_per_sample)
        .map(|(ips, f)| ips * f as f64 / 1e9);
    let values = |f: &dyn Fn(&Record) -> Option<f64>| -> Vec<f64> {
        used_records.iter().filter_map(|r| f(r)).collect()
    };
    r.first_epoch_seconds = median(&values(&|r| r.first_epoch_seconds));
    r.first_step_seconds = median(&values(&|r| r.first_step_seconds));
    r.warmup = median_warmup(&used_records);
    r.test_accuracy = median(&values(&|r| r.test_accuracy));
    if let Some(t) = &mut r.time_to_accuracy {
        median_time_to_accuracy(t, &used_records);
    }
    // Memory: the largest of the runs (what a user must have).
    r.peak_memory_bytes = ok.iter().filter_map(|r| r.peak_memory_bytes).max();
    r.process_threads = ok.iter().filter_map(|r| r.process_threads).max();
    if let Some(tm) = &mut r.training_memory {
        let worst = ok
            .iter()
            .filter_map(|x| x.training_memory.as_ref())
            .max_by_key(|m| m.training_bytes().unwrap_or(0));
        if let Some(worst) = worst {
            *tm = worst.clone();
        }
    }
    // Noise: the busiest run (a row is as trustworthy as its noisiest run).
    r.noise = group
        .iter()
        .filter_map(|x| x.noise.clone())
        .max_by(|a, b| a.busy_share().total_cmp(&b.busy_share()));
    let within_cv_max = used_records
        .iter()
        .filter_map(|r| r.epoch_seconds.as_ref().map(Stats::cv))
        .fold(0.0, f64::max);
    let runs = group.len();
    if ok.len() < runs {
        let note = untimed_note(group, ok.len());
        r.reason = Some(match r.reason.take() {
            Some(reason) => format!("{note}; {reason}"),
            None => note,
        });
    }
    r.between_runs = Some(BetweenRuns {
        runs,
        ok: ok.len(),
        used: medians,
        dropped,
        within_cv_max,
    });
    r
}

/// Time to accuracy over runs: the median run's, a run that never reached the target counting
/// as slower than any that did; the best accuracy of any run.
fn median_time_to_accuracy(t: &mut kiln_contract::TimeToAccuracy, used_records: &[&&Record]) {
    let mut times: Vec<f64> = used_records
        .iter()
        .map(|x| {
            x.time_to_accuracy
                .as_ref()
                .and_then(|t| t.seconds)
                .unwrap_or(f64::INFINITY)
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let mid = kiln_contract::stats::median_of_sorted(&times);
    t.seconds = mid.filter(|m| m.is_finite());
    t.best = used_records
        .iter()
        .filter_map(|x| x.time_to_accuracy.as_ref().and_then(|t| t.best))
        .reduce(f64::max);
}

/// "2 of 3 runs timed; run 3 failed: ..." for a group whose runs were not all timed.
fn untimed_note(group: &[&Record], timed: usize) -> String {
    let failed: Vec<String> = group
        .iter()
        .filter(|x| !(x.status == Status::Ok && x.epoch_seconds.is_some()))
        .map(|x| {
            format!(
                "run {} {}: {}",
                x.repeat.as_ref().map_or(0, |p| p.index),
                x.status.as_str(),
                x.reason.clone().unwrap_or_default()
            )
        })
        .collect();
    format!(
        "{timed} of {} runs timed; {}",
        group.len(),
        failed.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::schema::Repeat;

    fn run(index: usize, of: usize, median: f64) -> Record {
        let mut r = crate::fields::tests_support::timed("flex", median);
        r.repeat = Some(Repeat {
            index,
            of,
            run: "run-a".into(),
        });
        r
    }

    #[test]
    fn three_runs_become_one_row_with_the_spread_between_them() {
        let rows = combine(&[run(1, 3, 10.0), run(2, 3, 12.0), run(3, 3, 11.0)]);
        assert_eq!(rows.len(), 1);
        let e = rows[0].epoch_seconds.as_ref().unwrap();
        assert_eq!((e.median, e.min, e.max, e.n), (11.0, 10.0, 12.0, 3));
        let b = rows[0].between_runs.as_ref().unwrap();
        assert_eq!((b.runs, b.ok, b.dropped.len()), (3, 3, 0));
        assert!((rows[0].images_per_second.unwrap() - 60_000.0 / 11.0).abs() < 1e-9);
    }

    #[test]
    fn time_to_accuracy_is_the_median_runs_and_a_miss_counts_as_slowest() {
        let with = |index: usize, seconds: Option<f64>| {
            let mut r = run(index, 3, 10.0 + index as f64);
            r.time_to_accuracy = Some(kiln_contract::TimeToAccuracy {
                target: 0.8,
                seconds,
                epoch: seconds.map(|_| 2),
                epochs_evaluated: 3,
                best: Some(0.8),
                budget_exhausted: false,
            });
            r
        };
        let rows = combine(&[with(1, Some(10.0)), with(2, None), with(3, Some(12.0))]);
        assert_eq!(
            rows[0].time_to_accuracy.as_ref().unwrap().seconds,
            Some(12.0)
        );
        let rows = combine(&[with(1, Some(10.0)), with(2, None), with(3, None)]);
        assert_eq!(rows[0].time_to_accuracy.as_ref().unwrap().seconds, None);
    }

    #[test]
    fn the_warm_up_is_the_median_runs_not_the_first_runs() {
        let with = |index: usize, seconds: f64| {
            let mut r = run(index, 3, 10.0 + index as f64);
            r.warmup = Some(Warmup {
                steady: true,
                steps: index,
                seconds,
                process_seconds: None,
                epoch: 1,
                cap_seconds: 600.0,
                step_seconds: vec![seconds],
                late_compiles: 0,
                late_compile_seconds: 0.0,
                late_compile_steps: Vec::new(),
                peak_rss_bytes: None,
            });
            r
        };
        let rows = combine(&[with(1, 39.1), with(2, 30.0), with(3, 32.7)]);
        let w = rows[0].warmup.as_ref().unwrap();
        assert_eq!((w.seconds, w.steps), (32.7, 3));
    }

    #[test]
    fn from_five_runs_the_fastest_and_slowest_are_dropped() {
        let runs: Vec<Record> = [10.0, 30.0, 11.0, 12.0, 1.0]
            .iter()
            .enumerate()
            .map(|(i, &m)| run(i + 1, 5, m))
            .collect();
        let rows = combine(&runs);
        let b = rows[0].between_runs.as_ref().unwrap();
        assert_eq!(b.dropped, vec![1.0, 30.0]);
        assert_eq!(rows[0].epoch_seconds.as_ref().unwrap().n, 3);
        assert_eq!(rows[0].epoch_seconds.as_ref().unwrap().median, 11.0);
    }

    #[test]
    fn runs_of_other_runs_or_cells_stay_apart_and_failures_are_counted() {
        let mut other_run = run(1, 2, 20.0);
        other_run.repeat.as_mut().unwrap().run = "run-b".into();
        let mut failed = run(2, 2, 0.0);
        failed.status = Status::Failed;
        failed.epoch_seconds = None;
        failed.reason = Some("out of memory".into());
        let single = crate::fields::tests_support::timed("ndarray", 50.0);
        let rows = combine(&[run(1, 2, 10.0), other_run, failed, single.clone()]);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].between_runs.as_ref().unwrap().ok, 1);
        assert!(
            rows[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("1 of 2 runs timed; run 2 failed: out of memory")
        );
        assert_eq!(rows[2], single);
    }

    #[test]
    fn the_runs_drift_is_the_floor_of_the_rows_interval() {
        let mut runs: Vec<Record> = [100.0, 100.2, 99.8]
            .iter()
            .enumerate()
            .map(|(i, m)| run(i + 1, 3, *m))
            .collect();
        let narrow = combine(&runs)[0].epoch_seconds.clone().unwrap();
        assert!(narrow.prediction_half_width().unwrap() < 1.0);
        for r in &mut runs {
            r.run_drift = Some(0.05);
        }
        let floored = combine(&runs)[0].epoch_seconds.clone().unwrap();
        assert_eq!(floored.floor, Some(0.05));
        assert!((floored.prediction_half_width().unwrap() - 5.0).abs() < 1e-9);
        let md = crate::render::markdown(&runs, None);
        assert!(
            md.contains("(next run 95.0 s–105 s, the machine's drift 5.0%"),
            "{md}"
        );
    }
}
