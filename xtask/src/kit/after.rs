//! A kit for the next window (`gpu-kit --after RUN_DIR`): the cells an earlier kit run left,
//! and the CubeCL caches it returned.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::plan;

/// The cells an earlier kit run (its output folder `run`) left to a next window, and the
/// CubeCL caches it returned (`cubecl-cache.tgz`), if it did.
pub(super) fn left_by(run: &Path) -> Result<(Vec<&'static plan::KitCell>, Option<PathBuf>)> {
    let records = kiln_report::read::load(&[run.to_path_buf()])
        .with_context(|| {
            format!(
                "--after {}: give the folder an earlier kit run wrote (its results.jsonl)",
                run.display()
            )
        })?
        .records;
    let left = plan::left_after(&records);
    if left.is_empty() {
        bail!(
            "--after {}: every cell of the matrix has a record there; no cell is left for a \
             next window",
            run.display()
        );
    }
    let cache = run.join(CARRIED_CACHE);
    println!(
        "kiln: {} holds records of {} of the matrix's {} cells; this kit plans the {} left, {}",
        run.display(),
        plan::CELLS.len() - left.len(),
        plan::CELLS.len(),
        left.len(),
        if cache.is_file() {
            "with the CubeCL caches that run left"
        } else {
            "from cold caches (that run left no cubecl-cache.tgz)"
        }
    );
    Ok((left, cache.is_file().then_some(cache)))
}

/// The CubeCL caches a kit run leaves in its output folder (`run.sh` packs them), and where a
/// kit for the next window carries them.
pub const CARRIED_CACHE: &str = "cubecl-cache.tgz";
