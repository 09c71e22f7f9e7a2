//! `cargo xtask verify`: every backend, device and precision trains the same model from the
//! same initial weights on the same batches for K steps (kiln-core's `verify`, the PyTorch
//! reference's `--verify`); the reference backend's run writes the initial weights, every other
//! run starts from them, and each loss curve and final weights are compared with the
//! reference's (kiln-contract' `verify`). Records go to `verify.jsonl`, the tables to
//! `verify.md`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_contract::{CellRequest, ModelKind, Precision, Profile, Status, Vocabulary};
use kiln_report::verify::{
    self, Deviation, VERIFY_VERSION, Verdict, VerifyRecord, VerifyRequest, Weights,
};

use crate::answer::AskedRow;
use crate::backends;
use crate::bench::rundir::append_line;
pub use crate::options::VerifyArgs;
use crate::runners::{Built, build_and_probe};

/// The file of verify records in a run directory.
pub const VERIFY_FILE: &str = "verify.jsonl";

/// A run that takes longer than this is stopped (its record says so).
const LIMIT: Duration = Duration::from_secs(20 * 60);

/// `BACKEND[:PRECISION]` of `--reference`.
fn parse_reference(text: &str) -> Result<(String, Precision)> {
    let (backend, precision) = match text.split_once(':') {
        Some((b, p)) => (
            b,
            p.parse::<Precision>()
                .map_err(|e| anyhow::anyhow!("--reference {text}: {e}"))?,
        ),
        None => (text, Precision::F32),
    };
    Ok((backend.to_string(), precision))
}

/// The rows of `built`: each backend's default device (else its first available one) in
/// every precision it supports among `wanted` (all when `None`).
fn rows<'a>(built: &'a [Built], wanted: Option<&[Precision]>) -> Vec<AskedRow<'a>> {
    let mut out = Vec::new();
    for (backend, runner, probe) in built {
        let version = probe.backend_version.clone();
        match crate::answer::one_device(probe) {
            Err(why) => out.push(AskedRow {
                backend,
                runner,
                device: "default".into(),
                precision: wanted
                    .and_then(|w| w.first().copied())
                    .unwrap_or(Precision::F32),
                skip: Some(why),
                version,
                burn: None,
            }),
            Ok(d) => {
                for &p in Precision::ALL {
                    // Pure f16 diverges on every backend, PyTorch included (docs/verify.md):
                    // it runs when asked for, not by default.
                    let asked = match wanted {
                        Some(w) => w.contains(&p),
                        None => p != Precision::F16,
                    };
                    let supported = d.precisions.iter().any(|s| s == p.name());
                    if asked && (supported || wanted.is_some()) {
                        out.push(AskedRow {
                            backend,
                            runner,
                            device: d.spec.clone(),
                            precision: p,
                            skip: (!supported).then(|| {
                                format!(
                                    "{} {} does not support {p} (supported: {})",
                                    backend.name,
                                    d.spec,
                                    d.precisions.join(", ")
                                )
                            }),
                            version: version.clone(),
                            burn: None,
                        });
                    }
                }
            }
        }
    }
    out
}

