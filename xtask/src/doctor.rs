//! `cargo xtask doctor`: every backend, built or not, its devices, available or not and why.

use anyhow::Result;
use serde::Serialize;

use kiln_contract::DeviceReport;

use crate::backends;

/// Doctor's view of one backend.
#[derive(Serialize, Debug)]
pub struct BackendStatus {
    pub backend: String,
    pub summary: String,
    pub built: bool,
    /// Why it is not built, or how to build it.
    pub build_note: Option<String>,
    pub backend_version: Option<String>,
    pub devices: Vec<DeviceReport>,
}

/// Collect the status of every known backend (probing the built ones).
pub fn statuses() -> Vec<BackendStatus> {
    backends::all()
        .iter()
        .map(|b| {
            let mut status = BackendStatus {
                backend: b.name.clone(),
                summary: b.summary.clone(),
                built: false,
                build_note: None,
                backend_version: None,
                devices: Vec::new(),
            };
            let runner = match crate::runners::runner(b) {
                Ok(r) => r,
                Err(why) => {
                    status.build_note = Some(why);
                    return status;
                }
            };
            if !runner.exists() {
                status.build_note = Some(match &b.source {
                    backends::Source::Cargo {
                        package,
                        requires: Some(r),
                    } => format!(
                        "not built: `cargo xtask doctor --build` builds {package} with its `{}` \
                         feature",
                        r.feature(),
                    ),
                    backends::Source::Cargo { package, .. } if b.default => format!(
                        "not built: `cargo xtask doctor --build` (or `cargo build --release -p {package}`)"
                    ),
                    backends::Source::Cargo { package, .. } => format!(
                        "not built (not in the default matrix here): `cargo build --release -p \
                         {package}`, or `--backends {}` on a run",
                        b.name
                    ),
                    backends::Source::Python { .. } => format!("{} not found", runner.display()),
                });
                return status;
            }
            status.built = true;
            match crate::runners::probe(&runner) {
                Ok(report) => {
                    status.backend_version = Some(report.backend_version);
                    status.devices = report.devices;
                }
                Err(e) => status.build_note = Some(format!("probe failed: {e:#}")),
            }
            status
        })
        .collect()
}

/// Print the doctor table (or JSON); `Ok(true)` when at least one device is usable.
pub fn doctor(json: bool, build: bool) -> Result<bool> {
    if build {
        crate::build::build(&crate::runners::wanted_backends(None)?, false)?;
    }
    let all = statuses();
    let usable = all.iter().any(|s| s.devices.iter().any(|d| d.available));
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(usable);
    }
    println!(
        "| Backend | Built | Device | Kind | Available | Precisions | Memory | API, driver | Note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in &all {
        let built = if s.built { "yes" } else { "no" };
        if s.devices.is_empty() {
            let note = match (&s.build_note, s.backend.as_str()) {
                (Some(n), _) => n.clone(),
                // Its devices are other machines': none until a server is named.
                (None, "remote") => "another machine's devices: `cargo xtask serve` there, then \
                                     --device remote:ws://HOST:PORT (docs/remote.md)"
                    .into(),
                (None, _) => String::new(),
            };
            println!(
                "| {} | {built} | – | – | no | – | – | – | {note} |",
                s.backend
            );
        }
        for d in &s.devices {
            let memory = d
                .memory_bytes
                .map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64))
                .unwrap_or_else(|| "–".into());
            let api = d
                .runtime
                .as_ref()
                .map(|r| {
                    [r.api.clone(), r.driver.clone()]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "–".into());
            println!(
                "| {} | {built} | {} ({}){} | {} | {} | {} | {memory} | {api} | {} |",
                s.backend,
                d.spec,
                d.name,
                if d.default { ", Kiln's default" } else { "" },
                d.kind,
                if d.available { "yes" } else { "no" },
                d.precisions.join(", "),
                d.reason.clone().unwrap_or_default()
            );
        }
    }
    if !usable {
        eprintln!(
            "no usable device: build the runners (`cargo xtask doctor --build`) or see the notes above"
        );
    }
    Ok(usable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_json_parses_and_lists_every_backend_crate_of_the_workspace() {
        let json = serde_json::to_string(&statuses()).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        let listed: Vec<&str> = parsed
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["backend"].as_str().unwrap())
            .collect();
        // Every thin backend crate (a kiln-* crate with a runner binary) is listed, and the
        // PyTorch reference.
        assert!(listed.contains(&"pytorch"), "{listed:?}");
        let crates = crate::workspace::workspace_root().join("crates");
        for entry in std::fs::read_dir(crates).unwrap() {
            let dir = entry.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            if dir.join("src/main.rs").is_file() {
                // The backend the crate declares (kiln-cpu declares burn-cpu).
                let backend = crate::backends::all()
                    .iter()
                    .find(|b| {
                        matches!(&b.source, crate::backends::Source::Cargo { package, .. }
                            if *package == name)
                    })
                    .map(|b| b.name.as_str())
                    .unwrap_or_else(|| panic!("{name} declares no backend"));
                assert!(
                    listed.contains(&backend),
                    "{backend} missing from {listed:?}"
                );
            }
        }
        for b in parsed.as_array().unwrap() {
            assert!(b["built"].is_boolean() && b["devices"].is_array());
        }
    }
}
