//! Reading `results.jsonl` files: every valid line is kept, every bad one is explained.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use kiln_contract::schema::{Record, SCHEMA_VERSION};

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
        let first = loaded.records.len();
        read_into(BufReader::new(file), &file_path, &mut loaded);
        attach_drift(
            &file_path,
            &mut loaded.records[first..],
            &mut loaded.warnings,
        );
    }
    Ok(loaded)
}

/// Attach the run's drift (`drift.json` beside the results file `results`), the floor of its
/// intervals, to its `records`; a drift file this Kiln cannot read is a warning.
pub fn attach_drift(results: &Path, records: &mut [Record], warnings: &mut Vec<String>) {
    let drift_path = results.with_file_name(kiln_contract::drift::DRIFT_FILE);
    let Ok(text) = std::fs::read_to_string(&drift_path) else {
        return;
    };
    match serde_json::from_str::<kiln_contract::drift::RunDrift>(&text) {
        Ok(drift) => {
            for r in records {
                r.run_drift = Some(drift.share);
            }
        }
        Err(e) => warnings.push(format!(
            "{}: not a drift file this Kiln can read ({e}); intervals there have no floor",
            drift_path.display()
        )),
    }
}

/// Parse JSON lines from `reader`, appending records and warnings to `loaded`. A last line
/// without its newline is what an interrupted write leaves: it is reported as cut, not as bad.
pub fn read_into(mut reader: impl BufRead, origin: &Path, loaded: &mut Loaded) {
    let origin = origin.display();
    let mut bytes = Vec::new();
    let mut line_no = 0;
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes) {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) => {
                loaded.warnings.push(format!(
                    "{origin}:{}: read error ({err}); stopped here",
                    line_no + 1
                ));
                return;
            }
        }
        line_no += 1;
        let complete = bytes.ends_with(b"\n");
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text) {
            Ok(record) => loaded.records.push(record),
            Err(why) if !complete => loaded.warnings.push(format!(
                "{origin}:{line_no}: last line is cut short ({why}); an interrupted run leaves \
                 this, it is ignored"
            )),
            Err(why) => loaded
                .warnings
                .push(format!("{origin}:{line_no}: skipped ({why})")),
        }
    }
}

/// Parse one line, checking the schema version before the layout.
pub fn parse_line(text: &str) -> Result<Record, String> {
    parse_value(serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?)
}

/// A record from one line's JSON, checking the schema version before the layout.
pub fn parse_value(value: serde_json::Value) -> Result<Record, String> {
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
    let mut record: Record =
        serde_json::from_value(value).map_err(|e| format!("not a valid record: {e}"))?;
    record.judge_legacy_steadiness();
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::schema::{CellId, Status};

    fn record_line(model: &str) -> String {
        let cell = CellId {
            training_loop: None,
            model: model.into(),
            backend: "flex".into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 128,
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
        assert!(loaded.warnings[0].contains("cut short"));
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

    #[test]
    fn valid_rows_still_render_beside_a_bad_file() {
        let mut loaded = Loaded::default();
        let good = record_line("mnist-cnn");
        let other_version = record_line("resnet18").replace("\"schema\":1", "\"schema\":2");
        read_into(
            format!("{good}\n{other_version}\n").as_bytes(),
            Path::new("a.jsonl"),
            &mut loaded,
        );
        read_into(
            format!("{good}\n{}", &good[..20]).as_bytes(),
            Path::new("b.jsonl"),
            &mut loaded,
        );
        assert_eq!(loaded.records.len(), 2);
        assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
        assert!(
            loaded.warnings[0].starts_with("a.jsonl:2: skipped (schema version 2"),
            "{:?}",
            loaded.warnings
        );
        assert!(loaded.warnings[1].starts_with("b.jsonl:2: last line is cut short"));
        let md = crate::render::markdown(&loaded.records, None);
        assert_eq!(md.matches("| flex / cpu |").count(), 2, "{md}");
    }

    #[test]
    fn a_run_directorys_drift_is_attached_to_its_records_and_a_bad_one_named() {
        let dir = std::env::temp_dir().join(format!("kiln-drift-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = record_line("mnist-cnn");
        std::fs::write(dir.join(RESULTS_FILE), format!("{line}\n{line}\n")).unwrap();
        let loaded = load(std::slice::from_ref(&dir)).unwrap();
        assert!(loaded.records.iter().all(|r| r.run_drift.is_none()));
        let drift = kiln_contract::drift::RunDrift::of(vec![kiln_contract::drift::Recalibration {
            backend: "flex".into(),
            device: "cpu".into(),
            weights: "f32".into(),
            start_gflops: 100.0,
            end_gflops: 96.0,
        }])
        .unwrap();
        std::fs::write(
            dir.join(kiln_contract::drift::DRIFT_FILE),
            serde_json::to_string(&drift).unwrap(),
        )
        .unwrap();
        let loaded = load(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(loaded.records.len(), 2);
        for r in &loaded.records {
            assert!((r.run_drift.unwrap() - 0.04).abs() < 1e-12);
        }
        std::fs::write(dir.join(kiln_contract::drift::DRIFT_FILE), "{").unwrap();
        let loaded = load(std::slice::from_ref(&dir)).unwrap();
        assert!(
            loaded.warnings[0].contains("drift.json"),
            "{:?}",
            loaded.warnings
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The H200's kit run with 20-second cells: its CUDA f32 row was projected from two steps
    /// taken while kernels compiled (867.7 s per epoch, 800 times the truth). Read now, it is
    /// not steady and shows no time; the same cell given time (measured whole epochs, 1.07 s)
    /// and PyTorch's rows keep theirs.
    #[test]
    fn the_h200_projections_from_compiling_steps_read_as_not_steady() {
        let results = kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/results");
        let load = |dir: &str| {
            load(&[results.join(dir).join("results.jsonl")])
                .unwrap()
                .records
        };
        let kit = load("2026-12-04-xeon-f6m207-h200-kit-run-380s");
        let cuda: Vec<&Record> = kit.iter().filter(|r| r.backend == "cuda").collect();
        assert_eq!(cuda.len(), 3);
        for r in &cuda {
            assert_eq!(
                r.status,
                kiln_contract::Status::NotSteady,
                "{}",
                r.precision
            );
            assert!(r.epoch_seconds.is_none() && r.images_per_second.is_none());
            assert!(
                r.reason
                    .as_deref()
                    .is_some_and(|w| w.starts_with("not steady"))
            );
            assert!(!r.epochs.is_empty(), "what was measured is kept");
        }
        let md = crate::render::markdown(&kit, None);
        assert!(md.contains("not steady"), "{md}");
        assert!(
            !md.contains("868 s") && !md.contains("14.5 min") && !md.contains("795"),
            "{md}"
        );
        let torch = kit
            .iter()
            .find(|r| r.backend == "pytorch" && r.precision == "f32");
        assert!(
            torch
                .is_some_and(|r| r.status == kiln_contract::Status::Ok && r.epoch_seconds.is_some())
        );
        let given_time = load("2026-12-04-xeon-f6m207-h200-cuda-mnist-budget230");
        let e = given_time[0].epoch_seconds.as_ref().unwrap();
        assert!((e.median - 1.069).abs() < 0.001, "{}", e.median);
    }
}
