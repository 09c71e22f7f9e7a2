//! `cargo xtask site` and `cargo xtask submit`: kiln-report's `kiln-site` binary (the results
//! site, `kiln_report::site`), built on first use so that xtask itself stays light, run with
//! the workspace's committed runs.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::workspace::{cargo, target_dir, workspace_root};

/// Where committed runs live, from the workspace root.
pub const RESULTS_DIR: &str = "docs/results";

/// Run `kiln-site COMMAND RESULTS ARGS...` (the committed runs, then `args`, in the order its
/// command takes them); whether it succeeded (it says why not).
fn kiln_site(command: &str, args: &[&OsStr]) -> Result<bool> {
    let results = workspace_root().join(RESULTS_DIR);
    let status = cargo()
        .current_dir(workspace_root())
        .args([
            "run",
            "-q",
            "-p",
            "kiln-report",
            "--features",
            "site",
            "--bin",
            "kiln-site",
        ])
        .args(["--", command])
        .arg(&results)
        .args(args)
        .status()
        .context("cannot run cargo to build and run kiln-site")?;
    Ok(status.success())
}

pub fn site(out: Option<PathBuf>, runs: &[PathBuf]) -> Result<bool> {
    let out = out.unwrap_or_else(|| target_dir().join("site"));
    let mut args: Vec<&OsStr> = vec![out.as_os_str()];
    args.extend(runs.iter().map(|r| r.as_os_str()));
    kiln_site("site", &args)
}

pub fn submit(run: &Path, what: Option<&str>) -> Result<bool> {
    let mut args: Vec<&OsStr> = vec![run.as_os_str()];
    if let Some(w) = what {
        args.push(OsStr::new(w));
    }
    kiln_site("submit", &args)
}
