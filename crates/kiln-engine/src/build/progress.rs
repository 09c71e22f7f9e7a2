//! The build's progress line: what one build will compile (its plan, weighted by source size)
//! and what cargo has reported so far, so the line can say how much is left.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cargo_metadata::{Metadata, TargetKind};

use crate::workspace::{cargo, workspace_root};

/// What one build will compile, as cargo resolves it for one package and its features: each
/// package's compiled units (its library or binaries, its build script) and a weight, the size
/// of its Rust sources, so that the time left can follow the work done rather than the count.
#[derive(Default, Debug)]
pub(super) struct BuildPlan {
    /// Per package id (as cargo's messages name it): (source bytes, units).
    packages: BTreeMap<String, (u64, usize)>,
}

impl BuildPlan {
    /// The plan of building `packages` with `features`, from `cargo tree` and `cargo metadata`;
    /// `None` where either cannot tell (the progress line then counts without a total). Not
    /// offline: on a fresh machine the registry holds only what xtask needed so far, and both
    /// read the manifests that the build is about to download anyway.
    pub(super) fn of(packages: &[&str], features: &[String]) -> Option<BuildPlan> {
        let mut tree = cargo();
        tree.current_dir(workspace_root()).arg("tree");
        for p in packages {
            tree.args(["-p", p]);
        }
        tree.args([
            "-e",
            "normal,build",
            "--charset",
            "ascii",
            "--format",
            "{p}",
        ]);
        if !features.is_empty() {
            tree.args(["--features", &features.join(",")]);
        }
        let tree = tree.stderr(Stdio::null()).output().ok()?;
        if !tree.status.success() {
            return None;
        }
        let metadata = cargo_metadata::MetadataCommand::new()
            .current_dir(workspace_root())
            .exec()
            .ok()?;
        Some(BuildPlan::from_tree(
            &String::from_utf8_lossy(&tree.stdout),
            &metadata,
            packages,
        ))
    }

    /// The plan from `cargo tree --charset ascii --format {p}`'s tree and `cargo metadata`'s
    /// packages; `roots` are the packages built (their binaries are units too). A package
    /// built both for the build's own use (build scripts, proc-macros and what they use) and
    /// for the runner is compiled twice (a release build compiles build-time code apart), so
    /// it counts twice.
    pub(super) fn from_tree(tree: &str, metadata: &Metadata, roots: &[&str]) -> BuildPlan {
        let wanted = built_for(tree);
        let mut plan = BuildPlan::default();
        for p in &metadata.packages {
            let version = p.version.to_string();
            let copies = [false, true]
                .into_iter()
                .filter(|host| wanted.contains(&(p.name.to_string(), version.clone(), *host)))
                .count();
            if copies == 0 {
                continue;
            }
            let has = |kind: TargetKind| p.targets.iter().any(|t| t.is_kind(kind.clone()));
            let lib = has(TargetKind::Lib) || has(TargetKind::RLib) || has(TargetKind::ProcMacro);
            let script = has(TargetKind::CustomBuild);
            let bins = if roots.contains(&p.name.as_str()) {
                p.targets.iter().filter(|t| t.is_bin()).count()
            } else {
                0
            };
            let units = (usize::from(lib) + usize::from(script)) * copies + bins;
            let dir = p
                .manifest_path
                .parent()
                .map(|d| d.as_std_path().to_path_buf())
                .unwrap_or_default();
            // Its Rust, and the C and C++ it compiles itself (torch-sys's bindings, zstd),
            // which take as long to build.
            let bytes =
                bytes_of(&dir.join("src"), &["rs"]) + bytes_of(&dir, &["c", "cc", "cpp", "cxx"]);
            plan.packages.insert(
                p.id.repr.clone(),
                (bytes.max(1) * copies as u64, units.max(1)),
            );
        }
        plan
    }

    pub(super) fn units(&self) -> usize {
        self.packages.values().map(|(_, u)| u).sum()
    }

    pub(super) fn weight(&self) -> u64 {
        self.packages.values().map(|(w, _)| w).sum()
    }

    /// The weight of one unit of package `id` (its sources spread over its units).
    fn unit_weight(&self, id: &str) -> u64 {
        self.packages
            .get(id)
            .map_or(0, |(w, u)| w / (*u as u64).max(1))
    }
}

