//! `cargo xtask verify`: does every backend compute the same training? Each runner trains the
//! same model from the same initial weights on the same batches for K steps and reports its
//! loss curve and final weights; this module holds what the runners and xtask share: the
//! request and record, the weights file (safetensors layout), and the comparison against the
//! reference backend with its documented thresholds.

mod record;

pub use record::*;