pub fn verify(args: VerifyArgs) -> Result<bool> {
    args.data.check()?;
    let reference = args.reference.or("flex:f32");
    let (reference_backend, reference_precision) = parse_reference(reference)?;
    let quick = args.quick.quick;
    let steps = args.steps.unwrap_or(if quick { 8 } else { 20 });
    let batch = args.batch.one("verify", if quick { 16 } else { 32 })?;
    let mut wanted = crate::runners::wanted_backends(args.ask.backends.backends.as_deref())?;
    if !wanted.iter().any(|b| b.name == reference_backend) {
        wanted.insert(0, backends::find(&reference_backend)?);
    }
    let wanted = crate::runners::buildable(wanted);
    if !wanted.iter().any(|b| b.name == reference_backend) {
        bail!("--reference {reference_backend}: that backend cannot be built here");
    }
    let out = crate::answer::out_dir(args.ask.out.get(), "verify", VERIFY_FILE, "")?;
    // Each model's dataset, and the requests' own rules checked before anything is built.
    let datasets = datasets(&args, steps, batch)?;
    let sides = built_sides(&args, &wanted)?;
    let weights_dir = out.join("weights");
    std::fs::create_dir_all(&weights_dir)
        .with_context(|| format!("cannot create {}", weights_dir.display()))?;
    let rows: Vec<AskedRow> = sides
        .iter()
        .flat_map(|(burn, built)| {
            rows(built, args.precisions.precisions.as_deref())
                .into_iter()
                .map(|row| AskedRow {
                    burn: burn.clone(),
                    ..row
                })
        })
        .collect();
    let needs_data_file = sides
        .iter()
        .flat_map(|(_, built)| built)
        .any(|(_, r, _)| r.needs_data_file);
    let Some(reference_row) = rows
        .iter()
        .find(|r| r.backend.name == reference_backend && r.precision == reference_precision)
    else {
        bail!(
            "--reference {}: {reference_backend} has no device that runs {reference_precision} \
             here (see `cargo xtask doctor`)",
            reference
        );
    };
    if let Some(why) = &reference_row.skip {
        bail!("--reference {reference}: {why}");
    }
    let mut markdown = header(steps * batch);
    let mut all_agree = true;
    let model_run = ModelRun {
        args: &args,
        asking: crate::answer::Asking {
            out: &out,
            limit: LIMIT,
            revision: crate::workspace::revision(),
        },
        weights_dir: &weights_dir,
        steps,
        batch,
        reference_backend: &reference_backend,
    };
    for &(model, dataset) in &datasets {
        let data_file = match needs_data_file {
            true => Some(export(&args, model, dataset, &out)?),
            false => None,
        };
        let (table, agree) = model_run.verify(model, dataset, data_file, &rows, reference_row)?;
        all_agree &= agree;
        markdown += "\n";
        markdown += &table;
    }
    if !args.keep_weights {
        let _ = std::fs::remove_dir_all(&weights_dir);
    }
    let path = out.join("verify.md");
    std::fs::write(&path, &markdown).with_context(|| format!("cannot write {}", path.display()))?;
    println!("{markdown}");
    eprintln!("kiln: verify records and tables in {}", out.display());
    Ok(all_agree)
}

/// The runners of every Burn a verify compares (`--burn`, each with its label), else of this
/// workspace's Burn alone (no label). With two Burns asked and fewer built: an error, having
/// run nothing.
fn built_sides(
    args: &VerifyArgs,
    wanted: &[&'static backends::Backend],
) -> Result<Vec<(Option<String>, Vec<Built>)>> {
    let specs = &args.burns.burn;
    if specs.is_empty() {
        return Ok(vec![(None, build_and_probe(wanted, false)?)]);
    }
    Ok(crate::burns::build_to_compare(specs, wanted, false)?
        .into_iter()
        .map(|s| (Some(s.burn.build.label()), s.built))
        .collect())
}

/// What verifying every model of a run shares.
struct ModelRun<'a> {
    args: &'a VerifyArgs,
    /// How its rows are asked, and where the records go (`asking.out`).
    asking: crate::answer::Asking<'a>,
    weights_dir: &'a Path,
    steps: usize,
    batch: usize,
    reference_backend: &'a str,
}

