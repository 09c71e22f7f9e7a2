//! Each inference row's agreement with the reference row: top-1 agreement and the largest
//! logit difference from their logits files, and accuracy against the test labels.

use kiln_contract::Status;
use kiln_contract::infer::InferRecord;

/// Each ok record's agreement with the reference row (the first ok row of the first of
/// `references`, backends' names, that has one), from their logits files; the reference row's
/// own accuracy too.
pub(super) fn agree(records: &mut [InferRecord], references: &[&str], labels: &[u8]) {
    let logits = |r: &InferRecord| {
        r.logits
            .as_deref()
            .filter(|_| r.status == Status::Ok)
            .and_then(|p| kiln_contract::infer::read_logits(p).ok())
    };
    let Some((name, (base, classes))) = references.iter().find_map(|&reference| {
        records
            .iter()
            .filter(|r| r.backend == reference)
            .find_map(|r| logits(r).map(|l| (r.label(), l)))
    }) else {
        return;
    };
    for r in records.iter_mut() {
        if let Some((values, _)) = logits(r) {
            r.agreement =
                kiln_contract::infer::agreement(&name, &base, &values, classes, Some(labels));
        }
    }
}
