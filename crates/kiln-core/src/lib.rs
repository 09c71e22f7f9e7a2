//! Kiln's core: the models and the training protocol, written once for any Burn device, and the
//! runner binary logic that each thin backend crate wraps. Names no backend.

pub mod amp;
pub mod calibrate;
pub mod check;
pub mod cubecl;
pub mod data;
pub mod device;
pub mod explain;
pub mod gpu;
pub mod infer;
pub mod kiln_loop;
#[cfg(feature = "learner")]
pub mod learner;
pub mod models;
pub mod protocol;
mod replay;
pub mod runner;
pub mod sink;
pub mod trainer;
pub mod verify;
mod warmup;

pub use data::DeviceData;
pub use device::Binding;
pub use kiln_contract::{CellRequest, Precision, Record};
pub use models::{Classifier, ModelKind, Net};
pub use protocol::Protocol;
pub use runner::train_cell;
pub use trainer::Trainer;

/// The Burn version this build links (read from the building workspace's `Cargo.lock` by
/// `build.rs`: the workspace's pin, or an overlay's other Burn).
pub const BURN_VERSION: &str = env!("KILN_BURN_VERSION");

/// Errors of the core; each says what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("{0}")]
    Config(String),
    #[error("device error: {0}")]
    Device(String),
    #[error(transparent)]
    Data(#[from] kiln_data::DataError),
}
