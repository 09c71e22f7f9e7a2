//! `cargo xtask infer`: which backend crate to embed for serving. Every backend's runner (and
//! the PyTorch reference) loads the same weights (safetensors: trained here by a short run on
//! `--train-on`'s backend, or given with `--weights`) and measures its first prediction from
//! process start, query latency percentiles at batch 1 and 8, throughput at its largest batch,
//! memory to serve and the logits of the test samples (kiln-core's `infer`, the reference's
//! infer.py); each row's top-1 agreement with the reference row comes from those logits.
//! Repeats run interleaved (A B C A B C). Records go to `infer.jsonl`, tables to `infer.md`,
//! `infer.html` (with a latency chart per model) and `infer.csv`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use kiln_contract::infer::{INFER_VERSION, InferRecord, InferRequest};
use kiln_contract::{BurnBuild, DatasetName, ModelKind, Precision};

use crate::answer::AskedRow;
use crate::bench::rundir::append_line;
pub use crate::options::InferArgs;
use crate::runners::{Built, build_and_probe};

pub use kiln_report::infer::INFER_FILE;

mod agreement;
mod inputs;
use agreement::agree;
use inputs::{ModelInputs, inputs};

/// One question that takes longer than this is stopped (its record says so).
const LIMIT: Duration = Duration::from_secs(30 * 60);

/// The rows of `built`: each backend's default device (else its first available one) in
/// each of `precisions`.
fn rows<'a>(built: &'a [Built], precisions: &[Precision]) -> Vec<AskedRow<'a>> {
    let mut out = Vec::new();
    for (backend, runner, probe) in built {
        let device = crate::answer::one_device(probe);
        for &precision in precisions {
            let (device, skip) = match &device {
                Ok(d) => (
                    d.spec.clone(),
                    (!d.precisions.iter().any(|s| s == precision.name())).then(|| {
                        format!("{} {} does not support {precision}", backend.name, d.spec)
                    }),
                ),
                Err(why) => ("default".into(), Some(why.clone())),
            };
            out.push(AskedRow {
                backend,
                runner,
                device,
                precision,
                skip,
                version: probe.backend_version.clone(),
                burn: None,
            });
        }
    }
    out
}

pub fn infer(args: InferArgs) -> Result<bool> {
    if let Some(dir) = &args.report {
        return report(dir);
    }
    let datasets = check_args(&args)?;
    let mut wanted = crate::runners::wanted_backends(args.ask.backends.backends.as_deref())?;
    if args.weights.is_none() && !wanted.iter().any(|b| b.name == args.train_on) {
        wanted.insert(0, crate::backends::find(&args.train_on)?);
    }
    let wanted = crate::runners::buildable(wanted);
    let out = crate::answer::out_dir(args.ask.out.get(), "infer", INFER_FILE, "")?;
    if !args.burns.burn.is_empty() {
        return infer_ab(&args, &datasets, &wanted, &out);
    }
    make_dirs(&out)?;
    let built = build_and_probe(&wanted, false)?;
    let rows = rows(&built, &args.precisions.or_f32());
    let mut all = Vec::new();
    let mut models = Vec::new();
    for &model in &datasets {
        let inputs = inputs(&args, &built, &asking(&out), model)?;
        for repeat in 1..=args.repeats()? {
            all.extend(ask_rows(
                &args,
                &rows,
                &asking(&out),
                &inputs,
                (repeat, None),
            )?);
        }
        models.push(inputs);
    }
    let markdown = markdown(&args, &all, &models);
    write_tables(&out, (&markdown, &method_text(&args)), &all)?;
    println!("{markdown}");
    eprintln!("kiln: inference records and tables in {}", out.display());
    Ok(all_answered(&all))
}

