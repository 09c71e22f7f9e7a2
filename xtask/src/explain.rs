//! `cargo xtask explain`: each backend's runner times every operation of one training step of a
//! model alone (kiln-core's `explain`, the PyTorch reference's `--explain`), one process per
//! backend; the records go to `explain.jsonl` and the op × backend table to `explain.md`, with
//! a stacked-bar chart per model.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kiln_results::Status;
use kiln_results::explain::{ExplainRecord, ExplainRequest, groups, report, table_of};

use crate::bench::rundir::append_line;
pub use crate::flags::ExplainArgs;
use crate::runners::Runner;
use crate::runners::build_and_probe;
use crate::workspace::fingerprint_here;
use crate::{chart, time};

/// The file of explain records in a run directory.
pub const EXPLAIN_FILE: &str = "explain.jsonl";

/// A runner that takes longer than this for one model is stopped (its record says so).
const LIMIT: Duration = Duration::from_secs(30 * 60);

pub fn explain(args: ExplainArgs) -> Result<bool> {
    let request_for = |model, backend: &str, device: &str| {
        let mut r = ExplainRequest::new(model, backend, device, args.precision, args.batch);
        r.repeats = args.repeats;
        r
    };
    // The requests' own rules, checked before anything is built.
    for &model in &args.models {
        request_for(model, "", "default")
            .validate()
            .map_err(|e| anyhow::anyhow!("--precision/--batch/--repeats: {e}"))?;
    }
    let wanted = crate::runners::wanted_backends(args.backends.as_deref())?;
    let out = crate::answer::out_dir(
        args.out.as_deref(),
        "explain",
        EXPLAIN_FILE,
        " (`cargo xtask report DIR` re-renders them)",
    )?;
    let wanted = crate::runners::buildable(wanted);
    let built = build_and_probe(&wanted, false)?;
    std::fs::create_dir_all(out.join("logs"))
        .with_context(|| format!("cannot create {}", out.display()))?;
    let (commit, dirty) = crate::workspace::revision();
    let mut records = Vec::new();
    for &model in &args.models {
        for (backend, runner, probe) in &built {
            let device = crate::answer::one_device(probe);
            let request = request_for(
                model,
                &backend.name,
                device.as_ref().map_or("default", |d| d.spec.as_str()),
            );
            let mut record = match device {
                Err(why) => {
                    let mut r = ExplainRecord::start(&request, &probe.backend_version, 0);
                    r.status = Status::Skipped;
                    r.reason = Some(why);
                    r
                }
                Ok(_) => run_one(runner, &request, &out)?,
            };
            let burn = runner.burn_version(&record.backend_version);
            record.fingerprint = Some(fingerprint_here(record.threads, burn, &commit, dirty));
            // The record says so too when its ops do not decompose its step.
            record.notes.extend(record.outside_band());
            append_line(&out.join(EXPLAIN_FILE), &record)?;
            summary(&record);
            records.push(record);
        }
    }
    let markdown = write_report(&out, &records)?;
    println!("{markdown}");
    eprintln!("kiln: explain records and report in {}", out.display());
    Ok(records.iter().all(|r| r.status != Status::Failed))
}

fn summary(r: &ExplainRecord) {
    match (r.status, r.explained()) {
        (Status::Ok, Some(share)) => eprintln!(
            "kiln: {} {}: {} ops sum to {} of a measured {} step ({:.0}% explained) [{}]",
            r.model,
            r.column(),
            r.ops.len(),
            kiln_results::explain::ms(r.ops_total()),
            kiln_results::explain::ms(r.step.map_or(0.0, |s| s.median_seconds)),
            100.0 * share,
            time::short(r.wall_seconds)
        ),
        _ => eprintln!(
            "kiln: {} {}: {} — {}",
            r.model,
            r.column(),
            r.status.as_str(),
            r.reason.as_deref().unwrap_or("")
        ),
    }
}

/// Run one request in the backend's runner: stderr to the log (its progress lines echoed),
/// the record from stdout's last line; a failed record when there is none.
fn run_one(runner: &Runner, request: &ExplainRequest, out: &Path) -> Result<ExplainRecord> {
    let stem = format!(
        "{}-{}-{}",
        request.model, request.backend, request.precision
    );
    eprintln!(
        "kiln: explaining {} on {} {} {} (batch {})",
        request.model, request.backend, request.device, request.precision, request.batch
    );
    let started = Instant::now();
    Ok(
        match crate::answer::ask(runner, "--explain", request, &stem, out, LIMIT)? {
            Ok(r) => r,
            Err(why) => {
                let mut r = ExplainRecord::start(request, "", 0);
                r.reason = Some(why);
                r.wall_seconds = started.elapsed().as_secs_f64();
                r
            }
        },
    )
}

