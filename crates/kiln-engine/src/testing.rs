//! What tests of the engine and of its callers (xtask's) share: fake probes of a runner, the
//! PyTorch reference's script and the Python that has torch. Built for the engine's own tests
//! and with the `testing` feature.

use std::path::PathBuf;

use crate::runners::{Built, Runner};

/// A built backend whose probe lists one available default device of `kind`.
pub fn built(name: &str, runner: Runner, spec: &str, kind: kiln_contract::DeviceKind) -> Built {
    let report = kiln_contract::ProbeReport {
        backend: name.into(),
        backend_version: "0".into(),
        devices: vec![kiln_contract::DeviceReport {
            spec: spec.into(),
            name: spec.into(),
            kind,
            available: true,
            reason: None,
            precisions: vec!["f32".into()],
            default: true,
            memory_bytes: None,
            runtime: None,
        }],
    };
    (
        crate::backends::find(name).expect("a backend Kiln knows"),
        runner,
        report,
    )
}

/// A built backend whose probe lists one available default CPU device.
pub fn on_cpu(name: &str, runner: Runner) -> Built {
    built(name, runner, "cpu", kiln_contract::DeviceKind::Cpu)
}

/// The PyTorch reference runner's script, for tests.
pub fn reference_script() -> std::path::PathBuf {
    crate::workspace::workspace_root().join(crate::backends::REFERENCE_RUNNER)
}

/// The Python that has torch, for tests: `cargo xtask test` passes it; KILN_REQUIRE_TORCH=1
/// makes its absence a failure (CI installs it).
pub fn test_python() -> Option<PathBuf> {
    match std::env::var_os("KILN_TORCH_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                std::env::var("KILN_REQUIRE_TORCH").as_deref() != Ok("1"),
                "KILN_REQUIRE_TORCH=1 but KILN_TORCH_PYTHON is not set (run `cargo xtask test`)"
            );
            kiln_contract::testing::skip(
                "a PyTorch reference test",
                "no Python with torch (run `cargo xtask test` after `cargo xtask setup-libtorch`)",
            );
            None
        }
    }
}

/// The Burn of an A/B side as a test names it (`0.22.1`, `path:/src/burn`).
pub fn burn_build(spec: &str) -> kiln_contract::BurnBuild {
    kiln_contract::BurnBuild {
        spec: spec.into(),
        version: "0.22.1".into(),
        path: spec.strip_prefix("path:").map(str::to_string),
        revision: None,
        dirty: None,
        without: Vec::new(),
    }
}
