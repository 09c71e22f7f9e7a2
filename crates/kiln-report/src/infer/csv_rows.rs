//! `infer.csv`: one line per inference record, every figure unrounded.

use kiln_contract::infer::{InferRecord, Latency};

/// One CSV row per record, numbers unrounded in seconds, bytes and shares (the `csv` crate):
/// for a spreadsheet, or to merge machines' runs.
pub fn csv(records: &[InferRecord]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    let _ = out.write_record(CSV_COLUMNS);
    let number = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in records {
        let at = |batch: usize, q: fn(&Latency) -> f64| number(r.latency_at(batch).map(q));
        let a = r.agreement.as_ref();
        let first = r.first_prediction.as_ref();
        let row = [
            r.model.to_string(),
            r.backend.clone(),
            r.device.clone(),
            r.precision.to_string(),
            r.repeat.map_or(String::new(), |k| k.to_string()),
            r.status.as_str().to_string(),
            at(1, |l| l.p50_seconds),
            at(1, |l| l.p90_seconds),
            at(1, |l| l.p99_seconds),
            at(1, |l| l.max_seconds),
            number(r.latency_at(1).and_then(|l| l.p95_seconds)),
            number(r.latency_at(1).and_then(|l| l.p999_seconds)),
            number(r.latency_at(1).and_then(|l| l.min_seconds)),
            number(r.latency_at(1).and_then(|l| l.mean_seconds)),
            at(8, |l| l.p50_seconds),
            at(8, |l| l.p99_seconds),
            number(r.throughput.as_ref().map(|t| t.samples_per_second)),
            r.throughput
                .as_ref()
                .map_or(String::new(), |t| t.batch.to_string()),
            number(first.map(|f| f.ready_seconds)),
            number(first.map(|f| f.seconds)),
            first.and_then(|f| f.caches.clone()).unwrap_or_default(),
            number(r.memory.as_ref().map(|m| m.serving_bytes() as f64)),
            number(r.binary_bytes.map(|b| b as f64)),
            number(r.overhead.as_ref().map(|o| o.p50_seconds)),
            a.map_or(String::new(), |a| a.reference.clone()),
            number(a.map(|a| a.top1)),
            number(a.map(|a| a.max_logit_difference)),
            number(a.and_then(|a| a.accuracy)),
            r.reason.clone().unwrap_or_default(),
        ];
        // Writing to memory cannot fail.
        let _ = out.write_record(row);
    }
    out.into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// The CSV's columns, in order.
pub(super) const CSV_COLUMNS: [&str; 29] = [
    "model",
    "backend",
    "device",
    "precision",
    "repeat",
    "status",
    "p50_b1_seconds",
    "p90_b1_seconds",
    "p99_b1_seconds",
    "max_b1_seconds",
    "p95_b1_seconds",
    "p999_b1_seconds",
    "min_b1_seconds",
    "mean_b1_seconds",
    "p50_b8_seconds",
    "p99_b8_seconds",
    "throughput_samples_per_second",
    "throughput_batch",
    "load_seconds",
    "first_prediction_seconds",
    "caches",
    "memory_to_serve_bytes",
    "runner_bytes",
    "no_model_query_p50_seconds",
    "agreement_reference",
    "top1_agreement",
    "max_logit_difference",
    "accuracy",
    "reason",
];
