//! A runner asked one question with a JSON request file (`--explain FILE`, `--verify FILE`)
//! and answering with one JSON record on its last line of standard output; its standard error
//! goes to a log, its progress lines echoed. What `explain` and `verify` share besides: their
//! output directory and the one device each backend answers on.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

use kiln_results::{DeviceReport, ProbeReport};

use crate::runners::Runner;
use crate::time;
use crate::workspace::workspace_root;

/// The output directory of a `command` run: `out`, else `results/<command>-<UTC timestamp>/`;
/// refused when it already holds `records` (the file of such a run), the error ending with
/// `hint`.
pub fn out_dir(
    out: Option<&Path>,
    command: &str,
    records: &str,
    hint: &str,
) -> Result<std::path::PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => workspace_root()
            .join("results")
            .join(format!("{command}-{}", time::stamp(time::unix_now()))),
    };
    if dir.join(records).exists() {
        anyhow::bail!(
            "--out {}: already holds {command} records; choose another directory{hint}",
            dir.display()
        );
    }
    Ok(dir)
}

/// The device a backend answers on: its default device when available, else its first
/// available one; else why there is none.
pub fn one_device(probe: &ProbeReport) -> std::result::Result<&DeviceReport, String> {
    probe
        .devices
        .iter()
        .find(|d| d.default && d.available)
        .or_else(|| probe.devices.iter().find(|d| d.available))
        .ok_or_else(|| match probe.devices.first() {
            Some(d) => format!(
                "no available device: {}",
                d.reason.as_deref().unwrap_or("unavailable")
            ),
            None => "the backend reports no device".into(),
        })
}

/// Write `request` to `out/<stem>.request.json`, run `runner flag FILE` for at most `limit`
/// with its standard error in `out/logs/<stem>.stderr`, and parse the record. `Ok(Err(why))`:
/// the runner gave no record (it died, or ran past the limit).
pub fn ask<Q: Serialize, R: DeserializeOwned>(
    runner: &Runner,
    flag: &str,
    request: &Q,
    stem: &str,
    out: &Path,
    limit: Duration,
) -> Result<std::result::Result<R, String>> {
    let request_path = out.join(format!("{stem}.request.json"));
    std::fs::write(&request_path, serde_json::to_string_pretty(request)?)
        .with_context(|| format!("cannot write {}", request_path.display()))?;
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let log_path = logs.join(format!("{stem}.stderr"));
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut cmd = runner.command();
    cmd.arg(flag).arg(&request_path);
    let started = Instant::now();
    // Its log keeps every line; Kiln's own lines are shown as they come.
    let on_stderr = move |line: &str| {
        use std::io::Write;
        let _ = writeln!(log, "{line}");
        if line.starts_with("kiln") {
            eprintln!("  {line}");
        }
    };
    let (status, stdout) = crate::supervise::run_once(&mut cmd, limit, on_stderr)
        .with_context(|| format!("cannot start {}", runner.display()))?;
    if let Some(r) = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<R>(l).ok())
    {
        return Ok(Ok(r));
    }
    Ok(Err(match status {
        None => format!(
            "stopped after {} without a record (limit {})",
            time::short(started.elapsed().as_secs_f64()),
            time::short(limit.as_secs_f64())
        ),
        Some(s) => format!(
            "the runner exited ({s}) without a record; its log: {} ({})",
            log_path.display(),
            crate::bench::child::tail_of(&log_path, 3)
        ),
    }))
}

/// [`ask`] with a record in every case: where the runner gave none, or could not be started,
/// `failed(why, seconds)` is the row's record (a row's failure, not the end of the command).
#[allow(clippy::too_many_arguments)]
pub fn ask_or<Q: Serialize, R: DeserializeOwned>(
    runner: &Runner,
    flag: &str,
    request: &Q,
    stem: &str,
    out: &Path,
    limit: Duration,
    failed: impl FnOnce(String, f64) -> R,
) -> R {
    let started = Instant::now();
    let why = match ask(runner, flag, request, stem, out, limit) {
        Ok(Ok(record)) => return record,
        Ok(Err(why)) => why,
        Err(e) => format!("{e:#}"),
    };
    failed(why, started.elapsed().as_secs_f64())
}
