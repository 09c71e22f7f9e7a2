//! The runtime report of any CubeCL backend (wgpu, Vulkan, Metal, CUDA, ROCm): fusion, the
//! autotune level and the state of CubeCL's on-disk autotune cache, which decides whether a
//! first step takes seconds or minutes. Only environment variables and files are read, so this
//! names no backend.

use std::path::{Path, PathBuf};

use kiln_contract::{AutotuneLevel, Runtime};

/// The report of a CubeCL device: `api` and `driver` as the backend sees them.
pub fn runtime(api: &str, driver: &str, cpu_emulated: bool, fusion: bool) -> Runtime {
    Runtime {
        api: Some(api.to_string()),
        driver: Some(driver.to_string()).filter(|d| !d.is_empty()),
        cpu_emulated,
        fusion: Some(fusion),
        autotune: Some(autotune_level().name().to_string()),
        autotune_cache: Some(autotune_cache_state().to_string()),
        autotune_cache_dir: Some(environment_file().display().to_string()),
        compute_capability: None,
        profiled_launches: Some(profiled_launches(
            std::env::var("CUBECL_DEBUG_LOG").ok().as_deref(),
            std::env::var("CUBECL_DEBUG_OPTION").ok().as_deref(),
        )),
    }
}

/// Whether CubeCL profiles every kernel launch, waiting for each, given its `CUBECL_DEBUG_LOG`
/// and `CUBECL_DEBUG_OPTION` (as cubecl-runtime 0.11.3's configuration reads them: any log but
/// `0`/`false` turns profiling on, and so do the `debug*` and `profile*` options).
fn profiled_launches(debug_log: Option<&str>, debug_option: Option<&str>) -> bool {
    let logged = debug_log.is_some_and(|v| !matches!(v, "0" | "false"));
    let option = debug_option.is_some_and(|v| {
        matches!(
            v,
            "debug" | "debug-full" | "profile" | "profile-medium" | "profile-full"
        )
    });
    logged || option
}

/// Whether Burn's backend type `B` fuses kernels: Burn compiles its CubeCL backends as
/// `Fusion<CubeBackend>` when its `fusion` feature is on (its default) and as the bare backend
/// when a build turns it off (a Burn A/B side, `--burn path:...`), so the type says which.
pub fn fused<B: ?Sized>() -> bool {
    std::any::type_name::<B>().contains("Fusion<")
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

/// The name of the CubeCL environment in use: `CUBECL_ENVIRONMENT`, else `default`.
fn environment_name() -> String {
    std::env::var("CUBECL_ENVIRONMENT")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The file of the CubeCL environment in use: one database holding every cache CubeCL keeps
/// on disk (autotune results, compiled kernels, throughput), `<cache dir>/<name>.db`, the name
/// reduced to `[A-Za-z0-9._-]` as CubeCL does.
pub fn environment_file() -> PathBuf {
    let name: String = environment_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    autotune_cache_dir().join(format!("{name}.db"))
}

/// A CubeCL environment name no process used before: this process's id and the time.
pub fn fresh_environment_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("kiln-cold-{}-{nanos}", std::process::id())
}

/// Remove the environment in use (a cold cell's own, once it ended), with the files its
/// database keeps beside it (`-wal`, and `-tshm` or `-shm`) and the list of cells that ran in it.
pub fn remove_environment() {
    let file = environment_file();
    for suffix in ["", "-wal", "-tshm", "-shm"] {
        let mut path = file.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(ran_here());
}

/// The cells that ran in the environment in use, one key a line, in a file beside its database:
/// what tells a warm cell from one that only shares an environment with others.
fn ran_here() -> PathBuf {
    let mut path = environment_file().into_os_string();
    path.push(".kiln-cells");
    path.into()
}

/// The state of CubeCL's caches for the cell `key` (its model, backend, device, precision and
/// batch): `cold` (the environment in use does not exist yet), `warm` (this cell ran in it
/// before: its kernels are compiled and tuned), `shared` (it exists, but only other processes'
/// work is in it: other cells', the GEMM calibration's), or `disabled`.
pub fn cache_state_for(key: &str) -> &'static str {
    match autotune_cache_state() {
        "warm" => warm_or_shared(&ran_here(), key),
        state => state,
    }
}

/// `warm` when the list of cells at `ran` holds `key`, else `shared`.
fn warm_or_shared(ran: &Path, key: &str) -> &'static str {
    let text = std::fs::read_to_string(ran).unwrap_or_default();
    if text.lines().any(|l| l == key) {
        "warm"
    } else {
        "shared"
    }
}

