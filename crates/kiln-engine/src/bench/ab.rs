//! `bench-all --burn A --burn B`: the same cells against two (or more) Burns. Each Burn's
//! runners are built on their own (`crate::burns`), the cells are planned once, and the runs
//! alternate as separate processes, one pass of the matrix per Burn in a balanced order (A B,
//! B A, A B, ...: [`pass_order`]), each Burn into its own run directory. `ab.md` compares every
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
use crate::burns::{Burn, BurnSpec, pass_order};
use crate::options::CommonArgs;
use crate::runners::Built;

/// The A/B file of a run directory.
pub const AB_FILE: &str = "ab.md";

/// `cargo xtask bench-all --burn A --burn B ...`.
pub fn bench_ab(
    common: &CommonArgs,
    specs: &[BurnSpec],
    backend_names: Option<Vec<String>>,
    models: Option<Vec<ModelKind>>,
    precisions: Option<Vec<Precision>>,
    remote: bool,
) -> Result<bool> {
    // An A/B run adds pairs until it knows (`--repeats auto`) unless --repeats gives a number;
    // one --burn alone is a run against that Burn, with the usual repeats.
    let mut common = common.clone();
    match (specs.len(), common.repeats.repeats) {
        (0 | 1, Some(crate::options::Repeats::Auto)) => bail!(
            "--repeats auto adds pairs until two Burns are told apart: give --burn twice \
             (--burn 0.22.1 --burn path:../burn), or --repeats N"
        ),
        (0 | 1, _) => {}
        _ => {
            common
                .repeats
                .repeats
                .get_or_insert(crate::options::Repeats::Auto);
        }
    }
    let common = &common;
    let (_, cfg) = config(common, false)?;
    let learner = cfg.loops.contains(&TrainingLoop::Learner);
    let wanted = crate::runners::wanted_with_remote(backend_names.as_deref(), remote)?;
    // The output directory is checked before the (long) builds.
    let out = prepare_out(Some(&check_out(common.out.get())?))?;
    let built_sides = crate::burns::build_to_compare(specs, &wanted, learner)?;
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
        write_absent(&built_sides[i], &dir, &matrix)?;
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

/// A side's rows for the backends its Burn lacks (`Side::absent`): one skipped record per
/// model, precision and batch, on the backend's default device, saying so. Written without
/// marking the run untimed: nothing was planned for them, and the A/B stands without them.
fn write_absent(side: &crate::burns::Side, dir: &Path, matrix: &plan::Matrix) -> Result<()> {
    let path = dir.join(RESULTS_FILE);
    for (backend, why) in &side.absent {
        for (model, _) in &matrix.models {
            for &precision in &matrix.precisions {
                for &batch in &matrix.batch_sizes {
                    let id = kiln_contract::CellId::new(
                        *model,
                        &backend.name,
                        "default",
                        precision,
                        batch,
                    );
                    let mut record =
                        kiln_contract::Record::not_run(&id, kiln_contract::Status::Skipped, why);
                    record.burn = Some(side.burn.build.clone());
                    super::rundir::append_line(&path, &super::rundir::on_this_host(record))?;
                }
            }
        }
    }
    Ok(())
}

/// Run `cells` for each side, one pass of the matrix at a time in [`pass_order`], each into its
/// own directory; stops at an interrupt, and under a `sequential` rule (`--repeats auto`) once
/// every cell is decided.
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
        for (built, dir, side_cfg) in pass_order(k, sides.len()).into_iter().map(|i| &sides[i]) {
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
    if sides.len() < 2 {
        return Ok(crate::burns::nothing_to_compare(&label(&a, first)));
    }
    let mut text = String::new();
    for other in &sides[1..] {
        let b = side_records(other)?;
        let rows = kiln_report::ab::compare(&a, &b, sequential);
        text.push_str(&kiln_report::ab::markdown(
            &rows,
            &label(&a, first),
            &label(&b, other),
        ));
        text.push_str(&not_in_burn(&b));
    }
    std::fs::write(out.join(AB_FILE), &text)?;
    Ok(text)
}

/// The lines of ab.md for a side's backends that its Burn lacks (`write_absent`'s rows): one per
/// backend, with its reason; empty when it lacks none.
fn not_in_burn(records: &[kiln_contract::Record]) -> String {
    let mut lines: Vec<String> = records
        .iter()
        .filter(|r| r.status == kiln_contract::Status::Skipped)
        .filter_map(|r| {
            let why = r.reason.as_deref()?;
            why.starts_with("not in Burn")
                .then(|| format!("- {}: {why}\n", r.backend))
        })
        .collect();
    lines.dedup();
    if lines.is_empty() {
        return String::new();
    }
    format!("\nNot compared:\n{}", lines.concat())
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

#[cfg(test)]
mod tests {
    use crate::burns::pass_order;
    use kiln_contract::stats::{Look, Sequential};

    /// The share of simulated A/A runs (`runs` of them) in which Kiln's sequential rule calls a
    /// change, when each process's log time drifts by `drift` over the one before it and has
    /// `noise` of its own, and the sides run in `order(k)` in pass `k`.
    fn false_alarms(order: impl Fn(usize) -> Vec<usize>, drift: f64, noise: f64) -> f64 {
        let rule = Sequential::KILN;
        // xorshift64* and Box-Muller: a fixed, dependency-free normal sequence.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            ((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let mut normal = move || {
            let (u, v) = (uniform(), uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let runs = 2000;
        let mut alarms = 0;
        for _ in 0..runs {
            let (mut process, mut d) = (0.0, Vec::new());
            for k in 1..=rule.max_pairs {
                let mut log = [0.0; 2];
                for side in order(k) {
                    process += 1.0;
                    log[side] = drift * process + noise * normal();
                }
                d.push(log[1] - log[0]);
                match rule.look(&d) {
                    Look::Changed(_) => {
                        alarms += 1;
                        break;
                    }
                    Look::Within => break,
                    Look::Undecided => {}
                }
            }
        }
        alarms as f64 / runs as f64
    }

    #[test]
    fn a_drifting_aa_series_stays_within_the_rules_false_alarm_rate() {
        // 1% drift per process, 1.25% noise per run (the quick CNN's): the balanced order keeps
        // false alarms under the rule's 5%; A always first would call "B slower" far more often.
        let balanced = false_alarms(|k| pass_order(k, 2), 0.01, 0.0125);
        assert!(balanced <= 0.05, "balanced order: {balanced}");
        let a_first = false_alarms(|_| vec![0, 1], 0.01, 0.0125);
        eprintln!("false alarms at 1% drift: balanced {balanced}, A first {a_first}");
        assert!(a_first > 2.0 * balanced.max(0.025), "A first: {a_first}");
    }

    #[test]
    fn each_side_runs_first_in_every_other_pass() {
        assert_eq!(pass_order(1, 2), [0, 1]);
        assert_eq!(pass_order(2, 2), [1, 0]);
        // Over any two consecutive passes, A and B each run first once: a linear drift per
        // process adds the same to both sides' sums.
        for k in 1..=8 {
            let firsts = [pass_order(k, 2)[0], pass_order(k + 1, 2)[0]];
            assert!(
                firsts.contains(&0) && firsts.contains(&1),
                "passes {k}, {}",
                k + 1
            );
        }
        assert_eq!(pass_order(4, 3), [2, 1, 0]);
    }
}
