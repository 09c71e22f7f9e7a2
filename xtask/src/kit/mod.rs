//! `cargo xtask gpu-kit`: everything a GPU machine without a Rust toolchain or network needs to
//! run Kiln's GPU rows, in one folder under 64 MiB: the stripped, xz-compressed runners of the GPU
//! backends and xtask itself, the PyTorch reference script, the backends' metadata, the Vulkan
//! loader, a plan of the GPU cells and `run.sh` (gpu-kit/run.sh), which runs them there and
//! writes the report. A runner that cannot be built here is left out with the reason beside it
//! (`bin/<runner>.missing`), and its cells are skipped there with that reason.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::backends::{self, Source};
use crate::workspace::workspace_root;

mod files;

pub use files::{budget, check_budget, contents, tracked_tree_bytes};
use files::{compress, copy, write};

/// The backends whose runners a kit carries (the PyTorch reference needs only its script).
pub const RUNNERS: &[&str] = &["cuda", "wgpu"];

mod plan;
mod replay;

pub use plan::{KitPlan, kit_common_args, profile_of};

mod after;
pub use after::CARRIED_CACHE;
use after::left_by;
pub use replay::replay;

/// The shell script that runs a kit (copied into it as `run.sh`).
pub const RUN_SCRIPT: &str = "gpu-kit/run.sh";

