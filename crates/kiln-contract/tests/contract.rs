//! The JSON Schema of the runner boundary (`kiln_contract::contract`): committed as generated,
//! and the Python runner's validator accepting what Rust writes and refusing what Rust refuses.

use std::path::PathBuf;
use std::process::Command;

use kiln_contract::contract::{SCHEMA_FILE, contract_schema};
use kiln_contract::{CellRequest, ModelKind, Observed, Profile};
use serde_json::{Value, json};

/// The repository's root (the schema and the Python runner live there).
fn workspace_root() -> PathBuf {
    kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn committed() -> PathBuf {
    workspace_root().join(SCHEMA_FILE)
}

#[test]
fn contract_schema_is_committed_as_the_types_generate_it() {
    let generated = serde_json::to_string_pretty(&contract_schema()).unwrap() + "\n";
    if kiln_contract::testing::blessing() {
        std::fs::write(committed(), &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{SCHEMA_FILE} is not what kiln-contract' types generate: a request or record field \
         changed. Rewrite it with `KILN_BLESS=1 cargo test -p kiln-contract --features schema contract_schema` and commit it"
    );
}

/// What the PyTorch reference writes for a cell that trained, as its `observed()` builds it.
fn observed_from_python() -> Value {
    json!({
        "event": "observed",
        "status": "ok", "reason": null, "device": "cpu", "device_name": "cpu",
        "device_kind": "cpu", "runtime": null, "device_memory_bytes": null,
        "backend_version": "torch 2.9.0", "threads": 2, "dataset": "fashion-mnist-sample",
        "data": "real", "notes": [], "flops_per_sample": null, "peak": null,
        "peak_memory_bytes": 123456789, "started_at": 1764770000, "wall_seconds": 12.5,
        "args": ["--cell", "x.request.json"],
        "measurements": {
            "epoch_samples": 256, "test_samples": 256, "first_step_seconds": 0.25,
            "epochs": [
                {"epoch": 1, "seconds": 2.0, "steps": 4, "samples": 256, "partial": false,
                 "mean_loss": 1.5, "test_accuracy": 0.5},
                {"epoch": 2, "seconds": 1.9, "steps": 4, "samples": 256, "partial": false,
                 "mean_loss": null, "test_accuracy": null},
            ],
            "chunks": [{"steps": 3, "samples": 192, "seconds": 1.4}],
            "diverged": "loss NaN at step 7", "device_memory": null, "loss_scaling": null,
            "rss_baseline_bytes": 1000, "rss_peak_bytes": 2000, "peak_since_baseline": true,
        },
        "loop_overhead": null,
    })
}

/// Each of `values` checked by the Python runner's validator against `message`'s schema:
/// `None` when valid, else its first error.
fn python_verdicts(message: &str, values: &[Value]) -> Vec<Option<String>> {
    let package = workspace_root().join("pytorch/kiln_torch");
    let script = "import json, sys\n\
                  sys.path.insert(0, sys.argv[1])\n\
                  import contract\n\
                  for line in sys.stdin:\n\
                  \x20   errors = contract.errors(json.loads(line), sys.argv[2])\n\
                  \x20   print(json.dumps(errors[0] if errors else None))\n";
    let input: String = values.iter().map(|v| format!("{v}\n")).collect();
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(&package)
        .arg(message)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (CI installs it; the PyTorch runner needs it anyway)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn python_accepts_what_rust_reads_and_refuses_a_misspelt_or_mistyped_field() {
    // The record: as Python writes it (the event tag is the line's, not the record's), and as
    // Rust writes the same record back.
    let mut python = observed_from_python();
    python.as_object_mut().unwrap().remove("event");
    let parsed: Observed = serde_json::from_value(python.clone()).expect("Rust reads it");
    let rust = serde_json::to_value(&parsed).unwrap();
    let mut misspelt = python.clone();
    let wall = misspelt
        .as_object_mut()
        .unwrap()
        .remove("wall_seconds")
        .unwrap();
    misspelt["wall_second"] = wall;
    assert!(serde_json::from_value::<Observed>(misspelt.clone()).is_err());
    let mut deep = python.clone();
    deep["measurements"]["epochs"][0]["mean_los"] = json!(1.0);
    assert!(serde_json::from_value::<Observed>(deep.clone()).is_err());
    let mut mistyped = python.clone();
    mistyped["threads"] = json!("2");
    assert!(serde_json::from_value::<Observed>(mistyped.clone()).is_err());
    let mut bad_name = python.clone();
    bad_name["device_kind"] = json!("tpu");
    assert!(serde_json::from_value::<Observed>(bad_name.clone()).is_err());
    let verdicts = python_verdicts(
        "observed",
        &[python, rust, misspelt, deep, mistyped, bad_name],
    );
    assert_eq!(verdicts[0], None);
    assert_eq!(verdicts[1], None);
    let said = |i: usize| verdicts[i].clone().unwrap_or_default();
    assert!(said(2).contains("wall_second"), "{}", said(2));
    assert!(
        said(3).contains("measurements.epochs[0]") && said(3).contains("mean_los"),
        "{}",
        said(3)
    );
    assert!(said(4).contains("threads"), "{}", said(4));
    assert!(
        said(5).contains("device_kind") && said(5).contains("tpu"),
        "{}",
        said(5)
    );

    // The request xtask writes for the PyTorch reference, and one with a stale key.
    let mut request = CellRequest::new(ModelKind::MnistCnn, "pytorch", Profile::Quick);
    request.data_file = Some("/tmp/cell.kdata".into());
    let request = serde_json::to_value(&request).unwrap();
    let mut stale = request.clone();
    stale["lr"] = json!(0.01);
    let mut negative = request.clone();
    negative["batch_size"] = json!(-1);
    let verdicts = python_verdicts("cell_request", &[request, stale, negative]);
    assert_eq!(verdicts[0], None);
    assert!(verdicts[1].clone().unwrap_or_default().contains("lr"));
    assert!(
        verdicts[2]
            .clone()
            .unwrap_or_default()
            .contains("batch_size")
    );
}

#[test]
fn every_committed_request_and_record_passes_the_python_validator() {
    // What Rust and Python runners really wrote: the explain, verify and inference records,
    // and the requests kept beside them, in every committed run directory.
    let script = r#"
import glob, json, os, sys
sys.path.insert(0, sys.argv[1])
import contract
os.chdir(sys.argv[2])
seen, bad = 0, []
def check(value, message, where):
    global seen
    seen += 1
    errors = contract.errors(value, message)
    if errors:
        bad.append("%s: %s" % (where, errors[0]))
for name, message in (("explain.jsonl", "explain_record"), ("verify.jsonl", "verify_record"),
                      ("infer.jsonl", "infer_record")):
    for path in glob.glob("docs/results/**/" + name, recursive=True):
        for i, line in enumerate(open(path)):
            if line.strip():
                check(json.loads(line), message, "%s:%d" % (path, i + 1))
for path in glob.glob("docs/results/**/*.request.json", recursive=True):
    value = json.load(open(path))
    message = ("explain_request" if "kiln_explain" in value else
               "verify_request" if "kiln_verify" in value else
               "infer_request" if "kiln_infer" in value else "cell_request")
    check(value, message, path)
print(json.dumps({"seen": seen, "bad": bad}))
"#;
    let root = workspace_root();
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(root.join("pytorch/kiln_torch"))
        .arg(&root)
        .output()
        .expect("python3");
    assert!(out.status.success(), "{out:?}");
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(verdict["seen"].as_u64().unwrap() >= 20, "{verdict}");
    assert_eq!(verdict["bad"], json!([]), "{verdict}");
}

/// The PyTorch reference's warm-up rule (`warmup.py`'s `steady`) says what kiln-contract'
/// `TimingRules::is_steady` says, on every prefix of series that settle, never settle, spike
/// and drift, under Kiln's rules and another set.
#[test]
fn python_and_rust_agree_on_when_step_times_are_steady() {
    use kiln_contract::TimingRules;
    let mut series: Vec<Vec<f64>> = vec![
        vec![54.0, 0.9, 0.11, 0.10, 0.10, 0.11, 0.10, 0.10],
        (0..30)
            .map(|i| if i % 2 == 0 { 1.0 } else { 0.01 })
            .collect(),
        (0..30).map(|i| 2.0 * 0.93f64.powi(i)).collect(),
        vec![0.1, 0.1, 0.1, 0.1, 0.1, 0.5, 0.1, 0.1, 0.1, 0.1],
    ];
    // A deterministic noisy series around 0.2 s (SplitMix-style steps, no RNG crate).
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    series.push(
        (0..40)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                0.2 * (1.0 + ((x >> 40) as f64 / (1u64 << 24) as f64 - 0.5) * 0.3)
            })
            .collect(),
    );
    let other = TimingRules {
        steady_window: 2,
        steady_tolerance: 0.25,
        steady_spike: 2.0,
        ..TimingRules::KILN
    };
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for rules in [TimingRules::KILN, other] {
        for s in &series {
            for n in 0..=s.len() {
                cases.push(json!({"timing": rules, "steps": &s[..n]}));
                expected.push(rules.is_steady(&s[..n]));
            }
        }
    }
    let script = "import json, sys\nimport warmup\nfor case in json.load(sys.stdin):\n    \
                  print('1' if warmup.steady(case['timing'], case['steps']) else '0')\n";
    let got: Vec<bool> = python_lines(script, &cases)
        .iter()
        .map(|l| l == "1")
        .collect();
    assert_eq!(got.len(), expected.len());
    assert!(expected.iter().any(|&s| s) && expected.iter().any(|&s| !s));
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "case {i}: {}", cases[i]);
    }
}

