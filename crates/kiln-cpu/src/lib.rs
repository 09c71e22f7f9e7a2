//! Kiln's binding of Burn's CubeCL CPU backend (`burn`'s `cpu` feature, the burn-cpu crate):
//! CubeCL's kernels and autotune, the stack every Burn GPU backend shares, JIT-compiled through
//! LLVM for the host CPU. One device, the CPU, `cpu`. Built with Burn's default features but
//! kernel fusion (the `cpu` feature in Cargo.toml says why).
//!
//! Its LLVM comes from cubecl-llvm's build script (a download from github.com), or from a
//! system LLVM put in its place by `cargo xtask setup-cubecl-llvm`. Built without the `cpu`
//! feature (the workspace's default build), the crate still compiles and its probe says how to
//! build it.

#[cfg(any(test, not(feature = "cpu")))]
use kiln_contract::DeviceKind;
use kiln_contract::DeviceReport;
use kiln_core::Binding;
use kiln_core::device::Selected;
#[cfg(feature = "cpu")]
use kiln_core::device::supported_precisions;

/// The burn-cpu backend: one device, the host CPU.
pub struct CpuBinding;

/// Kiln's name of the backend (its crate's name in Burn; `cpu` alone would read as a device).
pub const NAME: &str = "burn-cpu";

/// Why the runner has no backend, when it was built without the `cpu` feature.
#[cfg(not(feature = "cpu"))]
const NOT_BUILT: &str = "this runner was built without Burn's CubeCL CPU backend: xtask builds \
     kiln-cpu with its `cpu` feature where CubeCL's LLVM is set up (`cargo xtask \
     setup-cubecl-llvm`, docs/backends.md); KILN_BUILD_CPU=1 builds it anyway";

impl Binding for CpuBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        vec![report()]
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        match spec {
            "default" | "cpu" => selected(),
            other => Err(format!(
                "{NAME} has one device, `cpu`; {other:?} is not one"
            )),
        }
    }

    /// CubeCL's CPU runtime runs one worker per logical CPU the process may use.
    fn threads(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// How CubeCL is set up: LLVM's JIT on the host, fusion as Burn was built (off, by this crate's
/// `cpu` feature), the autotune level and cache.
fn runtime() -> kiln_contract::Runtime {
    #[cfg(feature = "cpu")]
    let fused = kiln_core::cubecl::fused::<burn::backend::Cpu>();
    #[cfg(not(feature = "cpu"))]
    let fused = true;
    kiln_core::cubecl::runtime("llvm", "", false, fused)
}

#[cfg(feature = "cpu")]
fn report() -> DeviceReport {
    let device = burn::tensor::Device::cpu();
    DeviceReport {
        runtime: Some(runtime()),
        precisions: supported_precisions(&device),
        ..kiln_core::device::cpu_device_report(&device)
    }
}

#[cfg(not(feature = "cpu"))]
fn report() -> DeviceReport {
    DeviceReport {
        spec: "cpu".into(),
        name: kiln_machine::cpu_model(),
        kind: DeviceKind::Cpu,
        available: false,
        reason: Some(NOT_BUILT.into()),
        precisions: Vec::new(),
        default: true,
        memory_bytes: kiln_machine::memory_bytes(),
        runtime: Some(runtime()),
    }
}

#[cfg(feature = "cpu")]
fn selected() -> Result<Selected, String> {
    Ok(Selected {
        runtime: Some(runtime()),
        ..Selected::cpu(burn::tensor::Device::cpu())
    })
}

#[cfg(not(feature = "cpu"))]
fn selected() -> Result<Selected, String> {
    Err(NOT_BUILT.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn the_probe_names_the_cpu_and_says_why_it_is_unavailable() {
        let devices = CpuBinding.probe();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!(d.spec, "cpu");
        assert_eq!(d.kind, DeviceKind::Cpu);
        if !d.available {
            let why = d.reason.as_deref().unwrap_or_default();
            assert!(why.contains("setup-cubecl-llvm"), "{why}");
        }
        assert!(CpuBinding.device("gpu:0").is_err());
    }

    /// Each Burn and CubeCL crate's features in a cargo build of this workspace: name to
    /// features, `default` left out (it names no code of its own).
    fn burn_features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args(["tree", "--manifest-path", manifest, "-e", "features"])
            .args(["--prefix", "none", "--format", "{p} {f}"])
            .args(args)
            .output()
            .expect("cargo tree runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("burn") || l.starts_with("cubecl"))
            .filter(|l| !l.contains(" feature \""))
            .map(|l| {
                let mut words = l.split(' ');
                let name = words.next().unwrap_or_default().to_string();
                let features = words
                    .nth(1)
                    .filter(|f| !f.starts_with('('))
                    .unwrap_or_default()
                    .split(',')
                    .filter(|f| !f.is_empty() && *f != "default")
                    .map(String::from);
                (name, features.collect())
            })
            .collect()
    }

    /// The runner's Burn is Burn's defaults but fusion: against the same build beside flex
    /// (whose Burn has its defaults), only fusion is missing. cubecl-runtime's `channel-*`
    /// features, which its defaults name, gate no code in cubecl-runtime 0.11.3.
    #[test]
    fn the_runner_has_burns_default_features_but_fusion() {
        let runner = burn_features(&["-p", "kiln-cpu", "--features", "cpu"]);
        let defaults = burn_features(&[
            "-p",
            "kiln-cpu",
            "-p",
            "kiln-flex",
            "--features",
            "kiln-cpu/cpu",
        ]);
        assert!(defaults["burn-cubecl"].contains("fusion"), "{defaults:?}");
        for (name, features) in &defaults {
            let missing: Vec<&String> = match runner.get(name) {
                Some(has) => features.difference(has).collect(),
                None => features.iter().collect(),
            };
            let fusion = |f: &&String| f.contains("fusion") || name.contains("fusion");
            let unused = |f: &&String| name == "cubecl-runtime" && f.starts_with("channel-");
            let missing: Vec<_> = missing
                .into_iter()
                .filter(|f| !fusion(f) && !unused(f))
                .collect();
            assert!(
                missing.is_empty(),
                "{name} lacks {missing:?} in the runner's Burn"
            );
        }
        assert!(runner["burn-cubecl"].contains("autotune"), "{runner:?}");
        assert!(!runner["burn-cubecl"].contains("fusion"), "{runner:?}");
    }
}