/// The files of a kit, relative to its folder, whatever could be built: `run.sh` depends on
/// these names. A runner that could not be built is `bin/<runner>.missing` instead of
/// `bin/<runner>.xz`.
pub fn expected_files(runners: &[(&str, bool)]) -> Result<Vec<String>> {
    let mut files: Vec<String> = [
        "run.sh",
        "README.txt",
        "kit.json",
        "kit.env",
        "backends.json",
        "bin/xtask.xz",
        "plan/run.json",
        "plan/after.tsv",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (package, built) in runners {
        files.push(if *built {
            format!("bin/{package}.xz")
        } else {
            format!("bin/{package}.missing")
        });
    }
    files.extend(crate::backends::reference_files()?);
    files.sort();
    Ok(files)
}

/// What `kit.json` says of a kit.
#[derive(Serialize)]
struct KitInfo {
    kiln_commit: Option<String>,
    kiln_dirty: Option<bool>,
    created_at: u64,
    /// Runners carried, and the ones left out with the reason.
    runners: Vec<String>,
    missing: Vec<(String, String)>,
    /// The Vulkan loader carried (`vulkan/libvulkan.so.1`), or why not.
    vulkan_loader: Result<String, String>,
    /// The LLVM CubeCL was built with, where it was not the one it downloads.
    cubecl_llvm: Option<String>,
    /// The CUDA API the CUDA runner was built against (`13.0`): the driver must offer it.
    cuda_api: Option<String>,
    cells: usize,
    /// The plan, as `--plan-only` prints it.
    plan: String,
    files: Vec<(String, u64)>,
    total_bytes: u64,
}

/// The inputs of a kit: the runner binaries (or why each is missing) and xtask's own binary.
pub struct KitInputs {
    pub xtask: PathBuf,
    /// (package, its binary or why there is none).
    pub runners: Vec<(String, Result<PathBuf, String>)>,
    /// The Vulkan loader library to carry (`None` only in tests).
    pub vulkan_loader: Option<PathBuf>,
    /// The CUDA API the CUDA runner was built against (`CUDARC_CUDA_VERSION`).
    pub cuda_api: Option<String>,
    /// The plan the kit carries.
    pub plan: KitPlan,
    /// An earlier window's CubeCL caches (`--after`), carried as `carried/cubecl-cache.tgz`
    /// for `run.sh` to unpack before the cells.
    pub carried_cache: Option<PathBuf>,
}

/// The CUDA API the kit's runners are built against (cudarc's `CUDARC_CUDA_VERSION`): without
/// nvcc, cudarc falls back to the newest API it knows (13.4), which a 13.0 driver (the H200
/// machines': 580) does not fully provide. 13.0 runs on every driver from 580 on;
/// `CUDARC_CUDA_VERSION` set when building picks another.
pub const CUDA_API: &str = "13000";

/// `cargo xtask gpu-kit [--out DIR] [--plan-only] [--profile FILE] [--after RUN]`: build the
/// GPU runners and assemble the kit, or only print its plan (from `profile`, else the
/// committed H200's); after an earlier window's run, of the cells it left, with its caches.
pub fn gpu_kit(
    out: Option<PathBuf>,
    wanted: Option<Vec<String>>,
    (plan_only, after): (bool, Option<PathBuf>),
    profile: Option<PathBuf>,
) -> Result<bool> {
    let (profile, name) = profile_of(profile.as_deref())?;
    let (cells, carried_cache) = match &after {
        None => (plan::CELLS.iter().collect(), None),
        Some(run) => left_by(run)?,
    };
    let plan = plan::plan_of(&profile, &name, None, &cells)?;
    print!("{}", plan.text());
    if plan_only {
        return Ok(true);
    }
    let cuda_api = std::env::var("CUDARC_CUDA_VERSION").unwrap_or_else(|_| CUDA_API.into());
    // SAFETY: gpu-kit sets it before starting any thread or child (cargo inherits it).
    unsafe { std::env::set_var("CUDARC_CUDA_VERSION", &cuda_api) };
    eprintln!(
        "kiln: the kit's CUDA runner is built against the CUDA {} API (CUDARC_CUDA_VERSION)",
        cuda_api_name(&cuda_api)
    );
    let vulkan_loader = vulkan_loader(&out_or_default(out.as_deref()))?;
    let out = out.unwrap_or_else(|| crate::workspace::target_dir().join("gpu-kit"));
    if let Some(unknown) = wanted
        .iter()
        .flatten()
        .find(|w| !RUNNERS.contains(&w.as_str()))
    {
        bail!(
            "--backends {unknown}: a kit carries the runners of {} (the PyTorch reference \
             needs only its script, always carried)",
            RUNNERS.join(", ")
        );
    }
    check_out(&out)?;
    let mut runners = Vec::new();
    for name in RUNNERS {
        // burn-train only in a runner the plan's Learner cells use (it weighs on the kit).
        let learner: &[&str] =
            if plan.cells.iter().any(|c| {
                c.backend == *name && c.training_loop == kiln_contract::TrainingLoop::Learner
            }) {
                &[crate::build::LEARNER]
            } else {
                &[]
            };
        let backend = backends::find(name)?;
        let Source::Cargo { package, requires } = &backend.source else {
            bail!("{name} is not a Rust runner; a kit carries only those");
        };
        let asked = wanted.as_ref().is_none_or(|w| w.iter().any(|w| w == name));
        let built = match requires {
            _ if !asked => Err(format!(
                "left out when the kit was built (`cargo xtask gpu-kit --backends {}`)",
                wanted.as_deref().unwrap_or_default().join(",")
            )),
            // Built for the GPU machine, whatever this one has (no driver needed to build).
            Some(r) => {
                crate::build::build_featured(package, r, learner).map_err(|e| format!("{e:#}"))
            }
            None if crate::workspace::prebuilt_dir().is_none() => {
                let dir = crate::workspace::target_dir();
                crate::build::build_runners(&[package], learner, &dir)
                    .map(|()| crate::workspace::binary(&dir, package))
                    .map_err(|e| format!("{e:#}"))
            }
            None => crate::runners::runner(backend).map(|r| r.program),
        };
        if let Err(why) = &built {
            eprintln!("kiln: the kit goes without {package}: {why}");
        }
        runners.push((package.clone(), built));
    }
    // A release xtask (a fifth of the debug one `cargo xtask` runs), built here unless the
    // runners are prebuilt.
    let release = crate::workspace::binary(&crate::workspace::target_dir(), "xtask");
    let xtask = match crate::workspace::prebuilt_dir() {
        None => crate::build::build_release_xtask()?,
        Some(_) if release.is_file() => release,
        Some(_) => std::env::current_exe().context("cannot find xtask's own binary")?,
    };
    let inputs = KitInputs {
        xtask,
        runners,
        vulkan_loader: Some(vulkan_loader),
        cuda_api: Some(cuda_api),
        plan,
        carried_cache,
    };
    let tree = tracked_tree_bytes(&workspace_root())?;
    let total = assemble(&inputs, &out, budget(tree)).context(
        "`--backends cuda` leaves wgpu's runner for another window, or commit less under \
         docs/results",
    )?;
    println!("{}", files::sizes_line(&out, total, tree));
    Ok(true)
}

/// `--out` must be new, empty or an earlier kit (which is replaced).
fn check_out(out: &Path) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    let empty = std::fs::read_dir(out)
        .with_context(|| format!("--out {}: cannot read it", out.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(());
    }
    if out.join("kit.json").is_file() {
        return std::fs::remove_dir_all(out)
            .with_context(|| format!("cannot replace the earlier kit in {}", out.display()));
    }
    bail!(
        "--out {}: exists, is not empty and is not a GPU kit; choose a new or empty directory",
        out.display()
    )
}

/// `13000` as `13.0`.
fn cuda_api_name(v: &str) -> String {
    v.parse::<u32>()
        .map(|n| format!("{}.{}", n / 1000, n % 1000 / 10))
        .unwrap_or_else(|_| v.to_string())
}

fn out_or_default(out: Option<&Path>) -> PathBuf {
    out.map(Path::to_path_buf)
        .unwrap_or_else(|| crate::workspace::target_dir().join("gpu-kit"))
}

/// The Vulkan loader to carry to a machine that may not have one (the H200 machines have the
/// NVIDIA driver's Vulkan ICD but no loader): this machine's (Debian's libvulkan1), else the
/// package fetched with `apt-get download` and unpacked beside the kit; else an error naming
/// the fix.
fn vulkan_loader(out: &Path) -> Result<PathBuf> {
    let installed = [
        "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
        "/usr/lib64/libvulkan.so.1",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.is_file())
    .and_then(|p| p.canonicalize().ok());
    if let Some(lib) = installed {
        return Ok(lib);
    }
    eprintln!("kiln: no Vulkan loader here; fetching Debian's libvulkan1 for the kit");
    let parent = out.parent().unwrap_or(Path::new("."));
    let dir = parent.join("gpu-kit-libvulkan1");
    let fetched = (|| -> Result<PathBuf> {
        std::fs::create_dir_all(&dir)?;
        let ok = std::process::Command::new("apt-get")
            .args(["download", "libvulkan1"])
            .current_dir(&dir)
            .status()?
            .success();
        let deb = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .filter(|_| ok)
            .context("apt-get download libvulkan1 fetched nothing")?;
        let unpacked = dir.join("root");
        let ok = std::process::Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&unpacked)
            .status()?
            .success();
        let lib = unpacked.join("usr/lib/x86_64-linux-gnu/libvulkan.so.1");
        if !ok || !lib.exists() {
            bail!(
                "{} holds no usr/lib/x86_64-linux-gnu/libvulkan.so.1",
                deb.display()
            );
        }
        Ok(lib.canonicalize()?)
    })();
    fetched.map_err(|e| {
        anyhow::anyhow!(
            "the kit must carry a Vulkan loader for its wgpu rows, and none could be had here \
             ({e:#}): install Debian's libvulkan1 (`apt-get install libvulkan1`) and run \
             `cargo xtask gpu-kit` again"
        )
    })
}

