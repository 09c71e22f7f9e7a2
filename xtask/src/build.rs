//! Building the runners: one cargo invocation for every plain runner (the same feature set
//! as the tests, so Burn compiles once), one in its own target directory for libtorch ones, and
//! cargo's list of produced artifacts checked against the runner packages.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backends::{Requirement, Source, all, prebuilt_dir, target_dir};
use crate::{torch, workspace_root};

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Build every buildable runner. They are built the way `cargo xtask test` builds the
/// workspace (`--workspace --tests`, plus `--bins`): cargo unifies Burn's features over the
/// packages and dev-dependencies of one invocation, so building the runners any other way would
/// compile Burn a second time with another feature set. `--bins` is not optional: with `--tests`
/// alone cargo builds a package's plain binary only when one of its integration tests uses it.
/// Cargo's own list of the artifacts it produced is checked against the runner packages, so a
/// runner that a build did not make is an error here, on a warm target dir as on a cold one.
/// The libtorch runner is built on its own, so no other runner ever links libtorch.
pub fn build_all() -> Result<()> {
    if let Some(dir) = prebuilt_dir() {
        eprintln!(
            "kiln: using prebuilt runners from {} (KILN_RUNNER_DIR)",
            dir.display()
        );
        return Ok(());
    }
    build_plain()?;
    match torch::find() {
        Ok(t) => {
            for b in all() {
                if let Source::Cargo {
                    package,
                    requires: Some(Requirement::Libtorch),
                } = &b.source
                {
                    eprintln!(
                        "kiln: building {package} against libtorch {} (its own target dir, \
                         {}; a first build compiles Burn again with tch, about 5 minutes)",
                        t.lib_dir.display(),
                        torch_target_dir().display()
                    );
                    let mut cmd = cargo();
                    cmd.current_dir(workspace_root())
                        .args(tch_build_args("build", package))
                        .arg("--message-format=json-render-diagnostics");
                    for (k, v) in t.build_env() {
                        cmd.env(k, v);
                    }
                    // The workspace's crate count says nothing of this one package's build.
                    let built = run_build(cmd, package, None).with_context(|| {
                        format!(
                            "building {package} against libtorch {}",
                            t.lib_dir.display()
                        )
                    })?;
                    check_built(&built, &[package.as_str()], &torch_target_dir())?;
                }
            }
        }
        Err(why) => eprintln!("kiln: not building tch: {why}"),
    }
    for b in all() {
        if let Source::Cargo {
            package,
            requires: Some(r @ Requirement::Driver(_)),
        } = &b.source
        {
            if let Err(why) = r.met() {
                eprintln!("kiln: not building {package}: {why}");
                continue;
            }
            // A GPU runner that cannot be built is skipped, not the run: the CPU rows go on.
            if let Err(e) = build_featured(package, r) {
                eprintln!(
                    "kiln: {package} was not built, so {} is skipped: {e:#}",
                    b.name
                );
            }
        }
    }
    Ok(())
}

/// Build the plain runners (no requirement: flex, ndarray, wgpu, ...) in one cargo invocation,
/// the way `build_all` explains.
pub fn build_plain() -> Result<()> {
    let plain: Vec<&str> = all()
        .iter()
        .filter_map(|b| match &b.source {
            Source::Cargo {
                package,
                requires: None,
            } => Some(package.as_str()),
            _ => None,
        })
        .collect();
    eprintln!(
        "kiln: building the runners ({}) in release mode; a first build compiles Burn (about \
         45 minutes on 2 cores; cargo's progress follows)",
        plain.join(", ")
    );
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args(build_args());
    let built = run_build(cmd, "the runners", estimate_units())?;
    check_built(&built, &plain, &target_dir())?;
    Ok(())
}

/// Build the runner `package` with the crate feature of its requirement `r`, in the target
/// directory of its own (whether or not `r` is met here: the GPU kit builds for another
/// machine); returns the binary, or why it was not built.
pub fn build_featured(package: &str, r: &Requirement) -> Result<PathBuf> {
    build_with_feature(package, r.feature(), &r.target_dir())
}

/// Build the runner `package` with the crate feature `feature` in the target directory `dir`;
/// returns the binary, or why it was not built.
pub fn build_with_feature(package: &str, feature: &str, dir: &Path) -> Result<PathBuf> {
    eprintln!(
        "kiln: building {package} with its `{feature}` feature (its own target dir, {}; a \
         first build compiles Burn again with it)",
        dir.display()
    );
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        package,
        "--features",
        feature,
        "--bins",
        "--message-format=json-render-diagnostics",
        "--target-dir",
    ]);
    cmd.arg(dir);
    let built = run_build(cmd, package, None).context(
        "CubeCL's GPU runtimes build on cubecl-llvm, whose first build downloads LLVM 23 from \
         github.com; where that is unreachable, `cargo xtask setup-cubecl-llvm` lets it use a \
         system LLVM (docs/gpu.md)",
    )?;
    check_built(&built, &[package], dir)?;
    Ok(dir
        .join("release")
        .join(format!("{package}{}", std::env::consts::EXE_SUFFIX)))
}

