//! Building the runners, only those of the backends a run asks for that this machine can run:
//! each build group (the CPU runners) or runner alone in one cargo invocation, so its Burn has
//! only those backends' features; all in one target directory, where cargo keeps every feature
//! set's artifacts side by side (Burn's CPU kernels, the longest crate, compile once). Cargo's
//! list of produced artifacts is checked against the runner packages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

mod progress;

#[cfg(any(test, feature = "testing"))]
pub use progress::TreeGraph;

#[cfg(test)]
use progress::executables;
use progress::{BuildLog, BuildPlan};

use crate::backends::{Backend, Requirement, Source};
use crate::supervise::{Out, Stderr, Supervised};
use crate::torch;
use crate::workspace::{binary, cargo, prebuilt_dir, target_dir, workspace_root};

/// The crate feature that puts burn-train's Learner into a runner (`--loop learner`).
pub const LEARNER: &str = "learner";

/// Build the runners of `wanted` that this machine can build, each with only its own Burn
/// features (runners of one build group together, sharing one Burn); `learner` adds
/// burn-train (`--loop learner`, data-parallel cells). A runner that cannot be built is
/// skipped with one line saying why, not the run: the other rows go on.
pub fn build(wanted: &[&Backend], learner: bool) -> Result<()> {
    if let Some(dir) = prebuilt_dir() {
        eprintln!(
            "kiln: using prebuilt runners from {} (KILN_RUNNER_DIR)",
            dir.display()
        );
        return Ok(());
    }
    let extra: &[&str] = if learner { &[LEARNER] } else { &[] };
    // The plain runners, gathered by build group below.
    let mut plain = Vec::new();
    for b in wanted {
        let Source::Cargo { package, requires } = &b.source else {
            continue;
        };
        match requires {
            None => plain.push((b.build_group.as_deref(), package.as_str())),
            Some(Requirement::Libtorch) => match torch::find() {
                Ok(t) => build_tch_at(&workspace_root(), package, &t, extra, &target_dir())?,
                Err(why) => eprintln!("kiln: not building {package}: {why}"),
            },
            Some(r @ (Requirement::Driver(_) | Requirement::Llvm(_))) => {
                if let Err(why) = r.met() {
                    eprintln!("kiln: not building {package}: {why}");
                    continue;
                }
                if let Err(e) = build_featured(package, r, extra) {
                    eprintln!(
                        "kiln: {package} was not built, so {} is skipped: {e:#}",
                        b.name
                    );
                }
            }
        }
    }
    for packages in crate::backends::by_build_group(plain) {
        build_runners(&packages, extra, &target_dir())?;
    }
    Ok(())
}

/// Build the libtorch runner `package` against `t`, in the workspace at `root` (this one, or a
/// Burn overlay: `crate::burns`) into the target directory `dir`.
pub fn build_tch_at(
    root: &Path,
    package: &str,
    t: &torch::Torch,
    extra: &[&str],
    dir: &Path,
) -> Result<()> {
    eprintln!(
        "kiln: building {package} against libtorch {} (a first build compiles Burn's top \
         crates with tch and torch-sys's bindings)",
        t.lib_dir.display(),
    );
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args(tch_build_args("build", package, extra))
        .arg("--target-dir")
        .arg(dir)
        .arg("--message-format=json-render-diagnostics");
    for (k, v) in t.build_env() {
        cmd.env(k, v);
    }
    let features = qualified(
        &[package],
        &with_feature(Requirement::Libtorch.feature(), extra),
    );
    let built =
        run_build(cmd, package, BuildPlan::of(&[package], &features)).with_context(|| {
            format!(
                "building {package} against libtorch {}",
                t.lib_dir.display()
            )
        })?;
    check_built(&built, &[package], dir)
}

/// `feature` then `extra`.
fn with_feature<'a>(feature: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    std::iter::once(feature)
        .chain(extra.iter().copied())
        .collect()
}

/// Build the runner `package` with the crate feature of its requirement `r` (and `extra`)
/// (whether or not `r` is met here: the GPU kit builds for another machine); returns the
/// binary, or why it was not built.
pub fn build_featured(package: &str, r: &Requirement, extra: &[&str]) -> Result<PathBuf> {
    build_featured_at(&workspace_root(), package, r, extra, &target_dir())
}

/// [`build_featured`] in the workspace at `root` (a Burn overlay, `crate::burns`), into `dir`.
pub fn build_featured_at(
    root: &Path,
    package: &str,
    r: &Requirement,
    extra: &[&str],
    dir: &Path,
) -> Result<PathBuf> {
    build_runners_at(root, &[package], &with_feature(r.feature(), extra), dir).context(
        "CubeCL's GPU runtimes build on cubecl-llvm, whose first build downloads LLVM 23 from \
         github.com; where that is unreachable, `cargo xtask setup-cubecl-llvm` lets it use a \
         system LLVM (docs/gpu.md)",
    )?;
    Ok(binary(dir, package))
}

