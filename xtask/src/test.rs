//! `cargo xtask test`: the README's test command. The backend crates are tested by build group,
//! the way their runners are built, so each cargo invocation compiles Burn with those backends'
//! features only and shares its build with the runners `bench-all` uses; the crates without
//! Burn are tested in the debug profile `cargo xtask` itself is built in; kiln-tch against
//! libtorch when it is set up (cargo alone cannot: libtorch must be found and its build
//! environment set).

use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::backends::{self, Requirement, Source};
use crate::build::LEARNER;
use crate::torch;
use crate::workspace::workspace_root;

/// The crates that link no Burn backend: tested together, in the debug profile.
const TOOLS: &[&str] = &[
    "xtask",
    "kiln-engine",
    "kiln-contract",
    "kiln-machine",
    "kiln-report",
    "kiln-data",
];

/// One `cargo test` invocation: what it tests and its arguments before `--`.
#[derive(Debug, PartialEq)]
pub struct Group {
    pub name: String,
    pub args: Vec<String>,
}

/// The invocations, in order: the tools; each build group of backend crates (`groups`: the
/// packages of one group, or one package alone), as its runners are built, so the tests reuse
/// the runners' Burn; then kiln-core and the Learner tests with burn-train, in two invocations
/// that share one Burn (flex and ndarray with the `learner` feature).
pub fn groups(packages: &[Vec<&str>]) -> Vec<Group> {
    let mut out = vec![Group {
        name: "tools".into(),
        args: ["test"]
            .into_iter()
            .chain(TOOLS.iter().flat_map(|p| ["-p", p]))
            // The results site, its browser test and `kiln-site` (xtask does not link it).
            .chain(["--features", "kiln-report/site"])
            .map(String::from)
            .collect(),
    }];
    for group in packages {
        let mut args = vec!["test", "--release"];
        args.extend(group.iter().flat_map(|p| ["-p", *p]));
        out.push(group_of(&group.join(", "), &args));
    }
    out.push(group_of(
        "kiln-core (Learner)",
        &[
            "test",
            "--release",
            "-p",
            "kiln-core",
            "--features",
            LEARNER,
        ],
    ));
    let cpu: Vec<&str> = ["kiln-flex", "kiln-ndarray"]
        .into_iter()
        .filter(|p| packages.iter().flatten().any(|q| q == p))
        .collect();
    if cpu.contains(&"kiln-flex") {
        let features = cpu
            .iter()
            .map(|p| format!("{p}/{LEARNER}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec!["test", "--release"];
        args.extend(cpu.iter().flat_map(|p| ["-p", *p]));
        args.extend(["--features", &features, "--test", "learner"]);
        out.push(group_of("kiln-flex (Learner)", &args));
    }
    out
}

fn group_of(name: &str, args: &[&str]) -> Group {
    Group {
        name: name.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// The backend crates that build without libtorch, by build group.
fn without_libtorch() -> Vec<Vec<&'static str>> {
    backends::by_build_group(backends::all().iter().filter_map(|b| match &b.source {
        Source::Cargo {
            package,
            requires: None | Some(Requirement::Driver(_) | Requirement::Llvm(_)),
        } => Some((b.build_group.as_deref(), package.as_str())),
        _ => None,
    }))
}

/// The counts of libtest's `test result:` lines, summed over every invocation.
#[derive(Debug, Default, PartialEq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

impl Counts {
    /// Add one line of cargo test's output, if it is a `test result:` line.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        let count = |word: &str| {
            rest.split(';')
                .find_map(|part| {
                    part.trim()
                        .strip_suffix(word)?
                        .trim()
                        .rsplit(' ')
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
        };
        self.passed += count("passed");
        self.failed += count("failed");
        self.ignored += count("ignored");
    }
}

/// Run `cmd` (a `cargo test`), its output shown as it comes, counting its results.
fn run_counted(mut cmd: std::process::Command, counts: &mut Counts) -> Result<bool> {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            counts.add_line(&line);
        }
    }
    Ok(child.wait().context("cargo test")?.success())
}

/// The closing summary: every skip with its reason, then `N passed, M failed, K skipped`
/// (a skipped test passed in libtest's count: it is counted as skipped only).
pub fn summary(counts: &Counts, skips: &[String]) -> String {
    let mut text = String::new();
    for s in skips {
        text.push_str(&format!("kiln: skipped: {s}\n"));
    }
    let skipped = skips.len() + counts.ignored;
    text.push_str(&format!(
        "{} passed, {} failed, {skipped} skipped\n",
        counts.passed.saturating_sub(skips.len()),
        counts.failed
    ));
    text
}

/// Run the tests; `extra` goes to every `cargo test` after `--`.
pub fn run(extra: &[String]) -> Result<bool> {
    let torch = torch::find();
    let require = std::env::var_os("KILN_REQUIRE_TORCH").is_some_and(|v| v == "1");
    if let (Err(why), true) = (&torch, require) {
        bail!("KILN_REQUIRE_TORCH=1 but {why}");
    }
    let skip_log = crate::workspace::target_dir().join("kiln-test-skips.txt");
    let _ = std::fs::remove_file(&skip_log);
    let mut counts = Counts::default();
    let ok = run_groups(extra, &torch, &skip_log, &mut counts)?;
    let skips: Vec<String> = std::fs::read_to_string(&skip_log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    print!("{}", summary(&counts, &skips));
    Ok(ok)
}

/// Every group, then kiln-tch against libtorch when it is set up; false at the first failure.
fn run_groups(
    extra: &[String],
    torch: &Result<torch::Torch, String>,
    skip_log: &std::path::Path,
    counts: &mut Counts,
) -> Result<bool> {
    let packages = without_libtorch();
    let mut times = Vec::new();
    for g in groups(&packages) {
        let mut cmd = crate::workspace::cargo();
        cmd.current_dir(workspace_root())
            .args(&g.args)
            .env(kiln_contract::testing::SKIP_LOG_VAR, skip_log);
        if let Ok(t) = torch
            && let Some(py) = &t.python
        {
            // The PyTorch reference runner's test uses this interpreter.
            cmd.env("KILN_TORCH_PYTHON", py);
        }
        cmd.arg("--").args(extra);
        eprintln!("kiln: cargo {}", g.args.join(" "));
        let started = Instant::now();
        let ok = run_counted(cmd, counts)?;
        times.push((g.name, started.elapsed().as_secs_f64()));
        if !ok {
            print_times(&times);
            return Ok(false);
        }
    }

    let ok = match torch {
        Ok(t) => {
            let mut cmd = crate::workspace::cargo();
            cmd.current_dir(workspace_root())
                .args(crate::build::tch_build_args("test", "kiln-tch", &[]))
                .env(kiln_contract::testing::SKIP_LOG_VAR, skip_log);
            for (k, v) in t.build_env().into_iter().chain(t.run_env()) {
                cmd.env(k, v);
            }
            cmd.arg("--").args(extra);
            eprintln!(
                "kiln: cargo test --release -p kiln-tch --features libtorch (libtorch {} in {})",
                t.version,
                t.lib_dir.display()
            );
            let started = Instant::now();
            let ok = run_counted(cmd, counts)?;
            times.push(("kiln-tch".into(), started.elapsed().as_secs_f64()));
            ok
        }
        Err(why) => {
            // This process is not a test: the skip goes to the log the summary reads.
            kiln_contract::testing::log_skip(skip_log, "kiln-tch's tests", why)?;
            true
        }
    };
    print_times(&times);
    Ok(ok)
}

/// One line per invocation with its wall time (a cold one compiles Burn for it).
fn print_times(times: &[(String, f64)]) {
    for (name, seconds) in times {
        eprintln!("kiln: tests of {name}: {}", crate::time::short(*seconds));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_summary_counts_every_invocation_and_names_each_skip() {
        let mut c = Counts::default();
        for line in [
            "running 3 tests",
            "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.2s",
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
            "test something ... ok",
        ] {
            c.add_line(line);
        }
        assert_eq!(
            c,
            Counts {
                passed: 15,
                failed: 2,
                ignored: 1
            }
        );
        let text = summary(&c, &["report.html in chromium: no chromium".into()]);
        assert!(text.contains("kiln: skipped: report.html in chromium: no chromium"));
        assert!(text.ends_with("14 passed, 2 failed, 2 skipped\n"), "{text}");
    }

    #[test]
    fn each_build_group_is_tested_as_its_runners_are_built_and_the_tools_in_debug() {
        let cpu = vec!["kiln-flex", "kiln-ndarray"];
        let g = groups(&[cpu, vec!["kiln-wgpu"]]);
        let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "tools",
                "kiln-flex, kiln-ndarray",
                "kiln-wgpu",
                "kiln-core (Learner)",
                "kiln-flex (Learner)"
            ]
        );
        assert!(!g[0].args.contains(&"--release".to_string()));
        // A group's tests build what its runner build builds: those packages, no feature, so
        // cargo reuses the runners' Burn.
        assert_eq!(
            g[1].args,
            ["test", "--release", "-p", "kiln-flex", "-p", "kiln-ndarray"]
        );
        assert!(
            g[3].args
                .ends_with(&["--features".into(), "learner".into()])
        );
        assert!(
            g[4].args
                .windows(2)
                .any(|w| w == ["--features", "kiln-flex/learner,kiln-ndarray/learner"]),
            "{:?}",
            g[4].args
        );
        assert!(
            !groups(&[vec!["kiln-wgpu"]])
                .iter()
                .any(|g| g.name == "kiln-flex (Learner)")
        );
    }

    /// Every crate `cargo test` with `args` compiles below `package`, with its features, as
    /// cargo resolves them (`cargo tree` with dev-dependencies).
    fn below(package: &str, args: &[String]) -> BTreeSet<(String, bool)> {
        let mut kept: Vec<&str> = Vec::new();
        let mut words = args.iter().map(String::as_str);
        while let Some(a) = words.next() {
            match a {
                "test" | "--release" => {}
                "--test" => {
                    words.next();
                }
                a => kept.push(a),
            }
        }
        let args = kept;
        let out = crate::workspace::cargo()
            .current_dir(workspace_root())
            .arg("tree")
            .args(&args)
            .args(["-e", "normal,build,dev", "--charset", "ascii"])
            .args(["--format", "{p} [{f}]"])
            .output()
            .unwrap();
        assert!(out.status.success(), "cargo tree {args:?}: {out:?}");
        let prefix = format!("{package} ");
        crate::build::TreeGraph::parse(&String::from_utf8_lossy(&out.stdout))
            .reachable(Some(&|k: &str| k.starts_with(&prefix)))
    }

    #[test]
    fn feature_sets_let_burn_flex_and_burn_ndarray_compile_once_for_the_groups_that_use_them() {
        // The groups `cargo xtask test` runs; the lib of `--test learner` aside, a group builds
        // what these `cargo tree`s list.
        let all = groups(&without_libtorch());
        let args = |name: &str| {
            &all.iter()
                .find(|g| g.name == name)
                .unwrap_or_else(|| panic!("no test group {name}"))
                .args
        };
        let cpu = below(
            "burn-flex",
            args("kiln-flex, kiln-cpu, kiln-cuda, kiln-rocm"),
        );
        assert!(cpu.len() > 50, "{cpu:?}");
        for group in ["kiln-core (Learner)", "kiln-flex (Learner)", "kiln-remote"] {
            let other = below("burn-flex", args(group));
            assert!(
                other == cpu,
                "burn-flex compiles again for {group}: below it, only there: {:?}; only for the \
                 CPU runners: {:?}. Pin the features in kiln-core's Cargo.toml",
                other.difference(&cpu).collect::<Vec<_>>(),
                cpu.difference(&other).collect::<Vec<_>>()
            );
        }
        let ndarray = below("burn-ndarray", args("kiln-ndarray"));
        let other = below("burn-ndarray", args("kiln-flex (Learner)"));
        assert!(
            ndarray.len() > 50 && ndarray == other,
            "burn-ndarray compiles again for kiln-flex (Learner): {:?}",
            ndarray.symmetric_difference(&other).collect::<Vec<_>>()
        );
        // The remote runner serves ndarray only when built with its feature (Burn 0.23 dropped
        // it): its tests compile no burn-ndarray at all.
        assert!(below("burn-ndarray", args("kiln-remote")).is_empty());
    }
}