impl ModelRun<'_> {
    /// Train `model` on every row from the reference row's initial weights, grade each row
    /// against the reference, append the records: the model's table, and whether every row
    /// agrees.
    fn verify(
        &self,
        model: ModelKind,
        dataset: kiln_contract::DatasetName,
        data_file: Option<PathBuf>,
        rows: &[AskedRow],
        reference_row: &AskedRow,
    ) -> Result<(String, bool)> {
        let mut all_agree = true;
        let init = self.weights_dir.join(format!("{model}-init.safetensors"));
        let run_row = |row: &AskedRow, reference: bool| {
            let who = (model, dataset, data_file.as_ref(), init.as_path());
            self.run_row(who, row, reference)
        };
        let mut reference = run_row(reference_row, true)?;
        if reference.status != Status::Ok {
            append_line(&self.asking.out.join(VERIFY_FILE), &reference)?;
            bail!(
                "the reference run ({}) failed: {}",
                reference.label(),
                reference.reason.as_deref().unwrap_or("no reason given")
            );
        }
        let reference_weights = read_final(&reference)?.context("the reference's final weights")?;
        reference.verdict = Some(Verdict::Pass);
        reference.verdict_reason = Some("the reference".into());
        append_line(&self.asking.out.join(VERIFY_FILE), &reference)?;
        let mut records = Vec::new();
        for row in rows {
            if !std::ptr::eq(row, reference_row) {
                records.push(run_row(row, false)?);
            }
        }
        let mut deviations = vec![Deviation {
            why: "the reference".into(),
            ..verify::compare(
                &reference,
                &reference_weights,
                &reference,
                Some(&reference_weights),
                None,
            )
        }];
        for i in 0..records.len() {
            let record = &records[i];
            let twin = twin(&records, record, self.reference_backend);
            let d = verify::compare(
                &reference,
                &reference_weights,
                record,
                read_final(record)?.as_ref(),
                twin,
            );
            eprintln!("kiln: {}: {} — {}", d.label, d.verdict, d.why);
            all_agree &= d.verdict != Verdict::Deviates;
            let mut record = record.clone();
            record.verdict = Some(d.verdict);
            record.verdict_reason = Some(d.why.clone());
            append_line(&self.asking.out.join(VERIFY_FILE), &record)?;
            deviations.push(d);
        }
        Ok((verify::table(&reference, &deviations), all_agree))
    }

    /// One row's record: its run from the reference's initial weights (`reference`: this row
    /// writes them), or why it was skipped or failed. `who`: the model, its dataset and data
    /// file, and where the initial weights are.
    fn run_row(
        &self,
        (model, dataset, data_file, init): (
            ModelKind,
            kiln_contract::DatasetName,
            Option<&PathBuf>,
            &Path,
        ),
        row: &AskedRow,
        reference: bool,
    ) -> Result<VerifyRecord> {
        let mut q = request(
            self.args,
            model,
            dataset,
            (&row.backend.name, &row.device, row.precision),
            self.steps,
            self.batch,
        );
        q.data_file = data_file.cloned().filter(|_| row.runner.needs_data_file);
        let side = row.burn.as_deref().map_or(String::new(), |b| {
            format!(
                "-burn-{}",
                b.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_")
            )
        });
        q.final_out = self
            .weights_dir
            .join(format!("{}{side}.safetensors", q.id().stem()));
        if reference {
            q.init_out = Some(init.to_path_buf());
        } else {
            q.weights_in = Some(init.to_path_buf());
        }
        // A runner that cannot be started is that row's failure, not the end of the run: the
        // rows already run are written with the rest.
        let mut record = self
            .asking
            .row(row.runner, &q, row.skip.clone(), &row.version);
        if let Some(burn) = &row.burn {
            record.backend = format!("{} · Burn {burn}", record.backend);
        }
        Ok(record)
    }
}

/// Each model's dataset, with the requests' own rules checked.
fn datasets(
    args: &VerifyArgs,
    steps: usize,
    batch: usize,
) -> Result<Vec<(ModelKind, kiln_contract::DatasetName)>> {
    let mut datasets = Vec::new();
    for model in args.ask.models.or_default() {
        let dataset = dataset_of(model, args)?;
        request(
            args,
            model,
            dataset,
            ("", "default", Precision::F32),
            steps,
            batch,
        )
        .validate()
        .map_err(|e| anyhow::anyhow!("--steps/--batch: {e}"))?;
        datasets.push((model, dataset));
    }
    Ok(datasets)
}

