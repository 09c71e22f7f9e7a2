//! The results site at scale (a timing program, not a test): 10,000 generated records (16 machines ×
//! 4 Burns × up to 160 cells, made from a committed record) written as 63 run directories, the site
//! built from them as `cargo xtask site` builds it (every record checked against the schema),
//! then opened in headless chromium, where filter changes are timed from the change event to
//! the next frame. `cargo run --release -p kiln-report --features site --example site_scale [-- OUT.json]`.

#[path = "../tests/browser/mod.rs"]
mod browser;

use std::path::Path;
use std::time::Instant;

use kiln_contract::schema::Record;
use kiln_report::site;
use serde_json::{Value, json};

const MACHINES: usize = 16;
const BURNS: [&str; 4] = ["0.20.1", "0.21.0", "0.22.0", "0.22.1"];
const BACKENDS: [&str; 8] = [
    "flex", "ndarray", "tch", "wgpu", "cuda", "rocm", "remote", "pytorch",
];
const PRECISIONS: [&str; 5] = ["f32", "f16", "bf16", "amp-bf16", "amp-f16"];
const MODELS: [&str; 4] = ["mnist-cnn", "resnet18", "resnet18-gray", "mlp"];
const RECORDS: usize = 10_000;

/// A committed record to vary.
fn template() -> Record {
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/results/2026-12-04-xeon-f6m167-first-run");
    kiln_report::read::load(&[run]).unwrap().records.remove(0)
}

/// 64 runs of 160 cells (10,000 records in all), each machine and Burn its own run.
fn generate(dir: &Path) -> usize {
    let base = template();
    let mut written = 0;
    for m in 0..MACHINES {
        for (b, burn) in BURNS.iter().enumerate() {
            let mut lines = Vec::new();
            for (i, (model, backend, precision)) in cells().enumerate() {
                if written + lines.len() == RECORDS {
                    break;
                }
                let mut r = base.clone();
                r.model = model.into();
                r.backend = backend.into();
                r.precision = precision.into();
                r.fingerprint.hostname = format!("host{m}");
                r.fingerprint.logical_cores = 2 << (m % 4);
                if let Some(cpu) = r.fingerprint.cpu.as_mut() {
                    cpu.family = Some([6, 25, 26][m % 3]);
                    cpu.model = Some(m as u32);
                }
                r.fingerprint.gpu_name = (m % 4 == 0).then(|| format!("GPU {m}"));
                r.fingerprint.burn_version = burn.to_string();
                r.started_at += (m * 86_400 + b * 3_600) as u64;
                if let Some(e) = r.epoch_seconds.as_mut() {
                    e.median *= 1.0 + (i * 7 + m * 13 + b) as f64 % 97.0 / 10.0;
                }
                lines.push(serde_json::to_string(&r).unwrap());
            }
            if lines.is_empty() {
                continue;
            }
            written += lines.len();
            let run = dir.join(format!("run-{m:02}-{b}"));
            std::fs::create_dir_all(&run).unwrap();
            std::fs::write(run.join("results.jsonl"), lines.join("\n") + "\n").unwrap();
        }
    }
    written
}

fn cells() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    MODELS.iter().flat_map(|m| {
        BACKENDS
            .iter()
            .flat_map(move |b| PRECISIONS.iter().map(move |p| (*m, *b, *p)))
    })
}

/// Milliseconds from a filter's change event to the next frame after it, and of them the
/// script's own (filter, sort, the table's HTML), which the page notes on its body.
async fn time_change(b: &browser::Browser, select: &str, value: &str) -> (f64, f64) {
    let script = "var done = arguments[2], t = performance.now();\
        var s = document.querySelector(\"select[name='\" + arguments[0] + \"']\");\
        s.value = arguments[1]; s.dispatchEvent(new Event('change', {bubbles: true}));\
        requestAnimationFrame(function () { setTimeout(function () {\
          done([performance.now() - t, parseFloat(document.body.getAttribute('data-script-ms'))]); }, 0); });";
    let v = b
        .client
        .execute_async(script, vec![json!(select), json!(value)])
        .await
        .unwrap();
    (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
}

fn seconds(ms: &[f64]) -> Vec<f64> {
    ms.iter().map(|m| m / 1e3).collect()
}

async fn browse(out: &Path) -> Value {
    let Some(b) = browser::Browser::start("site scale benchmark", 1500, 1000).await else {
        panic!("the benchmark needs chromium and chromedriver");
    };
    let t = Instant::now();
    b.open(&format!("file://{}/index.html", out.display()))
        .await;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut changes, mut scripts) = (Vec::new(), Vec::new());
    for (select, value) in [
        ("backend", "flex"),
        ("backend", ""),
        ("precision", "bf16"),
        ("burn", "0.22.1"),
        ("gpu", "none"),
        ("backend", "cuda"),
        ("precision", ""),
        ("burn", ""),
        ("gpu", ""),
        ("backend", ""),
    ] {
        let (total, script) = time_change(&b, select, value).await;
        changes.push(total);
        scripts.push(script);
    }
    b.client
        .find(fantoccini::Locator::Css("#all"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let (all_ms, all_script_ms) = time_change(&b, "model", "").await;
    let errors = b.console_errors().await;
    let _ = b.client.clone().close().await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut sorted = changes.clone();
    sorted.sort_by(f64::total_cmp);
    json!({
        "open_index_seconds": first_ms / 1e3,
        "filter_change_seconds": seconds(&changes),
        "filter_change_script_seconds": seconds(&scripts),
        "every_row_shown_script_seconds": all_script_ms / 1e3,
        "filter_change_median_seconds": sorted[sorted.len() / 2] / 1e3,
        "filter_change_max_seconds": sorted[sorted.len() - 1] / 1e3,
        "every_row_shown_change_seconds": all_ms / 1e3,
    })
}

/// `Intel(R) Xeon(R) Processor (family 6 model 167), 2 cores`, from /proc/cpuinfo.
fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    format!(
        "{} (family {} model {}), {cores} cores",
        field("model name"),
        field("cpu family"),
        field("model")
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let runs_dir = tmp.path().join("runs");
    let records = generate(&runs_dir);
    let out = tmp.path().join("site");
    let t = Instant::now();
    let (dirs, _) = site::run_dirs(&[runs_dir]).unwrap();
    let runs = site::read_runs(&dirs).unwrap();
    let read_s = t.elapsed().as_secs_f64();
    let built = site::build(&runs, &[], &out).unwrap();
    let build_s = t.elapsed().as_secs_f64();
    let data_bytes = std::fs::metadata(out.join("data.js")).unwrap().len();
    let browser = browse(&out).await;
    let cpu = cpu_name();
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let result = json!({
        "what": "cargo run --release -p kiln-report --features site --example site_scale",
        "kiln_commit": commit,
        "cpu": cpu,
        "records": records,
        "runs": built.runs,
        "machines": built.machines,
        "rows": built.rows,
        "read_and_check_seconds": read_s,
        "build_seconds": build_s,
        "data_js_bytes": data_bytes,
        "browser": browser,
    });
    let text = serde_json::to_string_pretty(&result).unwrap();
    println!("{text}");
    if let Some(path) = std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        std::fs::write(&path, text + "\n").unwrap();
    }
}
