//! The backends Kiln knows, how their runners are built, found and probed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_results::ProbeReport;

use crate::{torch, workspace_root};

/// How a backend's runner comes to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A workspace package with a runner binary; `torch` ones link libtorch.
    Cargo { package: &'static str, torch: bool },
    /// A Python script run by the torch environment's interpreter.
    Python { script: &'static str },
}

/// One backend of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    /// Kiln's name (`--backends`).
    pub name: &'static str,
    pub source: Source,
    /// What it runs on.
    pub summary: &'static str,
    /// True when `bench-all` includes it by default.
    pub default: bool,
}

impl Backend {
    /// The workspace package holding the runner, if it is a Rust one.
    pub fn package(&self) -> Option<&'static str> {
        match self.source {
            Source::Cargo { package, .. } => Some(package),
            Source::Python { .. } => None,
        }
    }

    /// True when it needs libtorch or PyTorch.
    pub fn needs_torch(&self) -> bool {
        matches!(
            self.source,
            Source::Cargo { torch: true, .. } | Source::Python { .. }
        )
    }
}

/// Every backend Kiln knows, in the order tables list them.
pub const BACKENDS: &[Backend] = &[
    Backend {
        name: "flex",
        source: Source::Cargo {
            package: "kiln-flex",
            torch: false,
        },
        summary: "Burn's pure-Rust CPU backend (SIMD, rayon threads)",
        default: true,
    },
    Backend {
        name: "ndarray",
        source: Source::Cargo {
            package: "kiln-ndarray",
            torch: false,
        },
        summary: "Burn's ndarray CPU backend (deprecated upstream)",
        default: true,
    },
    Backend {
        name: "wgpu",
        source: Source::Cargo {
            package: "kiln-wgpu",
            torch: false,
        },
        summary: "Burn's wgpu backend (Vulkan, Metal, DX12, WebGPU)",
        default: true,
    },
    Backend {
        name: "tch",
        source: Source::Cargo {
            package: "kiln-tch",
            torch: true,
        },
        summary: "Burn's libtorch backend (CPU, CUDA, MPS; deprecated upstream)",
        default: true,
    },
    Backend {
        name: "pytorch",
        source: Source::Python {
            script: "bench/pytorch/kiln_torch.py",
        },
        summary: "the same protocol in PyTorch (the reference to beat)",
        default: true,
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

/// Why a known backend cannot be built or run on this machine, if it cannot.
pub fn unbuildable(b: &Backend) -> Option<String> {
    if b.needs_torch() {
        return torch::find().err();
    }
    None
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

/// A program that runs cells of one backend: a binary, or an interpreter and a script.
#[derive(Debug, Clone)]
pub struct Runner {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// True when the runner reads the cell's data from a file xtask writes (`--data-file`).
    pub needs_data_file: bool,
}

impl Runner {
    /// A command starting the runner (its own arguments still to add).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// True when the runner's program exists.
    pub fn exists(&self) -> bool {
        self.program.is_file()
    }

    /// How to name it in messages.
    pub fn display(&self) -> String {
        let mut parts = vec![self.program.display().to_string()];
        parts.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        parts.join(" ")
    }
}

/// The runner of `b` (built or prebuilt binary, or the reference script), or why there is none.
pub fn runner(b: &Backend) -> Result<Runner, String> {
    let torch = if b.needs_torch() {
        Some(torch::find()?)
    } else {
        None
    };
    match b.source {
        Source::Cargo {
            package,
            torch: links_torch,
        } => {
            let exe = format!("{package}{}", std::env::consts::EXE_SUFFIX);
            let program = match (prebuilt_dir(), links_torch) {
                (Some(dir), _) => dir.join(exe),
                (None, false) => target_dir().join("release").join(exe),
                (None, true) => torch_target_dir().join("release").join(exe),
            };
            Ok(Runner {
                program,
                args: Vec::new(),
                env: torch.map(|t| t.run_env()).unwrap_or_default(),
                needs_data_file: false,
            })
        }
        Source::Python { script } => {
            let python = torch.and_then(|t| t.python).ok_or_else(|| {
                format!(
                    "no Python with torch {} for the reference runner: {}",
                    torch::TORCH_VERSION,
                    torch::HINT
                )
            })?;
            Ok(Runner {
                program: python,
                args: vec![workspace_root().join(script).into_os_string()],
                env: Vec::new(),
                needs_data_file: true,
            })
        }
    }
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Build every buildable runner. They are built the way `cargo xtask test` builds the
/// workspace (`--workspace --tests`): cargo unifies Burn's features over the packages and
/// dev-dependencies of one invocation, so building the runners any other way would compile
/// Burn a second time with another feature set. The libtorch runner is built on its own, so no
/// other runner ever links libtorch.
pub fn build_all() -> Result<()> {
    if let Some(dir) = prebuilt_dir() {
        eprintln!(
            "kiln: using prebuilt runners from {} (KILN_RUNNER_DIR)",
            dir.display()
        );
        return Ok(());
    }
    eprintln!(
        "kiln: building the runners in release mode; the first build takes a long time \
         (about 45 minutes on 2 cores)"
    );
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args([
        "build",
        "--release",
        "--quiet",
        "--workspace",
        "--tests",
    ]);
    let status = cmd
        .status()
        .context("cannot start cargo to build the runners")?;
    if !status.success() {
        bail!(
            "building the runners failed ({status}); the compiler output above says why. \
             `cargo build --release --workspace --tests` reproduces it"
        );
    }
    match torch::find() {
        Ok(t) => {
            for b in BACKENDS {
                if let Source::Cargo {
                    package,
                    torch: true,
                } = b.source
                {
                    let mut cmd = cargo();
                    cmd.current_dir(workspace_root())
                        .args(tch_build_args("build", package));
                    cmd.arg("--quiet");
                    for (k, v) in t.build_env() {
                        cmd.env(k, v);
                    }
                    let status = cmd.status().context("cannot start cargo")?;
                    if !status.success() {
                        bail!(
                            "building {package} against libtorch {} failed ({status}); the \
                             compiler output above says why",
                            t.lib_dir.display()
                        );
                    }
                }
            }
        }
        Err(why) => eprintln!("kiln: not building tch: {why}"),
    }
    Ok(())
}

/// Where libtorch runners are built: a target directory of their own, because their Burn
/// feature set (with `tch`) differs from the other runners'; sharing one directory would make
/// cargo rebuild Burn each time it switches between the two.
pub fn torch_target_dir() -> PathBuf {
    target_dir().join("libtorch")
}

/// The cargo arguments that build (`build`) or test (`test`) a libtorch runner; the two share
/// one build.
pub fn tch_build_args(command: &str, package: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        command,
        "--release",
        "-p",
        package,
        "--features",
        "libtorch",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if command == "build" {
        args.push("--tests".into());
    }
    args.push("--target-dir".into());
    args.push(torch_target_dir().display().to_string());
    args
}

/// Ask a built runner for its devices, with a time limit.
pub fn probe(runner: &Runner) -> Result<ProbeReport> {
    let mut child = runner
        .command()
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
