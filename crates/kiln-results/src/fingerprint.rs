//! Where a record was produced: host, CPU, memory, OS, versions and Kiln's revision.

use crate::Fingerprint;

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The trimmed standard output of `cmd`, if it ran and succeeded (possibly empty).
fn stdout_of(mut cmd: std::process::Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    stdout_of(cmd).filter(|s| !s.is_empty())
}

/// Kiln's revision in the checkout at `dir`, and whether tracked files differ from it
/// (`None` where git cannot say).
pub fn git_state(dir: &std::path::Path) -> (Option<String>, Option<bool>) {
    let git = |args: &[&str]| {
        let mut cmd = std::process::Command::new("git");
        cmd.current_dir(dir).args(args);
        stdout_of(cmd)
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    (commit, dirty)
}

/// The CPU's marketing name.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .or_else(|| command_output("sysctl", &["-n", "machdep.cpu.brand_string"]))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Physical memory of the host.
pub fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok();
    if let Some(info) = info {
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line["MemTotal:".len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        return Some(kib * 1024);
    }
    command_output("sysctl", &["-n", "hw.memsize"]).and_then(|s| s.parse().ok())
}

fn os_name() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .or_else(|| command_output("sw_vers", &["-productVersion"]).map(|v| format!("macOS {v}")))
        .unwrap_or_else(|| std::env::consts::OS.to_string())
}

/// The fingerprint of this process's machine; `threads` is what the backend uses,
/// `burn_version` the Burn a Rust runner was built with (empty for the PyTorch reference).
pub fn collect(threads: usize, burn_version: &str) -> Fingerprint {
    Fingerprint {
        hostname: read_trimmed("/proc/sys/kernel/hostname")
            .or_else(|| command_output("hostname", &[]))
            .unwrap_or_default(),
        cpu_model: cpu_model(),
        logical_cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        threads,
        memory_bytes: memory_bytes(),
        os: os_name(),
        kernel: read_trimmed("/proc/sys/kernel/osrelease")
            .or_else(|| command_output("uname", &["-r"]))
            .unwrap_or_default(),
        gpu_name: None,
        gpu_driver: None,
        gpu_memory_bytes: None,
        backend_version: String::new(),
        rustc_version: Some(env!("KILN_RUSTC_VERSION").to_string()).filter(|v| !v.is_empty()),
        burn_version: burn_version.into(),
        kiln_version: env!("CARGO_PKG_VERSION").into(),
        // xtask passes the revision; a runner started by hand asks git itself.
        kiln_commit: std::env::var("KILN_COMMIT")
            .ok()
            .or_else(|| git_state(std::path::Path::new(".")).0)
            .unwrap_or_else(|| "unknown".into()),
        kiln_dirty: match std::env::var("KILN_DIRTY").ok().as_deref() {
            Some("1") => Some(true),
            Some("0") => Some(false),
            _ => None,
        },
    }
}