/// Write `explain.md` (tables, charts linked) and one `explain-<model>.svg` per model into
/// `dir`; returns the Markdown.
pub fn write_report(dir: &Path, records: &[ExplainRecord]) -> Result<String> {
    let mut markdown = report(records);
    for (model, svg) in charts(records)? {
        let name = format!("explain-{model}.svg");
        std::fs::write(dir.join(&name), svg)
            .with_context(|| format!("cannot write {name} in {}", dir.display()))?;
        markdown.push_str(&format!("\n![{model}, op by op]({name})\n"));
    }
    let path = dir.join("explain.md");
    std::fs::write(&path, &markdown).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(markdown)
}

/// One stacked-bar chart per model (and batch) with at least one ok record.
pub fn charts(records: &[ExplainRecord]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (model, batch) in groups(records) {
        if let Some(table) = table_of(records, model, batch) {
            out.push((model.to_string(), chart::explain_chart(&table)?));
        }
    }
    Ok(out)
}

/// The explain records of the run directories (or `explain.jsonl` files) among `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Vec<ExplainRecord>> {
    let mut records = Vec::new();
    for p in paths {
        let file = if p.is_dir() {
            p.join(EXPLAIN_FILE)
        } else {
            p.clone()
        };
        if file.file_name().is_some_and(|n| n == EXPLAIN_FILE) && file.is_file() {
            records.extend(kiln_results::explain::read_records(&file).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::{test_python, test_script};
    use kiln_results::explain::Phase;
    use kiln_results::{ModelKind, Precision};

    #[test]
    fn the_reference_runner_times_every_op_of_both_models_in_the_shared_schema() {
        let Some(py) = test_python() else { return };
        let tmp = tempfile::tempdir().expect("a temporary directory");
        for model in [ModelKind::MnistCnn, ModelKind::ResNet18] {
            let mut request = ExplainRequest::new(model, "pytorch", "cpu", Precision::F32, 2);
            request.warmup = 0;
            request.repeats = 1;
            let runner = Runner {
                program: py.clone(),
                args: vec![test_script().into_os_string()],
                env: Vec::new(),
                needs_data_file: true,
            };
            std::fs::create_dir_all(tmp.path().join("logs")).expect("logs");
            let record = run_one(&runner, &request, tmp.path()).expect("the runner ran");
            assert_eq!(record.status, Status::Ok, "{model}: {:?}", record.reason);
            assert_eq!(record.sites, request.sites);
            for (index, site) in request.sites.iter().enumerate() {
                for phase in site.phases() {
                    assert!(
                        record
                            .ops
                            .iter()
                            .any(|o| o.site == index && o.phase == phase),
                        "{model}: {} {phase} not timed",
                        site.describe()
                    );
                }
            }
            assert!(
                !record
                    .ops
                    .iter()
                    .any(|o| o.site == 0 && o.phase == Phase::InputGrad),
                "the images need no gradient"
            );
            assert!(record.step.is_some_and(|s| s.median_seconds > 0.0));
        }
    }

    #[test]
    fn a_runner_without_a_record_gives_a_failed_one_naming_its_log() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir_all(tmp.path().join("logs")).expect("logs");
        let runner = Runner {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), "echo kiln: broken >&2; exit 3".into()],
            env: Vec::new(),
            needs_data_file: false,
        };
        let request = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::F32, 2);
        let record = run_one(&runner, &request, tmp.path()).expect("ran");
        assert_eq!(record.status, Status::Failed);
        let reason = record.reason.unwrap_or_default();
        assert!(
            reason.contains("without a record") && reason.contains("kiln: broken"),
            "{reason}"
        );
    }

    #[test]
    fn report_renders_an_explain_directory() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let request = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::F32, 2);
        let mut record = ExplainRecord::start(&request, "0.22.1", 2);
        record.status = Status::Skipped;
        record.reason = Some("no device".into());
        append_line(&tmp.path().join(EXPLAIN_FILE), &record).expect("written");
        let loaded = load(&[tmp.path().to_path_buf()]).expect("read");
        assert_eq!(loaded, vec![record]);
        let md = write_report(tmp.path(), &loaded).expect("rendered");
        assert!(md.contains("flex: skipped — no device"), "{md}");
        assert!(tmp.path().join("explain.md").is_file());
    }
}
