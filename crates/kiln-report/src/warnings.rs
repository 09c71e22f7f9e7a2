//! What a reader should know before trusting a row: the warnings every table shows beside it.

use crate::fields::{chunks_text, human_bytes, human_seconds, low_confidence, noise_text};
use kiln_contract::schema::{DataKind, Method, Record, Status};

/// Things a reader should know before trusting a row.
pub fn warnings(r: &Record) -> Vec<String> {
    let mut out = Vec::new();
    if r.status != Status::Ok {
        return out;
    }
    if let Some(g) = kiln_contract::memory::memory_growth(&r.epochs) {
        out.push(format!(
            "memory grows: the runner's resident set rose after every epoch from the second on, \
             {} per epoch ({} to {} over {} epochs): a leak, or caches still filling; a longer \
             run tells them apart",
            human_bytes(g.bytes_per_epoch as u64),
            human_bytes(g.first_bytes),
            human_bytes(g.last_bytes),
            g.epochs
        ));
    }
    if r.learning_rate != kiln_contract::protocol::LEARNING_RATE {
        out.push(format!(
            "trained at learning rate {} (`--lr`), not the protocol's {}: its accuracy compares \
             only with rows of the same rate",
            r.learning_rate,
            kiln_contract::protocol::LEARNING_RATE
        ));
    }
    out.extend(spread_warnings(r));
    if r.obtained.method == Method::Projected {
        out.push(format!(
            "projected from {} timed steps ({}), not measured over a whole epoch{}",
            r.obtained.steps,
            chunks_text(r.obtained.chunks),
            if low_confidence(r) {
                format!(
                    "; fewer than {} chunks: a low-confidence estimate, kept out of the charts",
                    kiln_contract::MIN_CHUNKS
                )
            } else {
                String::new()
            }
        ));
    }
    if r.obtained.method == Method::Unjudged {
        out.push(format!(
            "too short to judge steady state: {} steps; its time was never checked steady and \
             is kept out of the charts",
            r.obtained.steps
        ));
    }
    if let Some(n) = r.noise.as_ref().filter(|n| n.busy()) {
        out.push(format!(
            "measured on a busy machine: {} over {} ({}); more than {:.0}% flags a row",
            noise_text(n),
            human_seconds(n.window_seconds),
            n.window,
            kiln_contract::BUSY_SHARE * 100.0
        ));
    }

    if r.data == DataKind::Synthetic {
        out.push("synthetic data: accuracy means nothing".into());
    }
    if r.device_kind
        .is_some_and(kiln_contract::DeviceKind::is_cpu_emulated)
    {
        out.push(
            "a software GPU driver running on the CPU (e.g. Mesa's lavapipe): a correctness row, \
             not a GPU result"
                .into(),
        );
    }
    out.extend(runtime_warning(r));
    out.extend(threads_warning(r));
    if let Some(ls) = &r.loss_scaling {
        out.push(format!(
            "loss scaling: {} of {} steps skipped on overflow, scale {} → {}",
            ls.skipped_steps,
            ls.skipped_steps + ls.applied_steps,
            ls.initial_scale,
            ls.final_scale
        ));
    }
    out
}

/// The spread between runs (or epochs) and within a run, and a slow first epoch.
fn spread_warnings(r: &Record) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = &r.epoch_seconds {
        if e.n > 1 && e.cv() > 0.10 {
            out.push(format!(
                "high spread between {} (coefficient of variation {:.0}%)",
                if r.between_runs.is_some() {
                    "runs"
                } else {
                    "epochs"
                },
                e.cv() * 100.0
            ));
        }
        if let Some(b) = r.between_runs.as_ref().filter(|b| b.within_cv_max > 0.10) {
            out.push(format!(
                "high spread within a run (coefficient of variation up to {:.0}%)",
                b.within_cv_max * 100.0
            ));
        }
        if let Some(first) = r.first_epoch_seconds
            && first > 2.0 * e.median
        {
            out.push(format!(
                "the first epoch (warm-up included) took {:.1}× the median epoch",
                first / e.median
            ));
        }
    }
    out
}

/// More threads than the runner's CPUs, past a launching thread and a runtime's server thread:
/// those that wait by spinning take CPU from those that compute.
fn threads_warning(r: &Record) -> Option<String> {
    threads_note(r.process_threads?, r.fingerprint.logical_cores)
}