/// A `cargo tree --charset ascii` tree as a graph: each line's package (the line, `(*)` and
/// `(proc-macro)` aside) and its dependencies, with whether each edge is a build dependency.
/// The tree lists a package's dependencies once (`(*)` later), so reading its edges first and
/// following them afterwards sees every use.
#[derive(Default)]
pub struct TreeGraph {
    roots: Vec<String>,
    edges: BTreeMap<String, BTreeSet<(String, bool)>>,
    proc_macros: BTreeSet<String>,
}

impl TreeGraph {
    pub fn parse(tree: &str) -> TreeGraph {
        let mut graph = TreeGraph::default();
        // By depth: the package there, and whether its children listed so far are under a
        // `[build-dependencies]` heading.
        let mut stack: Vec<(String, bool)> = Vec::new();
        for line in tree.lines() {
            let mut rest = line;
            let mut depth = 0;
            while let Some(r) = ["|   ", "|-- ", "`-- ", "    "]
                .iter()
                .find_map(|p| rest.strip_prefix(p))
            {
                rest = r;
                depth += 1;
            }
            if rest.starts_with('[') {
                // A heading names the kind of the children of the package at its depth.
                if let Some((_, section)) = stack.get_mut(depth) {
                    *section = rest.starts_with("[build-dependencies]");
                }
                continue;
            }
            if rest.trim().is_empty() {
                continue;
            }
            let key = rest
                .replace(" (*)", "")
                .replace(" (proc-macro)", "")
                .trim()
                .to_string();
            if rest.contains("(proc-macro)") {
                graph.proc_macros.insert(key.clone());
            }
            match depth.checked_sub(1).and_then(|d| stack.get(d)) {
                Some((parent, build)) => {
                    graph
                        .edges
                        .entry(parent.clone())
                        .or_default()
                        .insert((key.clone(), *build));
                }
                None => graph.roots.push(key.clone()),
            }
            stack.truncate(depth);
            stack.push((key, false));
        }
        graph
    }

    /// Every package reachable from those `start` picks (the roots when `None`), with whether
    /// it is built for the host: under a build dependency, a proc-macro, or below either.
    pub fn reachable(&self, start: Option<&dyn Fn(&str) -> bool>) -> BTreeSet<(String, bool)> {
        let mut todo: Vec<(String, bool)> = match start {
            None => self.roots.iter().map(|k| (k.clone(), false)).collect(),
            Some(pick) => self
                .edges
                .values()
                .flatten()
                .map(|(k, _)| k)
                .chain(&self.roots)
                .filter(|k| pick(k))
                .map(|k| (k.clone(), false))
                .collect(),
        };
        let mut out = BTreeSet::new();
        while let Some((key, host)) = todo.pop() {
            let host = host || self.proc_macros.contains(&key);
            if !out.insert((key.clone(), host)) {
                continue;
            }
            for (child, build) in self.edges.get(&key).into_iter().flatten() {
                todo.push((child.clone(), host || *build));
            }
        }
        out
    }
}

/// Each package of a `cargo tree --charset ascii --format {p}` tree as (name, version,
/// whether it is built for the host).
fn built_for(tree: &str) -> BTreeSet<(String, String, bool)> {
    TreeGraph::parse(tree)
        .reachable(None)
        .into_iter()
        .filter_map(|(key, host)| {
            let mut words = key.split_whitespace();
            let name = words.next()?.to_string();
            let version = words.next()?.strip_prefix('v')?.to_string();
            Some((name, version, host))
        })
        .collect()
}

/// Bytes of the files under `dir` whose extension is one of `extensions`.
fn bytes_of(dir: &Path, extensions: &[&str]) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => bytes_of(&path, extensions),
                Ok(_)
                    if path
                        .extension()
                        .is_some_and(|x| extensions.iter().any(|e| x == *e)) =>
                {
                    e.metadata().map_or(0, |m| m.len())
                }
                _ => 0,
            }
        })
        .sum()
}

/// What a cargo build has reported so far (`--message-format=json`).
#[derive(Default)]
pub(super) struct BuildLog {
    /// What the build is expected to compile.
    plan: BuildPlan,
    /// Executables produced, fresh or rebuilt: (target name, path).
    pub(super) executables: Vec<(String, PathBuf)>,
    /// Units compiled by this build, and found up to date.
    pub(super) compiled: usize,
    fresh: usize,
    /// The planned weight of the units compiled, and of those found up to date.
    compiled_weight: u64,
    fresh_weight: u64,
    /// The last crate compiled.
    last: String,
}

