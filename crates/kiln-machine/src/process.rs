//! What the operating system says of a process and of the machine's CPU time: peak and
//! current resident memory (a runner's own training memory), the machine's and a process's
//! CPU ticks (how busy the machine was around a cell) and the out-of-memory killer's count.
//! Linux reads /proc through procfs; elsewhere only the peak memory is known (getrusage).

/// Peak resident set size of this process in bytes (`VmHWM` on Linux, `ru_maxrss` elsewhere).
pub fn peak_rss_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        status(None).and_then(|s| s.vmhwm).map(|kib| kib * 1024)
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        // SAFETY: getrusage only writes into the zeroed struct we pass.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return None;
        }
        // macOS reports bytes; the BSDs report KiB.
        let raw = usage.ru_maxrss as u64;
        Some(if cfg!(target_os = "macos") {
            raw
        } else {
            raw * 1024
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Reset the peak resident set size to the current one, so that a later [`peak_rss_bytes`]
/// is the peak from now on (Linux's `clear_refs`, since 4.0). Returns false where the OS
/// cannot: the peak is then the whole process's.
pub fn reset_peak() -> bool {
    #[cfg(target_os = "linux")]
    {
        use procfs::process::{ClearRefs, Process};
        Process::myself()
            .and_then(|p| p.clear_refs(ClearRefs::PeakRSS))
            .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Current resident set size of a process (`None`: this one) in bytes; `None` when it is gone
/// or off Linux.
pub fn current_rss_bytes(pid: Option<u32>) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        status(pid).and_then(|s| s.vmrss).map(|kib| kib * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

#[cfg(target_os = "linux")]
fn process(pid: Option<u32>) -> Option<procfs::process::Process> {
    use procfs::process::Process;
    match pid {
        Some(pid) => Process::new(i32::try_from(pid).ok()?),
        None => Process::myself(),
    }
    .ok()
}

#[cfg(target_os = "linux")]
fn status(pid: Option<u32>) -> Option<procfs::process::Status> {
    process(pid)?.status().ok()
}

/// Seconds since this process started (`/proc/self/stat`'s start time against `/proc/uptime`,
/// to a clock tick); `None` off Linux.
pub fn age_seconds() -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        use procfs::Current;
        let start_ticks = process(None)?.stat().ok()?.starttime;
        let uptime = procfs::Uptime::current().ok()?.uptime;
        let age = uptime - start_ticks as f64 / procfs::ticks_per_second() as f64;
        Some(age.max(0.0))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The machine's CPU time in clock ticks, all cores together.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MachineTicks {
    /// user + nice + system + irq + softirq (guest time is already in user and nice).
    pub busy: u64,
    /// Time the hypervisor gave to other guests.
    pub steal: u64,
    /// Every state (idle and iowait included).
    pub total: u64,
}

#[cfg(target_os = "linux")]
impl From<&procfs::CpuTime> for MachineTicks {
    fn from(t: &procfs::CpuTime) -> Self {
        let busy = t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0);
        let steal = t.steal.unwrap_or(0);
        MachineTicks {
            busy,
            steal,
            total: busy + steal + t.idle + t.iowait.unwrap_or(0),
        }
    }
}

/// The machine's CPU time now (`/proc/stat`); `None` off Linux.
pub fn machine_ticks() -> Option<MachineTicks> {
    #[cfg(target_os = "linux")]
    {
        use procfs::CurrentSI;
        procfs::KernelStats::current()
            .ok()
            .map(|s| MachineTicks::from(&s.total))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// How many threads this process has now (`num_threads` in `/proc/self/stat`): a backend's
/// workers, its runtime's server threads and the runner's own; `None` off Linux.
pub fn thread_count() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let s = process(None)?.stat().ok()?;
        usize::try_from(s.num_threads).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// User + system time of a process (`None`: this one), its threads and its waited-for
/// children, in clock ticks (`/proc/PID/stat`); `None` when it is gone or off Linux.
pub fn process_ticks(pid: Option<u32>) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let s = process(pid)?.stat().ok()?;
        let children = u64::try_from(s.cutime.max(0) + s.cstime.max(0)).ok()?;
        Some(s.utime + s.stime + children)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// How many processes the kernel's out-of-memory killer has killed since boot (`oom_kill` in
/// /proc/vmstat, Linux 4.13 on); `None` where the system does not say.
pub fn oom_kills() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let n = *procfs::vmstat().ok()?.get("oom_kill")?;
        u64::try_from(n).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_an_age() {
        #[cfg(target_os = "linux")]
        {
            let age = super::age_seconds().unwrap();
            assert!((0.0..24.0 * 3600.0).contains(&age), "{age}");
        }
    }

    use super::*;

    /// Threads started here are counted while they live.
    #[test]
    fn started_threads_are_counted() {
        if cfg!(target_os = "linux") {
            // Eight threads that wait for this one: they exist once `spawn` returns.
            let gate = std::sync::Arc::new(std::sync::Barrier::new(9));
            let waiting: Vec<_> = (0..8)
                .map(|_| {
                    let gate = gate.clone();
                    std::thread::spawn(move || {
                        gate.wait();
                    })
                })
                .collect();
            let during = thread_count().expect("num_threads is readable on Linux");
            gate.wait();
            for t in waiting {
                let _ = t.join();
            }
            // The eight, and this test's own thread.
            assert!(during >= 9, "{during}");
        }
    }

    #[test]
    fn peak_is_at_least_current() {
        if cfg!(target_os = "linux") {
            // Current first: the peak read afterwards can only be higher.
            let current = current_rss_bytes(None).expect("VmRSS is readable on Linux");
            let peak = peak_rss_bytes().expect("VmHWM is readable on Linux");
            assert!(peak > 1 << 20);
            assert!(peak >= current, "peak {peak} < current {current}");
            // A process named by its id (this one); none for one that does not exist.
            let own = current_rss_bytes(Some(std::process::id()));
            assert!(own.is_some_and(|b| b > 1 << 20), "{own:?}");
            assert_eq!(current_rss_bytes(Some(u32::MAX)), None);
        }
    }

    #[test]
    fn a_reset_peak_forgets_what_was_freed() {
        if cfg!(target_os = "linux") {
            // 256 MiB touched and freed: the peak includes it until reset.
            let big = vec![1u8; 256 << 20];
            std::hint::black_box(&big);
            drop(big);
            let before = peak_rss_bytes().unwrap();
            assert!(reset_peak());
            let after = peak_rss_bytes().unwrap();
            assert!(
                after + (128 << 20) < before,
                "peak {after} after reset, {before} before"
            );
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_machines_ticks_count_busy_steal_and_idle_states() {
        use procfs::FromBufReadSI;
        let info = procfs::ExplicitSystemInfo {
            boot_time_secs: 0,
            ticks_per_second: 100,
            page_size: 4096,
            is_little_endian: true,
        };
        // user nice system idle iowait irq softirq steal guest guest_nice
        let text = "cpu  10 1 5 100 3 1 1 2 7 0\ncpu0 10 1 5 100 3 1 1 2 7 0\nctxt 1\n\
                    btime 1\nprocesses 1\n";
        let stats = procfs::KernelStats::from_buf_read(text.as_bytes(), &info).unwrap();
        let m = MachineTicks::from(&stats.total);
        assert_eq!((m.busy, m.steal, m.total), (18, 2, 123));
    }

    #[test]
    fn this_process_and_the_machine_have_spent_cpu_time() {
        if cfg!(target_os = "linux") {
            let spin = std::time::Instant::now();
            while spin.elapsed().as_millis() < 50 {
                std::hint::black_box(0);
            }
            let m = machine_ticks().expect("/proc/stat is readable");
            assert!(m.total >= m.busy + m.steal && m.busy > 0, "{m:?}");
            assert!(process_ticks(None).is_some());
            assert!(process_ticks(Some(std::process::id())).is_some());
            // No process has the largest pid.
            assert_eq!(process_ticks(Some(i32::MAX as u32)), None);
            assert!(oom_kills().is_some());
        }
    }
}
