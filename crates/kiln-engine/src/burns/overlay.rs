//! A Burn to build against (`BurnSpec`) and its overlay workspace: made, checked, named.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use kiln_contract::BurnBuild;

use crate::workspace::{cargo, target_dir, workspace_root};

/// A Burn to build against, as given.
#[derive(Clone, Debug, PartialEq)]
pub enum BurnSpec {
    Version(String),
    Path(PathBuf),
}

impl FromStr for BurnSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Some(dir) = text.strip_prefix("path:") {
            if dir.is_empty() {
                return Err("path: needs a directory, e.g. path:../burn".into());
            }
            return Ok(BurnSpec::Path(PathBuf::from(dir)));
        }
        // MAJOR.MINOR.PATCH, with a pre-release after `-` (0.23.0-pre.1).
        let (core, pre) = text.split_once('-').unwrap_or((text, ""));
        let version_like = core.split('.').count() == 3
            && core
                .split('.')
                .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            && pre
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if version_like {
            Ok(BurnSpec::Version(text.to_string()))
        } else {
            Err(format!(
                "{text:?} is not a Burn: give a published version (0.22.1) or a local checkout \
                 (path:../burn)"
            ))
        }
    }
}

impl std::fmt::Display for BurnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BurnSpec::Version(v) => write!(f, "{v}"),
            BurnSpec::Path(p) => write!(f, "path:{}", p.display()),
        }
    }
}

/// A Burn ready to build: where its workspace is (this one, or an overlay) and what it is.
#[derive(Clone, Debug)]
pub struct Burn {
    pub build: BurnBuild,
    /// The overlay's directory; `None`: this workspace's own Burn.
    pub overlay: Option<PathBuf>,
    /// A short name for directories (`0.22.1`, `path-burn-1a2b3c4d`).
    pub slug: String,
}

impl Burn {
    /// The target directory of this Burn's runners: this workspace's for its own Burn; one
    /// shared by every overlay, so that a third Burn reuses the second's build of everything
    /// but Burn (each overlay's runners are copied to its `bin/` once built).
    pub fn target(&self) -> PathBuf {
        match &self.overlay {
            Some(_) => target_dir().join("burn").join("target"),
            None => target_dir(),
        }
    }
}

/// The `burn*` packages of a lock file, as `name@version`.
fn locked_burn_crates(lock: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut name: Option<&str> = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take())
            && (n == "burn" || n.starts_with("burn-"))
        {
            out.push(format!("{n}@{}", v.trim_matches('"')));
        }
    }
    out
}

/// Pin every Burn crate of the overlay to `version`: Burn's crates ask for each other with caret
/// requirements (`burn-core = "0.22.0"`), so pinning `burn` alone would keep the newer inner
/// crates of the lock. A member of the overlay that no runner build selects (`pin/`) asks for
/// `burn` at exactly that version and the lock is resolved (the crates a Burn no longer has,
/// burn-ndarray in 0.23, leave it); then for every `burn*` crate left in the lock, and it is
/// resolved again.
fn pin_burn_crates(overlay: &Path, version: &str) -> Result<()> {
    let pin = overlay.join("pin");
    std::fs::create_dir_all(&pin)?;
    std::fs::write(pin.join("lib.rs"), "")?;
    let write_pin = |names: &[String]| {
        let mut manifest = String::from(
            "[package]\nname = \"kiln-burn-pin\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[lib]\npath = \"lib.rs\"\n\n[dependencies]\n",
        );
        for n in names {
            manifest.push_str(&format!("{n} = \"={version}\"\n"));
        }
        super::crates::write_if_changed(&pin.join("Cargo.toml"), &manifest)
    };
    let update = || -> Result<()> {
        let out = cargo()
            .args(["update", "--workspace", "--manifest-path"])
            .arg(overlay.join("Cargo.toml"))
            .output()
            .context("cannot run cargo update")?;
        if !out.status.success() {
            bail!(
                "Burn {version}: {}",
                first_error(&String::from_utf8_lossy(&out.stderr))
            );
        }
        Ok(())
    };
    write_pin(&["burn".to_string()])?;
    update()?;
    let lock = std::fs::read_to_string(overlay.join("Cargo.lock"))?;
    let mut names: Vec<String> = locked_burn_crates(&lock)
        .into_iter()
        .filter_map(|p| p.split_once('@').map(|(n, _)| n.to_string()))
        .collect();
    names.sort();
    names.dedup();
    write_pin(&names)?;
    update()
}

/// The first line of cargo's output that says `error`, trimmed.
fn first_error(text: &str) -> String {
    text.lines()
        .find(|l| l.contains("error"))
        .unwrap_or_else(|| text.lines().next().unwrap_or(""))
        .trim()
        .to_string()
}

