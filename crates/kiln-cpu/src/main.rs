//! The burn-cpu runner: `kiln-cpu --probe` lists devices; `kiln-cpu --model NAME ...` trains one cell.

fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_cpu::CpuBinding)
}