/// The key of a cell in [`cache_state_for`] and [`ran`]: the cell and the runner that runs it.
/// Another build of the runner (another Burn, its features: fusion on or off) compiles and
/// tunes other kernels, so a cell is warm only for the build that ran it.
pub fn cell_key(model: &str, backend: &str, device: &str, precision: &str, batch: usize) -> String {
    key_of_build(
        &format!("{model}/{backend}/{device}/{precision}/b{batch}"),
        &runner_build(),
    )
}

/// `cell` under the runner build `build`.
fn key_of_build(cell: &str, build: &str) -> String {
    format!("{cell}@{build}")
}

/// This runner's build: its executable's size and modification time (a rebuild changes them,
/// running it again does not); `unknown` where the platform cannot say.
fn runner_build() -> String {
    let meta = std::env::current_exe().and_then(std::fs::metadata);
    let modified = meta
        .as_ref()
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    match (meta.as_ref().ok(), modified) {
        (Some(m), Some(t)) => format!("{:x}-{:x}", m.len(), t.as_nanos()),
        _ => "unknown".into(),
    }
}

/// Note that the cell `key` ran in the environment in use (its caches now hold its kernels).
pub fn ran(key: &str) {
    note_ran(&ran_here(), key);
}

/// Add `key` to the list of cells at `ran`, once.
fn note_ran(ran: &Path, key: &str) {
    use std::io::Write;
    if warm_or_shared(ran, key) == "warm" {
        return;
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ran)
    {
        let _ = writeln!(f, "{key}");
    }
}

/// `disabled` (CUBECL_AUTOTUNE_CACHE off), `warm` (the environment in use exists: an earlier
/// process left its caches there) or `cold` (it does not: every kernel compiles and tunes).
/// A cell's record says more: [`cache_state_for`].
pub fn autotune_cache_state() -> &'static str {
    if matches!(
        std::env::var("CUBECL_AUTOTUNE_CACHE").as_deref(),
        Ok("false" | "0" | "off")
    ) {
        return "disabled";
    }
    let warm = std::fs::metadata(environment_file()).is_ok_and(|m| m.len() > 0);
    if warm { "warm" } else { "cold" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debugging_settings_that_wait_for_every_launch_are_recognised() {
        assert!(!profiled_launches(None, None));
        assert!(profiled_launches(Some("/tmp/cubecl.log"), None));
        assert!(profiled_launches(Some("stderr"), None));
        assert!(!profiled_launches(Some("0"), None));
        assert!(profiled_launches(None, Some("profile")));
        assert!(profiled_launches(None, Some("debug-full")));
        assert!(!profiled_launches(None, Some("anything else")));
    }

    #[test]
    fn a_cell_is_warm_only_where_it_ran_before() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("default.db.kiln-cells");
        let mlp = cell_key("mlp", "wgpu", "vulkan:cpu", "f32", 128);
        let cnn = cell_key("mnist-cnn", "wgpu", "vulkan:cpu", "f32", 128);
        // An environment other work filled (another cell, the GEMM calibration): shared.
        assert_eq!(warm_or_shared(&ran, &mlp), "shared");
        note_ran(&ran, &cnn);
        assert_eq!(warm_or_shared(&ran, &mlp), "shared");
        note_ran(&ran, &mlp);
        note_ran(&ran, &mlp);
        assert_eq!(warm_or_shared(&ran, &mlp), "warm");
        assert_eq!(std::fs::read_to_string(&ran).unwrap().lines().count(), 2);
    }

    #[test]
    fn a_cell_another_build_ran_is_not_warm() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("default.db.kiln-cells");
        let cell = "mlp/burn-cpu/cpu/f32/b128";
        note_ran(&ran, &key_of_build(cell, "fused"));
        assert_eq!(warm_or_shared(&ran, &key_of_build(cell, "fused")), "warm");
        assert_eq!(
            warm_or_shared(&ran, &key_of_build(cell, "unfused")),
            "shared"
        );
        // This test's own executable has a build, and the cell key carries it.
        assert!(cell_key("mlp", "flex", "cpu", "f32", 128).ends_with(&runner_build()));
        assert_ne!(runner_build(), "unknown");
    }
}
