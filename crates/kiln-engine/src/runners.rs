//! A backend's runner (a binary, or the reference script and its interpreter), where it is, and
//! asking it for its devices; the runners a command uses: the backends asked for (else the
//! default ones), those that can build here, each one built and probed, or left out with one
//! line saying why.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kiln_contract::ProbeReport;

use crate::backends::{self, Backend, Source};
use crate::supervise::run_once;
use crate::torch;
use crate::workspace::{prebuilt_dir, target_dir, workspace_root};

/// A built backend: its runner and what its probe reported.
pub type Built = (&'static Backend, Runner, ProbeReport);

/// The backends of `wanted` that Burn `own` lacks, by the newest Burn that has them (`last-burn`,
/// in order of first appearance); the rest build against `own`.
pub fn by_newest_burn<'a>(
    wanted: &[&'a Backend],
    own: &str,
) -> (Vec<&'a Backend>, Vec<(String, Vec<&'a Backend>)>) {
    let mut here = Vec::new();
    let mut older: Vec<(String, Vec<&Backend>)> = Vec::new();
    for &b in wanted {
        match (&b.last_burn, b.in_burn(own)) {
            (Some(last), Err(_)) => match older.iter_mut().find(|(v, _)| v == last) {
                Some((_, group)) => group.push(b),
                None => older.push((last.clone(), vec![b])),
            },
            _ => here.push(b),
        }
    }
    (here, older)
}

/// Build the runners of `wanted` (with burn-train's Learner where `learner`) and probe them;
/// returns each usable backend with its runner. A backend that cannot run here (libtorch
/// missing, say) is left out with one line saying why and what fixes it. A backend the
/// workspace's Burn no longer has (ndarray and tch after Burn 0.22) builds against the newest
/// Burn that has it, in that Burn's overlay (`crate::burns`), and its records name that Burn.
pub fn build_and_probe(wanted: &[&'static Backend], learner: bool) -> Result<Vec<Built>> {
    // Prebuilt runners (a GPU kit, no Cargo.toml beside them) are what they are.
    let own = match crate::workspace::prebuilt_dir() {
        Some(_) => None,
        None => Some(crate::burns::own_version()?),
    };
    let (wanted, older) = match &own {
        Some(own) => by_newest_burn(wanted, own),
        None => (wanted.to_vec(), Vec::new()),
    };
    let mut out = Vec::new();
    for (version, group) in older {
        let names: Vec<&str> = group.iter().map(|b| b.name.as_str()).collect();
        eprintln!(
            "kiln: {}: not in this workspace's Burn {}: built against Burn {version}, the \
             newest that has them",
            names.join(", "),
            own.as_deref().unwrap_or_default()
        );
        let burn = crate::burns::prepare(&crate::burns::BurnSpec::Version(version))?;
        out.extend(crate::burns::build(&burn, &group, learner)?);
    }
    let wanted = &wanted[..];
    crate::build::build(wanted, learner)?;
    for &b in wanted {
        let runner = match runner(b) {
            Ok(r) => r,
            Err(why) => {
                eprintln!("kiln: skipping {}: {why}", b.name);
                continue;
            }
        };
        if !runner.exists() {
            eprintln!(
                "kiln: skipping {}: its runner {} was not built (the build output above says why)",
                b.name,
                runner.display()
            );
            continue;
        }
        eprintln!("kiln: probing {} ({})", b.name, runner.display());
        let started = std::time::Instant::now();
        let report = probe(&runner)?;
        let devices: Vec<String> = report
            .devices
            .iter()
            .map(|d| {
                let state = if d.available { "" } else { ", unavailable" };
                format!("{} ({}{state})", d.spec, d.kind)
            })
            .collect();
        eprintln!(
            "kiln: {}: {} [{:.1} s]",
            b.name,
            devices.join(", "),
            started.elapsed().as_secs_f64()
        );
        out.push((b, runner, report));
    }
    Ok(out)
}

/// The backends `names` lists, else every default backend (and one line naming the others, so
/// a backend left out of the default matrix is never silently missing from a table).
pub fn wanted_backends(names: Option<&[String]>) -> Result<Vec<&'static Backend>> {
    if let Some(names) = names {
        return names.iter().map(|n| backends::find(n)).collect();
    }
    let (wanted, others): (Vec<&'static Backend>, Vec<_>) =
        backends::all().iter().partition(|b| b.default);
    if !others.is_empty() {
        let names: Vec<&str> = others.iter().map(|b| b.name.as_str()).collect();
        eprintln!(
            "kiln: not in the default matrix here: {} (`--backends {},{}` adds one; docs/backends.md)",
            names.join(", "),
            wanted.first().map_or("flex", |b| b.name.as_str()),
            names[0]
        );
    }
    Ok(wanted)
}

/// The backends `names` asks for (the default matrix without), and the remote backend when
/// `--device remote:...` is given: its probe reports those devices.
pub fn wanted_with_remote(names: Option<&[String]>, remote: bool) -> Result<Vec<&'static Backend>> {
    let mut wanted = wanted_backends(names)?;
    if remote && !wanted.iter().any(|b| b.name == "remote") {
        wanted.push(backends::find("remote")?);
    }
    Ok(wanted)
}

