//! The backends Kiln knows: declared by their crates (`[package.metadata.kiln]`), what each
//! needs to build, and which are in the default matrix (runners: `runners.rs`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use cargo_metadata::Metadata;
use serde::Deserialize;

use crate::torch;
use crate::workspace::workspace_root;

/// What a backend crate needs before it can be built, beyond Rust and a C compiler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// libtorch 2.9.0 (`cargo xtask setup-libtorch`): built with the crate's `libtorch`
    /// feature, in a target directory of its own.
    Libtorch,
    /// A GPU driver library its runtime loads when a device opens (`libcuda.so.1`,
    /// `libamdhip64.so`): built with the crate feature that links the backend, in a target
    /// directory of its own, so no other runner's Burn carries it.
    Driver(Driver),
}

/// `[package.metadata.kiln.driver]` of a crate with `requires = "driver"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Driver {
    /// The library that tells the driver is installed (`libcuda.so.1`).
    pub library: String,
    /// The crate feature that links the Burn backend (`cuda`); also names its target dir and
    /// the variable that builds it without the driver (`KILN_BUILD_CUDA=1`).
    pub feature: String,
    /// What a user installs to get the library (`the NVIDIA driver`).
    pub install: String,
}

impl Driver {
    /// The variable that builds the runner where the driver is missing (`KILN_BUILD_CUDA`).
    pub fn build_anyway_var(&self) -> String {
        format!(
            "KILN_BUILD_{}",
            self.feature.to_uppercase().replace('-', "_")
        )
    }

    /// `Ok` when the runner can be built here: the driver library loads, or
    /// `KILN_BUILD_<FEATURE>=1` asks for the build anyway (a kit for another machine; the runner
    /// then reports the driver missing when it runs).
    pub fn met(&self) -> Result<(), String> {
        let var = self.build_anyway_var();
        if std::env::var(&var).as_deref() == Ok("1") {
            return Ok(());
        }
        match kiln_machine::driver_missing(
            &self.feature,
            &self.library,
            &self.install,
            &format!("; {var}=1 builds the runner anyway"),
        ) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

impl Requirement {
    /// The crate feature that turns the requirement's backend on.
    pub fn feature(&self) -> &str {
        match self {
            Requirement::Libtorch => "libtorch",
            Requirement::Driver(d) => &d.feature,
        }
    }

    /// `Ok` when it is met here, else what is missing and how to get it.
    pub fn met(&self) -> Result<(), String> {
        match self {
            Requirement::Libtorch => torch::find().map(|_| ()),
            Requirement::Driver(d) => d.met(),
        }
    }
}

/// How a backend's runner comes to exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A workspace package with a runner binary of the same name.
    Cargo {
        package: String,
        requires: Option<Requirement>,
    },
    /// A Python script run by the torch environment's interpreter.
    Python { script: &'static str },
}

/// One backend of the matrix.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Kiln's name (`--backends`).
    pub name: String,
    pub source: Source,
    /// What it runs on.
    pub summary: String,
    /// True when `bench-all` includes it by default.
    pub default: bool,
    /// Position in tables and in the search for a CPU fallback (smaller first).
    pub order: i64,
    /// The crates built together with it (`build-group` of its declaration).
    pub build_group: Option<String>,
}

impl Backend {
    /// True when it needs libtorch or PyTorch.
    pub fn needs_torch(&self) -> bool {
        matches!(
            self.source,
            Source::Cargo {
                requires: Some(Requirement::Libtorch),
                ..
            } | Source::Python { .. }
        )
    }
}

/// `[package.metadata.kiln]` of a backend crate: how the crate declares itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    /// Kiln's name of the backend (`--backends NAME`).
    backend: String,
    summary: String,
    /// In `bench-all`'s default matrix: `true`, `false`, or `"gpu"` (only where this machine
    /// has a GPU; a run that names the backend still builds it).
    #[serde(default)]
    default: InMatrix,
    /// Position in tables (smaller first).
    #[serde(default)]
    order: i64,
    /// `libtorch`, or `driver` with a `driver` table.
    #[serde(default)]
    requires: Option<Requires>,
    /// Runner crates of one group are built (and tested) in one cargo invocation, so they
    /// share one Burn build with their backends' features together; a crate of no group is
    /// built alone, with only its own.
    #[serde(default, rename = "build-group")]
    build_group: Option<String>,
    #[serde(default)]
    driver: Option<Driver>,
}

