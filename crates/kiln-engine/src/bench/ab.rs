//! `bench-all --burn A --burn B`: the same cells against two (or more) Burns. Each Burn's
//! runners are built on their own (`crate::burns`), the cells are planned once, and the runs
//! alternate as separate processes, one pass of the matrix per Burn in turn (A's pass 1, B's
//! pass 1, A's pass 2, ...), each Burn into its own run directory. `ab.md` compares every
//! other Burn with the first (`kiln_report::ab`), and `rewrite` writes it again from a run
//! directory's sides (`cargo xtask report DIR`).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use kiln_contract::stats::{Look, Sequential};
use kiln_contract::{ModelKind, Precision, TrainingLoop};
use kiln_report::read::RESULTS_FILE;

use super::config::{PlannedCell, RunConfig, config};
use super::execute::{execute_rest, probes};
use super::plan;
use super::rundir::{check_out, prepare_out, write_run_file};
use crate::burns::{Burn, BurnSpec};
use crate::options::CommonArgs;
use crate::runners::{Built, wanted_backends};

/// The A/B file of a run directory.
pub const AB_FILE: &str = "ab.md";

/// `cargo xtask bench-all --burn A --burn B ...`.
pub fn bench_ab(
    common: &CommonArgs,
    specs: &[BurnSpec],
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
) -> Result<bool> {
    // An A/B run adds pairs until it knows (`--repeats auto`) unless --repeats gives a number;
    // one --burn alone is a run against that Burn, with the usual repeats.
    let mut common = common.clone();
    match (specs.len(), common.repeats) {
        (0 | 1, Some(crate::options::Repeats::Auto)) => bail!(
            "--repeats auto adds pairs until two Burns are told apart: give --burn twice \
             (--burn 0.22.1 --burn path:../burn), or --repeats N"
        ),
        (0 | 1, _) => {}
        _ => {
            common.repeats.get_or_insert(crate::options::Repeats::Auto);
        }
    }
    let common = &common;
    let (_, cfg) = config(common, false)?;
    let learner = cfg.loops.contains(&TrainingLoop::Learner);
    let wanted = wanted_backends(backend_names.as_deref())?;
    // The output directory is checked before the (long) builds.
    let out = prepare_out(Some(&check_out(common.out.as_deref())?))?;
    let built_sides = crate::burns::build_all(specs, &wanted, learner)?;
    let sides: Vec<(&Burn, &[Built])> = built_sides
        .iter()
        .map(|s| (&s.burn, &s.built[..]))
        .collect();
    let first_built = sides[0].1;
    let matrix = super::execute::matrix(
        common,
        &cfg,
        models,
        precisions,
        &wanted,
        backend_names.is_some(),
        false,
    )?;
    // The cells every Burn can run (a Burn whose runner was not built has no row).
    let cells: Vec<_> = plan::plan(&matrix, &probes(first_built))
        .cells
        .into_iter()
        .filter(|c| {
            sides
                .iter()
                .all(|(_, built)| built.iter().any(|(b, _, _)| b.name == c.id.backend))
        })
        .collect();
    if cells.is_empty() {
        bail!("no cell to run: no backend was built for every --burn");
    }
    let mut dirs: Vec<(PathBuf, RunConfig)> = Vec::new();
    for (i, (burn, _)) in sides.iter().enumerate() {
        let dir = prepare_out(Some(&crate::burns::side_dir(&out, i, burn)))?;
        let mut side_cfg = cfg.clone();
        side_cfg.burn = Some(burn.build.clone());
        write_run_file(&dir, &side_cfg, &cells)?;
        dirs.push((dir, side_cfg));
    }
    crate::burns::write_burns(
        &out,
        &built_sides
            .iter()
            .zip(&dirs)
            .map(|(s, (d, _))| (s, d.as_path()))
            .collect::<Vec<_>>(),
    )?;
    let runs: Vec<(&[Built], &Path, &RunConfig)> = sides
        .iter()
        .zip(&dirs)
        .map(|((_, built), (dir, side_cfg))| (&built[..], dir.as_path(), side_cfg))
        .collect();
    let side_dirs: Vec<PathBuf> = dirs.iter().map(|(d, _)| d.clone()).collect();
    let all_ok = run_passes(&cells, &runs, cfg.repeats.max(1), cfg.sequential.as_ref())?;
    if specs.len() < 2 {
        // A run against one Burn: its side directory holds the usual reports.
        return Ok(all_ok);
    }
    let text = write_ab(&out, &side_dirs, cfg.sequential.as_ref())?;
    println!("\n{text}");
    println!("A/B: {}", out.join(AB_FILE).display());
    Ok(all_ok)
}

