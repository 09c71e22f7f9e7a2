//! The runner binary every backend crate provides: `kiln-<backend> --probe` reports devices;
//! `kiln-<backend> --cell FILE` (a request file xtask writes; `cargo xtask bench` writes one from
//! flags) trains one cell and prints JSON lines (events, then one final record) on standard
//! output. Human-readable notes go to standard error. [`bench`] is the
//! same thing as a library call, for programs that embed one backend crate.

mod cell;

use cell::{Cell, run_cell};

use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;

use kiln_contract::{CellRequest, DataKind, Event, ProbeReport, Record, SCHEMA_VERSION, Status};

use crate::device::{Binding, panic_text};

fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(event) {
        // A closed pipe means the parent is gone; there is nobody left to tell.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Train and time one cell on `binding`'s device as `request` says, sending progress events to
/// `sink`, and return its record: the library form of a runner, for a program that embeds one
/// backend crate. A request that does not validate, a failure and a panic inside the backend
/// all become a record whose status says so; this never panics. CubeCL's autotune settings
/// (`request.autotune`, `request.autotune_cache`) are environment variables read when a
/// device starts: only the runner binary sets them (see [`set_runtime_env`]).
pub fn train_cell(
    binding: &dyn Binding,
    request: &CellRequest,
    sink: &mut dyn FnMut(&Event),
) -> Record {
    train_checked(binding, request, request.validate(), Vec::new(), sink)
}

/// [`train_cell`] given the request's one check (`CellRequest::validate`): the library form
/// makes it here, the runner binary when it reads its file (`CellRequest::read`); `args`: the
/// runner's command line, for the record.
fn train_checked(
    binding: &dyn Binding,
    request: &CellRequest,
    checked: Result<(), String>,
    args: Vec<String>,
    sink: &mut dyn FnMut(&Event),
) -> Record {
    let mut cell = Cell {
        request,
        // A data-parallel cell is its device list (`cuda:0,cuda:1`), skipped or not.
        device: request.id().device,
        device_name: request.device.clone(),
        dataset: String::new(),
        data_note: None,
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        started: Instant::now(),
        args,
        threads: binding.threads(),
        device_kind: None,
        runtime: None,
        remote: None,
        backend_version: binding.version().into(),
        flops_per_sample: None,
        peak: None,
        data: DataKind::Synthetic,
    };
    if let Err(e) = checked {
        return cell.record(Status::Failed, Some(e), None);
    }
    // A replayed cell keeps the backend it replays; any runner plays it.
    if request.backend != binding.name() && request.replay.is_none() {
        return cell.record(
            Status::Failed,
            Some(format!(
                "the request is for backend {:?}, this is {}",
                request.backend,
                binding.name()
            )),
            None,
        );
    }
    // A panic inside a backend (an unsupported op, an allocation failure) becomes this cell's
    // failed record instead of a silent crash.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| run_cell(binding, &mut cell, sink)));
    match result {
        Ok(Ok(record)) => record,
        Ok(Err(e)) => {
            eprintln!("kiln: {e}");
            let e = e.to_string();
            cell.record(failure_status(&e), Some(e), None)
        }
        Err(panic) => {
            let text = panic_text(panic.as_ref());
            cell.record(
                failure_status(&text),
                Some(format!("the backend panicked: {text}")),
                None,
            )
        }
    }
}

/// A failure's status: out of memory when its text says so (a result at this batch size),
/// else failed.
fn failure_status(text: &str) -> Status {
    if kiln_contract::says_out_of_memory(text) {
        Status::OutOfMemory
    } else {
        Status::Failed
    }
}

/// The runner's flags: what it answers. A cell comes whole, as the request file xtask writes
/// (`cargo xtask bench` runs one from flags; `bench-all --plan-only` writes them all).
#[derive(Parser, Debug)]
#[command(
    about = "Kiln runner: probes this backend's devices, or runs one request xtask wrote, and prints JSON lines",
    after_help = "Run by cargo xtask. To train a cell from flags, use `cargo xtask bench --backend NAME \
                  --model NAME ...`; to run a planned cell by hand, pass its file from a run's cells/."
)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["probe", "cell", "explain", "verify", "infer"])))]
struct Args {
    /// Print this backend's devices as JSON and exit.
    #[arg(long)]
    probe: bool,
    /// Train and time a cell (`--cell FILE`, the request file xtask writes).
    #[command(flatten)]
    cell: kiln_contract::flags::CellArg,
    /// Time every operation of one training step alone (an explain request) and print the
    /// record as one JSON line.
    #[arg(long, value_name = "FILE")]
    explain: Option<PathBuf>,
    /// Train K steps from given weights on the first K batches and print the losses (a verify
    /// request) as one JSON line.
    #[arg(long, value_name = "FILE")]
    verify: Option<PathBuf>,
    /// Load given weights and measure inference (an inference request: first prediction,
    /// latency percentiles, throughput, memory, logits) and print the record as one JSON line.
    #[arg(long, value_name = "FILE")]
    infer: Option<PathBuf>,
}