/// verify.md's opening: what every row did (`samples`: the training samples used, in order)
/// and the thresholds.
fn header(samples: usize) -> String {
    format!(
        "# cargo xtask verify\n\nEvery row trained the same model from the same initial weights \
         on the same batches (the first {} training samples, in order; dropout off). Columns: \
         the largest relative deviation of the batch loss from the reference's in each range of \
         steps, and the final weights' largest per-tensor relative deviation (L2). Thresholds \
         (docs/verify.md):\n\n{}\n",
        samples,
        verify::thresholds_table()
    )
}

/// The dataset a model verifies on: the quick profile's default for it.
fn dataset_of(model: ModelKind, args: &VerifyArgs) -> Result<kiln_contract::DatasetName> {
    Ok(kiln_data::default_dataset(model.geometry(), true, args.data.data_dir.as_deref())?.0)
}

/// The request of one row (`who`: backend, device, precision); weights paths set by the caller.
fn request(
    args: &VerifyArgs,
    model: ModelKind,
    dataset: kiln_contract::DatasetName,
    who: (&str, &str, Precision),
    steps: usize,
    batch: usize,
) -> VerifyRequest {
    VerifyRequest {
        kiln_verify: VERIFY_VERSION,
        model,
        backend: who.0.into(),
        device: who.1.into(),
        precision: who.2,
        steps,
        batch,
        seed: args.data.seed(),
        dataset,
        data_dir: args.data.data_dir.clone(),
        data_file: None,
        weights_in: None,
        init_out: Some(PathBuf::new()),
        final_out: PathBuf::new(),
        fault: None,
        learning_rate: kiln_contract::protocol::LEARNING_RATE,
    }
}

/// The data file of the PyTorch reference: what the Rust runners load for this request.
fn export(
    args: &VerifyArgs,
    model: ModelKind,
    dataset: kiln_contract::DatasetName,
    out: &Path,
) -> Result<PathBuf> {
    let mut cell = CellRequest::new(model, "pytorch", Profile::Quick);
    cell.dataset = Some(dataset);
    cell.settings.data_dir = args.data.data_dir.clone();
    cell.settings.seed = args.data.seed();
    crate::datasets::export_data(&cell, out)
}

/// The run that tells whether a non-finite `row` diverges like the reference: PyTorch's, else
/// the reference backend's, in the row's precision (not the row itself).
fn twin<'a>(
    records: &'a [VerifyRecord],
    row: &VerifyRecord,
    reference_backend: &str,
) -> Option<&'a VerifyRecord> {
    ["pytorch", reference_backend].into_iter().find_map(|b| {
        records.iter().find(|r| {
            r.backend == b
                && r.precision == row.precision
                && r.status == Status::Ok
                && !std::ptr::eq(*r, row)
        })
    })
}

