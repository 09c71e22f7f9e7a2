//! Which Burn this build links, for the code and for the records: read from the `Cargo.lock`
//! of the workspace that builds kiln-core (this one, or an overlay of another Burn), since
//! cargo tells a build script no dependency's version. Sets `KILN_BURN_VERSION` and, from Burn
//! 0.23 on, the cfg `burn_0_23` that selects the adapters of `crate::burn_compat`.

use std::path::{Path, PathBuf};

/// The Burn version this crate's manifest pins, for a build whose lock cannot be found (kiln-core
/// used from a registry or a git checkout outside its workspace).
const PINNED: &str = "0.22.1";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(burn_0_23)");
    let lock = ["CARGO_MANIFEST_DIR", "OUT_DIR"]
        .into_iter()
        .filter_map(std::env::var_os)
        .find_map(|dir| find_lock(Path::new(&dir)));
    let version = match &lock {
        Some(path) => {
            println!("cargo::rerun-if-changed={}", path.display());
            let text = std::fs::read_to_string(path).unwrap_or_default();
            match burn_version(&text) {
                Some(v) => v,
                None => {
                    println!(
                        "cargo::warning={} locks no `burn`: taking Burn {PINNED}",
                        path.display()
                    );
                    PINNED.to_string()
                }
            }
        }
        None => {
            println!("cargo::warning=no Cargo.lock above kiln-core: taking Burn {PINNED}");
            PINNED.to_string()
        }
    };
    println!("cargo::rustc-env=KILN_BURN_VERSION={version}");
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if version.starts_with("0.") && minor >= 23 {
        println!("cargo::rustc-cfg=burn_0_23");
    }
}

/// The nearest `Cargo.lock` in `dir` or above it.
fn find_lock(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join("Cargo.lock"))
        .find(|p| p.is_file())
}

/// The version of the package `burn` in a lock file's text.
fn burn_version(lock: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"burn\"" {
            let next = lines.next()?;
            return next
                .trim()
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}