/// The xtask binary and each runner built, stripped and compressed into `bin`; a runner that
/// did not build leaves a `.missing` file saying why. Returns the packages carried and those
/// missing with why.
#[allow(clippy::type_complexity)]
fn carry_runners(inputs: &KitInputs, bin: &Path) -> Result<(Vec<String>, Vec<(String, String)>)> {
    compress(&inputs.xtask, &bin.join("xtask.xz"))?;
    let mut carried = Vec::new();
    let mut missing = Vec::new();
    for (package, built) in &inputs.runners {
        match built {
            Ok(exe) => {
                eprintln!("kiln: stripping and compressing {}", exe.display());
                compress(exe, &bin.join(format!("{package}.xz")))?;
                carried.push(package.clone());
            }
            Err(why) => {
                write(&bin.join(format!("{package}.missing")), &format!("{why}\n"))?;
                missing.push((package.clone(), why.clone()));
            }
        }
    }
    Ok((carried, missing))
}

/// An error naming every file the kit should hold and does not.
fn check_complete(inputs: &KitInputs, out: &Path, files: &[(String, u64)]) -> Result<()> {
    let runner_files: Vec<(&str, bool)> = inputs
        .runners
        .iter()
        .map(|(p, built)| (p.as_str(), built.is_ok()))
        .collect();
    let absent: Vec<String> = expected_files(&runner_files)?
        .into_iter()
        .filter(|f| f != "kit.json" && !files.iter().any(|(have, _)| have == f))
        .collect();
    if !absent.is_empty() {
        bail!(
            "the kit in {} lacks {} (a bug in `cargo xtask gpu-kit`)",
            out.display(),
            absent.join(", ")
        );
    }
    Ok(())
}

