//! `cargo xtask serve`: build the remote runner with the backend to host, then run its `serve`
//! until stopped (docs/remote.md).

use std::net::IpAddr;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::backends::{self, Requirement, Source};
use crate::build;
use crate::flags::ServeArgs;

/// The remote runner's package, which holds the server.
const PACKAGE: &str = "kiln-remote";

/// Why `bind` with `token` must not serve, before anything is built.
fn check_bind(bind: IpAddr, token: Option<&str>) -> Result<()> {
    let token = kiln_contract::remote_token(token.map(str::to_string));
    if let Some(why) = kiln_contract::remote_bind_refusal(bind, token.as_deref()) {
        bail!("{why}");
    }
    Ok(())
}

/// Build what hosts `backend` and run it; returns whether it stopped cleanly.
pub fn serve(s: ServeArgs) -> Result<bool> {
    check_bind(s.bind, s.token.token.as_deref())?;
    let backend = s.backend().map_err(anyhow::Error::msg)?;
    let b = backends::find(backend)?;
    // The remote runner's Burn carries the served backend: flex in the plain build; ndarray
    // (which Burn 0.23 dropped), wgpu and the GPU drivers each in a build of its own (same
    // package, other features, so another target directory).
    let (features, dir): (&[&str], _) = match &b.source {
        Source::Cargo {
            requires: Some(Requirement::Driver(d)),
            ..
        } => {
            d.met()
                .map_err(|why| anyhow::anyhow!("cannot serve {}: {why}", b.name))?;
            (&[d.feature.as_str()], Some(&d.feature))
        }
        Source::Cargo { requires: None, .. } if b.name == "wgpu" => (&["wgpu"], Some(&b.name)),
        Source::Cargo { requires: None, .. } if b.name == "ndarray" => {
            (&["ndarray"], Some(&b.name))
        }
        Source::Cargo { requires: None, .. } if b.name != "remote" => (&[], None),
        _ => bail!(
            "cannot serve {}: Kiln serves flex, ndarray, wgpu, cuda and rocm \
             devices (libtorch cannot host remote sessions, and the PyTorch reference is not \
             Burn)",
            b.name
        ),
    };
    let dir = match dir {
        Some(name) => crate::workspace::target_dir().join(format!("{name}-remote")),
        None => crate::workspace::target_dir(),
    };
    build::build_runners(&[PACKAGE], features, &dir)?;
    let program = crate::workspace::binary(&dir, PACKAGE);
    let mut cmd = Command::new(&program);
    cmd.arg("serve")
        .args(["--backend", backend])
        .args(["--port", &s.port.to_string()])
        .args(["--bind", &s.bind.to_string()]);
    if !s.devices.devices.is_empty() {
        cmd.args(["--devices", &s.devices.devices.join(",")]);
    }
    if let Some(token) = &s.token.token {
        // In the environment, not the arguments `ps` shows.
        cmd.env(kiln_contract::REMOTE_TOKEN_VAR, token);
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", program.display()))?;
    Ok(status.success())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn an_open_address_without_a_token_is_refused_before_any_build() {
        if std::env::var_os(kiln_contract::REMOTE_TOKEN_VAR).is_some() {
            kiln_contract::testing::skip(
                "an_open_address_without_a_token_is_refused_before_any_build",
                "KILN_REMOTE_TOKEN is set in this environment (unset it)",
            );
            return;
        }
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let why = check_bind(ip("0.0.0.0"), None).unwrap_err().to_string();
        assert!(why.contains("without a token"), "{why}");
        assert!(check_bind(ip("0.0.0.0"), Some("t")).is_ok());
        assert!(check_bind(ip("127.0.0.1"), None).is_ok());
        // An address that is none is the parser's error, naming the flag.
        let bad = crate::flags::Cli::try_parse_from([
            "cargo xtask",
            "serve",
            "--backend",
            "flex",
            "--bind",
            "localhost:3",
        ]);
        let bad = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(bad.contains("--bind"), "{bad}");
    }
}
