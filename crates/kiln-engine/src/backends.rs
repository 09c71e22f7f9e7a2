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
    /// CubeCL's LLVM (cubecl-llvm, under Burn's CubeCL CPU backend): built with the crate
    /// feature named here where that LLVM is in place (`cargo xtask setup-cubecl-llvm`, or
    /// tracel-llvm-bundler's own download), or where `KILN_BUILD_<FEATURE>=1` asks anyway.
    Llvm(String),
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
        build_anyway_var(&self.feature)
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
            Requirement::Llvm(feature) => feature,
        }
    }

    /// `Ok` when it is met here, else what is missing and how to get it.
    pub fn met(&self) -> Result<(), String> {
        match self {
            Requirement::Libtorch => torch::find().map(|_| ()),
            Requirement::Driver(d) => d.met(),
            Requirement::Llvm(feature) => llvm_met(feature),
        }
    }
}

/// `KILN_BUILD_<FEATURE>`: the variable that builds a runner whose requirement is not met here.
fn build_anyway_var(feature: &str) -> String {
    format!("KILN_BUILD_{}", feature.to_uppercase().replace('-', "_"))
}

/// `Ok` when CubeCL's LLVM is in place (or `KILN_BUILD_<FEATURE>=1` asks for the build anyway),
/// else what is missing and the command that fixes it.
fn llvm_met(feature: &str) -> Result<(), String> {
    let var = build_anyway_var(feature);
    if std::env::var(&var).as_deref() == Ok("1") || crate::cubecl_llvm::installed(&workspace_root())
    {
        return Ok(());
    }
    Err(format!(
        "CubeCL's LLVM is not set up: its build would download LLVM from github.com; install \
         Debian's (`apt-get install llvm-22-dev libpolly-22-dev libzstd-dev liblld-22-dev`) and \
         run `cargo xtask setup-cubecl-llvm` (docs/burn-cpu.md); {var}=1 builds the runner anyway"
    ))
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
    /// The newest Burn that has it (`last-burn`), for a backend Burn dropped; `None`: every Burn.
    pub last_burn: Option<String>,
}

impl Backend {
    /// `Err` with the row's reason when Burn `version` lacks it: a version newer than its
    /// `last-burn` ("not in Burn 0.23.0-pre.1 (its newest Burn is 0.22.1)"). A version that does
    /// not parse as semver is taken to have it (the build says otherwise, if it must).
    pub fn in_burn(&self, version: &str) -> Result<(), String> {
        use cargo_metadata::semver::Version;
        let Some(last) = &self.last_burn else {
            return Ok(());
        };
        match (Version::parse(version), Version::parse(last)) {
            (Ok(v), Ok(l)) if v > l => Err(format!(
                "not in Burn {version} (the newest Burn with {} is {last})",
                self.name
            )),
            _ => Ok(()),
        }
    }

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
    /// `libtorch`, `driver` with a `driver` table, or `llvm` with `feature`.
    #[serde(default)]
    requires: Option<Requires>,
    /// The crate feature that links a backend with `requires = "llvm"`.
    #[serde(default)]
    feature: Option<String>,
    /// Runner crates of one group are built (and tested) in one cargo invocation, so they
    /// share one Burn build with their backends' features together; a crate of no group is
    /// built alone, with only its own.
    #[serde(default, rename = "build-group")]
    build_group: Option<String>,
    #[serde(default)]
    driver: Option<Driver>,
    /// The newest Burn that has the backend, once Burn has dropped it (`"0.22.1"` for ndarray
    /// and tch): a newer Burn builds no runner for it, and its rows say so.
    #[serde(default, rename = "last-burn")]
    last_burn: Option<String>,
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
    Llvm,
}

/// The PyTorch reference runner: a Python package directory that the torch environment's
/// interpreter runs (`python pytorch/kiln_torch`, its `__main__.py`).
pub const REFERENCE_RUNNER: &str = "pytorch/kiln_torch";

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
        last_burn: None,
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
                 and may have default = true|false, order = N, requires = \"libtorch\", \
                 \"driver\" (with a [package.metadata.kiln.driver] table: library, feature, \
                 install) or \"llvm\" (with feature = \"...\")"
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
        let requires = match (declared.requires, declared.driver, declared.feature) {
            (None, None, None) => None,
            (Some(Requires::Libtorch), None, None) => Some(Requirement::Libtorch),
            (Some(Requires::Driver), Some(d), None) => Some(Requirement::Driver(d)),
            (Some(Requires::Llvm), None, Some(f)) => Some(Requirement::Llvm(f)),
            (Some(Requires::Llvm), _, _) => bail!(
                "{manifest}: requires = \"llvm\" needs feature = \"...\" (the crate feature \
                 that links the backend) and no driver table"
            ),
            (_, None, Some(_)) => {
                bail!("{manifest}: feature = \"...\" goes with requires = \"llvm\"")
            }
            (Some(Requires::Driver), None, _) => bail!(
                "{manifest}: requires = \"driver\" needs a [package.metadata.kiln.driver] table \
                 (library = \"libX.so\", feature = \"...\", install = \"...\")"
            ),
            (_, Some(_), _) => bail!(
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
            last_burn: declared.last_burn,
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
mod tests;
