//! The runners a command uses: the backends asked for (else the default ones), those that can
//! build here, and each one built and probed, or left out with one line saying why.

use anyhow::Result;
use kiln_results::ProbeReport;

use crate::backends::{self, Backend, Runner};

/// A built backend: its runner and what its probe reported.
pub type Built = (&'static Backend, Runner, ProbeReport);

/// Build the runners of `wanted` (with burn-train's Learner where `learner`) and probe them;
/// returns each usable backend with its runner. A backend that cannot run here (libtorch
/// missing, say) is left out with one line saying why and what fixes it.
pub fn build_and_probe(wanted: &[&'static Backend], learner: bool) -> Result<Vec<Built>> {
    crate::build::build(wanted, learner)?;
    let mut out = Vec::new();
    for &b in wanted {
        let runner = match backends::runner(b) {
            Ok(r) => r,
            Err(why) => {
                eprintln!("kiln: skipping {}: {why}", b.name);
                continue;
            }
        };
        if !runner.exists() {
            eprintln!(
                "kiln: skipping {}: its runner {} was not built (the build output above says why)",
                b.name,
                runner.display()
            );
            continue;
        }
        eprintln!("kiln: probing {} ({})", b.name, runner.display());
        let started = std::time::Instant::now();
        let report = backends::probe(&runner)?;
        let devices: Vec<String> = report
            .devices
            .iter()
            .map(|d| {
                let state = if d.available { "" } else { ", unavailable" };
                format!("{} ({}{state})", d.spec, d.kind)
            })
            .collect();
        eprintln!(
            "kiln: {}: {} [{:.1} s]",
            b.name,
            devices.join(", "),
            started.elapsed().as_secs_f64()
        );
        out.push((b, runner, report));
    }
    Ok(out)
}

/// The backends `names` lists, else every default backend.
pub fn wanted_backends(names: Option<&[String]>) -> Result<Vec<&'static Backend>> {
    match names {
        Some(names) => names.iter().map(|n| backends::find(n)).collect(),
        None => Ok(backends::all().iter().filter(|b| b.default).collect()),
    }
}

/// The backends of `wanted` that can be built here; the others are named with the reason.
pub fn buildable(wanted: Vec<&'static Backend>) -> Vec<&'static Backend> {
    wanted
        .into_iter()
        .filter(|b| match backends::unbuildable(b) {
            Some(why) => {
                eprintln!("kiln: skipping {}: {why}", b.name);
                false
            }
            None => true,
        })
        .collect()
}
