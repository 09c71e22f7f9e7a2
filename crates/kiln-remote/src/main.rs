//! The remote runner: `kiln-remote --probe` lists the devices `KILN_REMOTE_DEVICES` names;
//! `kiln-remote --cell FILE` trains one cell on a remote device; `kiln-remote serve ...` hosts
//! this machine's devices for other machines' cells.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("serve") {
        let args = match kiln_remote::serve::ServeCommand::try_parse_from(
            std::iter::once("kiln-remote serve".to_string()).chain(argv.into_iter().skip(2)),
        ) {
            Ok(a) => a,
            Err(e) => {
                let _ = e.print();
                return ExitCode::from(2);
            }
        };
        return match kiln_remote::serve::run(args.args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("kiln: {why}");
                ExitCode::from(1)
            }
        };
    }
    kiln_core::runner::main(&kiln_remote::RemoteBinding)
}
