//! What explain's, verify's and inference's requests and records have in common: a request a
//! runner answers with one record (`--explain FILE`, `--verify FILE`, `--infer FILE`), whose
//! header (status, reason, wall time, threads, the backend's version, the fingerprint) the
//! engine fills the same way for each. The engine's one skeleton (`kiln_engine::answer`) runs any [`Question`].

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::explain::{ExplainRecord, ExplainRequest};
use crate::infer::{InferRecord, InferRequest};
use crate::schema::{Fingerprint, Status};
use crate::verify::{VerifyRecord, VerifyRequest};

/// The records of a JSON-lines file (`explain.jsonl`, `infer.jsonl`): one per non-blank line,
/// a line that is not `what` (`an explain record`) an error naming the file and the line.
pub fn read_records<R: DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<R>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not {what} ({e})", path.display(), i + 1))
        })
        .collect()
}

/// A request one runner answers with one record.
pub trait Question: Serialize {
    type Record: Answer + Serialize + DeserializeOwned;
    /// The runner's flag that takes the request file.
    const FLAG: &'static str;
    /// The request file's and the log's name (without extension).
    fn stem(&self) -> String;
    /// What is being asked, in words (`explaining mnist-cnn on flex cpu f32 (batch 128)`).
    fn describe(&self) -> String;
    /// The record of this request before anything ran: its header filled, status failed.
    fn start(&self, backend_version: &str) -> Self::Record;
}

/// The header every answer carries.
pub trait Answer {
    /// Set how the request ended, why, and after how long.
    fn end(&mut self, status: Status, reason: String, wall_seconds: f64);
    fn threads(&self) -> usize;
    fn backend_version(&self) -> &str;
    fn set_fingerprint(&mut self, fingerprint: Fingerprint);
}

/// The [`Answer`] of a record whose header fields have the common names.
macro_rules! answer {
    ($record:ty) => {
        impl Answer for $record {
            fn end(&mut self, status: Status, reason: String, wall_seconds: f64) {
                self.status = status;
                self.reason = Some(reason);
                self.wall_seconds = wall_seconds;
            }
            fn threads(&self) -> usize {
                self.threads
            }
            fn backend_version(&self) -> &str {
                &self.backend_version
            }
            fn set_fingerprint(&mut self, fingerprint: Fingerprint) {
                self.fingerprint = Some(fingerprint);
            }
        }
    };
}
answer!(ExplainRecord);
answer!(VerifyRecord);
answer!(InferRecord);

impl Question for ExplainRequest {
    type Record = ExplainRecord;
    const FLAG: &'static str = "--explain";

    fn stem(&self) -> String {
        format!("{}-{}-{}", self.model, self.backend, self.precision)
    }

    fn describe(&self) -> String {
        format!(
            "explaining {} on {} {} {} (batch {})",
            self.model, self.backend, self.device, self.precision, self.batch
        )
    }

    fn start(&self, backend_version: &str) -> ExplainRecord {
        ExplainRecord::start(self, backend_version, 0)
    }
}

impl Question for VerifyRequest {
    type Record = VerifyRecord;
    const FLAG: &'static str = "--verify";

    fn stem(&self) -> String {
        self.id().stem()
    }

    fn describe(&self) -> String {
        format!(
            "verifying {} on {} {} {} ({} steps of batch {})",
            self.model, self.backend, self.device, self.precision, self.steps, self.batch
        )
    }

    fn start(&self, backend_version: &str) -> VerifyRecord {
        VerifyRecord::start(self, backend_version)
    }
}

impl Question for InferRequest {
    type Record = InferRecord;
    const FLAG: &'static str = "--infer";

    fn stem(&self) -> String {
        InferRequest::stem(self)
    }

    fn describe(&self) -> String {
        format!(
            "inference of {} on {} {} {} (batches {:?}, throughput at {})",
            self.model,
            self.backend,
            self.device,
            self.precision,
            self.latency_batches,
            self.throughput_batch
        )
    }

    fn start(&self, backend_version: &str) -> InferRecord {
        InferRecord::start(self, backend_version)
    }
}
