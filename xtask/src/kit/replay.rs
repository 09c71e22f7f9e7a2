//! `cargo xtask gpu-kit --replay PROFILE [--out DIR]`: the kit's own plan, made from PROFILE
//! and scaled by its `scale`, run through the same engine (planning, watchdogs, the run's time,
//! records, report) on this CPU, each cell's steps taking PROFILE's times instead of a GPU's
//! (docs/gpu.md, "Replaying a GPU").

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;

use super::plan::{self, kit_common_args, plan, profile_of};

/// Replay `profile_path`'s device into `out` (default: a new folder under target/), with the
/// plan made from `plan_from` (default: the same profile); true when every cell ended with a
/// result.
pub fn replay(profile_path: &Path, plan_from: Option<&Path>, out: Option<PathBuf>) -> Result<bool> {
    let (played, _) = profile_of(Some(profile_path))?;
    let short = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let name = short(profile_path);
    let plan = match plan_from {
        Some(from) => {
            let (profile, _) = profile_of(Some(from))?;
            plan(&profile, &short(from), Some((&played, &name)))?
        }
        None => plan(&played, &name, Some((&played, &name)))?,
    };
    print!("{}", plan.text());
    let out = out.unwrap_or_else(|| {
        crate::workspace::target_dir().join(format!("gpu-kit-replay-{}", crate::time::unix_now()))
    });
    let common = kit_common_args();
    crate::bench::write_plan(&out, &common, &plan.entries(), Some(plan.time_limit))?;
    let started = Instant::now();
    let ok = crate::bench::resume(&out, &common, &[], None, None, None)?;
    let wall = started.elapsed().as_secs_f64();
    let starts = plan.cells.len() as f64 * super::plan::CELL_OVERHEAD.as_secs_f64();
    let device = plan.time_limit.as_secs_f64() - starts;
    let text = format!(
        "Replay of {name} at scale {}: {} cells in {wall:.1} s; the plan gave them {:.1} s \
         ({device:.1} s of the device's time scaled, and {starts:.0} s for {} start-ups of this \
         machine's); the rest of the kit's window, the commands after the matrix ({:.1} s \
         scaled), is not replayed.\n",
        plan.scale,
        plan.cells.len(),
        plan.time_limit.as_secs_f64(),
        plan.cells.len(),
        plan::after_seconds().as_secs_f64() * plan.scale,
    );
    print!("{text}");
    std::fs::write(out.join("replay.txt"), format!("{}{text}", plan.text()))?;
    Ok(ok)
}
