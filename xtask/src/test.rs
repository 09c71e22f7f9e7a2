//! `cargo xtask test`: the README's test command. Cargo alone cannot run the libtorch tests
//! (they need libtorch found and its build environment set), so this runs the workspace's
//! tests, then kiln-tch's against libtorch when it is set up.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{torch, workspace_root};

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Run the tests; `extra` goes to every `cargo test` after `--`.
pub fn run(extra: &[String]) -> Result<bool> {
    let torch = torch::find();
    let require = std::env::var_os("KILN_REQUIRE_TORCH").is_some_and(|v| v == "1");
    if let (Err(why), true) = (&torch, require) {
        bail!("KILN_REQUIRE_TORCH=1 but {why}");
    }

    let mut cmd = cargo();
    cmd.args(["test", "--release", "--workspace"]);
    if let Ok(t) = &torch
        && let Some(py) = &t.python
    {
        // The PyTorch reference runner's test uses this interpreter.
        cmd.env("KILN_TORCH_PYTHON", py);
    }
    cmd.arg("--").args(extra);
    eprintln!("kiln: cargo test --release --workspace");
    let status = cmd.status().context("cannot start cargo test")?;
    if !status.success() {
        return Ok(false);
    }

    match &torch {
        Ok(t) => {
            let mut cmd = cargo();
            cmd.args(crate::build::tch_build_args("test", "kiln-tch"));
            for (k, v) in t.build_env().into_iter().chain(t.run_env()) {
                cmd.env(k, v);
            }
            cmd.arg("--").args(extra);
            eprintln!(
                "kiln: cargo test --release -p kiln-tch --features libtorch (libtorch {} in {})",
                t.version,
                t.lib_dir.display()
            );
            let status = cmd.status().context("cannot start cargo test")?;
            Ok(status.success())
        }
        Err(why) => {
            eprintln!("kiln: the libtorch tests did not run: {why}");
            Ok(true)
        }
    }
}
