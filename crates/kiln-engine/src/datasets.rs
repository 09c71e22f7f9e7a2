//! The dataset of a cell, written once per run for runners that do not read datasets
//! themselves (the PyTorch reference): the same samples, order of splits and normalisation
//! constants the Rust runners load, so both sides train on identical data.
//!
//! Format: the line `KILNDATA 1`, one line of JSON (the header below), then the raw bytes of
//! the train pixels, train labels, test pixels and test labels (u8, images in NCHW order).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kiln_contract::{CellRequest, Profile};
use kiln_data::{Origin, Request};
use serde::Serialize;

#[derive(Serialize)]
struct Header<'a> {
    name: &'a str,
    origin: &'a str,
    channels: usize,
    height: usize,
    width: usize,
    train: usize,
    test: usize,
    mean: &'a [f32],
    std: &'a [f32],
    standard_epoch: usize,
    files: Vec<String>,
    note: Option<&'a str>,
}

/// Write (once per run and dataset) the data of the cell `request` describes under
/// `out/logs/`; returns its path.
pub fn export_data(request: &CellRequest, out: &Path) -> Result<PathBuf> {
    let g = request.model.geometry();
    let (dataset, _) = match request.dataset {
        Some(d) => (d, None),
        None => kiln_data::default_dataset(
            g,
            request.settings.profile == Profile::Quick,
            request.settings.data_dir.as_deref(),
        )?,
    };
    let path = out.join("logs").join(format!(
        "data-{dataset}-{}x{}x{}.kdata",
        g.channels, g.height, g.width
    ));
    if path.is_file() {
        return Ok(path);
    }
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let data = kiln_data::load(&Request {
        name: dataset,
        geometry: g,
        data_dir: request.settings.data_dir.clone(),
        seed: request.settings.seed,
        synthetic_sizes: request.settings.profile.synthetic_sizes(g.standard_epoch()),
    })?;
    let header = Header {
        name: &data.name,
        origin: match data.origin {
            Origin::Real => "real",
            Origin::Synthetic => "synthetic",
            Origin::Custom => "custom",
        },
        channels: g.channels,
        height: g.height,
        width: g.width,
        train: data.train.len(),
        test: data.test.len(),
        mean: &data.mean,
        std: &data.std,
        standard_epoch: data.standard_epoch,
        files: data
            .files
            .iter()
            .map(|(p, v)| format!("{} ({v:?})", p.display()))
            .collect(),
        note: data.note.as_deref().or(request.dataset_note.as_deref()),
    };
    let tmp = path.with_extension("tmp");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?,
    );
    writeln!(file, "KILNDATA 1")?;
    writeln!(file, "{}", serde_json::to_string(&header)?)?;
    for bytes in [
        &data.train.pixels,
        &data.train.labels,
        &data.test.pixels,
        &data.test.labels,
    ] {
        file.write_all(bytes)?;
    }
    file.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{DatasetName, Event, ModelKind, Record, Status};
    use std::process::Command;

    use crate::testing::test_python as python;

    use crate::testing::reference_script as script;

    #[test]
    fn the_reference_runner_shuffles_like_kiln_data() {
        let Some(py) = python() else { return };
        let code = format!(
            "import sys; sys.path.insert(0, {:?}); from cell import epoch_permutation; \
             print(epoch_permutation(50, 42, 3))",
            script().display().to_string()
        );
        let out = Command::new(py).args(["-c", &code]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let python: Vec<i64> =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        assert_eq!(python, kiln_data::rng::epoch_permutation(50, 42, 3));
    }

    #[test]
    fn a_short_reference_run_writes_a_record_kiln_reads() {
        let Some(py) = python() else { return };
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("logs")).unwrap();
        let mut request = CellRequest::new(ModelKind::MnistCnn, "pytorch", Profile::Quick);
        request.device = "cpu".into();
        request.settings.epochs = 1;
        request.batch_size = 32;
        request.settings.budget_seconds = Some(30.0);
        request.settings.seed = 7;
        request.dataset = Some(DatasetName::FashionMnistSample);
        request.settings.eval_limit = Some(64);
        request.settings.train_limit = Some(96);
        request.calibrate = false;
        request.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
        request.data_file = Some(export_data(&request, tmp.path()).unwrap());
        let cell = tmp.path().join("cell.json");
        request.write(&cell).unwrap();
        let out = Command::new(py)
            .arg(script())
            .arg("--cell")
            .arg(&cell)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        let Ok(Event::Observed(observed)) = serde_json::from_str::<Event>(last) else {
            panic!(
                "no observed report; stdout: {stdout}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let record: Record = crate::bench::watch::observed_record(
            *observed,
            &request,
            &Some("abc".into()),
            Some(false),
        );
        assert_eq!(record.status, Status::Ok, "{:?}", record.reason);
        assert_eq!(record.backend, "pytorch");
        assert_eq!(record.dataset, "fashion-mnist-sample");
        assert_eq!((record.train_samples, record.test_samples), (96, 64));
        assert_eq!(record.epochs.len(), 1);
        assert!(
            record.epochs.iter().all(|e| e.rss_bytes.is_some()),
            "{:?}",
            record.epochs
        );
        assert!(record.test_accuracy.is_some() && record.epoch_seconds.is_some());
        // The record's derived numbers follow the shared rules (steady after two steps, then
        // one timed step of the three: projected); the fingerprint is Kiln's.
        assert_eq!(record.obtained.method, kiln_contract::Method::Projected);
        assert!(
            record
                .warmup
                .as_ref()
                .is_some_and(|w| w.steady && w.steps == 2),
            "{:?}",
            record.warmup
        );
        assert_eq!(record.fingerprint.kiln_commit, "abc");
        assert!(record.fingerprint.backend_version.starts_with("torch "));
        assert!(!record.fingerprint.cpu_model.is_empty());
        assert!(
            record.flops_per_sample == Some(219_649_536),
            "{:?}",
            record.flops_per_sample
        );
    }
}