/// Build the runner binaries of `packages` in one cargo invocation (so their Burn has only
/// their backends' features), each with the crate `features`, in the target directory `dir`.
pub fn build_runners(packages: &[&str], features: &[&str], dir: &Path) -> Result<()> {
    build_runners_at(&workspace_root(), packages, features, dir)
}

/// [`build_runners`] in the workspace at `root` (a Burn overlay, `crate::burns`).
pub fn build_runners_at(
    root: &Path,
    packages: &[&str],
    features: &[&str],
    dir: &Path,
) -> Result<()> {
    let what = packages.join(", ");
    let with = if features.is_empty() {
        String::new()
    } else {
        format!(" with {}", features.join(", "))
    };
    eprintln!(
        "kiln: building {what}{with} in release mode ({}; a first build compiles Burn for \
         them, cargo's progress follows)",
        dir.display()
    );
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args(runner_build_args(packages, features))
        .arg("--target-dir")
        .arg(dir);
    // The plan reads this workspace's tree; an overlay's build counts without a total.
    let plan = (root == workspace_root())
        .then(|| BuildPlan::of(packages, &qualified(packages, features)))
        .flatten();
    let built = run_build(cmd, &what, plan)?;
    check_built(&built, packages, dir)
}

/// Each of `features` for each of `packages`, as cargo takes features of several packages
/// (`kiln-flex/learner`).
fn qualified(packages: &[&str], features: &[&str]) -> Vec<String> {
    packages
        .iter()
        .flat_map(|p| features.iter().map(move |f| format!("{p}/{f}")))
        .collect()
}

/// The cargo arguments that build runners: their binaries only, no test targets.
pub fn runner_build_args(packages: &[&str], features: &[&str]) -> Vec<String> {
    let mut args = vec!["build".to_string(), "--release".into()];
    for p in packages {
        args.push("-p".into());
        args.push(p.to_string());
    }
    args.push("--bins".into());
    if !features.is_empty() {
        args.push("--features".into());
        args.push(qualified(packages, features).join(","));
    }
    args.push("--message-format=json-render-diagnostics".into());
    // Where the build's time goes, crate by crate (cargo's report in the target directory's
    // cargo-timings/): for measuring a cold build, docs/reliability.md.
    if std::env::var_os("KILN_BUILD_TIMINGS").is_some_and(|v| v == "1") {
        args.push("--timings".into());
    }
    args
}

/// The release build of xtask itself (the GPU kit carries it: a fifth of the debug one).
pub fn build_release_xtask() -> Result<PathBuf> {
    build_runners(&["xtask"], &[], &target_dir())?;
    Ok(binary(&target_dir(), "xtask"))
}

