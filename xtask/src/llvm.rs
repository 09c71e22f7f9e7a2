//! `cargo xtask setup-cubecl-llvm`: let CubeCL's LLVM-based runtimes (CUDA, HIP, and the CPU
//! runtime of burn-cpu) build on a machine that cannot download LLVM.
//!
//! CubeCL 0.11's CUDA (and HIP) runtime compiles kernels through LLVM. Its build gets LLVM from
//! `tracel-llvm-bundler`, whose build script downloads a prebuilt LLVM 23 from github.com into
//! `<data dir>/tracel/tracel-llvm-<version>/` unless that folder is already marked installed.
//! This command puts a system LLVM there instead (Debian: `llvm-22-dev`, `libpolly-22-dev`,
//! `libzstd-dev`): an `llvm-config` that answers for the system's LLVM, and the mark. That is
//! an LLVM other than the one CubeCL is released with; the folder says so
//! (`kiln-system-llvm.txt`) and a GPU kit built with it records it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use kiln_engine::cubecl_llvm::{MARKER, SENTINEL, bundle_dir};

/// A system `llvm-config` with static libraries: the newest `/usr/lib/llvm-N`, else PATH's.
fn find_llvm_config() -> Option<PathBuf> {
    (14..=30)
        .rev()
        .map(|n| PathBuf::from(format!("/usr/lib/llvm-{n}/bin/llvm-config")))
        .find(|p| p.is_file())
        .or_else(|| {
            let out = Command::new("llvm-config").arg("--bindir").output().ok()?;
            out.status.success().then(|| {
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("llvm-config")
            })
        })
}