/// The cargo arguments that build the plain (non-libtorch) runners.
pub fn build_args() -> Vec<&'static str> {
    vec![
        "build",
        "--release",
        "--workspace",
        "--tests",
        "--bins",
        "--message-format=json-render-diagnostics",
    ]
}

/// Run a cargo build whose stdout is JSON messages; cargo's own progress and diagnostics go to
/// the terminal, and a line every 10 seconds says how far the build is (cargo prints nothing
/// while one large crate compiles), against `total` crates when that is known. Returns the
/// executables it produced, by target name.
fn run_build(mut cmd: Command, what: &str, total: Option<usize>) -> Result<Vec<(String, PathBuf)>> {
    // The command a user can run to see the same failure (without the JSON messages).
    let shown = std::iter::once("cargo".to_string())
        .chain(
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .filter(|a| !a.starts_with("--message-format")),
        )
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start cargo to build the runners")?;
    let stdout = child
        .stdout
        .take()
        .context("cargo's output could not be read")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut log = BuildLog::default();
    let mut last_status = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => log.observe(&line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if last_status.elapsed() >= Duration::from_secs(10) {
            eprintln!("kiln: {}", log.status(what, total, started.elapsed()));
            last_status = Instant::now();
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!(
            "building {what} failed ({status}); the compiler output above says why. \
             `{shown}` reproduces it"
        );
    }
    Ok(log.executables)
}

/// What a cargo build has reported so far (`--message-format=json`).
#[derive(Default)]
struct BuildLog {
    /// Executables produced, fresh or rebuilt: (target name, path).
    executables: Vec<(String, PathBuf)>,
    /// Crates compiled by this build, and found up to date.
    compiled: usize,
    fresh: usize,
    /// The last crate compiled.
    last: String,
}

impl BuildLog {
    fn observe(&mut self, line: &str) {
        #[derive(serde::Deserialize)]
        struct Target {
            name: String,
            kind: Vec<String>,
        }
        #[derive(serde::Deserialize)]
        struct Message {
            reason: String,
            target: Option<Target>,
            executable: Option<PathBuf>,
            #[serde(default)]
            fresh: bool,
        }
        let Ok(m) = serde_json::from_str::<Message>(line) else {
            return;
        };
        if m.reason != "compiler-artifact" {
            return;
        }
        let Some(target) = m.target else { return };
        if m.fresh {
            self.fresh += 1;
        } else {
            self.compiled += 1;
            self.last.clone_from(&target.name);
        }
        if let Some(exe) = m.executable
            && target.kind.iter().any(|k| k == "bin")
        {
            self.executables.push((target.name, exe));
        }
    }

    /// A status line: done, left of about `total`, and the time left at the rate so far.
    fn status(&self, what: &str, total: Option<usize>, elapsed: Duration) -> String {
        let done = self.compiled + self.fresh;
        let mut line = format!(
            "building {what}: {} crates compiled, {} up to date, {} so far",
            self.compiled,
            self.fresh,
            crate::time::short(elapsed.as_secs_f64())
        );
        if let Some(total) = total.filter(|&t| t > done) {
            let left = total - done;
            line.push_str(&format!(", about {left} of ~{total} left"));
            // Small crates come first and the large ones (Burn, CubeCL) last: the rate says
            // little before half of the crates are done.
            if self.compiled >= 10 && done * 2 >= total {
                let per_crate = elapsed.as_secs_f64() / self.compiled as f64;
                line.push_str(&format!(
                    " (~{} at this rate)",
                    crate::time::short(per_crate * left as f64)
                ));
            }
        }
        if !self.last.is_empty() {
            line.push_str(&format!("; last: {}", self.last));
        }
        line
    }
}

/// About how many crates the build compiles: the packages cargo resolves for this platform
/// (an estimate: build scripts and test targets add units, unused optional ones are absent).
fn estimate_units() -> Option<usize> {
    let host = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .ok()?;
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))?
        .trim()
        .to_string();
    let out = cargo()
        .current_dir(workspace_root())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
        ])
        .arg(&host)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(metadata.pointer("/resolve/nodes")?.as_array()?.len())
}