/// Write the kit into `out` and return its size; an error when it is over `budget` bytes.
pub fn assemble(inputs: &KitInputs, out: &Path, budget: u64) -> Result<u64> {
    let root = workspace_root();
    let bin = out.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot create {}", bin.display()))?;
    let (carried, missing) = carry_runners(inputs, &bin)?;
    for file in crate::backends::reference_files()? {
        copy(&root.join(&file), &out.join(&file))?;
    }
    let run_sh = out.join("run.sh");
    copy(&root.join(RUN_SCRIPT), &run_sh)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&run_sh, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", run_sh.display()))?;
    }
    let vulkan_loader = match &inputs.vulkan_loader {
        Some(lib) => {
            copy(lib, &out.join("vulkan/libvulkan.so.1"))?;
            Ok(lib.display().to_string())
        }
        None => Err(
            "no libvulkan.so.1 on the machine that built the kit (apt-get install \
                     libvulkan1 there to carry one)"
                .to_string(),
        ),
    };
    write(
        &out.join("backends.json"),
        &serde_json::to_string_pretty(&kit_metadata(&root)?)?,
    )?;
    let common = kit_common_args();
    let planned = crate::bench::write_plan(
        &out.join("plan"),
        &common,
        &inputs.plan.entries(),
        Some(inputs.plan.time_limit),
    )?;
    write(&out.join("plan/after.tsv"), &plan::after_tsv())?;
    if let Some(cache) = &inputs.carried_cache {
        copy(cache, &out.join("carried").join(CARRIED_CACHE))?;
    }
    let (commit, dirty) = crate::workspace::revision();
    write(
        &out.join("kit.env"),
        &format!(
            "KILN_COMMIT={}\nKILN_DIRTY={}\nKILN_KIT_WINDOW={}\n",
            commit.clone().unwrap_or_else(|| "unknown".into()),
            match dirty {
                Some(true) => "1",
                Some(false) => "0",
                None => "",
            },
            plan::WINDOW.as_secs()
        ),
    )?;
    write(
        &out.join("README.txt"),
        &readme(
            &carried,
            &missing,
            kiln_engine::cubecl_llvm::stand_in(&root),
            inputs.cuda_api.as_deref(),
            &inputs.plan,
        ),
    )?;
    let files = contents(out)?;
    check_complete(inputs, out, &files)?;
    let mut total: u64 = files.iter().map(|(_, n)| n).sum();
    let info = KitInfo {
        kiln_commit: commit,
        kiln_dirty: dirty,
        created_at: crate::time::unix_now(),
        runners: carried,
        missing,
        vulkan_loader,
        cubecl_llvm: kiln_engine::cubecl_llvm::stand_in(&root),
        cuda_api: inputs.cuda_api.as_deref().map(cuda_api_name),
        cells: planned.iter().filter(|c| c.not_planned.is_none()).count(),
        plan: inputs.plan.text(),
        files,
        total_bytes: total,
    };
    let json = serde_json::to_string_pretty(&info)?;
    total += json.len() as u64;
    write(&out.join("kit.json"), &json)?;
    check_budget(out, total, budget)?;
    Ok(total)
}

/// The `cargo metadata` of the kit's runner crates, as `KILN_BACKENDS_FILE` reads it there.
fn kit_metadata(root: &Path) -> Result<cargo_metadata::Metadata> {
    let mut metadata = backends::metadata(root)?;
    metadata.packages.retain(|p| {
        p.metadata
            .pointer("/kiln/backend")
            .and_then(|b| b.as_str())
            .is_some_and(|b| RUNNERS.contains(&b))
    });
    let kept: Vec<_> = metadata.packages.iter().map(|p| p.id.clone()).collect();
    metadata.workspace_members.retain(|id| kept.contains(id));
    metadata.resolve = None;
    Ok(metadata)
}

