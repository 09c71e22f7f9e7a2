//! Kiln's shared vocabulary without Burn: the versioned record schema every runner writes, the
//! probe report, run profiles, the reader that keeps every valid line, summary statistics and
//! the renderers (Markdown, CSV) derived from records.

pub mod probe;
pub mod profile;
pub mod read;
pub mod render;
pub mod schema;
pub mod stats;

pub use probe::{DeviceReport, ProbeReport};
pub use profile::{Profile, parse_duration};
pub use schema::*;
pub use stats::Stats;