/// The PyTorch reference's latency percentiles (`warmup.py`'s `percentiles`, which infer.py
/// uses) are kiln-contract' `Latency::of` on the same series: nearest rank at every length
/// where the rank's rounding could differ (1 to 1,001 queries, ties, unsorted input).
#[test]
fn python_and_rust_agree_on_latency_percentiles() {
    use kiln_contract::infer::Latency;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for n in (1..=40).chain([99, 100, 101, 999, 1000, 1001]) {
        let seconds: Vec<f64> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Coarse values, so that ties occur.
                ((x >> 54) as f64 + 1.0) * 1e-5
            })
            .collect();
        let warmup = (n % 7, n as f64 * 0.01, n % 2 == 0);
        cases.push(json!({"batch": n % 9 + 1, "seconds": seconds, "warmup": [warmup.0, warmup.1, warmup.2]}));
        expected
            .push(serde_json::to_value(Latency::of(n % 9 + 1, &seconds, warmup).unwrap()).unwrap());
    }
    let script = "import json, sys\nimport warmup\nfor c in json.load(sys.stdin):\n    \
                  print(json.dumps(warmup.percentiles(c['batch'], c['seconds'], c['warmup'])))\n";
    let got = python_lines(script, &cases);
    assert_eq!(got.len(), expected.len());
    for (i, (line, e)) in got.iter().zip(&expected).enumerate() {
        let g: Value = serde_json::from_str(line).unwrap();
        let (g, e) = (g.as_object().unwrap(), e.as_object().unwrap());
        assert_eq!(
            g.keys().collect::<Vec<_>>(),
            e.keys().collect::<Vec<_>>(),
            "case {i}"
        );
        for (k, v) in e {
            // serde_json reads Python's shortest decimals to within an ulp, not exactly; a
            // wrong rank is off by at least one step of 1e-5.
            let same = match (g[k].as_f64(), v.as_f64()) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * a.abs().max(b.abs()),
                _ => &g[k] == v,
            };
            assert!(
                same,
                "case {i}, {k}: python {} rust {v}: {}",
                g[k], cases[i]
            );
        }
    }
}

