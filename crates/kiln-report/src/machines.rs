//! The machines a report's records come from, a line each: CPU, cores, threads, memory, OS,
//! Burn and Kiln versions, and the remote servers rows trained on.

use kiln_contract::Record;

use crate::fields::machine;
use crate::table::machines;
use crate::units::{human_bytes, human_bytes_short};

/// One line per machine: CPU, cores, threads, memory, OS, Burn and Kiln versions; then one per
/// remote server the rows trained on (the machine that did their arithmetic).
pub fn machine_lines(all: &[Record]) -> Vec<String> {
    let mut lines = local_machine_lines(all);
    let mut seen: Vec<&str> = Vec::new();
    for remote in all.iter().filter_map(|r| r.remote.as_ref()) {
        if seen.contains(&remote.url.as_str()) {
            continue;
        }
        seen.push(&remote.url);
        let fp = &remote.fingerprint;
        lines.push(format!(
            "Remote server {} at {}: {} {} ({}) on {} ({} logical cores), {}.",
            fp.hostname,
            remote.url,
            remote.backend,
            remote.device,
            remote.device_name,
            fp.cpu_model,
            fp.logical_cores,
            memory_os_and_build(fp)
        ));
    }
    lines
}

/// [`machine_lines`] of the machines that ran the runners.
fn local_machine_lines(all: &[Record]) -> Vec<String> {
    machines(all)
        .iter()
        .filter_map(|name| {
            let fp = all
                .iter()
                .filter(|r| &machine(r) == name)
                .map(|r| &r.fingerprint)
                .find(|f| !f.cpu_model.is_empty())?;
            let hardware = match &fp.cpu {
                Some(cpu) => {
                    let num = |n: Option<u32>| n.map_or("?".into(), |n| n.to_string());
                    let cache = |label: &str, b: Option<u64>| {
                        b.map(|b| format!("{label} {}", human_bytes_short(b)))
                    };
                    let caches: Vec<String> = [
                        cache("L1d", cpu.l1d_bytes),
                        cache("L2", cpu.l2_bytes),
                        cache("L3", cpu.l3_bytes),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    format!(
                        "{} family {} model {} stepping {}; ISA {}; {}",
                        cpu.vendor
                            .clone()
                            .unwrap_or_else(|| "vendor unknown".into()),
                        num(cpu.family),
                        num(cpu.model),
                        num(cpu.stepping),
                        if cpu.isa.is_empty() {
                            "not reported".into()
                        } else {
                            cpu.isa.join(" ")
                        },
                        if caches.is_empty() {
                            "caches not reported".into()
                        } else {
                            caches.join(", ")
                        }
                    )
                }
                None => "CPU identity not recorded (a record older than Kiln's hardware \
                         fingerprint)"
                    .into(),
            };
            Some(format!(
                "Machine {name}: {} [{hardware}] ({} logical cores, {} threads used), {}.",
                fp.cpu_model,
                fp.logical_cores,
                fp.threads,
                memory_os_and_build(fp)
            ))
        })
        .collect()
}

/// The end of a machine line: memory, OS, and the Burn and Kiln that made the record (and the
/// opt-level, when it was not a release build's).
fn memory_os_and_build(fp: &kiln_contract::Fingerprint) -> String {
    format!(
        "{}, {}; Burn {}, Kiln {} ({}{}){}",
        fp.memory_bytes
            .map(human_bytes)
            .unwrap_or_else(|| "memory unknown".into()),
        fp.os,
        fp.burn_version,
        fp.kiln_version,
        fp.kiln_commit,
        if fp.kiln_dirty == Some(true) {
            ", dirty tree"
        } else {
            ""
        },
        match fp.opt_level.as_deref() {
            Some(level) if level != "3" => {
                format!(", built at opt-level {level}: not release times")
            }
            _ => String::new(),
        }
    )
}
