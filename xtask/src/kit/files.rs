//! The kit's files: what a folder holds, its size against the budget, a runner stripped and
//! compressed, a file copied or written with an error naming it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// What travels to a GPU machine without network, all together: the repository's tracked tree
/// and the kit carried beside it.
pub const DEVICE_BYTES: u64 = 64 << 20;

/// Room kept for the tracked tree to grow between a kit's build and its run.
pub const TREE_ROOM: u64 = 4 << 20;

/// The most a kit may weigh beside a tracked tree of `tree` bytes.
pub fn budget(tree: u64) -> u64 {
    DEVICE_BYTES.saturating_sub(tree).saturating_sub(TREE_ROOM)
}

/// The bytes of every file git tracks in the repository at `root` (what travels with a kit).
pub fn tracked_tree_bytes(root: &Path) -> Result<u64> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .context("cannot run git ls-files: the tree's size is part of a kit's budget")?;
    if !out.status.success() {
        bail!(
            "{}: git ls-files failed: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::fs::metadata(root.join(String::from_utf8_lossy(p).as_ref())).ok())
        .map(|m| m.len())
        .sum())
}

/// What `gpu-kit` says when the kit is built: both sizes, and where to run it.
pub fn sizes_line(out: &Path, total: u64, tree: u64) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    format!(
        "GPU kit: {} ({:.1} MiB) beside the tracked tree ({:.1} MiB): {:.1} of the GPU machine's \
         {} MiB, {} MiB kept for the tree to grow\nOn the GPU machine: bash {}/run.sh [OUT_DIR]",
        out.display(),
        mib(total),
        mib(tree),
        mib(total + tree),
        DEVICE_BYTES >> 20,
        TREE_ROOM >> 20,
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "gpu-kit".into())
    )
}

/// An error naming the largest files when the kit at `out` (`total` bytes) is over `budget`.
pub fn check_budget(out: &Path, total: u64, budget: u64) -> Result<()> {
    if total <= budget {
        return Ok(());
    }
    let mut files = contents(out)?;
    files.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let largest: Vec<String> = files
        .iter()
        .take(3)
        .map(|(f, n)| format!("{f} {:.1} MiB", *n as f64 / (1u64 << 20) as f64))
        .collect();
    bail!(
        "the kit in {} is {:.1} MiB, over its budget of {:.1} MiB (largest: {}); a GPU machine \
         without network is sent no more",
        out.display(),
        total as f64 / (1u64 << 20) as f64,
        budget as f64 / (1u64 << 20) as f64,
        largest.join(", ")
    )
}

/// Every file under `dir` (relative path, bytes), sorted.
pub fn contents(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in
            std::fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/");
                files.push((rel, entry.metadata()?.len()));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Strip `exe` into a temporary file and xz-compress it into `dest`.
pub(super) fn compress(exe: &Path, dest: &Path) -> Result<()> {
    let stripped = dest.with_extension("stripped");
    let status = Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(exe)
        .status()
        .context("cannot run `strip` (install binutils)")?;
    if !status.success() {
        bail!("`strip {}` failed ({status})", exe.display());
    }
    let file =
        std::fs::File::create(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let status = Command::new("xz")
        // -9: a 64 MiB dictionary, which a runner of 100-160 MB needs to fit the budget.
        .args(["-9", "-T0", "-c"])
        .arg(&stripped)
        .stdout(file)
        .status()
        .context("cannot run `xz` (install xz-utils)")?;
    std::fs::remove_file(&stripped).ok();
    if !status.success() {
        bail!("`xz` failed on {} ({status})", exe.display());
    }
    Ok(())
}

pub(super) fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .map(|_| ())
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

pub(super) fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
