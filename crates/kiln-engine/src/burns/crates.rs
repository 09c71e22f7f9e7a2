//! The crates of an overlay: this workspace's `crates/`, but for the backends the overlay's Burn
//! lacks (Burn 0.23 dropped ndarray and tch), each with its manifest written anew and the rest
//! linked. An overlay builds runners, never tests, so dev-dependencies are left out: a test's
//! Burn features (ndarray beside flex in kiln-core's tests) need not exist in that Burn.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::backends::{Backend, Source};

/// The packages of the backends in `all` that Burn `version` lacks, with the reason of each.
pub fn left_out(all: &[Backend], version: &str) -> Vec<(String, String)> {
    all.iter()
        .filter_map(|b| match (&b.source, b.in_burn(version)) {
            (Source::Cargo { package, .. }, Err(why)) => Some((package.clone(), why)),
            _ => None,
        })
        .collect()
}

/// A crate's manifest for an overlay: its dev-dependency tables and its test, bench and example
/// targets left out (their files are not linked), every dependency on a
/// `left_out` package dropped, and from each feature's list what names one (a feature is kept,
/// empty if need be, so the code's `cfg(feature = ...)` still names a feature).
pub fn overlay_crate_manifest(manifest: &str, left_out: &[String]) -> String {
    let names = |item: &str| {
        let item = item.trim().trim_matches('"');
        let package = item.strip_prefix("dep:").unwrap_or(item);
        let package = package.split(['/', '?']).next().unwrap_or(package);
        left_out.iter().any(|p| p == package)
    };
    let mut out = String::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            section = trimmed.trim_end().to_string();
        }
        let test_only = ["[[test]]", "[[bench]]", "[[example]]"].contains(&section.as_str());
        if section.ends_with("dev-dependencies]") || test_only {
            continue;
        }
        let key = trimmed.split(['=', '.', ' ']).next().unwrap_or("");
        if section.ends_with("dependencies]") && left_out.iter().any(|p| p == key) {
            continue;
        }
        let list = line
            .split_once("= [")
            .and_then(|(k, rest)| Some((k, rest.strip_suffix(']')?)));
        match list {
            Some((feature, items)) if section == "[features]" => {
                let kept: Vec<&str> = items
                    .split(',')
                    .filter(|i| !i.trim().is_empty() && !names(i))
                    .map(str::trim)
                    .collect();
                out.push_str(&format!("{feature}= [{}]\n", kept.join(", ")));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Write `text` to `path` unless it already holds it: a manifest written again, unchanged,
/// makes cargo rebuild its crate.
pub fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Lay out `overlay/crates`: for each crate of `root/crates` but the `left_out` packages, its
/// manifest ([`overlay_crate_manifest`]) and a link to each other entry but its tests,
/// examples and benches. A file already as it should be is left alone (a manifest written again
/// would make cargo rebuild every Kiln crate of that Burn); a link to another checkout's crate
/// is made again to `root`'s; an earlier overlay's `crates` (a link) and a crate no longer
/// wanted are removed.
pub fn lay_out(root: &Path, overlay: &Path, left_out: &[String]) -> Result<()> {
    let dir = overlay.join("crates");
    if dir.is_symlink() {
        std::fs::remove_file(&dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    let source = root.join("crates");
    let mut wanted = Vec::new();
    let entries =
        std::fs::read_dir(&source).with_context(|| format!("cannot read {}", source.display()))?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let manifest = entry.path().join("Cargo.toml");
        if left_out.contains(&name) || !manifest.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("cannot read {}", manifest.display()))?;
        if !text.contains(&format!("name = \"{name}\"")) {
            bail!(
                "{}: an overlay needs each crate's directory named as its package",
                manifest.display()
            );
        }
        let copy = dir.join(&name);
        std::fs::create_dir_all(&copy)
            .with_context(|| format!("cannot create {}", copy.display()))?;
        write_if_changed(
            &copy.join("Cargo.toml"),
            &overlay_crate_manifest(&text, left_out),
        )?;
        for part in std::fs::read_dir(entry.path())? {
            let part = part?;
            let part_name = part.file_name();
            let skip = ["Cargo.toml", "tests", "examples", "benches"];
            let link = copy.join(&part_name);
            if skip.iter().any(|s| part_name == *s) {
                continue;
            }
            // A link left by another checkout (a CI clone sharing the target directory) would
            // build that checkout's sources: only a link to this one stays.
            if link.is_symlink() {
                if std::fs::read_link(&link).ok().as_deref() == Some(part.path().as_path()) {
                    continue;
                }
                std::fs::remove_file(&link)
                    .with_context(|| format!("cannot replace {}", link.display()))?;
            }
            std::os::unix::fs::symlink(part.path(), &link)
                .with_context(|| format!("cannot link {}", part.path().display()))?;
        }
        wanted.push(name);
    }
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_none_or(|n| !wanted.contains(&n)) {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REMOTE: &str = "[package]\nname = \"kiln-remote\"\n\n[features]\nwgpu = \
                          [\"dep:kiln-wgpu\"]\nndarray = [\"dep:kiln-ndarray\"]\nlearner = \
                          [\"kiln-core/learner\", \"kiln-ndarray?/learner\"]\n\n\
                          [dependencies]\nburn = { workspace = true }\nkiln-ndarray = { path = \
                          \"../kiln-ndarray\", optional = true }\nkiln-wgpu = { path = \
                          \"../kiln-wgpu\", optional = true }\n\n[dev-dependencies]\nburn = { \
                          workspace = true, features = [\"ndarray\"] }\ntempfile = \"3\"\n\n\
                          [[test]]\nname = \"serve\"\npath = \"tests/serve.rs\"\n\n\
                          [package.metadata.kiln]\nbackend = \"remote\"\n";

    #[test]
    fn a_left_out_crate_and_the_dev_dependencies_leave_the_manifest() {
        let text = overlay_crate_manifest(REMOTE, &["kiln-ndarray".into()]);
        assert!(!text.contains("kiln-ndarray"), "{text}");
        assert!(!text.contains("tempfile"), "{text}");
        assert!(
            !text.contains("[[test]]") && !text.contains("serve.rs"),
            "{text}"
        );
        assert!(!text.contains("\"ndarray\""), "{text}");
        // The feature stays, empty; the rest as it was.
        assert!(text.contains("ndarray = []\n"), "{text}");
        assert!(text.contains("wgpu = [\"dep:kiln-wgpu\"]"), "{text}");
        assert!(
            text.contains("learner = [\"kiln-core/learner\"]\n"),
            "{text}"
        );
        assert!(text.contains("kiln-wgpu = { path"), "{text}");
        assert!(
            text.contains("[package.metadata.kiln]\nbackend = \"remote\""),
            "{text}"
        );
        // Nothing left out: only the dev-dependencies go.
        let text = overlay_crate_manifest(REMOTE, &[]);
        assert!(text.contains("kiln-ndarray = { path"), "{text}");
        assert!(!text.contains("tempfile"), "{text}");
    }

    #[test]
    fn the_workspaces_ndarray_and_tch_are_not_in_burn_0_23() {
        let all = crate::backends::all();
        let out: Vec<String> = left_out(all, "0.23.0-pre.1")
            .into_iter()
            .map(|(p, why)| {
                assert!(why.contains("not in Burn 0.23.0-pre.1"), "{why}");
                p
            })
            .collect();
        assert_eq!(out, ["kiln-ndarray", "kiln-tch"]);
        assert!(left_out(all, "0.22.1").is_empty());
        assert!(left_out(all, "0.22.0").is_empty());
    }

    #[test]
    fn an_overlay_lays_out_the_crates_a_burn_has() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        for (name, extra) in [("kiln-flex", "tests"), ("kiln-ndarray", "src")] {
            let dir = root.join("crates").join(name);
            std::fs::create_dir_all(dir.join("src")).unwrap();
            std::fs::create_dir_all(dir.join(extra)).unwrap();
            std::fs::write(
                dir.join("Cargo.toml"),
                format!("[package]\nname = \"{name}\"\n\n[dev-dependencies]\nx = \"1\"\n"),
            )
            .unwrap();
        }
        let overlay = tmp.path().join("overlay");
        std::fs::create_dir_all(&overlay).unwrap();
        // An earlier overlay's link to the whole crates directory is replaced.
        std::os::unix::fs::symlink(root.join("crates"), overlay.join("crates")).unwrap();
        lay_out(&root, &overlay, &["kiln-ndarray".into()]).unwrap();
        let flex = overlay.join("crates/kiln-flex");
        assert!(flex.join("src").is_symlink());
        assert!(!flex.join("tests").exists());
        let manifest = std::fs::read_to_string(flex.join("Cargo.toml")).unwrap();
        assert_eq!(manifest, "[package]\nname = \"kiln-flex\"\n\n");
        assert!(!overlay.join("crates/kiln-ndarray").exists());
        // Laid out again: the manifest is not written anew (cargo would rebuild the crate), and
        // a crate now left out goes.
        let before = std::fs::metadata(flex.join("Cargo.toml"))
            .unwrap()
            .modified()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        lay_out(&root, &overlay, &["kiln-ndarray".into()]).unwrap();
        let after = std::fs::metadata(flex.join("Cargo.toml"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
        // Laid out from another checkout sharing the overlay (a CI clone and a working tree
        // sharing one target directory): its links follow, or it would build stale sources.
        let clone = tmp.path().join("clone");
        std::fs::create_dir_all(clone.join("crates/kiln-flex/src")).unwrap();
        std::fs::write(
            clone.join("crates/kiln-flex/Cargo.toml"),
            "[package]\nname = \"kiln-flex\"\n",
        )
        .unwrap();
        lay_out(&clone, &overlay, &[]).unwrap();
        assert_eq!(
            std::fs::read_link(flex.join("src")).unwrap(),
            clone.join("crates/kiln-flex/src")
        );
        lay_out(
            &root,
            &overlay,
            &["kiln-ndarray".into(), "kiln-flex".into()],
        )
        .unwrap();
        assert!(!flex.exists());
    }
}
