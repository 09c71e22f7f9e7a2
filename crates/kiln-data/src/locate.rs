//! Where Kiln looks for dataset files, in order.

use std::path::{Path, PathBuf};

use crate::DataError;
use crate::manifest::ManifestDataset;

/// The workspace's `datasets/cache/` (`KILN_WORKSPACE` overrides the build-time location).
pub fn workspace_cache() -> PathBuf {
    let root = std::env::var_os("KILN_WORKSPACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // crates/kiln-data -> the workspace root.
            let here = Path::new(env!("CARGO_MANIFEST_DIR"));
            here.ancestors().nth(2).unwrap_or(here).to_path_buf()
        });
    root.join("datasets").join("cache")
}

/// System-wide locations (Debian's `dataset-fashion-mnist` installs into the first).
pub const SYSTEM_DIRS: &[&str] = &["/usr/share/datasets", "/usr/local/share/datasets"];

/// Candidate directories for `name`, each with where it came from, in search order:
/// `--data-dir`, `KILN_DATA_DIR`, `datasets/cache/`, then system locations. A root directory
/// is tried as is and with the dataset's name appended.
pub fn candidates(name: &str, data_dir: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut roots: Vec<(PathBuf, String)> = Vec::new();
    if let Some(dir) = data_dir {
        roots.push((dir.to_path_buf(), "--data-dir".into()));
    }
    if let Some(dir) = std::env::var_os("KILN_DATA_DIR") {
        roots.push((PathBuf::from(dir), "KILN_DATA_DIR".into()));
    }
    roots.push((workspace_cache(), "datasets/cache".into()));
    for dir in SYSTEM_DIRS {
        roots.push((PathBuf::from(dir), "system".into()));
    }
    let mut out = Vec::new();
    for (root, origin) in roots {
        out.push((root.join(name), origin.clone()));
        out.push((root, origin));
    }
    out
}

/// A file of the dataset found on disk.
#[derive(Debug, Clone)]
pub struct Found {
    pub role: String,
    pub path: PathBuf,
}

fn find_in(dir: &Path, entry: &ManifestDataset) -> Vec<Option<PathBuf>> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(archive) = &entry.archive {
        dirs.push(dir.join(&archive.member_dir));
    }
    entry
        .files
        .iter()
        .map(|f| {
            dirs.iter().find_map(|d| {
                [f.name.clone(), format!("{}.gz", f.name)]
                    .into_iter()
                    .map(|n| d.join(n))
                    .find(|p| p.is_file())
            })
        })
        .collect()
}

/// The first candidate directory that holds every file of `entry`.
pub fn locate(entry: &ManifestDataset, data_dir: Option<&Path>) -> Result<Vec<Found>, DataError> {
    let mut looked = Vec::new();
    for (dir, origin) in candidates(&entry.name, data_dir) {
        let found = find_in(&dir, entry);
        if found.iter().all(Option::is_some) {
            return Ok(entry
                .files
                .iter()
                .zip(found)
                .filter_map(|(f, p)| {
                    p.map(|path| Found {
                        role: f.role.clone(),
                        path,
                    })
                })
                .collect());
        }
        let present = found.iter().filter(|p| p.is_some()).count();
        if present > 0 {
            let missing: Vec<&str> = entry
                .files
                .iter()
                .zip(&found)
                .filter(|(_, p)| p.is_none())
                .map(|(f, _)| f.name.as_str())
                .collect();
            looked.push(format!(
                "{} ({origin}): {present} of {} files, missing {}",
                dir.display(),
                entry.files.len(),
                missing.join(", ")
            ));
        } else if dir.is_dir() || origin != "system" {
            looked.push(format!("{} ({origin})", dir.display()));
        }
    }
    Err(DataError::NotFound {
        dataset: entry.name.clone(),
        looked,
        hint: fetch_hint(&entry.name),
    })
}

/// The commands that get a dataset, for error messages.
pub fn fetch_hint(name: &str) -> String {
    match name {
        "fashion-mnist" => "get it with `cargo xtask fetch-data fashion-mnist` (internet), or offline \
             on Debian/Ubuntu with `sudo apt-get install dataset-fashion-mnist`, or pass \
             `--data-dir DIR` holding the four IDX files; `--dataset fashion-mnist-sample` uses the \
             copy embedded in Kiln"
            .into(),
        "mnist" => "get it with `cargo xtask fetch-data mnist` (internet), or pass `--data-dir DIR` \
             holding the four IDX files (raw or .gz); `--dataset fashion-mnist` or \
             `--dataset fashion-mnist-sample` train the same model offline"
            .into(),
        "cifar-10" => "get it with `cargo xtask fetch-data cifar-10` (internet), or pass `--data-dir DIR` \
             holding data_batch_1..5.bin and test_batch.bin; `--synthetic` runs on generated \
             data of the same shape"
            .into(),
        other => format!("`cargo xtask fetch-data {other}`"),
    }
}
