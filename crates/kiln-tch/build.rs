//! With the `libtorch` feature, bake libtorch's library directory into the runner's rpath so it
//! starts without LD_LIBRARY_PATH. The directory comes from LIBTORCH (a plain libtorch) or from
//! the Python that torch-sys asks under LIBTORCH_USE_PYTORCH.

use std::path::PathBuf;
use std::process::Command;

fn torch_lib_dir() -> Option<PathBuf> {
    if let Some(root) = std::env::var_os("LIBTORCH") {
        return Some(PathBuf::from(root).join("lib"));
    }
    // The interpreter torch-sys asks: `python` inside a virtual environment, else `python3`.
    let python = if std::env::var_os("VIRTUAL_ENV").is_some() {
        "python"
    } else {
        "python3"
    };
    let out = Command::new(python)
        .args([
            "-c",
            "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    if std::env::var_os("CARGO_FEATURE_LIBTORCH").is_none() {
        return;
    }
    match torch_lib_dir() {
        Some(dir) if cfg!(any(target_os = "linux", target_os = "macos")) => {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            println!("cargo:rustc-env=KILN_TORCH_LIB={}", dir.display());
        }
        _ => println!(
            "cargo:warning=kiln-tch: libtorch's directory not found; the runner will need \
             LD_LIBRARY_PATH (or PATH on Windows) to start"
        ),
    }
}
