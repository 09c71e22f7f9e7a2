//! `cargo xtask serve`: build the remote runner with the backend to host, then run its `serve`
//! until stopped (docs/remote.md).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use kiln_contract::ServedBurn;

use crate::backends::{self, Requirement, Source};
use crate::build;
use crate::burns::{self, BurnSpec};
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

/// Build what hosts `backend` and run it, against each of `burns` (Kiln's own Burn when none
/// is given), a server per Burn on every second port from `--port`; returns whether they
/// stopped cleanly.
pub fn serve(s: ServeArgs, burns: &[BurnSpec]) -> Result<bool> {
    check_bind(s.bind, s.token.token.as_deref())?;
    let backend = s.backend().map_err(anyhow::Error::msg)?;
    let b = backends::find(backend)?;
    // The remote runner's Burn carries the served backend: flex in the plain build; ndarray
    // (which Burn 0.23 dropped), wgpu and the GPU drivers each in a build of its own (same
    // package, other features, so another target directory).
    let feature: Option<&str> = match &b.source {
        Source::Cargo {
            requires: Some(Requirement::Driver(d)),
            ..
        } => {
            d.met()
                .map_err(|why| anyhow::anyhow!("cannot serve {}: {why}", b.name))?;
            Some(d.feature.as_str())
        }
        Source::Cargo { requires: None, .. } if b.name == "wgpu" || b.name == "ndarray" => {
            Some(b.name.as_str())
        }
        Source::Cargo { requires: None, .. } if b.name != "remote" => None,
        _ => bail!(
            "cannot serve {}: Kiln serves flex, ndarray, wgpu, cuda and rocm \
             devices (libtorch cannot host remote sessions, and the PyTorch reference is not \
             Burn)",
            b.name
        ),
    };
    let own = [BurnSpec::Version(burns::own_version()?)];
    let burns = if burns.is_empty() { &own[..] } else { burns };
    let ports = ports(s.port, burns.len())?;
    let mut servers: Vec<(String, u16, PathBuf)> = Vec::new();
    for (spec, port) in burns.iter().zip(ports) {
        let burn = burns::prepare(spec)?;
        let version = burn.build.version.clone();
        b.in_burn(&version)
            .map_err(|why| anyhow::anyhow!("cannot serve {} on --burn {spec}: {why}", b.name))?;
        if servers.iter().any(|(v, _, _)| *v == version) {
            bail!(
                "--burn {spec} is Burn {version} again: a client finds its Burn's server by \
                 version, so serve one Burn of each version"
            );
        }
        servers.push((version, port, server_program(&burn, feature)?));
    }
    let mut children = Vec::new();
    for (i, (version, port, program)) in servers.iter().enumerate() {
        let others: Vec<ServedBurn> = servers
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (v, p, _))| ServedBurn {
                burn_version: v.clone(),
                port: *p,
            })
            .collect();
        let mut cmd = Command::new(program);
        cmd.arg("serve")
            .args(["--backend", backend])
            .args(["--port", &port.to_string()])
            .args(["--bind", &s.bind.to_string()]);
        if !s.devices.devices.is_empty() {
            cmd.args(["--devices", &s.devices.devices.join(",")]);
        }
        if let Some(token) = &s.token.token {
            // In the environment, not the arguments `ps` shows.
            cmd.env(kiln_contract::REMOTE_TOKEN_VAR, token);
        }
        if !others.is_empty() {
            eprintln!("kiln: Burn {version} on port {port}");
            cmd.env(
                kiln_contract::REMOTE_OTHER_BURNS_VAR,
                serde_json::to_string(&others)?,
            );
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        children.push(child);
    }
    // Until one stops (Ctrl+C stops them all: they share the terminal's process group); then
    // the rest, which no client of that Burn could reach alone, stop too.
    let stopped = loop {
        if let Some(status) = children
            .iter_mut()
            .find_map(|c| c.try_wait().ok().flatten())
        {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    Ok(stopped.success())
}

/// The Burn server ports of `n` Burns from `first`: every second one, Kiln's link on the next.
fn ports(first: u16, n: usize) -> Result<Vec<u16>> {
    (0..n)
        .map(|i| {
            u16::try_from(i * 2)
                .ok()
                .and_then(|step| first.checked_add(step))
                .filter(|p| *p < u16::MAX)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--port {first}: {n} Burns need ports {first} to {} (Kiln's link on the \
                         port after each Burn's); give a lower one",
                        first as usize + 2 * n - 1
                    )
                })
        })
        .collect()
}

/// The remote runner of `burn` with the served backend's `feature`, built where it is built
/// (Kiln's own Burn: beside the other runners, a feature's build in a directory of its own; an
/// overlay's: copied out of the target directory the overlays share).
fn server_program(burn: &burns::Burn, feature: Option<&str>) -> Result<PathBuf> {
    let features: Vec<&str> = feature.into_iter().collect();
    let Some(root) = &burn.overlay else {
        let dir = match feature {
            Some(name) => crate::workspace::target_dir().join(format!("{name}-remote")),
            None => crate::workspace::target_dir(),
        };
        build::build_runners(&[PACKAGE], &features, &dir)?;
        return Ok(crate::workspace::binary(&dir, PACKAGE));
    };
    build::build_runners_at(root, &[PACKAGE], &features, &burn.target())?;
    let built = crate::workspace::binary(&burn.target(), PACKAGE);
    let program = root.join("bin").join(format!(
        "{PACKAGE}-serve{}",
        feature.map(|f| format!("-{f}")).unwrap_or_default()
    ));
    std::fs::create_dir_all(root.join("bin"))?;
    std::fs::copy(&built, &program)
        .with_context(|| format!("cannot copy {} to {}", built.display(), program.display()))?;
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn each_burn_serves_on_every_second_port_and_the_last_link_must_fit() {
        assert_eq!(ports(3000, 1).unwrap(), [3000]);
        assert_eq!(ports(3000, 3).unwrap(), [3000, 3002, 3004]);
        assert_eq!(ports(65532, 2).unwrap(), [65532, 65534]);
        let why = ports(65533, 2).unwrap_err().to_string();
        assert!(
            why.contains("--port 65533") && why.contains("65536"),
            "{why}"
        );
        // serve takes --burn, as the commands that build against a Burn do.
        let parsed = crate::flags::Cli::try_parse_from([
            "cargo xtask",
            "serve",
            "--backend",
            "flex",
            "--burn",
            "0.22.1",
            "--burn",
            "0.23.0-pre.1",
        ]);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }

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
