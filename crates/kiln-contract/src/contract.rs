//! The JSON Schema of what crosses the runner boundary as JSON from or to a runner that is not
//! Rust: the cell, explain and verify requests xtask writes, and what such a runner writes
//! back (the PyTorch reference): [`Observed`], the explain and the verify record. Generated
//! from the types themselves and committed beside the Python runner ([`SCHEMA_FILE`]), which
//! validates every request it reads and every record it writes against it; this crate's test
//! (`tests/contract.rs`) fails when the committed file is not what the types generate.

use crate::explain::{ExplainRecord, ExplainRequest};
use crate::infer::{InferRecord, InferRequest};
use crate::verify::{VerifyRecord, VerifyRequest};
use crate::{CellRequest, Observed};

/// Where the generated schema is committed, from the workspace root.
pub const SCHEMA_FILE: &str = "pytorch/kiln_torch/contract.schema.json";

/// The schema document: one schema per message, by the name the Python runner asks for.
pub fn contract_schema() -> serde_json::Value {
    serde_json::json!({
        "$comment": "Generated from kiln-contract' types (the requests, Observed, the explain and verify records); do not edit. \
                     `KILN_BLESS=1 cargo test -p kiln-contract --features schema contract_schema` rewrites it.",
        "cell_request": schemars::schema_for!(CellRequest),
        "observed": schemars::schema_for!(Observed),
        "explain_request": schemars::schema_for!(ExplainRequest),
        "explain_record": schemars::schema_for!(ExplainRecord),
        "verify_request": schemars::schema_for!(VerifyRequest),
        "verify_record": schemars::schema_for!(VerifyRecord),
        "infer_request": schemars::schema_for!(InferRequest),
        "infer_record": schemars::schema_for!(InferRecord),
        "models": crate::models::descriptions(),
    })
}

/// The JSON Schema of one line of `results.jsonl` (a [`crate::schema::Record`]), generated
/// from the type the reports read: what the results site and `cargo xtask submit` check
/// every committed record against before reading it.
pub fn record_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(crate::schema::Record)).unwrap_or_default()
}