fn ask(llvm_config: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(llvm_config)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", llvm_config.display()))?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed: {}",
            llvm_config.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// System libraries as the bundler's parser reads them: a library given by path
/// (`/usr/lib/x86_64-linux-gnu/libz3.so`) as `-lz3`.
pub fn as_flags(system_libs: &str) -> Vec<String> {
    system_libs
        .split_whitespace()
        .map(|t| match t.rsplit_once('/') {
            Some((_, file)) => {
                let name = file.strip_prefix("lib").unwrap_or(file);
                let name = name.split(".so").next().unwrap_or(name);
                let name = name.strip_suffix(".a").unwrap_or(name);
                format!("-l{name}")
            }
            None => t.to_string(),
        })
        .collect()
}

/// Whether the linker finds `-lNAME` (a `libNAME.so` or `libNAME.a` in the usual folders).
fn linkable(name: &str, extra: &Path) -> bool {
    let dirs = [
        extra,
        Path::new("/usr/lib/x86_64-linux-gnu"),
        Path::new("/usr/lib/aarch64-linux-gnu"),
        Path::new("/usr/lib64"),
        Path::new("/usr/lib"),
        Path::new("/lib/x86_64-linux-gnu"),
    ];
    dirs.iter().any(|d| {
        d.join(format!("lib{name}.so")).exists() || d.join(format!("lib{name}.a")).exists()
    })
}

/// The Debian package that holds a missing library, for the message.
fn package_hint(lib: &str, major: &str) -> String {
    match lib {
        "Polly" | "PollyISL" => format!("libpolly-{major}-dev"),
        "zstd" => "libzstd-dev".into(),
        "z3" => "libz3-dev".into(),
        "xml2" => "libxml2-dev".into(),
        "z" => "zlib1g-dev".into(),
        other => format!("the development package of lib{other}"),
    }
}

/// `--undo`: remove Kiln's stand-in (`ours`) from `dir`, saying how CubeCL relinks.
fn undo_stand_in(dir: &Path, ours: bool) -> Result<bool> {
    if ours {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
        let relink: Vec<String> = crate::backends::all()
            .iter()
            .filter_map(|b| match &b.source {
                crate::backends::Source::Cargo {
                    requires:
                        Some(
                            r @ (crate::backends::Requirement::Driver(_)
                            | crate::backends::Requirement::Llvm(_)),
                        ),
                    ..
                } => Some(format!(
                    "`cargo clean -p cubecl-llvm --release --target-dir {}` ({})",
                    crate::workspace::target_dir().display(),
                    r.feature()
                )),
                _ => None,
            })
            .collect();
        eprintln!(
            "kiln: removed the system LLVM stand-in from {}; CubeCL's next build downloads \
             its LLVM (so that it relinks, run {})",
            dir.display(),
            relink.join(" and ")
        );
    } else {
        eprintln!(
            "kiln: {} holds no stand-in of Kiln's; nothing to undo",
            dir.display()
        );
    }
    Ok(true)
}

/// The LLVM version of `real` (its `llvm-config`), or an error naming every static library
/// it lacks and the package that holds it.
fn check_static_libs(real: &Path) -> Result<String> {
    let version = ask(real, &["--version"])?;
    let major = version.split('.').next().unwrap_or_default().to_string();
    let libdir = PathBuf::from(ask(real, &["--libdir"])?);
    let libs = ask(real, &["--link-static", "--libs"])?;
    let system = ask(real, &["--link-static", "--system-libs"])?;
    let mut missing = Vec::new();
    for flag in libs
        .split_whitespace()
        .chain(as_flags(&system).iter().map(String::as_str))
    {
        let Some(name) = flag.strip_prefix("-l") else {
            continue;
        };
        if !linkable(name, &libdir) {
            missing.push(format!("lib{name} ({})", package_hint(name, &major)));
        }
    }
    missing.dedup();
    if !missing.is_empty() {
        bail!(
            "LLVM {version} ({}) cannot be linked statically here: missing {}",
            real.display(),
            missing.join(", ")
        );
    }
    Ok(version)
}

/// Write `contents` to `path` unless it already holds them (its modification time kept then).
fn write_if_changed(path: &Path, contents: &str) -> Result<()> {
    if std::fs::read(path).is_ok_and(|held| held == contents.as_bytes()) {
        return Ok(());
    }
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}

/// `cargo xtask setup-cubecl-llvm [--llvm-config PATH] [--undo]`.
pub fn setup(llvm_config: Option<PathBuf>, undo: bool) -> Result<bool> {
    let root = crate::workspace::workspace_root();
    let dir = bundle_dir(&root)?;
    let ours = dir.join(MARKER).is_file();
    if undo {
        return undo_stand_in(&dir, ours);
    }
    if dir.join(SENTINEL).is_file() && !ours {
        eprintln!(
            "kiln: {} already holds tracel's LLVM bundle; nothing to do",
            dir.display()
        );
        return Ok(true);
    }
    let Some(real) = llvm_config.or_else(find_llvm_config) else {
        bail!(
            "no llvm-config found: install a system LLVM with its static libraries (Debian 12: \
             `apt-get install llvm-22-dev libpolly-22-dev libzstd-dev`) or pass --llvm-config PATH"
        );
    };
    let version = check_static_libs(&real)?;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot create {}", bin.display()))?;
    let wrapper = bin.join("llvm-config");
    // Written only where they differ: cubecl-llvm's build script watches these files, and a
    // new modification time rebuilt every crate above it (burn-cpu's Burn) on each CI run.
    write_if_changed(
        &wrapper,
        &format!(
            "#!/bin/sh\n# Written by `cargo xtask setup-cubecl-llvm`: LLVM {version} from {} in \
             place of tracel-llvm-bundler's download.\n# System libraries given by path become \
             -l flags, as the bundler's parser expects.\nreal='{}'\ncase \" $* \" in\n  *\" \
             --system-libs \"*) \"$real\" \"$@\" | sed -e 's#[^ ]*/lib\\([A-Za-z0-9_+-]*\\)\\.so[.0-9]*#-l\\1#g' ;;\n  \
             *) exec \"$real\" \"$@\" ;;\nesac\n",
            real.display(),
            real.display()
        ),
    )?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    }
    write_if_changed(
        &dir.join(MARKER),
        &format!(
            "system LLVM {version} ({}) in place of tracel-llvm {}\nWritten by `cargo xtask \
             setup-cubecl-llvm`; `cargo xtask setup-cubecl-llvm --undo` removes it.\n",
            real.display(),
            dir.file_name().unwrap_or_default().to_string_lossy()
        ),
    )?;
    write_if_changed(&dir.join(SENTINEL), "")?;
    eprintln!(
        "kiln: CubeCL's LLVM builds now use LLVM {version} ({}) in place of the LLVM they \
         download ({}): `bench-all` builds burn-cpu's runner (kiln-cpu) with it, and kiln-cuda \
         on an NVIDIA machine or for `cargo xtask gpu-kit`. It is not the LLVM CubeCL is \
         released with: a kit built with it says so.",
        real.display(),
        dir.display()
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_file_keeps_its_modification_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("llvm-config");
        write_if_changed(&path, "one").unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let modified = || std::fs::metadata(&path).unwrap().modified().unwrap();
        write_if_changed(&path, "one").unwrap();
        assert_eq!(modified(), old);
        write_if_changed(&path, "two").unwrap();
        assert_ne!(modified(), old);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
    }

    #[test]
    fn libraries_given_by_path_become_link_flags() {
        assert_eq!(
            as_flags("-lrt -ldl /usr/lib/x86_64-linux-gnu/libz3.so -lzstd /opt/lib/libfoo.so.4"),
            ["-lrt", "-ldl", "-lz3", "-lzstd", "-lfoo"]
        );
    }
}