/// The backends of `wanted` that can be built here; the others are named with the reason.
pub fn buildable(wanted: Vec<&'static Backend>) -> Vec<&'static Backend> {
    wanted
        .into_iter()
        .filter(|b| match backends::unbuildable(b) {
            Some(why) => {
                eprintln!("kiln: skipping {}: {why}", b.name);
                false
            }
            None => true,
        })
        .collect()
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

    /// The Burn version a record of this runner names (`reported`), for its fingerprint; none
    /// for the reference script, which neither Burn nor a Rust compiler made.
    pub fn burn_version<'a>(&self, reported: &'a str) -> &'a str {
        if self.needs_data_file { "" } else { reported }
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
    let torch = match &b.source {
        Source::Python { .. } if torch::reference_python().is_some() => None,
        _ if b.needs_torch() => Some(torch::find()?),
        _ => None,
    };
    match &b.source {
        Source::Cargo { package, requires } => {
            if let Some(r) = requires
                && prebuilt_dir().is_none()
            {
                r.met()?;
            }
            let exe = format!("{package}{}", std::env::consts::EXE_SUFFIX);
            let program = match (prebuilt_dir(), requires) {
                (Some(dir), _) => {
                    // A kit that could not build a runner says why beside where it would be.
                    let why = dir.join(format!("{package}.missing"));
                    if !dir.join(&exe).exists()
                        && let Ok(text) = std::fs::read_to_string(&why)
                    {
                        return Err(format!(
                            "{package} is not in {} ({}): {}",
                            dir.display(),
                            why.display(),
                            text.trim()
                        ));
                    }
                    dir.join(exe)
                }
                (None, _) => crate::workspace::binary(&target_dir(), package),
            };
            Ok(Runner {
                program,
                args: Vec::new(),
                env: torch.map(|t| t.run_env()).unwrap_or_default(),
                needs_data_file: false,
            })
        }
        Source::Python { script } => {
            if let Some(why) = torch::reference_python()
                .is_some()
                .then(torch::reference_python_problem)
                .flatten()
            {
                return Err(why);
            }
            let python = torch::reference_python().map(Ok).unwrap_or_else(|| {
                torch.and_then(|t| t.python).ok_or_else(|| {
                    format!(
                        "no Python with torch {} for the reference runner: {}",
                        torch::TORCH_VERSION,
                        torch::HINT
                    )
                })
            })?;
            Ok(Runner {
                program: python,
                args: vec![workspace_root().join(*script).into_os_string()],
                env: Vec::new(),
                needs_data_file: true,
            })
        }
    }
}

/// Ask a built runner for its devices, with a time limit. Its stdout and stderr are drained by
/// threads while it runs, so a runner that prints more than a pipe holds cannot stall it.
pub fn probe(runner: &Runner) -> Result<ProbeReport> {
    probe_within(runner, Duration::from_secs(120))
}

fn probe_within(runner: &Runner, limit: Duration) -> Result<ProbeReport> {
    let mut cmd = runner.command();
    cmd.arg("--probe");
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let lines = stderr.clone();
    let (status, stdout) = run_once(&mut cmd, limit, move |l| {
        if let Ok(mut text) = lines.lock() {
            text.push_str(l);
            text.push('\n');
        }
    })
    .with_context(|| format!("cannot start {}", runner.display()))?;
    let stderr = stderr.lock().map(|s| s.clone()).unwrap_or_default();
    let Some(status) = status else {
        bail!(
            "{} --probe did not answer within {} s",
            runner.display(),
            limit.as_secs()
        );
    };
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| {
            format!(
                "{} --probe printed no report ({status}); stderr: {}",
                runner.display(),
                stderr.trim()
            )
        })?;
    serde_json::from_str(line)
        .with_context(|| format!("{} --probe printed an unreadable report", runner.display()))
}

/// The runner of the backend called `name`, if it was built.
pub fn runner_of<'a>(built: &'a [Built], name: &str) -> Option<&'a Runner> {
    built
        .iter()
        .find(|(b, _, _)| b.name == name)
        .map(|(_, r, _)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once Kiln's own Burn moves past 0.22 (the pin is read here as 0.23.0), ndarray and tch
    /// build against 0.22.1, their newest Burn, and the others against the pin.
    #[test]
    fn a_backend_the_pinned_burn_dropped_builds_against_its_newest_burn() {
        let all: Vec<&Backend> = backends::all().iter().collect();
        let (here, older) = by_newest_burn(&all, "0.23.0");
        let names = |list: &[&Backend]| list.iter().map(|b| b.name.clone()).collect::<Vec<_>>();
        assert_eq!(older.len(), 1);
        assert_eq!(older[0].0, "0.22.1");
        assert_eq!(names(&older[0].1), ["ndarray", "tch"]);
        assert!(names(&here).contains(&"flex".to_string()));
        assert!(!names(&here).contains(&"ndarray".to_string()));
        // On the Burn Kiln pins today every backend builds against it.
        let (here, older) = by_newest_burn(&all, "0.22.1");
        assert!(older.is_empty());
        assert_eq!(here.len(), all.len());
    }

    #[cfg(unix)]
    #[test]
    fn a_chatty_probe_does_not_stall() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let script = tmp.path().join("chatty");
        // 1 MiB on each pipe before the report: far more than a pipe buffer holds.
        std::fs::write(
            &script,
            "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\0' x\necho\n\
             head -c 1048576 /dev/zero | tr '\\0' y >&2\n\
             echo '{\"backend\":\"chatty\",\"backend_version\":\"0\",\"devices\":[]}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let runner = Runner {
            program: script,
            args: Vec::new(),
            env: Vec::new(),
            needs_data_file: false,
        };
        let started = std::time::Instant::now();
        let report = probe_within(&runner, Duration::from_secs(20));
        assert!(started.elapsed() < Duration::from_secs(20));
        let report = report.unwrap();
        assert_eq!(report.backend, "chatty");
    }
}
