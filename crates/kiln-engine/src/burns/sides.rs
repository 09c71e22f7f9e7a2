//! The Burns of an A/B run built side by side: each Burn's runners, the run's side
//! directories, and `burns.json`, which says which Burns were built and how long each took.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::overlay::{Burn, BurnSpec, prepare};
use crate::backends::{Backend, Requirement, Source};
use crate::runners::{Built, Runner, build_and_probe, probe};

/// Build `burn`'s runners of `wanted` and probe them; its own target directory for an overlay.
pub fn build(burn: &Burn, wanted: &[&'static Backend], learner: bool) -> Result<Vec<Built>> {
    let Some(root) = &burn.overlay else {
        return build_and_probe(wanted, learner);
    };
    let extra: &[&str] = if learner {
        &[crate::build::LEARNER]
    } else {
        &[]
    };
    // The plain runners by build group; a runner with a crate feature (burn-cpu's LLVM, a GPU
    // toolkit) alone with it, where what it needs is here. `built` keeps `wanted`'s order.
    let mut plain: Vec<(Option<&str>, &str)> = Vec::new();
    let mut built: Vec<&'static Backend> = Vec::new();
    for &b in wanted {
        match &b.source {
            Source::Cargo {
                package,
                requires: None,
            } => {
                plain.push((b.build_group.as_deref(), package.as_str()));
                built.push(b);
            }
            Source::Cargo {
                package,
                requires: Some(r @ (Requirement::Llvm(_) | Requirement::Driver(_))),
            } => match r.met() {
                Ok(()) => {
                    crate::build::build_featured_at(root, package, r, extra, &burn.target())?;
                    built.push(b);
                }
                Err(why) => eprintln!(
                    "kiln: --burn {}: {} is left out: {why}",
                    burn.build.spec, b.name
                ),
            },
            Source::Cargo {
                package,
                requires: Some(Requirement::Libtorch),
            } => match crate::torch::find() {
                Ok(t) => {
                    crate::build::build_tch_at(root, package, &t, extra, &burn.target())?;
                    built.push(b);
                }
                Err(why) => eprintln!(
                    "kiln: --burn {}: {} is left out: {why}",
                    burn.build.spec, b.name
                ),
            },
            Source::Python { .. } => eprintln!(
                "kiln: --burn {}: {} is left out (it is no Burn backend)",
                burn.build.spec, b.name
            ),
        }
    }
    for packages in crate::backends::by_build_group(plain) {
        crate::build::build_runners_at(root, &packages, extra, &burn.target())?;
    }
    let mut out = Vec::new();
    for b in built {
        let Source::Cargo { package, .. } = &b.source else {
            continue;
        };
        let binary = crate::workspace::binary(&burn.target(), package);
        let program = root
            .join("bin")
            .join(binary.file_name().unwrap_or_default());
        std::fs::create_dir_all(root.join("bin"))?;
        std::fs::copy(&binary, &program).with_context(|| {
            format!("cannot copy {} to {}", binary.display(), program.display())
        })?;
        // A libtorch runner finds libtorch through its rpath; the variables cover a moved one.
        let env = match b.needs_torch() {
            true => crate::torch::find()
                .map(|t| t.run_env())
                .unwrap_or_default(),
            false => Vec::new(),
        };
        let runner = Runner {
            program,
            args: Vec::new(),
            env,
            needs_data_file: false,
        };
        let report = probe(&runner)?;
        out.push((b, runner, report));
    }
    Ok(out)
}

/// The order of the sides in pass `k` (from 1) of `n` sides: as given in odd passes, reversed
/// in even ones (A B, B A, A B, ...), so each side runs first in every other pass. A machine
/// that drifts between processes (it warms, a neighbour starts) then adds as much to A as to
/// B over each two pairs, where A-always-first read a drift of 1% per process as B slower in
/// 13.5% of null A/Bs (issue 65's simulation).
pub fn pass_order(k: usize, n: usize) -> Vec<usize> {
    if k % 2 == 1 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// A Burn with its runners built, and how long that build took in this run.
pub struct Side {
    pub burn: Burn,
    pub built: Vec<Built>,
    pub build_seconds: f64,
    /// Kiln's backends this Burn lacks, each with its row's reason (`Backend::in_burn`).
    pub absent: Vec<(&'static Backend, String)>,
}

/// The directory of the `i`th side of an A/B run in `out` (`a-0.22.1`, `b-path-burn-1a2b3c4d`),
/// announced on stderr.
pub fn side_dir(out: &Path, i: usize, burn: &Burn) -> PathBuf {
    let letter = (b'a' + i as u8) as char;
    let dir = out.join(format!("{letter}-{}", burn.slug));
    eprintln!(
        "kiln: {} = Burn {} in {}",
        letter.to_ascii_uppercase(),
        burn.build.label(),
        dir.display()
    );
    dir
}

/// The file of an A/B run that says which Burns it built and how long each build took.
pub const BURNS_FILE: &str = "burns.json";

/// Prepare and build every spec; one that cannot be used is one line saying why, and the
/// rest go on. Every Burn is made ready before any is built, so that a backend one of them
/// lacks (ndarray in Burn 0.23) is built for none: each side only builds what all can compare,
/// and keeps the rest as its `absent`. An error when none could be built.
pub fn build_all(
    specs: &[BurnSpec],
    wanted: &[&'static Backend],
    learner: bool,
) -> Result<Vec<Side>> {
    let mut ready = Vec::new();
    for spec in specs {
        let started = std::time::Instant::now();
        match prepare(spec) {
            Ok(burn) => ready.push((spec, burn, started.elapsed().as_secs_f64())),
            Err(e) => eprintln!("kiln: --burn {spec} cannot be used: {e:#}"),
        }
    }
    let lacking = |b: &Backend| {
        ready
            .iter()
            .find_map(|(_, burn, _)| b.in_burn(&burn.build.version).err())
    };
    let shared: Vec<&'static Backend> = wanted
        .iter()
        .copied()
        .filter(|b| match lacking(b) {
            Some(why) => {
                eprintln!("kiln: {}: {why}: no Burn of this run builds it", b.name);
                false
            }
            None => true,
        })
        .collect();
    let mut sides = Vec::new();
    for (spec, burn, prepare_seconds) in ready {
        let started = std::time::Instant::now();
        // Every Kiln backend this Burn lacks, asked for or not: a reader of an A/B against a
        // newer Burn learns which rows it can no longer have.
        let absent = crate::backends::all()
            .iter()
            .filter_map(|b| b.in_burn(&burn.build.version).err().map(|why| (b, why)))
            .collect();
        match build(&burn, &shared, learner) {
            Ok(built) if !built.is_empty() => sides.push(Side {
                burn,
                built,
                build_seconds: prepare_seconds + started.elapsed().as_secs_f64(),
                absent,
            }),
            Ok(_) => eprintln!("kiln: --burn {spec} cannot be used: no runner was built for it"),
            Err(e) => eprintln!("kiln: --burn {spec} cannot be used: {e:#}"),
        }
    }
    if sides.is_empty() {
        bail!("no --burn could be built (each line above says why)");
    }
    Ok(sides)
}

/// [`build_all`] for a comparison: with two Burns or more asked for, an error (having run
/// nothing) when fewer than two could be built.
pub fn build_to_compare(
    specs: &[BurnSpec],
    wanted: &[&'static Backend],
    learner: bool,
) -> Result<Vec<Side>> {
    let sides = build_all(specs, wanted, learner)?;
    if specs.len() >= 2 && sides.len() < 2 {
        bail!(
            "only Burn {} could be built, so there is nothing to compare: nothing was run (the \
             lines above say why each other --burn could not be used)",
            sides[0].burn.build.label()
        );
    }
    Ok(sides)
}

/// Every spec built ([`build_to_compare`]: fewer than two built stops here, nothing run),
/// each side given its run directory under `out` ([`side_dir`]) and `burns.json` written: the
/// sides explain's and infer's A/B alternate.
pub fn build_sides(
    specs: &[BurnSpec],
    wanted: &[&'static Backend],
    learner: bool,
    out: &Path,
) -> Result<Vec<(kiln_contract::BurnBuild, Vec<Built>, PathBuf)>> {
    let built = build_to_compare(specs, wanted, learner)?;
    let dirs: Vec<PathBuf> = built
        .iter()
        .enumerate()
        .map(|(i, s)| side_dir(out, i, &s.burn))
        .collect();
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let listed: Vec<_> = built
        .iter()
        .zip(&dirs)
        .map(|(s, d)| (s, d.as_path()))
        .collect();
    write_burns(out, &listed)?;
    Ok(built
        .into_iter()
        .zip(dirs)
        .map(|(s, dir)| (s.burn.build, s.built, dir))
        .collect())
}

/// What an A/B says of a run with one Burn (`--burn` given once): there is nothing to compare,
/// and no A/B file is written; the Burn's own tables are in its side folder.
pub fn nothing_to_compare(label: &str) -> String {
    format!(
        "One Burn in this run ({label}): nothing to compare, so no A/B was written (an A/B takes \
         --burn twice); its tables are in its side folder.\n"
    )
}

/// The side directories of an A/B run directory, in order, from its [`BURNS_FILE`]; `None`
/// when `dir` is no A/B run.
pub fn side_dirs(dir: &Path) -> Result<Option<Vec<PathBuf>>> {
    let path = dir.join(BURNS_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not the list an A/B run writes", path.display()))?;
    list.iter()
        .map(|s| {
            s["dir"]
                .as_str()
                .map(|d| dir.join(d))
                .with_context(|| format!("{}: a side without its \"dir\"", path.display()))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Write [`BURNS_FILE`] into `out`: each side's Burn, its directory there, and its build time.
pub fn write_burns(out: &Path, sides: &[(&Side, &Path)]) -> Result<()> {
    let list: Vec<serde_json::Value> = sides
        .iter()
        .map(|(s, dir)| {
            serde_json::json!({
                "burn": s.burn.build,
                "dir": dir.file_name().map(|n| n.to_string_lossy().into_owned()),
                "runners": s.built.iter().map(|(b, _, _)| b.name.clone()).collect::<Vec<_>>(),
                "build_seconds": (s.build_seconds * 10.0).round() / 10.0,
                "absent": s.absent.iter().map(|(b, why)| serde_json::json!({
                    "backend": b.name, "reason": why,
                })).collect::<Vec<_>>(),
                "overlay": s.burn.overlay.is_some(),
            })
        })
        .collect();
    let path = out.join(BURNS_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&list)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}
