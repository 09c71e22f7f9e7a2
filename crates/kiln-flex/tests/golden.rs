//! The golden record: a tiny fixed-seed cell on flex, compared field by field with the record
//! committed in `tests/golden/tiny-cell.json`, so that moving code (a crate split, a new home
//! for a setting) cannot change what a runner records without a test saying which field moved:
//! - the record's fields: every key, nested ones too, present in both (the machine's
//!   fingerprint and the command line apart, which describe where it ran);
//! - what a fixed seed fixes: the cell's settings, sample counts, FLOPs and steps, exactly;
//! - what it computes: each epoch's mean loss within 0.1% and the test accuracy within 2
//!   points (kernels sum in another order on another CPU or thread count).
//!
//! A change that should move the record rewrites it: `KILN_BLESS=1 cargo test --release -p
//! kiln-flex --test golden`, with the reason in the commit.

mod common;

use std::collections::BTreeSet;

use common::{final_record, runner};
use kiln_contract::{CellRequest, ModelKind, Profile};
use serde_json::Value;

/// The golden record, in this package's tests/golden.
fn golden() -> std::path::PathBuf {
    kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/tiny-cell.json")
}

/// Where the record ran, not what it measured: left out of the comparison of fields.
const MACHINE: &[&str] = &["/fingerprint", "/args", "/device_name"];

/// Values a fixed seed and request fix on every machine.
const EXACT: &[&str] = &[
    "/schema",
    "/settings",
    "/model",
    "/backend",
    "/device",
    "/precision",
    "/status",
    "/batch_size",
    "/accum_steps",
    "/micro_batch_size",
    "/epochs_requested",
    "/test_samples",
    "/train_samples",
    "/data",
    "/dataset",
    "/seed",
    "/learning_rate",
    "/flops_per_sample",
    "/obtained/method",
    "/obtained/epochs",
    "/obtained/steps",
    "/obtained/epoch_samples",
    "/warmup/steady",
    "/warmup/steps",
    "/warmup/epoch",
];

fn request() -> CellRequest {
    let mut r = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    r.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    r.settings.epochs = 2;
    r.batch_size = 32;
    r.settings.train_limit = Some(96);
    r.settings.eval_limit = Some(64);
    r.settings.budget_seconds = None;
    r
}

/// The runner's final record for `request`, as JSON.
fn run(request: &CellRequest) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cell.json");
    request.write(&path).unwrap();
    let out = runner()
        .arg("--cell")
        .arg(&path)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::to_value(final_record(&out.stdout)).unwrap()
}

/// Every key path of `v` (`/epochs[]/mean_loss` for a key of an array's objects).
fn fields(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                let path = format!("{at}/{k}");
                if MACHINE.contains(&path.as_str()) {
                    continue;
                }
                out.insert(path.clone());
                fields(x, &path, out);
            }
        }
        Value::Array(items) => {
            for x in items {
                fields(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

fn number(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer}: no number in {v}"))
}

#[test]
fn a_fixed_seed_cell_records_the_golden_fields_and_values() {
    let mut got = run(&request());
    if kiln_contract::testing::blessing() {
        // The request's temporary path says nothing about the record.
        got["args"] = serde_json::json!(["--cell", "cell.json"]);
        let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
        std::fs::create_dir_all(golden().parent().unwrap()).unwrap();
        std::fs::write(golden(), text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(golden())
        .unwrap_or_else(|e| panic!("{}: {e} (KILN_BLESS=1 writes it)", golden().display()));
    let want: Value = serde_json::from_str(&text).unwrap();

    let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
    fields(&want, "", &mut a);
    fields(&got, "", &mut b);
    let gone: Vec<&String> = a.difference(&b).collect();
    let new: Vec<&String> = b.difference(&a).collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "the record's fields moved: gone {gone:?}, new {new:?}"
    );

    for pointer in EXACT {
        assert_eq!(
            got.pointer(pointer),
            want.pointer(pointer),
            "{pointer} differs from the golden record"
        );
    }
    let epochs = want["epochs"].as_array().unwrap().len();
    assert_eq!(got["epochs"].as_array().unwrap().len(), epochs);
    for i in 0..epochs {
        let pointer = format!("/epochs/{i}/mean_loss");
        let (g, w) = (number(&got, &pointer), number(&want, &pointer));
        assert!(
            (g - w).abs() <= 1e-3 * w.abs(),
            "{pointer}: {g} against {w}"
        );
    }
    let (g, w) = (
        number(&got, "/test_accuracy"),
        number(&want, "/test_accuracy"),
    );
    assert!((g - w).abs() <= 0.02, "test accuracy {g} against {w}");
}