/// Whether every row answered (its status a result) and none disagrees with the reference
/// (`kiln_report::infer::disagrees`): else `infer` exits 1.
fn all_answered(records: &[InferRecord]) -> bool {
    records.iter().all(|r| {
        r.status.is_result()
            && r.agreement
                .as_ref()
                .is_none_or(|a| !kiln_report::infer::disagrees(a))
    })
}

/// The file of an inference A/B's comparison (`infer --burn A --burn B`).
pub const AB_FILE: &str = "infer-ab.md";

/// `infer --burn A --burn B ...`: each Burn's runners built on their own, the weights made once
/// (on the first Burn's --train-on runner, or --weights), `--repeats` passes per Burn
/// alternating in a balanced order (A B, B A, ...) into `out/<letter>-<burn>/` with their own tables, and
/// `infer-ab.md` comparing every other Burn's rows with the first's, pass by pass.
fn infer_ab(
    args: &InferArgs,
    datasets: &[(ModelKind, DatasetName)],
    wanted: &[&'static crate::backends::Backend],
    out: &Path,
) -> Result<bool> {
    let sides = crate::burns::build_sides(&args.burns.burn, wanted, false, out)?;
    let (text, all_ok) = ab_passes(args, datasets, &sides, out)?;
    println!("{text}");
    if sides.len() > 1 {
        eprintln!("kiln: inference A/B in {}", out.join(AB_FILE).display());
    }
    Ok(all_ok)
}

/// The passes of an inference A/B over built `sides` (each Burn, its runners, its directory)
/// and `infer-ab.md` in `out`; returns its text and whether every row gave a result.
fn ab_passes(
    args: &InferArgs,
    datasets: &[(ModelKind, DatasetName)],
    sides: &[(BurnBuild, Vec<Built>, PathBuf)],
    out: &Path,
) -> Result<(String, bool)> {
    let Some((_, first_built, _)) = sides.first() else {
        bail!("no --burn could be built (the log says why)");
    };
    make_dirs(out)?;
    let mut side_rows = Vec::new();
    for (_, built, dir) in sides {
        make_dirs(dir)?;
        side_rows.push(rows(built, &args.precisions.or_f32()));
    }
    let mut records: Vec<Vec<InferRecord>> = vec![Vec::new(); sides.len()];
    let mut models = Vec::new();
    for &model in datasets {
        let inputs = inputs(args, first_built, &asking(out), model)?;
        for repeat in 1..=args.repeats()? {
            // A balanced order, as bench-all's A/B: A B, then B A.
            for i in crate::burns::pass_order(repeat, sides.len()) {
                let ((burn, _, dir), rows) = (&sides[i], &side_rows[i]);
                eprintln!(
                    "kiln: inference pass {repeat} of {}, Burn {}",
                    args.repeats()?,
                    burn.label()
                );
                let pass = ask_rows(args, rows, &asking(dir), &inputs, (repeat, Some(burn)))?;
                records[i].extend(pass);
            }
        }
        models.push(inputs);
    }
    for ((_, _, dir), side) in sides.iter().zip(&records) {
        let markdown = markdown(args, side, &models);
        write_tables(dir, (&markdown, &method_text(args)), side)?;
    }
    let labelled: Vec<(String, Vec<InferRecord>)> = sides
        .iter()
        .map(|(burn, _, _)| burn.label())
        .zip(records)
        .collect();
    let text = write_ab(out, &labelled)?;
    let all_ok = labelled.iter().all(|(_, r)| all_answered(r));
    Ok((text, all_ok))
}

/// `infer-ab.md` in `out` from each Burn's label and records, the first Burn's being A; its
/// text.
fn write_ab(out: &Path, sides: &[(String, Vec<InferRecord>)]) -> Result<String> {
    let Some((a, first)) = sides.first() else {
        bail!("{}: an inference A/B without sides", out.display());
    };
    if sides.len() < 2 {
        return Ok(crate::burns::nothing_to_compare(a));
    }
    let mut text = String::from("# cargo xtask infer, Burn A against Burn B\n\n");
    for (b, side) in sides.iter().skip(1) {
        let rows = kiln_report::infer::compare(first, side);
        text += &kiln_report::infer::ab_markdown(&rows, a, b);
    }
    let path = out.join(AB_FILE);
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(text)
}

/// `infer --report DIR` on an inference A/B: each side's tables, then `infer-ab.md`, rendered
/// again from the sides' records (each side's Burn from its records).
fn report_ab(dir: &Path, side_dirs: &[PathBuf]) -> Result<bool> {
    let mut sides = Vec::new();
    let mut all_ok = true;
    for side in side_dirs {
        all_ok &= report(side)?;
        let records: Vec<InferRecord> =
            kiln_contract::question::read_records(&side.join(INFER_FILE), "an inference record")
                .map_err(anyhow::Error::msg)?;
        let label = records
            .iter()
            .find_map(|r| r.burn.as_ref().map(|b| b.label()))
            .with_context(|| format!("{}: records that name no Burn", side.display()))?;
        sides.push((label, records));
    }
    println!("{}", write_ab(dir, &sides)?);
    Ok(all_ok)
}

/// A run directory's folders for weights, logits and the runners' logs.
fn make_dirs(dir: &Path) -> Result<()> {
    for sub in ["weights", "logits", "logs"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("cannot create {}", dir.join(sub).display()))?;
    }
    Ok(())
}

