//! The flex runner: `kiln-flex --probe` lists devices; `kiln-flex --model NAME ...` trains one cell.

fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_flex::FlexBinding)
}
