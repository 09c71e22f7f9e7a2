//! A run's records checked before the site or `submit` reads them: every line of its
//! `results.jsonl` against the record's JSON Schema (generated from kiln-contract' `Record`),
//! then read as the reports read it. The first line that fails refuses the whole run, naming
//! the file, the line and the field.

use std::path::{Path, PathBuf};

use kiln_contract::schema::Record;

use crate::read::{RESULTS_FILE, attach_drift, parse_value};

/// A run refused: which file, which line (0: the file itself), which field, and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}:{line}: {field}: {message} (fix or remove that line, or leave the run out)",
    path.display()
)]
pub struct Refused {
    pub path: PathBuf,
    pub line: usize,
    /// A JSON pointer into the record (`/epoch_seconds/median`), `(record)` for the whole line.
    pub field: String,
    pub message: String,
}

/// The record schema, compiled once.
pub struct Checker {
    validator: jsonschema::Validator,
}

impl Checker {
    /// The checker of [`kiln_contract::contract::record_schema`].
    pub fn new() -> anyhow::Result<Checker> {
        let schema = kiln_contract::contract::record_schema();
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| anyhow::anyhow!("the record schema does not compile: {e}"))?;
        Ok(Checker { validator })
    }

    /// Every record of the run directory `dir`, each line checked against the schema and then
    /// read (its drift attached); any line that fails refuses the run.
    pub fn check_run(&self, dir: &Path) -> Result<Vec<Record>, Refused> {
        let path = dir.join(RESULTS_FILE);
        let refused = |line: usize, field: &str, message: String| Refused {
            path: path.clone(),
            line,
            field: field.to_string(),
            message,
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| refused(0, "(file)", e.to_string()))?;
        let mut records = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| refused(i + 1, "(record)", format!("not JSON: {e}")))?;
            if let Some(error) = self.validator.iter_errors(&value).next() {
                let (pointer, message) = deepest(&error);
                let field = if pointer.is_empty() {
                    "(record)"
                } else {
                    &pointer
                };
                return Err(refused(i + 1, field, message));
            }
            records.push(parse_value(value).map_err(|why| refused(i + 1, "(record)", why))?);
        }
        let mut warnings = Vec::new();
        attach_drift(&path, &mut records, &mut warnings);
        if let Some(warning) = warnings.first() {
            return Err(refused(0, "(file)", warning.clone()));
        }
        if records.is_empty() {
            return Err(refused(0, "(file)", "no record".into()));
        }
        Ok(records)
    }
}

/// The innermost field an error is about: an optional field's value that fails is reported
/// by `anyOf` at the field; the branch that went deepest names the part that is wrong.
fn deepest(error: &jsonschema::ValidationError<'_>) -> (String, String) {
    use jsonschema::error::ValidationErrorKind::{AnyOf, OneOfNotValid};
    let here = (error.instance_path().to_string(), error.to_string());
    let (AnyOf { context } | OneOfNotValid { context }) = error.kind() else {
        return here;
    };
    context
        .iter()
        .flatten()
        .map(deepest)
        .filter(|(path, _)| path.len() > here.0.len())
        .max_by_key(|(path, _)| path.len())
        .unwrap_or(here)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(run: &str) -> PathBuf {
        kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/results")
            .join(run)
    }

    /// A copy of a committed run with its first record's `field` set to `value`.
    fn corrupted(field: &str, value: serde_json::Value) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(
            committed("2026-12-04-xeon-f6m167-first-run").join(RESULTS_FILE),
        )
        .unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        first.pointer_mut(field).map(|v| *v = value).unwrap();
        lines[0] = first.to_string();
        std::fs::write(dir.path().join(RESULTS_FILE), lines.join("\n") + "\n").unwrap();
        dir
    }

    #[test]
    fn every_committed_run_passes_the_schema() {
        let checker = Checker::new().unwrap();
        let root = committed("");
        // Every run, A/B sides and fleet tasks included, passes the schema.
        let (dirs, _) = crate::site::run_dirs(std::slice::from_ref(&root)).unwrap();
        assert!(
            dirs.iter().any(|d| d.name.contains("/results/")),
            "no fleet task found"
        );
        for dir in &dirs {
            checker.check_run(&dir.path).unwrap();
        }
        assert!(dirs.len() >= 20, "{} runs", dirs.len());
    }

    #[test]
    fn a_corrupt_record_is_refused_with_its_file_line_and_field() {
        let checker = Checker::new().unwrap();
        let dir = corrupted("/epoch_seconds/median", serde_json::json!("fast"));
        let refused = checker.check_run(dir.path()).unwrap_err();
        assert_eq!(refused.line, 1);
        assert_eq!(refused.field, "/epoch_seconds/median");
        let text = refused.to_string();
        assert!(
            text.contains("results.jsonl:1: /epoch_seconds/median"),
            "{text}"
        );
        // A field the schema does not know the type of is still refused by the reader.
        let dir = corrupted("/schema", serde_json::json!(7));
        let refused = checker.check_run(dir.path()).unwrap_err();
        assert_eq!(refused.line, 1);
        assert!(refused.message.contains("schema version 7"), "{refused}");
    }
}