impl BuildLog {
    /// A log of a build expected to compile `plan`.
    pub(super) fn new(plan: BuildPlan) -> BuildLog {
        BuildLog {
            plan,
            ..BuildLog::default()
        }
    }

    pub(super) fn observe(&mut self, line: &str) {
        #[derive(serde::Deserialize)]
        struct Target {
            name: String,
            kind: Vec<String>,
        }
        #[derive(serde::Deserialize)]
        struct Message {
            reason: String,
            #[serde(default)]
            package_id: String,
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
        let weight = self.plan.unit_weight(&m.package_id);
        if m.fresh {
            self.fresh += 1;
            self.fresh_weight += weight;
        } else {
            self.compiled += 1;
            self.compiled_weight += weight;
            self.last.clone_from(&target.name);
        }
        if let Some(exe) = m.executable
            && target.kind.iter().any(|k| k == "bin")
        {
            self.executables.push((target.name, exe));
        }
    }

    /// A status line: crates done of those planned, and the time left at the rate so far,
    /// the rate counted in source weight (Burn's large crates come last).
    pub(super) fn status(&self, what: &str, elapsed: Duration) -> String {
        let done = self.compiled + self.fresh;
        let total = self.plan.units();
        let mut line = if total > 0 {
            format!(
                "building {what}: {} of {} crates done ({} up to date), {} so far",
                done.min(total),
                total,
                self.fresh,
                crate::time::short(elapsed.as_secs_f64())
            )
        } else {
            format!(
                "building {what}: {} crates compiled, {} up to date, {} so far",
                self.compiled,
                self.fresh,
                crate::time::short(elapsed.as_secs_f64())
            )
        };
        let weight = self.plan.weight();
        let done_weight = self.compiled_weight + self.fresh_weight;
        // Before a tenth of the work is done the rate says little (build scripts, tiny crates).
        if weight > 0 && self.compiled_weight > 0 && done_weight * 10 >= weight {
            let left = weight.saturating_sub(done_weight) as f64 * elapsed.as_secs_f64()
                / self.compiled_weight as f64;
            line.push_str(&format!(
                ", about {} left ({}% of the code done)",
                crate::time::short(left),
                (done_weight * 100 / weight).min(100)
            ));
        }
        if !self.last.is_empty() {
            line.push_str(&format!("; last: {}", self.last));
        }
        line
    }
}

/// The executables named in cargo's JSON messages (`compiler-artifact` of a `bin` target),
/// fresh or rebuilt, as (target name, path).
#[cfg(test)]
pub(super) fn executables(reader: impl std::io::BufRead) -> Vec<(String, PathBuf)> {
    let mut log = BuildLog::default();
    for line in reader.lines().map_while(Result::ok) {
        log.observe(&line);
    }
    log.executables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_code_is_planned_apart_from_the_runners_code() {
        // zip is listed in full where the runner uses it, and only as `(*)` under the build
        // script's dependencies: its own dependency (crc) is built for both sides too.
        let tree = "kiln-flex v0.1.0 (/w)\n\
                    |-- burn v0.22.1\n\
                    |   |-- serde v1.0.0\n\
                    |   |   `-- serde_derive v1.0.0 (proc-macro)\n\
                    |   |       `-- syn v2.0.0\n\
                    |   |-- zip v2.0.0\n\
                    |   |   `-- crc v3.0.0\n\
                    |   [build-dependencies]\n\
                    |   |-- cc v1.0.0\n\
                    |   |   `-- shlex v1.0.0\n\
                    |   `-- zip v2.0.0 (*)\n\
                    `-- syn v2.0.0\n";
        let got: Vec<(String, String, bool)> = built_for(tree).into_iter().collect();
        let want = [
            ("burn", "0.22.1", false),
            ("cc", "1.0.0", true),
            ("crc", "3.0.0", false),
            ("crc", "3.0.0", true),
            ("kiln-flex", "0.1.0", false),
            ("serde", "1.0.0", false),
            ("serde_derive", "1.0.0", true),
            ("shlex", "1.0.0", true),
            ("syn", "2.0.0", false),
            ("syn", "2.0.0", true),
            ("zip", "2.0.0", false),
            ("zip", "2.0.0", true),
        ]
        .map(|(n, v, h)| (n.to_string(), v.to_string(), h));
        assert_eq!(got, want);
    }
}
