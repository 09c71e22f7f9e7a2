//! The machine Kiln runs on, measured: its hardware (CPU identity, instruction sets, caches,
//! memory), its OS, the compiler and Kiln's revision for a record's fingerprint; its load; and
//! whether a driver library loads; what the OS says of a process's memory and CPU time
//! (`process`). Host, OS, CPU brand, cores and memory come from `sysinfo`
//! (Linux, macOS and Windows alike); the CPU's vendor, family/model/stepping, instruction sets
//! and caches from `raw-cpuid` on x86 and the standard library's feature detection on Arm. The
//! fingerprint's type, and how reports name a machine from it, are the contract's
//! (`kiln_contract::Fingerprint`, `kiln_contract::fingerprint`).

pub mod process;

use kiln_contract::{CpuIdentity, Fingerprint, NvidiaSmi};

/// The trimmed standard output of `cmd`, if it ran and succeeded (possibly empty).
fn stdout_of(mut cmd: std::process::Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
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

fn system() -> sysinfo::System {
    let mut sys = sysinfo::System::new();
    sys.refresh_cpu_all();
    sys.refresh_memory();
    sys
}

/// The CPU's marketing name as `sys` read it (the architecture where the OS names none).
fn brand(sys: &sysinfo::System) -> String {
    sys.cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Whether the shared library `name` (e.g. `libcuda.so.1`) loads here: how Kiln tells that a
/// driver is installed without asking the runtime that needs it (which may panic without one).
pub fn library_loads(name: &str) -> bool {
    // SAFETY: loading a driver library runs its initialisers; the ones Kiln asks about
    // (libcuda, libamdhip64, the Vulkan loader) are made to be loaded by any process, and the
    // library is closed right away.
    unsafe { libloading::Library::new(name) }.is_ok()
}

/// Why a GPU backend cannot run here when its driver library `library` does not load: "no
/// CUDA driver (libcuda.so.1 not found: install the NVIDIA driver{then})", `name` upper-cased.
/// One wording for a runner's probe and for xtask's build decision.
pub fn driver_missing(name: &str, library: &str, install: &str, then: &str) -> Option<String> {
    (!library_loads(library)).then(|| {
        format!(
            "no {} driver ({library} not found: install {install}{then})",
            name.to_uppercase()
        )
    })
}

/// What `nvidia-smi -q` says of this machine's NVIDIA GPUs (asked once per process); `None`
/// where the tool is missing or fails (no NVIDIA driver).
pub fn nvidia_smi() -> Option<NvidiaSmi> {
    static ASKED: std::sync::OnceLock<Option<NvidiaSmi>> = std::sync::OnceLock::new();
    ASKED
        .get_or_init(|| {
            let mut cmd = std::process::Command::new("nvidia-smi");
            cmd.arg("-q").stdin(std::process::Stdio::null());
            stdout_of(cmd)
                .filter(|q| !q.is_empty())
                .map(|q| parse_nvidia_smi(&q))
        })
        .clone()
}

/// The driver and CUDA versions and one line per GPU from an `nvidia-smi -q` report.
pub fn parse_nvidia_smi(query: &str) -> NvidiaSmi {
    let value = |line: &str, key: &str| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    };
    let mut smi = NvidiaSmi {
        query: query.to_string(),
        ..NvidiaSmi::default()
    };
    // Each GPU's section starts at its bus id line ("GPU 00000000:19:00.0"); its product name
    // and the first "Total" (FB memory) follow.
    let mut gpu: Option<(String, Option<String>, Option<String>)> = None;
    let close = |g: Option<(String, Option<String>, Option<String>)>, out: &mut Vec<String>| {
        if let Some((bus, name, memory)) = g {
            let mut line = name.unwrap_or_else(|| "NVIDIA GPU".into());
            if let Some(m) = memory {
                line.push_str(&format!(", {m}"));
            }
            line.push_str(&format!(", bus {bus}"));
            out.push(line);
        }
    };
    for line in query.lines() {
        if let Some(v) = value(line, "Driver Version") {
            smi.driver_version = Some(v);
        } else if let Some(v) = value(line, "CUDA Version") {
            smi.cuda_version = Some(v);
        } else if let Some(bus) = line.strip_prefix("GPU ").filter(|b| b.contains(':')) {
            close(gpu.take(), &mut smi.gpus);
            gpu = Some((bus.trim().to_string(), None, None));
        } else if let Some((_, name, memory)) = gpu.as_mut() {
            if let Some(v) = value(line, "Product Name") {
                name.get_or_insert(v);
            } else if let Some(v) = value(line, "Total") {
                memory.get_or_insert(v);
            }
        }
    }
    close(gpu.take(), &mut smi.gpus);
    smi
}

/// The CPU's marketing name.
pub fn cpu_model() -> String {
    brand(&system())
}

/// Physical memory of the host.
pub fn memory_bytes() -> Option<u64> {
    Some(system().total_memory()).filter(|&m| m > 0)
}

/// The one-minute load average (`None` where the OS has none, e.g. Windows).
pub fn load_average() -> Option<f64> {
    let one = sysinfo::System::load_average().one;
    (cfg!(unix) && one.is_finite()).then_some(one)
}

/// The CPU's identity and training-relevant capabilities.
pub fn cpu_identity() -> CpuIdentity {
    identity(&system())
}

fn identity(sys: &sysinfo::System) -> CpuIdentity {
    let mut id = CpuIdentity {
        physical_cores: sysinfo::System::physical_core_count(),
        frequency_mhz: sys.cpus().first().map(|c| c.frequency()).filter(|&f| f > 0),
        vendor: sys
            .cpus()
            .first()
            .map(|c| c.vendor_id().to_string())
            .filter(|v| !v.is_empty()),
        ..CpuIdentity::default()
    };
    identify(&mut id);
    id
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn identify(id: &mut CpuIdentity) {
    let cpuid = raw_cpuid::CpuId::new();
    if let Some(v) = cpuid.get_vendor_info() {
        id.vendor = Some(v.as_str().to_string());
    }
    let mut isa = Vec::new();
    let mut has = |present: bool, name: &str| {
        if present {
            isa.push(name.to_string());
        }
    };
    if let Some(f) = cpuid.get_feature_info() {
        id.family = Some(f.family_id().into());
        id.model = Some(f.model_id().into());
        id.stepping = Some(f.stepping_id().into());
        has(f.has_sse42(), "sse4.2");
        has(f.has_avx(), "avx");
        has(f.has_fma(), "fma");
        has(f.has_f16c(), "f16c");
    }
    if let Some(e) = cpuid.get_extended_feature_info() {
        has(e.has_avx2(), "avx2");
        has(e.has_avx_vnni(), "avx-vnni");
        has(e.has_avx512f(), "avx512f");
        has(e.has_avx512bw(), "avx512bw");
        has(e.has_avx512vl(), "avx512vl");
        has(e.has_avx512vnni(), "avx512-vnni");
        has(e.has_avx512_bf16(), "avx512-bf16");
        has(e.has_avx512_fp16(), "avx512-fp16");
        has(e.has_amx_tile(), "amx-tile");
        has(e.has_amx_bf16(), "amx-bf16");
        has(e.has_amx_int8(), "amx-int8");
    }
    id.isa = isa;
    if let Some(caches) = cpuid.get_cache_parameters() {
        for c in caches {
            let bytes = (c.associativity()
                * c.physical_line_partitions()
                * c.coherency_line_size()
                * c.sets()) as u64;
            let data = !matches!(c.cache_type(), raw_cpuid::CacheType::Instruction);
            match c.level() {
                1 if data => id.l1d_bytes = Some(bytes),
                2 => id.l2_bytes = Some(bytes),
                3 => id.l3_bytes = Some(bytes),
                _ => {}
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
fn identify(id: &mut CpuIdentity) {
    use std::arch::is_aarch64_feature_detected as detected;
    let mut isa = Vec::new();
    for (present, name) in [
        (detected!("neon"), "neon"),
        (detected!("fp16"), "fp16"),
        (detected!("bf16"), "bf16"),
        (detected!("i8mm"), "i8mm"),
        (detected!("dotprod"), "dotprod"),
        (detected!("sve"), "sve"),
        (detected!("sve2"), "sve2"),
    ] {
        if present {
            isa.push(name.to_string());
        }
    }
    id.isa = isa;
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
fn identify(_: &mut CpuIdentity) {}

/// The fingerprint of this process's machine; `threads` is what the backend uses,
/// `burn_version` the Burn a Rust runner was built with (empty for the PyTorch reference).
pub fn collect(threads: usize, burn_version: &str) -> Fingerprint {
    let sys = system();
    Fingerprint {
        hostname: sysinfo::System::host_name().unwrap_or_default(),
        cpu_model: brand(&sys),
        logical_cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        threads,
        memory_bytes: Some(sys.total_memory()).filter(|&m| m > 0),
        os: sysinfo::System::long_os_version().unwrap_or_else(|| std::env::consts::OS.to_string()),
        kernel: sysinfo::System::kernel_version().unwrap_or_default(),
        gpu_name: None,
        gpu_driver: None,
        gpu_memory_bytes: None,
        gpu_compute_capability: None,
        nvidia_smi: nvidia_smi(),
        cpu: Some(identity(&sys)),
        backend_version: String::new(),
        rustc_version: Some(env!("KILN_RUSTC_VERSION").to_string()).filter(|v| !v.is_empty()),
        opt_level: Some(env!("KILN_OPT_LEVEL").to_string()).filter(|v| !v.is_empty()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_identified_from_its_hardware() {
        let fp = collect(1, "");
        assert!(!fp.cpu_model.is_empty());
        assert!(fp.memory_bytes.is_some_and(|m| m > 1 << 26));
        let cpu = fp.cpu.expect("a CPU identity");
        if cfg!(target_arch = "x86_64") {
            assert!(cpu.vendor.is_some() && cpu.family.is_some(), "{cpu:?}");
            // Every x86-64 CPU Kiln can run on has SSE4.2 or better.
            assert!(!cpu.isa.is_empty(), "{cpu:?}");
        }
        // The opt-level this test was built at, as cargo names them.
        let debug = cfg!(debug_assertions);
        let level = fp.opt_level.as_deref();
        assert!(
            matches!(level, Some("0" | "1" | "2" | "3" | "s" | "z"))
                && (!debug || level == Some("0")),
            "{level:?}"
        );
    }

    #[test]
    fn nvidia_smi_q_gives_driver_cuda_and_each_gpu() {
        let q = "==============NVSMI LOG==============\n\
                 Timestamp                                 : Tue Dec  1 12:00:00 2026\n\
                 Driver Version                            : 580.65.06\n\
                 CUDA Version                              : 13.0\n\
                 \n\
                 Attached GPUs                             : 2\n\
                 GPU 00000000:19:00.0\n\
                 \x20   Product Name                          : NVIDIA H200\n\
                 \x20   FB Memory Usage\n\
                 \x20       Total                             : 143771 MiB\n\
                 \x20       Reserved                          : 0 MiB\n\
                 \x20   BAR1 Memory Usage\n\
                 \x20       Total                             : 262144 MiB\n\
                 GPU 00000000:3B:00.0\n\
                 \x20   Product Name                          : NVIDIA H200\n\
                 \x20   FB Memory Usage\n\
                 \x20       Total                             : 143771 MiB\n";
        let smi = parse_nvidia_smi(q);
        assert_eq!(smi.driver_version.as_deref(), Some("580.65.06"));
        assert_eq!(smi.cuda_version.as_deref(), Some("13.0"));
        assert_eq!(
            smi.gpus,
            vec![
                "NVIDIA H200, 143771 MiB, bus 00000000:19:00.0",
                "NVIDIA H200, 143771 MiB, bus 00000000:3B:00.0"
            ]
        );
        assert_eq!(smi.query, q);
    }
}