/// The executables named in cargo's JSON messages (`compiler-artifact` of a `bin` target),
/// fresh or rebuilt, as (target name, path).
#[cfg(test)]
fn executables(reader: impl std::io::BufRead) -> Vec<(String, PathBuf)> {
    let mut log = BuildLog::default();
    for line in reader.lines().map_while(Result::ok) {
        log.observe(&line);
    }
    log.executables
}

/// An error unless every package in `wanted` produced its runner binary in `dir`/release.
pub fn check_built(
    built: &[(String, PathBuf)],
    wanted: &[&str],
    dir: &std::path::Path,
) -> Result<()> {
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|p| !built.iter().any(|(name, exe)| name == p && exe.is_file()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the build finished but did not produce the runner binar{} {} in {}; this is a bug \
             in Kiln's build command, please report it",
            if missing.len() == 1 { "y" } else { "ies" },
            missing.join(", "),
            dir.join("release").display()
        );
    }
    Ok(())
}

/// Where libtorch runners are built: a target directory of their own, because their Burn
/// feature set (with `tch`) differs from the other runners'; sharing one directory would make
/// cargo rebuild Burn each time it switches between the two.
pub fn torch_target_dir() -> PathBuf {
    Requirement::Libtorch.target_dir()
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
        args.push("--bins".into());
    }
    args.push("--target-dir".into());
    args.push(torch_target_dir().display().to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_asks_for_binaries_not_only_tests() {
        // With `--tests` alone, cargo skips the plain binary of a package that has no
        // integration test (kiln-ndarray): the bug a cold clone met.
        let args = build_args();
        assert!(args.contains(&"--bins"), "{args:?}");
        assert!(args.contains(&"--tests"), "{args:?}");
        assert!(tch_build_args("build", "kiln-tch").contains(&"--bins".to_string()));
    }

    #[test]
    fn the_build_status_counts_crates_and_estimates_what_is_left() {
        let mut log = BuildLog::default();
        let artifact = |name: &str, fresh: bool| {
            format!(
                "{{\"reason\":\"compiler-artifact\",\"target\":{{\"name\":\"{name}\",\"kind\":[\"lib\"]}},\"executable\":null,\"fresh\":{fresh}}}"
            )
        };
        for i in 0..5 {
            log.observe(&artifact(&format!("up{i}"), true));
        }
        for i in 0..20 {
            log.observe(&artifact(&format!("crate{i}"), false));
        }
        log.observe("{\"reason\":\"build-script-executed\"}");
        let line = log.status("the runners", Some(45), Duration::from_secs(200));
        assert!(line.contains("20 crates compiled, 5 up to date"), "{line}");
        assert!(line.contains("about 20 of ~45 left"), "{line}");
        // 10 s per crate so far, 20 left.
        assert!(line.contains("(~3m20s at this rate)"), "{line}");
        // Before half are done, no time is guessed.
        let line = log.status("the runners", Some(125), Duration::from_secs(200));
        assert!(
            line.contains("about 100 of ~125 left") && !line.contains("at this rate"),
            "{line}"
        );
        assert!(line.ends_with("last: crate19"), "{line}");
        let early = BuildLog::default().status("the runners", None, Duration::from_secs(5));
        assert!(!early.contains("left"), "{early}");
    }

    #[test]
    fn cargo_artifacts_name_the_binaries_built() {
        let tmp = tempfile::tempdir().unwrap();
        let flex = tmp.path().join("kiln-flex");
        std::fs::write(&flex, b"").unwrap();
        let messages = format!(
            "{{\"reason\":\"compiler-artifact\",\"target\":{{\"name\":\"kiln-flex\",\"kind\":[\"bin\"]}},\"executable\":{flex:?},\"fresh\":true}}\n\
             {{\"reason\":\"compiler-artifact\",\"target\":{{\"name\":\"kiln_ndarray\",\"kind\":[\"lib\"]}},\"executable\":null}}\n\
             {{\"reason\":\"compiler-artifact\",\"target\":{{\"name\":\"runner\",\"kind\":[\"test\"]}},\"executable\":\"/x/runner-abc\"}}\n\
             not json\n\
             {{\"reason\":\"build-finished\",\"success\":true}}\n"
        );
        let built = executables(messages.as_bytes());
        assert_eq!(built, vec![("kiln-flex".to_string(), flex)]);
        assert!(check_built(&built, &["kiln-flex"], tmp.path()).is_ok());
        let err = check_built(&built, &["kiln-flex", "kiln-ndarray"], tmp.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kiln-ndarray") && !err.contains("kiln-flex,"),
            "{err}"
        );
    }
}
