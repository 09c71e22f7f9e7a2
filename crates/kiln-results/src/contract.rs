//! The JSON Schema of what crosses the runner boundary as JSON from or to a runner that is not
//! Rust: the cell request xtask writes and the [`Observed`] such a runner writes back (the
//! PyTorch reference). Generated from the types themselves and committed beside the Python
//! runner ([`SCHEMA_FILE`]), which validates every request it reads and every record it writes
//! against it; xtask's test fails when the committed file is not what the types generate.

use crate::{CellRequest, Observed};

/// Where the generated schema is committed, from the workspace root.
pub const SCHEMA_FILE: &str = "bench/pytorch/kiln_torch/contract.schema.json";

/// The schema document: one schema per message, by the name the Python runner asks for.
pub fn contract_schema() -> serde_json::Value {
    serde_json::json!({
        "$comment": "Generated from kiln-results' types (CellRequest, Observed); do not edit. \
                     `KILN_BLESS=1 cargo test -p xtask contract_schema` rewrites it.",
        "cell_request": schemars::schema_for!(CellRequest),
        "observed": schemars::schema_for!(Observed),
    })
}