/// The note on a runner that ended with `threads` threads for the `cpus` logical CPUs it could
/// run on, when they are more than the CPUs plus a launching and a server thread (training and
/// inference rows alike).
pub(crate) fn threads_note(threads: usize, cpus: usize) -> Option<String> {
    (cpus > 0 && threads > cpus + 2).then(|| {
        format!(
            "the runner had {threads} threads for {cpus} CPUs when it ended: where threads \
             wait by spinning, they take CPU from those that compute (docs/burn-cpu.md)"
        )
    })
}

/// A GPU runtime's settings and its first step (compilation and autotune), in one line.
fn runtime_warning(r: &Record) -> Option<String> {
    let rt = r.runtime.as_ref()?;
    let mut parts = Vec::new();
    if let Some(f) = rt.fusion {
        parts.push(format!("fusion {}", if f { "on" } else { "off" }));
    }
    // A Burn built without autotune says so; the runtime says what was asked for.
    let untuned = r
        .burn
        .as_ref()
        .is_some_and(|b| b.without.iter().any(|w| w == "autotune"));
    if untuned {
        parts.push("autotune not built (Burn without its autotune feature)".into());
    } else {
        if let Some(a) = &rt.autotune {
            parts.push(format!("autotune {a}"));
        }
        if let Some(c) = &rt.autotune_cache {
            parts.push(format!("autotune cache {c} at start"));
        }
    }
    if rt.profiled_launches == Some(true) {
        parts.push(
            "every kernel launch profiled and waited for (CUBECL_DEBUG_LOG or CUBECL_DEBUG_OPTION \
             set; not Burn's default)"
                .into(),
        );
    }
    if let Some(s) = r.first_step_seconds {
        let what = if untuned {
            "compiling kernels"
        } else {
            "compiling and autotuning kernels"
        };
        parts.push(format!(
            "first step {} ({what}; timed apart from the epochs)",
            human_seconds(s)
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::tests_support::timed;

    /// A Burn built without autotune has no autotune level or cache to report, and its first
    /// step compiled only; the GEMM peak of such a backend is written with its digits.
    #[test]
    fn a_burn_without_autotune_is_not_reported_as_tuning() {
        let mut r = timed("burn-cpu", 10.0);
        r.runtime = Some(kiln_contract::Runtime {
            fusion: Some(true),
            autotune: Some("balanced".into()),
            autotune_cache: Some("warm".into()),
            ..Default::default()
        });
        r.first_step_seconds = Some(47.7);
        let tuned = runtime_warning(&r).unwrap();
        assert!(!tuned.contains("waited for"), "{tuned}");
        assert!(
            tuned.contains("autotune balanced") && tuned.contains("autotuning"),
            "{tuned}"
        );
        r.burn = Some(kiln_contract::BurnBuild {
            spec: "path:../burn".into(),
            without: vec!["autotune".into()],
            ..Default::default()
        });
        let line = runtime_warning(&r).unwrap();
        assert!(line.contains("autotune not built"), "{line}");
        assert!(
            !line.contains("balanced") && !line.contains("autotuning"),
            "{line}"
        );

        r.achieved_gflops = Some(0.6);
        r.device_peak = Some(kiln_contract::DevicePeak {
            gflops: 0.010,
            backend: "burn-cpu".into(),
            matrix: 512,
        });
        assert_eq!(crate::fields::efficiency_cell(&r), "0.6 (6000% of 0.010)");
    }

    /// A runner with more threads than its CPUs, past a launching and a server thread, is
    /// said; one with a thread per CPU and those two is not.
    #[test]
    fn a_pool_grown_past_the_cpus_is_said() {
        let mut r = timed("burn-cpu", 298.0);
        r.fingerprint.logical_cores = 2;
        r.process_threads = Some(4);
        assert_eq!(threads_warning(&r), None);
        r.process_threads = Some(10);
        let line = threads_warning(&r).unwrap();
        assert!(line.contains("10 threads for 2 CPUs"), "{line}");
        assert!(warnings(&r).contains(&line));
        r.process_threads = None;
        assert_eq!(threads_warning(&r), None);
    }

    /// A row measured with CubeCL's debugging settings on says so: they wait for every launch.
    #[test]
    fn launches_waited_for_are_said() {
        let mut r = timed("burn-cpu", 4.84);
        r.runtime = Some(kiln_contract::Runtime {
            profiled_launches: Some(true),
            ..Default::default()
        });
        let line = runtime_warning(&r).unwrap();
        assert!(
            line.contains("every kernel launch profiled and waited for"),
            "{line}"
        );
    }
}
