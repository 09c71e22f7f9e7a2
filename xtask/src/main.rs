//! `cargo xtask`: Kiln's task runner. It parses the command line and hands each command to
//! the engine (`kiln-engine`: plan, build the runners, run the cells, write the records and
//! the run's report) or to the thin module of its own here. It never trains.

mod doctor;
mod fetch;
mod flags;
mod kit;
mod layout;
mod llvm;
mod readme;
mod report;
mod serve;
mod site;
mod test;

use std::process::ExitCode;

use kiln_engine::{
    backends, bench, build, burns, explain, infer, run_report, runners, time, torch, verify,
    workspace,
};

use clap::{CommandFactory, FromArgMatches};

use flags::{BurnArgs, CommonArgs};
use flags::{Cli, Cmd};

/// Hand the remote token and a run's remote devices to every runner it starts (probes
/// included) in their environment: never in a request file, which a run directory keeps.
fn remote_environment(cmd: &Cmd) -> anyhow::Result<()> {
    let remote = |d: &&String| d.starts_with("remote:");
    let (common, devices): (&CommonArgs, Vec<String>) = match cmd {
        Cmd::BenchAll {
            common,
            remote: flags::DeviceArg { device: devices },
            ..
        } => {
            // bench-all's --device only adds remote devices.
            if let Some(bad) = devices.iter().find(|d| !remote(d)) {
                anyhow::bail!(
                    "bench-all --device {bad:?}: bench-all picks each backend's devices itself \
                     (--all-devices for every one); --device adds remote ones, \
                     remote:ws://HOST:PORT[#INDEX]. A local device: `cargo xtask bench --device`"
                );
            }
            (common, devices.clone())
        }
        Cmd::Bench { common, device, .. } => (
            common,
            device.device.iter().filter(remote).cloned().collect(),
        ),
        _ => return Ok(()),
    };
    // SAFETY: called first in main, before any thread exists (the interrupt handler's included).
    unsafe {
        if let Some(t) = &common.token.token {
            std::env::set_var(kiln_contract::REMOTE_TOKEN_VAR, t);
        }
        if !devices.is_empty() {
            std::env::set_var(kiln_contract::REMOTE_DEVICES_VAR, devices.join(","));
        }
    }
    Ok(())
}

