//! How busy the machine is with other work: the machine's CPU time (`/proc/stat`) against the
//! runner's own (`/proc/PID/stat`) and this process's, sampled at the edges of a cell's timed
//! window. Linux only; elsewhere the share is recorded as unknown.

use std::time::{Duration, Instant};

use kiln_contract::{BUSY_SHARE, Noise};
use kiln_machine::process::{MachineTicks, machine_ticks, process_ticks};

/// One reading of the machine, the runner and this process.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    pub at: Instant,
    pub machine: MachineTicks,
    /// The runner's ticks (0 before it starts).
    pub runner: u64,
    /// This process's ticks.
    pub own: u64,
}

/// Read the machine now; `runner` is the runner's process id, if one is running.
pub fn sample(runner: Option<u32>) -> Option<CpuSample> {
    Some(CpuSample {
        at: Instant::now(),
        machine: machine_ticks()?,
        runner: runner.and_then(|p| process_ticks(Some(p))).unwrap_or(0),
        own: process_ticks(None).unwrap_or(0),
    })
}

/// The shares of the machine used by others and stolen between two samples, and the window's
/// ticks: (other, steal, ticks). The runner's, this process's and the machine's counters tick
/// apart, so a quiet window can read a few ticks below none: a share is never negative, it
/// reads 0 (under the resolution, which the window's ticks give).
pub fn shares(a: &CpuSample, b: &CpuSample) -> Option<(f64, f64, u64)> {
    let total = b.machine.total.checked_sub(a.machine.total)? as f64;
    if total <= 0.0 {
        return None;
    }
    let busy = b.machine.busy.saturating_sub(a.machine.busy) as f64;
    let mine = b.runner.saturating_sub(a.runner) as f64 + b.own.saturating_sub(a.own) as f64;
    let steal = b.machine.steal.saturating_sub(a.machine.steal) as f64;
    Some((
        ((busy - mine) / total).clamp(0.0, 1.0),
        (steal / total).clamp(0.0, 1.0),
        total as u64,
    ))
}

/// What a cell's window says of the machine: `window` names it (`timed epochs`, ...).
pub fn noise(a: Option<&CpuSample>, b: Option<&CpuSample>, window: &str) -> Noise {
    let (Some(a), Some(b)) = (a, b) else {
        return Noise {
            window: "unknown on this OS".into(),
            ..Noise::default()
        };
    };
    let s = shares(a, b);
    Noise {
        other_cpu_share: s.map(|s| s.0),
        steal_share: s.map(|s| s.1),
        window_ticks: s.map(|s| s.2),
        window_seconds: (b.at - a.at).as_secs_f64(),
        window: window.into(),
        ..Noise::default()
    }
}

/// `--wait-quiet`: wait, in one-second windows, until others use at most [`BUSY_SHARE`] of the
/// machine, for at most `max`. Returns the seconds waited and whether it was quiet then
/// (`None` where the OS cannot say).
pub fn wait_quiet(max: Duration, mut say: impl FnMut(&str)) -> (f64, Option<bool>) {
    let started = Instant::now();
    let mut told = false;
    loop {
        let Some(a) = sample(None) else {
            return (0.0, None);
        };
        std::thread::sleep(Duration::from_secs(1));
        let Some(b) = sample(None) else {
            return (started.elapsed().as_secs_f64(), None);
        };
        let busy = shares(&a, &b)
            .map(|(o, s, _)| o.max(0.0) + s)
            .unwrap_or(0.0);
        if busy <= BUSY_SHARE {
            return (started.elapsed().as_secs_f64(), Some(true));
        }
        if started.elapsed() >= max {
            say(&format!(
                "the machine is still busy ({:.0}% of CPU used by others) after {:.0} s: running anyway, flagged",
                busy * 100.0,
                max.as_secs_f64()
            ));
            return (started.elapsed().as_secs_f64(), Some(false));
        }
        if !told {
            say(&format!(
                "waiting for a quiet machine ({:.0}% of CPU used by others; at most {:.0} s)",
                busy * 100.0,
                max.as_secs_f64()
            ));
            told = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(busy: u64, idle: u64, steal: u64) -> MachineTicks {
        MachineTicks {
            busy,
            steal,
            total: busy + idle + steal,
        }
    }

    fn at(machine: MachineTicks, runner: u64, t: Instant) -> CpuSample {
        CpuSample {
            at: t,
            machine,
            runner,
            own: 0,
        }
    }

    #[test]
    fn a_busy_window_is_flagged_and_a_quiet_one_is_not() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        // 2 cores x 10 s = 2000 ticks. The runner used 1000 (one core); another process 800.
        let busy = noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(1800, 200, 0), 1000, t1)),
            "timed epochs",
        );
        assert!((busy.other_cpu_share.unwrap() - 0.4).abs() < 1e-9);
        assert!(busy.busy());
        // The same window with only the runner busy.
        let quiet = noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(1010, 990, 0), 1000, t1)),
            "timed epochs",
        );
        assert!(quiet.other_cpu_share.unwrap() < 0.01 && !quiet.busy());
        // A hypervisor stealing a fifth of the machine flags it too.
        let stolen = noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(1000, 600, 400), 1000, t1)),
            "timed epochs",
        );
        assert!(stolen.busy());
        assert!(noise(None, None, "x").other_cpu_share.is_none());
    }

    #[test]
    fn a_share_is_never_negative_and_within_one_tick_reads_quiet() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        // The runner's counter ran a tick ahead of the machine's: -1 of 2000 ticks.
        let n = noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(999, 1001, 0), 1000, t1)),
            "timed epochs",
        );
        assert_eq!(n.window_ticks, Some(2000));
        assert_eq!(n.other_cpu_share, Some(0.0));
        assert!(n.quiet_within_resolution() && !n.busy());
        let text = kiln_report::fields::noise_text(&n);
        assert!(
            text.contains("below the 1-tick resolution of a 2000-tick window"),
            "{text}"
        );
        // Ten ticks of others' use is a measured share, in words with its decimals.
        let n = noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(1010, 990, 0), 1000, t1)),
            "timed epochs",
        );
        assert!(!n.quiet_within_resolution());
        assert!(kiln_report::fields::noise_text(&n).contains("0.5% of CPU used by others"));
        // A record written before shares were held at 0 (-0.17%, no window) reads quiet.
        let old = Noise {
            other_cpu_share: Some(-0.0017),
            ..Noise::default()
        };
        let text = kiln_report::fields::noise_text(&old);
        assert!(text.starts_with("quiet") && !text.contains('-'), "{text}");
    }

    #[test]
    fn a_fake_busy_window_flags_its_row_in_the_report() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        let mut r = kiln_contract::Record::not_run(
            &kiln_contract::CellId {
                training_loop: None,
                model: "mnist-cnn".into(),
                backend: "flex".into(),
                device: "cpu".into(),
                precision: "f32".into(),
                batch_size: 128,
            },
            kiln_contract::Status::Ok,
            "",
        );
        r.reason = None;
        r.epoch_seconds = kiln_contract::Stats::from_samples(&[10.0, 11.0]);
        r.noise = Some(noise(
            Some(&at(stat(0, 0, 0), 0, t0)),
            Some(&at(stat(1900, 100, 0), 1000, t1)),
            "timed epochs",
        ));
        let md = kiln_report::render::markdown(&[r], None);
        assert!(
            md.contains("⚠ busy machine (45% of CPU used by others)"),
            "{md}"
        );
        assert!(md.contains("measured on a busy machine"), "{md}");
    }
}
