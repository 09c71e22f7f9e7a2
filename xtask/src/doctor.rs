//! `cargo xtask doctor`: every backend, built or not, its devices, available or not and why.

use anyhow::Result;
use serde::Serialize;

use kiln_results::DeviceReport;

use crate::backends::{self, BACKENDS};

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
    BACKENDS
        .iter()
        .map(|b| {
            let mut status = BackendStatus {
                backend: b.name.into(),
                summary: b.summary.into(),
                built: false,
                build_note: None,
                backend_version: None,
                devices: Vec::new(),
            };
            if let Some(why) = backends::unbuildable(b) {
                status.build_note = Some(why);
                return status;
            }
            let Some(path) = backends::runner_path(b).filter(|p| p.is_file()) else {
                status.build_note = Some(format!(
                    "not built: `cargo xtask doctor --build` or `cargo build --release -p {}`",
                    b.package.unwrap_or(b.name)
                ));
                return status;
            };
            status.built = true;
            match backends::probe(&path) {
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
        backends::build_all()?;
    }
    let all = statuses();
    let usable = all.iter().any(|s| s.devices.iter().any(|d| d.available));
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(usable);
    }
    println!("| Backend | Built | Device | Kind | Available | Precisions | Note |");
    println!("|---|---|---|---|---|---|---|");
    for s in &all {
        let built = if s.built { "yes" } else { "no" };
        if s.devices.is_empty() {
            println!(
                "| {} | {built} | – | – | no | – | {} |",
                s.backend,
                s.build_note.clone().unwrap_or_default()
            );
        }
        for d in &s.devices {
            println!(
                "| {} | {built} | {} ({}){} | {} | {} | {} | {} |",
                s.backend,
                d.spec,
                d.name,
                if d.default { ", default" } else { "" },
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
        // Every thin backend crate (a kiln-* crate with a runner binary) is listed.
        let crates = crate::workspace_root().join("crates");
        for entry in std::fs::read_dir(crates).unwrap() {
            let dir = entry.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            if dir.join("src/main.rs").is_file() {
                let backend = name.trim_start_matches("kiln-");
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
