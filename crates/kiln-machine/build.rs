//! Records the compiler that built the runner, for the fingerprint.

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=KILN_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
