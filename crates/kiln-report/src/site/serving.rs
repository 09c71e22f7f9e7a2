//! The site's serving page: every inference run (`cargo xtask infer`: a directory holding
//! infer.jsonl; an inference A/B's sides below it) under the machine that measured it, each
//! model's latency chart, table and notes as the run's own infer.html shows them.

use anyhow::Result;
use maud::html;

use super::runs::RunDir;
use crate::infer::{INFER_FILE, InferRecord};

/// One inference run: its name on the site (its path under the folder it was found in) and
/// its records.
#[derive(Debug, Clone)]
pub struct ServingRun {
    pub name: String,
    pub records: Vec<InferRecord>,
}

/// The inference runs of `dirs` (found by [`dirs_holding`] with `infer.jsonl`), in their
/// order; a record that does not read refuses the build, naming its file and line.
pub fn read_serving(dirs: &[RunDir]) -> Result<Vec<ServingRun>> {
    dirs.iter()
        .map(|d| {
            let path = d.path.join(INFER_FILE);
            let records = kiln_contract::question::read_records(&path, "an inference record")
                .map_err(anyhow::Error::msg)?;
            Ok(ServingRun {
                name: d.name.clone(),
                records,
            })
        })
        .collect()
}

/// serving.html's body: each run, newest first, with the machine its first record names.
pub fn body(runs: &[ServingRun]) -> maud::Markup {
    html! {
        h1 { "Serving" }
        p.sub {
            "Which backend crate to embed: every inference run, the same weights on every "
            "backend, latency percentiles of one-sample queries after steady state, throughput, "
            "the first prediction from process start and agreement with PyTorch "
            "(docs/inference.md says how to read them)."
        }
        @if runs.is_empty() { p { "No inference run yet (`cargo xtask infer`)." } }
        @for run in runs.iter().rev() {
            section id={ "infer-" (run.name) } {
                h2 { (run.name) }
                @if let Some(fp) = run.records.iter().find_map(|r| r.fingerprint.as_ref()) {
                    p { (kiln_contract::fingerprint::machine_label(fp)) }
                }
                (crate::infer::sections(&run.records, "h3"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::runs::dirs_holding;
    use std::path::PathBuf;

    /// The committed inference runs are found (an A/B's sides too, not a training run) and
    /// their tables shown under their machine.
    #[test]
    fn the_serving_page_shows_every_committed_inference_run() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
        let (dirs, _) = dirs_holding(&[root], INFER_FILE).unwrap();
        let runs = read_serving(&dirs).unwrap();
        assert!(
            runs.iter().any(|r| r.name.ends_with("-infer-mlp")),
            "{:?}",
            runs.iter().map(|r| &r.name).collect::<Vec<_>>()
        );
        assert!(runs.iter().all(|r| !r.records.is_empty()));
        let page = body(&runs).into_string();
        assert!(
            page.contains("flex / cpu") && page.contains("pytorch / cpu"),
            "{page}"
        );
        assert!(page.contains("AMD EPYC"), "the machine is named");
        assert!(page.contains("<svg"), "the latency chart is drawn");
    }
}
