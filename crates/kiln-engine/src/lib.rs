//! Kiln's engine, a library: plan a matrix of cells (`bench::plan`), build and probe the
//! runners (`build`, `runners`, the backends they come from in `backends`, the PyTorch
//! reference's environment in `torch`), run one supervised child process per cell
//! (`bench::execute`, `bench::child`, `supervise`), keep the records as they arrive and write
//! the run's report (`bench::rundir`, `run_report`). Another Burn for an A/B run lives in
//! `burns` (its comparison rewritten in `ab`); `explain` times every op of a step, `verify`
//! checks the backends compute the same training and `infer` measures serving from the same
//! weights; the options of them all are in `options`. `cargo xtask` calls it; so can a program
//! or a CI job (`examples/run.rs`). It never trains: the runners do.

pub mod answer;
pub mod backends;
pub mod bench;
pub mod build;
pub mod burns;
pub mod cubecl_llvm;
pub mod datasets;
pub mod explain;
pub mod flags;
pub mod infer;
pub mod options;
pub mod run_report;
pub mod runners;
pub mod supervise;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod torch;
pub mod verify;
pub mod workspace;