/// `default` of a backend crate's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(untagged)]
enum InMatrix {
    #[default]
    #[serde(skip)]
    Never,
    Always(bool),
    When(Condition),
}

/// What makes a backend part of the default matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Condition {
    /// This machine has a GPU device ([`gpu_here`]).
    Gpu,
}

/// Why this machine is thought to have a GPU (a device node of a GPU driver, or an OS whose
/// machines all have one), or `None`. A Vulkan driver on the CPU (Mesa's lavapipe) is no GPU:
/// wgpu runs there, slowly, only when a run names it.
pub fn gpu_here() -> Option<String> {
    if cfg!(any(target_os = "macos", target_os = "windows")) {
        return Some(format!("{} has a GPU", std::env::consts::OS));
    }
    let nodes = ["/dev/nvidia0", "/dev/kfd"]
        .into_iter()
        .map(PathBuf::from)
        .chain(
            std::fs::read_dir("/dev/dri")
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("renderD"))
                }),
        );
    nodes
        .into_iter()
        .find(|p| p.exists())
        .map(|p| format!("{} exists", p.display()))
}

/// The names `requires` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Requires {
    Libtorch,
    Driver,
}

/// The PyTorch reference runner: a Python package directory that the torch environment's
/// interpreter runs (`python bench/pytorch/kiln_torch`, its `__main__.py`).
pub const REFERENCE_RUNNER: &str = "bench/pytorch/kiln_torch";

/// The reference runner's source files, relative to the workspace root (what a GPU kit carries).
pub fn reference_files() -> Result<Vec<String>> {
    let dir = workspace_root().join(REFERENCE_RUNNER);
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
    {
        let name = entry?.file_name().to_string_lossy().into_owned();
        // The code, and the contract's schema it validates requests and records against.
        if name.ends_with(".py") || name.ends_with(".json") {
            files.push(format!("{REFERENCE_RUNNER}/{name}"));
        }
    }
    files.sort();
    Ok(files)
}

/// The PyTorch reference runner: not a Burn backend, so no crate declares it.
fn pytorch() -> Backend {
    Backend {
        name: "pytorch".into(),
        source: Source::Python {
            script: REFERENCE_RUNNER,
        },
        summary: "the same protocol in PyTorch (the reference to beat)".into(),
        default: true,
        order: i64::MAX,
        build_group: None,
    }
}

/// The backends declared by the packages of `cargo metadata`'s JSON (`[package.metadata.kiln]`
/// of a package with a binary of its own name), then the PyTorch reference, in table order.
pub fn from_metadata(metadata: &Metadata) -> Result<Vec<Backend>> {
    let mut found = Vec::new();
    for package in &metadata.packages {
        let Some(kiln) = package.metadata.get("kiln") else {
            continue;
        };
        let name = package.name.to_string();
        let manifest = package.manifest_path.as_str();
        let declared: Declared = serde_json::from_value(kiln.clone()).with_context(|| {
            format!(
                "{manifest}: [package.metadata.kiln] must have backend = \"NAME\", summary = \"...\", \
                 and may have default = true|false, order = N, requires = \"libtorch\" or \
                 \"driver\" (with a [package.metadata.kiln.driver] table: library, feature, \
                 install)"
            )
        })?;
        let has_runner = package.targets.iter().any(|t| t.name == name && t.is_bin());
        if !has_runner {
            bail!(
                "{manifest}: declares Kiln backend {:?} but has no binary named {name} \
                 (add src/main.rs calling kiln_core::runner::main)",
                declared.backend
            );
        }
        let requires = match (declared.requires, declared.driver) {
            (None, None) => None,
            (Some(Requires::Libtorch), None) => Some(Requirement::Libtorch),
            (Some(Requires::Driver), Some(d)) => Some(Requirement::Driver(d)),
            (Some(Requires::Driver), None) => bail!(
                "{manifest}: requires = \"driver\" needs a [package.metadata.kiln.driver] table \
                 (library = \"libX.so\", feature = \"...\", install = \"...\")"
            ),
            (_, Some(_)) => bail!(
                "{manifest}: a [package.metadata.kiln.driver] table goes with requires = \"driver\""
            ),
        };
        if found.iter().any(|b: &Backend| b.name == declared.backend) {
            bail!(
                "{manifest}: backend name {:?} is declared by two packages",
                declared.backend
            );
        }
        found.push(Backend {
            name: declared.backend,
            source: Source::Cargo {
                package: name,
                requires,
            },
            summary: declared.summary,
            build_group: declared.build_group,
            default: match declared.default {
                InMatrix::Never | InMatrix::Always(false) => false,
                InMatrix::Always(true) => true,
                InMatrix::When(Condition::Gpu) => gpu_here().is_some(),
            },
            order: declared.order,
        });
    }
    found.push(pytorch());
    found.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name)));
    Ok(found)
}