fn readme(
    carried: &[String],
    missing: &[(String, String)],
    llvm: Option<String>,
    cuda_api: Option<&str>,
    plan: &KitPlan,
) -> String {
    let mut text = String::from(
        "Kiln GPU kit: Kiln's GPU rows on a Linux x86-64 machine with an NVIDIA driver, without \
         a Rust toolchain or network.\n\n    bash run.sh [OUT_DIR]\n\nrun.sh probes every runner, \
         trains the planned cells (plan/run.json) and writes results.jsonl, report.md, \
         report.html, charts and logs under OUT_DIR. The PyTorch rows use the first Python that \
         imports torch (KILN_PYTORCH_PYTHON names one).\n\n",
    );
    text.push_str(&format!("Runners carried: {}\n", carried.join(", ")));
    for (package, why) in missing {
        text.push_str(&format!("Not carried: {package}: {why}\n"));
    }
    if let Some(llvm) = llvm {
        text.push_str(&format!(
            "CubeCL's kernel compiler was built with {llvm} (`cargo xtask setup-cubecl-llvm`).\n"
        ));
    }
    if let Some(api) = cuda_api {
        text.push_str(&format!(
            "The CUDA runner uses the CUDA {} driver API: NVIDIA driver 580 or newer \
             (CUDARC_CUDA_VERSION={api} when the kit was built).\n",
            cuda_api_name(api)
        ));
    }
    text.push('\n');
    text.push_str(&plan.text());
    text
}

#[cfg(test)]
mod tests {
    use super::plan::{MEASURED, measured};
    use super::*;
    use std::process::Command;