/// Run `cells` for each side in turn, one pass of the matrix at a time (A's pass 1, B's pass
/// 1, A's pass 2, ...), each into its own directory; stops at an interrupt, and under a
/// `sequential` rule (`--repeats auto`) once every cell is decided.
pub(super) fn run_passes(
    cells: &[PlannedCell],
    sides: &[(&[Built], &Path, &RunConfig)],
    repeats: usize,
    sequential: Option<&Sequential>,
) -> Result<bool> {
    let mut all_ok = true;
    for k in 1..=repeats {
        if let Some(rule) = sequential
            && k > rule.min_pairs
            && decided(sides, rule, k - 1)?
        {
            break;
        }
        for (built, dir, side_cfg) in sides {
            // This pass only: every other repeat counts as done.
            let others: Vec<_> = cells
                .iter()
                .flat_map(|c| (1..=repeats).filter(|&j| j != k).map(|j| (c.id.clone(), j)))
                .collect();
            eprintln!(
                "kiln: pass {k} of {repeats}, Burn {}",
                side_cfg
                    .burn
                    .as_ref()
                    .map_or("(this workspace's)".into(), |b| b.label())
            );
            // The GEMM peak (the denominator of "% of peak") is measured in each side's first
            // pass only: it is no measure an A/B compares, and it cost each pass about 7 s, 8%
            // of a quick CNN cell and most of an MLP's (docs/burn-ab.md).
            let mut cfg = (*side_cfg).clone();
            cfg.calibrate &= k == 1;
            if !execute_rest(cells.to_vec(), built, cfg, dir, &others, false)? {
                all_ok = false;
                if super::interrupt::interrupted() {
                    return Ok(false);
                }
            }
        }
    }
    Ok(all_ok)
}

/// Whether, after `pairs` passes, every cell's epoch time is decided by `rule` between the
/// first side and each other (printing where each stands).
fn decided(
    sides: &[(&[Built], &Path, &RunConfig)],
    rule: &Sequential,
    pairs: usize,
) -> Result<bool> {
    let Some((_, first, _)) = sides.first() else {
        return Ok(true);
    };
    let a = side_records(first)?;
    let mut all = true;
    for (_, dir, _) in &sides[1..] {
        for row in kiln_report::ab::compare(&a, &side_records(dir)?, Some(rule)) {
            let Some(epoch) = row.measures.first() else {
                continue;
            };
            eprintln!(
                "kiln: after {pairs} pairs, {}: B vs A {}: {}",
                row.cell,
                kiln_report::ab::change_text(epoch),
                epoch.verdict
            );
            all &= matches!(epoch.look, Some(Look::Changed(_) | Look::Within));
        }
    }
    Ok(all)
}

/// The records of a side's run directory.
fn side_records(dir: &Path) -> Result<Vec<kiln_contract::Record>> {
    Ok(kiln_report::read::load(&[dir.join(RESULTS_FILE)])?.records)
}

/// The stopping rule a side's run followed (`--repeats auto`), from its run file.
pub fn sequential_of(side: &Path) -> Option<Sequential> {
    let text = std::fs::read_to_string(side.join(super::config::RUN_FILE)).ok()?;
    serde_json::from_str::<super::config::RunFile>(&text)
        .ok()?
        .config
        .sequential
}

/// Compare every side with the first and write `ab.md` in `out` (the epoch time by the
/// `sequential` rule where the run was `--repeats auto`); returns its text.
pub fn write_ab(out: &Path, sides: &[PathBuf], sequential: Option<&Sequential>) -> Result<String> {
    let label = |records: &[kiln_contract::Record], dir: &Path| {
        records
            .iter()
            .find_map(|r| r.burn.as_ref().map(|b| b.label()))
            .unwrap_or_else(|| dir.display().to_string())
    };
    let Some(first) = sides.first() else {
        bail!("no side to compare");
    };
    let a = side_records(first)?;
    let mut text = String::new();
    for other in &sides[1..] {
        let b = side_records(other)?;
        let rows = kiln_report::ab::compare(&a, &b, sequential);
        text.push_str(&kiln_report::ab::markdown(
            &rows,
            &label(&a, first),
            &label(&b, other),
        ));
    }
    if sides.len() < 2 {
        text = format!(
            "## Burn A/B\n\nOnly Burn {} could be built: nothing to compare (the run's log says \
             why each other --burn could not be used).\n",
            label(&a, first)
        );
    }
    std::fs::write(out.join(AB_FILE), &text)?;
    Ok(text)
}

/// The comparison of an A/B run directory's sides (explain's op by op when they hold explain
/// records), written again.
pub fn rewrite(dir: &Path, sides: &[PathBuf]) -> Result<String> {
    if !sides
        .first()
        .is_some_and(|s| s.join(crate::explain::EXPLAIN_FILE).is_file())
    {
        let sequential = sides.first().and_then(|s| sequential_of(s));
        return write_ab(dir, sides, sequential.as_ref());
    }
    let mut labelled = Vec::new();
    for side in sides {
        let records = crate::explain::load(std::slice::from_ref(side))?;
        let label = records
            .iter()
            .find_map(|r| r.burn.as_ref().map(|b| b.label()))
            .unwrap_or_else(|| side.display().to_string());
        labelled.push((label, records));
    }
    crate::explain::write_ab(dir, &labelled)
}
