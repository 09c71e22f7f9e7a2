//! Records the compiler that built the runner and the opt-level it built it at, for the
//! fingerprint.

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=KILN_RUSTC_VERSION={version}");
    // Cargo gives a build script the opt-level of the package it builds.
    let opt_level = std::env::var("OPT_LEVEL").unwrap_or_default();
    println!("cargo:rustc-env=KILN_OPT_LEVEL={opt_level}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