/// The backends of the workspace at `root`, discovered from its packages' manifests.
pub fn discover(root: &Path) -> Result<Vec<Backend>> {
    from_metadata(&metadata(root)?)
}

/// `cargo metadata` of the workspace at `root` (its own packages), or, where `KILN_BACKENDS_FILE`
/// names one, that file: a GPU kit carries its backends' metadata, having no cargo to ask.
pub fn metadata(root: &Path) -> Result<Metadata> {
    if let Some(file) = std::env::var_os("KILN_BACKENDS_FILE") {
        let file = PathBuf::from(file);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("KILN_BACKENDS_FILE={}: cannot read it", file.display()))?;
        return serde_json::from_str(&text).with_context(|| {
            format!(
                "KILN_BACKENDS_FILE={}: not the JSON `cargo xtask gpu-kit` writes",
                file.display()
            )
        });
    }
    // cargo_metadata runs the cargo that runs xtask (`CARGO`), as `workspace::cargo` does.
    cargo_metadata::MetadataCommand::new()
        .current_dir(root)
        .no_deps()
        .other_options(vec!["--offline".to_string()])
        .exec()
        .with_context(|| {
            format!(
                "`cargo metadata` failed in {}, so the backend crates cannot be found",
                root.display()
            )
        })
}

/// Every backend Kiln knows, in the order tables list them: discovered once per process.
pub fn all() -> &'static [Backend] {
    static ALL: OnceLock<Vec<Backend>> = OnceLock::new();
    ALL.get_or_init(|| match discover(&workspace_root()) {
        Ok(found) => found,
        Err(e) => {
            eprintln!(
                "kiln: cannot list the backend crates: {e:#}; only the PyTorch reference is known"
            );
            vec![pytorch()]
        }
    })
}

