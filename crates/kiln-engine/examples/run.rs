//! A program that runs Kiln's engine itself, as a CI job of your own might: one quick cell
//! (the MLP on the flex backend, seconds of training), then its record read back.
//!
//! `cargo run -p kiln-engine --example run -- [OUT_DIR]` (default: a temporary directory).
//! The engine builds the flex runner first (minutes, once), as `cargo xtask bench-all` would.

use std::path::PathBuf;

use clap::Parser;
use kiln_contract::ModelKind;
use kiln_engine::options::CommonArgs;

/// The run's options, as flags: the same ones `cargo xtask bench-all` takes.
#[derive(Parser)]
struct Options {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("kiln-run-{}", std::process::id())));
    let options = Options::parse_from([
        "run",
        "--quick",
        "--no-calibration",
        "--out",
        &out.display().to_string(),
    ]);
    kiln_engine::bench::install_interrupt_handler();
    let all_ok = kiln_engine::bench::bench_all(
        &options.common,
        Some(vec!["flex".into()]),
        Some(vec![ModelKind::Mlp]),
        None,
        false,
        false,
        false,
    )?;
    let results = out.join(kiln_report::read::RESULTS_FILE);
    let loaded = kiln_report::read::load(&[results])?;
    for r in &loaded.records {
        let epoch = r.epoch_seconds.as_ref().map(|e| e.median);
        println!(
            "{} {} {}: {:?} s per epoch, test accuracy {:?}",
            r.model,
            r.backend,
            r.status.as_str(),
            epoch,
            r.test_accuracy
        );
    }
    anyhow::ensure!(all_ok, "a cell did not finish: {}", out.display());
    Ok(())
}