    /// The newest kit a committed run describes (`kit.json`): its files, CUDA's runner, xtask
    /// and the rest but wgpu's runner, fits beside today's tracked tree within what a GPU
    /// machine is sent, with room for the tree to grow.
    #[test]
    fn the_tracked_tree_and_the_kit_fit_the_gpu_machine() {
        let root = workspace_root();
        let tree = tracked_tree_bytes(&root).unwrap();
        let mut kits: Vec<(u64, u64)> = Vec::new();
        for entry in std::fs::read_dir(root.join("docs/results")).unwrap() {
            let path = entry.unwrap().path().join("kit.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let info: serde_json::Value = serde_json::from_str(&text).unwrap();
            let without_wgpu: u64 = info["files"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f[0] != "bin/kiln-wgpu.xz")
                .filter_map(|f| f[1].as_u64())
                .sum();
            kits.push((info["created_at"].as_u64().unwrap(), without_wgpu));
        }
        let (_, kit) = kits.into_iter().max().expect("a committed kit.json");
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        assert!(
            kit <= budget(tree),
            "the tracked tree ({:.1} MiB) and the kit ({:.1} MiB) leave under {} MiB of the GPU \
             machine's {} MiB: commit less under docs/results",
            mib(tree),
            mib(kit),
            files::TREE_ROOM >> 20,
            files::DEVICE_BYTES >> 20
        );
        // No dataset cache is committed (a run's logs/*.kdata: megabytes, rebuilt by any run).
        let out = Command::new("git")
            .args(["-C", root.to_str().unwrap(), "ls-files", "*.kdata"])
            .output()
            .unwrap();
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// A small real program to stand in for a runner (strip needs an executable file).
    fn small_program() -> PathBuf {
        ["/usr/bin/true", "/bin/true"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .expect("a `true` program")
    }

    #[test]
    fn a_kit_holds_its_runners_plan_script_and_fits_its_budget() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("kit");
        let inputs = KitInputs {
            xtask: small_program(),
            runners: vec![
                (
                    "kiln-cuda".into(),
                    Err("LLVM could not be downloaded".into()),
                ),
                ("kiln-wgpu".into(), Ok(small_program())),
            ],
            vulkan_loader: None,
            cuda_api: Some(CUDA_API.into()),
            plan: plan::plan(&measured().unwrap(), MEASURED, None).unwrap(),
            carried_cache: None,
        };
        let total = assemble(&inputs, &out, files::DEVICE_BYTES).unwrap();
        let files = contents(&out).unwrap();
        let mut names: Vec<String> = files
            .iter()
            .map(|(f, _)| f.clone())
            .filter(|f| !f.starts_with("plan/cells/"))
            .collect();
        names.sort();
        assert_eq!(
            names,
            expected_files(&[("kiln-cuda", false), ("kiln-wgpu", true)]).unwrap()
        );
        assert_eq!(total, files.iter().map(|(_, n)| n).sum::<u64>());
        // One request per cell of the matrix, and the plan names each of them: the cells it
        // could not fit too, each with why (they are recorded, never run).
        let requests = files
            .iter()
            .filter(|(f, _)| f.starts_with("plan/cells/"))
            .count();
        assert_eq!(requests, inputs.plan.entries().len());
        let plan = std::fs::read_to_string(out.join("plan/run.json")).unwrap();
        assert!(plan.contains("\"cuda:0\"") && plan.contains("vulkan:discrete:0"));
        let not_planned = plan.matches("\"not_planned\"").count();
        assert_eq!(not_planned, inputs.plan.dropped.len());
        assert!(
            not_planned > 0,
            "the two-GPU cell does not fit the H200's one device"
        );
        // The reason a runner is missing travels with the kit, for the run there to show.
        let why = std::fs::read_to_string(out.join("bin/kiln-cuda.missing")).unwrap();
        assert!(why.contains("LLVM"), "{why}");
        // The compressed runner unpacks to the stripped program.
        let unpacked = Command::new("xz")
            .args(["-dc"])
            .arg(out.join("bin/kiln-wgpu.xz"))
            .output()
            .unwrap();
        assert!(unpacked.status.success() && unpacked.stdout.starts_with(b"\x7fELF"));
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("kit.json")).unwrap()).unwrap();
        assert_eq!(info["cells"], inputs.plan.cells.len());
        assert_eq!(info["runners"], serde_json::json!(["kiln-wgpu"]));
        // The backends' metadata lists exactly the kit's runner crates, as discovery reads it.
        let meta: cargo_metadata::Metadata =
            serde_json::from_str(&std::fs::read_to_string(out.join("backends.json")).unwrap())
                .unwrap();
        let mut found: Vec<String> = backends::from_metadata(&meta)
            .unwrap()
            .iter()
            .map(|b| b.name.clone())
            .collect();
        found.sort();
        assert_eq!(found, ["cuda", "pytorch", "wgpu"]);
        // An earlier kit is replaced, anything else refused.
        check_out(&out).unwrap();
        assert!(!out.exists());
        std::fs::create_dir_all(tmp.path().join("other")).unwrap();
        std::fs::write(tmp.path().join("other/file"), "x").unwrap();
        let err = check_out(&tmp.path().join("other"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a GPU kit"), "{err}");
    }

    #[test]
    fn a_kit_over_its_budget_is_an_error_naming_its_largest_files() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("kit");
        let inputs = KitInputs {
            xtask: small_program(),
            runners: vec![("kiln-wgpu".into(), Ok(small_program()))],
            vulkan_loader: None,
            cuda_api: Some(CUDA_API.into()),
            plan: plan::plan(&measured().unwrap(), MEASURED, None).unwrap(),
            carried_cache: None,
        };
        let err = assemble(&inputs, &out, 1000).unwrap_err().to_string();
        assert!(err.contains("over its budget"), "{err}");
        assert!(err.contains("MiB"), "{err}");
    }

    /// run.sh, run for real on a kit whose xtask only writes down how it was called: the plan,
    /// then each command of plan/after.tsv into its own folder, each with the window's time
    /// left less what the later ones are given, so a short window skips the earlier ones. The
    /// last window's CubeCL caches the kit carries are where the cells find them, and the run
    /// packs them, with what its cells added, for the next window.
    #[test]
    fn run_sh_runs_the_matrix_then_the_commands_after_it_within_the_window() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("kit");
        let last = tmp.path().join("last-cache");
        std::fs::create_dir_all(&last).unwrap();
        std::fs::write(last.join("default.db"), "tuned").unwrap();
        let tgz = tmp.path().join(CARRIED_CACHE);
        let packed = Command::new("tar")
            .arg("-czf")
            .arg(&tgz)
            .arg("-C")
            .arg(&last)
            .arg(".")
            .status()
            .unwrap();
        assert!(packed.success());
        let inputs = KitInputs {
            xtask: small_program(),
            runners: vec![],
            vulkan_loader: None,
            cuda_api: Some(CUDA_API.into()),
            plan: plan::plan(&measured().unwrap(), MEASURED, None).unwrap(),
            carried_cache: Some(tgz),
        };
        assemble(&inputs, &out, files::DEVICE_BYTES).unwrap();
        let fake = tmp.path().join("xtask");
        // The fake's cells find the carried cache and add to it, as CubeCL would.
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"$*\" >>\"$KILN_FAKE_LOG\"\nif [ \"$1\" = bench-all ]; then \
             cat \"$XDG_CACHE_HOME/cubecl/default.db\" >>\"$KILN_FAKE_LOG.cache\"; \
             echo kernels >\"$XDG_CACHE_HOME/cubecl/added\"; fi\n",
        )
        .unwrap();
        let xz = Command::new("xz").arg("-c").arg(&fake).output().unwrap();
        std::fs::write(out.join("bin/xtask.xz"), xz.stdout).unwrap();
        let run = |name: &str, timeout: Option<&str>| {
            let log = tmp.path().join(format!("{name}.log"));
            let mut command = Command::new("bash");
            command
                .arg(out.join("run.sh"))
                .arg(tmp.path().join(name))
                .env("KILN_FAKE_LOG", &log)
                .env_remove("KILN_PYTORCH_PYTHON")
                .env_remove("KILN_KIT_TIMEOUT");
            if let Some(t) = timeout {
                command.env("KILN_KIT_TIMEOUT", t);
            }
            let done = command.output().unwrap();
            let said = String::from_utf8_lossy(&done.stdout).into_owned();
            assert!(done.status.success(), "{said}");
            (std::fs::read_to_string(&log).unwrap(), said)
        };
        let (calls, _) = run("whole", None);
        let lines: Vec<&str> = calls.lines().collect();
        let whole = tmp.path().join("whole");
        assert_eq!(lines[0], "doctor");
        assert_eq!(lines[2], format!("bench-all --resume {}", whole.display()));
        for (line, after) in lines[3..].iter().zip(plan::AFTER) {
            let want = format!(
                "{} --out {}",
                after.args.join(" "),
                whole.join(after.name).display()
            );
            assert_eq!(*line, want);
        }
        assert_eq!(lines.len(), 3 + plan::AFTER.len(), "{calls}");
        let seen = std::fs::read_to_string(tmp.path().join("whole.log.cache")).unwrap();
        assert_eq!(seen, "tuned", "the cells found the last window's cache");
        let listed = Command::new("tar")
            .arg("-tzf")
            .arg(whole.join(CARRIED_CACHE))
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.contains("default.db") && listed.contains("added"),
            "{listed}"
        );
        // A window too short for the first command after the matrix skips it, not the last.
        let (calls, said) = run("short", Some("50"));
        let (first, last) = (&plan::AFTER[0], &plan::AFTER[plan::AFTER.len() - 1]);
        assert!(said.contains(&format!("{}: skipped", first.name)), "{said}");
        let ran = calls.lines().last().unwrap();
        assert!(ran.starts_with(&last.args.join(" ")), "{calls}");
    }

    #[test]
    fn run_sh_is_valid_bash_and_reads_the_files_a_kit_has() {
        let script = workspace_root().join(RUN_SCRIPT);
        let status = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .status()
            .unwrap();
        assert!(status.success(), "bash -n {}", script.display());
        let text = std::fs::read_to_string(&script).unwrap();
        for needed in [
            "bin/",
            "kit.env",
            "backends.json",
            "plan",
            "vulkan/libvulkan.so.1",
            "KILN_RUNNER_DIR",
            "KILN_ROOT",
            "KILN_PYTORCH_PYTHON",
            "nvidia-smi -q",
            "bench-all --resume",
            "VK_DRIVER_FILES",
            "ldd",
        ] {
            assert!(text.contains(needed), "run.sh does not use {needed}");
        }
    }
}