/// The version of Burn this workspace's manifest pins (`burn = { version = "=X" }`).
pub fn workspace_burn_version(manifest: &str) -> Option<String> {
    manifest
        .lines()
        .find(|l| l.trim_start().starts_with("burn = "))
        .and_then(|l| l.split("version = \"=").nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(str::to_string)
}

/// A Burn checkout's crates: (package name, version, directory) of every `burn*` package its
/// workspace (or `crates/*`) holds, read with `cargo metadata --no-deps`.
fn checkout_crates(dir: &Path) -> Result<Vec<(String, String, PathBuf)>> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        bail!(
            "{}: no Cargo.toml there; give a Burn checkout (the directory holding Burn's \
             workspace Cargo.toml and crates/)",
            dir.display()
        );
    }
    // cargo_metadata runs the cargo that runs xtask (`CARGO`), as `workspace::cargo` does.
    let meta = match cargo_metadata::MetadataCommand::new()
        .manifest_path(&manifest)
        .no_deps()
        .exec()
    {
        Ok(meta) => meta,
        Err(cargo_metadata::Error::CargoMetadata { stderr }) => bail!(
            "{}: cargo cannot read it as a workspace: {}",
            manifest.display(),
            first_error(&stderr)
        ),
        Err(e) => bail!("{}: cannot run cargo metadata: {e}", manifest.display()),
    };
    let crates: Vec<(String, String, PathBuf)> = meta
        .packages
        .iter()
        .filter(|p| p.name.as_str() == "burn" || p.name.starts_with("burn-"))
        .map(|p| {
            (
                p.name.to_string(),
                p.version.to_string(),
                p.manifest_path
                    .parent()
                    .map_or(PathBuf::from("."), |d| d.as_std_path().to_path_buf()),
            )
        })
        .collect();
    if !crates.iter().any(|(n, _, _)| n == "burn") {
        bail!(
            "{}: no `burn` package in that workspace; give a Burn checkout",
            dir.display()
        );
    }
    Ok(crates)
}

/// The default features of Burn's CubeCL backends that a record's runtime report assumes.
const CUBECL_DEFAULTS: [&str; 2] = ["autotune", "fusion"];

/// Which of [`CUBECL_DEFAULTS`] cargo leaves out of burn-cubecl in the overlay at `dir` (every
/// runner feature on, so every runner's Burn is seen): none for a published Burn, and for a
/// checkout whatever its manifests turned off. No burn-cubecl at all: none. `cargo tree`, not
/// `cargo metadata`: metadata unifies features across targets and dev-dependencies, so a
/// feature no build of the runners turns on can read as on.
fn cubecl_defaults_left_out(dir: &Path) -> Result<Vec<String>> {
    let manifest = dir.join("Cargo.toml");
    let out = cargo()
        .arg("tree")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--all-features", "-e", "features", "-i", "burn-cubecl"])
        .args(["--prefix", "none", "--depth", "1"])
        .output()
        .context("cannot run cargo tree")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("did not match any packages") {
            return Ok(Vec::new());
        }
        bail!(
            "{}: cargo tree cannot read it: {}",
            manifest.display(),
            first_error(&stderr)
        );
    }
    let on: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("burn-cubecl feature \""))
        .filter_map(|l| l.split('"').next())
        .collect();
    Ok(CUBECL_DEFAULTS
        .iter()
        .filter(|f| !on.contains(f))
        .map(|f| f.to_string())
        .collect())
}

/// The overlay manifest: this workspace's `manifest` with its runner crates only, every Burn
/// crate it pins (`burn`, `burn-train`, `burn-backend`, ...) pinned to `version`, and `patches`
/// (package name, directory) as `[patch.crates-io]`.
pub fn overlay_manifest(manifest: &str, version: &str, patches: &[(String, PathBuf)]) -> String {
    let mut out = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim_start();
        let line = if trimmed.starts_with("members = ") {
            "members = [\"crates/*\"]".to_string()
        } else if trimmed.starts_with("burn") && trimmed.contains("version = \"=") {
            match line.split_once("version = \"=") {
                Some((head, rest)) => {
                    let tail = rest.split_once('"').map_or("", |(_, t)| t);
                    format!("{head}version = \"={version}\"{tail}")
                }
                None => line.to_string(),
            }
        } else {
            line.to_string()
        };
        out.push_str(&line);
        out.push('\n');
    }
    if !patches.is_empty() {
        out.push_str("\n[patch.crates-io]\n");
        for (name, dir) in patches {
            out.push_str(&format!(
                "{name} = {{ path = {:?} }}\n",
                dir.display().to_string()
            ));
        }
    }
    out
}

/// The Burn version this workspace's Cargo.toml pins.
pub fn own_version() -> Result<String> {
    let path = workspace_root().join("Cargo.toml");
    let manifest = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    workspace_burn_version(&manifest).with_context(|| {
        format!(
            "{}: it pins no Burn version (burn = {{ version = \"=X\" }})",
            path.display()
        )
    })
}

