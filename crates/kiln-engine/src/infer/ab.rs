//! `infer --burn A --burn B`: the same rows from one set of weights on each Burn, alternating
//! pass by pass, and `infer-ab.md` comparing every other Burn's rows with the first's
//! (kiln_report::infer::compare, by kiln_report::ab's paired rule).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln_contract::infer::InferRecord;
use kiln_contract::{BurnBuild, DatasetName, ModelKind};

use super::{
    InferArgs, ask_rows, asking, inputs, make_dirs, markdown, method_text, rows, write_tables,
};
use crate::runners::Built;

/// The file of an inference A/B's comparison (`infer --burn A --burn B`).
pub const AB_FILE: &str = "infer-ab.md";

/// `infer --burn A --burn B ...`: each Burn's runners built on their own, the weights made once
/// (on the first Burn's --train-on runner, or --weights), `--repeats` passes per Burn
/// alternating (A, B, A, B, ...) into `out/<letter>-<burn>/` with their own tables, and
/// `infer-ab.md` comparing every other Burn's rows with the first's, pass by pass.
pub(super) fn infer_ab(
    args: &InferArgs,
    datasets: &[(ModelKind, DatasetName)],
    wanted: &[&'static crate::backends::Backend],
    out: &Path,
) -> Result<bool> {
    let built = crate::burns::build_all(&args.burn, wanted, false)?;
    let dirs: Vec<PathBuf> = built
        .iter()
        .enumerate()
        .map(|(i, s)| crate::burns::side_dir(out, i, &s.burn))
        .collect();
    let listed: Vec<_> = built
        .iter()
        .zip(&dirs)
        .map(|(s, d)| (s, d.as_path()))
        .collect();
    crate::burns::write_burns(out, &listed)?;
    let sides: Vec<(BurnBuild, Vec<Built>, PathBuf)> = built
        .into_iter()
        .zip(dirs)
        .map(|(s, dir)| (s.burn.build, s.built, dir))
        .collect();
    let (text, all_ok) = ab_passes(args, datasets, &sides, out)?;
    println!("{text}");
    eprintln!("kiln: inference A/B in {}", out.join(AB_FILE).display());
    Ok(all_ok)
}

/// The passes of an inference A/B over built `sides` (each Burn, its runners, its directory)
/// and `infer-ab.md` in `out`; returns its text and whether every row gave a result.
pub(super) fn ab_passes(
    args: &InferArgs,
    datasets: &[(ModelKind, DatasetName)],
    sides: &[(BurnBuild, Vec<Built>, PathBuf)],
    out: &Path,
) -> Result<(String, bool)> {
    let Some((first, first_built, _)) = sides.first() else {
        bail!("no --burn could be built (the log says why)");
    };
    make_dirs(out)?;
    let mut records: Vec<Vec<InferRecord>> = vec![Vec::new(); sides.len()];
    let mut weights = Vec::new();
    for &(model, dataset) in datasets {
        let (data_file, w) = inputs(args, first_built, &asking(out), (model, dataset))?;
        for repeat in 1..=args.repeats() {
            for (i, (burn, built, dir)) in sides.iter().enumerate() {
                eprintln!(
                    "kiln: inference pass {repeat} of {}, Burn {}",
                    args.repeats(),
                    burn.label()
                );
                make_dirs(dir)?;
                let rows = rows(built, &args.precisions);
                let at = (model, dataset, data_file.clone());
                let pass = ask_rows(args, &rows, &asking(dir), at, &w, (repeat, Some(burn)))?;
                records[i].extend(pass);
            }
        }
        weights.push((model, w));
    }
    for ((_, _, dir), side) in sides.iter().zip(&records) {
        write_tables(
            dir,
            (&markdown(args, side, &weights), &method_text(args)),
            side,
        )?;
    }
    let a = first.label();
    let mut text = String::from("# cargo xtask infer, Burn A against Burn B\n\n");
    for ((burn, _, _), side) in sides.iter().zip(&records).skip(1) {
        let rows = kiln_report::infer::compare(&records[0], side);
        text += &kiln_report::infer::ab_markdown(&rows, &a, &burn.label());
    }
    if sides.len() < 2 {
        text += &format!(
            "Only Burn {a} could be built: nothing to compare (the log says why each other \
             --burn could not be used).\n"
        );
    }
    let path = out.join(AB_FILE);
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok((text, records.iter().flatten().all(|r| r.status.is_result())))
}