fn asking(out: &Path) -> crate::answer::Asking<'_> {
    crate::answer::Asking {
        out,
        limit: LIMIT,
        revision: crate::workspace::revision(),
    }
}

/// infer.md: how the figures were measured, then each model's table and its weights.
fn markdown(args: &InferArgs, records: &[InferRecord], models: &[ModelInputs]) -> String {
    let mut markdown = format!("# cargo xtask infer\n\n{}\n", method_text(args));
    for m in models {
        markdown += &format!(
            "\n{}\nWeights: {}.\n",
            kiln_report::infer::table(records, m.model),
            m.weights.display()
        );
    }
    markdown
}

/// The flags' own rules, checked before anything is built: one model for one weights file, a
/// weights file that reads, and the request's limits (queries, samples, batches); each model
/// with its dataset.
fn check_args(args: &InferArgs) -> Result<Vec<(ModelKind, DatasetName)>> {
    args.repeats()?;
    args.data.check()?;
    if let Some(w) = &args.weights {
        if args.ask.models.or_default().len() != 1 {
            bail!("--weights: one weights file is one model's; name one with --model");
        }
        kiln_contract::verify::Weights::read(w).map_err(|e| anyhow::anyhow!("--weights: {e}"))?;
    }
    let mut datasets = Vec::new();
    for model in args.ask.models.or_default() {
        let dataset =
            kiln_data::default_dataset(model.geometry(), true, args.data.data_dir.as_deref())?.0;
        let row = request_of(args, model, dataset, Path::new(""));
        row.validate().map_err(|e| {
            anyhow::anyhow!("--queries/--samples/--throughput-batch/--clients: {e}")
        })?;
        datasets.push((model, dataset));
    }
    Ok(datasets)
}

/// `--report DIR`: infer.md rendered again from DIR's records (every model they hold).
fn report(dir: &Path) -> Result<bool> {
    let path = dir.join(INFER_FILE);
    if !path.is_file() {
        if let Some(sides) = crate::burns::side_dirs(dir)? {
            return report_ab(dir, &sides);
        }
        bail!(
            "--report {}: no {INFER_FILE} there, nor an inference A/B's sides",
            dir.display()
        );
    }
    let records: Vec<InferRecord> =
        kiln_contract::question::read_records(&path, "an inference record")
            .map_err(anyhow::Error::msg)?;
    let mut markdown = String::from(
        "# cargo xtask infer\n\nRendered again from infer.jsonl (`cargo xtask infer --report`); how each figure \
         was measured: docs/inference.md.\n",
    );
    for model in kiln_report::infer::models(&records) {
        markdown += &format!("\n{}", kiln_report::infer::table(&records, model));
    }
    write_tables(
        dir,
        (
            &markdown,
            "How each figure was measured: docs/inference.md.",
        ),
        &records,
    )?;
    println!("{markdown}");
    Ok(records.iter().all(|r| r.status.is_result()))
}

