//! The wgpu runner: `kiln-wgpu --probe` lists adapters; `kiln-wgpu --model NAME ...` trains one cell.

fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_wgpu::WgpuBinding)
}
