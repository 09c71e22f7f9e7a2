//! When a cell calls for the CPU fallback (where it goes is `plan::fallback_cell`).

use kiln_contract::{Record, Status};

/// Why a cell's record calls for the CPU fallback: its device was unavailable, or it failed
/// on an operation or type the device does not support. Other failures (crashes, timeouts,
/// divergence) are results in their own right and are not re-run.
pub fn fallback_reason(record: &Record) -> Option<String> {
    let reason = record.reason.clone().unwrap_or_default();
    let lower = reason.to_lowercase();
    let unsupported = [
        "unsupported",
        "not supported",
        "does not support",
        "not implemented",
        "unimplemented",
    ]
    .iter()
    .any(|k| lower.contains(k));
    match record.status {
        Status::Skipped => Some(reason),
        Status::Failed if unsupported => Some(reason),
        _ => None,
    }
}
