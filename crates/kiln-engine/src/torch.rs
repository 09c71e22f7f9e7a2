//! libtorch and PyTorch for the `tch` and `pytorch` backends: `cargo xtask setup-libtorch`
//! installs PyPI's torch wheel (which carries libtorch) into a virtual environment; the other
//! commands find it again, or a plain libtorch named by `LIBTORCH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The PyTorch version burn-tch 0.22.1 links against (through tch 0.22.0).
pub const TORCH_VERSION: &str = "2.9.0";

/// The `safetensors` package the PyTorch reference reads and writes weights with (verify,
/// inference), installed beside torch, with `packaging`, which its torch module imports
/// without declaring it.
pub const SAFETENSORS: [&str; 2] = ["safetensors==0.7.0", "packaging==25.0"];

/// What makes libtorch available, for messages.
pub const HINT: &str = "run `cargo xtask setup-libtorch` (or set LIBTORCH to a libtorch 2.9.0)";

/// Where `setup-libtorch` recorded its environment.
fn state_file() -> Option<PathBuf> {
    kiln_data::manifest::cache_dir().map(|d| d.join("libtorch.json"))
}

/// The default virtual environment: `<Kiln cache>/torch-2.9.0`.
pub fn default_venv() -> Option<PathBuf> {
    kiln_data::manifest::cache_dir().map(|d| d.join(format!("torch-{TORCH_VERSION}")))
}

#[derive(Serialize, Deserialize, Debug, Clone)]
struct State {
    venv: PathBuf,
}

/// A usable libtorch, and the Python that has it (if it came from a wheel).
#[derive(Debug, Clone)]
pub struct Torch {
    /// The virtual environment's interpreter (None for a plain `LIBTORCH`).
    pub python: Option<PathBuf>,
    pub venv: Option<PathBuf>,
    /// `LIBTORCH`, when libtorch is a plain directory.
    pub libtorch: Option<PathBuf>,
    /// Directory of libtorch's shared libraries.
    pub lib_dir: PathBuf,
    pub version: String,
}

fn python_in(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// Ask `python` for torch's version and library directory.
fn ask(python: &Path) -> Result<(String, PathBuf), String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import os, torch; print(torch.__version__); \
             print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} cannot import torch: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let version = lines.next().unwrap_or_default().trim().to_string();
    let lib = PathBuf::from(lines.next().unwrap_or_default().trim());
    Ok((version, lib))
}

/// The venv `KILN_TORCH_VENV` names, else the one `setup-libtorch` recorded, else the default.
fn venv_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(dir) = std::env::var_os("KILN_TORCH_VENV") {
        v.push(PathBuf::from(dir));
    }
    if let Some(state) = state_file()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| serde_json::from_str::<State>(&t).ok())
    {
        v.push(state.venv);
    }
    v.extend(default_venv());
    v
}

/// Find libtorch: `LIBTORCH`, else a virtual environment with torch 2.9.0. The error says why
/// none was found and what fixes it. Looked up once per process: asking a venv's Python means
/// importing torch, which takes seconds, and building, probing and running all ask.
pub fn find() -> Result<Torch, String> {
    static FOUND: std::sync::OnceLock<Result<Torch, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(look_up).clone()
}

fn look_up() -> Result<Torch, String> {
    if let Some(root) = std::env::var_os("LIBTORCH") {
        let root = PathBuf::from(root);
        let lib_dir = root.join("lib");
        if !lib_dir.is_dir() {
            return Err(format!(
                "LIBTORCH={} has no lib/ directory; point it at an unpacked libtorch {TORCH_VERSION}",
                root.display()
            ));
        }
        // The reference runner still needs a Python with torch: take the venv's if there is one.
        let python = venv_candidates()
            .into_iter()
            .map(|v| python_in(&v))
            .find(|p| p.is_file());
        return Ok(Torch {
            python,
            venv: None,
            libtorch: Some(root),
            lib_dir,
            version: TORCH_VERSION.into(),
        });
    }
    let mut why = Vec::new();
    for venv in venv_candidates() {
        let python = python_in(&venv);
        if !python.is_file() {
            continue;
        }
        match ask(&python) {
            Ok((version, lib_dir)) if version.starts_with(TORCH_VERSION) => {
                return Ok(Torch {
                    python: Some(python),
                    venv: Some(venv),
                    libtorch: None,
                    lib_dir,
                    version,
                });
            }
            Ok((version, _)) => why.push(format!(
                "{} has torch {version}, Kiln needs {TORCH_VERSION}",
                venv.display()
            )),
            Err(e) => why.push(e),
        }
    }
    let found = if why.is_empty() {
        "libtorch is not set up".to_string()
    } else {
        why.join("; ")
    };
    Err(format!("{found}: {HINT}"))
}