/// Run a cargo build whose stdout is JSON messages; cargo's own progress and diagnostics go to
/// the terminal, and a line every 10 seconds says how far the build is (cargo prints nothing
/// while one large crate compiles): crates done of those `plan` expects, and the time left.
/// Returns the executables it produced, by target name.
fn run_build(
    mut cmd: Command,
    what: &str,
    plan: Option<BuildPlan>,
) -> Result<Vec<(String, PathBuf)>> {
    // The command a user can run to see the same failure (without the JSON messages).
    let shown = std::iter::once("cargo".to_string())
        .chain(
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .filter(|a| !a.starts_with("--message-format")),
        )
        .collect::<Vec<_>>()
        .join(" ");
    // cargo's progress and the compiler's diagnostics go on to the terminal; the first error
    // line is kept, for a failure to say in one line.
    let first_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let first = first_error.clone();
    let on_stderr = move |line: &str| {
        eprintln!("{line}");
        let error = line.trim_start();
        if error.starts_with("error")
            && !error.starts_with("error: could not compile")
            && let Ok(mut slot) = first.lock()
            && slot.is_none()
        {
            *slot = Some(error.to_string());
        }
    };
    let child = Supervised::spawn(&mut cmd, Stderr::Lines(Box::new(on_stderr)))
        .context("cannot start cargo to build the runners")?;
    let started = Instant::now();
    let mut log = BuildLog::new(plan.unwrap_or_default());
    let mut last_status = Instant::now();
    loop {
        match child.next(Duration::from_secs(1)) {
            Out::Line(line) => log.observe(&line),
            Out::Quiet => {}
            Out::Closed => break,
        }
        if last_status.elapsed() >= Duration::from_secs(10) {
            eprintln!("kiln: {}", log.status(what, started.elapsed()));
            last_status = Instant::now();
        }
    }
    let status = child
        .finish(None)
        .context("waiting for cargo")?
        .status
        .context("cargo's exit status")?;
    if !status.success() {
        let first = first_error.lock().ok().and_then(|s| s.clone());
        bail!(
            "building {what} failed ({status}){}; `{shown}` reproduces it",
            first.map_or(String::new(), |e| format!(": {e}"))
        );
    }
    if log.compiled > 0 {
        eprintln!(
            "kiln: built {what}: {} crates compiled in {}",
            log.compiled,
            crate::time::short(started.elapsed().as_secs_f64())
        );
    }
    Ok(log.executables)
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

/// The cargo arguments that build (`build`) or test (`test`) a libtorch runner, with the
/// crate features `extra` beside `libtorch`.
pub fn tch_build_args(command: &str, package: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [command, "--release", "-p", package, "--features"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(with_feature(Requirement::Libtorch.feature(), extra).join(","));
    if command == "build" {
        args.push("--bins".into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_are_built_as_binaries_with_no_tests_and_qualified_features() {
        // Only the named packages: cargo then resolves Burn's features for those runners
        // alone. `--bins`, not `--tests`: a first run needs no test binaries.
        let args = runner_build_args(&["kiln-flex"], &[]);
        assert_eq!(
            args[..5],
            ["build", "--release", "-p", "kiln-flex", "--bins"].map(String::from)
        );
        assert!(
            !args.iter().any(|a| a == "--workspace" || a == "--tests"),
            "{args:?}"
        );
        // A group's features name each package: cargo refuses bare ones for several.
        let args = runner_build_args(&["kiln-flex", "kiln-ndarray"], &[LEARNER]);
        assert!(
            args.windows(2)
                .any(|w| w == ["--features", "kiln-flex/learner,kiln-ndarray/learner"]),
            "{args:?}"
        );
        let tch = tch_build_args("build", "kiln-tch", &[LEARNER]);
        assert!(
            tch.windows(2)
                .any(|w| w == ["--features", "libtorch,learner"]),
            "{tch:?}"
        );
        assert!(tch.contains(&"--bins".to_string()));
        assert!(!tch_build_args("test", "kiln-tch", &[]).contains(&"--bins".to_string()));
    }

    /// `cargo metadata`'s JSON for three packages: the runner (lib and bin), a dependency with
    /// a build script, and one that the tree does not list.
    fn metadata(dir: &Path) -> cargo_metadata::Metadata {
        let package = |name: &str, kinds: &[&[&str]], sub: &str| {
            let root = dir.join(sub);
            std::fs::create_dir_all(root.join("src")).unwrap();
            std::fs::write(root.join("src/lib.rs"), vec![b'x'; 3000]).unwrap();
            serde_json::json!({
                "name": name, "version": "1.0.0", "id": format!("id-{name}"),
                "manifest_path": root.join("Cargo.toml"),
                "targets": kinds.iter().map(|k| serde_json::json!({"kind": k})).collect::<Vec<_>>(),
            })
        };
        crate::backends::fake_metadata(serde_json::json!([
            package("kiln-flex", &[&["lib"], &["bin"]], "a"),
            package("burn", &[&["lib"], &["custom-build"]], "b"),
            package("unused", &[&["lib"]], "c"),
        ]))
    }

    #[test]
    fn the_build_status_counts_planned_crates_and_estimates_the_time_left() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = "kiln-flex v1.0.0 (/x)\nburn v1.0.0\nburn v1.0.0 (*)\n\n";
        let plan = BuildPlan::from_tree(tree, &metadata(tmp.path()), &["kiln-flex"]);
        // kiln-flex: lib and bin; burn: lib and build script; `unused` is not in the tree.
        assert_eq!(plan.units(), 4);
        assert_eq!(plan.weight(), 6000);
        let mut log = BuildLog::new(plan);
        let artifact = |id: &str, name: &str, kind: &str, fresh: bool| {
            format!(
                "{{\"reason\":\"compiler-artifact\",\"package_id\":\"{id}\",\"target\":{{\"name\":\"{name}\",\"kind\":[\"{kind}\"]}},\"executable\":null,\"fresh\":{fresh}}}"
            )
        };
        let early = log.status("kiln-flex", Duration::from_secs(5));
        assert!(
            early.contains("0 of 4 crates done") && !early.contains("left"),
            "{early}"
        );
        log.observe(&artifact(
            "id-burn",
            "build-script-build",
            "custom-build",
            true,
        ));
        log.observe(&artifact("id-burn", "burn", "lib", false));
        log.observe("{\"reason\":\"build-script-executed\"}");
        // Half the code done in 100 s, 1500 bytes of it compiled: 3000 bytes left take 200 s.
        let line = log.status("kiln-flex", Duration::from_secs(100));
        assert!(line.contains("2 of 4 crates done (1 up to date)"), "{line}");
        assert!(
            line.contains("about 3m20s left (50% of the code done)"),
            "{line}"
        );
        assert!(line.ends_with("last: burn"), "{line}");
        // Without a plan it still counts.
        let bare = BuildLog::default().status("kiln-flex", Duration::from_secs(5));
        assert!(
            bare.contains("0 crates compiled") && !bare.contains("left"),
            "{bare}"
        );
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