/// Run `script` (reading a JSON list of cases on stdin, printing one line per case) in the
/// PyTorch reference's package directory; its lines.
fn python_lines(script: &str, cases: &[Value]) -> Vec<String> {
    let package = workspace_root().join("pytorch/kiln_torch");
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .current_dir(&package)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (CI installs it; the PyTorch runner needs it anyway)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(serde_json::to_string(cases).unwrap().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The reference's late-compile rule (`warmup.late_compile`) and budget rule
/// (`warmup.budget_spent`) say what kiln-contract' `TimingRules::late_compile` and
/// `protocol::budget_spent` say, on steps around both thresholds, under Kiln's rules and
/// another set.
#[test]
fn python_and_rust_agree_on_late_compiles_and_spent_budgets() {
    use kiln_contract::TimingRules;
    use std::time::Duration;
    let other = TimingRules {
        late_factor: 3.0,
        late_floor_seconds: 0.2,
        min_timed_steps: 5,
        ..TimingRules::KILN
    };
    let (mut cases, mut expected) = (Vec::new(), Vec::new());
    for rules in [TimingRules::KILN, other] {
        for reference in [0.0002, 0.001, 0.05, 0.7] {
            for factor in [0.5, 1.0, 2.9, 3.1, 4.9, 5.1, 50.0, 20_000.0] {
                let seconds = reference * factor;
                cases.push(json!({"rule": "late", "timing": rules, "seconds": seconds,
                                  "reference": reference}));
                expected.push(match rules.late_compile(seconds, reference) {
                    Some(excess) => format!("{excess:.9}"),
                    None => "none".into(),
                });
            }
        }
        let chunks = [(2usize, 1.5f64), (1, 0.75)];
        for budget in [None, Some(2.0), Some(3.0), Some(4.0)] {
            for open in [(0usize, 0.0f64), (1, 0.5), (3, 2.0)] {
                cases.push(json!({"rule": "budget", "timing": rules, "budget": budget,
                                  "chunks": chunks, "open": open}));
                let spent = kiln_contract::protocol::budget_spent(
                    budget.map(Duration::from_secs_f64),
                    rules.min_timed_steps,
                    chunks,
                    open,
                );
                expected.push(if spent { "1" } else { "0" }.into());
            }
        }
    }
    let script = "import json, sys\nimport warmup\nfor c in json.load(sys.stdin):\n    \
                  if c['rule'] == 'late':\n        \
                  e = warmup.late_compile(c['timing'], c['seconds'], c['reference'])\n        \
                  print('none' if e is None else '%.9f' % e)\n    \
                  else:\n        \
                  print('1' if warmup.budget_spent(c['budget'], c['timing']['min_timed_steps'], \
                  c['chunks'], c['open'][0], c['open'][1]) else '0')\n";
    let got = python_lines(script, &cases);
    assert_eq!(got.len(), expected.len());
    assert!(expected.iter().any(|e| e == "none") && expected.iter().any(|e| e != "none"));
    assert!(expected.contains(&"1".to_string()) && expected.contains(&"0".to_string()));
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "case {i}: {}", cases[i]);
    }
}
