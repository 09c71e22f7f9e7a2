//! The backends Kiln knows, how their runners are built, found and probed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_results::ProbeReport;

use crate::workspace_root;

/// One backend of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    /// Kiln's name (`--backends`).
    pub name: &'static str,
    /// The workspace package holding its runner; `None` for a backend with no crate yet.
    pub package: Option<&'static str>,
    /// What it runs on.
    pub summary: &'static str,
    /// True when `bench-all` includes it by default.
    pub default: bool,
}

/// Every backend Kiln knows, in the order tables list them.
pub const BACKENDS: &[Backend] = &[
    Backend {
        name: "flex",
        package: Some("kiln-flex"),
        summary: "Burn's pure-Rust CPU backend (SIMD, rayon threads)",
        default: true,
    },
    Backend {
        name: "ndarray",
        package: Some("kiln-ndarray"),
        summary: "Burn's ndarray CPU backend (deprecated upstream)",
        default: true,
    },
    Backend {
        name: "wgpu",
        package: None,
        summary: "Burn's wgpu backend (Metal, Vulkan, DX12, WebGPU)",
        default: false,
    },
    Backend {
        name: "tch",
        package: None,
        summary: "Burn's libtorch backend (CPU, CUDA, MPS)",
        default: false,
    },
    Backend {
        name: "pytorch",
        package: None,
        summary: "the same protocol in PyTorch (the reference)",
        default: false,
    },
];

/// Backend names, comma-separated, for messages.
pub fn names() -> String {
    BACKENDS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The backend called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<&'static Backend> {
    BACKENDS
        .iter()
        .find(|b| b.name == name)
        .with_context(|| format!("unknown backend {name:?}; known: {}", names()))
}

/// Why a known backend cannot be built in this workspace, if it cannot.
pub fn unbuildable(b: &Backend) -> Option<String> {
    match (b.package, b.name) {
        (Some(_), _) => None,
        (None, "pytorch") => {
            Some("the PyTorch reference runner (bench/pytorch) is planned, not built yet".into())
        }
        (None, name) => Some(format!(
            "no kiln-{name} crate in this workspace yet (planned)"
        )),
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
fn prebuilt_dir() -> Option<PathBuf> {
    std::env::var_os("KILN_RUNNER_DIR").map(PathBuf::from)
}

/// Where the release runner of `b` lands once built (or waits, prebuilt, in `KILN_RUNNER_DIR`).
pub fn runner_path(b: &Backend) -> Option<PathBuf> {
    let package = b.package?;
    let exe = format!("{package}{}", std::env::consts::EXE_SUFFIX);
    Some(match prebuilt_dir() {
        Some(dir) => dir.join(exe),
        None => target_dir().join("release").join(exe),
    })
}

/// Build every buildable runner in one cargo invocation. Building all of them, not just the
/// ones asked for, keeps Burn's feature set (the union over runners) the same from one command
/// to the next, so cargo never rebuilds Burn just because another backend was requested.
pub fn build_all() -> Result<()> {
    let packages: Vec<&str> = BACKENDS.iter().filter_map(|b| b.package).collect();
    if packages.is_empty() {
        return Ok(());
    }
    if let Some(dir) = prebuilt_dir() {
        eprintln!(
            "kiln: using prebuilt runners from {} (KILN_RUNNER_DIR)",
            dir.display()
        );
        return Ok(());
    }
    eprintln!(
        "kiln: building runners ({}) in release mode; the first build takes several minutes",
        packages.join(", ")
    );
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root())
        .args(["build", "--release", "--quiet"]);
    for p in &packages {
        cmd.args(["-p", p]);
    }
    let status = cmd
        .status()
        .context("cannot start cargo to build the runners")?;
    if !status.success() {
        bail!(
            "building the runners failed ({status}); the compiler output above says why. \
             `cargo build --release -p {}` reproduces it",
            packages.join(" -p ")
        );
    }
    Ok(())
}

/// Ask a built runner for its devices, with a time limit.
pub fn probe(runner: &Path) -> Result<ProbeReport> {
    let mut child = Command::new(runner)
        .arg("--probe")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", runner.display()))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} --probe did not answer within 120 s", runner.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| {
            format!(
                "{} --probe printed no report ({}); stderr: {}",
                runner.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    serde_json::from_str(line)
        .with_context(|| format!("{} --probe printed an unreadable report", runner.display()))
}
