//! The run directory: checked before any work, records appended whole, `run.json` written.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln_contract::Record;

use super::config::{PlannedCell, RUN_FILE, RunConfig, RunFile};
use crate::time;
use crate::workspace::workspace_root;

/// Validate and create the run directory.
pub(super) fn prepare_out(out: Option<&Path>) -> Result<PathBuf> {
    let dir = check_out(out)?;
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// The run directory `--out` names (or the default), checked before any work: it must be new or
/// empty, and never an existing run, whose results must not be mixed with new ones.
pub(super) fn check_out(out: Option<&Path>) -> Result<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => workspace_root()
            .join("results")
            .join(time::stamp(time::unix_now())),
    };
    if dir.exists() {
        if !dir.is_dir() {
            bail!("--out {}: exists and is not a directory", dir.display());
        }
        let empty = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            if dir.join(RUN_FILE).is_file() {
                bail!(
                    "--out {}: already holds a Kiln run; choose another directory (its results \
                     stay as they are; `cargo xtask report {}` re-renders them)",
                    dir.display(),
                    dir.display()
                );
            }
            bail!(
                "--out {}: exists, is not empty and is not a Kiln run; choose an empty or new directory",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// Append one record as one line, flushed and synced, so a killed run loses nothing finished.
/// A record xtask wrote itself (a cell skipped before any runner started) gets this machine's
/// fingerprint: which machine skipped a cell, and at which revision, matters too.
pub fn append_record(path: &Path, record: &Record) -> Result<()> {
    if record.status != kiln_contract::Status::Ok {
        UNTIMED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    if record.fingerprint.cpu_model.is_empty() {
        return append_line(path, &on_this_host(record.clone()));
    }
    append_line(path, record)
}

/// `record` with this machine's fingerprint and Kiln's revision: a record xtask wrote itself,
/// no runner having started.
pub fn on_this_host(mut record: Record) -> Record {
    let (commit, dirty) = crate::workspace::revision();
    record.fingerprint = crate::workspace::fingerprint_here(1, "", &commit, dirty);
    record
}

/// Set once this process recorded a cell that has no time (skipped, not steady, out of memory,
/// failed): `cargo xtask` then exits with [`EXIT_UNTIMED`] unless a failure already made it 1.
static UNTIMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The exit status of a run whose every cell ended as expected of some cells (trained, or
/// skipped for a stated reason, out of memory at its batch, not steady) but not every cell has a
/// time: "ran, but look at the table". 1 stays a failed or diverged cell, or an error.
pub const EXIT_UNTIMED: u8 = 3;

/// Whether a cell recorded by this process has no time.
pub fn some_cell_untimed() -> bool {
    UNTIMED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Append `value` as one JSON line, written whole and synced.
pub fn append_line<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut line = serde_json::to_string(value)?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.write_all(line.as_bytes())
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A command line with the value of `--token` replaced: a run directory is shared, a token is
/// not.
pub(super) fn redacted(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut secret = false;
    for a in args {
        if secret {
            out.push("<redacted>".into());
            secret = false;
        } else if a == "--token" {
            out.push(a);
            secret = true;
        } else if a.starts_with("--token=") {
            out.push("--token=<redacted>".into());
        } else {
            out.push(a);
        }
    }
    out
}

/// Write `run.json`, which marks `out` as a Kiln run and lets `--resume` finish it.
pub(super) fn write_run_file(out: &Path, cfg: &RunConfig, cells: &[PlannedCell]) -> Result<()> {
    let run_file = RunFile {
        kiln_run: 1,
        created_at: time::unix_now(),
        command: redacted(std::env::args()),
        config: cfg.clone(),
        cells: cells.to_vec(),
    };
    std::fs::write(out.join(RUN_FILE), serde_json::to_string_pretty(&run_file)?)
        .with_context(|| format!("cannot write {}", out.join(RUN_FILE).display()))
}

/// Write a cell's request to `out/cells/<cell><suffix>.json` (what the runner is given with
/// `--cell`; the suffix tells a calibration's request from the cell's).
pub(super) fn write_request(
    out: &Path,
    request: &kiln_contract::CellRequest,
    suffix: &str,
) -> Result<PathBuf> {
    let dir = out.join("cells");
    let path = dir.join(format!("{}{suffix}.json", request.id().stem()));
    std::fs::create_dir_all(&dir)
        .and_then(|_| request.write(&path))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The log of the run of a cell that made `r` in the run directory `run`, if it is there (a run
/// directory of an older Kiln names logs without the batch size).
pub fn cell_log(run: &Path, r: &Record) -> Option<std::path::PathBuf> {
    let suffix = match &r.repeat {
        Some(p) if p.of > 1 => format!("-r{}", p.index),
        _ => String::new(),
    };
    let stem = r.cell().stem();
    let older = stem
        .rsplit_once("-b")
        .map_or(stem.as_str(), |(head, _)| head);
    [&stem, older]
        .iter()
        .map(|s| run.join("logs").join(format!("{s}{suffix}.stderr")))
        .find(|p| p.is_file())
}
