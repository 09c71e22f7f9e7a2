//! `cargo xtask explain`: each backend's runner times every operation of one training step of a
//! model alone (kiln-core's `explain`, the PyTorch reference's `--explain`), one process per
//! backend; the records go to `explain.jsonl` and the op × backend table to `explain.md`, with
//! a stacked-bar chart per model.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_contract::{BurnBuild, ModelKind, Status};
use kiln_report::explain::{ExplainRecord, ExplainRequest, groups, report, table_of};

use crate::backends::Backend;
use crate::bench::rundir::append_line;
pub use crate::options::ExplainArgs;
use crate::runners::{Built, build_and_probe};
use crate::time;
use kiln_report::chart;

/// The file of explain records in a run directory.
pub const EXPLAIN_FILE: &str = "explain.jsonl";

/// The op-by-op A/B of `explain --burn A --burn B`.
pub const AB_FILE: &str = "explain-ab.md";

/// A runner that takes longer than this for one model is stopped (its record says so).
const LIMIT: Duration = Duration::from_secs(30 * 60);

pub fn explain(args: ExplainArgs) -> Result<bool> {
    // The requests' own rules, checked before anything is built.
    for model in args.ask.models.or_default() {
        request_for(&args, model, "", "default")?
            .validate()
            .map_err(|e| anyhow::anyhow!("--precision/--batch/--runs-per-op: {e}"))?;
    }
    let wanted = crate::runners::wanted_backends(args.ask.backends.backends.as_deref())?;
    let out = crate::answer::out_dir(
        args.ask.out.get(),
        "explain",
        EXPLAIN_FILE,
        " (`cargo xtask report DIR` re-renders them)",
    )?;
    let wanted = crate::runners::buildable(wanted);
    if !args.burns.burn.is_empty() {
        return explain_ab(&args, &wanted, &out);
    }
    let built = build_and_probe(&wanted, false)?;
    let records = explain_pass(&args, &built, &out, None)?;
    let markdown = write_report(&out, &records)?;
    println!("{markdown}");
    eprintln!("kiln: explain records and report in {}", out.display());
    Ok(records.iter().all(|r| r.status != Status::Failed))
}

/// Explain every model on every runner of `built` once, appending the records to `out`'s
/// explain.jsonl; `burn`: the Burn the runners were built against, when not this workspace's.
fn explain_pass(
    args: &ExplainArgs,
    built: &[Built],
    out: &Path,
    burn: Option<&BurnBuild>,
) -> Result<Vec<ExplainRecord>> {
    std::fs::create_dir_all(out.join("logs"))
        .with_context(|| format!("cannot create {}", out.display()))?;
    let asking = crate::answer::Asking {
        out,
        limit: LIMIT,
        revision: crate::workspace::revision(),
    };
    let mut records = Vec::new();
    for model in args.ask.models.or_default() {
        for (backend, runner, probe) in built {
            let device = crate::answer::one_device(probe);
            let spec = device.as_ref().map_or("default", |d| d.spec.as_str());
            let request = request_for(args, model, &backend.name, spec)?;
            let skip = device.err();
            let mut record = asking.row(runner, &request, skip, &probe.backend_version);
            record.burn = burn.cloned();
            // The record says so too when its ops do not decompose its step.
            record.notes.extend(record.outside_band());
            append_line(&out.join(EXPLAIN_FILE), &record)?;
            summary(&record);
            records.push(record);
        }
    }
    Ok(records)
}

