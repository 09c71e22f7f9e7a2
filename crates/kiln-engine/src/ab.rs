//! An A/B run directory (`--burn A --burn B`) compared again from its sides' records: the
//! op-by-op comparison where the sides hold explain records, else the epoch times'.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// The comparison of an A/B run directory's sides (explain's op by op when they hold explain
/// records), written again.
pub fn rewrite(dir: &Path, sides: &[PathBuf]) -> Result<String> {
    if !sides
        .first()
        .is_some_and(|s| s.join(crate::explain::EXPLAIN_FILE).is_file())
    {
        let sequential = sides
            .first()
            .and_then(|s| crate::bench::ab::sequential_of(s));
        return crate::bench::ab::write_ab(dir, sides, sequential.as_ref());
    }
    let mut labelled = Vec::new();
    for side in sides {
        let records = crate::explain::load(std::slice::from_ref(side))?;
        let label = records
            .iter()
            .find_map(|r| r.burn.as_ref().map(|b| b.label()))
            .unwrap_or_else(|| side.display().to_string());
        labelled.push((label, records));
    }
    crate::explain::write_ab(dir, &labelled)
}
