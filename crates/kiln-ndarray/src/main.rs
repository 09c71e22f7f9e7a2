//! The ndarray runner: `kiln-ndarray --probe` lists devices; `kiln-ndarray --model NAME ...` trains one cell.

fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_ndarray::NdarrayBinding)
}