/// The final weights a record names, if it has any.
fn read_final(record: &VerifyRecord) -> Result<Option<Weights>> {
    match (&record.status, &record.final_weights) {
        (Status::Ok, Some(path)) => Ok(Some(Weights::read(path).map_err(anyhow::Error::msg)?)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runners::Runner;

    /// One request asked as `verify` asks it.
    fn run_one(
        runner: &Runner,
        request: &VerifyRequest,
        out: &Path,
        version: &str,
    ) -> VerifyRecord {
        let revision = (None, None);
        crate::answer::Asking {
            out,
            limit: LIMIT,
            revision,
        }
        .row(runner, request, None, version)
    }
    use crate::testing::reference_script as test_script;
    use crate::testing::test_python;
    use kiln_contract::DatasetName;
    use kiln_report::verify::Verdict;

    fn args() -> VerifyArgs {
        VerifyArgs {
            ask: crate::options::AskArgs {
                models: Default::default(),
                backends: Default::default(),
                out: Default::default(),
            },
            precisions: Default::default(),
            reference: crate::flags::ReferenceArg {
                reference: Some("flex".into()),
            },
            steps: None,
            batch: Default::default(),
            quick: crate::flags::QuickArg { quick: true },
            data: crate::options::DataArgs {
                seed: Some(3),
                data_dir: None,
            },
            keep_weights: false,
            burns: Default::default(),
        }
    }

    #[test]
    fn references_parse_with_or_without_a_precision() {
        assert_eq!(
            parse_reference("flex").unwrap(),
            ("flex".into(), Precision::F32)
        );
        assert_eq!(
            parse_reference("tch:bf16").unwrap(),
            ("tch".into(), Precision::BF16)
        );
        let e = parse_reference("tch:f64").unwrap_err().to_string();
        assert!(e.contains("--reference tch:f64"), "{e}");
    }

    /// The reference script as a reference: it writes the initial weights in Burn's layout,
    /// a second run starts from them, and the two agree exactly.
    #[test]
    fn the_reference_runner_writes_and_reads_weights_in_burns_layout() {
        let Some(py) = test_python() else { return };
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let runner = Runner {
            program: py,
            args: vec![test_script().into_os_string()],
            env: Vec::new(),
            needs_data_file: true,
        };
        let a = args();
        let model = ModelKind::MnistCnn;
        let data = export(&a, model, DatasetName::Synthetic, tmp.path()).expect("exported");
        let init = tmp.path().join("init.safetensors");
        let mut first = request(
            &a,
            model,
            DatasetName::Synthetic,
            ("pytorch", "cpu", Precision::F32),
            3,
            4,
        );
        first.data_file = Some(data.clone());
        first.init_out = Some(init.clone());
        first.final_out = tmp.path().join("a.safetensors");
        let mut second = first.clone();
        second.init_out = None;
        second.weights_in = Some(init.clone());
        second.final_out = tmp.path().join("b.safetensors");

        let ra = run_one(&runner, &first, tmp.path(), "");
        assert_eq!(ra.status, Status::Ok, "{:?}", ra.reason);
        let rb = run_one(&runner, &second, tmp.path(), "");
        assert_eq!(rb.status, Status::Ok, "{:?}", rb.reason);
        assert_eq!(rb.losses.len(), 3);

        let w0 = Weights::read(&init).expect("initial weights");
        let shapes: Vec<(&str, Vec<usize>)> = w0
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.clone()))
            .collect();
        // Burn's order and layout: a linear weight is [in, out].
        assert_eq!(shapes[0], ("conv1.weight", vec![64, 1, 3, 3]));
        assert_eq!(shapes[4], ("fc1.weight", vec![512, 1024]));
        assert_eq!(shapes.len(), 8);

        let (wa, wb) = (read_final(&ra).unwrap(), read_final(&rb).unwrap());
        let d = verify::compare(&ra, &wa.unwrap(), &rb, wb.as_ref(), None);
        assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
        assert_ne!(
            w0,
            Weights::read(&second.final_out).unwrap(),
            "training moved the weights"
        );
    }

    #[test]
    fn a_diverging_row_is_judged_against_pytorch_else_the_reference_backend_in_its_precision() {
        let record = |backend: &str, precision: Precision| {
            let mut q = request(
                &args(),
                ModelKind::MnistCnn,
                DatasetName::Synthetic,
                (backend, "cpu", precision),
                2,
                4,
            );
            q.init_out = None;
            let mut r = VerifyRecord::start(&q, "0");
            r.status = Status::Ok;
            r
        };
        let records = vec![
            record("flex", Precision::F16),
            record("wgpu", Precision::F16),
            record("pytorch", Precision::F16),
            record("pytorch", Precision::BF16),
        ];
        let label = |r: Option<&VerifyRecord>| r.map(VerifyRecord::label);
        assert_eq!(
            label(twin(&records, &records[1], "flex")).as_deref(),
            Some("pytorch cpu f16")
        );
        // PyTorch's own row is judged against the reference backend's, never itself.
        assert_eq!(
            label(twin(&records, &records[2], "flex")).as_deref(),
            Some("flex cpu f16")
        );
        assert_eq!(twin(&records, &records[3], "flex"), None);
    }
}