/// `infer.md`, `infer.html` (with a latency chart per model; `method` says how it was
/// measured), `infer.csv` (one line per record) and `infer-clients.csv` (one per record and
/// client count) in `dir`.
fn write_tables(
    dir: &Path,
    (markdown, method): (&str, &str),
    records: &[InferRecord],
) -> Result<()> {
    for (name, text) in [
        ("infer.md", markdown.to_string()),
        ("infer.html", kiln_report::infer::html(records, method)),
        ("infer.csv", kiln_report::infer::csv(records)),
        (
            "infer-clients.csv",
            kiln_report::infer::clients_csv(records),
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// What every table of the run shares: how its figures were measured.
fn method_text(args: &InferArgs) -> String {
    format!(
        "Every row loaded the same weights and answered queries as an application does: its \
         input uploaded from the host, the forward pass, its logits read back. Latency: {} \
         queries per batch size (or {} s of them, at least {}) after a warm-up that ends when \
         the steady rule holds on the medians of groups of {}; percentiles indexed as MLPerf's \
         loadgen does (the sorted series at n × p). With clients: {} threads at once sharing \
         the model, each sending its next one-sample query when its last is answered, after \
         warm-up rounds of their own, for the throughput's seconds from one start. Throughput: back-to-back batches for {} s, after a warm-up of batches that ends \
         when the steady rule holds on their times. First prediction: from the runner's \
         process start to its first one-sample answer. Memory to serve: the peak resident set \
         beyond the ready runtime (weights loaded). Agreement: top-1 classes on the first {} \
         test samples against the reference row. {} run(s) per row, interleaved; several give \
         the median and the 95% interval for the next run. docs/inference.md says how to read it.",
        args.queries,
        args.series_seconds,
        InferRequest::MIN_QUERIES,
        InferRequest::GROUP,
        clients_text(&args.clients),
        args.throughput_seconds,
        args.samples,
        // Checked with the other flags before any build.
        args.repeats().unwrap_or_default(),
    )
}

/// `1, 2 and 4`, or `none`.
fn clients_text(clients: &[usize]) -> String {
    match clients {
        [] => "none".into(),
        [one] => one.to_string(),
        [rest @ .., last] => format!(
            "{} and {last}",
            rest.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Every row's record for one model (its `inputs`) in pass `repeat` (the Burn its runners were
/// built against, in an A/B), each given its agreement with the reference row and its
/// runner's size; appended to infer.jsonl.
fn ask_rows(
    args: &InferArgs,
    rows: &[AskedRow],
    asking: &crate::answer::Asking,
    inputs: &ModelInputs,
    (repeat, burn): (usize, Option<&BurnBuild>),
) -> Result<Vec<InferRecord>> {
    let (model, dataset) = (inputs.model, inputs.dataset);
    let mut records: Vec<InferRecord> = rows
        .iter()
        .map(|row| {
            let mut q = request(args, model, dataset, row, &inputs.weights);
            q.data_file = inputs
                .data_file
                .clone()
                .filter(|_| row.runner.needs_data_file);
            q.logits_out = asking
                .out
                .join("logits")
                .join(format!("{}-r{repeat}.safetensors", q.stem()));
            q.spawned_at_unix_us = Some(unix_us());
            let mut r = asking.row(row.runner, &q, row.skip.clone(), &row.version);
            r.binary_bytes = binary_bytes(row);
            r.repeat = Some(repeat);
            r.burn = burn.cloned();
            r
        })
        .collect();
    agree(
        &mut records,
        &[args.reference.or("pytorch"), &args.train_on],
        &inputs.labels,
    );
    if kiln_contract::models::has_batch_norm(&model.layers()) {
        for r in &mut records {
            r.notes.push(
                "batch norm's running statistics are not in the weights file (it holds the \
                 trainable parameters): every row serves with fresh ones, alike, so \
                 agreement holds and accuracy does not mean the trained model's"
                    .into(),
            );
        }
    }
    for r in &records {
        append_line(&asking.out.join(INFER_FILE), r)?;
    }
    Ok(records)
}

/// The request of one row; its logits path and start time set by the caller.
fn request(
    args: &InferArgs,
    model: ModelKind,
    dataset: DatasetName,
    row: &AskedRow,
    weights: &Path,
) -> InferRequest {
    InferRequest {
        backend: row.backend.name.clone(),
        device: row.device.clone(),
        precision: row.precision,
        ..request_of(args, model, dataset, weights)
    }
}

/// The request the flags make for `model`, its row (backend, device, precision) to be set.
fn request_of(
    args: &InferArgs,
    model: ModelKind,
    dataset: DatasetName,
    weights: &Path,
) -> InferRequest {
    InferRequest {
        kiln_infer: INFER_VERSION,
        model,
        backend: String::new(),
        device: "default".into(),
        precision: Precision::F32,
        weights: weights.to_path_buf(),
        dataset,
        data_dir: args.data.data_dir.clone(),
        data_file: None,
        samples: args.samples,
        logits_out: PathBuf::new(),
        latency_batches: vec![1, 8],
        queries: args.queries,
        series_seconds: args.series_seconds,
        clients: args.clients.clone(),
        throughput_batch: args.throughput_batch,
        throughput_seconds: args.throughput_seconds,
        warmup_cap_seconds: args.warmup.infer_cap_seconds(),
        timing: kiln_contract::TimingRules::KILN,
        spawned_at_unix_us: None,
        cold_caches: args.warmup.cold_caches,
        seed: args.data.seed(),
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The runner binary's size, for a runner that is one (not the reference's interpreter).
fn binary_bytes(row: &AskedRow) -> Option<u64> {
    (row.runner.args.is_empty())
        .then(|| std::fs::metadata(&row.runner.program).ok().map(|m| m.len()))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::inputs::export;
    use super::*;
    use crate::runners::Runner;
    use crate::testing::{reference_script, test_python};
    use clap::Parser;
    use kiln_contract::Status;
    use kiln_contract::infer::write_logits;
    use kiln_contract::verify::{VERIFY_VERSION, VerifyRequest};

    fn args(extra: &[&str]) -> InferArgs {
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: InferArgs,
        }
        let mut argv = vec!["infer", "--model", "mlp"];
        argv.extend_from_slice(extra);
        Wrap::parse_from(argv).args
    }

    fn record(backend: &str, dir: &Path, logits: &[f32]) -> InferRecord {
        let a = args(&[]);
        let row_request = InferRequest {
            backend: backend.into(),
            device: "cpu".into(),
            ..request_for(&a, backend)
        };
        let mut r = InferRecord::start(&row_request, "0");
        r.status = Status::Ok;
        let path = dir.join(format!("{backend}.safetensors"));
        write_logits(&path, logits, 2).unwrap();
        r.logits = Some(path);
        r
    }

    fn request_for(a: &InferArgs, backend: &str) -> InferRequest {
        let mut q = InferRequest {
            kiln_infer: INFER_VERSION,
            model: ModelKind::Mlp,
            backend: backend.into(),
            device: "cpu".into(),
            precision: Precision::F32,
            weights: PathBuf::from("w.safetensors"),
            dataset: DatasetName::Synthetic,
            data_dir: None,
            data_file: None,
            samples: 8,
            logits_out: PathBuf::new(),
            latency_batches: vec![1, 8],
            queries: InferRequest::MIN_QUERIES,
            series_seconds: 0.2,
            clients: vec![1, 2],
            throughput_batch: 8,
            throughput_seconds: 0.1,
            warmup_cap_seconds: 5.0,
            timing: kiln_contract::TimingRules::SETTLE_AT_ONCE,
            spawned_at_unix_us: None,
            cold_caches: a.warmup.cold_caches,
            seed: a.data.seed(),
        };
        q.validate().unwrap();
        q.logits_out = PathBuf::from("logits.safetensors");
        q
    }

    /// Bad flags are refused before anything is built, naming the flag and the value: a
    /// weights file that does not read, too few queries, one weights file for two models.
    #[test]
    fn bad_flags_are_refused_before_any_build() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing.safetensors");
        let e = check_args(&args(&["--weights", missing.to_str().unwrap()])).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("--weights") && e.contains("missing.safetensors"),
            "{e}"
        );
        let e = format!("{:#}", check_args(&args(&["--queries", "5"])).unwrap_err());
        assert!(e.contains("--queries") && e.contains("got"), "{e}");
        let two = args(&["--model", "mlp,mnist-cnn", "--weights", "w.safetensors"]);
        assert!(format!("{:#}", check_args(&two).unwrap_err()).contains("one model"));
        assert_eq!(check_args(&args(&[])).unwrap().len(), 1);
    }

    /// Agreement is against PyTorch's row when it has logits, else the training backend's;
    /// the reference's own row gets its accuracy.
    #[test]
    fn agreement_is_against_pytorch_else_the_training_backend() {
        let tmp = tempfile::tempdir().unwrap();
        let mut records = vec![
            record("flex", tmp.path(), &[1.0, 0.0, 0.0, 1.0]),
            record("tch", tmp.path(), &[1.0, 0.0, 1.0, 0.0]),
            record("pytorch", tmp.path(), &[1.0, 0.0, 0.0, 1.0]),
        ];
        agree(&mut records, &["pytorch", "flex"], &[0, 1]);
        let top1: Vec<f64> = records
            .iter()
            .map(|r| r.agreement.as_ref().unwrap().top1)
            .collect();
        assert_eq!(top1, vec![1.0, 0.5, 1.0]);
        assert_eq!(
            records[1].agreement.as_ref().unwrap().reference,
            "pytorch cpu f32"
        );
        assert_eq!(records[2].agreement.as_ref().unwrap().accuracy, Some(1.0));

        records[2].status = Status::Failed;
        for r in &mut records {
            r.agreement = None;
        }
        agree(&mut records, &["pytorch", "flex"], &[0, 1]);
        assert_eq!(
            records[1].agreement.as_ref().unwrap().reference,
            "flex cpu f32"
        );
        assert!(records[2].agreement.is_none());
    }

    /// A row whose logits were perturbed (one sample's class moved) disagrees, and so does a
    /// NaN: either fails the command's exit status.
    #[test]
    fn a_planted_disagreement_fails_the_row_and_the_exit_status() {
        let tmp = tempfile::tempdir().unwrap();
        let logits: Vec<f32> = (0..1000)
            .flat_map(|i| if i % 2 == 0 { [1.0, 0.0] } else { [0.0, 1.0] })
            .collect();
        let mut perturbed = logits.clone();
        perturbed.swap(0, 1);
        perturbed.swap(2, 3);
        let mut records = vec![
            record("flex", tmp.path(), &logits),
            record("pytorch", tmp.path(), &logits),
        ];
        agree(&mut records, &["pytorch"], &[]);
        assert!(all_answered(&records));
        // Two of 1,000 samples moved: over the one in a thousand allowed.
        let moved = record("tch", tmp.path(), &perturbed);
        records.push(moved);
        agree(&mut records, &["pytorch"], &[]);
        assert!(kiln_report::infer::disagrees(
            records[2].agreement.as_ref().unwrap()
        ));
        assert!(!all_answered(&records));
        let mut nan = logits.clone();
        nan[7] = f32::NAN;
        records[2] = record("tch", tmp.path(), &nan);
        agree(&mut records, &["pytorch"], &[]);
        assert!(!all_answered(&records), "{:?}", records[2].agreement);
    }

    /// The reference serves from weights in Burn's layout (written by its own verify run): a
    /// complete record whose logits read back; another model's weights fail naming the tensor.
    #[test]
    fn the_reference_runner_serves_from_burns_weights() {
        let Some(py) = test_python() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let runner = Runner {
            program: py,
            args: vec![reference_script().into_os_string()],
            env: Vec::new(),
            needs_data_file: true,
        };
        let a = args(&[]);
        let data = export(&a, ModelKind::Mlp, DatasetName::Synthetic, tmp.path()).unwrap();
        let asking = crate::answer::Asking {
            out: tmp.path(),
            limit: LIMIT,
            revision: (None, None),
        };
        let init = |model: ModelKind| {
            let path = tmp.path().join(format!("{model}.safetensors"));
            let q = VerifyRequest {
                kiln_verify: VERIFY_VERSION,
                model,
                backend: "pytorch".into(),
                device: "cpu".into(),
                precision: Precision::F32,
                steps: 1,
                batch: 4,
                seed: 1,
                dataset: DatasetName::Synthetic,
                data_dir: None,
                data_file: Some(export(&a, model, DatasetName::Synthetic, tmp.path()).unwrap()),
                weights_in: None,
                init_out: Some(path.clone()),
                final_out: tmp.path().join(format!("{model}-final.safetensors")),
                fault: None,
                learning_rate: kiln_contract::LEARNING_RATE,
            };
            let r = asking.row(&runner, &q, None, "");
            assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
            path
        };
        let mut q = request_for(&a, "pytorch");
        q.weights = init(ModelKind::Mlp);
        q.data_file = Some(data);
        q.logits_out = tmp.path().join("logits.safetensors");
        let r = asking.row(&runner, &q, None, "");
        assert_eq!(r.status, Status::Ok, "{:?}", r.reason);
        assert!(r.latency_at(1).is_some() && r.latency_at(8).is_some());
        assert!(r.throughput.is_some() && r.first_prediction.is_some() && r.memory.is_some());
        // The clients at once, as the Rust runners measure them: every client's queries.
        let counts: Vec<(usize, bool)> = r
            .concurrent
            .iter()
            .map(|c| {
                (
                    c.clients,
                    c.latency.queries >= c.clients * InferRequest::MIN_QUERIES,
                )
            })
            .collect();
        assert_eq!(counts, [(1, true), (2, true)], "{:?}", r.concurrent);
        let (logits, classes) = kiln_contract::infer::read_logits(&q.logits_out).unwrap();
        assert_eq!((logits.len(), classes), (8 * 10, 10));

        q.weights = init(ModelKind::MnistCnn);
        let r = asking.row(&runner, &q, None, "");
        assert_eq!(r.status, Status::Failed);
        let why = r.reason.unwrap_or_default();
        assert!(
            why.contains("conv1.weight") || why.contains("tensors"),
            "{why}"
        );
    }

    /// An inference A/B runs every row from one set of weights on each Burn, alternating pass
    /// by pass into each Burn's folder, and compares B's rows with A's in infer-ab.md.
    #[test]
    fn an_inference_ab_alternates_the_burns_from_the_same_weights() {
        let Some(py) = test_python() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let runner = || Runner {
            program: py.clone(),
            args: vec![reference_script().into_os_string()],
            env: Vec::new(),
            needs_data_file: true,
        };
        let a = args(&[
            "--train-on",
            "pytorch",
            "--train-steps",
            "1",
            "--queries",
            "20",
            "--series-seconds",
            "0.1",
            "--throughput-seconds",
            "0.05",
            "--samples",
            "8",
            "--throughput-batch",
            "8",
            "--repeats",
            "2",
        ]);
        let burn = crate::testing::burn_build;
        let sides = vec![
            (
                burn("0.22.1"),
                vec![crate::testing::on_cpu("pytorch", runner())],
                tmp.path().join("a"),
            ),
            (
                burn("path:/src/burn"),
                vec![crate::testing::on_cpu("pytorch", runner())],
                tmp.path().join("b"),
            ),
        ];
        let datasets = check_args(&a).unwrap();
        let (text, ok) = ab_passes(&a, &datasets, &sides, tmp.path()).unwrap();
        assert!(ok, "{text}");
        let read = |side: &str| -> Vec<InferRecord> {
            let path = tmp.path().join(side).join(INFER_FILE);
            kiln_contract::question::read_records(&path, "an inference record").unwrap()
        };
        let (ra, rb) = (read("a"), read("b"));
        assert_eq!(
            ra.iter().map(|r| r.repeat).collect::<Vec<_>>(),
            vec![Some(1), Some(2)]
        );
        assert!(
            rb.iter()
                .all(|r| r.burn.as_ref().unwrap().spec == "path:/src/burn")
        );
        // One weights file for both Burns.
        let weights = std::fs::read_dir(tmp.path().join("weights"))
            .unwrap()
            .count();
        assert_eq!(weights, 2, "the initial and the trained weights, once");
        assert!(text.contains("A = 0.22.1, B = path:/src/burn"), "{text}");
        assert!(
            text.contains("| mlp · pytorch cpu f32 | latency p50, batch 1 |"),
            "{text}"
        );
        assert!(tmp.path().join("b").join("infer.md").is_file());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(AB_FILE)).unwrap(),
            text
        );
    }

    /// `infer --report` on a committed inference A/B (an A/A: two builds of Burn 0.22.1's own
    /// sources) renders its infer-ab.md again byte for byte from the sides' records.
    #[test]
    fn an_inference_ab_renders_again_from_its_sides() {
        let committed = crate::workspace::workspace_root()
            .join("docs/results/2026-12-05-epyc-f25m17-infer-ab-aa");
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("aa");
        let sides = crate::burns::side_dirs(&committed).unwrap().unwrap();
        for side in &sides {
            let to = copy.join(side.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            std::fs::copy(side.join(INFER_FILE), to.join(INFER_FILE)).unwrap();
        }
        let burns = crate::burns::BURNS_FILE;
        std::fs::copy(committed.join(burns), copy.join(burns)).unwrap();
        assert!(report(&copy).unwrap());
        let again = std::fs::read_to_string(copy.join(AB_FILE)).unwrap();
        let text = std::fs::read_to_string(committed.join(AB_FILE)).unwrap();
        assert_eq!(again, text);
        assert!(text.contains("no difference that counts"), "{text}");
        assert!(
            copy.join(sides[1].file_name().unwrap())
                .join("infer.md")
                .is_file()
        );
        let err = report(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("nor an inference A/B"), "{err}");
    }

    /// `--burn` given once: no A/B to write, and the words say why (not that a Burn failed to
    /// build), for infer and explain alike.
    #[test]
    fn one_burn_writes_no_ab() {
        let tmp = tempfile::tempdir().unwrap();
        let text = write_ab(tmp.path(), &[("0.23.0-pre.1".into(), Vec::new())]).unwrap();
        assert!(
            text.contains("One Burn in this run (0.23.0-pre.1): nothing to compare"),
            "{text}"
        );
        assert!(!text.contains("could be built"), "{text}");
        assert!(!tmp.path().join(AB_FILE).exists());
        let text = crate::explain::write_ab(tmp.path(), &[("0.22.1".into(), Vec::new())]).unwrap();
        assert!(text.contains("One Burn in this run (0.22.1)"), "{text}");
        assert!(!tmp.path().join(crate::explain::AB_FILE).exists());
    }
}
