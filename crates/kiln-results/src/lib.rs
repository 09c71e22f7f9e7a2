//! Kiln's results: the versioned record schema every runner writes, the reader that keeps every
//! valid line, summary statistics and the renderers (Markdown, CSV) derived from records.

pub mod read;
pub mod render;
pub mod schema;
pub mod stats;

pub use schema::*;
pub use stats::Stats;
