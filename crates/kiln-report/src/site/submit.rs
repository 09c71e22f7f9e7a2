//! `submit`: a run checked as the site checks it, then copied under the committed runs by its
//! canonical name (`name::run_prefix` and what the run was), for a pull request.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{name, validate::Checker};

/// `what` as the name's last part: given, else the directory's own name unless it is a bare
/// time stamp (`20261204-225533`), else `run`.
fn what_of(run: &Path, what: Option<&str>) -> Result<String> {
    let own = run
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = own.len() == 15 && own.chars().filter(char::is_ascii_digit).count() == 14;
    let chosen = match what {
        Some(w) => w.to_string(),
        None if stamp || own.is_empty() => "run".into(),
        None => own,
    };
    let slug = name::slug(&chosen);
    if slug.is_empty() {
        bail!("--what {chosen:?}: give a name of letters and digits (`quick-repeats3`)");
    }
    Ok(slug)
}

/// Check `run` and copy it to `results/DATE-CPU-TAG-WHAT`; the new directory's path.
pub fn submit(run: &Path, what: Option<&str>, results: &Path) -> Result<PathBuf> {
    let records = Checker::new()?.check_run(run)?;
    let prefix =
        name::run_prefix(&records).map_err(|why| anyhow::anyhow!("{}: {why}", run.display()))?;
    let dest = results.join(format!("{prefix}-{}", what_of(run, what)?));
    if dest.exists() {
        bail!(
            "{} is already there: pass --what NAME to name this run apart",
            dest.display()
        );
    }
    copy_run(run, &dest)?;
    Ok(dest)
}

/// A run's files, sub-directories included, without the exported data files (`*.kdata`: the
/// dataset's bytes again), the generated page (`report.html`: `cargo xtask report DIR --html
/// FILE` renders it again from the records; committed runs stay small enough to travel to the
/// GPU machine, docs/gpu.md) or links.
pub fn copy_run(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let entries =
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?;
    for entry in entries {
        let entry = entry?;
        let (path, kind) = (entry.path(), entry.file_type()?);
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_run(&path, &target)?;
        } else if kind.is_file()
            && path.extension().is_none_or(|e| e != "kdata")
            && entry.file_name() != "report.html"
        {
            std::fs::copy(&path, &target).with_context(|| {
                format!("cannot copy {} to {}", path.display(), target.display())
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::{build, read_runs, run_dirs};

    fn committed() -> PathBuf {
        kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR")).join("../../docs/results")
    }

    /// A committed run copied to a scratch `results/<stamp>` directory, as a run leaves it.
    fn fresh_run(tmp: &Path) -> PathBuf {
        let run = tmp.join("results/20261204-101500");
        copy_run(&committed().join("2026-12-04-xeon-f6m167-first-run"), &run).unwrap();
        run
    }

    #[test]
    fn submit_names_a_run_by_its_records_and_the_next_site_shows_it() {
        let tmp = tempfile::tempdir().unwrap();
        let run = fresh_run(tmp.path());
        std::fs::write(run.join("report.html"), "<html></html>").unwrap();
        let results = tmp.path().join("docs-results");
        let dest = submit(&run, None, &results).unwrap();
        assert_eq!(dest.file_name().unwrap(), "2026-12-04-xeon-f6m167-run");
        // Records and report.md travel; the generated page does not.
        assert!(dest.join("results.jsonl").is_file());
        assert!(!dest.join("report.html").exists());
        // The same run again is refused until it is named apart.
        let again = submit(&run, None, &results).unwrap_err().to_string();
        assert!(again.contains("--what"), "{again}");
        submit(&run, Some("first run, again"), &results).unwrap();
        assert!(
            results
                .join("2026-12-04-xeon-f6m167-first-run-again")
                .is_dir()
        );
        // The next site reads it and names it as the source of its rows.
        let (dirs, _) = run_dirs(&[results]).unwrap();
        let runs = read_runs(&dirs).unwrap();
        let out = tmp.path().join("site");
        build(&runs, &[], &out).unwrap();
        let data: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
        let named = |v: &serde_json::Value| v.to_string().contains("2026-12-04-xeon-f6m167-run\"");
        assert!(named(&data["machines"][0]["runs"]), "{data}");
        // Its row names it: as the row's source, or among the other runs that measured it.
        let row = &data["rows"][0];
        assert!(named(&row["run"]) || named(&row["also"]), "{row}");
    }

    #[test]
    fn submit_refuses_a_corrupt_run_naming_file_line_and_field() {
        let tmp = tempfile::tempdir().unwrap();
        let run = fresh_run(tmp.path());
        let file = run.join("results.jsonl");
        let text = std::fs::read_to_string(&file).unwrap();
        let corrupt = text
            .replacen("\"test_accuracy\":0.", "\"test_accuracy\":\"0.", 1)
            .replacen(",\"test_samples\"", "\",\"test_samples\"", 1);
        std::fs::write(&file, corrupt).unwrap();
        let err = submit(&run, None, &tmp.path().join("out"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("results.jsonl:1: /test_accuracy"), "{err}");
        assert!(!tmp.path().join("out").exists());
    }
}