/// The flags of `subcommand` given on the command line: each argument's id beside its name
/// (`--loop` for `training_loop`). The groups clap makes of each flattened struct are no flags.
fn given(matches: &clap::ArgMatches, subcommand: &str) -> Vec<(String, String)> {
    let command = Cli::command();
    let (Some(sub), Some(m)) = (
        command.find_subcommand(subcommand),
        matches.subcommand_matches(subcommand),
    ) else {
        return Vec::new();
    };
    m.ids()
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .filter_map(|id| Some((id.to_string(), flags::flag_name(sub, id.as_str())?)))
        .collect()
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let given = CommandLines {
        bench_all: given(&matches, "bench-all"),
        bench: given(&matches, "bench"),
    };
    if let Err(e) = remote_environment(&cli.command) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    bench::install_interrupt_handler();
    let result = run(cli.command, &given);
    if bench::interrupted() {
        return ExitCode::from(130);
    }
    match result {
        Ok(true) if bench::rundir::some_cell_untimed() => {
            ExitCode::from(bench::rundir::EXIT_UNTIMED)
        }
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The flags given on the command line of `bench-all` and of `bench` (`--resume` and
/// `--cell` refuse the others).
struct CommandLines {
    bench_all: Vec<(String, String)>,
    bench: Vec<(String, String)>,
}

/// Run the command; `Ok(false)` when it ran but something failed.
fn run(command: Cmd, given: &CommandLines) -> anyhow::Result<bool> {
    match command {
        Cmd::BenchAll {
            common,
            backends: flags::BackendsArg { backends },
            models: flags::ModelsArg { models },
            precisions: flags::PrecisionsArg { precisions },
            resume,
            all_devices,
            plan_only: flags::PlanOnlyArg { plan_only },
            remote: flags::DeviceArg { device: remote },
            burns: BurnArgs { burn },
        } => match resume {
            Some(dir) => bench::resume(
                &dir,
                &common,
                &given.bench_all,
                backends,
                models,
                precisions,
            ),
            None if !burn.is_empty() => bench::ab::bench_ab(
                &common,
                &burn,
                backends,
                models,
                precisions,
                !remote.is_empty(),
            ),
            None => bench::bench_all(
                &common,
                backends,
                models,
                precisions,
                all_devices,
                plan_only,
                !remote.is_empty(),
            ),
        },
        bench @ Cmd::Bench { .. } => run_bench(bench, &given.bench),
        Cmd::Explain(args) => explain::explain(args),
        Cmd::Verify(args) => verify::verify(args),
        Cmd::Infer(args) => infer::infer(args),
        Cmd::GpuKit {
            out,
            backends: flags::BackendsArg { backends },
            plan_only: flags::PlanOnlyArg { plan_only },
            profile,
            replay,
            after,
        } => match replay {
            Some(device) => kit::replay(&device, profile.as_deref(), out.dir),
            None => kit::gpu_kit(out.dir, backends, (plan_only, after), profile),
        },
        Cmd::SetupCubeclLlvm { llvm_config, undo } => llvm::setup(llvm_config, undo),
        Cmd::SetupLibtorch { venv, python } => torch::setup(venv, &python).map(|_| true),
        Cmd::Test {
            burns: BurnArgs { burn },
            ..
        } if !burn.is_empty() => burn
            .iter()
            .try_fold(true, |ok, spec| Ok(crate::burns::check(spec)? && ok)),
        Cmd::Test { extra, .. } => test::run(&extra),
        Cmd::Serve {
            serve,
            burns: BurnArgs { burn },
        } => serve::serve(serve, &burn),
        Cmd::Doctor { json, build } => doctor::doctor(json, build),
        Cmd::Report {
            paths,
            baseline,
            expect,
            outputs,
        } => report::report(&paths, baseline.as_deref(), &outputs)
            .and_then(|records| report::expect(&records, &expect)),
        Cmd::Site { out, runs } => site::site(out.dir, &runs),
        Cmd::Submit { run, what } => site::submit(&run, what.as_deref()),
        Cmd::FetchData {
            name,
            dest,
            base_url,
        } => fetch::fetch_data(&name, dest, base_url.as_deref()).map(|_| true),
    }
}

/// `cargo xtask bench`: a request file, one cell against other Burns, or one cell.
fn run_bench(command: Cmd, given: &bench::Given) -> anyhow::Result<bool> {
    let Cmd::Bench {
        common,
        cell,
        backend,
        device,
        api,
        model,
        precision,
        bare,
        devices,
        data_parallel,
        burns: BurnArgs { burn },
    } = command
    else {
        anyhow::bail!("not a `bench` command");
    };
    if let Some(file) = cell.cell {
        return bench::cell_only(given).and_then(|_| bench::bench_request(&file, common.out.get()));
    }
    let device = device.one("bench")?;
    let precision = precision.one("bench")?;
    let devices = (!devices.devices.is_empty()).then_some(devices.devices);
    match (backend.backend, model.one("bench")?) {
        (Some(backend), Some(model)) if !burn.is_empty() => bench::ab::bench_ab(
            &common,
            &burn,
            Some(vec![backend]),
            Some(vec![model]),
            Some(vec![precision]),
            false,
        ),
        (backend, Some(model)) => {
            bench::one_backend(backend, device.as_deref()).and_then(|backend| {
                bench::bench_one(
                    &common,
                    bench::OneCell {
                        backend: &backend,
                        device,
                        api,
                        model,
                        precision,
                        bare,
                        devices,
                        data_parallel,
                    },
                )
            })
        }
        (_, None) => Err(anyhow::anyhow!(
            "`bench` needs --backend and --model, or --cell FILE"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags given are arguments only, never the groups clap makes of flattened structs:
    /// `bench --cell FILE --out DIR` gives `cell` and `out`, which `--cell` allows.
    #[test]
    fn the_flags_given_are_the_arguments_typed() {
        let typed = |extra: &[&str]| {
            let line = ["cargo-xtask", "bench", "--cell", "c.json", "--out", "dir"];
            let matches = Cli::command().get_matches_from(line.iter().chain(extra));
            given(&matches, "bench")
        };
        let mut ids: Vec<String> = typed(&["--model", "mlp"])
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["cell", "models", "out"]);
        assert!(bench::cell_only(&typed(&["--model", "mlp"])).is_err());
        assert!(bench::cell_only(&typed(&[])).is_ok());
    }
}