/// The runner's `main`: parse arguments, probe or train, print JSON lines.
pub fn main(binding: &dyn Binding) -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let args = match Args::try_parse_from(&argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    if args.probe {
        let report = ProbeReport {
            backend: binding.name().into(),
            backend_version: binding.version().into(),
            devices: binding.probe(),
        };
        match serde_json::to_string(&report) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("kiln: cannot encode the probe report: {e}");
                return ExitCode::from(1);
            }
        }
        return ExitCode::SUCCESS;
    }
    if let Some(code) = answer_question(binding, &args) {
        return code;
    }
    let Some(path) = &args.cell.cell else {
        // clap requires one of --probe, --cell, --explain, --verify.
        return ExitCode::from(2);
    };
    let request = match CellRequest::read(path) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
    };
    set_runtime_env(&request);
    // `read` validated the request.
    let record = train_checked(binding, &request, Ok(()), argv[1..].to_vec(), &mut |e| {
        emit(e)
    });
    if request.settings.cold_caches {
        // The cell's own environment served its one cold measurement.
        crate::cubecl::remove_environment();
    } else if left_its_kernels(&request, &record) {
        crate::cubecl::ran(&crate::cubecl::cell_key(
            &record.model,
            &record.backend,
            &record.device,
            &record.precision,
            record.batch_size,
        ));
    }
    debug_assert_eq!(record.schema, SCHEMA_VERSION);
    let failed = record.status == Status::Failed;
    emit(&Event::Final(Box::new(record)));
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Whether the process that answered `request` with `record` left the cell's compiled and tuned
/// kernels in CubeCL's environment, so that the same cell starts `warm` next time: a CubeCL cell
/// that trained. Not a calibration, which measures GEMMs of its own shapes and leaves the cell
/// after it `shared`.
fn left_its_kernels(request: &CellRequest, record: &Record) -> bool {
    record.status == Status::Ok
        && !request.calibrate_only
        && record
            .runtime
            .as_ref()
            .is_some_and(|rt| rt.autotune_cache.is_some())
}

/// `--explain FILE`, `--verify FILE` or `--infer FILE`, when one was given: its exit code.
fn answer_question(binding: &dyn Binding, args: &Args) -> Option<ExitCode> {
    if let Some(path) = &args.explain {
        return Some(answer(
            path,
            "explain",
            kiln_contract::explain::ExplainRequest::read,
            |r| {
                let record = crate::explain::explain(binding, r);
                (serde_json::to_string(&record), record.status)
            },
        ));
    }
    if let Some(path) = &args.verify {
        return Some(answer(
            path,
            "verify",
            kiln_contract::verify::VerifyRequest::read,
            |r| {
                let record = crate::verify::verify(binding, r);
                (serde_json::to_string(&record), record.status)
            },
        ));
    }
    if let Some(path) = &args.infer {
        return Some(answer(
            path,
            "inference",
            kiln_contract::infer::InferRequest::read,
            |r| {
                if r.cold_caches {
                    cold_caches_env();
                }
                let record = crate::infer::infer(binding, r);
                if r.cold_caches {
                    crate::cubecl::remove_environment();
                }
                (serde_json::to_string(&record), record.status)
            },
        ));
    }
    None
}

/// `--explain FILE`, `--verify FILE` and `--infer FILE`: read the request with `read`, answer it with `run`
/// and print the record (`what`) as one JSON line; exit 1 when it failed.
fn answer<Q>(
    path: &std::path::Path,
    what: &str,
    read: fn(&std::path::Path) -> Result<Q, String>,
    run: impl FnOnce(&Q) -> (serde_json::Result<String>, Status),
) -> ExitCode {
    let request = match read(path) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
    };
    let (line, status) = run(&request);
    match line {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("kiln: cannot encode the {what} record: {e}");
            return ExitCode::from(1);
        }
    }
    if status == Status::Failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Turn the request's runtime settings into the environment CubeCL reads when a device starts.
/// Only for a process's `main`, before any other thread starts: setting the environment while
/// other threads read it is undefined behaviour.
pub fn set_runtime_env(request: &CellRequest) {
    let mut vars = Vec::new();
    if let Some(level) = request.settings.autotune {
        vars.push(("CUBECL_AUTOTUNE_LEVEL", level.name().to_string()));
    }
    if !request.settings.autotune_cache {
        vars.push(("CUBECL_AUTOTUNE_CACHE", "false".into()));
    }
    if request.settings.cold_caches {
        vars.extend(cold_caches_vars());
    }
    for (key, value) in vars {
        // SAFETY: called from `main` before any device, thread pool or other thread starts,
        // so nothing reads the environment concurrently.
        unsafe { std::env::set_var(key, value) };
    }
}

/// The environment of a cold start: a fresh CubeCL environment of its own (autotune results
/// and compiled kernels), and no Vulkan driver shader cache (Mesa's lavapipe and GPU drivers
/// keep one too).
fn cold_caches_vars() -> [(&'static str, String); 2] {
    [
        (
            "CUBECL_ENVIRONMENT",
            crate::cubecl::fresh_environment_name(),
        ),
        ("MESA_SHADER_CACHE_DISABLE", "true".into()),
    ]
}

/// Set [`cold_caches_vars`], from `main` before any device or thread starts.
fn cold_caches_env() {
    for (key, value) in cold_caches_vars() {
        // SAFETY: as in `set_runtime_env`: from `main`, before any other thread starts.
        unsafe { std::env::set_var(key, value) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{ModelKind, Profile};

    #[test]
    fn a_calibration_leaves_its_cell_shared_not_warm() {
        let mut request = CellRequest::new(ModelKind::Mlp, "burn-cpu", Profile::Quick);
        let mut record = Record::not_run(&request.id(), Status::Ok, "trained");
        record.runtime = Some(crate::cubecl::runtime("llvm", "", false, false));
        assert!(left_its_kernels(&request, &record));
        request.calibrate_only = true;
        assert!(!left_its_kernels(&request, &record));
        request.calibrate_only = false;
        record.status = Status::Failed;
        assert!(!left_its_kernels(&request, &record));
        record.status = Status::Ok;
        record.runtime = None;
        assert!(
            !left_its_kernels(&request, &record),
            "a backend without CubeCL's caches"
        );
    }
}
