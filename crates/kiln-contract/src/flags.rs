//! The flags that cross a process boundary, each defined once: those of `serve` (which
//! `cargo xtask serve` passes on to the server it builds) and those the runners take. The
//! engine's commands flatten the same definitions (`--cell`, `--backend`, `--devices`,
//! `--token`); the rest of the command line is kiln-engine's `options` and xtask's `flags`.

use std::path::PathBuf;

/// `--cell FILE`, one definition for the runners and `cargo xtask bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CellArg {
    /// The cell as a request file (one of a run's cells/*.json, or `bench-all --plan-only`'s):
    /// the whole cell, so no other flag that shapes a cell may be given with it.
    #[arg(long, value_name = "FILE")]
    pub cell: Option<PathBuf>,
}

/// `--backend`, one definition for `bench` and `serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BackendArg {
    /// The backend (`cargo xtask doctor` lists them). bench: the cell's (a remote --device
    /// implies it); serve: the one that computes, flex, ndarray, wgpu, cuda or rocm (each but
    /// flex built with the remote server in a target directory of its own).
    #[arg(long)]
    pub backend: Option<String>,
}

/// `--devices`, one definition for `bench` and `serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DevicesArg {
    /// Several devices of one backend, comma-separated (specs from `cargo xtask doctor`).
    /// bench: train the cell data-parallel on them through burn-train (the first holds the
    /// optimizer), and on the first alone for the scaling efficiency; implies --loop learner.
    /// serve: host them, clients picking one by position (`#0`, `#1`); default: the backend's
    /// default device.
    #[arg(long, value_delimiter = ',', value_name = "SPECS")]
    pub devices: Vec<String>,
}

/// The flags of `serve` (`cargo xtask serve` and `kiln-remote serve` share them; xtask passes
/// them on to the server it builds).
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("backend", |a| a.required(true)))]
pub struct ServeArgs {
    #[command(flatten)]
    pub backend: BackendArg,
    #[command(flatten)]
    pub devices: DevicesArg,
    /// Port of Burn's server; Kiln's link listens on the next one.
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on: loopback (this machine only) by default; any other needs a
    /// token.
    #[arg(long, value_name = "ADDR", default_value_t = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))]
    pub bind: std::net::IpAddr,
    #[command(flatten)]
    pub token: TokenArg,
}

impl ServeArgs {
    /// The backend to host (clap requires `--backend`; serve arguments built in code may lack it).
    pub fn backend(&self) -> Result<&str, String> {
        self.backend.backend.as_deref().ok_or_else(|| {
            "serve needs --backend NAME: the backend that computes (flex, ndarray, wgpu, cuda \
             or rocm)"
                .to_string()
        })
    }
}

/// `--token`, the one definition `serve`, `bench-all` and `bench` share.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TokenArg {
    /// The remote servers' token, or KILN_REMOTE_TOKEN: the one `serve` asks of its clients,
    /// the one remote cells give (`--device remote:...`). It goes to processes in their
    /// environment, never into a run directory or a command line.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
}
