//! How a test that cannot run here says so, where `cargo xtask test` sees it: a passing test's
//! output is swallowed by the test harness, so a skip is appended to the file
//! `KILN_SKIP_LOG` names (set by `cargo xtask test`, which lists every skip with its reason in
//! its closing summary). Under CI (`KILN_CI=1`, after `.ci/run` installed everything) a skip
//! is a failure: CI must run every test.

use std::io::Write;

/// The variable `cargo xtask test` sets to the file skips are written to.
pub const SKIP_LOG_VAR: &str = "KILN_SKIP_LOG";

/// Record that the calling test skips its checks for `reason` (what is missing and how to get
/// it); panics under `KILN_CI=1`, where nothing may be missing.
pub fn skip(test: &str, reason: &str) {
    assert!(
        std::env::var("KILN_CI").as_deref() != Ok("1"),
        "KILN_CI=1 but {test} would skip: {reason}"
    );
    eprintln!("skipped: {test}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        let _ = log_skip(std::path::Path::new(&path), test, reason);
    }
}

/// Append one skip, `TEST: REASON` on one line, to the skip log at `path` (line-sized appends
/// from parallel tests stay whole: O_APPEND).
pub fn log_skip(path: &std::path::Path, test: &str, reason: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{test}: {}", reason.replace('\n', " "))
}

/// Whether a bless mode (`KILN_BLESS`, which rewrites a golden file instead of comparing with
/// it) may run: never under CI, where a rewritten file would check nothing.
pub fn blessing() -> bool {
    let bless = std::env::var_os("KILN_BLESS").is_some();
    assert!(
        !(bless && (std::env::var_os("CI").is_some() || std::env::var_os("KILN_CI").is_some())),
        "KILN_BLESS is set under CI: a blessed file checks nothing; unset it"
    );
    bless
}

/// The calling test's package directory: `CARGO_MANIFEST_DIR` as cargo sets it when it runs the
/// test, else `compiled` (the test's own `env!("CARGO_MANIFEST_DIR")`). The one cargo sets now
/// comes first: a test binary built from another checkout into a shared target directory (CI's
/// clone, then this one with older sources) still carries the other checkout's path.
pub fn package_dir(compiled: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(compiled))
}
