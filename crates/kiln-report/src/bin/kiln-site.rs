//! `kiln-site`: the results site and `submit`, as `cargo xtask site` and `cargo xtask submit`
//! run them. A binary of its own (feature `site`), built when first asked for, so that xtask,
//! which every first run builds, does not compile the JSON Schema validator. It takes what
//! xtask's flags gave, in order, and defines no flag of its own: the user's flags are xtask's.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kiln_report::site;

#[derive(Parser)]
#[command(about = "Kiln's results site and the submission of a run (docs/site.md)")]
struct SiteCli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the site of every run under RESULTS (docs/results) and the run directories
    /// given, into OUT.
    Site {
        results: PathBuf,
        out: PathBuf,
        runs: Vec<PathBuf>,
    },
    /// Check the run directory RUN and copy it under RESULTS by its canonical name, WHAT its
    /// last part.
    Submit {
        results: PathBuf,
        run: PathBuf,
        what: Option<String>,
    },
}

fn build(results: PathBuf, out: PathBuf, runs: Vec<PathBuf>) -> anyhow::Result<()> {
    let sources: Vec<PathBuf> = std::iter::once(results).chain(runs).collect();
    let (dirs, passed_over) = site::run_dirs(&sources)?;
    let runs = site::read_runs(&dirs)?;
    let (inference, _) = site::runs::dirs_holding(&sources, kiln_report::infer::INFER_FILE)?;
    let serving = site::serving::read_serving(&inference)?;
    let built = site::build(&runs, &serving, &out)?;
    for dir in &passed_over {
        if inference.iter().any(|d| d.path.starts_with(dir)) {
            continue;
        }
        eprintln!(
            "kiln: passed over {} (no results.jsonl or infer.jsonl in it or below: explain, verify or build runs hold none)",
            dir.display()
        );
    }
    eprintln!(
        "kiln: site of {} records from {} runs on {} machines ({} rows), and {} inference runs: {}",
        built.records,
        built.runs,
        built.machines,
        built.rows,
        serving.len(),
        out.join("index.html").display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let result = match SiteCli::parse().command {
        Command::Site { results, out, runs } => build(results, out, runs),
        Command::Submit { results, run, what } => {
            site::submit::submit(&run, what.as_deref(), &results).map(|dest| {
                eprintln!(
                    "kiln: copied {} to {}\nkiln: `cargo xtask site` now shows it; commit it \
                     (`git add {}`) and open a pull request",
                    run.display(),
                    dest.display(),
                    dest.display()
                );
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
