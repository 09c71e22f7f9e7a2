//! Reading `results.jsonl` files: every valid line is kept, every bad one is explained.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::schema::{Record, SCHEMA_VERSION};

/// Name of the results file inside a run directory.
pub const RESULTS_FILE: &str = "results.jsonl";

/// A results file (or run directory) that could not be opened at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source} (pass a results.jsonl file or a run directory that holds one)")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Records read from one or more files, with a note for every line that was passed over.
#[derive(Debug, Default)]
pub struct Loaded {
    pub records: Vec<Record>,
    pub warnings: Vec<String>,
}

/// The results file for `path`: the path itself, or `path/results.jsonl` for a directory.
pub fn results_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(RESULTS_FILE)
    } else {
        path.to_path_buf()
    }
}

/// Read every record of each file or run directory in `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, ReadError> {
    let mut loaded = Loaded::default();
    for path in paths {
        let file_path = results_path(path);
        let file = File::open(&file_path).map_err(|source| ReadError::Open {
            path: file_path.clone(),
            source,
        })?;
        read_into(BufReader::new(file), &file_path, &mut loaded);
    }
    Ok(loaded)
}

/// Parse JSON lines from `reader`, appending records and warnings to `loaded`.
pub fn read_into(reader: impl BufRead, origin: &Path, loaded: &mut Loaded) {
    let origin = origin.display();
    let mut lines = reader.split(b'\n').enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        let line_no = index + 1;
        let is_last = lines.peek().is_none();
        let bytes = match line {
            Ok(bytes) => bytes,
            Err(err) => {
                loaded.warnings.push(format!(
                    "{origin}:{line_no}: read error ({err}); stopped here"
                ));
                return;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text) {
            Ok(record) => loaded.records.push(record),
            Err(why) if is_last => loaded.warnings.push(format!(
                "{origin}:{line_no}: last line is incomplete or invalid ({why}); it was probably \
                 cut by an interrupted run and is ignored"
            )),
            Err(why) => loaded
                .warnings
                .push(format!("{origin}:{line_no}: skipped ({why})")),
        }
    }
}

/// Parse one line, checking the schema version before the layout.
pub fn parse_line(text: &str) -> Result<Record, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let schema = value.get("schema").and_then(|v| v.as_u64());
    match schema {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "schema version {v}, this Kiln reads version {SCHEMA_VERSION}; re-render it with \
                 the Kiln version that wrote it, or re-run the cell"
            ));
        }
        None => return Err("no \"schema\" field: not a Kiln record".into()),
    }
    serde_json::from_value(value).map_err(|e| format!("not a valid record: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{CellId, Status};

    fn record_line(model: &str) -> String {
        let cell = CellId {
            model: model.into(),
            backend: "flex".into(),
            device: "cpu".into(),
            precision: "f32".into(),
        };
        serde_json::to_string(&Record::not_run(&cell, Status::Skipped, "test")).unwrap()
    }

    #[test]
    fn truncated_last_line_is_reported_and_the_rest_kept() {
        let full = record_line("a");
        let cut = &record_line("b")[..40];
        let text = format!("{full}\n{full}\n{cut}");
        let mut loaded = Loaded::default();
        read_into(text.as_bytes(), Path::new("r.jsonl"), &mut loaded);
        assert_eq!(loaded.records.len(), 2);
        assert_eq!(loaded.warnings.len(), 1);
        assert!(
            loaded.warnings[0].contains("r.jsonl:3"),
            "{:?}",
            loaded.warnings
        );
        assert!(loaded.warnings[0].contains("incomplete"));
    }

    #[test]
    fn other_schema_version_is_named() {
        let line = record_line("a").replace("\"schema\":1", "\"schema\":99");
        let err = parse_line(&line).unwrap_err();
        assert!(err.contains("schema version 99"), "{err}");
    }

    #[test]
    fn garbage_never_panics() {
        for text in ["", "{", "[]", "null", "{\"schema\":1}", "\u{0}\u{1}"] {
            let _ = parse_line(text);
        }
    }
}
