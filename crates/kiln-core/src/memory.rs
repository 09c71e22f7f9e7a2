//! Process memory, read from the operating system.

/// Peak resident set size of this process in bytes (`VmHWM` on Linux, `ru_maxrss` elsewhere).
pub fn peak_rss_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        status_field("VmHWM:")
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
        if cfg!(target_os = "macos") {
            Some(raw)
        } else {
            Some(raw * 1024)
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Reset the peak resident set size to the current one, so that a later
/// [`peak_rss_bytes`] is the peak from now on (Linux: `/proc/self/clear_refs`, since 4.0).
/// Returns false where the OS cannot: the peak is then the whole process's.
pub fn reset_peak() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::write("/proc/self/clear_refs", "5").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Current resident set size in bytes (Linux only).
pub fn current_rss_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        status_field("VmRSS:")
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
fn status_field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn peak_is_at_least_current() {
        if cfg!(target_os = "linux") {
            // Current first: the peak read afterwards can only be higher.
            let current = super::current_rss_bytes().expect("VmRSS is readable on Linux");
            let peak = super::peak_rss_bytes().expect("VmHWM is readable on Linux");
            assert!(peak > 1 << 20);
            assert!(peak >= current, "peak {peak} < current {current}");
        }
    }

    #[test]
    fn a_reset_peak_forgets_what_was_freed() {
        if cfg!(target_os = "linux") {
            // 256 MiB touched and freed: the peak includes it until reset.
            let big = vec![1u8; 256 << 20];
            std::hint::black_box(&big);
            drop(big);
            let before = super::peak_rss_bytes().unwrap();
            assert!(super::reset_peak());
            let after = super::peak_rss_bytes().unwrap();
            assert!(
                after + (128 << 20) < before,
                "peak {after} after reset, {before} before"
            );
        }
    }
}
