//! The one skeleton of `explain` and `verify`: a runner asked one question with a JSON request
//! file (`--explain FILE`, `--verify FILE`: a [`Question`]) and answering with one JSON record
//! on its last line of standard output; its standard error goes to a log, its progress lines
//! echoed. A row that cannot run is skipped, a runner that gives no record is that row's
//! failure, and every record is fingerprinted the same way ([`Asking::row`]). Besides: their
//! output directory and the one device each backend answers on.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use kiln_contract::question::{Answer, Question};
use kiln_contract::{DeviceReport, Precision, ProbeReport, Status};

use crate::backends::Backend;
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

/// One row a command asks (verify's, infer's): a backend's runner on one device in one
/// precision.
pub struct AskedRow<'a> {
    pub backend: &'a Backend,
    pub runner: &'a Runner,
    pub device: String,
    pub precision: Precision,
    /// Why it cannot run, when the probe already says so.
    pub skip: Option<String>,
    pub version: String,
    /// The Burn it was built against, where a command compares Burns (`--burn`): its records
    /// name it beside the backend (`flex · Burn 0.23.0-pre.1`).
    pub burn: Option<String>,
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

/// Write `request` to `out/<stem>.request.json`, run `runner FLAG FILE` for at most `limit`
/// with its standard error in `out/logs/<stem>.stderr`, and parse the record. `Ok(Err(why))`:
/// the runner gave no record (it died, or ran past the limit).
fn ask<Q: Question>(
    runner: &Runner,
    request: &Q,
    out: &Path,
    limit: Duration,
) -> Result<std::result::Result<Q::Record, String>> {
    let stem = request.stem();
    let request_path = out.join(format!("{stem}.request.json"));
    std::fs::write(&request_path, serde_json::to_string_pretty(request)?)
        .with_context(|| format!("cannot write {}", request_path.display()))?;
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let log_path = logs.join(format!("{stem}.stderr"));
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut cmd = runner.command();
    cmd.arg(Q::FLAG).arg(&request_path);
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
        .find_map(|l| serde_json::from_str::<Q::Record>(l).ok())
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

/// Where and how a command asks its questions: its output directory, the time one answer may
/// take, and the revision its records' fingerprints name.
pub struct Asking<'a> {
    pub out: &'a Path,
    pub limit: Duration,
    pub revision: (Option<String>, Option<bool>),
}

impl Asking<'_> {
    /// The record of `question` on `runner`: skipped for `skip`'s reason, else the runner's
    /// answer (a failed record naming why where it gives none); fingerprinted, with the Burn
    /// the runner was built against. `version`: the backend's, for a record the runner did not
    /// write.
    pub fn row<Q: Question>(
        &self,
        runner: &Runner,
        question: &Q,
        skip: Option<String>,
        version: &str,
    ) -> Q::Record {
        let mut record = match skip {
            Some(why) => {
                let mut r = question.start(version);
                r.end(Status::Skipped, why, 0.0);
                r
            }
            None => self.answer(runner, question, version),
        };
        let burn = runner.burn_version(record.backend_version()).to_string();
        let (commit, dirty) = &self.revision;
        record.set_fingerprint(crate::workspace::fingerprint_here(
            record.threads(),
            &burn,
            commit,
            *dirty,
        ));
        record
    }

    /// The runner's answer to `question`, or, where it gives none or cannot be started, a
    /// failed record saying why (a row's failure, not the end of the command).
    fn answer<Q: Question>(&self, runner: &Runner, question: &Q, version: &str) -> Q::Record {
        eprintln!("kiln: {}", question.describe());
        let started = Instant::now();
        let why = match ask(runner, question, self.out, self.limit) {
            Ok(Ok(record)) => return record,
            Ok(Err(why)) => why,
            Err(e) => format!("{e:#}"),
        };
        let mut r = question.start(version);
        r.end(Status::Failed, why, started.elapsed().as_secs_f64());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::explain::ExplainRequest;
    use kiln_contract::question::Question;
    use kiln_contract::verify::VerifyRequest;
    use kiln_contract::{ModelKind, Precision};

    fn runner(script: &str) -> Runner {
        Runner {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            needs_data_file: false,
        }
    }

    /// Explain's and verify's rows go through the one skeleton alike: a skipped row says why
    /// and runs nothing; a runner without a record is the row's failure; both fingerprinted.
    #[test]
    fn both_questions_are_skipped_failed_and_fingerprinted_alike() {
        let tmp = tempfile::tempdir().unwrap();
        let asking = Asking {
            out: tmp.path(),
            limit: Duration::from_secs(30),
            revision: (Some("abc".into()), Some(false)),
        };
        let explain = ExplainRequest::new(ModelKind::Mlp, "flex", "cpu", Precision::F32, 2);
        let never = runner("touch ran; exit 1");
        let r = asking.row(&never, &explain, Some("no device".into()), "0.22.1");
        assert_eq!(
            (r.status, r.reason.as_deref()),
            (Status::Skipped, Some("no device"))
        );
        assert!(!tmp.path().join("ran").exists() && !tmp.path().join("logs").exists());
        assert_eq!(r.fingerprint.map(|f| f.kiln_commit), Some("abc".into()));
        let verify = VerifyRequest {
            kiln_verify: kiln_contract::verify::VERIFY_VERSION,
            model: ModelKind::Mlp,
            backend: "flex".into(),
            device: "cpu".into(),
            precision: Precision::F32,
            steps: 2,
            batch: 2,
            seed: 1,
            dataset: kiln_contract::DatasetName::FashionMnistSample,
            data_dir: None,
            data_file: None,
            weights_in: None,
            init_out: Some(tmp.path().join("init.safetensors")),
            final_out: tmp.path().join("final.safetensors"),
            fault: None,
            learning_rate: kiln_contract::LEARNING_RATE,
        };
        let r = asking.row(
            &runner("echo kiln: broken >&2; exit 3"),
            &verify,
            None,
            "0.22.1",
        );
        assert_eq!(r.status, Status::Failed);
        assert!(r.reason.unwrap_or_default().contains("kiln: broken"));
        assert!(
            tmp.path()
                .join("logs")
                .join(format!("{}.stderr", verify.stem()))
                .is_file()
        );
        assert_eq!(r.fingerprint.map(|f| f.kiln_commit), Some("abc".into()));
    }
}
