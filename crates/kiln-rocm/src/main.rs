fn main() -> std::process::ExitCode {
    kiln_core::runner::main(&kiln_rocm::ROCM)
}