impl Torch {
    /// Environment for building kiln-tch: torch-sys asks this Python where libtorch is.
    pub fn build_env(&self) -> Vec<(OsString, OsString)> {
        let mut env = Vec::new();
        if let Some(root) = &self.libtorch {
            env.push(("LIBTORCH".into(), root.clone().into_os_string()));
            return env;
        }
        if let Some(venv) = &self.venv {
            env.push(("LIBTORCH_USE_PYTORCH".into(), "1".into()));
            env.push(("VIRTUAL_ENV".into(), venv.clone().into_os_string()));
            env.push(("PATH".into(), prepend_path(&venv.join("bin"))));
        }
        env
    }

    /// Environment for starting a libtorch-linked program (the rpath covers the runner itself;
    /// this also covers test binaries and a moved libtorch).
    pub fn run_env(&self) -> Vec<(OsString, OsString)> {
        let var = if cfg!(target_os = "macos") {
            "DYLD_LIBRARY_PATH"
        } else if cfg!(windows) {
            "PATH"
        } else {
            "LD_LIBRARY_PATH"
        };
        let mut paths = vec![self.lib_dir.clone()];
        if let Some(old) = std::env::var_os(var) {
            paths.extend(std::env::split_paths(&old));
        }
        let joined = std::env::join_paths(paths).unwrap_or_default();
        vec![(var.into(), joined)]
    }
}

fn prepend_path(dir: &Path) -> OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

/// `KILN_PYTORCH_PYTHON`: a Python with torch of any version for the PyTorch reference runner
/// (a GPU machine's own PyTorch, as the GPU kit uses it); in a GPU kit without it, `python3`
/// (that machine's PyTorch: the kit carries no libtorch). The tch backend still needs libtorch
/// 2.9.0 exactly; the reference runner records the torch version it ran.
pub fn reference_python() -> Option<PathBuf> {
    std::env::var_os("KILN_PYTORCH_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| crate::workspace::prebuilt_dir().map(|_| PathBuf::from("python3")))
}

/// Why the PyTorch reference cannot run here, if it cannot: the `KILN_PYTORCH_PYTHON` given
/// does not import torch, or (without one) no environment with torch 2.9.0 is set up.
pub fn reference_python_problem() -> Option<String> {
    static ASKED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ASKED
        .get_or_init(|| match reference_python() {
            Some(python) => ask(&python)
                .err()
                .map(|e| format!("KILN_PYTORCH_PYTHON: {e}")),
            None => find().err(),
        })
        .clone()
}

/// `safetensors` in `py`'s environment, from PyPI when it lacks it.
fn install_safetensors(py: &Path) -> Result<()> {
    let has = Command::new(py)
        .args(["-c", "import safetensors.torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has {
        return Ok(());
    }
    eprintln!(
        "kiln: installing {} from PyPI (the weights format)",
        SAFETENSORS.join(" ")
    );
    let status = Command::new(py)
        .args(["-m", "pip", "install", "--quiet"])
        .args(SAFETENSORS)
        .status()
        .with_context(|| format!("cannot run {}", py.display()))?;
    if !status.success() {
        bail!(
            "pip could not install {} ({status}); check the network access to PyPI",
            SAFETENSORS.join(" ")
        );
    }
    Ok(())
}

/// `cargo xtask setup-libtorch [--venv DIR] [--python PY]`.
pub fn setup(venv: Option<PathBuf>, python: &str) -> Result<()> {
    let venv = match venv.or_else(default_venv) {
        Some(v) => v,
        None => bail!("no cache directory (HOME unset?): pass --venv DIR"),
    };
    let py = python_in(&venv);
    if !py.is_file() {
        eprintln!("kiln: creating a virtual environment in {}", venv.display());
        let status = Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .with_context(|| format!("cannot run {python}: install Python 3 (python3-venv)"))?;
        if !status.success() {
            bail!(
                "`{python} -m venv {}` failed ({status}); on Debian/Ubuntu install python3-venv",
                venv.display()
            );
        }
    }
    match ask(&py) {
        Ok((v, _)) if v.starts_with(TORCH_VERSION) => {
            eprintln!("kiln: torch {v} already installed in {}", venv.display())
        }
        _ => {
            eprintln!(
                "kiln: installing torch=={TORCH_VERSION} from PyPI into {} (about 7 GB: the \
                 wheel carries libtorch and, on Linux, the CUDA libraries)",
                venv.display()
            );
            let status = Command::new(&py)
                .args(["-m", "pip", "install", "--quiet"])
                .arg(format!("torch=={TORCH_VERSION}"))
                .status()
                .with_context(|| format!("cannot run {}", py.display()))?;
            if !status.success() {
                bail!(
                    "pip could not install torch=={TORCH_VERSION} ({status}); check the network \
                     access to PyPI, or set LIBTORCH to a libtorch you have"
                );
            }
        }
    }
    install_safetensors(&py)?;
    let (version, lib) = ask(&py).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(file) = state_file() {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).ok();
        }
        std::fs::write(
            &file,
            serde_json::to_string_pretty(&State { venv: venv.clone() })?,
        )
        .with_context(|| format!("cannot record the environment in {}", file.display()))?;
    }
    eprintln!(
        "kiln: torch {version} ready in {} (libtorch in {}); bench-all now includes the tch \
         and pytorch backends",
        venv.display(),
        lib.display()
    );
    Ok(())
}
