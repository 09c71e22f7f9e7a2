//! The runtime report of any CubeCL backend (wgpu, Vulkan, Metal, CUDA, ROCm): fusion, the
//! autotune level and the state of CubeCL's on-disk autotune cache, which decides whether a
//! first step takes seconds or minutes. Only environment variables and files are read, so this
//! names no backend.

use std::path::PathBuf;

use kiln_results::{AutotuneLevel, Runtime};

/// The report of a CubeCL device: `api` and `driver` as the backend sees them.
pub fn runtime(api: &str, driver: &str, cpu_emulated: bool, fusion: bool) -> Runtime {
    Runtime {
        api: Some(api.to_string()),
        driver: Some(driver.to_string()).filter(|d| !d.is_empty()),
        cpu_emulated,
        fusion: Some(fusion),
        autotune: Some(autotune_level().name().to_string()),
        autotune_cache: Some(autotune_cache_state().to_string()),
        autotune_cache_dir: Some(autotune_cache_dir().display().to_string()),
        compute_capability: None,
    }
}

/// Autotune level in effect (CubeCL reads `CUBECL_AUTOTUNE_LEVEL`; `balanced` by default).
pub fn autotune_level() -> AutotuneLevel {
    match std::env::var("CUBECL_AUTOTUNE_LEVEL").as_deref() {
        Ok("minimal" | "0") => AutotuneLevel::Minimal,
        Ok("extensive" | "2") => AutotuneLevel::Extensive,
        Ok("full" | "3") => AutotuneLevel::Full,
        _ => AutotuneLevel::Balanced,
    }
}

/// Where CubeCL keeps its autotune cache: `target/environment` under the outermost Cargo
/// workspace above the working directory, else the user cache directory (`~/.cache/cubecl`).
pub fn autotune_cache_dir() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    let workspace = cwd
        .ancestors()
        .filter(|d| d.join("Cargo.toml").is_file())
        .last()
        .map(|root| root.join("target").join("environment"));
    workspace.unwrap_or_else(|| {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("cubecl")
    })
}

/// `disabled` (CUBECL_AUTOTUNE_CACHE off), `warm` (the cache holds results) or `cold`.
pub fn autotune_cache_state() -> &'static str {
    if matches!(
        std::env::var("CUBECL_AUTOTUNE_CACHE").as_deref(),
        Ok("false" | "0" | "off")
    ) {
        return "disabled";
    }
    let warm = std::fs::read_dir(autotune_cache_dir())
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if warm { "warm" } else { "cold" }
}
