//! The canonical name of a committed run directory, `DATE-CPU-TAG-WHAT`: DATE the UTC day its
//! first record started, CPU the processor's line (`epyc`, `xeon`; else its vendor), TAG its
//! family and model (`f25m17`), WHAT what the run was. `cargo xtask submit` names a run so, and
//! a test holds every directory under docs/results to it.

use std::time::{Duration, UNIX_EPOCH};

use kiln_contract::schema::{Fingerprint, Record};

/// `YYYY-MM-DD` (UTC) of a Unix time.
pub fn day(unix: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(unix);
    humantime::format_rfc3339_seconds(at).to_string()[..10].to_string()
}

/// The processor's line as run names write it: `epyc`, `xeon`, else its vendor (`amd`,
/// `intel`) or the first word of its name (`apple`).
fn cpu_word(f: &Fingerprint) -> String {
    let name = f.cpu_model.to_ascii_lowercase();
    let vendor = f.cpu.as_ref().and_then(|c| c.vendor.as_deref());
    for line in ["epyc", "xeon"] {
        if name.contains(line) {
            return line.into();
        }
    }
    if vendor.is_some_and(|id| VENDORS.iter().any(|(known, _)| *known == id)) {
        vendor_name(f).to_ascii_lowercase()
    } else {
        slug(name.split_whitespace().next().unwrap_or("cpu"))
    }
}

/// CPU vendors by the identification string their CPUs report, and their names.
const VENDORS: [(&str, &str); 2] = [("AuthenticAMD", "AMD"), ("GenuineIntel", "Intel")];

/// The CPU's vendor as people name it (`AMD`, `Intel`), else the identification string, else
/// the first word of the CPU's name.
pub fn vendor_name(f: &Fingerprint) -> String {
    match f.cpu.as_ref().and_then(|c| c.vendor.as_deref()) {
        Some(id) => VENDORS
            .iter()
            .find(|(known, _)| *known == id)
            .map_or(id, |(_, name)| name)
            .to_string(),
        None => f
            .cpu_model
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string(),
    }
}

/// `EPYC f25m17`, `Xeon f6m207`: the processor's line and its family and model, for tables.
pub fn cpu_short(f: &Fingerprint) -> String {
    let word = match cpu_word(f).as_str() {
        "epyc" => "EPYC".to_string(),
        "xeon" => "Xeon".to_string(),
        "amd" => "AMD".to_string(),
        other => other.to_string(),
    };
    match cpu_tag(f) {
        Some(tag) => format!("{word} {tag}"),
        None => word,
    }
}

/// `f25m17` from the fingerprint's CPU identity; `None` where the CPU has no family.
fn cpu_tag(f: &Fingerprint) -> Option<String> {
    let cpu = f.cpu.as_ref()?;
    Some(format!("f{}m{}", cpu.family?, cpu.model?))
}

/// Where a run's records come from: the UTC day the first of them started (`None` where they
/// carry no start, as explain's and verify's records) and the one CPU they all name
/// (`xeon-f6m207`), from each record's start and fingerprint. A record counts when it started
/// or its fingerprint names a CPU (a cell that never ran carries neither). Refused, saying why,
/// when no record counts, one carries no CPU family and model, or they name several CPUs.
pub fn run_origin<'a>(
    records: impl IntoIterator<Item = (u64, &'a Fingerprint)>,
) -> Result<(Option<String>, String), String> {
    let (mut first, mut cpus) = (None::<u64>, Vec::<String>::new());
    for (started, f) in records {
        if started == 0 && f.cpu_model.is_empty() {
            continue;
        }
        if started > 0 {
            first = Some(first.map_or(started, |t| t.min(started)));
        }
        let tag = cpu_tag(f).ok_or_else(|| {
            format!(
                "a record ({}) carries no CPU family and model: make the run again with this \
                 Kiln",
                f.cpu_model
            )
        })?;
        let cpu = format!("{}-{tag}", cpu_word(f));
        if !cpus.contains(&cpu) {
            cpus.push(cpu);
        }
    }
    match &cpus[..] {
        [cpu] => Ok((first.map(day), cpu.clone())),
        [] => Err("no record names the machine it ran on".into()),
        _ => Err(format!(
            "its records come from several CPUs ({}): submit each machine's run apart",
            cpus.join(", ")
        )),
    }
}

/// `2026-12-04-xeon-f6m207`, from a run's records ([`run_origin`]); refused when they carry
/// no start time.
pub fn run_prefix(records: &[Record]) -> Result<String, String> {
    match run_origin(records.iter().map(|r| (r.started_at, &r.fingerprint)))? {
        (Some(day), cpu) => Ok(format!("{day}-{cpu}")),
        (None, _) => Err("its records carry no start time".into()),
    }
}

/// Lower-case letters, digits and single dashes: a name safe in a path and a URL.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_days() {
        assert_eq!(
            slug("AMD EPYC (family 25), 2 cores · vm"),
            "amd-epyc-family-25-2-cores-vm"
        );
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(day(1_764_892_800), "2025-12-05");
    }
}