/// `explain --burn A --burn B ...`: each Burn's runners built on their own, `--passes` runs of
/// explain per Burn alternating (A, B, A, B, ...) into `out/<letter>-<burn>/`, and
/// `explain-ab.md` comparing every other Burn with the first op by op.
fn explain_ab(args: &ExplainArgs, wanted: &[&'static Backend], out: &Path) -> Result<bool> {
    let sides = crate::burns::build_sides(&args.burns.burn, wanted, false, out)?;
    let (text, all_ok) = run_ab(args, &sides, out)?;
    println!("{text}");
    if sides.len() > 1 {
        eprintln!("kiln: op-by-op A/B in {}", out.join(AB_FILE).display());
    }
    Ok(all_ok)
}

/// The most passes an explain A/B takes while the ops it names do not account for the step's
/// change.
pub const MAX_PASSES: u64 = 12;

/// Whether the passes so far settle every column between the first side and each other: where
/// the measured step moved, the ops named account for at least half of that change, and no op
/// is pending (significant alone, not yet at the level split over the ops, a share of the step
/// that counts: `kiln_report::explain::ab::ColumnAb::pending`).
fn accounted_for(records: &[Vec<ExplainRecord>]) -> bool {
    let Some((a, others)) = records.split_first() else {
        return true;
    };
    others.iter().all(|b| {
        kiln_report::explain::ab::compare(a, b)
            .iter()
            .all(|c| c.accounted().is_none_or(|share| share >= 0.5) && c.pending().next().is_none())
    })
}

/// The passes of an explain A/B over built `sides` (each Burn, its runners, its directory) and
/// `explain-ab.md` in `out`: `--passes` at least, in a balanced order (A B, B A, ...), then more
/// while an op is pending or the step moved and the ops named do not account for half of it
/// ([`accounted_for`]), up to [`MAX_PASSES`]; returns its text and whether no record failed.
fn run_ab(
    args: &ExplainArgs,
    sides: &[(BurnBuild, Vec<Built>, PathBuf)],
    out: &Path,
) -> Result<(String, bool)> {
    let mut records: Vec<Vec<ExplainRecord>> = vec![Vec::new(); sides.len()];
    let mut last: Vec<Vec<ExplainRecord>> = vec![Vec::new(); sides.len()];
    let most = args.passes.max(MAX_PASSES);
    for k in 1..=most {
        if k > args.passes && accounted_for(&records) {
            break;
        }
        for i in crate::burns::pass_order(k as usize, sides.len()) {
            let (burn, built, dir) = &sides[i];
            eprintln!(
                "kiln: explain pass {k} (at least {}, at most {most}), Burn {}",
                args.passes,
                burn.label()
            );
            let pass = explain_pass(args, built, dir, Some(burn))?;
            records[i].extend(pass.iter().cloned());
            last[i] = pass;
        }
    }
    // Each side's own report shows its last pass (one column per backend).
    for ((_, _, dir), pass) in sides.iter().zip(&last) {
        write_report(dir, pass)?;
    }
    let labelled: Vec<(String, Vec<ExplainRecord>)> = sides
        .iter()
        .zip(records)
        .map(|((burn, _, _), r)| (burn.label(), r))
        .collect();
    let text = write_ab(out, &labelled)?;
    let all_ok = labelled
        .iter()
        .flat_map(|(_, r)| r)
        .all(|r| r.status != Status::Failed);
    Ok((text, all_ok))
}

/// Compare every side's records (its label, its records of every pass) with the first side's
/// op by op and write `explain-ab.md` in `out`; returns its text.
pub fn write_ab(out: &Path, sides: &[(String, Vec<ExplainRecord>)]) -> Result<String> {
    let [(first, a), others @ ..] = sides else {
        bail!("{}: an explain A/B without sides", out.display());
    };
    if others.is_empty() {
        return Ok(crate::burns::nothing_to_compare(first));
    }
    let mut text = String::new();
    for (label, b) in others {
        let columns = kiln_report::explain::ab::compare(a, b);
        text.push_str(&kiln_report::explain::ab::markdown(&columns, first, label));
    }
    let path = out.join(AB_FILE);
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(text)
}

fn request_for(
    args: &ExplainArgs,
    model: ModelKind,
    backend: &str,
    device: &str,
) -> Result<ExplainRequest> {
    let precision = args.precision.one("explain")?;
    let batch = args
        .batch
        .one("explain", kiln_contract::Profile::Full.batch_size())?;
    let mut r = ExplainRequest::new(model, backend, device, precision, batch);
    r.repeats = args.runs_per_op;
    Ok(r)
}

fn summary(r: &ExplainRecord) {
    match (r.status, r.explained()) {
        (Status::Ok, Some(share)) => eprintln!(
            "kiln: {} {}: {} ops sum to {} of a measured {} step ({:.0}% explained) [{}]",
            r.model,
            r.column(),
            r.ops.len(),
            kiln_report::explain::ms(r.ops_total()),
            kiln_report::explain::ms(r.step.map_or(0.0, |s| s.median_seconds)),
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
            records.extend(kiln_report::explain::read_records(&file).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runners::Runner;

    /// One request asked as `explain` asks it.
    fn run_one(runner: &Runner, request: &ExplainRequest, out: &Path) -> ExplainRecord {
        let revision = (None, None);
        crate::answer::Asking {
            out,
            limit: LIMIT,
            revision,
        }
        .row(runner, request, None, "")
    }
    use crate::testing::reference_script as test_script;
    use crate::testing::test_python;
    use kiln_contract::{ModelKind, Precision, Vocabulary};
    use kiln_report::explain::Phase;

    /// A fake runner that writes an explain record of flex whose first op takes `first`
    /// seconds and appends `side` to `order`.
    fn side_runner(dir: &Path, side: &str, first: f64, order: &Path) -> Runner {
        use kiln_report::explain::{OpTiming, Timing};
        let request = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::F32, 8);
        let mut r = ExplainRecord::start(&request, "0", 2);
        r.status = Status::Ok;
        let timing = |s| Timing {
            median_seconds: s,
            mean_seconds: None,
            min_seconds: s,
            max_seconds: s,
            runs: 7,
        };
        r.ops = (0..3)
            .map(|site| OpTiming {
                site,
                phase: Phase::Forward,
                timing: timing(if site == 0 { first } else { 0.001 }),
            })
            .collect();
        r.step = Some(timing(first + 0.01));
        let file = dir.join(format!("explain-{side}.json"));
        std::fs::write(&file, serde_json::to_string(&r).unwrap()).unwrap();
        let program = dir.join(format!("runner-{side}"));
        let body = format!("echo {side} >> {}; cat {}", order.display(), file.display());
        std::fs::write(&program, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        Runner {
            program,
            args: Vec::new(),
            env: Vec::new(),
            needs_data_file: false,
        }
    }

    /// An explain A/B alternates the Burns pass by pass and names the op that moved.
    #[test]
    fn an_explain_ab_alternates_and_names_the_op_that_moved() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ExplainArgs,
        }
        let tmp = tempfile::tempdir().unwrap();
        let order = tmp.path().join("order");
        let args = Cli::parse_from(["x", "--passes", "2", "--model", "mnist-cnn"]).args;
        let probe = |runner: Runner| vec![crate::testing::on_cpu("flex", runner)];
        let burn = crate::testing::burn_build;
        let sides = vec![
            (
                burn("0.22.1"),
                probe(side_runner(tmp.path(), "A", 0.010, &order)),
                tmp.path().join("a"),
            ),
            (
                burn("path:/src/burn"),
                probe(side_runner(tmp.path(), "B", 0.030, &order)),
                tmp.path().join("b"),
            ),
        ];
        let (text, ok) = run_ab(&args, &sides, tmp.path()).unwrap();
        assert!(ok);
        assert_eq!(std::fs::read_to_string(&order).unwrap(), "A\nB\nB\nA\n");
        assert!(text.contains("Moved beyond the noise:\n- **"), "{text}");
        assert!(text.contains("B slower (3.00×)"), "{text}");
        assert_eq!(text.matches("| B slower |").count(), 2, "{text}");
        let b = kiln_report::explain::read_records(&tmp.path().join("b").join(EXPLAIN_FILE));
        let b = b.unwrap();
        assert_eq!(b.len(), 2);
        assert!(
            b.iter()
                .all(|r| r.burn.as_ref().unwrap().spec == "path:/src/burn")
        );
        assert!(tmp.path().join("a").join("explain.md").is_file());
        // `cargo xtask report DIR` renders the same comparison again from the records.
        std::fs::remove_file(tmp.path().join(AB_FILE)).unwrap();
        let burns = tmp.path().join(crate::burns::BURNS_FILE);
        std::fs::write(&burns, r#"[{"dir": "a"}, {"dir": "b"}]"#).unwrap();
        let sides = crate::burns::side_dirs(tmp.path()).unwrap().unwrap();
        crate::bench::ab::rewrite(tmp.path(), &sides).unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(AB_FILE)).unwrap(),
            text
        );
    }

    #[test]
    fn the_reference_runner_times_every_op_of_every_model_in_the_shared_schema() {
        let Some(py) = test_python() else { return };
        let tmp = tempfile::tempdir().expect("a temporary directory");
        for &model in ModelKind::ALL {
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
            let record = run_one(&runner, &request, tmp.path());
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
        let record = run_one(&runner, &request, tmp.path());
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
