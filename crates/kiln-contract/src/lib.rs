//! The contract between Kiln's engine, its runners (the PyTorch reference's too) and its
//! reports, without Burn: the names of models, precisions, datasets and device kinds, the cell
//! request every runner takes, the versioned record schema every runner writes, the probe
//! report, run profiles, the protocol's rules, summary statistics and the machine's
//! fingerprint. The reports made from records are `kiln-report`'s.

pub mod cell;
#[cfg(feature = "schema")]
pub mod contract;
pub mod drift;
pub mod events;
pub mod explain;
pub mod fingerprint;
#[cfg(feature = "clap")]
pub mod flags;
pub mod infer;
pub mod memory;
pub mod models;
pub mod observe;
pub mod probe;
pub mod profile;
pub mod protocol;
pub mod question;
pub mod replay;
pub mod schema;
pub mod settings;
pub mod stats;
pub mod testing;
pub mod verify;
pub mod vocab;

pub use cell::{CELL_VERSION, CellRequest, SlowSteps};
pub use events::{Event, Progress, Start};
#[cfg(feature = "clap")]
pub use flags::{ServeArgs, TokenArg};
pub use memory::{MemoryGrowth, memory_growth};
pub use models::ModelKind;
pub use observe::{Chunk, Measurements, Observed, Summary, summarize};
pub use probe::{DeviceReport, ProbeReport};
pub use protocol::{LEARNING_RATE, TimingRules};
pub use schema::*;
pub use settings::CellSettings;
pub use stats::Stats;
pub use vocab::{
    AutotuneLevel, DatasetName, DeviceKind, FallbackTarget, FloatKind, Geometry, LossScalingMode,
    Precision, Profile, TrainingLoop, UnknownName, Vocabulary,
};

/// The variable holding the token of remote servers (`cargo xtask serve --token`), for the
/// runners xtask starts and for `serve` itself.
pub const REMOTE_TOKEN_VAR: &str = "KILN_REMOTE_TOKEN";

/// The variable listing the remote devices the remote runner's probe reports
/// (`remote:ws://HOST:PORT[#INDEX]`, comma-separated).
pub const REMOTE_DEVICES_VAR: &str = "KILN_REMOTE_DEVICES";

/// The variable through which `cargo xtask serve --burn A --burn B` tells each of its servers
/// the others (a JSON list of [`ServedBurn`]), so that a client built against one Burn finds
/// the server of its Burn from any of them.
pub const REMOTE_OTHER_BURNS_VAR: &str = "KILN_REMOTE_OTHER_BURNS";

/// A Burn served beside another by the same `serve`, on its own port (Kiln's link on the next).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ServedBurn {
    /// The Burn version its server was built against.
    pub burn_version: String,
    /// The port of its Burn server.
    pub port: u16,
}

/// The remote token in use: `given` (`--token`), else `KILN_REMOTE_TOKEN`; an empty one is none.
pub fn remote_token(given: Option<String>) -> Option<String> {
    given
        .or_else(|| std::env::var(REMOTE_TOKEN_VAR).ok())
        .filter(|t| !t.is_empty())
}

/// Why a remote server must not listen on `bind` with `token`, if it must not: any address
/// that is not loopback needs a token (`cargo xtask serve` checks before it builds, the server
/// again before it listens).
pub fn remote_bind_refusal(bind: std::net::IpAddr, token: Option<&str>) -> Option<String> {
    (!bind.is_loopback() && token.is_none_or(str::is_empty)).then(|| {
        format!(
            "refusing to serve on {bind} without a token: anyone who reaches this port could \
             run work on these devices. Give --token T (or {REMOTE_TOKEN_VAR}), or serve on \
             127.0.0.1 (the default) and reach it through an SSH tunnel"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn an_open_address_needs_a_token_and_loopback_does_not() {
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        let why = remote_bind_refusal(any, None).unwrap();
        assert!(why.contains("0.0.0.0") && why.contains("--token"), "{why}");
        assert!(remote_bind_refusal(any, Some("t")).is_none());
        assert!(remote_bind_refusal("127.0.0.1".parse().unwrap(), None).is_none());
        assert!(remote_bind_refusal("::1".parse().unwrap(), None).is_none());
        assert!(remote_bind_refusal("192.168.1.4".parse().unwrap(), None).is_some());
    }
}