/// Packages gathered by build group (`(group, package)` pairs, in order of first appearance):
/// the packages of one group together, a package of no group alone, each package once.
pub fn by_build_group<'a>(
    items: impl IntoIterator<Item = (Option<&'a str>, &'a str)>,
) -> Vec<Vec<&'a str>> {
    let mut groups: Vec<(Option<&str>, Vec<&str>)> = Vec::new();
    for (group, package) in items {
        if groups.iter().any(|(_, members)| members.contains(&package)) {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| g.is_some() && *g == group) {
            Some((_, members)) => members.push(package),
            None => groups.push((group, vec![package])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// Backend names, comma-separated, for messages.
pub fn names() -> String {
    all()
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The backend called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<&'static Backend> {
    all()
        .iter()
        .find(|b| b.name == name)
        .with_context(|| format!("unknown backend {name:?}; known: {}", names()))
}

/// Why a known backend cannot be built or run on this machine, if it cannot.
pub fn unbuildable(b: &Backend) -> Option<String> {
    match &b.source {
        Source::Cargo {
            requires: Some(r), ..
        } => r.met().err(),
        Source::Cargo { requires: None, .. } => None,
        Source::Python { .. } => torch::reference_python_problem(),
    }
}

/// `cargo metadata` of `packages` (JSON objects with what a test needs: name, manifest_path,
/// targets with name and kind, metadata), the fields cargo always writes filled in.
#[cfg(test)]
pub fn fake_metadata(packages: serde_json::Value) -> Metadata {
    let packages: Vec<serde_json::Value> = packages
        .as_array()
        .expect("a list of packages")
        .iter()
        .map(|p| {
            let mut full = serde_json::json!({
                "version": "0.1.0", "dependencies": [], "features": {}, "targets": [],
                "id": format!("path+file:///w#{}@0.1.0", p["name"].as_str().unwrap_or("x")),
            });
            for (k, v) in p.as_object().expect("a package object") {
                full[k] = v.clone();
            }
            let name = full["name"].clone();
            for t in full["targets"].as_array_mut().expect("targets") {
                t["src_path"] = serde_json::json!("/w/src/main.rs");
                if t.get("name").is_none() {
                    t["name"] = name.clone();
                }
            }
            full
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "packages": packages, "workspace_members": [], "workspace_root": "/w",
        "target_directory": "/w/target", "version": 1,
    }))
    .expect("cargo metadata's shape")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runners::runner;
    use crate::workspace::{prebuilt_dir, target_dir};

    /// Copy `from` to `to`, leaving out build outputs.
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let (src, dst) = (entry.path(), to.join(entry.file_name()));
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() != "target" {
                    copy_tree(&src, &dst);
                }
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }

    #[test]
    fn a_backend_crate_copied_under_a_new_name_is_discovered_with_no_other_edit() {
        // A scratch workspace with this one's manifest and crates, plus kiln-flex copied as
        // kiln-newname with only its own Cargo.toml renamed: what docs/backends.md tells a
        // user to do. Discovery reads real `cargo metadata` output of that workspace.
        let tmp = tempfile::tempdir().unwrap();
        let root = workspace_root();
        for file in ["Cargo.toml", "Cargo.lock"] {
            std::fs::copy(root.join(file), tmp.path().join(file)).unwrap();
        }
        copy_tree(&root.join("crates"), &tmp.path().join("crates"));
        copy_tree(&root.join("xtask"), &tmp.path().join("xtask"));
        let new = tmp.path().join("crates/kiln-newname");
        copy_tree(&root.join("crates/kiln-flex"), &new);
        let manifest = std::fs::read_to_string(new.join("Cargo.toml")).unwrap();
        let renamed = manifest
            .replace("name = \"kiln-flex\"", "name = \"kiln-newname\"")
            .replace("backend = \"flex\"", "backend = \"newname\"")
            .replace("default = true", "default = false");
        assert_ne!(manifest, renamed, "the copy must declare itself anew");
        std::fs::write(new.join("Cargo.toml"), renamed).unwrap();

        let found = discover(tmp.path()).unwrap();
        let names: Vec<&str> = found.iter().map(|b| b.name.as_str()).collect();
        for expected in ["flex", "ndarray", "wgpu", "tch", "newname", "pytorch"] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        let newname = found.iter().find(|b| b.name == "newname").unwrap();
        assert_eq!(
            newname.source,
            Source::Cargo {
                package: "kiln-newname".into(),
                requires: None
            }
        );
        assert!(!newname.default && !newname.needs_torch());
        let tch = found.iter().find(|b| b.name == "tch").unwrap();
        assert!(tch.needs_torch());
        let wgpu = found.iter().find(|b| b.name == "wgpu").unwrap();
        assert_eq!(
            wgpu.default,
            gpu_here().is_some(),
            "wgpu joins the default matrix only where a GPU is"
        );
        for (name, package, library) in [
            ("cuda", "kiln-cuda", "libcuda.so.1"),
            ("rocm", "kiln-rocm", "libamdhip64.so"),
        ] {
            let b = found.iter().find(|b| b.name == name).unwrap();
            let Source::Cargo {
                package: p,
                requires: Some(Requirement::Driver(d)),
            } = &b.source
            else {
                panic!("{name}: {:?}", b.source)
            };
            assert_eq!(
                (p.as_str(), d.library.as_str(), d.feature.as_str()),
                (package, library, name)
            );
        }
        assert_eq!(names.last(), Some(&"pytorch"), "the reference comes last");
    }

    #[test]
    fn packages_gather_by_build_group_each_once_and_in_order() {
        let groups = by_build_group([
            (Some("cpu"), "kiln-flex"),
            (None, "kiln-wgpu"),
            (Some("cpu"), "kiln-ndarray"),
            (None, "kiln-remote"),
            (Some("cpu"), "kiln-flex"),
            (None, "kiln-wgpu"),
        ]);
        assert_eq!(
            groups,
            vec![
                vec!["kiln-flex", "kiln-ndarray"],
                vec!["kiln-wgpu"],
                vec!["kiln-remote"]
            ]
        );
    }

    #[test]
    fn a_declared_default_is_a_yes_a_no_or_a_condition() {
        let parse = |v: serde_json::Value| {
            serde_json::from_value::<Declared>(
                serde_json::json!({"backend": "x", "summary": "s", "default": v}),
            )
            .map(|d| d.default)
        };
        assert_eq!(parse(true.into()).unwrap(), InMatrix::Always(true));
        assert_eq!(parse(false.into()).unwrap(), InMatrix::Always(false));
        assert_eq!(parse("gpu".into()).unwrap(), InMatrix::When(Condition::Gpu));
        assert!(parse("sometimes".into()).is_err());
        let absent: Declared =
            serde_json::from_value(serde_json::json!({"backend": "x", "summary": "s"})).unwrap();
        assert_eq!(absent.default, InMatrix::Never);
    }

    #[test]
    fn a_driver_gated_runner_is_built_where_its_driver_loads_and_elsewhere_says_why() {
        for (name, library, var) in [
            ("cuda", "libcuda.so.1", "KILN_BUILD_CUDA=1"),
            ("rocm", "libamdhip64.so", "KILN_BUILD_ROCM=1"),
        ] {
            let b = find(name).expect("the crate declares its backend");
            let Source::Cargo {
                requires: Some(r), ..
            } = &b.source
            else {
                panic!("{name} declares no requirement")
            };
            match (r.met(), unbuildable(b), runner(b)) {
                // A machine with the driver (or KILN_BUILD_X=1): built in the target dir.
                (Ok(()), None, Ok(run)) if prebuilt_dir().is_none() => {
                    assert!(run.program.starts_with(target_dir()), "{run:?}");
                }
                (Ok(()), None, Ok(_)) => {}
                // Without one (this project's CI): doctor and bench-all name the missing driver.
                (Err(why), Some(skip), Err(no_runner)) => {
                    assert!(why.contains(library) && why.contains(var), "{why}");
                    assert_eq!(skip, why);
                    assert_eq!(no_runner, why);
                }
                other => panic!("{name}: inconsistent: {other:?}"),
            }
        }
    }

    #[test]
    fn a_driver_requirement_needs_its_table_and_the_table_its_requirement() {
        let package = |kiln: serde_json::Value| {
            fake_metadata(serde_json::json!([{
                "name": "kiln-x",
                "manifest_path": "/w/crates/kiln-x/Cargo.toml",
                "metadata": {"kiln": kiln},
                "targets": [{"name": "kiln-x", "kind": ["bin"]}],
            }]))
        };
        let driver = serde_json::json!({"library": "libx.so", "feature": "x-gpu", "install": "X"});
        let ok = from_metadata(&package(serde_json::json!({
            "backend": "x", "summary": "X", "requires": "driver", "driver": driver.clone()
        })))
        .unwrap();
        let Source::Cargo {
            requires: Some(Requirement::Driver(d)),
            ..
        } = &ok[0].source
        else {
            panic!("{:?}", ok[0].source)
        };
        assert_eq!(d.build_anyway_var(), "KILN_BUILD_X_GPU");
        let why = d.met().unwrap_err();
        assert_eq!(
            why,
            "no X-GPU driver (libx.so not found: install X; KILN_BUILD_X_GPU=1 builds the \
             runner anyway)"
        );
        let err = from_metadata(&package(serde_json::json!({
            "backend": "x", "summary": "X", "requires": "driver"
        })))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("kiln-x/Cargo.toml") && err.contains("driver] table"),
            "{err}"
        );
        let err = from_metadata(&package(serde_json::json!({
            "backend": "x", "summary": "X", "driver": driver
        })))
        .unwrap_err()
        .to_string();
        assert!(err.contains("requires = \"driver\""), "{err}");
    }

    #[test]
    fn a_declaration_without_a_runner_or_with_a_typo_is_refused_by_name() {
        let package = |kiln: serde_json::Value, bin: &str| {
            fake_metadata(serde_json::json!([{
                "name": "kiln-x",
                "manifest_path": "/w/crates/kiln-x/Cargo.toml",
                "metadata": {"kiln": kiln},
                "targets": [{"name": bin, "kind": ["bin"]}],
            }]))
        };
        let good = serde_json::json!({"backend": "x", "summary": "X"});
        assert_eq!(
            from_metadata(&package(good.clone(), "kiln-x")).unwrap()[0].name,
            "x"
        );
        let err = from_metadata(&package(good, "other"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kiln-x/Cargo.toml") && err.contains("no binary"),
            "{err}"
        );
        let typo = serde_json::json!({"backend": "x", "summary": "X", "defualt": true});
        let err = format!("{:#}", from_metadata(&package(typo, "kiln-x")).unwrap_err());
        assert!(err.contains("defualt"), "{err}");
    }
}