/// A Burn's build, the crates to patch in (name, directory), and its slug.
type Prepared = (BurnBuild, Vec<(String, PathBuf)>, String);

/// A checkout's build (its path, version, git state), its crates to patch in, and its slug.
fn checkout(dir: &Path) -> Result<Prepared> {
    // As given, as BurnSpec's Display writes it.
    let spec = BurnSpec::Path(dir.to_path_buf()).to_string();
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--burn path:{}: no such directory", dir.display()))?;
    let crates = checkout_crates(&dir)?;
    let version = crates
        .iter()
        .find(|(n, _, _)| n == "burn")
        .map(|(_, v, _)| v.clone())
        .unwrap_or_default();
    let (revision, dirty) = kiln_machine::git_state(&dir);
    let name = dir
        .file_name()
        .map_or("burn".into(), |n| n.to_string_lossy().into_owned());
    let hash = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(dir.display().to_string().as_bytes());
        digest
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    Ok((
        BurnBuild {
            spec,
            version,
            path: Some(dir.display().to_string()),
            revision,
            dirty,
            without: Vec::new(),
        },
        crates.into_iter().map(|(n, _, d)| (n, d)).collect(),
        format!("path-{name}-{hash}"),
    ))
}

/// Make `spec` ready to build: this workspace's own Burn as it is; any other in its overlay
/// (written anew each time).
pub fn prepare(spec: &BurnSpec) -> Result<Burn> {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let own = workspace_burn_version(&manifest).context(
        "this workspace's Cargo.toml pins no Burn version (burn = { version = \"=X\" })",
    )?;
    let (build, patches, slug) = match spec {
        BurnSpec::Version(v) if *v == own => {
            let build = BurnBuild {
                spec: spec.to_string(),
                version: v.clone(),
                path: None,
                revision: None,
                dirty: None,
                without: Vec::new(),
            };
            return Ok(Burn {
                build,
                overlay: None,
                slug: v.clone(),
            });
        }
        BurnSpec::Version(v) => (
            BurnBuild {
                spec: spec.to_string(),
                version: v.clone(),
                path: None,
                revision: None,
                dirty: None,
                without: Vec::new(),
            },
            Vec::new(),
            v.clone(),
        ),
        BurnSpec::Path(dir) => checkout(dir)?,
    };
    let overlay = target_dir().join("burn").join(&slug);
    std::fs::create_dir_all(&overlay)
        .with_context(|| format!("cannot create {}", overlay.display()))?;
    let mut text = overlay_manifest(&manifest, &build.version, &patches);
    if matches!(spec, BurnSpec::Version(_)) {
        text = text.replace(
            "members = [\"crates/*\"]",
            "members = [\"crates/*\", \"pin\"]",
        );
    }
    super::crates::write_if_changed(&overlay.join("Cargo.toml"), &text)?;
    // The lock file keeps every other dependency where this workspace has it.
    let lock = overlay.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(root.join("Cargo.lock"), &lock)?;
    }
    // The backends this Burn lacks stay out of the overlay (their rows say so: `sides`).
    let left_out: Vec<String> = super::crates::left_out(crate::backends::all(), &build.version)
        .into_iter()
        .map(|(package, _)| package)
        .collect();
    super::crates::lay_out(&root, &overlay, &left_out)?;
    if matches!(spec, BurnSpec::Version(_)) {
        pin_burn_crates(&overlay, &build.version)?;
    }
    let mut build = build;
    build.without = cubecl_defaults_left_out(&overlay)?;
    Ok(Burn {
        build,
        overlay: Some(overlay),
        slug,
    })
}

