//! How reports name the machine a record's fingerprint describes. Measuring the machine is
//! kiln-machine's; the fingerprint's fields are the record's (`crate::Fingerprint`).

use crate::Fingerprint;

/// The machine a fingerprint describes, as a key built from its hardware: CPU (vendor, name,
/// family/model/stepping), logical cores, memory (whole GiB); the host name last, only to tell
/// apart identical hardware. Records of one key are one machine in a report. The GPU is not in
/// it: only a GPU cell's record names its GPU (`gpu_name`), and the flex and CUDA rows of one
/// machine are one machine; a row's GPU is in its device column.
pub fn machine_key(fp: &Fingerprint) -> String {
    let cpu = fp.cpu.clone().unwrap_or_default();
    let num = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
    format!(
        "{}|{}|{}.{}.{}|{}|{}|{}",
        cpu.vendor.unwrap_or_default(),
        fp.cpu_model,
        num(cpu.family),
        num(cpu.model),
        num(cpu.stepping),
        fp.logical_cores,
        fp.memory_bytes.map(gib).unwrap_or_default(),
        fp.hostname
    )
}

fn gib(bytes: u64) -> u64 {
    (bytes as f64 / (1u64 << 30) as f64).round() as u64
}

/// A machine's name in tables: its CPU (with family and model where known) and core count,
/// then the host name: `AMD EPYC (family 26 model 2), 2 cores · vm` (the GPU a row ran on is
/// in its device column, as for [`machine_key`]).
pub fn machine_label(fp: &Fingerprint) -> String {
    if fp.cpu_model.is_empty() && fp.hostname.is_empty() {
        return String::new();
    }
    let mut label = fp.cpu_model.clone();
    if let Some(cpu) = &fp.cpu
        && let (Some(f), Some(m)) = (cpu.family, cpu.model)
    {
        label.push_str(&format!(" (family {f} model {m})"));
    }
    label.push_str(&format!(", {} cores", fp.logical_cores));
    if !fp.hostname.is_empty() {
        label.push_str(&format!(" · {}", fp.hostname));
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuIdentity;

    fn fp(host: &str, cpu: &str, family: u32) -> Fingerprint {
        Fingerprint {
            hostname: host.into(),
            cpu_model: cpu.into(),
            logical_cores: 2,
            memory_bytes: Some(24 << 30),
            cpu: Some(CpuIdentity {
                family: Some(family),
                model: Some(1),
                ..CpuIdentity::default()
            }),
            ..Fingerprint::default()
        }
    }

    #[test]
    fn two_cpus_behind_one_host_name_are_two_machines() {
        let (a, b) = (fp("vm", "AMD EPYC", 25), fp("vm", "AMD EPYC", 26));
        assert_ne!(machine_key(&a), machine_key(&b));
        assert_ne!(machine_label(&a), machine_label(&b));
        assert!(machine_label(&a).starts_with("AMD EPYC (family 25"));
        // The host name only tells identical hardware apart.
        assert_ne!(machine_key(&a), machine_key(&fp("other", "AMD EPYC", 25)));
        assert_eq!(machine_key(&a), machine_key(&fp("vm", "AMD EPYC", 25)));
    }

    #[test]
    fn a_gpu_cell_and_a_cpu_cell_of_one_machine_are_one_machine() {
        let cpu = fp("vm", "AMD EPYC", 25);
        let mut gpu = cpu.clone();
        gpu.gpu_name = Some("NVIDIA H200".into());
        assert_eq!(machine_key(&cpu), machine_key(&gpu));
        assert_eq!(machine_label(&cpu), machine_label(&gpu));
    }
}
