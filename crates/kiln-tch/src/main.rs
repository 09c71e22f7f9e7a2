//! The tch runner: `kiln-tch --probe` lists libtorch devices; `kiln-tch --model NAME ...` trains
//! one cell.

fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_tch::TchBinding)
}