/// `cargo xtask test --burn SPEC`: does Kiln compile against that Burn? `cargo check` of every
/// crate of its overlay (libraries and binaries: an overlay holds no tests), with the Learner,
/// and burn-cpu's LLVM backend where that LLVM is set up. Returns whether it compiled.
pub fn check(spec: &BurnSpec) -> Result<bool> {
    let burn = prepare(spec)?;
    let Some(overlay) = &burn.overlay else {
        bail!(
            "--burn {spec} is this workspace's own Burn: `cargo xtask test` without --burn tests \
             against it"
        );
    };
    let mut features = vec![format!("kiln-core/{}", crate::build::LEARNER)];
    for b in crate::backends::all() {
        if let crate::backends::Source::Cargo {
            package,
            requires: Some(r @ crate::backends::Requirement::Llvm(_)),
        } = &b.source
            && b.in_burn(&burn.build.version).is_ok()
            && r.met().is_ok()
        {
            features.push(format!("{package}/{}", r.feature()));
        }
    }
    eprintln!(
        "kiln: cargo check of Kiln against Burn {} in {} (features {})",
        burn.build.label(),
        overlay.display(),
        features.join(", ")
    );
    let status = cargo()
        .arg("check")
        .arg("--manifest-path")
        .arg(overlay.join("Cargo.toml"))
        .args([
            "--workspace",
            "--exclude",
            "kiln-burn-pin",
            "--lib",
            "--bins",
        ])
        .args(["--features", &features.join(",")])
        .arg("--target-dir")
        .arg(burn.target())
        .status()
        .context("cannot run cargo check")?;
    Ok(status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_say_what_a_spec_is() {
        assert_eq!("0.22.1".parse(), Ok(BurnSpec::Version("0.22.1".into())));
        assert_eq!(
            "0.23.0-pre.1".parse(),
            Ok(BurnSpec::Version("0.23.0-pre.1".into()))
        );
        assert_eq!(
            "path:../burn".parse(),
            Ok(BurnSpec::Path(PathBuf::from("../burn")))
        );
        for bad in [
            "latest",
            "0.22",
            "path:",
            "1.2.3;rm",
            "1.x.3",
            "0.22.1-pre;rm",
        ] {
            let err = bad.parse::<BurnSpec>().unwrap_err();
            assert!(err.contains("path:") || err.contains("directory"), "{err}");
        }
    }

    #[test]
    fn a_lock_files_burn_crates_are_listed_with_their_versions() {
        let lock = "[[package]]\nname = \"burn\"\nversion = \"0.22.1\"\n\n[[package]]\n\
                    name = \"burnish\"\nversion = \"1.0.0\"\n\n[[package]]\nname = \
                    \"burn-core\"\nversion = \"0.22.1\"\nsource = \"registry\"\n";
        assert_eq!(
            locked_burn_crates(lock),
            ["burn@0.22.1", "burn-core@0.22.1"]
        );
    }

    #[test]
    fn the_overlay_pins_the_burn_and_patches_a_checkouts_crates() {
        let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
        let own = workspace_burn_version(&manifest).unwrap();
        assert_eq!(own, "0.22.1");
        let text = overlay_manifest(
            &manifest,
            "0.23.0",
            &[(
                "burn-flex".into(),
                PathBuf::from("/src/burn/crates/burn-flex"),
            )],
        );
        assert!(text.contains("members = [\"crates/*\"]"), "{text}");
        // Pinned, with the rest of the line kept: Burn's default features stay off.
        assert!(
            text.contains("burn = { version = \"=0.23.0\", default-features = false, features"),
            "{text}"
        );
        assert!(
            text.contains("burn-train = { version = \"=0.23.0\""),
            "{text}"
        );
        assert!(
            text.contains("burn-backend = { version = \"=0.23.0\" }"),
            "{text}"
        );
        assert!(!text.contains("\"xtask\""));
        assert!(
            text.contains(
                "[patch.crates-io]\nburn-flex = { path = \"/src/burn/crates/burn-flex\" }"
            )
        );
    }

    /// A checkout whose burn-cubecl defaults leave autotune out is labelled so, read from
    /// cargo's resolved features (a path-only workspace: no registry is asked; the Burn crate
    /// outside it, as a checkout is, so it is no member whose every feature is turned on).
    #[test]
    fn a_build_without_autotune_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let file = tmp.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        };
        write(
            "ws/Cargo.toml",
            "[workspace]\nmembers = [\"runner\"]\nresolver = \"2\"\n",
        );
        write(
            "ws/runner/Cargo.toml",
            "[package]\nname = \"runner\"\nversion = \"0.1.0\"\n\n[dependencies]\n\
             burn-cubecl = { path = \"../../cubecl\" }\n",
        );
        write("ws/runner/src/lib.rs", "");
        write(
            "cubecl/Cargo.toml",
            "[package]\nname = \"burn-cubecl\"\nversion = \"0.1.0\"\n\n[features]\n\
             default = [\"fusion\"]\nautotune = []\nfusion = []\n",
        );
        write("cubecl/src/lib.rs", "");
        let ws = tmp.path().join("ws");
        assert_eq!(cubecl_defaults_left_out(&ws).unwrap(), ["autotune"]);
        let build = BurnBuild {
            spec: "path:../burn".into(),
            version: "0.22.1".into(),
            path: Some("/src/burn".into()),
            revision: Some("1a2b3c4d5e".into()),
            dirty: Some(true),
            without: vec!["autotune".into()],
        };
        assert_eq!(
            build.label(),
            "path:../burn (0.22.1, 1a2b3c4d dirty; without autotune)"
        );
    }

    #[test]
    fn a_directory_that_is_not_a_burn_checkout_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let err = prepare(&BurnSpec::Path(tmp.path().to_path_buf()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no Cargo.toml") && err.contains("checkout"),
            "{err}"
        );
        let err = prepare(&BurnSpec::Path(tmp.path().join("nowhere")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no such directory"), "{err}");
    }
}
