//! Where CubeCL's LLVM lives: cubecl-llvm (under the CUDA, HIP and CPU runtimes) links an LLVM
//! that its build dependency `tracel-llvm-bundler` downloads from github.com into
//! `<data dir>/tracel/tracel-llvm-<version>/` unless that folder is already marked installed;
//! `cargo xtask setup-cubecl-llvm` puts a system LLVM there instead and says so in the folder.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The mark tracel-llvm-bundler looks for before downloading.
pub const SENTINEL: &str = ".tracel-llvm-installed";

/// What `setup-cubecl-llvm` leaves in the folder, naming the LLVM that stands in.
pub const MARKER: &str = "kiln-system-llvm.txt";

/// The version of tracel-llvm-bundler in the workspace's lock file (`23.1.0-4`).
fn bundler_version(root: &Path) -> Result<String> {
    let lock = root.join("Cargo.lock");
    let text = std::fs::read_to_string(&lock)
        .with_context(|| format!("cannot read {}", lock.display()))?;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"tracel-llvm-bundler\""
            && let Some(v) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = \""))
                .and_then(|v| v.strip_suffix('"'))
        {
            return Ok(v.to_string());
        }
    }
    bail!(
        "{}: no tracel-llvm-bundler in it, so nothing downloads LLVM",
        lock.display()
    )
}

/// The folder the bundler installs LLVM into (`dirs::data_local_dir()` on Linux:
/// `$XDG_DATA_HOME`, else `~/.local/share`).
pub fn bundle_dir(root: &Path) -> Result<PathBuf> {
    let version = bundler_version(root)?;
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .context("no HOME: cannot tell where tracel-llvm-bundler installs LLVM")?;
    Ok(data.join("tracel").join(format!("tracel-llvm-{version}")))
}

/// True when an LLVM is in place for cubecl-llvm's build (the bundler's own download, or the
/// stand-in of `setup-cubecl-llvm`), so that it builds without reaching github.com.
pub fn installed(root: &Path) -> bool {
    bundle_dir(root).is_ok_and(|d| d.join(SENTINEL).is_file())
}

/// What stands in for the bundle, if `setup-cubecl-llvm` put it there: the first line of the
/// marker.
pub fn stand_in(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(bundle_dir(root).ok()?.join(MARKER)).ok()?;
    text.lines().next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_folder_is_named_by_the_locked_bundler_version() {
        let dir = bundle_dir(&crate::workspace::workspace_root()).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("tracel-llvm-23."), "{name}");
        assert_eq!(
            dir.parent().unwrap().file_name().unwrap().to_string_lossy(),
            "tracel"
        );
    }
}
