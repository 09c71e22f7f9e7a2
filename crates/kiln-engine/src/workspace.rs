//! Where Kiln's files lie: the workspace the engine works in, its revision, cargo's target
//! directory and the runner binaries in it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kiln tree xtask works in: `KILN_ROOT` when set (a GPU kit, which carries the files a run
/// reads without the source tree), else the workspace xtask was built from.
pub fn workspace_root() -> PathBuf {
    if let Some(root) = std::env::var_os("KILN_ROOT") {
        return PathBuf::from(root);
    }
    // This crate is crates/kiln-engine in the workspace.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The Kiln revision that makes a run's records: `KILN_COMMIT` (and `KILN_DIRTY`, 1 or 0) when
/// set (a GPU kit says which commit it was built from), else what git says of the workspace.
pub fn revision() -> (Option<String>, Option<bool>) {
    match std::env::var("KILN_COMMIT") {
        Ok(commit) if !commit.is_empty() => {
            let dirty = match std::env::var("KILN_DIRTY").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            };
            (Some(commit), dirty)
        }
        _ => kiln_machine::git_state(&workspace_root()),
    }
}

/// Cargo's target directory for this workspace (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            workspace_root().join(dir)
        };
    }
    workspace_root().join("target")
}

/// Directory of prebuilt runners, if the user points Kiln at one (`KILN_RUNNER_DIR`).
pub fn prebuilt_dir() -> Option<PathBuf> {
    std::env::var_os("KILN_RUNNER_DIR").map(PathBuf::from)
}

/// Where a build in `dir` puts the runner binary of `package`.
pub fn binary(dir: &Path, package: &str) -> PathBuf {
    dir.join("release")
        .join(format!("{package}{}", std::env::consts::EXE_SUFFIX))
}

/// The fingerprint xtask takes for a runner's result that carries none: this machine and
/// Kiln's revision. `burn_version` is empty for the PyTorch reference, which neither Burn nor a
/// Rust compiler built.
pub fn fingerprint_here(
    threads: usize,
    burn_version: &str,
    commit: &Option<String>,
    dirty: Option<bool>,
) -> kiln_contract::Fingerprint {
    let mut fingerprint = kiln_machine::collect(threads, burn_version);
    if burn_version.is_empty() {
        fingerprint.rustc_version = None;
    }
    // xtask's own opt-level, not the runner's.
    fingerprint.opt_level = None;
    fingerprint.kiln_commit = commit.clone().unwrap_or_else(|| "unknown".into());
    fingerprint.kiln_dirty = dirty;
    fingerprint
}

/// The cargo that runs xtask (`CARGO`), else the one on the path, without the variables
/// `cargo run` gives xtask about its own package (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...):
/// a build script that watches one (ring's does) would see them change between a cargo started
/// from a shell and one started by xtask, and each would compile that crate again.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_package_var) {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Whether `cargo run` sets this variable for the package it runs.
fn is_package_var(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || matches!(
            key,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cargo_started_by_xtask_does_not_inherit_xtasks_package_variables() {
        // cargo sets them for a test binary as `cargo run` does for xtask.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let removed: Vec<String> = super::cargo()
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for var in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
        ] {
            assert!(removed.iter().any(|k| k == var), "{var}: {removed:?}");
        }
        assert!(super::is_package_var("CARGO_CRATE_NAME"));
        for kept in [
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO_PROFILE_RELEASE_OPT_LEVEL",
        ] {
            assert!(!super::is_package_var(kept), "{kept}");
        }
    }
}
